"""``bash`` through the pipeline (SPEC §16): results, limits, the workspace, the environment,
rules, and a server's own shell seam."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fastgate import ErrorCode, ExecutionContext, PermissionConfig, PermissionMode
from fastgate.builtin import LocalShell, Shell, ShellResult
from fastgate.model.cancel import CancelToken
from tests.builtin_kit import builtin_executor, call, failure_code, gone, text
from tests.pipeline_kit import assert_idle


def bash_executor(workspace: Path, **options: Any) -> Any:
    options.setdefault("mode", PermissionMode.YOLO)
    return builtin_executor(workspace, **options)


class RecordingShell:
    """A server's own shell seam: records every command and answers from a script."""

    def __init__(self, answer: ShellResult | None = None) -> None:
        self.calls: list[dict[str, Any]] = []
        self.answer = answer or ShellResult(0, "recorded\n", False, False)

    async def run(
        self,
        command: str,
        *,
        cwd: str,
        env: Any = None,
        timeout: float | None = None,  # noqa: ASYNC109 -- the seam's signature
        max_output: int = 30_000,
        signal: CancelToken | None = None,
        roots: Any = None,
    ) -> ShellResult:
        self.calls.append(
            {"command": command, "cwd": cwd, "timeout": timeout, "max_output": max_output}
        )
        return self.answer


# -- results ------------------------------------------------------------------------------------


async def test_exit_zero_is_ok_with_output_and_the_exit_code_last(tmp_path: Path) -> None:
    ex = bash_executor(tmp_path)
    result = await call(ex, "bash", {"command": "echo out; echo err >&2; echo again"})
    assert result.ok, result.content
    assert result.value == {"exit_code": 0, "output": "out\nerr\nagain\n", "truncated": False}
    assert text(result) == "out\nerr\nagain\nExit code: 0"


async def test_other_exit_codes_are_tool_failures_with_the_code(tmp_path: Path) -> None:
    ex = bash_executor(tmp_path)
    result = await call(ex, "bash", {"command": "echo failing; exit 3"})
    assert result.error is not None and result.error.code == ErrorCode.TOOL_FAILURE
    assert result.error.details["exit_code"] == 3
    assert failure_code(result) == "exit_status"
    assert text(result) == "failing\nExit code: 3"
    killed = await call(ex, "bash", {"command": "kill -TERM $$"})
    assert killed.error is not None and killed.error.details["exit_code"] == 143
    assert text(killed).endswith("Exit code: 143 (killed by SIGTERM)")
    quiet = await call(ex, "bash", {"command": "false"})
    assert text(quiet) == "(no output)\nExit code: 1"


async def test_the_commands_own_timeout_is_a_timeout_with_the_output_so_far(
    tmp_path: Path,
) -> None:
    ex = bash_executor(tmp_path)
    result = await call(ex, "bash", {"command": "echo started; exec sleep 60", "timeout": 0.5})
    assert result.error is not None and result.error.code == ErrorCode.TIMEOUT
    assert result.error.details["timeout"] == 0.5
    assert text(result).startswith("started\nTimed out after 0.5s")
    assert_idle(ex)  # the timed-out call holds no slot, gate or lock
    assert len(ex.history()) == 1


async def test_runs_in_the_workspace_and_nothing_carries_over(tmp_path: Path) -> None:
    ex = bash_executor(tmp_path)
    first = await call(ex, "bash", {"command": "cd / && export CARRIED=yes && pwd"})
    assert text(first).startswith("/\n")
    second = await call(ex, "bash", {"command": 'pwd; echo "${CARRIED:-unset}"'})
    assert second.value["output"] == f"{tmp_path}\nunset\n"


# -- output bounds --------------------------------------------------------------------------------


