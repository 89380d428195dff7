"""Faults between one worker and its Redis: a Redis that stops answering, refreshes slower than
the lease, namespace keys of the wrong type written by another client, and a close while callers
wait on a zero allotment. Every test ends with what it started gone: processes (pids checked),
the worker's tasks and its connections."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from fastgate import (
    ConcurrencyScheduler,
    ResourceExhausted,
    SchedulerClosed,
    SchedulerLimits,
    ToolKind,
)
from fastgate.cli.bench.redis_server import RedisServer, pid_alive
from fastgate.cluster import RedisCluster
from tests.cluster.links import DelayedLink, SilentServer
from tests.cluster.workers_kit import cluster_view, until

# Faults of real processes, the same under both builds and both loops: run once, in the
# compiled build, on uvloop.
pytestmark = pytest.mark.slow

TTL = 1.0
REFRESH = 0.25
#: A bound on anything the code promises "within a refresh" or "at once", with room for a
#: loaded 2-core machine; a guard, not a measurement.
MARGIN = 2.0


def _cluster_tasks(before: set[asyncio.Task[object]]) -> list[asyncio.Task[object]]:
    return [t for t in asyncio.all_tasks() - before if t.get_name().startswith("fastgate-")]


async def _client_count(client: aioredis.Redis) -> int:
    return len(await client.client_list())


@asynccontextmanager
async def _probe(url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.from_url(url)
    try:
        yield client
    finally:
        await client.aclose()


class _Holders:
    """Callers that hold their slots until released; counts what runs at once across workers."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.entered = 0
        self.tasks: list[asyncio.Task[None]] = []

    def start(self, scheduler: ConcurrencyScheduler, session: str, kind: ToolKind) -> None:
        async def hold() -> None:
            async with scheduler.slot(session, kind):
                self.entered += 1
                await self.release.wait()

        self.tasks.append(asyncio.create_task(hold()))

    async def finish(self) -> None:
        self.release.set()
        await asyncio.gather(*self.tasks, return_exceptions=True)


class _Peak:
    """Live concurrency over every scheduler of a test (one event loop: the count is exact)."""

    def __init__(self) -> None:
        self.live = 0
        self.peak = 0
        self.stop = False
        self.tasks: list[asyncio.Task[None]] = []

    def flood(self, scheduler: ConcurrencyScheduler, session: str, callers: int) -> None:
        async def loop() -> None:
            while not self.stop:
                try:
                    async with scheduler.slot(session, ToolKind.READ_ONLY):
                        self.live += 1
                        self.peak = max(self.peak, self.live)
                        await asyncio.sleep(0.005)
                        self.live -= 1
                except ResourceExhausted:
                    pass  # waited its queue_timeout while the worker had no share: ask again

        self.tasks.extend(asyncio.create_task(loop()) for _ in range(callers))

    async def finish(self) -> None:
        self.stop = True
        await asyncio.gather(*self.tasks)


# -- 1. a Redis that accepts connections and stops answering ---------------------------------------


async def test_a_frozen_redis_keeps_the_lease_then_the_fallback_and_close_is_prompt(
    redis_server: RedisServer,
) -> None:
    # SIGSTOP: the kernel still accepts connections on the socket, nothing is ever answered.
    async with _probe(redis_server.url) as probe:
        baseline = await _client_count(probe)
        await _frozen_redis(redis_server, probe, baseline)


