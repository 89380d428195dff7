"""Whatever a caller puts in a session id (or a pool name) reaches Redis in a form it accepts:
lone surrogates, NUL, newlines, 10 KB ids, ids that look like JSON or Lua patterns. Every worker
stays on its lease, the limits hold cluster-wide, and stats() shows each session readably."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Hashable

import msgspec
import pytest

from fastgate import ConcurrencyScheduler, SchedulerLimits, ToolKind
from fastgate.cli.bench.redis_server import RedisServer
from fastgate.cluster import ClusterStats, RedisCluster
from fastgate.cluster._names import redis_name, shown

#: Ids Redis's JSON decoder refuses, or that once passed through unencoded would be trouble.
HOSTILE_IDS: tuple[Hashable, ...] = (
    "\ud800",  # a lone surrogate: what json.loads('"\\ud800"') gives
    "\udcff\ud800x",  # surrogates reversed, then text
    "nul\x00inside",
    "\x00",
    "line\nbreak\r\n",
    "x" * 10_240,
    '{"s":{"a":1},"g":-5}',  # JSON of a report's shape
    '", "g": 99, "x": "',
    "%a+.-*?[^]$()%1",  # Lua pattern syntax
    "__index",
    "",
    "é😀",
    "\\u0000",
    7,  # not a string: a session of its own, not the string "7"
    "7",
)
LIMITS = SchedulerLimits(
    global_limit=6,
    session_limit=2,
    kind_limits={ToolKind.WRITE: 3},
    pool_limits={"mcp:\ud800\n": 2},
)


def _view(s: ConcurrencyScheduler) -> ClusterStats:
    view = s.stats().cluster
    assert view is not None
    return view


def test_redis_names_are_short_ascii_the_same_everywhere_and_distinct() -> None:
    names = [redis_name(session) for session in HOSTILE_IDS]
    assert len(set(names)) == len(HOSTILE_IDS)
    for name in names:
        assert name.isascii() and name.isalnum() and len(name) == 32
    assert redis_name("\ud800") == redis_name("\ud800")  # a pure function of the id
    assert redis_name("s1") != redis_name("s2")


def test_stats_names_are_readable_and_distinct() -> None:
    names = [shown(session) for session in HOSTILE_IDS]
    assert len(set(names)) == len(HOSTILE_IDS)
    for name in names:
        assert name.isprintable() and len(name) <= 64
        name.encode("utf-8")  # no surrogates left: encodable, JSON-safe
    assert shown("s1") == "s1" and shown("é😀") == "é😀"  # plain ids are shown as they are
    assert shown("\ud800").startswith("\\ud800") and shown("nul\x00inside").startswith("nul\\x00")


async def test_hostile_session_ids_keep_every_worker_on_its_lease_and_the_limits(
    redis_server: RedisServer,
) -> None:
    workers = [
        ConcurrencyScheduler(
            LIMITS, cluster=RedisCluster(redis_server.url, lease_ttl=2.0, refresh_interval=0.25)
        )
        for _ in range(2)
    ]
    live: Counter[object] = Counter()
    peak: Counter[object] = Counter()
    done: Counter[Hashable] = Counter()
    views: list[ClusterStats] = []

    def enter(keys: list[object]) -> None:
        for key in keys:
            live[key] += 1
            peak[key] = max(peak[key], live[key])

    async def call(worker: ConcurrencyScheduler, session: Hashable, i: int) -> None:
        kind = ToolKind.WRITE if i % 3 == 0 else ToolKind.READ_ONLY
        pool = "mcp:\ud800\n" if i % 4 == 0 else None
        keys: list[object] = ["global", ("session", session), kind]
        if pool is not None:
            keys.append(pool)
        async with worker.slot(session, kind, pool=pool):
            enter(keys)
            await asyncio.sleep(0.02)
            for key in keys:
                live[key] -= 1
        done[session] += 1

    async def watch() -> None:
        """Through the run: every worker on a lease Redis granted, never degraded."""
        while True:
            await asyncio.sleep(0.1)
            views.extend(_view(w) for w in workers)

    watcher = asyncio.create_task(watch())
    try:
        async with asyncio.timeout(60):
            await asyncio.gather(
                *(
                    call(workers[i % 2], session, i)
                    for i in range(8)
                    for session in HOSTILE_IDS
                    for _ in range(2)
                )
            )
        watcher.cancel()
        assert all(done[session] == 16 for session in HOSTILE_IDS)
        assert peak["global"] <= 6 and peak[ToolKind.WRITE] <= 3 and peak["mcp:\ud800\n"] <= 2
        assert max(peak[("session", s)] for s in HOSTILE_IDS) <= 2
        assert peak["global"] >= 3  # the shares were used, not one slot at a time
        views.extend(_view(w) for w in workers)
        assert len(views) >= 4
        for view in views:
            assert not view.degraded and view.refresh_failures == 0, view.degraded_reason
            assert view.lease_remaining_s is not None and view.lease_remaining_s > 0
            assert view.workers == 2
            msgspec.json.encode(view)  # the cluster view is JSON-safe, whatever the ids
        assert all(w.stats().admitted == len(HOSTILE_IDS) * 8 for w in workers)
    finally:
        watcher.cancel()
        for w in workers:
            await w.close()


async def test_the_cluster_view_shows_hostile_sessions_readably(
    redis_server: RedisServer,
) -> None:
    scheduler = ConcurrencyScheduler(
        SchedulerLimits(global_limit=8, session_limit=2),
        cluster=RedisCluster(redis_server.url, lease_ttl=2.0, refresh_interval=0.25),
    )
    sessions = ("\ud800", "s1", "x" * 10_240)
    try:
        async with asyncio.timeout(10):
            async with (
                scheduler.slot(sessions[0], ToolKind.READ_ONLY),
                scheduler.slot(sessions[1], ToolKind.READ_ONLY),
                scheduler.slot(sessions[2], ToolKind.READ_ONLY),
            ):
                view = _view(scheduler)
        assert not view.degraded
        assert set(view.allotment_by_session) == {shown(s) for s in sessions}
        assert view.allotment_by_session["s1"] == 2
        assert all(v == 2 for v in view.allotment_by_session.values())
    finally:
        await scheduler.close()


def test_a_namespace_redis_cannot_take_is_refused_at_construction() -> None:
    with pytest.raises(ValueError, match="namespace"):
        RedisCluster("redis://localhost", namespace="fg\ud800")
