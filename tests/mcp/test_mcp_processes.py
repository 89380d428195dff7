"""A stdio server runs under ``fastgate.processes``' launcher: a process it starts in a session
of its own (as a daemon detaches, out of its process group) is ended when the bridge closes,
and when the server crashes."""

from __future__ import annotations

import asyncio
import os

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from fastgate import ExecutionContext, PermissionMode, ToolExecutor, ToolRegistry
from tests.mcp.servers import alive, assert_gone, fixture, running

# Run once, in the compiled build, on uvloop: the processes are the same under every build.
pytestmark = [
    pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="Linux only"),
    pytest.mark.slow,
]
CTX = ExecutionContext(session_id="s1")


async def ended(pid: int) -> None:
    """Wait (on its pidfd: an event, not a timer) until ``pid`` has exited."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    loop = asyncio.get_running_loop()
    exited: asyncio.Future[None] = loop.create_future()

    def on_exit() -> None:
        if not exited.done():
            exited.set_result(None)

    loop.add_reader(fd, on_exit)
    try:
        async with asyncio.timeout(30):
            await exited
    finally:
        loop.remove_reader(fd)
        os.close(fd)


async def test_aclose_ends_a_daemon_the_server_started() -> None:
    registry = ToolRegistry()
    async with running(registry, fixture()) as bridge:
        executor = ToolExecutor(registry, mode=PermissionMode.YOLO)
        daemon = (await executor.execute("mcp__fx__spawn_daemon", {}, CTX)).value["result"]
        assert alive(daemon) and os.getpgid(daemon) != bridge.status()["fx"]["pid"]
        server = bridge.status()["fx"]["pid"]
    assert_gone([server, daemon])


async def test_a_crash_ends_the_daemons_the_server_started() -> None:
    registry = ToolRegistry()
    async with running(registry, fixture()) as bridge:
        executor = ToolExecutor(registry, mode=PermissionMode.YOLO)
        daemon = (await executor.execute("mcp__fx__spawn_daemon", {}, CTX)).value["result"]
        server = bridge.status()["fx"]["pid"]
        crashed = await executor.execute("mcp__fx__crash", {}, CTX)
        assert not crashed.ok
        await ended(daemon)  # while the bridge is still open: the crash alone ended it
        assert_gone([server, daemon])
