"""Real worker processes sharing one namespace: the limits hold cluster-wide, fairly, with no
Redis round trip per admission. Every tool body records entry and exit in a second Redis."""

from __future__ import annotations

from typing import Any

from fastgate.cli.bench.cluster_worker import Workers
from fastgate.cli.bench.redis_server import RedisServer
from tests.cluster.workers_kit import assert_all_gone, jain, p99, rates_in_window, round_trips

LEASES = {"lease_ttl": 3.0, "refresh_interval": 0.5}


def _spec(cluster: RedisServer, probe: RedisServer, **kw: Any) -> dict[str, Any]:
    return {"cluster_url": cluster.url, "probe_url": probe.url, **LEASES, **kw}


def test_limits_never_exceeded_over_thousands_of_calls_from_12_sessions(
    redis_server: RedisServer, second_redis: RedisServer
) -> None:
    limits = {"global": 8, "session": 3, "kinds": {"WRITE": 4}}
    specs = []
    for w in range(3):
        # Each session runs on two of the three workers; even sessions write.
        hosted = [
            {"id": f"s{s}", "kind": "WRITE" if s % 2 == 0 else "READ_ONLY", "concurrency": 2}
            for s in range(12)
            if s % 3 != w
        ]
        specs.append(_spec(redis_server, second_redis, limits=limits, sessions=hosted,
                           calls=60, body_ms=1.0))  # fmt: skip
    before = round_trips(redis_server)
    with Workers(second_redis.url, specs) as workers:
        workers.start()
        results = workers.results()
        maxima = workers.maxima()
        pids = workers.pids
    assert_all_gone(pids)
    after = round_trips(redis_server)
    calls = sum(sum(r["done"].values()) for r in results)
    assert calls == 3 * 8 * 2 * 60  # 2,880 calls, every one admitted
    assert maxima["global"] <= 8
    assert maxima["kind:WRITE"] <= 4
    assert maxima["kind:READ_ONLY"] <= 8
    sessions = {k: v for k, v in maxima.items() if k.startswith("session:")}
    assert len(sessions) == 12 and max(sessions.values()) <= 3
    assert maxima["global"] >= 5  # the cluster's capacity was used, not one worker's share
    trips = after[0] - before[0]
    print(f"safety: {calls} calls, {trips} round trips ({trips / calls:.4f} per admission)")
    assert trips / calls < 0.05, (trips, calls)  # demand shifts here, yet no trip per call


def test_small_sessions_get_their_fair_share_against_a_flood_from_two_workers(
    redis_server: RedisServer, second_redis: RedisServer
) -> None:
    body_ms = 20.0  # long against the per-call overhead of a worker on a shared machine
    limits = {"global": 8, "session": 8}
    flood = [{"id": "flood", "concurrency": 16}]
    small = [{"id": f"small{i}", "concurrency": 4} for i in range(3)]
    specs = [
        _spec(redis_server, second_redis, limits=limits, sessions=flood, calls=0, body_ms=body_ms),
        _spec(redis_server, second_redis, limits=limits, sessions=flood, calls=0, body_ms=body_ms),
        _spec(redis_server, second_redis, limits=limits, sessions=small, calls=30, body_ms=body_ms),
    ]
    with Workers(second_redis.url, specs) as workers:
        workers.start()
        small_result = workers.processes[2]
        small_result.wait(timeout=workers.timeout)
        workers.stop()  # the flood stops once the small sessions are through
        results = workers.results()
        maxima = workers.maxima()
        pids = workers.pids
    assert_all_gone(pids)
    assert maxima["global"] <= 8
    # While every session was backlogged: from the last worker's start to the small ones' end.
    start = max(r["started_at"] for r in results)
    end = max(t for times in results[2]["finished_at"].values() for t in times)
    rates = rates_in_window(results, start, end)
    small_waits = [w for r in results[2:] for s, ws in r["waits"].items() for w in ws]
    service = body_ms / 1000.0
    assert p99(small_waits) <= 12 * service, p99(small_waits) / service
    assert jain(list(rates.values())) >= 0.9, rates
    print("fairness", rates, "small p99 wait", p99(small_waits) / service, "service times")


def test_steady_state_costs_no_redis_round_trip_per_admission(
    redis_server: RedisServer, second_redis: RedisServer
) -> None:
    limits = {"global": 16, "session": 8}
    specs = [
        _spec(redis_server, second_redis, limits=limits, calls=150, body_ms=4.0,
              lease_ttl=3.0, refresh_interval=1.0,
              sessions=[{"id": f"w{w}s{s}", "concurrency": 4} for s in range(2)])
        for w in range(3)
    ]  # fmt: skip
    before = round_trips(redis_server)
    with Workers(second_redis.url, specs) as workers:
        workers.start()
        results = workers.results()
        maxima = workers.maxima()
        pids = workers.pids
    assert_all_gone(pids)
    trips, commands = (a - b for a, b in zip(round_trips(redis_server), before, strict=True))
    calls = sum(sum(r["done"].values()) for r in results)
    rate = calls / max(r["elapsed"] for r in results)
    assert calls == 3 * 8 * 150 and maxima["global"] <= 16
    print(
        f"steady: {calls} calls at {rate:.0f}/s, {trips} round trips ({trips / calls:.4f} per"
        f" admission), {commands} commands in Redis ({commands / calls:.4f} per admission)"
    )
    assert rate >= 500  # the run is the steady load it is meant to be (target: 1,000/s)
    assert trips / calls < 0.05
