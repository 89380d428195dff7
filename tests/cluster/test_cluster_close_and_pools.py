"""A closed worker's running calls keep their share, and a limit one worker declares binds all.

Two schedulers of one process share a real Redis; the tool bodies count what runs at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis

from fastgate import ConcurrencyScheduler, SchedulerLimits, ToolKind
from fastgate.cli.bench.redis_server import RedisServer
from fastgate.cluster import ClusterStats, RedisCluster

R = ToolKind.READ_ONLY
W = ToolKind.WRITE
# A lease much longer than a refresh: a share that comes back within a few refreshes came back
# because its worker said so, not because its lease lapsed.
LONG_LEASE = {"lease_ttl": 10.0, "refresh_interval": 0.25}
FAST = {"lease_ttl": 2.0, "refresh_interval": 0.25}


def _cluster(url: str, timing: dict[str, float], **kw: object) -> RedisCluster:
    return RedisCluster(url, **{**timing, **kw})  # type: ignore[arg-type]


def _view(s: ConcurrencyScheduler) -> ClusterStats:
    view = s.stats().cluster
    assert view is not None
    return view


class Meter:
    """Counts the calls running at once, per key, and signals when a count reaches a mark."""

    def __init__(self) -> None:
        self.live: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self._marks: list[tuple[str, int, asyncio.Event]] = []

    def reached(self, key: str, count: int) -> asyncio.Event:
        event = asyncio.Event()
        self._marks.append((key, count, event))
        return event

    async def run(self, keys: list[str], body: Callable[[], Awaitable[object]]) -> None:
        for key in keys:
            self.live[key] = self.live.get(key, 0) + 1
            self.peak[key] = max(self.peak.get(key, 0), self.live[key])
        for key, count, event in self._marks:
            if self.live.get(key, 0) >= count:
                event.set()
        try:
            await body()
        finally:
            for key in keys:
                self.live[key] -= 1


def _no_cluster_tasks() -> bool:
    return not [t for t in asyncio.all_tasks() if t.get_name().startswith("fastgate-")]


async def test_close_keeps_the_share_of_running_calls_until_they_end(
    redis_server: RedisServer,
) -> None:
    limits = SchedulerLimits(global_limit=4, session_limit=4)
    cluster_a = _cluster(redis_server.url, LONG_LEASE)
    a = ConcurrencyScheduler(limits, cluster=cluster_a)
    b = ConcurrencyScheduler(limits, cluster=_cluster(redis_server.url, LONG_LEASE))
    client = aioredis.from_url(redis_server.url)
    meter = Meter()
    a_running = meter.reached("a", 4)
    b_in = meter.reached("b", 1)
    b_full = meter.reached("b", 4)
    a_done = [asyncio.Event() for _ in range(4)]
    b_done = asyncio.Event()

    async def call(s: ConcurrencyScheduler, tag: str, session: str, done: asyncio.Event) -> None:
        async with s.slot(session, R):
            await meter.run(["g", tag], done.wait)

    a_calls = [asyncio.create_task(call(a, "a", f"a{i}", a_done[i])) for i in range(4)]
    b_calls: list[asyncio.Task[None]] = []
    try:
        await asyncio.wait_for(a_running.wait(), 10)
        b_calls = [asyncio.create_task(call(b, "b", f"b{i}", b_done)) for i in range(8)]
        started = time.monotonic()
        await a.close()
        assert time.monotonic() - started < 1.0  # close() does not wait for the calls
        assert a.stats().in_flight == 4
        # A's four running calls keep their share: B gets nothing for a few of its refreshes
        # (it would within one if A had given its share away).
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(b_in.wait(), 4 * LONG_LEASE["refresh_interval"])
        assert meter.peak["g"] <= 4 and not b_in.is_set(), meter.peak
        assert await client.hexists("fastgate:workers", cluster_a.worker_id)
        # Each call of A that ends gives its slot to B.
        a_done[0].set()
        await asyncio.wait_for(b_in.wait(), 5)
        for done in a_done[1:]:
            done.set()
        ended = time.monotonic()
        await asyncio.wait_for(b_full.wait(), 5)
        assert time.monotonic() - ended < LONG_LEASE["lease_ttl"] / 2  # not at lease expiry
        await asyncio.wait_for(cluster_a.wait_closed(), 5)
        assert not await client.hexists("fastgate:workers", cluster_a.worker_id)
        b_done.set()
        await asyncio.gather(*a_calls, *b_calls)
        assert meter.peak["g"] == 4, meter.peak
    finally:
        for done in (*a_done, b_done):
            done.set()
        await asyncio.gather(*a_calls, *b_calls, return_exceptions=True)
        await a.close()
        await b.close()
        await client.aclose()
    assert _no_cluster_tasks()


async def test_a_closed_worker_leaves_redis_when_its_last_call_ends(
    redis_server: RedisServer,
) -> None:
    cluster = _cluster(redis_server.url, FAST, namespace="drain")
    scheduler = ConcurrencyScheduler(SchedulerLimits(global_limit=2), cluster=cluster)
    client = aioredis.from_url(redis_server.url)
    entered, release = asyncio.Event(), asyncio.Event()

    async def call() -> None:
        async with scheduler.slot("s", W):
            entered.set()
            await release.wait()

    task = asyncio.create_task(call())
    try:
        await asyncio.wait_for(entered.wait(), 10)
        await scheduler.close()
        await scheduler.close()  # twice is harmless
        assert await client.hexists("drain:workers", cluster.worker_id)
        view = _view(scheduler)
        assert view.allotment_global == 0  # admits nothing more
        release.set()
        await task
        await asyncio.wait_for(cluster.wait_closed(), 5)
        assert not await client.hexists("drain:workers", cluster.worker_id)
        assert await client.zcard("drain:leases") == 0
        assert _no_cluster_tasks()
    finally:
        release.set()
        await asyncio.gather(task, return_exceptions=True)
        await scheduler.close()
        await client.aclose()


async def _calls(
    s: ConcurrencyScheduler, meter: Meter, keys: list[str], session: str, count: int, **slot: object
) -> None:
    for _ in range(count):
        async with s.slot(session, R, **slot):
            await meter.run(keys, lambda: asyncio.sleep(0.005))


async def test_a_pool_limit_one_worker_declares_holds_on_every_worker(
    redis_server: RedisServer,
) -> None:
    a = ConcurrencyScheduler(
        SchedulerLimits(global_limit=8, session_limit=8, pool_limits={"api": 2}),
        cluster=_cluster(redis_server.url, FAST),
    )
    b = ConcurrencyScheduler(
        SchedulerLimits(global_limit=8, session_limit=8), cluster=_cluster(redis_server.url, FAST)
    )
    meter = Meter()
    try:
        await asyncio.wait_for(
            asyncio.gather(
                *(
                    _calls(s, meter, ["api", tag], f"{tag}{i}", 25, pool="api")
                    for s, tag in ((a, "a"), (b, "b"))
                    for i in range(6)
                )
            ),
            60,
        )
        b_view = _view(b)
    finally:
        await a.close()
        await b.close()
    assert meter.peak["api"] <= 2, meter.peak
    assert b_view.allotment_by_pool.keys() == {"api"}  # b shows the limit by the pool's name
    assert meter.peak["a"] >= 1 and meter.peak["b"] >= 1


async def test_a_pool_limit_declared_while_another_worker_runs_calls_in_it(
    redis_server: RedisServer,
) -> None:
    """The calls a worker runs in a pool before any worker limits it are waited for, not
    overlapped: from the first call the limit admits on, the pool never runs more than it."""
    b = ConcurrencyScheduler(
        SchedulerLimits(global_limit=8, session_limit=8), cluster=_cluster(redis_server.url, FAST)
    )
    meter = Meter()
    stop = asyncio.Event()
    b_busy = meter.reached("api", 6)
    a_in = asyncio.Event()

    async def flood(session: str) -> None:
        while not stop.is_set():
            async with b.slot(session, R, pool="api"):
                await meter.run(["api"], lambda: asyncio.sleep(0.005))

    async def a_body() -> None:
        if not a_in.is_set():  # the first call of the worker that declares the limit
            a_in.set()
            meter.peak["api"] = meter.live["api"]  # measure from here on
        await asyncio.sleep(0.005)

    async def a_calls(a: ConcurrencyScheduler, session: str) -> None:
        for _ in range(10):
            async with a.slot(session, R, pool="api"):
                await meter.run(["api", "a"], a_body)

    floods = [asyncio.create_task(flood(f"b{i}")) for i in range(6)]
    a: ConcurrencyScheduler | None = None
    try:
        await asyncio.wait_for(b_busy.wait(), 10)  # no limit anywhere yet: six at once
        a = ConcurrencyScheduler(
            SchedulerLimits(global_limit=8, session_limit=8, pool_limits={"api": 2}),
            cluster=_cluster(redis_server.url, FAST),
        )
        await asyncio.wait_for(asyncio.gather(*(a_calls(a, f"a{i}") for i in range(4))), 60)
    finally:
        stop.set()
        await asyncio.gather(*floods, return_exceptions=True)
        if a is not None:
            await a.close()
        await b.close()
    assert meter.peak["api"] <= 2, meter.peak
    assert meter.peak["a"] >= 1


async def test_without_redis_a_worker_keeps_the_smallest_limits_it_heard_of(
    redis_server: RedisServer,
) -> None:
    small = ConcurrencyScheduler(
        SchedulerLimits(global_limit=8, session_limit=1, pool_limits={"api": 1}),
        cluster=_cluster(redis_server.url, FAST),
    )
    big = ConcurrencyScheduler(
        SchedulerLimits(global_limit=8, session_limit=8),
        cluster=_cluster(redis_server.url, FAST, fallback_share=3),
    )
    meter = Meter()
    try:
        for s in (small, big):
            async with s.slot("warm", R, pool="api"):
                pass
        await asyncio.to_thread(redis_server.stop)
        # Calls go on past big's lease (it lapses at 90% of lease_ttl), into the fallback.
        until = time.monotonic() + FAST["lease_ttl"] + 0.5

        async def until_fallback(keys: list[str], session: str, pool: str | None) -> None:
            while time.monotonic() < until:
                await _calls(big, meter, keys, session, 1, pool=pool)

        await asyncio.wait_for(
            asyncio.gather(
                *(until_fallback(["s"], "s", None) for _ in range(4)),
                *(until_fallback(["api"], f"p{i}", "api") for i in range(4)),
            ),
            30,
        )
        view = _view(big)
    finally:
        await small.close()
        await big.close()
    assert meter.peak["s"] == 1 and meter.peak["api"] == 1, meter.peak
    assert view.degraded and view.allotment_by_kind["READ_ONLY"] == 3  # in the fallback
    assert view.allotment_by_pool == {"api": 1}
