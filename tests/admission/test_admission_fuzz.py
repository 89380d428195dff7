"""Random workloads through the real async façades, with cancellations at random moments.

Each call passes the gate, a scheduler slot (in a pool or not) and a file lock, in the executor's
order. Inside, the test counts holders per dimension; afterwards everything must be back to zero:
no slot, gate passage, lock entry or task leaks, whatever was cancelled where. A small queue
makes calls refused, or displaced by another session's, cancellations landing on them too.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastgate import (
    ConcurrencyScheduler,
    FileLockManager,
    ResourceExhausted,
    SchedulerLimits,
    ToolConcurrencyGate,
    ToolKind,
)

call = st.tuples(
    st.sampled_from("abcd"),  # session
    st.sampled_from(list(ToolKind)),
    st.sampled_from([None, "pool-1", "pool-2", "unlimited"]),  # scheduler pool
    st.booleans(),  # exclusive at the gate
    st.sampled_from(["p0", "p1", "p2", None]),  # file locked while running
    st.integers(0, 3),  # loop iterations spent inside
    st.one_of(st.none(), st.integers(0, 8)),  # cancel after this many loop iterations
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    calls=st.lists(call, min_size=1, max_size=40),
    global_limit=st.integers(1, 6),
    session_limit=st.integers(1, 3),
    kind_limit=st.integers(1, 3),
    pool_limits=st.dictionaries(st.sampled_from(["pool-1", "pool-2"]), st.integers(1, 2)),
    max_queue=st.sampled_from([0, 1, 2, 3, 5, 1024]),
)
def test_random_workload_respects_limits_and_leaks_nothing(
    runner: asyncio.Runner,
    tmp_path: Path,
    calls: list[tuple[object, ...]],
    global_limit: int,
    session_limit: int,
    kind_limit: int,
    pool_limits: dict[str, int],
    max_queue: int,
) -> None:
    limits = SchedulerLimits(
        global_limit,
        session_limit,
        dict.fromkeys(ToolKind, kind_limit),
        pool_limits,
        max_queue=max_queue,
    )
    runner.run(_scenario(tmp_path, calls, limits))


async def _scenario(
    tmp_path: Path, calls: list[tuple[object, ...]], limits: SchedulerLimits
) -> None:
    sched = ConcurrencyScheduler(limits)
    gate = ToolConcurrencyGate()
    locks = FileLockManager()
    total = 0
    by_session: Counter[object] = Counter()
    by_kind: Counter[object] = Counter()
    by_pool: Counter[object] = Counter()
    files: set[str] = set()
    completed = 0

    async def one(
        session: str,
        kind: ToolKind,
        pool: str | None,
        exclusive: bool,
        path: str | None,
        spin: int,
    ) -> None:
        nonlocal total, completed
        async with gate.exclusive() if exclusive else gate.shared():
            async with sched.slot(session, kind, owner=session, pool=pool):
                total += 1
                by_session[session] += 1
                by_kind[kind] += 1
                by_pool[pool] += 1
                try:
                    assert total <= limits.global_limit
                    assert by_session[session] <= limits.session_limit
                    assert by_kind[kind] <= limits.limit_for(kind)
                    if pool is not None and pool in limits.pool_limits:
                        assert by_pool[pool] <= limits.pool_limits[pool]
                    if path is not None:
                        async with locks.acquire(tmp_path / path):
                            assert path not in files
                            files.add(path)
                            try:
                                for _ in range(spin):
                                    await asyncio.sleep(0)
                            finally:
                                files.discard(path)
                    else:
                        for _ in range(spin):
                            await asyncio.sleep(0)
                    completed += 1
                finally:
                    total -= 1
                    by_session[session] -= 1
                    by_kind[kind] -= 1
                    by_pool[pool] -= 1

    tasks = []
    cancels = []
    for session, kind, pool, exclusive, path, spin, cancel_after in calls:
        task = asyncio.create_task(one(session, kind, pool, exclusive, path, spin))  # type: ignore[arg-type]
        tasks.append(task)
        if cancel_after is not None:
            cancels.append((cancel_after, task))

    for step in range(10):
        for after, task in cancels:
            if after == step:
                task.cancel()
        await asyncio.sleep(0)
    results = await asyncio.gather(*tasks, return_exceptions=True)
    refused = 0
    for result in results:
        if isinstance(result, ResourceExhausted):
            assert result.reason == "queue_full"
            refused += 1
        else:
            assert result is None or isinstance(result, asyncio.CancelledError), result
    assert completed == sum(r is None for r in results)
    stats = sched.stats()
    # A displaced call cancelled before it saw its refusal ends cancelled: counted, not raised.
    assert stats.rejected >= refused and stats.rejected >= stats.displaced
    assert stats.queued <= limits.max_queue
    assert stats.in_flight == 0 and stats.queued == 0 and stats.in_flight_by_session == {}
    assert set(stats.in_flight_by_pool.values()) <= {0}
    assert set(stats.queued_by_pool.values()) <= {0}
    gstats = gate.statistics()
    assert gstats.shared_running == 0 and not gstats.exclusive_running and gstats.queued == 0
    assert len(locks) == 0
