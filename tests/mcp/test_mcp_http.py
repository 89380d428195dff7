"""The bridge against the fixture server over streamable HTTP on 127.0.0.1."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from fastgate import ErrorCode, ExecutionContext, PermissionMode, ToolExecutor, ToolRegistry
from fastgate.mcp import MCPServerConfig
from fastgate.model import DEFAULT_MAX_CONTENT_CHARS
from tests.mcp.servers import http_fixture, records, running

CTX = ExecutionContext(session_id="s1")


async def first_progress(executor: ToolExecutor) -> None:
    async for _ in executor.progress():
        return


async def test_calls_progress_cancel_list_changed_and_a_dead_server_over_http(
    tmp_path: Path,
) -> None:
    record = tmp_path / "record.jsonl"
    with http_fixture(record) as (url, pid):
        registry = ToolRegistry()
        config = MCPServerConfig("web", url=url, headers={"X-Test": "1"}, idle_timeout=5.0)
        async with running(registry, config) as bridge:
            status = bridge.status()["web"]
            assert status["state"] == "ready" and status["transport"] == "http"
            assert "mcp__web__uncompilable" not in status["tool_names"]
            executor = ToolExecutor(registry, mode=PermissionMode.YOLO)
            added = await executor.execute("mcp__web__add", {"a": 20, "b": 22}, CTX)
            assert added.ok and added.value == {"sum": 42}

            # Cancelling reaches the server (on this transport: its request is aborted).
            started = asyncio.create_task(first_progress(executor))
            args = {"seconds": 60, "steps": 600, "tag": "http"}
            call = asyncio.create_task(executor.execute("mcp__web__slow", args, CTX))
            await started
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call

            # list_changed over HTTP (a 2026 subscription).
            assert (await executor.execute("mcp__web__bump", {}, CTX)).ok
            async with asyncio.timeout(30):
                await bridge.wait_for("web", generation=2)
            assert registry.resolve("mcp__web__extra") is not None

            # The server dies: a call is server_unavailable, retryable.
            os.kill(pid, signal.SIGKILL)
            dead = await executor.execute("mcp__web__echo", {"text": "x"}, CTX)
            assert dead.error is not None and dead.error.code is ErrorCode.TOOL_ERROR
            assert dead.error.retryable and dead.error.details["reason"] == "server_unavailable"
    cancelled = [r["tag"] for r in records(record) if r["event"] == "cancelled"]
    assert cancelled == ["http"]


async def test_an_unreachable_server_is_an_error_not_a_hang() -> None:
    registry = ToolRegistry()
    config = MCPServerConfig("gone", url="http://127.0.0.1:9/mcp", startup_timeout=5.0)
    async with running(registry, config) as bridge:
        status = bridge.status()["gone"]
        assert status["state"] == "restarting" and status["last_error"]
        assert registry.resolve("mcp__gone__anything") is None


@pytest.mark.parametrize("chars", [2_000_000, 20_000_000])
async def test_an_answer_over_a_megabyte_in_an_event_stream_is_received_and_cut(
    chars: int,
) -> None:
    # The fixture answers calls with an SSE stream; one event holds the whole result. An event
    # is bounded like a JSON body (64 MiB), not at the SDK's default of 1 MiB, which failed
    # every result over a megabyte that the content budget would simply have cut.
    with http_fixture() as (url, _):
        registry = ToolRegistry()
        async with running(registry, MCPServerConfig("web", url=url)):
            executor = ToolExecutor(registry, mode=PermissionMode.YOLO)
            result = await executor.execute("mcp__web__big_streamed", {"chars": chars}, CTX)
    assert result.ok, result.error
    text = result.content
    assert isinstance(text, str)
    assert text.startswith("yyy") and "characters cut" in text
    assert len(text) <= DEFAULT_MAX_CONTENT_CHARS + 100
