"""A wrapper's options are read in every spelling its getopt accepts: long options with ``=`` or
the next word, unambiguous prefixes, short options clustered, options before ``NAME=VALUE``.
An option we cannot follow (``env -S``) makes the command unknown: DENY under a deny rule,
never an ALLOW match."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from fastgate import Decision
from fastgate.permissions.commands import analyze_command
from tests.permissions_round3_kit import YOLO, asks_as_guarded, ruling

DENY_RM = ("Bash(rm:*)",)
VISIBLE = ("Bash(env:*)", "Bash(timeout:*)", "Bash(nice:*)", "Bash(sudo:*)", "Bash(xargs:*)")

SPLIT_STRINGS = [
    "env --split-string='rm victim.txt'",
    "env --split-string 'rm victim.txt'",
    "env --split-s='rm victim.txt'",
    "env --split='rm victim.txt'",
    "env --sp 'rm victim.txt'",
    "env -i --split-string='rm victim.txt'",
    "env --ignore-environment --split-string='rm victim.txt'",
    "env -u HOME --split-str='rm victim.txt'",
    "env -S'rm victim.txt'",
    "env -S 'rm victim.txt'",
    "env -iS'rm victim.txt'",
    "env -u X -S'rm victim.txt'",
    "env -vS 'rm victim.txt'",
    "env -0iS 'rm victim.txt'",
    "env -C /tmp -S 'rm victim.txt'",
    "env --chdir=/tmp --split-string='rm victim.txt'",
    "env --i -S 'rm victim.txt'",  # ambiguous prefix: env refuses it, we cannot follow it
    "ionice --cl 3 rm victim.txt",  # ambiguous too (--class, --classdata)
    "timeout 5 env --split-s='rm victim.txt'",
    "sudo env --split-string='rm victim.txt'",
]


@pytest.mark.parametrize("command", SPLIT_STRINGS)
def test_every_spelling_of_split_string_is_unknown(command: str, tmp_path: Path) -> None:
    assert ruling(command, tmp_path, deny=DENY_RM).decision is Decision.DENY
    assert ruling(command, tmp_path, allow=VISIBLE).decision is Decision.ASK
    assert analyze_command(command).has_unknown


FOLLOWED = [
    "timeout --signal=KILL 5 rm victim.txt",
    "timeout --sig KILL 5 rm victim.txt",
    "timeout --kill-a=1 5 rm victim.txt",
    "timeout -k1 -sKILL 5 rm victim.txt",
    "timeout --preserve --foreground 5 rm victim.txt",
    "nice --adjustment=5 rm victim.txt",
    "nice --adj 5 rm victim.txt",
    "nice -n5 rm victim.txt",
    "nice -5 rm victim.txt",
    "stdbuf --output=L rm victim.txt",
    "stdbuf --out L -eL rm victim.txt",
    "ionice --class 3 rm victim.txt",
    "ionice --classd=4 --class=2 rm victim.txt",
    "setsid --fork --wait rm victim.txt",
    "sudo --user=root rm victim.txt",
    "sudo --us root rm victim.txt",
    "sudo -Eu root -- rm victim.txt",
    "sudo --preserve-env --non-int rm victim.txt",
    "xargs --max-args=1 rm",
    "xargs --max-a 1 --null rm",
    "xargs -0 -n1 rm",
    "env --default-signal rm victim.txt",  # an optional argument takes no next word
    "env --unset=HOME rm victim.txt",
    "env --uns HOME rm victim.txt",
    "env -uHOME -i rm victim.txt",
    "env -i A=1 rm victim.txt",
    "env -- rm victim.txt",
    "flock --timeout 5 /tmp/lock rm victim.txt",
    "su --comm='rm victim.txt' bob",
    "su --command 'rm victim.txt' bob",
    "su -lc 'rm victim.txt' bob",
    "flock /tmp/lock --command 'rm victim.txt'",
    "flock --comm='rm victim.txt' /tmp/lock",
    "script -qc 'rm victim.txt' /dev/null",
    "time -p rm victim.txt",
    # more programs that run a command
    "taskset 0x1 rm victim.txt",
    "taskset --cpu-list 0-3 rm victim.txt",
    "chrt --idle 0 rm victim.txt",
    "setpriv --nnp rm victim.txt",
    "prlimit --nofile=10 rm victim.txt",
    "pkexec --user root rm victim.txt",
    "eatmydata rm victim.txt",
    "tini -- rm victim.txt",
    "dumb-init rm victim.txt",
    "sg wheel 'rm victim.txt'",
    "sg wheel -c 'rm victim.txt'",
]


@pytest.mark.parametrize("command", FOLLOWED)
def test_long_options_and_prefixes_are_followed(command: str, tmp_path: Path) -> None:
    decided = ruling(command, tmp_path, deny=DENY_RM)
    assert decided.decision is Decision.DENY
    assert decided.matched_rule == "Bash(rm:*)"  # rm itself was found, not a fail-closed refusal
    assert ruling(command, tmp_path, allow=("Bash(npm test:*)",)).decision is Decision.ASK


@pytest.mark.parametrize(
    "command",
    [
        "timeout --signal=KILL 5 npm test",
        "timeout --sig KILL 5 npm test",
        "nice --adj=5 npm test",
        "stdbuf --out=L npm test",
        "setsid --fork npm test",
    ],
)
def test_transparent_wrappers_keep_an_allow_in_every_spelling(command: str, tmp_path: Path) -> None:
    assert ruling(command, tmp_path, allow=("Bash(npm test:*)",)).decision is Decision.ALLOW


def test_an_option_is_not_an_assignment(tmp_path: Path) -> None:
    # ``-S=x`` and ``--split-string=x`` hold an ``=`` but are options: env reads them first
    for command in ("env -S=rm victim.txt", "env --split-string=rm victim.txt"):
        assert ruling(command, tmp_path, deny=DENY_RM).decision is Decision.DENY, command


def test_env_chdir_moves_the_command(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    for command in (
        "env -C .git cat config",
        "env --chdir .git cat config",
        "env --ch=.git cat config",
    ):
        assert asks_as_guarded(ruling(command, tmp_path, mode=YOLO)), command


ENV = shutil.which("env")


@pytest.mark.skipif(ENV is None, reason="env is not installed")
@pytest.mark.parametrize(
    "args",
    [
        ["--split-string=RM victim.txt"],
        ["--split-s=RM victim.txt"],
        ["-i", "--split-string=RM victim.txt"],
        ["--sp", "RM victim.txt"],
        ["-iSRM victim.txt"],
        ["-u", "X", "-SRM victim.txt"],
    ],
)
def test_gnu_env_really_splits_these_spellings(args: list[str], tmp_path: Path) -> None:
    """The spellings are GNU env's own: each really runs the program in the string."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "log"
    stub = bin_dir / "rm"
    stub.write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    stub.chmod(0o755)
    assert ENV is not None
    probe = subprocess.run([ENV, "--version"], capture_output=True, text=True, check=False)
    if "GNU" not in probe.stdout:
        pytest.skip("not GNU env")
    subprocess.run(
        [ENV, *(a.replace("RM", str(stub)) for a in args)],
        cwd=tmp_path,
        env={"PATH": str(bin_dir)},
        capture_output=True,
        timeout=10,
        check=False,
    )
    assert log.read_text().strip() == "victim.txt"
