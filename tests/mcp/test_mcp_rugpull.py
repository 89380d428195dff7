"""A session approval of an MCP tool stands for the definition the person was shown: when the
server changes the tool (``tools/list_changed``, then a listing where the same name has another
description, schema, annotations, ...; or the tool removed and listed again otherwise), the next
call is asked again. A listing that leaves the tool as it was keeps the approval.
(``tests/mcp/rugpull_server.py``.)"""

from __future__ import annotations

import asyncio
import gc
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from fastgate import (
    ApprovalRequest,
    ApprovalResponse,
    ApprovalStore,
    ErrorCode,
    ExecutionContext,
    PermissionMode,
    ToolExecutor,
    ToolRegistry,
    define_tool,
)
from fastgate.mcp import MCPBridge, MCPServerConfig
from fastgate.permissions import withdraw_approvals
from tests.mcp.servers import assert_settled, running

RUGPULL = Path(__file__).with_name("rugpull_server.py")
FILES = "mcp__r__files"

# Each changes only ``files``, in one respect.
CHANGES = [
    "description",
    "schema",
    "title",
    "read-only-flipped",
    "destructive",
    "annotations-gone",
    "output-schema",
    "meta",
]


def rugpull(**options: Any) -> MCPServerConfig:
    return MCPServerConfig("r", command=[sys.executable, str(RUGPULL)], **options)


class Approver:
    """Approves every call for the session, and keeps what it was asked."""

    def __init__(self, scope: str = "session") -> None:
        self.asked: list[ApprovalRequest] = []
        self.scope = scope

    async def __call__(self, request: ApprovalRequest) -> ApprovalResponse:
        self.asked.append(request)
        return ApprovalResponse(True, self.scope)  # type: ignore[arg-type]

    def names(self) -> list[str]:
        return [request.tool_name for request in self.asked]


class Host:
    """An executor that asks (DEFAULT mode: an MCP tool is EXECUTE, so asked), and one that does
    not, for ``switch``: they share the registry, not their approvals."""

    def __init__(self, registry: ToolRegistry, bridge: MCPBridge) -> None:
        self.bridge = bridge
        self.asking = ToolExecutor(registry, mode=PermissionMode.DEFAULT)
        self.yolo = ToolExecutor(registry, mode=PermissionMode.YOLO)
        self.approver = Approver()
        self.ctx = ExecutionContext(session_id="s1", approver=self.approver)

    async def call(self, name: str, args: dict[str, Any] | None = None) -> Any:
        result = await self.asking.execute(name, args or {}, self.ctx)
        return result

    async def switch(self, to: str, *, applied: bool = True) -> None:
        """Change the server's listing; with ``applied``, wait until the bridge installed it."""
        generation = self.bridge.status()["r"]["generation"]
        said = await self.yolo.execute("mcp__r__switch", {"to": to}, ExecutionContext())
        assert said.ok and said.content == "switched", said.error
        if applied:
            async with asyncio.timeout(30):
                await self.bridge.wait_for("r", generation=generation + 1)


async def approved_files(host: Host) -> None:
    """``files`` asked once and approved for the session; a second call is not asked."""
    first = await host.call(FILES, {"path": "/srv"})
    assert first.ok and first.content == "files: /srv", first.error
    again = await host.call(FILES, {"path": "/srv"})
    assert again.ok and again.content == "files: /srv", again.error
    assert host.approver.names() == [FILES]


@pytest.mark.parametrize("change", CHANGES)
async def test_a_changed_definition_is_asked_again(change: str) -> None:
    registry = ToolRegistry()
    async with running(registry, rugpull()) as bridge:
        host = Host(registry, bridge)
        await approved_files(host)
        before = registry.resolve(FILES)
        await host.switch(change)
        assert registry.resolve(FILES) is not before
        after = await host.call(FILES, {"path": "/srv"})
        assert host.approver.names() == [FILES, FILES], "the changed tool ran on the old approval"
        assert after.error is None or after.error.code not in (
            ErrorCode.PERMISSION_DENIED,
            ErrorCode.USER_REJECTED,
        )
        # The new answer covers the new definition.
        await host.call(FILES, {"path": "/srv"})
        assert host.approver.names() == [FILES, FILES]
        assert_settled(host.asking, bridge, calls=4)


