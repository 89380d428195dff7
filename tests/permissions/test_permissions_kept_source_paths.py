"""Found from inside: ``cp --parents`` and ``rsync -R``/``--relative`` put each source under
the destination by its whole name, not its last one (``rsync -R /tmp/e/./.claude/settings.json
.`` writes ``./.claude/settings.json``), and ``cpio -p`` copies the files its input names; the
analysis took only the last name, so a protected path written that way was not seen. Each
spelling failed before the fix; the controls write no protected path."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.permissions_round3_kit import YOLO, asks_as_guarded, ruling

DENY_OTHER = ("Bash(rm:*)",)  # names nothing these lines run


@pytest.fixture(name="workspace")
def workspace_fixture(tmp_path: Path) -> Path:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "sub").mkdir()
    return tmp_path


@pytest.mark.parametrize(
    "command",
    [
        "rsync --relative /tmp/e/./.claude/settings.json .",
        "rsync --relative /tmp/e/./.fastgate/x .",
        "rsync --relative /tmp/e/./.claude/x sub/..",
        "cd /tmp/e && cp --parents .claude/settings.json {root}",
        "cd /tmp/e && cp --parents .fastgate/settings.json {root}/",
        "cp --parents ../e/.claude/settings.json sub",
        "find /tmp/e | cpio -pdm .",
        "cpio --pass-through -d . < list",
    ],
)
def test_a_source_kept_by_its_whole_name_is_checked(command: str, workspace: Path) -> None:
    decided = ruling(command.format(root=workspace), workspace, mode=YOLO, deny=DENY_OTHER)
    assert asks_as_guarded(decided), decided


@pytest.mark.parametrize(
    "command",
    ["cp --parents src/a.py dst", "rsync -aR src/./a.py dst", "cp /tmp/e/a.py ."],
)
def test_ordinary_copies_are_judged_as_before(command: str, workspace: Path) -> None:
    decided = ruling(command, workspace, mode=YOLO, deny=DENY_OTHER)
    assert not asks_as_guarded(decided), decided
