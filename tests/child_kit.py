"""Code that might hang run in a child interpreter with a time limit, so that a regression
fails the test instead of hanging the suite (the child is killed at the limit)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def run_python(code: str, *argv: str, timeout: float, stalled: str) -> str:
    """The stdout of ``python -c code argv...``; the test fails with ``stalled`` if it runs
    past ``timeout`` seconds, and with its stderr if it exits non-zero."""
    try:
        child = subprocess.run(
            [sys.executable, "-c", code, *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(os.environ),
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{stalled} (killed after {timeout:g} s)")
    assert child.returncode == 0, child.stderr[-3000:]
    return child.stdout
