"""Redis's records going back in time while workers still run their leases: a restart that loads
an older snapshot, a jump of Redis's clock past every lease, records removed by another client;
and Redis's clock going back, which must not keep a dead worker's share for as long as the jump.

Each case: worker A held the whole cap, gave it back, worker B now runs the whole cap; Redis's
state then loses B's share, and A sees a new session. A must not be granted what B runs: the
cap holds over both workers, and the namespace is in its grace (no grant grows until the
leases Redis lost track of are known)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable

import pytest
import redis.asyncio as aioredis

from fastgate import ConcurrencyScheduler, SchedulerLimits, ToolKind
from fastgate.cli.bench.redis_server import RedisServer
from fastgate.cluster import RedisCluster
from fastgate.cluster._names import redis_name
from tests.cluster.workers_kit import cluster_view, until

pytestmark = pytest.mark.slow

CAP = 4
#: A bound on anything the code promises "within a refresh" or "at once", with room for a
#: loaded 2-core machine; a guard, not a measurement.
MARGIN = 6.0

Disturb = Callable[[RedisServer, aioredis.Redis], Awaitable[None]]


async def holding(worker: ConcurrencyScheduler, session: str, release: asyncio.Event) -> None:
    """One slot of ``worker`` held for ``session`` until ``release``."""
    async with worker.slot(session, ToolKind.READ_ONLY):
        await release.wait()


async def _redis_now_ms(client: aioredis.Redis) -> int:
    seconds, micros = await client.time()
    return int(seconds) * 1000 + int(micros) // 1000


async def _nothing(server: RedisServer, client: aioredis.Redis) -> None:
    return None


async def _snapshot(server: RedisServer, client: aioredis.Redis) -> None:
    await client.save()  # dump.rdb in the server's directory, loaded when it starts again


async def _restart_from_the_snapshot(server: RedisServer, client: aioredis.Redis) -> None:
    server.stop()
    server.start()


async def _clock_jumps_past_every_lease(server: RedisServer, client: aioredis.Redis) -> None:
    # What the script sees when Redis's clock steps forward: every stored lease end is past.
    now = await _redis_now_ms(client)
    workers = [w for w in await client.zrange("fastgate:leases", 0, -1) if isinstance(w, bytes)]
    await client.zadd("fastgate:leases", dict.fromkeys(workers, now - 1))


async def _records_removed(server: RedisServer, client: aioredis.Redis) -> None:
    await client.delete("fastgate:workers", "fastgate:leases")


CASES: dict[str, tuple[Disturb, Disturb]] = {
    "restart from an older snapshot": (_snapshot, _restart_from_the_snapshot),
    "redis clock jumped past the leases": (_nothing, _clock_jumps_past_every_lease),
    "records removed by another client": (_nothing, _records_removed),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_lost_records_never_let_a_worker_take_what_another_runs(
    redis_server: RedisServer, case: str
) -> None:
    before, disturb = CASES[case]
    limits = SchedulerLimits(global_limit=CAP, session_limit=CAP)
    # B refreshes rarely: A, woken by a new session, is the first to reach Redis afterwards.
    a = ConcurrencyScheduler(
        limits, cluster=RedisCluster(redis_server.url, lease_ttl=6.0, refresh_interval=1.0)
    )
    b = ConcurrencyScheduler(
        limits, cluster=RedisCluster(redis_server.url, lease_ttl=20.0, refresh_interval=8.0)
    )
    client = aioredis.from_url(redis_server.url)
    gates = {session: asyncio.Event() for session in ("a", "b", "c")}
    live = {"now": 0, "peak": 0}

    async def hold(worker: ConcurrencyScheduler, session: str) -> None:
        async with worker.slot(session, ToolKind.READ_ONLY):
            live["now"] += 1
            live["peak"] = max(live["peak"], live["now"])
            try:
                await gates[session].wait()
            finally:
                live["now"] -= 1

    tasks: list[asyncio.Task[None]] = []
    try:
        first = [asyncio.create_task(hold(a, "a")) for _ in range(CAP)]
        tasks += first
        await until(lambda: a.stats().in_flight == CAP, MARGIN, "A ran the whole cap")
        epoch = await client.hget("fastgate:epoch", "id")
        await before(redis_server, client)
        gates["a"].set()
        await asyncio.gather(*first)
        tasks += [asyncio.create_task(hold(b, "b")) for _ in range(CAP)]
        await until(lambda: b.stats().in_flight == CAP, MARGIN, "B ran the whole cap")
        # Steady state: the epoch never changed, no grace.
        assert await client.hget("fastgate:epoch", "id") == epoch
        assert not cluster_view(a).grace and not cluster_view(b).grace

        await client.aclose()
        client = aioredis.from_url(redis_server.url)
        await disturb(redis_server, client)
        disturbed = time.monotonic()
        tasks += [asyncio.create_task(hold(a, "c")) for _ in range(CAP)]

        def refreshed_since() -> bool:
            view = cluster_view(a)
            age = view.lease_age_s
            return not view.degraded and age is not None and age < time.monotonic() - disturbed

        await until(refreshed_since, MARGIN, "A refreshed after the disturbance")
        assert a.stats().in_flight + b.stats().in_flight <= CAP
        assert live["peak"] <= CAP, f"{live['peak']} calls ran at once, the cap is {CAP}"
        assert cluster_view(a).grace, "no grace while B's lease runs on a share Redis lost"
        assert b.stats().in_flight == CAP  # B's calls run on
    finally:
        for gate in gates.values():
            gate.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await a.close()
        await b.close()
        await client.aclose()


async def test_a_redis_that_refuses_info_still_grants_leases(redis_server: RedisServer) -> None:
    """The check of which Redis process answers is skipped where INFO is refused (an ACL)."""
    admin = aioredis.from_url(redis_server.url)
    await admin.acl_setuser(
        "worker",
        enabled=True,
        passwords=["+pw"],
        keys=["*"],
        channels=["*"],
        commands=["+@all", "-info"],
    )
    url = redis_server.url.replace("unix://", "unix://worker:pw@")
    worker = ConcurrencyScheduler(
        SchedulerLimits(global_limit=CAP, session_limit=CAP),
        cluster=RedisCluster(url, lease_ttl=2.0, refresh_interval=0.5),
    )
    try:
        for session in ("s1", "s2", "s3"):
            async with worker.slot(session, ToolKind.READ_ONLY):
                pass
        view = cluster_view(worker)
        assert not view.degraded, view.degraded_reason
        assert not view.grace and view.allotment_global >= 1
        assert await admin.hget("fastgate:epoch", "run") is None
    finally:
        await worker.close()
        await admin.aclose()


HOUR_MS = 3_600_000


def _dead_record(held: dict[str, object]) -> str:
    """The record of a worker that refreshed just before Redis's clock went back an hour, then
    died: what the script wrote, with a lease of 1 s."""
    record = {
        "lim": {"g": CAP, "s": CAP, "k": [CAP, CAP, CAP], "p": {}},
        "dem": {"s": {}, "k": [0, 0, 0], "p": {}},
        "held": {"g": 0, "s": {}, "k": [0, 0, 0], "p": {}, **held},
        "ttl": 1000,
    }
    return json.dumps(record)


HELD = {
    "the global cap": ({"g": CAP, "k": [CAP, 0, 0]}, "s1", ToolKind.READ_ONLY),
    "a kind's limit": ({"g": 2, "k": [0, 2, 0]}, "s1", ToolKind.WRITE),
    "a session's limit": ({"g": CAP, "s": {redis_name("s1"): CAP}, "k": [CAP, 0, 0]}, "s1",
                          ToolKind.READ_ONLY),
}  # fmt: skip


@pytest.mark.parametrize("what", list(HELD))
async def test_a_dead_workers_share_returns_within_its_ttl_after_the_clock_went_back(
    redis_server: RedisServer, what: str
) -> None:
    held, session, kind = HELD[what]
    client = aioredis.from_url(redis_server.url)
    limits = SchedulerLimits(
        global_limit=CAP, session_limit=CAP, kind_limits={ToolKind.WRITE: 2}, queue_timeout=30.0
    )
    now = await _redis_now_ms(client)
    await client.hset("fastgate:workers", "dead", _dead_record(held))
    await client.zadd("fastgate:leases", {"dead": now + HOUR_MS})
    worker = ConcurrencyScheduler(
        limits, cluster=RedisCluster(redis_server.url, lease_ttl=2.0, refresh_interval=0.5)
    )
    try:
        # Within the dead worker's 1 s lease and a few refreshes; a guard, not a measurement.
        async with asyncio.timeout(MARGIN):
            async with worker.slot(session, kind):
                pass
        assert await client.zscore("fastgate:leases", "dead") is None  # lapsed
    finally:
        await worker.close()
        await client.aclose()


async def test_a_live_workers_share_stays_held_when_the_clock_went_back(
    redis_server: RedisServer,
) -> None:
    """Bounding lease ends never frees what a live worker runs: its end is brought to its ttl
    from now, and it refreshes before that."""
    limits = SchedulerLimits(global_limit=CAP, session_limit=CAP)
    client = aioredis.from_url(redis_server.url)
    b = ConcurrencyScheduler(
        limits, cluster=RedisCluster(redis_server.url, lease_ttl=2.0, refresh_interval=0.5)
    )
    a: ConcurrencyScheduler | None = None
    release = asyncio.Event()

    tasks = [asyncio.create_task(holding(b, "b", release)) for _ in range(CAP)]
    try:
        await until(lambda: b.stats().in_flight == CAP, MARGIN, "B ran the whole cap")
        now = await _redis_now_ms(client)
        (b_id,) = [w for w in await client.zrange("fastgate:leases", 0, -1) if isinstance(w, bytes)]
        await client.zadd("fastgate:leases", {b_id: now + HOUR_MS})
        a = ConcurrencyScheduler(
            limits, cluster=RedisCluster(redis_server.url, lease_ttl=2.0, refresh_interval=0.5)
        )
        waiting = a
        tasks.append(asyncio.create_task(holding(a, "a", release)))
        started = time.monotonic()

        def refreshed_twice() -> bool:
            age = cluster_view(waiting).lease_age_s
            return (
                cluster_view(waiting).redis_round_trips >= 3
                and age is not None
                and (age < time.monotonic() - started - 2.0)
            )

        await until(refreshed_twice, MARGIN, "A refreshed past B's bounded lease end")
        assert a.stats().in_flight == 0 and b.stats().in_flight == CAP
        score = await client.zscore("fastgate:leases", b_id)
        assert score is not None and score <= await _redis_now_ms(client) + 2000
    finally:
        release.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        await b.close()
        if a is not None:
            await a.close()
        await client.aclose()


async def test_after_a_restart_from_a_snapshot_a_new_worker_waits_for_the_old_leases(
    redis_server: RedisServer,
) -> None:
    """The snapshot holds the namespace's epoch and no worker (the one then running had left);
    B joins and runs the whole cap; Redis restarts from the snapshot and a worker that never
    held a lease reaches it first. Redis knows it is another process: no grant grows until the
    old leases are known (the newcomer, with no fallback share, admits nothing)."""
    limits = SchedulerLimits(global_limit=CAP, session_limit=CAP)
    client = aioredis.from_url(redis_server.url)
    first = ConcurrencyScheduler(
        limits, cluster=RedisCluster(redis_server.url, lease_ttl=2.0, refresh_interval=0.5)
    )
    async with first.slot("a", ToolKind.READ_ONLY):
        pass
    await first.close()
    await client.save()
    b = ConcurrencyScheduler(
        limits, cluster=RedisCluster(redis_server.url, lease_ttl=20.0, refresh_interval=8.0)
    )
    c: ConcurrencyScheduler | None = None
    release = asyncio.Event()

    tasks = [asyncio.create_task(holding(b, "b", release)) for _ in range(CAP)]
    try:
        await until(lambda: b.stats().in_flight == CAP, MARGIN, "B ran the whole cap")
        await client.aclose()
        redis_server.stop()
        redis_server.start()
        client = aioredis.from_url(redis_server.url)
        c = ConcurrencyScheduler(
            limits,
            cluster=RedisCluster(
                redis_server.url, lease_ttl=6.0, refresh_interval=1.0, fallback_share=0
            ),
        )
        newcomer = c
        tasks += [asyncio.create_task(holding(c, "c", release)) for _ in range(CAP)]

        def answered() -> bool:  # a share for its session, or the grace (none to be had)
            view = cluster_view(newcomer)
            return "c" in view.allotment_by_session or view.grace

        await until(answered, MARGIN, "the new worker had its answer from Redis")
        assert c.stats().in_flight + b.stats().in_flight <= CAP
        assert cluster_view(c).grace and b.stats().in_flight == CAP
    finally:
        release.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await b.close()
        if c is not None:
            await c.close()
        await client.aclose()
