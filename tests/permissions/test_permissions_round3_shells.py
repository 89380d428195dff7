"""A shell reading its script from standard input or a descriptor, in any spelling, runs what
that descriptor holds: a heredoc or here-string is parsed and judged; anything else (a pipe, a
file, an inherited descriptor) is unknown. Each spelling is DENY under the deny rule of the
program it hides and never an ALLOW match of the visible one."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from fastgate import Decision
from fastgate.permissions.commands import analyze_command, program_name
from tests.permissions_round3_kit import ruling

DENY_RM = ("Bash(rm:*)",)
# Everything visible is allowed; only what runs inside the shell is not.
VISIBLE = (
    "Bash(sh:*)",
    "Bash(bash:*)",
    "Bash(dash:*)",
    "Bash(zsh:*)",
    "Bash(ksh:*)",
    "Bash(mksh:*)",
    "Bash(echo:*)",
    "Bash(printf:*)",
    "Bash(cat:*)",
    "Bash(env:*)",
    "Bash(nice:*)",
    "Bash(timeout:*)",
    "Bash(exec:*)",
    "Bash(busybox:*)",
    "Bash(source:*)",
    "Bash(.:*)",
)

HEREDOC_SPELLINGS = [
    "sh /dev/stdin <<< 'rm victim.txt'",
    "bash /dev/stdin <<'EOF'\nrm victim.txt\nEOF",
    "sh /dev/fd/0 <<< 'rm victim.txt'",
    "bash /proc/self/fd/0 <<< 'rm victim.txt'",
    "dash /proc/thread-self/fd/0 <<< 'rm victim.txt'",
    "sh /dev/fd/3 3<<< 'rm victim.txt'",
    "mksh /dev/fd/4 4<<EOF\nrm victim.txt\nEOF",
    "sh /dev/fd/1 1<<< 'rm victim.txt'",
    "/bin/sh /dev//stdin <<< 'rm victim.txt'",
    "sh /dev/./stdin <<< 'rm victim.txt'",
    "sh /proc/self/fd/../fd/0 <<< 'rm victim.txt'",
    "sh -s <<< 'rm victim.txt'",
    "bash -s arg1 arg2 <<< 'rm victim.txt'",
    "bash -xs -- arg <<< 'rm victim.txt'",
    "sh - <<< 'rm victim.txt'",
    "zsh -- /dev/stdin <<< 'rm victim.txt'",
    "env sh /dev/stdin <<< 'rm victim.txt'",
    "nice -n 5 bash /dev/fd/0 <<< 'rm victim.txt'",
    "timeout 5 ksh /dev/stdin <<< 'rm victim.txt'",
    "exec sh /dev/stdin <<< 'rm victim.txt'",
    "busybox sh /dev/stdin <<< 'rm victim.txt'",
    ". /dev/stdin <<< 'rm victim.txt'",
    "source /proc/self/fd/0 <<< 'rm victim.txt'",
    ". /dev/fd/3 3<<< 'rm victim.txt'",
    "bash --rcfile /dev/stdin -i <<< 'rm victim.txt'",
    "echo ok | sh /dev/stdin <<< 'rm victim.txt'",
    # an unquoted heredoc is expanded before the shell reads it: \$ becomes $
    "bash <<EOF\n\\$(rm victim.txt)\nEOF",
    "sh /dev/stdin <<EOF\n\\`rm victim.txt\\`\nEOF",
]

UNKNOWN_SPELLINGS = [
    "echo 'rm victim.txt' | bash /dev/fd/0",
    "echo 'rm victim.txt' | sh /proc/self/fd/0",
    "printf 'rm victim.txt' | sh /dev/stdin",
    "echo 'rm victim.txt' | bash -s foo",
    "echo 'rm victim.txt' | sh -",
    "echo 'rm victim.txt' | sh /proc/$$/fd/0",
    "sh /proc/$$/fd/0 <<< 'rm victim.txt'",
    "sh /proc/1/fd/0 <<< 'rm victim.txt'",
    "sh /dev/fd/3 3<script.sh",
    "sh /dev/fd/3",
    "sh /dev/fd/4 4<&0 <<< 'rm victim.txt'",
    "sh /dev/stdin <<< 'ls' 0<&3",  # the last redirection of a descriptor wins
    "sh /dev/fd/10 {fd}<<< 'rm victim.txt'",
    "sh /dev/tty",
    "cat list | xargs sh /dev/stdin",
    "{ sh /dev/stdin; } <<< 'rm victim.txt'",
    'sh /dev/stdin <<< "$CMD"',
    "sh <<EOF\n$CMD\nEOF",
    "echo rm victim.txt | bash --rcfile /dev/stdin -i",
]


@pytest.mark.parametrize("command", HEREDOC_SPELLINGS)
def test_a_script_read_from_a_heredoc_meets_the_deny_rule(command: str, tmp_path: Path) -> None:
    decided = ruling(command, tmp_path, deny=DENY_RM)
    assert decided.decision is Decision.DENY
    assert decided.matched_rule == "Bash(rm:*)"  # the hidden rm itself was seen
    assert ruling(command, tmp_path, allow=VISIBLE).decision is Decision.ASK


@pytest.mark.parametrize("command", UNKNOWN_SPELLINGS)
def test_a_script_from_anything_else_is_unknown(command: str, tmp_path: Path) -> None:
    assert ruling(command, tmp_path, deny=DENY_RM).decision is Decision.DENY
    assert ruling(command, tmp_path, allow=VISIBLE).decision is Decision.ASK
    assert analyze_command(command).has_unknown


def test_a_script_read_from_a_heredoc_is_judged_like_any_other(tmp_path: Path) -> None:
    allow = (*VISIBLE, "Bash(ls)", "Bash(npm test)")
    for command in (
        "sh /dev/stdin <<< 'ls'",
        "bash /dev/fd/3 3<<'EOF'\nls\nnpm test\nEOF",
        "bash -s <<< 'npm test'",
        "echo x | sh /dev/stdin <<< 'ls'",  # the here-string replaces the pipe
    ):
        assert ruling(command, tmp_path, allow=allow).decision is Decision.ALLOW, command


def test_a_script_file_is_an_ordinary_program(tmp_path: Path) -> None:
    for command in ("sh build.sh", "bash ./scripts/dev/run.sh", "sh - build.sh"):
        assert not analyze_command(command).has_unknown, command
        assert ruling(command, tmp_path, allow=(f"Bash({command})",)).decision is Decision.ALLOW


BASH = shutil.which("bash")


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
@pytest.mark.parametrize("command", HEREDOC_SPELLINGS)
def test_bash_really_runs_the_hidden_program(command: str, tmp_path: Path) -> None:
    """The spellings are real: bash runs the rm each one hides (a stub that logs), and the
    analysis lists it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "log"
    log.write_text("")
    stub = bin_dir / "rm"
    stub.write_text('#!/bin/sh\necho rm >> "$LOG"\n')
    stub.chmod(0o755)
    for name in (
        "sh",
        "bash",
        "dash",
        "env",
        "nice",
        "timeout",
        "echo",
        "mksh",
        "zsh",
        "ksh",
        "busybox",
    ):
        found = shutil.which(name)
        if found is not None:
            (bin_dir / name).symlink_to(found)
    missing = {"busybox", "mksh", "zsh", "ksh"} & set(command.split()[:3])
    if any(shutil.which(name) is None for name in missing):
        pytest.skip(f"{sorted(missing)} not installed")
    assert BASH is not None
    subprocess.run(
        [BASH, "--norc", "--noprofile", "-c", command.replace("/bin/sh", "sh")],
        cwd=tmp_path,
        env={"PATH": str(bin_dir), "LOG": str(log), "HOME": str(tmp_path)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=10,
        check=False,
    )
    assert "rm" in log.read_text().split(), command
    seen = {program_name(f[0]) for c in analyze_command(command).commands for f in c.forms}
    assert "rm" in seen
