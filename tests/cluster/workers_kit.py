"""Shared pieces of the multi-process cluster tests."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import redis

from fastgate import ConcurrencyScheduler
from fastgate.cli.bench.cluster_worker import Workers
from fastgate.cli.bench.redis_server import RedisServer, pid_alive
from fastgate.cluster import ClusterStats


def round_trips(server: RedisServer) -> tuple[int, int]:
    """(client round trips to the cluster's Redis, commands run there including the scripts'
    own), from ``INFO commandstats`` since the server started."""
    client = redis.Redis.from_url(server.url)
    try:
        stats: dict[str, Any] = client.info("commandstats")
    finally:
        client.close()
    total = sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")
    trips = sum(
        int(stats.get(k, {}).get("calls", 0))
        for k in ("cmdstat_evalsha", "cmdstat_eval", "cmdstat_script|load", "cmdstat_script")
    )
    return trips, total


def assert_all_gone(pids: list[int]) -> None:
    alive = [pid for pid in pids if pid_alive(pid)]
    assert not alive, f"worker processes outlived the test: {alive}"


def jain(values: list[float]) -> float:
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values))


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def rates_in_window(results: list[dict[str, Any]], start: float, end: float) -> dict[str, float]:
    """Calls per second of each session, counting the calls that finished in [start, end]."""
    rates: dict[str, float] = {}
    for r in results:
        for session, times in r["finished_at"].items():
            n = sum(1 for t in times if start <= t <= end)
            rates[session] = rates.get(session, 0.0) + n / (end - start)
    return rates


def watch(
    workers: Workers, until: Callable[[dict[int, dict[str, Any]]], bool], timeout: float = 30.0
) -> tuple[dict[int, dict[str, Any]], float]:
    """Read the workers' stats rows (each pushes one every ``report_every``) until ``until``
    holds of the latest row per pid; returns those rows and when (monotonic) it held."""
    latest: dict[int, dict[str, Any]] = {}
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"the cluster never reached the state waited for: {latest}")
        item = workers.probe.blpop(["stats"], timeout=max(0.01, min(left, 1.0)))
        if item is None:
            continue
        row = json.loads(item[1])
        latest[row["pid"]] = row
        if until(latest):
            return latest, time.monotonic()


def cluster_view(s: ConcurrencyScheduler) -> ClusterStats:
    """The scheduler's view of the cluster (it has one: the test made it with a cluster)."""
    view = s.stats().cluster
    assert view is not None
    return view


async def until(check: Callable[[], bool], within: float, what: str) -> None:
    """Poll a state (not a synchronization by sleeping) until it holds, or fail."""
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, f"never {what}"
        await asyncio.sleep(0.02)
