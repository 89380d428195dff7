"""A hidden file cannot be read through another name planted in advance: a command links a file
of its own to a secret's name before the secret exists; the user writes the secret into that
name in place; the next call reads its own name. Each case has its control through
``LocalShell``."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from fastgate.sandbox import _planner
from tests.sandbox.confinement_kit import (
    bash,
    no_process_outlives_the_test,  # noqa: F401  (autouse)
    output,
    sandboxed,
    unconfined,
)

SECRET = "s3cr3t-" + "z" * 8
# Where the command keeps its own name for the file.
OWN_NAMES = [
    "notes.txt", "node_modules/pkg/notes", "src/__pycache__/notes", "a/b/c/notes", ".venv/n"
]  # fmt: skip
# The hidden name it makes a link of (a directory holding it made first).
HIDDEN_NAMES = [".env", "certs/server.key", ".ssh/id_ed25519"]


def plant(own: str, hidden: str) -> str:
    return (
        f"mkdir -p $(dirname {own}) $(dirname {hidden}) && touch {own} && ln {own} {hidden} "
        "&& echo planted"
    )


def a_repository(workspace: Path) -> Path:
    workspace.mkdir()
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    return workspace


def the_user_writes_in_place(workspace: Path, hidden: str) -> None:
    with (workspace / hidden).open("a") as file:
        file.write(f"TOKEN={SECRET}\n")


@pytest.mark.parametrize("hidden", HIDDEN_NAMES)
@pytest.mark.parametrize("own", OWN_NAMES)
async def test_a_hidden_file_cannot_be_read_through_a_planted_hard_link(
    tmp_path: Path, own: str, hidden: str
) -> None:
    workspace = a_repository(tmp_path / "ws")
    ex = sandboxed(workspace)
    planted = await bash(ex, plant(own, hidden))
    assert "planted" in output(planted), output(planted)
    the_user_writes_in_place(workspace, hidden)
    result = await bash(ex, f"cat {own}; cat {hidden}; echo read")
    assert "read" in output(result)
    assert SECRET not in output(result)


async def test_a_link_past_the_searchs_bound_is_found_by_its_inode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_planner, "WALK_BUDGET", 50)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    ex = sandboxed(workspace)
    flood = "mkdir z && for i in $(seq 1 100); do : > z/f$i; done && "
    assert "planted" in output(await bash(ex, flood + plant("z/zz/notes", ".env")))
    the_user_writes_in_place(workspace, ".env")
    result = await bash(ex, "cat z/zz/notes; echo read")
    assert "read" in output(result) and SECRET not in output(result)


async def test_the_control_reads_the_secret_through_its_link(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    ex = unconfined(workspace)
    assert "planted" in output(await bash(ex, plant("notes.txt", ".env")))
    the_user_writes_in_place(workspace, ".env")
    assert SECRET in output(await bash(ex, "cat notes.txt"))
