"""Faults with real worker processes: a worker killed or frozen, Redis restarted or absent.
Every test ends with every process it started gone (pids checked)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

from fastgate import ConcurrencyScheduler, SchedulerLimits, ToolKind
from fastgate.cli.bench.cluster_worker import Workers
from fastgate.cli.bench.redis_server import RedisServer
from fastgate.cluster import RedisCluster
from tests.cluster.workers_kit import assert_all_gone, watch

TTL = 1.0
REFRESH = 0.25
LIMITS = {"global": 6, "session": 6}


def _specs(cluster: RedisServer, probe: RedisServer, n: int = 3, **kw: Any) -> list[dict[str, Any]]:
    return [
        {
            "cluster_url": cluster.url,
            "probe_url": probe.url,
            "lease_ttl": TTL,
            "refresh_interval": REFRESH,
            "limits": LIMITS,
            "sessions": [{"id": f"w{i}", "concurrency": 8}],  # each worker floods
            "calls": 0,
            "body_ms": 10.0,
            "report_every": 0.05,
            **kw,
        }
        for i in range(n)
    ]


def _views(rows: dict[int, dict[str, Any]], pids: list[int]) -> list[dict[str, Any]]:
    return [rows[pid]["cluster"] for pid in pids if pid in rows]


def _steady(pids: list[int]):  # type: ignore[no-untyped-def]
    def check(rows: dict[int, dict[str, Any]]) -> bool:
        views = _views(rows, pids)
        return len(views) == len(pids) and all(
            v["workers"] == len(pids) and v["allotment_global"] >= 1 and not v["degraded"]
            for v in views
        )

    return check


def test_a_killed_workers_share_returns_within_the_lease(
    redis_server: RedisServer, second_redis: RedisServer
) -> None:
    with Workers(second_redis.url, _specs(redis_server, second_redis)) as workers:
        workers.start()
        pids = workers.pids
        watch(workers, _steady(pids))
        victim, others = pids[0], pids[1:]
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()

        def back(rows: dict[int, dict[str, Any]]) -> bool:
            views = _views(rows, others)
            fresh = [rows[p]["at"] > time.time() - 0.2 for p in others if p in rows]
            return (
                len(views) == 2
                and all(fresh)
                and all(v["workers"] == 2 for v in views)
                and sum(v["allotment_global"] for v in views) == LIMITS["global"]
            )

        _, returned_at = watch(workers, back)
        workers.stop()
        workers.results(skip=(0,))
    assert_all_gone(pids)
    took = returned_at - killed_at
    print(f"share back {took:.2f}s after SIGKILL (lease_ttl {TTL}s, refresh {REFRESH}s)")
    # lease_ttl plus one refresh, and a margin for a shared machine's scheduling.
    assert took <= TTL + REFRESH + 0.5


def test_a_frozen_worker_admits_nothing_on_its_stale_lease(
    redis_server: RedisServer, second_redis: RedisServer
) -> None:
    specs = _specs(redis_server, second_redis, mark_stale=True)
    with Workers(second_redis.url, specs) as workers:
        workers.start()
        pids = workers.pids
        rows, _ = watch(workers, _steady(pids))
        frozen, others = pids[0], pids[1:]
        # Its calls in flight stay counted while it is frozen: the inherent overlap of leases.
        workers.freeze(frozen)

        def given_away(rows: dict[int, dict[str, Any]]) -> bool:
            views = _views(rows, others)
            return len(views) == 2 and sum(v["allotment_global"] for v in views) == 6

        watch(workers, given_away)
        os.kill(frozen, signal.SIGCONT)
        resumed = time.time()

        def rejoined(rows: dict[int, dict[str, Any]]) -> bool:
            row = rows.get(frozen)
            return (
                row is not None
                and row["at"] > resumed
                and row["cluster"]["workers"] == 3
                and row["cluster"]["allotment_global"] >= 1
            )

        watch(workers, rejoined)
        watch(workers, _steady(pids))
        workers.stop()
        results = workers.results()
        fresh = workers.maxima()["fresh"]
    assert_all_gone(pids)
    # What was admitted after the freeze never exceeded the limit: the frozen worker took
    # nothing on its old lease when it resumed, the others only what it had lost.
    assert fresh <= LIMITS["global"], fresh
    # Only what it had granted before the freeze entered on the lapsed lease: at most its
    # allotment then, and no admission in between (the count stands still); admitting anew
    # would have let in a caller per released slot.
    stale = results[0]["stale_entries"]
    assert len(stale) <= rows[frozen]["cluster"]["allotment_global"], stale
    assert len(set(stale)) <= 1, stale


def test_redis_restarted_mid_run_workers_degrade_then_recover(
    redis_server: RedisServer, second_redis: RedisServer
) -> None:
    with Workers(second_redis.url, _specs(redis_server, second_redis, fallback_share=1)) as w:
        w.start()
        pids = w.pids
        watch(w, _steady(pids))
        redis_server.stop()

        def degraded(rows: dict[int, dict[str, Any]]) -> bool:
            views = _views(rows, pids)
            return len(views) == 3 and all(
                v["degraded"] and v["allotment_by_kind"]["READ_ONLY"] <= 1 for v in views
            )

        rows, _ = watch(w, degraded)
        assert all("unreachable" in v["degraded_reason"] for v in _views(rows, pids))
        redis_server.start()
        watch(w, _steady(pids))  # the same processes, leases again
        w.stop()
        results = w.results()
        maxima = w.maxima()
    assert_all_gone(pids)
    assert maxima["global"] <= LIMITS["global"]
    assert all(r["stats"]["cluster"]["refresh_failures"] >= 1 for r in results)


async def test_redis_unreachable_at_start_then_found(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "late")
    scheduler = ConcurrencyScheduler(
        SchedulerLimits(global_limit=4, session_limit=4),
        cluster=RedisCluster(server.url, lease_ttl=TTL, refresh_interval=REFRESH),
    )
    try:
        async with scheduler.slot("a", ToolKind.READ_ONLY):
            view = scheduler.stats().cluster
            assert view is not None and view.degraded and view.allotment_global == 3
        await asyncio.to_thread(server.start)
        deadline = time.monotonic() + 10
        while (view := scheduler.stats().cluster) is not None and view.degraded:
            assert time.monotonic() < deadline, "never recovered"
            await asyncio.sleep(REFRESH / 4)  # a state to observe, not a synchronization
        assert view is not None and view.workers == 1 and view.allotment_global == 4
    finally:
        await scheduler.close()
        server.stop()