async def test_a_tool_removed_and_listed_again_otherwise_is_asked_again() -> None:
    registry = ToolRegistry()
    async with running(registry, rugpull()) as bridge:
        host = Host(registry, bridge)
        await approved_files(host)
        await host.switch("removed")
        gone = await host.call(FILES, {"path": "/srv"})
        assert gone.error is not None and gone.error.code is ErrorCode.UNKNOWN_TOOL
        await host.switch("readded")
        back = await host.call(FILES, {"path": "/srv"})
        assert back.ok and back.content == "files: /srv", back.error
        assert host.approver.names() == [FILES, FILES]
        assert_settled(host.asking, bridge, calls=4)


async def test_a_listing_that_leaves_the_tool_as_it_was_keeps_the_approval() -> None:
    registry = ToolRegistry()
    async with running(registry, rugpull()) as bridge:
        host = Host(registry, bridge)
        await approved_files(host)
        other = await host.call("mcp__r__other")
        assert other.ok and host.approver.names() == [FILES, "mcp__r__other"]
        definition = registry.resolve(FILES)
        # The same listing said again (no new generation: nothing to wait for but the next
        # change), the same tools with their keys in another order, another tool changed.
        await host.switch("unchanged", applied=False)
        await host.switch("reordered")
        assert registry.resolve(FILES) is definition
        await host.switch("other-changed")
        assert registry.resolve(FILES) is definition
        kept = await host.call(FILES, {"path": "/srv"})
        assert kept.ok and kept.content == "files: /srv", kept.error
        assert host.approver.names() == [FILES, "mcp__r__other"]
        # ``other`` changed: it is asked again.
        assert (await host.call("mcp__r__other")).ok
        assert host.approver.names() == [FILES, "mcp__r__other", "mcp__r__other"]
        assert_settled(host.asking, bridge, calls=5)


async def test_an_approval_given_while_the_tool_changed_covers_only_that_call() -> None:
    # The prompt is open when the server changes the tool: the person approved what they were
    # shown, for the call that showed it, and not for what the tool is now.
    registry = ToolRegistry()
    async with running(registry, rugpull()) as bridge:
        host = Host(registry, bridge)
        opened, answer = asyncio.Event(), asyncio.Event()

        async def slow_approver(request: ApprovalRequest) -> ApprovalResponse:
            host.approver.asked.append(request)
            opened.set()
            await answer.wait()
            return ApprovalResponse(True, "session")

        ctx = ExecutionContext(session_id="s1", approver=slow_approver)
        pending = asyncio.ensure_future(host.asking.execute(FILES, {"path": "/srv"}, ctx))
        async with asyncio.timeout(30):
            await opened.wait()
        await host.switch("description")
        answer.set()
        result = await pending
        assert result.ok and result.content == "files: /srv", result.error
        note = " ".join(result.meta.additional_context)
        assert "approved for this call only" in note and "definition was replaced" in note
        again = await host.asking.execute(FILES, {"path": "/srv"}, ctx)
        assert again.ok
        assert host.approver.names() == [FILES, FILES]
        assert_settled(host.asking, bridge, calls=2)


async def test_withdrawn_approvals_go_from_every_store_and_session_and_no_further() -> None:
    async def body(args: dict[str, Any]) -> str:
        return "x"

    schema = {"type": "object", "properties": {}}
    withdrawn = define_tool("t", "A tool.", schema, body)
    kept = define_tool("t", "A tool.", schema, body)  # the same name, another definition
    first, second = ApprovalStore(), ApprovalStore()
    assert first.approve("s1", "sig-a", withdrawn) and first.approve("s2", "sig-a", withdrawn)
    assert second.approve("s1", "sig-b", withdrawn) and second.approve("s1", "sig-c", kept)
    assert first.approve("s1", "sig-d")  # given for no definition: never withdrawn
    dropped = ApprovalStore()
    dropped.approve("s1", "sig-a", withdrawn)
    del dropped
    gc.collect()
    withdraw_approvals(withdrawn)
    assert not first.is_approved("s1", "sig-a") and not first.is_approved("s2", "sig-a")
    assert not second.is_approved("s1", "sig-b")
    assert second.is_approved("s1", "sig-c") and first.is_approved("s1", "sig-d")
    # None is kept for it from now on.
    assert not first.approve("s1", "sig-a", withdrawn)
    assert not first.is_approved("s1", "sig-a")
