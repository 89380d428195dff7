"""The bridge against the public reference servers: npm server-everything and
server-filesystem over stdio, and mcp-server-time (PyPI, the older protocol era). Policy: MCP
tools pass every stage like local ones."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from fastgate import (
    ApprovalRequest,
    ApprovalResponse,
    DecisionSource,
    ErrorCode,
    ExecutionContext,
    Hooks,
    PermissionConfig,
    PermissionMode,
    PreToolUseEvent,
    PreToolUseResult,
    ToolCallView,
    ToolExecutor,
    ToolKind,
    ToolRegistry,
)
from fastgate.mcp import MCPServerConfig
from tests.mcp.servers import (
    EVERYTHING,
    FILESYSTEM,
    fixture,
    legacy_fixture,
    node_server,
    running,
    time_server,
)

# The processes and the kernel it exercises are the same under both builds and both loops:
# run once, in the compiled build, on uvloop.
pytestmark = pytest.mark.slow

CTX = ExecutionContext(session_id="s1")


async def test_everything_progress_content_blocks_and_annotations() -> None:
    command = node_server(EVERYTHING)
    registry = ToolRegistry()
    untrusted = MCPServerConfig("everything", command=[*command, "stdio"])
    trusted = MCPServerConfig("trusting", command=[*command, "stdio"], trust_annotations=True)
    async with running(registry, untrusted, trusted) as bridge:
        assert bridge.status()["everything"]["protocol_version"] == "2025-11-25"
        executor = ToolExecutor(registry, mode=PermissionMode.YOLO)
        # Hints count only with trust_annotations (echo says readOnlyHint=true).
        plain = registry.resolve("mcp__everything__echo")
        hinted = registry.resolve("mcp__trusting__echo")
        assert plain is not None and plain.kind is ToolKind.EXECUTE
        assert plain.classify_parallelism({}) == "exclusive"
        assert hinted is not None and hinted.kind is ToolKind.READ_ONLY
        assert hinted.classify_parallelism({}) == "shared" and hinted.concurrency_safe({})
        writer = registry.resolve("mcp__trusting__toggle-simulated-logging")
        assert writer is not None and writer.kind is ToolKind.EXECUTE  # not read-only

        echoed = await executor.execute("mcp__everything__echo", {"message": "hi"}, CTX)
        assert echoed.ok and echoed.content == "Echo: hi"

        seen: list[Any] = []

        async def collect() -> None:
            async for event in executor.progress():
                seen.append(event.data)  # noqa: PERF401

        collector = asyncio.create_task(collect())
        args = {"duration": 1, "steps": 4}
        long = await executor.execute("mcp__everything__trigger-long-running-operation", args, CTX)
        collector.cancel()
        await asyncio.gather(collector, return_exceptions=True)
        assert long.ok, long.content
        assert [d["progress"] for d in seen] == [1, 2, 3, 4]
        assert all(d["total"] == 4 for d in seen)

        image = await executor.execute("mcp__everything__get-tiny-image", {}, CTX)
        assert image.ok and isinstance(image.content, tuple)
        assert {block["type"] for block in image.content} == {"text", "image"}
        picture = next(b for b in image.content if b["type"] == "image")
        assert picture["mimeType"] == "image/png" and picture["data"]

        structured = await executor.execute(
            "mcp__everything__get-structured-content", {"location": "Chicago"}, CTX
        )
        assert structured.ok and set(structured.value) == {"temperature", "conditions", "humidity"}


async def test_filesystem_deny_rule_ask_rule_hook_and_guard(tmp_path: Path) -> None:
    root = tmp_path / "shared"
    root.mkdir()
    (root / "notes.txt").write_text("first line\n")
    registry = ToolRegistry()
    fs = MCPServerConfig("fs", command=[*node_server(FILESYSTEM), str(root)])
    everything = MCPServerConfig(
        "everything", command=[*node_server(EVERYTHING), "stdio"], trust_annotations=True
    )
    rewrites: list[str] = []

    def rewrite(event: PreToolUseEvent) -> PreToolUseResult | None:
        if event.tool_name == "mcp__everything__echo":
            rewrites.append(event.args["message"])
            return PreToolUseResult(updated_args={"message": "rewritten by a hook"})
        return None

    def guard(view: ToolCallView) -> str | None:
        path = str(view.args.get("path", ""))
        return "the guard keeps secrets out" if "secret" in path else None

    hooks = Hooks()
    hooks.add_pre_tool_use(rewrite)
    permissions = PermissionConfig(deny=["mcp__fs__write_file"], ask=["mcp__everything"])
    asked: list[ApprovalRequest] = []

    async def approver(request: ApprovalRequest) -> ApprovalResponse:
        asked.append(request)
        return ApprovalResponse(approved=True)

    async with running(registry, fs, everything):
        executor = ToolExecutor(
            registry, permissions=permissions, hooks=hooks, guards=[guard], mode="accept_edits"
        )
        ctx = ExecutionContext(session_id="s1", approver=approver)
        target = root / "new.txt"
        denied = await executor.execute(
            "mcp__fs__write_file", {"path": str(target), "content": "x"}, ctx
        )
        assert denied.error is not None and denied.error.code is ErrorCode.PERMISSION_DENIED
        assert "mcp__fs__write_file" in denied.error.message and not target.exists()

        # An EXECUTE tool asks in this mode (approved here); outside its root the server says no.
        read = await executor.execute(
            "mcp__fs__read_text_file", {"path": str(root / "notes.txt")}, ctx
        )
        assert read.ok and "first line" in read.content
        assert [r.tool_name for r in asked] == ["mcp__fs__read_text_file"]
        outside = await executor.execute("mcp__fs__read_text_file", {"path": "/etc/hostname"}, ctx)
        assert outside.error is not None and outside.error.code is ErrorCode.TOOL_FAILURE

        # The guard: no approval, no call.
        secret = await executor.execute(
            "mcp__fs__read_text_file", {"path": str(root / "secret.txt")}, ctx
        )
        assert secret.error is not None and secret.error.code is ErrorCode.PERMISSION_DENIED
        assert "the guard keeps secrets out" in secret.error.message

        # The ask rule on the whole server holds for a tool its hints call read-only, and the
        # hook's rewritten arguments are what the server gets.
        asked.clear()
        echoed = await executor.execute("mcp__everything__echo", {"message": "original"}, ctx)
        assert echoed.ok and echoed.content == "Echo: rewritten by a hook"
        assert rewrites == ["original"]
        assert [r.tool_name for r in asked] == ["mcp__everything__echo"]
        assert asked[0].source == DecisionSource.RULE
        refused = await executor.execute(
            "mcp__everything__echo", {"message": "again"}, ExecutionContext(session_id="s2")
        )
        assert refused.error is not None and refused.error.code is ErrorCode.PERMISSION_DENIED


async def test_filesystem_reads_and_writes_with_output_schemas(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    registry = ToolRegistry()
    async with running(
        registry, MCPServerConfig("fs", command=[*node_server(FILESYSTEM), str(root)])
    ):
        executor = ToolExecutor(registry, mode=PermissionMode.YOLO)
        writer = registry.resolve("mcp__fs__write_file")
        assert writer is not None and writer.output.schema is not None
        wrote = await executor.execute(
            "mcp__fs__write_file", {"path": str(root / "a.txt"), "content": "hello"}, CTX
        )
        assert wrote.ok and (root / "a.txt").read_text() == "hello"
        read = await executor.execute("mcp__fs__read_text_file", {"path": str(root / "a.txt")}, CTX)
        assert read.ok and read.content == "hello" and read.value == {"content": "hello"}
        outside = await executor.execute("mcp__fs__read_text_file", {"path": "/etc/passwd"}, CTX)
        assert outside.error is not None and outside.error.code is ErrorCode.TOOL_FAILURE
        assert "outside allowed directories" in outside.content


async def test_the_older_protocol_era_time_server_and_list_changed() -> None:
    registry = ToolRegistry()
    time_config = MCPServerConfig("time", command=time_server())
    legacy = MCPServerConfig("legacy", command=legacy_fixture())
    async with running(registry, time_config, legacy) as bridge:
        status = bridge.status()
        assert status["time"]["protocol_version"] == status["legacy"]["protocol_version"]
        assert status["time"]["protocol_version"] == "2025-11-25"
        executor = ToolExecutor(registry, mode=PermissionMode.YOLO)
        now = await executor.execute("mcp__time__get_current_time", {"timezone": "UTC"}, CTX)
        assert now.ok and '"timezone": "UTC"' in now.content
        bad = await executor.execute("mcp__time__get_current_time", {}, CTX)
        assert bad.error is not None and bad.error.code is ErrorCode.INVALID_ARGS

        # list_changed as a plain session notification (the handshake era).
        assert registry.resolve("mcp__legacy__extra") is None
        assert (await executor.execute("mcp__legacy__bump", {}, CTX)).ok
        async with asyncio.timeout(30):
            await bridge.wait_for("legacy", generation=2)
        extra = await executor.execute("mcp__legacy__extra", {}, CTX)
        assert extra.ok and extra.content == "extra"


async def test_trusted_read_only_hints_never_loosen_a_rule() -> None:
    registry = ToolRegistry()
    async with running(registry, fixture(trust_annotations=True)):
        echo = registry.resolve("mcp__fx__echo")
        assert echo is not None and echo.kind is ToolKind.READ_ONLY
        # A deny rule denies; an ask rule asks (no approver here: refused, reason no_approver).
        for permissions in (
            PermissionConfig(deny=["mcp__fx__echo"]),
            PermissionConfig(ask=["mcp__fx"]),
        ):
            executor = ToolExecutor(registry, permissions=permissions)
            result = await executor.execute("mcp__fx__echo", {"text": "x"}, CTX)
            assert result.error is not None and result.error.code is ErrorCode.PERMISSION_DENIED
        allowed = await ToolExecutor(registry).execute("mcp__fx__echo", {"text": "x"}, CTX)
        assert allowed.ok  # read-only by its trusted hint: DEFAULT mode allows it
