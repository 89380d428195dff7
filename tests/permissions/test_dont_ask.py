"""``PermissionMode.DONT_ASK`` (Claude Code's ``dontAsk``): what is allowed runs, and every ASK
(of the mode, a rule, a sensitive or protected path, a hook) is ``PERMISSION_DENIED`` without
the approver being called (SPEC §5, §6.5). Claude Code's mode names load from settings files
and from ``fastgate call --mode``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fastgate import (
    ApprovalResponse,
    ApprovalStore,
    Decision,
    ErrorCode,
    ExecutionContext,
    Hooks,
    PermissionConfig,
    PermissionMode,
    PreToolUseResult,
    ToolKind,
    ToolResult,
)
from fastgate.permissions import MODE_DEFAULTS
from tests.pipeline_kit import COMMAND, PATH, assert_idle, executor, tool

FASTGATE = str(Path(sys.executable).with_name("fastgate"))


@pytest.mark.parametrize(
    ("spelling", "mode"),
    [
        ("dontAsk", PermissionMode.DONT_ASK),
        ("dont_ask", PermissionMode.DONT_ASK),
        ("DONTASK", PermissionMode.DONT_ASK),
        ("Dont-Ask", PermissionMode.DONT_ASK),
        ("DONT_ASK", PermissionMode.DONT_ASK),
        ("default", PermissionMode.DEFAULT),
        ("acceptEdits", PermissionMode.ACCEPT_EDITS),
        ("ACCEPT_EDITS", PermissionMode.ACCEPT_EDITS),
        ("plan", PermissionMode.PLAN),
        ("bypassPermissions", PermissionMode.YOLO),
        ("BYPASS_PERMISSIONS", PermissionMode.YOLO),
        ("yolo", PermissionMode.YOLO),
    ],
)
def test_every_claude_code_mode_name_parses_and_loads(
    tmp_path: Path, spelling: str, mode: PermissionMode
) -> None:
    assert PermissionMode.parse(spelling) is mode
    assert PermissionMode(spelling) is mode  # the constructor takes the same spellings
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"permissions": {"defaultMode": spelling, "allow": ["Read"]}}))
    assert PermissionConfig.load(settings).default_mode is mode


@pytest.mark.parametrize("spelling", ["dont ask", "ask", "", "dontAsk!", 3, None])
def test_an_unknown_mode_is_refused_naming_the_file(tmp_path: Path, spelling: Any) -> None:
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"permissions": {"defaultMode": spelling}}))
    if spelling is None:  # no mode given
        assert PermissionConfig.load(settings).default_mode is None
        return
    with pytest.raises(ValueError, match=r"settings\.json"):
        PermissionConfig.load(settings)
    with pytest.raises(ValueError):
        PermissionMode(spelling)


def test_the_mode_table_row() -> None:
    assert MODE_DEFAULTS[PermissionMode.DONT_ASK] == (Decision.ALLOW, Decision.DENY, Decision.DENY)


class Recorder:
    def __init__(self) -> None:
        self.asked: list[str] = []

    async def __call__(self, request: Any) -> ApprovalResponse:
        self.asked.append(request.tool_name)
        return ApprovalResponse(True, scope="session")


def _tools() -> list[Any]:
    return [
        tool("Read", lambda a, c: "read", PATH, kind=ToolKind.READ_ONLY),
        tool("Write", lambda a, c: "written", PATH, kind=ToolKind.WRITE),
        tool("Bash", lambda a, c: "ran", COMMAND, kind=ToolKind.EXECUTE),
    ]


def _denied_unasked(result: ToolResult) -> bool:
    return result.error is not None and result.error.code is ErrorCode.PERMISSION_DENIED


ASKS: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = [
    # (what would ask, tool, arguments, config)
    ("the mode, WRITE", "Write", {"file_path": "a.txt"}, {}),
    ("the mode, EXECUTE", "Bash", {"command": "make"}, {}),
    ("an ask rule", "Read", {"file_path": "notes.md"}, {"ask": ("Read(./notes.md)",)}),
    (
        "an ask rule over an allow",
        "Bash",
        {"command": "git push"},
        {"allow": ("Bash",), "ask": ("Bash(git push:*)",)},
    ),
    ("a sensitive read", "Read", {"file_path": ".env"}, {"allow": ("Read",)}),
    ("a sensitive command", "Bash", {"command": "cat .env"}, {"allow": ("Bash",)}),
    (
        "a protected write",
        "Write",
        {"file_path": ".fastgate/settings.local.json"},
        {"allow": ("Write",)},
    ),
]


@pytest.mark.parametrize(("what", "name", "args", "config"), ASKS, ids=[a[0] for a in ASKS])
async def test_every_ask_is_denied_without_asking(
    tmp_path: Path, what: str, name: str, args: dict[str, Any], config: dict[str, Any]
) -> None:
    store = ApprovalStore()
    # Approved for the session before: DONT_ASK still never runs what would ask.
    asking = executor(
        *_tools(), workspace=tmp_path, permissions=PermissionConfig(**config), approval_store=store
    )
    recorder = Recorder()
    assert (await asking.execute(name, args, ExecutionContext("s1", approver=recorder))).ok
    recorder.asked.clear()
    ex = executor(
        *_tools(),
        workspace=tmp_path,
        permissions=PermissionConfig(**config),
        approval_store=store,
        mode="dontAsk",
    )
    result = await ex.execute(name, args, ExecutionContext("s1", approver=recorder))
    assert _denied_unasked(result), result.content
    assert recorder.asked == []
    assert "DONT_ASK" in str(result.content)
    assert_idle(ex)


async def test_a_hooks_ask_is_denied_without_asking(tmp_path: Path) -> None:
    hooks = Hooks()
    hooks.add_pre_tool_use(lambda event: PreToolUseResult(decision="ask", reason="hook asks"))
    ex = executor(
        *_tools(),
        workspace=tmp_path,
        permissions=PermissionConfig(allow=("Bash",)),
        hooks=hooks,
        mode=PermissionMode.DONT_ASK,
    )
    recorder = Recorder()
    result = await ex.execute("Bash", {"command": "ls"}, ExecutionContext("s1", approver=recorder))
    assert _denied_unasked(result) and recorder.asked == []
    assert result.error is not None
    assert result.error.details == {"reason": "dont_ask", "source": "hook"}
    assert "hook asks" in str(result.content)
    assert_idle(ex)


async def test_what_is_allowed_runs(tmp_path: Path) -> None:
    ex = executor(
        *_tools(),
        workspace=tmp_path,
        permissions=PermissionConfig(
            allow=("Bash(make:*)", "Write(./src/**)"), deny=("Read(./x)",)
        ),
        mode=PermissionMode.DONT_ASK,
    )
    recorder = Recorder()
    ctx = ExecutionContext("s1", approver=recorder)
    assert (await ex.execute("Read", {"file_path": "notes.md"}, ctx)).ok  # READ_ONLY: allowed
    assert (await ex.execute("Bash", {"command": "make test"}, ctx)).ok
    assert (await ex.execute("Write", {"file_path": "src/a.py"}, ctx)).ok
    assert _denied_unasked(await ex.execute("Read", {"file_path": "x"}, ctx))  # a deny stands
    assert _denied_unasked(await ex.execute("Bash", {"command": "make; rm x"}, ctx))
    assert recorder.asked == []
    assert_idle(ex)


def _call(workspace: Path, *argv: str) -> tuple[int, dict[str, Any]]:
    done = subprocess.run(
        [FASTGATE, "call", *argv, "--workspace", str(workspace), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    return done.returncode, json.loads(done.stdout)


@pytest.mark.parametrize("spelling", ["dontAsk", "dont_ask"])
def test_fastgate_call_takes_dont_ask(tmp_path: Path, spelling: str) -> None:
    (tmp_path / ".env").write_text("TOKEN=1\n")
    status, report = _call(
        tmp_path, "bash", '{"command": "true"}', "--mode", spelling, "--approve", "once"
    )
    assert status == 3 and report["mode"] == "dont_ask"
    assert report["result"]["error"]["code"] == "PERMISSION_DENIED"
    assert report["decision"]["decision"] == "deny" and report["result"]["ran"] is False
    status, report = _call(
        tmp_path, "read", '{"file_path": ".env"}', "--mode", spelling, "--approve", "once"
    )
    assert status == 3 and report["decision"]["source"] == "sensitive"
    args = ("bash", '{"command": "true"}', "--mode", spelling, "--allow", "Bash(true)")
    status, report = _call(tmp_path, *args)
    assert status == 0 and report["result"]["ran"] is True