async def _frozen_redis(redis_server: RedisServer, probe: aioredis.Redis, baseline: int) -> None:
    before = set(asyncio.all_tasks())
    scheduler = ConcurrencyScheduler(
        SchedulerLimits(global_limit=4, session_limit=4, queue_timeout=0.5),
        cluster=RedisCluster(
            redis_server.url, lease_ttl=2.0, refresh_interval=0.5, fallback_share=1
        ),
    )
    mine = _cluster_tasks(before)
    assert len(mine) == 2  # its refresher and its listener
    holders = _Holders()
    frozen = False
    try:
        holders.start(scheduler, "a", ToolKind.READ_ONLY)
        holders.start(scheduler, "a", ToolKind.READ_ONLY)
        await until(lambda: holders.entered == 2, MARGIN, "admitted on the first lease")
        assert await _client_count(probe) > baseline  # the worker's connections
        os.kill(redis_server.pid, signal.SIGSTOP)
        frozen = True
        # The lease still runs: admission does not wait on Redis.
        holders.start(scheduler, "a", ToolKind.READ_ONLY)
        await until(lambda: holders.entered == 3, 0.5, "admitted on the unexpired lease")

        # Within the lease (90% of lease_ttl from its request) and a refresh: the fallback.
        def fallback() -> bool:
            view = cluster_view(scheduler)
            return view.degraded and view.lease_remaining_s is None

        await until(fallback, 2.0 + MARGIN, "fell back once the lease ran out")
        view = cluster_view(scheduler)
        assert view.degraded_reason is not None and "unreachable" in view.degraded_reason
        assert view.allotment_by_kind == {"READ_ONLY": 1, "WRITE": 1, "EXECUTE": 1}
        # Three still run, above the fallback: nothing more, and a caller gives up within
        # its queue_timeout instead of waiting on Redis.
        started = time.monotonic()
        with pytest.raises(ResourceExhausted):
            async with scheduler.slot("b", ToolKind.READ_ONLY):
                pytest.fail("admitted past the fallback share")
        assert time.monotonic() - started < 0.5 + MARGIN
        await holders.finish()
        # Now the fallback itself: one READ_ONLY at a time.
        second = _Holders()
        second.start(scheduler, "b", ToolKind.READ_ONLY)
        second.start(scheduler, "c", ToolKind.READ_ONLY)
        await until(lambda: second.entered == 1, MARGIN, "admitted on the fallback")
        await until(lambda: scheduler.stats().queued_by_kind["READ_ONLY"] == 1, MARGIN, "queued")
        assert second.entered == 1
        await second.finish()

        started = time.monotonic()
        await scheduler.close()
        assert time.monotonic() - started < MARGIN, "close waited on the frozen Redis"
        assert all(t.done() for t in mine)
        os.kill(redis_server.pid, signal.SIGCONT)
        frozen = False
        # Redis, resumed, sees every connection of the worker closed.
        await _until_async(lambda: _client_count(probe), baseline, "connections closed")
    finally:
        if frozen:
            os.kill(redis_server.pid, signal.SIGCONT)
        await holders.finish()
        await scheduler.close()


async def test_a_redis_that_never_answers_bounds_every_call_and_close(tmp_path: Path) -> None:
    silent = SilentServer(tmp_path / "silent.sock")
    await silent.start()
    before = set(asyncio.all_tasks())
    scheduler = ConcurrencyScheduler(
        SchedulerLimits(global_limit=4, session_limit=4, queue_timeout=0.5),
        cluster=RedisCluster(silent.url, lease_ttl=TTL, refresh_interval=REFRESH, fallback_share=0),
    )
    mine = _cluster_tasks(before)
    assert len(mine) == 2  # its refresher and its listener
    try:
        started = time.monotonic()
        with pytest.raises(ResourceExhausted):
            async with scheduler.slot("a", ToolKind.READ_ONLY):
                pytest.fail("admitted with no lease and fallback_share 0")
        assert time.monotonic() - started < 0.5 + MARGIN
        await until(lambda: cluster_view(scheduler).degraded, MARGIN, "degraded")
        reason = cluster_view(scheduler).degraded_reason
        assert reason is not None and "unreachable" in reason, reason
        assert silent.accepted >= 1  # it did connect: the server hung, it was not absent
        started = time.monotonic()
        await scheduler.close()
        assert time.monotonic() - started < MARGIN, "close waited on the silent server"
        assert all(t.done() for t in mine)
        await until(lambda: silent.open_connections == 0, MARGIN, "closed its connections")
    finally:
        await scheduler.close()
        await silent.stop()


# -- 2. a refresh slower than the lease --------------------------------------------------------


