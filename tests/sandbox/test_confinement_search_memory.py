"""What the sandbox's search found outlives the process that found it: a command that fills a
root past the search's bound does not uncover a secret or a nested repository for the next
process (a restarted server, the next ``fastgate call``). What is kept on disk only adds to what
is hidden and protected, and a command cannot make the sandbox forget it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fastgate.sandbox import _memory, _planner
from tests.sandbox.confinement_kit import (
    bash,
    no_process_outlives_the_test,  # noqa: F401  (autouse)
    output,
    sandboxed,
    unconfined,
)
from tests.sandbox.test_confinement_git import SECRET, repository

BUDGET = 200  # the same as 20,000, a hundred times faster
FLOOD = f"for i in $(seq 1 {2 * BUDGET}); do : > flood-$i; done"
ATTACK = "cat certs/a.pem; echo evil > vendor/lib/.git/hooks/pre-commit; echo done"


def a_new_process() -> None:
    """What a restarted server, or the next ``fastgate call``, knows of earlier searches."""
    _planner._LAST_FOUND.clear()
    _planner._WALKED.clear()
    _planner._LAYOUTS.clear()
    _planner._CUT_SHORT_TOLD.clear()


@pytest.fixture(name="workspace")
def workspace_fixture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(_planner, "WALK_BUDGET", BUDGET)
    workspace = tmp_path / "ws"
    (workspace / "certs").mkdir(parents=True)
    (workspace / "certs" / "a.pem").write_text(SECRET)
    repository(workspace / "vendor" / "lib")
    return workspace


def planted(workspace: Path) -> bool:
    return (workspace / "vendor" / "lib" / ".git" / "hooks" / "pre-commit").exists()


async def test_a_flooded_root_keeps_its_protections_across_processes(workspace: Path) -> None:
    assert SECRET not in output(await bash(sandboxed(workspace), "cat certs/a.pem"))
    a_new_process()
    await bash(sandboxed(workspace), FLOOD)
    a_new_process()
    result = await bash(sandboxed(workspace), ATTACK)
    assert "done" in output(result)
    assert SECRET not in output(result) and not planted(workspace), output(result)


async def test_what_is_kept_cannot_be_removed_by_a_command(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kept under a writable root (a home directory the command may write), it is read-only."""
    monkeypatch.setattr(_memory, "_DIRECTORY", str(workspace / ".cache" / "fastgate" / "sandbox"))
    await bash(sandboxed(workspace), "true")
    forget = "rm -rf .cache/fastgate; mv .cache .old; " + FLOOD
    await bash(sandboxed(workspace), forget)
    assert list((workspace / ".cache" / "fastgate" / "sandbox").iterdir())
    a_new_process()
    result = await bash(sandboxed(workspace), ATTACK)
    assert SECRET not in output(result) and not planted(workspace), output(result)


def rewrite_kept(directory: Path, kept: str, workspace: Path) -> None:
    """Replace what is kept on disk by garbage, by another root's search, or by nothing."""
    nothing: dict[str, list[str]] = {"hidden": [], "protected": [], "git_dirs": [], "git_files": []}
    for path in directory.iterdir():
        if kept == "garbage":
            path.write_text("{not json")
        else:
            root = "/elsewhere" if kept == "another root" else str(workspace)
            path.write_text(json.dumps({"root": root, **nothing}))


@pytest.mark.parametrize("kept", ["garbage", "another root", "nothing"])
async def test_what_is_kept_never_uncovers_anything(
    workspace: Path, searches_kept_apart: Path, kept: str
) -> None:
    await bash(sandboxed(workspace), "true")
    rewrite_kept(searches_kept_apart, kept, workspace)
    a_new_process()
    # Not flooded: the search sees the whole root, whatever was kept.
    result = await bash(sandboxed(workspace), ATTACK)
    assert SECRET not in output(result) and not planted(workspace), output(result)


async def test_the_control_uncovers_them(workspace: Path) -> None:
    await bash(unconfined(workspace), FLOOD)
    result = await bash(unconfined(workspace), ATTACK)
    assert SECRET in output(result) and planted(workspace)
