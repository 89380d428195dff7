"""Text that bash evaluates as code: a deny rule is not escaped and an allow rule is not ridden.

Each payload below really runs ``rm`` in bash (the oracle runs it with a logging stub); for every
one the analysis must either list ``rm`` or call the command unknown, so that a deny rule on
``rm`` denies it (YOLO) and allow rules for every program it visibly runs do not allow it.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from fastgate import (
    ApprovalStore,
    Decision,
    PermissionConfig,
    PermissionMode,
    PermissionResolver,
    ToolKind,
    define_tool,
)
from fastgate.model.context import ExecutionContext
from fastgate.permissions.commands import analyze_command, program_name

BASH_TOOL = define_tool(
    "Bash",
    "run a command",
    {"type": "object", "properties": {"command": {"type": "string"}}},
    lambda args: None,
    kind=ToolKind.EXECUTE,
)
BASH = shutil.which("bash")
REAL = ("bash", "env", "find", "xargs", "base64", "true", "cat", "git")
CODE = "a[$(rm -rf x)]"  # a value whose arithmetic evaluation runs rm

# Every payload runs ``rm`` in bash 5. ``{bin}`` is the directory holding the stub ``rm``.
PAYLOADS: dict[str, str] = {
    "prompt expansion": "x='$(rm -rf x)'; echo ${x@P}",
    "prompt expansion, Gemini's case": 'echo "${var1=aa\\140 rm -rf x\\140}${var1@P}"',
    "trap": "trap 'rm -rf x' EXIT",
    "trap, decoded at run time": 'trap "$(echo cm0gLXJmIHg= | base64 -d)" EXIT',
    "trap, split at run time": "t='rm EXIT'; trap $t",
    "find, brace expansion": "find . -maxdepth 0 -exe{c..c} rm -rf x \\;",
    "find, variable option": "X=-exec; find . -maxdepth 0 $X rm -rf x \\;",
    "find, {} as the program": "find {bin} -name rm -exec {} -rf x \\;",
    "mapfile callback": "mapfile -C 'rm -rf x' -c 1 arr <<< a",
    "readarray callback": "readarray -tC 'rm -rf x' -c 1 arr <<< a",
    "arithmetic expansion": f"x='{CODE}'; echo $((x))",
    "arithmetic expansion with $": f"x='{CODE}'; echo $(( $x ))",
    "old arithmetic": f"x='{CODE}'; echo $[x]",
    "arithmetic command": f"x='{CODE}'; ((x))",
    "let": f"x='{CODE}'; let x",
    "test -v": f"x='{CODE}'; test -v \"$x\"",
    "[ -v ]": f"x='{CODE}'; [ -v \"$x\" ]",
    "[[ -eq ]]": f"x='{CODE}'; [[ x -eq 1 ]]",
    "[[ -v ]]": f"[[ -v '{CODE}' ]]",
    "declare -i": f"x='{CODE}'; declare -i y=x",
    "local -i in a nested shell": f"bash -c \"x='{CODE}'; local -i y=x\" 2>/dev/null; "
    f"x='{CODE}'; typeset -i y=x",
    "substring offset": f"x='{CODE}'; s=abc; echo ${{s:x}}",
    "array subscript": f"x='{CODE}'; echo ${{a[x]}}",
    "indirect expansion": f"x='{CODE}'; echo ${{!x}}",
    "printf -v with a subscript": f"printf -v '{CODE}' %s 1",
    "printf -v, name at run time": f"x='{CODE}'; printf -v \"$x\" %s 1",
    "read into a subscript": f"read '{CODE}' <<< 1",
    "unset a subscript": f"a=1; unset '{CODE}'",
    "nameref": f"declare -n r='{CODE}'; echo $r",
    "PS4 under xtrace": "PS4='$(rm -rf x)'; set -x; true",
    "PS4 through export": "export PS4='$(rm -rf x)'; set -x; true",
    "PS4 through read": "read -r PS4 <<< '$(rm -rf x)'; set -x; true",
    "exported function": "env 'BASH_FUNC_cat%%=() { rm -rf x; }' bash -c 'cat /dev/null'",
    "xargs -I as a program's name": "echo rm | xargs -I{} env {} -rf x",
    "xargs -I into a shell": "echo 'rm -rf x' | xargs -I{} bash -c {}",
    "compgen -C": "compgen -C 'rm -rf x' w",
    # git's configuration given in the environment: its file-system monitor is a command
    "git config in numbered variables": "git init -q r; GIT_CONFIG_COUNT=1 "
    "GIT_CONFIG_KEY_0=core.fsmonitor GIT_CONFIG_VALUE_0='rm -rf x; false' git -C r status",
    "git config parameters": "git init -q r; "
    "GIT_CONFIG_PARAMETERS=\"'core.fsmonitor'='rm -rf x; false'\" git -C r status",
    "git config through env": "git init -q r; env GIT_CONFIG_COUNT=1 "
    "GIT_CONFIG_KEY_0=core.fsmonitor GIT_CONFIG_VALUE_0='rm -rf x; false' git -C r status",
    "git config exported": "git init -q r; export GIT_CONFIG_COUNT=1 "
    "GIT_CONFIG_KEY_0=core.fsmonitor GIT_CONFIG_VALUE_0='rm -rf x; false'; git -C r status",
    "a global git config the command wrote": "git init -q r; "
    "echo '[core] fsmonitor = rm -rf x; false' > c; GIT_CONFIG_GLOBAL=$PWD/c git -C r status",
    "a home whose .gitconfig the command wrote": "git init -q r; "
    "echo '[core] fsmonitor = rm -rf x; false' > .gitconfig; HOME=$PWD git -C r status",
}
# Rules allowing every program the payloads visibly run.
VISIBLE = (
    "echo trap find mapfile readarray test [ [[ let declare typeset local printf read unset set "
    "true env xargs compgen base64 bash export git"
).split()
ALLOW_VISIBLE = tuple(f"Bash({p}:*)" for p in VISIBLE)


def _payload(name: str, bin_dir: Path) -> str:
    return PAYLOADS[name].replace("{bin}", str(bin_dir))


def decide(
    command: str,
    workspace: Path,
    allow: tuple[str, ...] = (),
    deny: tuple[str, ...] = (),
    mode: PermissionMode = PermissionMode.DEFAULT,
) -> Decision:
    resolver = PermissionResolver(PermissionConfig(allow=allow, deny=deny), mode, ApprovalStore())
    ctx = ExecutionContext(session_id="s", workspace_root=str(workspace))
    return resolver.decide(BASH_TOOL, {"command": command}, ctx).decision


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("evaluation")
    bin_dir = root / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "rm"
    stub.write_text('#!/bin/sh\necho rm >> "$ORACLE_LOG"\n')
    stub.chmod(0o755)
    for name in REAL:
        found = shutil.which(name)
        if found is not None:
            (bin_dir / name).symlink_to(found)
    work = root / "work"
    work.mkdir()
    return bin_dir, work


def _runs_rm(command: str, bin_dir: Path, work: Path) -> bool:
    assert BASH is not None
    log = work / f"log-{uuid.uuid4().hex}"
    log.write_text("")
    env = {"PATH": str(bin_dir), "ORACLE_LOG": str(log), "HOME": str(work), "CMD": command}
    subprocess.run(
        [BASH, "--norc", "--noprofile", "-c", 'eval "$CMD"'],
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=10,
        check=False,
    )
    ran = "rm" in log.read_text().split()
    log.unlink()
    return ran


@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_payload_really_runs_its_hidden_command(name: str, sandbox: tuple[Path, Path]) -> None:
    """The oracle: without it, a test below could pass on a payload that does nothing."""
    if BASH is None:
        pytest.skip("bash is not installed")
    bin_dir, work = sandbox
    assert _runs_rm(_payload(name, bin_dir), bin_dir, work), "payload did not run rm"


@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_analysis_sees_the_hidden_command_or_calls_it_unknown(name: str, tmp_path: Path) -> None:
    analysis = analyze_command(_payload(name, tmp_path))
    seen = {program_name(form[0]) for facts in analysis.commands for form in facts.forms}
    assert "rm" in seen or analysis.has_unknown, (seen, analysis)


@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_deny_rule_of_the_hidden_command_denies(name: str, tmp_path: Path) -> None:
    command = _payload(name, tmp_path)
    denied = decide(command, tmp_path, deny=("Bash(rm:*)",), mode=PermissionMode.YOLO)
    assert denied is Decision.DENY


@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_allow_rules_of_the_visible_programs_do_not_allow(name: str, tmp_path: Path) -> None:
    command = _payload(name, tmp_path)
    assert decide(command, tmp_path, allow=ALLOW_VISIBLE) is not Decision.ALLOW


@pytest.mark.parametrize(
    "command",
    [
        # every transformation and indirection, whether or not it runs code in this bash
        "echo ${x@E}",
        "echo ${x@A}",
        "echo ${x@Q}",
        "echo ${x@K}",
        "echo ${a[@]@P}",
        "echo ${!x}",
        "echo ${!x[1]}",
        'echo "${x@P}"',
        "cat <<EOF\n${x@P}\nEOF",
        # arithmetic on variables in every context
        "echo ${s:n:2}",
        "echo ${s:1:$n}",
        "echo ${a[$i]}",
        "echo ${a[i+1]}",
        "echo $((i+1))",
        'echo "$((i))"',
        "cat <<EOF\n$((i))\nEOF",
        "(( i++ ))",
        "while (( i < 3 )); do echo; done",
        "let i=1",
        "[[ $x -gt 1 ]]",
        "[[ 1 -lt y ]]",
        'if [[ -v "$x" ]]; then echo; fi',
        "[ -v 'a[i]' ]",
        "test -R $x",
        "declare -i n=1",
        "typeset -in n",
        "local -n r=x",
        "declare 'a[i]=1'",
        'export "$x"',
        'printf -v "$x" %s 1',
        'read "$x" <<< 1',
        'read -a "$x" <<< 1',
        "getopts ab 'a[i]'",
        "wait -p 'a[i]'",
        'unset "$x"',
        "mapfile -C f arr",
        'mapfile "$x" < /dev/null',
        # variables whose values are code, however they are set
        "PS4='$(id)' bash -xc true",
        "export PROMPT_COMMAND=id",
        "declare BASH_ENV=/tmp/x",
        "readonly PS4",
        "env GIT_SSH_COMMAND='id' git fetch",
        "sudo EDITOR=vim visudo",
        "LESSOPEN='|id %s' less f",
        # callbacks and readline
        "complete -C id x",
        "compgen -F f x",
        "bind -x '\"\\C-x\": id'",
        "fc -s",
        # placeholders a program fills in at run time
        "find . -exec {} \\;",
        "find . -execdir sh -c {} \\;",
        "echo a | xargs -i {}",
        "echo a | xargs --replace=R sh -c R",
        "echo a | xargs -IR R",
        # words known only at run time in find's expression
        "find . $OPTS",
        'find . -name "$n"',
        # trap actions known only at run time
        'trap "$x" EXIT',
        "trap $x",
    ],
)
def test_every_construct_of_the_class_is_unknown(command: str) -> None:
    analysis = analyze_command(command)
    assert analysis.error is None, analysis.error
    assert analysis.has_unknown, analysis
    assert analysis.why_unknown


@pytest.mark.parametrize(
    "command",
    [
        "echo ${x:-default}",
        "echo ${x:=1} ${x:+y} ${x:?unset}",
        "echo ${#x} ${x#a} ${x%%b} ${x/a/b} ${x^^}",
        "echo ${s:1:2} ${s: -1}",
        "echo ${a[@]} ${a[*]} ${a[0]} ${#a[@]} ${!a[@]} ${!prefix*}",
        "echo $((1 + 2)) $((0x10 * 3))",
        "(( 1 + 1 ))",
        "[[ -n $x && -f y ]]",
        "[[ $# -eq 0 ]]",
        "[[ 1 -lt 2 ]]",
        "[[ -v x ]]",
        "test -v x",
        "export A=1 B=$x",
        "declare -r x=1",
        "read -r line < f",
        "printf -v out %s 1",
        "unset x y",
        "mapfile -t lines < f",
        "trap 'echo bye' EXIT",
        "trap - EXIT",
        "trap '' INT",
        "trap -p",
        "find . -name '*.py' -exec grep -n x {} \\;",
        "echo a | xargs -I{} echo {}",
    ],
)
def test_plain_constructs_stay_known(command: str) -> None:
    analysis = analyze_command(command)
    assert analysis.error is None, analysis.error
    assert not analysis.has_unknown, analysis.why_unknown


def test_deny_reason_says_why_the_command_is_unknown(tmp_path: Path) -> None:
    resolver = PermissionResolver(
        PermissionConfig(deny=("Bash(rm:*)",)), PermissionMode.YOLO, ApprovalStore()
    )
    ctx = ExecutionContext(session_id="s", workspace_root=str(tmp_path))
    decided = resolver.decide(BASH_TOOL, {"command": "echo ${x@P}"}, ctx)
    assert decided.decision is Decision.DENY
    assert "@P" in decided.reason and "fail closed" in decided.reason


def test_trap_action_is_judged_as_a_script(tmp_path: Path) -> None:
    allow = ("Bash(trap:*)", "Bash(echo:*)")
    assert decide("trap 'echo bye' EXIT", tmp_path, allow=allow) is Decision.ALLOW
    assert decide("trap 'echo bye; id' EXIT", tmp_path, allow=allow) is Decision.ASK
    assert decide("trap 'rm x' EXIT", tmp_path, deny=("Bash(rm:*)",)) is Decision.DENY


# -- process substitutions as redirection targets ------------------------------------------------


def test_process_substitution_target_is_a_command_of_its_own(tmp_path: Path) -> None:
    allow = ("Bash(echo:*)", "Bash(tee:*)")
    assert decide("echo x > >(tee log)", tmp_path, allow=allow) is Decision.ALLOW
    assert decide("echo x 2> >(tee log)", tmp_path, allow=allow) is Decision.ALLOW
    assert decide("cat < <(echo x)", tmp_path, allow=("Bash(cat)", "Bash(echo:*)")) is (
        Decision.ALLOW
    )
    assert decide("echo x > >(rm log)", tmp_path, allow=allow) is Decision.ASK
    assert decide("echo x > >(rm log)", tmp_path, deny=("Bash(rm:*)",)) is Decision.DENY
    # a deny rule on something else does not refuse it as unreadable
    assert decide("echo x > >(tee log)", tmp_path, allow=allow, deny=("Bash(rm:*)",)) is (
        Decision.ALLOW
    )


# -- heredocs and here-strings -------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        "npm test <<EOF\nrun everything\nEOF",
        "npm test <<-EOF\n\trun everything\n\tEOF",
        "npm test <<'EOF'\nrun everything\nEOF",
        'npm test <<"EOF"\nrun everything\nEOF',
        "npm test <<\\EOF\nrun everything\nEOF",
        "npm test <<< 'run everything'",
        "npm test --watch <<< x",
        "npm test 2>/dev/null <<EOF\nx\nEOF",
    ],
)
@pytest.mark.parametrize("rule", ["Bash(npm test:*)", "Bash(npm test *)", "Bash(npm test)"])
def test_heredoc_is_data_for_its_program(command: str, rule: str, tmp_path: Path) -> None:
    # the program's own words decide (SPEC §5 round-3): the body is what it reads
    exact = rule == "Bash(npm test)" and "--watch" in command
    expected = Decision.ASK if exact else Decision.ALLOW
    assert decide(command, tmp_path, allow=(rule,)) is expected


def test_heredoc_body_substitutions_meet_deny_rules(tmp_path: Path) -> None:
    deny = ("Bash(rm:*)",)
    yolo = PermissionMode.YOLO
    assert decide("npm test <<EOF\n$(rm -rf x)\nEOF", tmp_path, deny=deny, mode=yolo) is (
        Decision.DENY
    )
    assert decide("npm test <<EOF\n`rm -rf x`\nEOF", tmp_path, deny=deny, mode=yolo) is (
        Decision.DENY
    )
    assert decide('npm test <<< "$(rm x)"', tmp_path, deny=deny, mode=yolo) is Decision.DENY
    # a quoted heredoc's body is data: no command in it
    assert decide("npm test <<'EOF'\n$(rm -rf x)\nEOF", tmp_path, deny=deny, mode=yolo) is (
        Decision.ALLOW
    )


@pytest.mark.parametrize(
    "command",
    [
        "GIT_DIR=/tmp/other git status",
        "TAR_OPTIONS='--to-command=sh' git status",
        "GCONV_PATH=. git status",
        "PYTHONWARNINGS=ignore::evil.Category git status",
        "MY_TOOL_OPTIONS=--run=x git status",
        "HOME=. git status",
        "XDG_CONFIG_HOME=. git status",
        "env SOMETHING=1 git status",
    ],
)
def test_an_assignment_not_known_harmless_is_not_allowed_by_the_programs_rule(
    command: str, tmp_path: Path
) -> None:
    # Too many variables change what a program runs or reads to list them: only the known
    # harmless ones may ride an allow rule.
    assert decide(command, tmp_path, allow=("Bash(git status:*)",)) is not Decision.ALLOW


@pytest.mark.parametrize(
    "command",
    [
        "LANG=C git status",
        "LC_ALL=C.UTF-8 git status",
        "TZ=UTC NO_COLOR=1 git status",
        "GIT_AUTHOR_NAME=bot GIT_COMMITTER_NAME=bot git status",
        "git status",
    ],
)
def test_a_harmless_assignment_keeps_the_programs_rule(command: str, tmp_path: Path) -> None:
    assert decide(command, tmp_path, allow=("Bash(git status:*)",)) is Decision.ALLOW