async def test_a_flood_is_cut_head_and_tail_within_30000_chars(tmp_path: Path) -> None:
    ex = bash_executor(tmp_path)
    command = "echo FIRST; yes filler | head -c 20000000; echo; echo LAST"
    result = await call(ex, "bash", {"command": command})
    assert result.ok, result.content
    content = text(result)
    assert len(content) <= 30_000
    assert content.startswith("FIRST\nfiller")
    assert content.endswith("LAST\nExit code: 0")
    assert "bytes of output cut here" in content
    assert result.value["truncated"] is True


async def test_a_never_ending_flood_times_out_bounded(tmp_path: Path) -> None:
    ex = bash_executor(tmp_path)
    command = "echo $$ > pids; yes & echo $! >> pids; yes"
    # LocalShell: the pids it records are the server's (a sandbox has a pid namespace).
    result = await call(ex, "bash", {"command": command, "timeout": 1}, shell=LocalShell())
    assert result.error is not None and result.error.code == ErrorCode.TIMEOUT
    assert len(text(result)) <= 30_000
    assert result.error.details["truncated"] is True
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    assert len(pids) == 2 and all(gone(pid) for pid in pids)
    assert_idle(ex)


async def test_binary_output_is_described_not_shown(tmp_path: Path) -> None:
    ex = bash_executor(tmp_path)
    result = await call(ex, "bash", {"command": "head -c 100000 /dev/urandom; printf '\\0'"})
    assert result.ok
    assert text(result).startswith("[binary output: ")
    assert "bytes not shown" in text(result)
    assert len(text(result)) < 300


# -- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"command": ""}, "command"),
        ({"command": "  \n\t"}, "command"),
        ({"command": "x" * 32_769}, "command"),
        ({"command": "true", "timeout": 601}, "timeout"),
        ({"command": "true", "timeout": 0}, "timeout"),
        ({"command": "true", "timeout": "10"}, "timeout"),
        ({}, "command"),
    ],
)
async def test_bad_arguments_are_invalid_args_and_nothing_runs(
    tmp_path: Path, args: dict[str, Any], field: str
) -> None:
    shell = RecordingShell()
    ex = bash_executor(tmp_path)
    result = await call(ex, "bash", args, shell=shell)
    assert result.error is not None and result.error.code == ErrorCode.INVALID_ARGS
    assert field in result.error.message
    assert shell.calls == []


async def test_the_timeout_is_120_unless_given_and_600_is_allowed(tmp_path: Path) -> None:
    shell = RecordingShell()
    ex = bash_executor(tmp_path)
    assert (await call(ex, "bash", {"command": "a"}, shell=shell)).ok
    assert (await call(ex, "bash", {"command": "b", "timeout": 600}, shell=shell)).ok
    assert [(c["command"], c["timeout"]) for c in shell.calls] == [("a", 120.0), ("b", 600.0)]


async def test_a_timeout_over_600_names_the_limit(tmp_path: Path) -> None:
    ex = bash_executor(tmp_path)
    result = await call(ex, "bash", {"command": "true", "timeout": 120_000})
    assert result.error is not None and result.error.code == ErrorCode.INVALID_ARGS
    assert "600" in result.error.message


async def test_a_nul_in_the_command_is_refused_before_it_runs(tmp_path: Path) -> None:
    shell = RecordingShell()
    ex = bash_executor(tmp_path)
    result = await call(ex, "bash", {"command": "echo a\x00b"}, shell=shell)
    assert failure_code(result) == "bad_command"
    assert shell.calls == []


async def test_a_missing_workspace_is_a_failure_saying_so(tmp_path: Path) -> None:
    ex = bash_executor(tmp_path / "gone")
    result = await call(ex, "bash", {"command": "true"})
    assert failure_code(result) == "not_started"
    assert "does not exist" in text(result)


# -- the environment ------------------------------------------------------------------------------

SECRETS = {
    "OPENAI_API_KEY": "sk-1",
    "DB_PASSWORD": "pw",
    "GITHUB_TOKEN": "gh",
    "AWS_SECRET_ACCESS_KEY": "aws",
    "my_auth_header": "bearer",
    "SERVICE_CREDENTIALS": "c",
}