#: lease_ttl, refresh_interval, the replies' delay, what the worker may say. The client's read
#: timeout is refresh_interval, at most lease_ttl / 4, at least 0.25 s.
SLOW_REPLIES = {
    # Later than the read timeout: the call fails as if Redis were away.
    "past the read timeout": (TTL, REFRESH, 1.5 * TTL, ("redis unreachable",)),
    # Within the read timeout (0.25 s) but after 90% of the lease (0.18 s): the reply is
    # dropped; on a loaded machine it may come after the read timeout too.
    "past the lease, within the read timeout": (
        0.2,
        0.1,
        0.2,
        ("the refresh took longer than the lease", "redis unreachable"),
    ),
}


@pytest.mark.parametrize("case", list(SLOW_REPLIES))
async def test_replies_slower_than_the_lease_admit_nothing_past_the_limit(
    redis_server: RedisServer, tmp_path: Path, case: str
) -> None:
    # Worker a reaches Redis through a link that, from some point on, holds every reply longer
    # than the lease (the commands themselves reach Redis at once, so its scripts still run
    # there). Worker b has a direct line. fallback_share=0: nothing outside leases.
    ttl, refresh, delay, reasons = SLOW_REPLIES[case]
    link = DelayedLink(tmp_path / "slow.sock", redis_server.socket)
    await link.start()
    limits = SchedulerLimits(global_limit=4, session_limit=4, queue_timeout=0.3)

    def cluster(url: str) -> RedisCluster:
        return RedisCluster(url, lease_ttl=ttl, refresh_interval=refresh, fallback_share=0)

    a = ConcurrencyScheduler(limits, cluster=cluster(link.url))
    b = ConcurrencyScheduler(limits, cluster=cluster(redis_server.url))
    peak = _Peak()
    try:
        peak.flood(a, "sa", 4)
        peak.flood(b, "sb", 4)

        def steady() -> bool:
            va, vb = cluster_view(a), cluster_view(b)
            return all(v.workers == 2 and v.allotment_global >= 1 for v in (va, vb)) and (
                a.stats().admitted > 0 and b.stats().admitted > 0
            )

        await until(steady, MARGIN + 3, "shared the limit")
        link.delay = delay

        # Its refreshes fail or their replies are dropped; its lease runs out on its own clock
        # and it admits nothing more.
        def starved() -> bool:
            view = cluster_view(a)
            return view.degraded and view.allotment_global == 0 and a.stats().in_flight == 0

        await until(starved, ttl + MARGIN, "stopped admitting on its lapsed lease")
        reason = cluster_view(a).degraded_reason
        assert reason is not None and reason.startswith(reasons), reason
        admitted = a.stats().admitted
        failures = cluster_view(a).refresh_failures
        # Several refreshes go by (each one's reply late): none of their grants is applied.
        await until(
            lambda: cluster_view(a).refresh_failures >= failures + 3, MARGIN, "refreshed again"
        )
        assert a.stats().admitted == admitted, "admitted on a grant that came too late"
        assert cluster_view(a).allotment_global == 0
        assert b.stats().in_flight <= limits.global_limit
        link.delay = 0.0
        await until(
            lambda: not cluster_view(a).degraded and cluster_view(a).allotment_global >= 1,
            MARGIN + ttl,
            "took leases again",
        )
        await until(lambda: a.stats().admitted > admitted, MARGIN, "admitted again")
        await peak.finish()
        assert peak.peak <= limits.global_limit, peak.peak
    finally:
        await peak.finish()
        await a.close()
        await b.close()
        await link.stop()


# -- 3. namespace keys of the wrong type -------------------------------------------------------


Corrupt = Callable[[aioredis.Redis], Awaitable[object]]


async def _string_workers(client: aioredis.Redis) -> None:
    await client.delete("ns:workers")
    await client.set("ns:workers", "someone else's")


async def _list_leases(client: aioredis.Redis) -> None:
    await client.delete("ns:leases")
    await client.rpush("ns:leases", "someone else's")


async def _string_epoch(client: aioredis.Redis) -> None:
    await client.delete("ns:epoch")
    await client.set("ns:epoch", "someone else's")


async def _not_json_record(client: aioredis.Redis) -> None:
    await client.hset("ns:workers", "intruder", "not json")


