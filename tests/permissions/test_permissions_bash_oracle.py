"""Differential test against real bash: every program bash runs must be one the analysis saw.

Commands are generated from a grammar of operators, quoting, substitutions, wrappers and nested
shells over stub programs that only log their own name; bash runs them in a scratch directory
with a PATH holding nothing but the stubs and a few real wrappers. If bash ever runs a program
the analysis did not list (for a command it parsed and fully understood), a deny rule on that
program could be escaped.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastgate.permissions.commands import analyze_command, program_name

BASH = shutil.which("bash")
STUBS = ("a", "b", "rm", "push")
REAL = ("bash", "sh", "env", "timeout", "nice", "nohup", "xargs", "true", "find")
# Spellings include brace expansions (``{rm,}``), shells reading ``/dev/stdin``, ``/dev/fd/N``
# or ``/proc/self/fd/N`` from a here-string, and directory changes before a command.

pytestmark = pytest.mark.skipif(BASH is None, reason="bash is not installed")


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("oracle")
    bin_dir = root / "bin"
    bin_dir.mkdir()
    for name in STUBS:
        stub = bin_dir / name
        stub.write_text('#!/bin/sh\necho "${0##*/}" >> "$ORACLE_LOG"\n')
        stub.chmod(0o755)
    for name in REAL:
        found = shutil.which(name)
        if found is not None:
            (bin_dir / name).symlink_to(found)
    work = root / "work"
    work.mkdir()
    return bin_dir, work


def _program(draw: st.DrawFn) -> str:
    name = draw(st.sampled_from(STUBS))
    spelling = draw(st.integers(0, 9))
    if spelling == 1:
        return f"'{name}'"
    if spelling == 2:
        return "\\" + name
    if spelling == 3:
        return f'"{name[0]}"{name[1:]}'
    if spelling == 4:
        return name[0] + "''" + name[1:]
    if spelling == 5:
        return "$'" + "".join(f"\\x{ord(ch):02x}" for ch in name) + "'"
    if spelling == 6:
        return name[0] + "\\\n" + name[1:]
    if spelling == 7:  # brace expansion: bash expands it before it finds the program
        return "{" + name + ",}"
    if spelling == 8:
        return name[0] + "{" + name[1:] + ",}"
    if spelling == 9:
        return "{" + name[0] + ",}" + name[1:]
    return name


@st.composite
def simple(draw: st.DrawFn, depth: int = 0) -> str:
    words = [_program(draw), *draw(st.lists(st.sampled_from(["x", "-f", "'y z'"]), max_size=2))]
    command = " ".join(words)
    if draw(st.booleans()):
        command = draw(st.sampled_from(["X=1 ", "X=$(a) ", "Y='b c' "])) + command
    wrapper = draw(st.integers(0, 32))
    if wrapper == 1:
        command = "env X=1 " + command
    elif wrapper == 2:
        command = "timeout 5 " + command
    elif wrapper == 3:
        command = "nice -n 1 " + command
    elif wrapper == 4:
        command = "xargs " + command + " < /dev/null"
    elif wrapper == 5 and depth < 2:
        command = "bash -c " + shlex.quote(draw(script(depth + 1)))
    elif wrapper == 6 and depth < 2:
        command = "eval " + shlex.quote(draw(script(depth + 1)))
    elif wrapper == 7 and depth < 2:
        command = f"x $({draw(script(depth + 1))})".replace(
            "x ", draw(st.sampled_from(STUBS)) + " "
        )
    elif wrapper == 8 and depth < 2:
        command = command + " `" + draw(simple(depth + 1)).replace("`", "") + "`"
    elif wrapper == 9 and depth < 2:
        command = "bash <<'EOF'\n" + draw(script(depth + 1)) + "\nEOF\n"
    elif wrapper == 10:
        command = "{ " + command + "; }"
    elif wrapper == 11:
        command = "( " + command + " )"
    elif wrapper == 12:
        command = "if true; then " + command + "; fi"
    elif wrapper == 13:
        command = "for i in 1; do " + command + "; done"
    elif wrapper == 14:
        command = "! " + command
    elif wrapper == 15 and depth < 2:
        command = f'true "$({draw(script(depth + 1))})"'
    elif wrapper == 16 and depth < 2:
        command = f"true <({draw(script(depth + 1))})"
    elif wrapper == 17 and depth < 2:
        command = f"true ${{X:-$({draw(script(depth + 1))})}}"
    elif wrapper == 18 and depth < 2:
        command = f"true <<EOF\n$({draw(script(depth + 1))})\nEOF\n"
    elif wrapper == 19 and depth < 2:
        command = f"true $(( {draw(simple(depth + 1))} ) ; {command})"
    elif wrapper == 20 and depth < 2:
        command = "bash <<< " + shlex.quote(draw(script(depth + 1)))
    elif wrapper == 21:
        command = draw(st.sampled_from(["time ", "time -p ", "command ", "nohup "])) + command
    elif wrapper == 22 and depth < 2:
        command = f"[[ -n $({draw(script(depth + 1))}) ]]"
    elif wrapper == 23 and depth < 2:
        command = f"(( X = $({draw(simple(depth + 1))}) ))"
    elif wrapper == 24:
        command = draw(st.sampled_from([">/dev/null ", "2>&1 ", "</dev/null "])) + command
    elif wrapper == 25:
        command = "find . -maxdepth 0 -exec " + command + " \\;"
    elif wrapper == 26 and depth < 2:
        delimiter = draw(st.sampled_from(['"EOF"', "\\EOF", "-EOF"]))
        command = f"true <<{delimiter}\n$({draw(simple(depth + 1))})\nEOF\n"
    elif wrapper == 27:
        command = "timeout -s KILL 5 env -u X " + command
    elif wrapper == 28:
        command += draw(st.sampled_from([" >out", " 2>err", " &>both", " >>app", " 3>fd", " >|f"]))
    elif wrapper == 29 and depth < 2:  # a shell reading its script through a path
        path = draw(st.sampled_from(["/dev/stdin", "/dev/fd/0", "/proc/self/fd/0", "-s", "-"]))
        command = f"sh {path} <<< " + shlex.quote(draw(script(depth + 1)))
    elif wrapper == 30 and depth < 2:
        command = "bash /dev/fd/3 3<<< " + shlex.quote(draw(script(depth + 1)))
    elif wrapper == 31 and depth < 2:
        command = ". /dev/stdin <<< " + shlex.quote(draw(script(depth + 1)))
    elif wrapper == 32:
        command = draw(st.sampled_from(["cd . && ", "cd .; ", "pushd . >/dev/null; "])) + command
    redirect = draw(st.sampled_from(["", " 2>/dev/null", " >/dev/null 2>&1", " # c"]))
    return command + (redirect if not command.endswith("\n") else "")


@st.composite
def script(draw: st.DrawFn, depth: int = 0) -> str:
    parts = draw(st.lists(simple(depth), min_size=1, max_size=3))
    out = parts[0]
    for part in parts[1:]:
        op = draw(st.sampled_from([" ; ", " && ", " || ", " | ", "\n", " & ", " |& "]))
        if out.endswith("\n") and op.strip() in ("", ";"):
            op = ""
        out += op + part
    return out


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(script())
def test_bash_runs_only_programs_the_analysis_saw(sandbox: tuple[Path, Path], command: str) -> None:
    bin_dir, work = sandbox
    analysis = analyze_command(command)
    if analysis.has_unknown:
        return  # never allowed, and denied when a deny rule exists
    seen = {program_name(form[0]) for facts in analysis.commands for form in facts.forms}
    # A directory and a log of its own: a process substitution of an earlier example, which
    # ``wait`` does not wait for, may still be writing into the last one.
    here = work / uuid.uuid4().hex
    here.mkdir()
    log = work / f"log-{here.name}"
    log.write_text("")
    env = {"PATH": str(bin_dir), "ORACLE_LOG": str(log), "HOME": str(here), "ORACLE_CMD": command}
    assert BASH is not None
    subprocess.run(
        # eval parses the text exactly as a script; ``wait`` lets background jobs log too
        [BASH, "--norc", "--noprofile", "-c", 'eval "$ORACLE_CMD"; wait'],
        cwd=here,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=10,
        check=False,
    )
    ran = set(log.read_text().split())
    assert ran <= seen, f"bash ran {sorted(ran - seen)} unseen in {command!r}"
    created = sorted(p.name for p in here.iterdir())
    if all(facts.allowable for facts in analysis.commands):
        assert created == [], f"{command!r} wrote {created} with no redirection seen"


def test_oracle_detects_a_missed_program(sandbox: tuple[Path, Path]) -> None:
    """The harness itself can fail: bash does run what an analysis would have to list."""
    bin_dir, work = sandbox
    log = work / "log"
    log.write_text("")
    env = {"PATH": str(bin_dir), "ORACLE_LOG": str(log), "HOME": str(work)}
    assert BASH is not None
    subprocess.run([BASH, "-c", "a; \\rm x"], cwd=work, env=env, check=False, timeout=10)
    assert set(log.read_text().split()) == {"a", "rm"}
    assert os.path.exists(bin_dir / "rm")
