"""Code run in a child interpreter with a time limit: code that might hang, so that a
regression fails the test instead of hanging the suite (the child is killed at the limit), and
scenarios that change what the whole process has (its limit on open files, say)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
_RESULT = "RESULT "


def run_python(code: str, *argv: str, timeout: float, stalled: str) -> str:
    """The stdout of ``python -c code argv...``; the test fails with ``stalled`` if it runs
    past ``timeout`` seconds, and with its stderr if it exits non-zero."""
    child = _run_child(["-c", code, *argv], timeout, stalled)
    assert child.returncode == 0, child.stderr[-3000:]
    return child.stdout


def run_scenario(module: str, *argv: str, timeout: float) -> dict[str, Any]:
    """What ``python -m module argv...`` (run from the repository's root) reported with
    ``report``; the test fails if it runs past ``timeout`` seconds, exits non-zero or reports
    nothing."""
    stalled = f"the scenario {module} {argv} stalled"
    child = _run_child(["-m", module, *argv], timeout, stalled, cwd=ROOT)
    lines = [line for line in child.stdout.splitlines() if line.startswith(_RESULT)]
    assert child.returncode == 0 and lines, child.stderr[-4000:]
    found: dict[str, Any] = json.loads(lines[-1][len(_RESULT) :])
    return found


def _run_child(
    args: list[str], timeout: float, stalled: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [sys.executable, *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(os.environ),
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{stalled} (killed after {timeout:g} s)")


def report(found: dict[str, Any]) -> None:
    """A scenario's answer to ``run_scenario`` (in the child)."""
    print(_RESULT + json.dumps(found), flush=True)