async def test_secrets_of_the_servers_environment_are_absent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PLAIN_SETTING", "visible")
    ex = bash_executor(tmp_path)
    result = await call(ex, "bash", {"command": "env"})
    names = {line.split("=", 1)[0] for line in result.value["output"].splitlines()}
    assert not names & set(SECRETS)
    assert "PLAIN_SETTING" in names
    assert "PAGER=cat" in result.value["output"].splitlines()


async def test_env_allow_and_deny_change_the_lists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PLAIN_SETTING", "visible")
    shell = LocalShell(env_allow=("GITHUB_TOKEN",), env_deny=("PASSWORD", "plain"))
    ex = bash_executor(tmp_path, mode=PermissionMode.YOLO)
    result = await call(ex, "bash", {"command": "env"}, shell=shell)
    names = {line.split("=", 1)[0] for line in result.value["output"].splitlines()}
    assert "GITHUB_TOKEN" in names  # allowed by name
    assert "OPENAI_API_KEY" in names  # KEY is no longer on the deny list
    assert "DB_PASSWORD" not in names
    assert "PLAIN_SETTING" not in names  # denied, any case
    assert LocalShell().environment().get("PAGER") == "cat"


# -- the seam and the rules -----------------------------------------------------------------------


async def test_a_servers_own_shell_runs_the_command(tmp_path: Path) -> None:
    shell = RecordingShell()
    assert isinstance(shell, Shell)
    ex = bash_executor(tmp_path)
    result = await call(ex, "bash", {"command": "make test", "timeout": 30}, shell=shell)
    assert text(result) == "recorded\nExit code: 0"
    assert shell.calls == [
        {"command": "make test", "cwd": str(tmp_path), "timeout": 30.0, "max_output": 29_744}
    ]
    defaults = bash_executor(tmp_path, shell=shell)  # context_defaults carry it too
    await defaults.execute("bash", {"command": "ls"}, ExecutionContext(session_id="s2"))
    assert [c["command"] for c in shell.calls] == ["make test", "ls"]


async def test_a_seam_that_cannot_start_the_command_is_a_failure(tmp_path: Path) -> None:
    class Broken(RecordingShell):
        async def run(self, command: str, **_: Any) -> ShellResult:
            raise PermissionError(13, "Permission denied")

    ex = bash_executor(tmp_path)
    result = await call(ex, "bash", {"command": "true"}, shell=Broken())
    assert failure_code(result) == "not_started"
    assert "Permission denied" in text(result)


async def test_bash_rules_govern_it_and_a_denied_command_never_runs(tmp_path: Path) -> None:
    shell = RecordingShell()
    ex = bash_executor(
        tmp_path,
        mode=PermissionMode.DEFAULT,
        permissions=PermissionConfig(allow=("Bash(git status)",), deny=("Bash(rm:*)",)),
    )
    denied = await call(ex, "bash", {"command": "git status && rm -rf build"}, shell=shell)
    assert denied.error is not None and denied.error.code == ErrorCode.PERMISSION_DENIED
    assert "Bash(rm:*)" in denied.error.message
    allowed = await call(ex, "bash", {"command": "git status"}, shell=shell)
    assert allowed.ok
    asked = await call(ex, "bash", {"command": "make"}, shell=shell)  # DEFAULT asks EXECUTE
    assert asked.error is not None and asked.error.code == ErrorCode.PERMISSION_DENIED
    assert asked.error.details.get("reason") == "no_approver"
    assert [c["command"] for c in shell.calls] == ["git status"]


def test_bash_is_an_execute_tool_governed_by_bash_rules() -> None:
    from fastgate import ToolKind
    from fastgate.builtin import builtin_tools

    (tool,) = [t for t in builtin_tools() if t.name == "bash"]
    assert tool.kind is ToolKind.EXECUTE
    assert tool.rule_names == ("Bash",)
    assert tool.classify_parallelism({"command": "ls"}) == "exclusive"
