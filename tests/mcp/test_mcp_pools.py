"""An MCP server's calls share its ``max_concurrency`` slots in the scheduler pool
``mcp:<server>``, admitted round-robin across sessions (SPEC §14, §8.2)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from fastgate import (
    ConcurrencyScheduler,
    ExecutionContext,
    PermissionMode,
    SchedulerLimits,
    ToolExecutor,
    ToolRegistry,
)
from tests.mcp.servers import fixture, records, running

SERVICE = 0.02  # seconds the fixture's slow tool sleeps per call
FLOOD, FLOOD_AGENTS = 200, 8
SMALL_SESSIONS, SMALL_CALLS = 3, 10


def most_at_once(events: list[dict[str, object]]) -> int:
    """The most calls the server was running at one time, from its start/done record."""
    running = peak = 0
    for event in events:
        if event["event"] == "start":
            running += 1
            peak = max(peak, running)
        elif event["event"] in ("done", "cancelled"):
            running -= 1
    return peak


@pytest.mark.usefixtures("runner_heap_frozen")
async def test_a_flooding_session_does_not_hold_back_small_ones_on_one_server(
    tmp_path: Path,
) -> None:
    registry = ToolRegistry()
    record = tmp_path / "record.jsonl"
    # Session and queue limits out of the way: the server's pool is the contended dimension.
    scheduler = ConcurrencyScheduler(
        SchedulerLimits(session_limit=FLOOD, max_queue=4 * FLOOD, queue_timeout=None)
    )
    async with running(registry, fixture(record=record, max_concurrency=2)):
        # An untrusted MCP tool is exclusive in its executor's gate, so one executor (one agent)
        # runs its calls one at a time; the flooding session has sub-agents of its own.
        def agent() -> ToolExecutor:
            return ToolExecutor(registry, mode=PermissionMode.YOLO, scheduler=scheduler)

        sub_agents = [agent() for _ in range(FLOOD_AGENTS)]
        args = {"seconds": SERVICE}

        async def small(session: str) -> list[float]:
            executor, waits = agent(), []
            for _ in range(SMALL_CALLS):  # an agent: each call after the previous result
                began = time.perf_counter()
                result = await executor.execute("mcp__fx__slow", args, ExecutionContext(session))
                assert result.ok, result.error
                waits.append(time.perf_counter() - began - SERVICE)
            return waits

        # The flood's calls are created first, so they queue before any small session's.
        flood = [
            asyncio.create_task(
                sub_agents[i % FLOOD_AGENTS].execute(
                    "mcp__fx__slow", args, ExecutionContext("flood")
                )
            )
            for i in range(FLOOD)
        ]
        smalls = [asyncio.create_task(small(f"small-{i}")) for i in range(SMALL_SESSIONS)]
        waits = sorted(w for done in await asyncio.gather(*smalls) for w in done)
        flood_after_smalls = sum(not call.done() for call in flood)
        assert all(result.ok for result in await asyncio.gather(*flood))

    assert scheduler.limits.pool_limits["mcp:fx"] == 2
    assert most_at_once(records(record)) == 2
    p99 = waits[int(0.99 * (len(waits) - 1))]
    assert p99 <= 12 * SERVICE, f"small sessions' p99 wait {p99 / SERVICE:.1f} service times"
    # FIFO would have run the whole flood first; round-robin left most of it for after.
    assert flood_after_smalls > FLOOD // 2
    stats = scheduler.stats()
    assert stats.in_flight_by_pool == {"mcp:fx": 0} and stats.queued_by_pool == {"mcp:fx": 0}
