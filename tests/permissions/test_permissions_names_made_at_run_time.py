"""Found from inside: ``uudecode`` writes the file its input's ``begin`` line names, and
``rename 's/x/y/' FILES``, ``mmv``, ``vidir`` give files names made by an expression, a pattern
or an editor; none of those names is a word of the command, so a protected one was not seen.
Each now writes "a path known only when it runs": at least ASK in every mode. Each spelling
failed before the fix; the controls name what they write."""

from __future__ import annotations

from pathlib import Path

import pytest

from fastgate import Decision
from tests.permissions_round3_kit import YOLO, asks_as_guarded, ruling

DENY_OTHER = ("Bash(rm:*)",)  # names nothing these lines run


@pytest.mark.parametrize(
    "command",
    [
        "uudecode a.uue",
        "uudecode < a.uue",
        "rename 's/^x$/.mc/;s/$/p.json/' x",
        "rename 's/a/b/' sub/*.txt",
        "prename 's/a/b/' *",
        "perl-rename 'y/a-z/A-Z/' f",
        "file-rename 's/x/.mcp.j/' x",
        "mmv 'a*' 'b#1'",
        "vidir",
        "qmv -f do .",
    ],
)
def test_a_name_made_when_it_runs_is_at_least_ask(command: str, tmp_path: Path) -> None:
    decided = ruling(command, tmp_path, mode=YOLO, deny=DENY_OTHER)
    assert asks_as_guarded(decided), decided


@pytest.mark.parametrize("command", ["uudecode -o out.bin a.uue", "uudecode -o /dev/stdout a"])
def test_a_named_output_is_judged_as_before(command: str, tmp_path: Path) -> None:
    decided = ruling(command, tmp_path, mode=YOLO, deny=DENY_OTHER)
    assert decided.decision is Decision.ALLOW, decided
