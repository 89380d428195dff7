"""``examples/agent_server.py`` runs offline, as a user would run it, and does what it says."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("openai", reason="needs the test extra (openai)")
pytest.importorskip("re2", reason="needs the test extra (the builtin tools' google-re2)")

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "agent_server.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OPENAI_API_KEY": ""}  # nothing may reach a real service
    proc = subprocess.Popen(
        [sys.executable, str(EXAMPLE), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode is not None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_the_example_server_runs_offline_and_policy_holds() -> None:
    done = _run("--sessions", "3", "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    sessions = {s["session"]: s for s in summary["sessions"]}
    assert set(sessions) == {"alice", "bob", "carol"}
    for name, s in sessions.items():
        assert s["calls"] == 7
        assert s["answer"] == f"Done with src/{name}.py."
        assert s["approvals_asked"] == [f"edit src/{name}.py"]  # only the edit was asked
        outcomes = s["outcomes"]
        assert outcomes["PERMISSION_DENIED"] == 2  # the secrets and the README
        assert outcomes["INVALID_ARGS"] == 1  # arguments that were not JSON
        editor = name in ("alice", "bob")
        assert outcomes["ok"] == (4 if editor else 3)
        assert outcomes.get("USER_REJECTED", 0) == (0 if editor else 1)
    assert summary["edited_files"] == ["src/alice.py", "src/bob.py"]
    assert summary["readme_unchanged"] is True


def test_the_example_prints_a_summary() -> None:
    done = _run("--sessions", "2")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any(line.strip().startswith("alice: 7 calls") for line in lines)
    assert "edited: src/alice.py, src/bob.py" in lines
    assert "README untouched: True" in lines
