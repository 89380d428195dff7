"""An approval asked for arguments a PreToolUse hook rewrote names the rewritten arguments: the
request's signature is theirs, and a session approval given for them never covers the
arguments the model first sent, which the user never saw."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from fastgate import (
    ApprovalResponse,
    ExecutionContext,
    Hooks,
    PermissionConfig,
    PermissionMode,
    PreToolUseResult,
    ToolKind,
)
from fastgate.model.approvals import ApprovalRequest
from tests.pipeline_kit import COMMAND, PATH, assert_idle, executor, tool


class _SessionApprover:
    """Approves every request for the session, keeping what it was shown."""

    def __init__(self) -> None:
        self.shown: list[ApprovalRequest] = []

    def __call__(self, request: ApprovalRequest) -> ApprovalResponse:
        self.shown.append(request)
        return ApprovalResponse(True, scope="session")


def _rewrite_once(rewritten: dict[str, Any]) -> Hooks:
    """Hooks that rewrite the first call's arguments to ``rewritten`` and leave later calls."""
    seen: list[int] = []

    def hook(event: Any) -> PreToolUseResult | None:
        seen.append(1)
        return PreToolUseResult(updated_args=rewritten) if len(seen) == 1 else None

    hooks = Hooks()
    hooks.add_pre_tool_use(hook)
    return hooks


@pytest.mark.parametrize(
    ("original", "rewritten", "permissions"),
    [
        # both ask as the mode's default: equal strictness
        ("touch A", "echo B", PermissionConfig()),
        # the original asks by a rule, the rewrite is allowed: the original's ask stands
        ("touch A", "echo B", PermissionConfig(allow=("Bash(echo:*)",), ask=("Bash(touch:*)",))),
        # the rewrite asks by a rule, the original is allowed
        ("echo B", "touch A", PermissionConfig(allow=("Bash(echo:*)",), ask=("Bash(touch:*)",))),
    ],
)
async def test_a_session_approval_of_a_rewrite_never_covers_the_original(
    original: str, rewritten: str, permissions: PermissionConfig
) -> None:
    ran: list[str] = []
    bash = tool(
        "bash",
        lambda a, c: ran.append(a["command"]),
        COMMAND,
        kind=ToolKind.EXECUTE,
        rule_names=("Bash",),
    )
    ex = executor(bash, hooks=_rewrite_once({"command": rewritten}), permissions=permissions)
    approver = _SessionApprover()
    ctx = ExecutionContext(approver=approver)

    first = await ex.execute("bash", {"command": original}, ctx)
    assert first.ok, first.error
    assert [dict(r.args) for r in approver.shown] == [{"command": rewritten}]
    definition = ex.registry.resolve("bash")
    assert definition is not None
    merged = ex._merge_defaults(ctx)
    signature_of = {
        command: ex._resolver.decide(definition, {"command": command}, merged).signature
        for command in (original, rewritten)
    }
    assert approver.shown[0].signature == signature_of[rewritten]

    # The model sends its original arguments again, unrewritten: asked again unless a rule
    # allows them outright.
    again = await ex.execute("bash", {"command": original}, ctx)
    assert again.ok, again.error
    original_allowed = original == "echo B"
    assert len(approver.shown) == (1 if original_allowed else 2)
    assert ran == [rewritten, original]
    assert_idle(ex)


async def test_a_rewrite_to_a_sensitive_path_is_asked_as_sensitive(tmp_path: Path) -> None:
    ran: list[str] = []
    write = tool("write", lambda a, c: ran.append(a["file_path"]), PATH, kind=ToolKind.WRITE)
    ex = executor(write, workspace=tmp_path, hooks=_rewrite_once({"file_path": ".env"}))
    approver = _SessionApprover()
    ctx = ExecutionContext(approver=approver)

    first = await ex.execute("write", {"file_path": "notes.txt"}, ctx)
    assert first.ok, first.error
    request = approver.shown[0]
    assert dict(request.args) == {"file_path": ".env"}
    assert request.source == "sensitive", request
    # A sensitive path is asked every time: the session approval was not kept.
    assert any("asked every time" in note for note in first.meta.additional_context)
    # Nor does it cover the original arguments.
    await ex.execute("write", {"file_path": "notes.txt"}, ctx)
    assert len(approver.shown) == 2
    assert ran == [".env", "notes.txt"]
    assert_idle(ex)


async def test_a_rewrite_into_a_call_the_tool_runs_alone_takes_the_gate_alone() -> None:
    """``parallelism`` judged the original arguments at stage 4; a hook's rewrite into arguments
    the tool runs alone waits for the shared calls already running, and holds the rest back."""
    reader_started, release_reader = asyncio.Event(), asyncio.Event()
    events: list[str] = []

    async def body(args: Any, ctx: Any) -> str:
        events.append(f"start {args['command']}")
        if args["command"] == "read-long":
            reader_started.set()
            await release_reader.wait()
        events.append(f"end {args['command']}")
        return "ok"

    def parallelism(args: Any) -> str:
        return "exclusive" if args["command"] == "write" else "shared"

    def rewrite(event: Any) -> PreToolUseResult | None:
        if event.args["command"] == "read-then-write":
            return PreToolUseResult(updated_args={"command": "write"})
        return None

    hooks = Hooks()
    hooks.add_pre_tool_use(rewrite)
    shell = tool("shell", body, COMMAND, parallelism=parallelism, is_concurrency_safe=True)
    ex = executor(shell, hooks=hooks, mode=PermissionMode.YOLO)
    reader = asyncio.ensure_future(ex.execute("shell", {"command": "read-long"}))
    await reader_started.wait()
    rewritten = asyncio.ensure_future(ex.execute("shell", {"command": "read-then-write"}))
    for _ in range(20):  # let it pass the gate as shared, reach the hook and wait again
        await asyncio.sleep(0)
    assert events == ["start read-long"], events
    release_reader.set()
    assert (await reader).ok and (await rewritten).ok
    assert events == ["start read-long", "end read-long", "start write", "end write"]
    assert_idle(ex)