async def _negative_record(client: aioredis.Redis) -> None:
    # JSON of a record's shape, holding less than nothing: counted as is, it would let the
    # real workers' grants add up past the limit.
    record = '{"lim":{"g":4,"s":4,"k":[4,4,4],"p":{}},"dem":{},"held":{"g":-50,"k":[-50,0,0]}}'
    await client.hset("ns:workers", "intruder", record)


def _delete(key: str) -> Corrupt:
    return lambda client: client.delete(key)


def _intruder_gone(client: aioredis.Redis) -> Awaitable[object]:
    return client.hdel("ns:workers", "intruder")


#: What another client writes, what the reason must name, and the repair docs/cluster.md gives.
CORRUPTIONS: dict[str, tuple[Corrupt, str, Corrupt]] = {
    "workers a string": (_string_workers, "ns:workers", _delete("ns:workers")),
    "leases a list": (_list_leases, "ns:leases", _delete("ns:leases")),
    "epoch a string": (_string_epoch, "ns:epoch", _delete("ns:epoch")),
    "a record not JSON": (_not_json_record, "intruder", _intruder_gone),
    "a record holding less than nothing": (_negative_record, "intruder", _intruder_gone),
}


@pytest.mark.parametrize("case", list(CORRUPTIONS))
async def test_a_namespace_key_of_the_wrong_type_is_a_clear_degraded_state(
    redis_server: RedisServer, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    corrupt, named, repair = CORRUPTIONS[case]
    caplog.set_level(logging.WARNING, logger="fastgate.cluster")
    limits = SchedulerLimits(global_limit=4, session_limit=4, queue_timeout=0.3)
    scheduler = ConcurrencyScheduler(
        limits,
        cluster=RedisCluster(
            redis_server.url, namespace="ns", lease_ttl=TTL, refresh_interval=REFRESH
        ),
    )
    try:
        async with _probe(redis_server.url) as client:
            async with scheduler.slot("a", ToolKind.READ_ONLY):
                assert not cluster_view(scheduler).degraded
            await corrupt(client)

            def refused() -> bool:
                view = cluster_view(scheduler)
                return view.degraded and view.lease_remaining_s is None

            # Within its lease and a refresh: the fallback, the reason naming what is wrong.
            await until(refused, TTL + MARGIN, "refused the corrupt namespace")
            view = cluster_view(scheduler)
            reason = view.degraded_reason
            assert reason is not None and named in reason and "ns" in reason, reason
            assert "unreachable" not in reason, reason
            assert view.allotment_by_kind == {"READ_ONLY": 1, "WRITE": 1, "EXECUTE": 1}
            failures = view.refresh_failures
            await until(
                lambda: cluster_view(scheduler).refresh_failures >= failures + 3, MARGIN, "retried"
            )
            # Retried on the refresher's schedule: one warning, no traceback.
            records = [r for r in caplog.records if r.name == "fastgate.cluster"]
            assert not [r for r in records if r.levelno >= logging.ERROR or r.exc_info]
            assert len([r for r in records if named in r.getMessage()]) == 1, records
            # The documented recovery: remove what the other client wrote.
            await repair(client)
            await until(
                lambda: (
                    not cluster_view(scheduler).degraded
                    and cluster_view(scheduler).allotment_global >= 1
                ),
                TTL + MARGIN,
                "recovered",
            )
            async with scheduler.slot("a", ToolKind.READ_ONLY):
                pass
    finally:
        await scheduler.close()


# -- 4. close while callers wait on a zero allotment -------------------------------------------


async def test_close_wakes_callers_waiting_on_a_zero_allotment(redis_server: RedisServer) -> None:
    limits = SchedulerLimits(global_limit=2, session_limit=2, queue_timeout=None)

    def cluster() -> RedisCluster:
        return RedisCluster(redis_server.url, namespace="z", lease_ttl=2.0, refresh_interval=0.5)

    holder = ConcurrencyScheduler(limits, cluster=cluster())
    holders = _Holders()
    waiter: ConcurrencyScheduler | None = None
    try:
        async with _probe(redis_server.url) as probe:
            holders.start(holder, "a", ToolKind.READ_ONLY)
            holders.start(holder, "a", ToolKind.READ_ONLY)
            await until(lambda: holders.entered == 2, MARGIN, "the first worker took it all")
            baseline = await _client_count(probe)
            before = set(asyncio.all_tasks())
            waiter = ConcurrencyScheduler(limits, cluster=cluster())
            closing = waiter
            mine = _cluster_tasks(before)
            assert len(mine) == 2  # its refresher and its listener

            async def call() -> None:
                async with closing.slot("b", ToolKind.READ_ONLY):
                    pytest.fail("admitted with a zero allotment")

            callers = [asyncio.create_task(call()) for _ in range(3)]

            def queued_on_zero() -> bool:
                view = cluster_view(closing)
                return (
                    view.workers == 2
                    and view.allotment_global == 0
                    and not view.degraded
                    and closing.stats().queued == 3
                )

            await until(queued_on_zero, MARGIN, "queued on a zero allotment")
            worker_id = cluster_view(closing).worker_id
            assert await probe.hexists("z:workers", worker_id)
            started = time.monotonic()
            await closing.close()
            assert time.monotonic() - started < MARGIN
            # Woken at once with the error the local scheduler's close gives its waiters.
            results = await asyncio.wait_for(
                asyncio.gather(*callers, return_exceptions=True), MARGIN
            )
            assert all(isinstance(r, SchedulerClosed) for r in results), results
            with pytest.raises(SchedulerClosed):
                async with closing.slot("b", ToolKind.READ_ONLY):
                    pass
            stats = closing.stats()
            assert stats.in_flight == 0 and stats.queued == 0 and stats.closed
            assert all(t.done() for t in mine)
            assert not await probe.hexists("z:workers", worker_id)  # its share given back
            await _until_async(lambda: _client_count(probe), baseline, "connections closed")
            assert holder.stats().in_flight == 2 and not cluster_view(holder).degraded
    finally:
        await holders.finish()
        if waiter is not None:
            await waiter.close()
        await holder.close()
    assert pid_alive(redis_server.pid)  # the fixture ends it, and checks


async def _until_async(read: Callable[[], Awaitable[int]], want: int, what: str) -> None:
    deadline = time.monotonic() + MARGIN
    while (got := await read()) != want:
        assert time.monotonic() < deadline, f"never {what}: {got}, not {want}"
        await asyncio.sleep(0.02)


async def test_a_burst_of_one_off_sessions_is_reported_only_up_to_a_bound(
    redis_server: RedisServer,
) -> None:
    # Every session seen since the last report used to be named in it, so a client making
    # each call under a new session id made the refresh script, which blocks Redis for every
    # worker, as long as it liked. Idle sessions are now reported newest first, up to a bound;
    # sessions with calls running or waiting always are.
    from fastgate.cluster._redis import MAX_IDLE_REPORTED

    scheduler = ConcurrencyScheduler(
        SchedulerLimits(global_limit=8, session_limit=2),
        cluster=RedisCluster(redis_server.url, lease_ttl=2.0, refresh_interval=0.2),
    )
    holders = _Holders()
    try:
        holders.start(scheduler, "busy", ToolKind.READ_ONLY)
        await until(lambda: holders.entered == 1, MARGIN, "admitted")
        for i in range(3 * MAX_IDLE_REPORTED):
            # asked for and given up before the next report, as a client's dropped call is
            scheduler.slot(f"one-off-{i}", ToolKind.READ_ONLY)
        async with _probe(redis_server.url) as probe:
            worker = scheduler.stats().cluster
            assert worker is not None

            async def reported() -> dict[str, int]:
                raw = await probe.hget("fastgate:workers", worker.worker_id)
                sessions: dict[str, int] = json.loads(raw or "{}").get("dem", {}).get("s", {})
                return sessions

            deadline = time.monotonic() + MARGIN
            while True:
                sessions = await reported()
                idle = sum(1 for demand in sessions.values() if not demand)
                assert idle <= MAX_IDLE_REPORTED, idle
                if idle and len(sessions) - idle == 1:  # only the busy session is demand
                    break
                assert time.monotonic() < deadline, "the dropped calls never left the report"
                await asyncio.sleep(0.02)
        assert idle == MAX_IDLE_REPORTED
        await holders.finish()
    finally:
        await scheduler.close()
