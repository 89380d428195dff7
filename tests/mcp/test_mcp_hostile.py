"""The MCP bridge against a hand-written stdio server that misbehaves (``tests/mcp/
hostile_server.py``): stray lines on stdout, JSON-RPC errors instead of results, a tools/list
that never ends. Each ends in a structured result or a clear startup error, within its limits,
with every process gone and nothing held."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from fastgate import ErrorCode, ExecutionContext, PermissionMode, ToolExecutor, ToolRegistry
from fastgate.mcp import MCPBridge, MCPServerConfig, MCPStartupError
from fastgate.mcp._server import MAX_LIST_PAGES, MAX_LISTED_TOOLS
from tests.mcp.servers import (
    all_pids,
    assert_gone,
    assert_settled,
    hostile,
    records,
    running,
)

CTX = ExecutionContext(session_id="s1")


def yolo(registry: ToolRegistry) -> ToolExecutor:
    return ToolExecutor(registry, mode=PermissionMode.YOLO)


def received(record: Path, method: str) -> int:
    return sum(1 for r in records(record) if r["method"] == method)


async def refused_start(config: MCPServerConfig) -> MCPStartupError:
    """Start a bridge whose one (required) server must fail; every process it started is gone
    when the error is raised."""
    registry = ToolRegistry()
    bridge = MCPBridge(registry, [config])
    with pytest.raises(MCPStartupError) as raised:
        async with asyncio.timeout(30):
            await bridge.start()
    assert_gone(all_pids(bridge))
    assert bridge.status()["h"]["state"] == "closed" and registry.resolve("mcp__h__echo") is None
    assert raised.value.server == "h"
    return raised.value


# -- stray lines on stdout ------------------------------------------------------------------------


async def test_stray_stdout_lines_are_skipped_and_the_calls_succeed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A banner, a JSON log record, bytes that are not UTF-8, a reply to an id nobody sent, and
    # a debug print before and after every message.
    caplog.set_level(logging.DEBUG, logger="fastgate.mcp")
    registry = ToolRegistry()
    record = tmp_path / "record.jsonl"
    async with running(registry, hostile("banner", record=record)) as bridge:
        status = bridge.status()["h"]
        assert status["state"] == "ready" and status["last_error"] is None, status
        assert status["tool_names"] == ["mcp__h__bump", "mcp__h__echo", "mcp__h__refuse"]
        executor = yolo(registry)
        for i in range(3):
            echoed = await executor.execute("mcp__h__echo", {"text": f"hello {i}"}, CTX)
            assert echoed.ok and echoed.content == f"hello {i}", echoed.error
        refused = await executor.execute("mcp__h__refuse", {}, CTX)
        assert refused.error is not None and refused.error.code is ErrorCode.TOOL_ERROR
        assert bridge.status()["h"]["restarts"] == 0  # no line cost the connection
        assert_settled(executor, bridge, calls=4)
    assert received(record, "tools/call") == 4 and received(record, "tools/list") == 1
    skipped = [r for r in caplog.records if "stream:" in r.getMessage()]
    assert any("hostile server 0.1 starting up" in r.getMessage() for r in skipped)


async def test_a_server_that_writes_only_garbage_fails_within_startup_timeout() -> None:
    began = time.monotonic()
    error = await refused_start(hostile("garbage", startup_timeout=1.0, required=True))
    assert time.monotonic() - began < 5.0
    assert "within startup_timeout" in error.reason
    # The reason says what the server wrote instead.
    assert "line(s) that are not JSON-RPC, the last: '?SYNTAX ERROR'" in error.reason


async def test_garbage_instead_of_a_result_ends_in_the_idle_timeout(tmp_path: Path) -> None:
    registry = ToolRegistry()
    record = tmp_path / "record.jsonl"
    config = hostile("garbage-calls", record=record, idle_timeout=0.5, call_timeout=5.0)
    async with running(registry, config) as bridge:
        executor = yolo(registry)
        silent = await executor.execute("mcp__h__echo", {"text": "x"}, CTX)
        assert silent.error is not None and silent.error.code is ErrorCode.TIMEOUT
        assert silent.error.details["reason"] == "idle_timeout"
        # The connection is intact: the next request is answered.
        refused = await executor.execute("mcp__h__refuse", {}, CTX)
        assert refused.error is not None and refused.error.details["reason"] == "server_error"
        assert bridge.status()["h"]["restarts"] == 0
        assert_settled(executor, bridge, calls=2)
    assert received(record, "notifications/cancelled") == 1


# -- JSON-RPC errors instead of results ------------------------------------------------------------


async def test_a_json_rpc_error_to_tools_call_is_a_structured_tool_error() -> None:
    registry = ToolRegistry()
    async with running(registry, hostile("plain")) as bridge:
        executor = yolo(registry)
        refused = await executor.execute("mcp__h__refuse", {}, CTX)
        assert refused.error is not None and refused.error.code is ErrorCode.TOOL_ERROR
        assert not refused.error.retryable  # the server answered: nothing to try again
        assert refused.error.details == {
            "reason": "server_error",
            "server": "h",
            "mcp_code": -32602,
        }
        assert "refuse takes no calls today" in refused.content
        assert "(JSON-RPC error -32602)" in refused.content and "Traceback" not in refused.content
        assert (await executor.execute("mcp__h__echo", {"text": "after"}, CTX)).content == "after"
        assert_settled(executor, bridge, calls=2)


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        (
            "error-initialize",
            "the server refused the handshake: JSON-RPC error -32602: "
            "Unsupported client: fastgate is not allowed here",
        ),
        (
            "error-list",
            "the server refused tools/list: JSON-RPC error -32602: "
            "tools/list is not available to this client",
        ),
    ],
)
async def test_a_json_rpc_error_to_initialize_or_tools_list_is_a_clear_startup_error(
    mode: str, reason: str
) -> None:
    # Not required: the bridge starts, the server is retried in the background, and its tools
    # are simply not there.
    registry = ToolRegistry()
    async with running(registry, hostile(mode)) as bridge:
        status = bridge.status()["h"]
        assert status["state"] == "restarting" and status["last_error"] == reason, status
        unknown = await yolo(registry).execute("mcp__h__echo", {"text": "x"}, CTX)
        assert unknown.error is not None and unknown.error.code is ErrorCode.UNKNOWN_TOOL
    # Required: the bridge refuses to start, saying why.
    error = await refused_start(hostile(mode, required=True))
    assert error.reason == reason


async def test_a_json_rpc_error_to_a_later_tools_list_keeps_the_tools(tmp_path: Path) -> None:
    registry = ToolRegistry()
    record = tmp_path / "record.jsonl"
    async with running(registry, hostile("error-relist", record=record)) as bridge:
        executor = yolo(registry)
        link = bridge._links["h"]
        assert (await executor.execute("mcp__h__bump", {}, CTX)).content == "bumped"
        async with asyncio.timeout(10):
            while link.last_error is None:
                await link.changed()
        assert link.last_error == (
            "refreshing the tool list failed: the server refused tools/list: "
            "JSON-RPC error -32602: tools/list is not available to this client"
        )
        status = bridge.status()["h"]
        assert status["state"] == "ready" and status["generation"] == 1 and status["tools"] == 3
        assert (await executor.execute("mcp__h__echo", {"text": "kept"}, CTX)).content == "kept"
        assert_settled(executor, bridge, calls=2)
    assert received(record, "tools/list") == 2


# -- a tools/list that never ends -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "pages", "reason"),
    [
        (
            "endless-pages",
            MAX_LIST_PAGES,
            f"the tools/list reply did not end within {MAX_LIST_PAGES} pages",
        ),
        ("same-cursor", 2, "the tools/list reply repeats the cursor 'again': its pages loop"),
        ("crowded", MAX_LISTED_TOOLS // 1000 + 1, f"has over {MAX_LISTED_TOOLS} tools"),
    ],
)
async def test_a_tools_list_that_never_ends_is_cut_off(
    tmp_path: Path, mode: str, pages: int, reason: str
) -> None:
    record = tmp_path / "record.jsonl"
    error = await refused_start(hostile(mode, record=record, required=True))
    assert reason in error.reason
    assert received(record, "tools/list") == pages


# -- replies the SDK's model of a message refuses ------------------------------------------------


async def test_a_listing_nested_past_the_sdk_s_depth_is_still_served() -> None:
    registry = ToolRegistry()
    async with running(registry, hostile("odd-replies", startup_timeout=10.0)) as bridge:
        status = bridge.status()["h"]
        assert status["state"] == "ready", status
        assert registry.resolve("mcp__h__deep") is not None  # fastgate compiles it
        executor = yolo(registry)
        answered = await executor.execute("mcp__h__echo", {"text": "hi"}, CTX)
        assert answered.ok and answered.content == "hi", answered.error


@pytest.mark.parametrize("odd", ["null", "list"])
async def test_a_result_that_is_not_an_object_is_a_prompt_protocol_error(odd: str) -> None:
    registry = ToolRegistry()
    config = hostile("odd-replies", idle_timeout=30.0, call_timeout=60.0)
    async with running(registry, config) as bridge:
        executor = yolo(registry)
        started = time.monotonic()
        result = await executor.execute("mcp__h__echo", {"text": odd}, CTX)
        assert time.monotonic() - started < 10.0  # not the idle timeout
        assert result.error is not None and result.error.code is ErrorCode.TOOL_ERROR, result
        assert result.error.details["reason"] == "protocol_error", result.error
        # The connection is intact.
        again = await executor.execute("mcp__h__echo", {"text": "fine"}, CTX)
        assert again.ok, again.error
        assert bridge.status()["h"]["restarts"] == 0


async def test_a_result_nested_past_the_sdk_s_depth_is_answered_at_once() -> None:
    registry = ToolRegistry()
    config = hostile("odd-replies", idle_timeout=30.0, call_timeout=60.0)
    async with running(registry, config):
        executor = yolo(registry)
        started = time.monotonic()
        result = await executor.execute("mcp__h__echo", {"text": "nested"}, CTX)
        assert time.monotonic() - started < 10.0  # not the idle timeout
        assert result.ok and result.content == "deep", result.error
