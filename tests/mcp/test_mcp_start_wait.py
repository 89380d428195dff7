"""``MCPBridge.start(wait=...)``: a server that hangs while starting (or is only slow) delays the
bridge's start by at most ``wait`` seconds; it goes on connecting in the background and its tools
are registered once it is ready. Required servers are still waited for, and fail the start."""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from fastgate import ExecutionContext, PermissionMode, ToolExecutor, ToolRegistry
from fastgate.mcp import MCPBridge, MCPServerConfig, MCPStartupError
from tests.mcp.servers import HOSTILE, all_pids, assert_gone, fixture

# Real processes whose timing is the same under both builds and loops: run once.
pytestmark = pytest.mark.slow


def hostile_named(name: str, mode: str, **options: Any) -> MCPServerConfig:
    env = {"HOSTILE_START_DELAY": "1.5"} if mode == "late" else {}
    return MCPServerConfig(name, command=[sys.executable, str(HOSTILE), mode], env=env, **options)


async def test_a_hung_server_delays_the_start_by_wait_at_most() -> None:
    registry = ToolRegistry()
    stuck = hostile_named("stuck", "garbage", startup_timeout=30.0)
    # fx is required: waited for whatever its start takes; stuck at most half a second.
    bridge = MCPBridge(registry, [fixture("fx", required=True), stuck])
    began = time.monotonic()
    await bridge.start(wait=0.5)
    try:
        took = time.monotonic() - began
        assert took < 15.0, took  # its startup_timeout is 30 s
        assert registry.resolve("mcp__fx__echo") is not None  # the others are served
        assert bridge.status()["stuck"]["state"] in ("starting", "restarting")
        assert registry.resolve("mcp__stuck__echo") is None
    finally:
        pids = all_pids(bridge)
        await bridge.aclose()
    assert_gone(pids)


async def test_a_late_server_joins_once_ready_and_is_called() -> None:
    registry = ToolRegistry()
    bridge = MCPBridge(registry, [hostile_named("late", "late")])
    await bridge.start(wait=0)
    try:
        assert registry.resolve("mcp__late__echo") is None  # not ready yet: 1.5 s to start
        async with asyncio.timeout(30):
            await bridge.wait_for("late", generation=1)
        executor = ToolExecutor(registry, mode=PermissionMode.YOLO)
        result = await executor.execute(
            "mcp__late__echo", {"text": "joined"}, ExecutionContext(session_id="s")
        )
        assert result.ok and result.content == "joined", result
        executor.dispose()
    finally:
        pids = all_pids(bridge)
        await bridge.aclose()
    assert_gone(pids)


async def test_a_required_server_is_waited_for_whatever_wait_says() -> None:
    registry = ToolRegistry()
    stuck = hostile_named("stuck", "garbage", startup_timeout=1.0, required=True)
    bridge = MCPBridge(registry, [fixture("fx"), stuck])
    with pytest.raises(MCPStartupError) as raised:
        async with asyncio.timeout(30):
            await bridge.start(wait=0)
    assert raised.value.server == "stuck"
    assert bridge.status()["fx"]["state"] == "closed"


@pytest.mark.parametrize("wait", [-1.0, float("nan")])
async def test_wait_is_seconds(wait: float) -> None:
    bridge = MCPBridge(ToolRegistry(), [])
    with pytest.raises(ValueError, match="wait"):
        await bridge.start(wait=wait)


async def test_the_default_still_waits_for_every_first_attempt() -> None:
    """Control: without ``wait`` a late server is ready when ``start`` returns."""
    registry = ToolRegistry()
    bridge = MCPBridge(registry, [hostile_named("late", "late")])
    await bridge.start()
    try:
        assert registry.resolve("mcp__late__echo") is not None
    finally:
        pids = all_pids(bridge)
        await bridge.aclose()
    assert_gone(pids)
