"""``ConcurrencyScheduler(cluster=RedisCluster(...))`` in one process, against a real Redis."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from fastgate import ConcurrencyScheduler, ResourceExhausted, SchedulerLimits, ToolKind
from fastgate.cli.bench.redis_server import RedisServer
from fastgate.cluster import ClusterStats, RedisCluster

KINDS = (ToolKind.READ_ONLY, ToolKind.WRITE)
FAST = {"lease_ttl": 2.0, "refresh_interval": 0.5}


def _cluster(url: str, **kw: object) -> RedisCluster:
    return RedisCluster(url, **{**FAST, **kw})  # type: ignore[arg-type]


def _view(s: ConcurrencyScheduler) -> ClusterStats:
    view = s.stats().cluster
    assert view is not None
    return view


async def test_limits_hold_over_two_schedulers_sharing_a_namespace(
    redis_server: RedisServer,
) -> None:
    limits = SchedulerLimits(global_limit=5, session_limit=3, kind_limits={ToolKind.WRITE: 2})
    workers = [ConcurrencyScheduler(limits, cluster=_cluster(redis_server.url)) for _ in range(2)]
    live = {"global": 0, "a": 0, "b": 0, "c": 0, "write": 0}
    peak = dict(live)

    async def call(worker: ConcurrencyScheduler, session: str, kind: ToolKind) -> None:
        async with worker.slot(session, kind):
            keys = ["global", session] + (["write"] if kind is ToolKind.WRITE else [])
            for key in keys:
                live[key] += 1
                peak[key] = max(peak[key], live[key])
            await asyncio.sleep(0.002)
            for key in keys:
                live[key] -= 1

    try:
        await asyncio.gather(
            *(
                call(
                    workers[i % 2],
                    "abc"[i % 3],
                    ToolKind.WRITE if i % 4 == 0 else ToolKind.READ_ONLY,
                )
                for i in range(600)
            )
        )
        assert peak["global"] <= 5 and peak["write"] <= 2
        assert max(peak["a"], peak["b"], peak["c"]) <= 3
        assert peak["global"] >= 3  # the shares were used, not just one slot at a time
        views = [_view(w) for w in workers]
        assert all(v.workers == 2 and not v.degraded for v in views)
        assert sum(w.stats().admitted for w in workers) == 600
    finally:
        for w in workers:
            await w.close()


async def test_stats_show_the_lease_and_close_gives_it_back(redis_server: RedisServer) -> None:
    scheduler = ConcurrencyScheduler(
        SchedulerLimits(global_limit=4, session_limit=2),
        cluster=_cluster(redis_server.url, namespace="ns1"),
    )
    client = aioredis.from_url(redis_server.url)
    try:
        async with scheduler.slot("s1", ToolKind.READ_ONLY):
            view = _view(scheduler)
            assert view.namespace == "ns1" and view.workers == 1
            assert view.allotment_by_session["s1"] == 2
            assert 1 <= view.allotment_global <= 4
            assert view.lease_remaining_s is not None and 0 < view.lease_remaining_s <= 2.0
            assert view.redis_round_trips >= 1 and view.refresh_failures == 0
            assert await client.hexists("ns1:workers", view.worker_id)
        await scheduler.close()
        assert not await client.hexists("ns1:workers", view.worker_id)
        assert await client.zcard("ns1:leases") == 0
    finally:
        await scheduler.close()
        await client.aclose()


async def test_unreachable_redis_at_start_is_degraded_and_bounded(tmp_path: Path) -> None:
    url = f"unix://{tmp_path / 'nobody-listens.sock'}"
    scheduler = ConcurrencyScheduler(
        SchedulerLimits(global_limit=8, session_limit=8), cluster=_cluster(url, fallback_share=1)
    )
    release = asyncio.Event()
    first_in = asyncio.Event()
    entered: list[str] = []

    async def call(session: str, kind: ToolKind) -> None:
        async with scheduler.slot(session, kind):
            entered.append(session)
            first_in.set()
            await release.wait()

    try:
        first = asyncio.create_task(call("a", ToolKind.READ_ONLY))
        await first_in.wait()  # admitted once the first refresh failed: the fallback share
        view = _view(scheduler)
        assert view.degraded and view.degraded_reason is not None
        assert "unreachable" in view.degraded_reason
        assert view.allotment_by_kind == {"READ_ONLY": 1, "WRITE": 1, "EXECUTE": 1}
        others = [asyncio.create_task(call(s, ToolKind.READ_ONLY)) for s in "bcd"]
        writer = asyncio.create_task(call("e", ToolKind.WRITE))
        for _ in range(5):
            await asyncio.sleep(0)
        stats = scheduler.stats()
        assert stats.in_flight_by_kind["READ_ONLY"] == 1 and stats.queued_by_kind["READ_ONLY"] == 3
        assert stats.in_flight_by_kind["WRITE"] == 1  # one per kind
        release.set()
        await asyncio.gather(first, writer, *others)
        assert sorted(entered) == list("abcde")
    finally:
        await scheduler.close()


async def test_fallback_share_zero_admits_nothing_without_redis(tmp_path: Path) -> None:
    url = f"unix://{tmp_path / 'nobody-listens.sock'}"
    scheduler = ConcurrencyScheduler(
        SchedulerLimits(queue_timeout=0.3), cluster=_cluster(url, fallback_share=0)
    )
    try:
        with pytest.raises(ResourceExhausted):
            async with scheduler.slot("a", ToolKind.READ_ONLY):
                pytest.fail("admitted without Redis and without a fallback share")
        assert _view(scheduler).degraded
    finally:
        await scheduler.close()


async def test_a_session_new_to_the_worker_gets_a_share_without_waiting_a_refresh(
    redis_server: RedisServer,
) -> None:
    # refresh_interval 5 s: the share must come from the early refresh a new session asks for.
    scheduler = ConcurrencyScheduler(
        SchedulerLimits(global_limit=4, session_limit=2),
        cluster=_cluster(redis_server.url, lease_ttl=20.0, refresh_interval=5.0),
    )
    try:
        # A guard, not a measurement: waiting for the periodic refresh would take 5 s each.
        async with asyncio.timeout(4.5):
            for name in ("first", "second", "third"):
                async with scheduler.slot(name, ToolKind.READ_ONLY):
                    pass
        assert scheduler.stats().admitted == 3
        assert _view(scheduler).redis_round_trips >= 3  # the first refresh and the early ones
    finally:
        await scheduler.close()


def test_bad_settings_name_the_field() -> None:
    with pytest.raises(ValueError, match="lease_ttl"):
        RedisCluster("redis://localhost", lease_ttl=1.0, refresh_interval=1.0)
    with pytest.raises(ValueError, match="fallback_share"):
        RedisCluster("redis://localhost", fallback_share=-1)
    with pytest.raises(ValueError, match="refresh_interval"):
        RedisCluster("redis://localhost", refresh_interval=float("nan"))
    with pytest.raises(ValueError, match="url"):
        RedisCluster("")


def test_a_cluster_needs_a_running_loop() -> None:
    with pytest.raises(RuntimeError, match="running event loop"):
        ConcurrencyScheduler(cluster=RedisCluster("redis://localhost"))


async def test_after_redis_lost_its_data_a_new_worker_yields_to_the_old_leases(
    redis_server: RedisServer,
) -> None:
    # Redis forgets everything (as after a restart without persistence) while an old worker
    # runs its whole share, and a new worker that never held a lease arrives at once. Redis
    # cannot tell that from a first start, so the new worker may get a share; once the old
    # worker has reported its lease of the lost state, the new worker's share shrinks to what
    # is left (nothing) and it admits nothing more while the old calls run (docs/cluster.md).
    limits = SchedulerLimits(global_limit=4, session_limit=4)
    settings = {"lease_ttl": 4.0, "refresh_interval": 0.5}
    old = ConcurrencyScheduler(limits, cluster=_cluster(redis_server.url, **settings))
    client = aioredis.from_url(redis_server.url)
    release = asyncio.Event()
    all_in = asyncio.Event()
    held = 0

    async def hold() -> None:
        nonlocal held
        async with old.slot("a", ToolKind.READ_ONLY):
            held += 1
            if held == 4:
                all_in.set()
            await release.wait()

    holders = [asyncio.create_task(hold()) for _ in range(4)]
    new: ConcurrencyScheduler | None = None
    flood: list[asyncio.Task[None]] = []
    try:
        await all_in.wait()
        await client.flushall()
        new = ConcurrencyScheduler(limits, cluster=_cluster(redis_server.url, **settings))
        newcomer = new

        async def call() -> None:
            while True:
                async with newcomer.slot("b", ToolKind.READ_ONLY):
                    await asyncio.sleep(0.005)

        flood = [asyncio.create_task(call()) for _ in range(4)]

        def yielded() -> bool:
            # It has heard of the old worker (which reported since) and holds no share.
            view = _view(newcomer)
            return (
                view.workers == 2 and view.allotment_global == 0 and not newcomer.stats().in_flight
            )

        # Within about two refresh intervals; a guard, not a measurement.
        deadline = asyncio.get_running_loop().time() + 3.0
        while not yielded():
            assert asyncio.get_running_loop().time() < deadline, "never gave its share up"
            await asyncio.sleep(0.05)  # a state to observe, not a synchronization
        admitted = new.stats().admitted
        await asyncio.sleep(4 * settings["refresh_interval"])  # several refreshes go by
        assert new.stats().admitted == admitted, "admitted while the old lease ran its share"
        assert old.stats().in_flight == 4
        release.set()
        await asyncio.gather(*holders)
    finally:
        release.set()
        for task in flood:
            task.cancel()
        await asyncio.gather(*holders, *flood, return_exceptions=True)
        await old.close()
        if new is not None:
            await new.close()
        await client.aclose()
