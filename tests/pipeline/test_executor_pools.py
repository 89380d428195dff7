"""Stage 11 admits a tool's calls in its scheduler pool (``ToolDefinition.pool``, SPEC §8.2)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from fastgate import ConcurrencyScheduler, ErrorCode, ExecutionContext, SchedulerLimits
from tests.pipeline_kit import NOTHING, assert_idle, executor, tool

POOL = "mcp:fs"


async def test_a_tools_pool_caps_its_calls_across_sessions_and_nothing_else() -> None:
    release, entered = asyncio.Event(), asyncio.Event()
    running: list[str] = []

    async def read(args: Any, ctx: Any) -> str:
        running.append(ctx.session_id)
        entered.set()
        await release.wait()
        return "read"

    sched = ConcurrencyScheduler(SchedulerLimits(pool_limits={POOL: 1}))
    ex = executor(
        tool("fs_read", read, NOTHING, parallelism="shared", pool=POOL),
        tool("local", lambda a, c: "local", NOTHING, parallelism="shared"),
        scheduler=sched,
    )
    first = asyncio.create_task(ex.execute("fs_read", {}, ExecutionContext(session_id="a")))
    second = asyncio.create_task(ex.execute("fs_read", {}, ExecutionContext(session_id="b")))
    await entered.wait()
    # A tool outside the pool is not held back by it (the second call queued meanwhile: no
    # stage before admission waits when nothing is contended).
    assert (await ex.execute("local", {}, ExecutionContext(session_id="b"))).ok
    stats = sched.stats()
    assert running == ["a"]
    assert stats.in_flight_by_pool == {POOL: 1} and stats.queued_by_pool == {POOL: 1}
    release.set()
    assert (await first).ok and (await second).ok
    assert running == ["a", "b"]
    assert sched.stats().in_flight_by_pool == {POOL: 0}
    assert_idle(ex)


async def test_a_full_pool_queue_is_tool_busy_for_that_pool_only() -> None:
    release, entered = asyncio.Event(), asyncio.Event()

    async def hold(args: Any, ctx: Any) -> str:
        entered.set()
        await release.wait()
        return "held"

    sched = ConcurrencyScheduler(SchedulerLimits(pool_limits={POOL: 1}, max_queue=0))
    ex = executor(
        tool("fs_hold", hold, NOTHING, parallelism="shared", pool=POOL),
        tool("local", lambda a, c: "local", NOTHING, parallelism="shared"),
        scheduler=sched,
    )
    first = asyncio.create_task(ex.execute("fs_hold", {}))
    await entered.wait()
    busy = await ex.execute("fs_hold", {}, ExecutionContext(session_id="other"))
    assert busy.error is not None and busy.error.code is ErrorCode.RESOURCE_EXHAUSTED
    assert busy.error.details == {"reason": "tool_busy", "cause": "queue_full"}
    assert busy.error.retryable
    assert (await ex.execute("local", {})).ok
    release.set()
    assert (await first).ok
    assert_idle(ex)


async def test_the_registry_asks_for_a_pools_limit_and_the_executor_applies_it() -> None:
    release, entered = asyncio.Event(), asyncio.Event()
    running: list[str] = []

    async def hold(args: Any, ctx: Any) -> str:
        running.append(ctx.session_id)
        entered.set()
        await release.wait()
        return "held"

    sched = ConcurrencyScheduler(SchedulerLimits())
    ex = executor(tool("fs_hold", hold, NOTHING, parallelism="shared", pool=POOL), scheduler=sched)
    ex.registry.set_pool_limit(POOL, 1)
    assert ex.registry.pool_limit(POOL) == 1 and ex.registry.pool_limit("other") is None
    assert POOL not in sched.limits.pool_limits  # applied on the pool's first call, not before
    first = asyncio.create_task(ex.execute("fs_hold", {}, ExecutionContext(session_id="a")))
    second = asyncio.create_task(ex.execute("fs_hold", {}, ExecutionContext(session_id="b")))
    await entered.wait()
    assert sched.limits.pool_limits[POOL] == 1
    assert running == ["a"] and sched.stats().queued_by_pool == {POOL: 1}
    release.set()
    assert (await first).ok and (await second).ok
    assert running == ["a", "b"]
    assert_idle(ex)


def test_a_pool_limit_asked_of_the_registry_is_checked() -> None:
    registry = executor().registry
    for pool, limit in (("", 1), (None, 1), ("p", 0), ("p", 1.5), ("p", True)):
        with pytest.raises(ValueError, match="set_pool_limit"):
            registry.set_pool_limit(pool, limit)
    assert registry.pool_limit("p") is None
