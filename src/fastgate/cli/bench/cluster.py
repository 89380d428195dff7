"""The "cluster" scenario: 4 worker processes under one cluster-wide cap of 16, 1 ms bodies,
one session flooding from two workers and small sessions on the other two.

fastgate (``ConcurrencyScheduler(cluster=RedisCluster(...))``: leased allotments, local admission)
against the usual way in the same run: a Redis counting semaphore taken per call (a script that
INCRs and, over the cap, DECRs again; the caller retries after ``RETRY_MS``), global then per
session. Every body records entry and exit in a second Redis, so both runs show the highest
concurrency they reached. Needs ``redis-server`` (Debian's package) and the ``cluster`` extra;
without them the scenario says so and measures nothing.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from fastgate.cli.bench.model import BenchConfig, Measurement, Target
from fastgate.cli.bench.redis_server import RedisServer, redis_server_binary

CAP = 16
WORKERS = 4
BODY_MS = 1.0
RETRY_MS = 2.0
#: How long the small sessions call, one call after another (then the flood is stopped): a time
#: box, since a starved session under the per-call semaphore may finish any count very late.
SMALL_SECONDS = {"smoke": 2.0, "quick": 4.0, "full": 10.0}
#: Waits of calls admitted this soon after the start are left out of the p99 (both runs): the
#: first allotments are still being rebalanced then. Every call counts towards throughput.
WARMUP_S = 0.25


def _skip(why: str) -> list[Measurement]:
    return [Measurement("cluster", f"skipped: {why}", 0.0, unit="")]


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else 0.0


def _run(mode: str, seconds: float, root: Path) -> dict[str, Any]:
    from fastgate.cli.bench.cluster_worker import Workers

    with (
        RedisServer(root / f"{mode}-cluster") as cluster,
        RedisServer(root / f"{mode}-probe") as probe,
    ):
        base = {
            "mode": mode,
            "cluster_url": cluster.url,
            "probe_url": probe.url,
            "limits": {"global": CAP, "session": CAP},
            "body_ms": BODY_MS,
            "retry_ms": RETRY_MS,
        }
        flood = {**base, "sessions": [{"id": "flood", "concurrency": 32}], "calls": 0}
        small = [
            {**base, "seconds": seconds, "sessions": [{"id": f"w{w}small{i}", "concurrency": 2}
                                                   for i in range(2)]}
            for w in range(2)
        ]  # fmt: skip
        with Workers(probe.url, [flood, flood, *small]) as workers:
            workers.start()
            for process in workers.processes[2:]:
                process.wait(timeout=workers.timeout)
            workers.stop()
            results = workers.results()
            maxima = workers.maxima()
    start = max(r["started_at"] for r in results)
    end = max(t for r in results[2:] for times in r["finished_at"].values() for t in times)
    done = sum(
        1 for r in results for ts in r["finished_at"].values() for t in ts if start <= t <= end
    )
    small_waits = [
        w
        for r in results[2:]
        for session, ws in r["waits"].items()
        for w, at in zip(ws, r["admitted_at"][session], strict=True)
        if at >= start + WARMUP_S
    ]
    return {
        "throughput": done / (end - start),
        "small_p99": _percentile(small_waits, 0.99),
        "max": maxima.get("global", 0),
    }


def run_cluster(config: BenchConfig, loop: str) -> list[Measurement]:
    if redis_server_binary() is None:
        return _skip("redis-server is not installed (scripts/setup-redis installs it)")
    try:
        import fastgate.cluster  # noqa: F401
    except ImportError:
        return _skip("the cluster extra is not installed (pip install 'fastgate[cluster]')")
    profile = "smoke" if config.ops <= 20_000 else "quick" if config.ops <= 50_000 else "full"
    seconds = SMALL_SECONDS[profile]
    with tempfile.TemporaryDirectory(prefix="fastgate-bench-cluster-") as tmp:
        ours = _run("fastgate", seconds, Path(tmp))
        theirs = _run("semaphore", seconds, Path(tmp))
    reference = f"Redis counting semaphore per call (retry {RETRY_MS:g} ms)"
    return [
        Measurement(
            "cluster",
            "throughput vs per-call semaphore",
            ours["throughput"] / theirs["throughput"],
            reference=reference,
            target=Target(">=", 3.0, 1.5),
            detail=f"{ours['throughput']:.0f}/s vs {theirs['throughput']:.0f}/s, "
            f"{WORKERS} workers, cap {CAP}, {BODY_MS:g} ms bodies",
        ),
        Measurement(
            "cluster",
            "small sessions' p99 wait vs per-call semaphore",
            ours["small_p99"] / max(theirs["small_p99"], 1e-9),
            reference=reference,
            target=Target("<=", 0.2, 0.5),
            detail=f"{ours['small_p99'] * 1000:.2f} ms vs {theirs['small_p99'] * 1000:.2f} ms"
            f" (after the first {WARMUP_S:g} s)",
        ),
        Measurement(
            "cluster",
            "highest concurrency / cap (both)",
            max(ours["max"], theirs["max"]) / CAP,
            unit="",
            target=Target("<=", 1.0, 1.0),
            detail=f"fastgate {ours['max']}, semaphore {theirs['max']}, cap {CAP}",
        ),
    ]
