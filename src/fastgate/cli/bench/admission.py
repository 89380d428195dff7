"""Admission scenarios: uncontended slot and gate, contended slots, fairness flood, multi-lock.

The reference for admission is ``asyncio.Semaphore`` on the same loop, in the same run; for the
multi-lock it is the naive approach (``realpath`` each path, sort, one ``asyncio.Lock`` per key).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from fastgate import (
    ConcurrencyScheduler,
    FileLockManager,
    ResourceExhausted,
    SchedulerLimits,
    ToolConcurrencyGate,
    ToolKind,
)
from fastgate.cli.bench.model import BenchConfig, Measurement, Target
from fastgate.cli.bench.timing import jain_index, paired_rounds, percentile
from fastgate.runtime import loop_factory


class Enterable(Protocol):
    """Anything ``async with`` accepts: our holds and ``asyncio.Semaphore`` alike."""

    def __aenter__(self) -> Awaitable[object]: ...

    def __aexit__(self, exc_type: Any, exc: Any, tb: Any, /) -> Awaitable[object]: ...


Factory = Callable[[int], Enterable]


def _run(loop: str, coro_fn: Callable[[], object]) -> list[Measurement]:
    with asyncio.Runner(loop_factory=loop_factory(loop)) as runner:
        result: object = runner.run(coro_fn())  # type: ignore[arg-type]
    assert isinstance(result, list)
    return result


def _compiled() -> bool:
    """Whether the admission core (gate, scheduler, locks) runs compiled in this process."""
    from fastgate import IMPLEMENTATION

    return all(IMPLEMENTATION[name] == "compiled" for name in ("_gate", "_sched", "_locks"))


def _ratio_target(compiled: float, pure: float | None) -> Target | None:
    bound = compiled if _compiled() else pure
    return None if bound is None else Target("<=", bound, ci_bound=round(bound * 1.3, 2))


def _slot_per_task(sched: ConcurrencyScheduler, sessions: list[str], kind: ToolKind) -> Factory:
    slot = sched.slot
    return lambda i: slot(sessions[i], kind)


def _slot_per_session(sched: ConcurrencyScheduler, kind: ToolKind) -> Callable[[str], Enterable]:
    slot = sched.slot
    return lambda session: slot(session, kind)


def _same(
    cm: Enterable,
) -> Callable[[object], Enterable]:
    return lambda _: cm


def run_uncontended(config: BenchConfig, loop: str) -> list[Measurement]:
    """``async with scheduler.slot(...)`` and ``gate.shared()`` vs ``async with Semaphore``."""

    async def main() -> list[Measurement]:
        sem = asyncio.Semaphore(32)
        sched = ConcurrencyScheduler()
        gate = ToolConcurrencyGate()
        slot = sched.slot
        write = ToolKind.WRITE

        async def ref(n: int) -> None:
            for _ in range(n):
                async with sem:
                    pass

        async def ours_slot(n: int) -> None:
            for _ in range(n):
                async with slot("session-1", write):
                    pass

        async def ours_gate(n: int) -> None:
            for _ in range(n):
                async with gate.shared():
                    pass

        out = []
        ratio, ns, ref_ns = await paired_rounds(ours_slot, ref, config.ops, config.rounds)
        out.append(
            Measurement(
                "uncontended",
                "slot / Semaphore",
                ratio,
                reference="asyncio.Semaphore",
                target=_ratio_target(0.8, 1.5),
                detail=f"{ns:.0f} ns vs {ref_ns:.0f} ns per async-with",
            )
        )
        ratio, ns, ref_ns = await paired_rounds(ours_gate, ref, config.ops, config.rounds)
        out.append(
            Measurement(
                "uncontended",
                "gate.shared / Semaphore",
                ratio,
                reference="asyncio.Semaphore",
                target=_ratio_target(0.6, None),
                detail=f"{ns:.0f} ns vs {ref_ns:.0f} ns per async-with",
            )
        )
        return out

    return _run(loop, main)


async def _contended_run(factory: Factory, tasks: int, iterations: int) -> tuple[float, float]:
    """(operations per second, p99 wait in seconds) for ``tasks`` workers looping on ``factory``."""
    waits: list[float] = []
    clock = time.perf_counter

    async def worker(i: int) -> None:
        for _ in range(iterations):
            t0 = clock()
            async with factory(i):
                waits.append(clock() - t0)
                await asyncio.sleep(0)

    start = clock()
    await asyncio.gather(*(worker(i) for i in range(tasks)))
    elapsed = clock() - start
    return tasks * iterations / elapsed, percentile(waits, 0.99)


def run_contended(config: BenchConfig, loop: str) -> list[Measurement]:
    """32 tasks on 8 slots, ``await asyncio.sleep(0)`` inside: throughput and p99 wait."""
    tasks, slots = 32, 8
    iterations = max(50, config.ops // 200)

    async def main() -> list[Measurement]:
        tput_ratios, wait_ratios = [], []
        ours_tput = ref_tput = 0.0
        for _ in range(config.rounds):
            sem = asyncio.Semaphore(slots)
            sched = ConcurrencyScheduler(
                SchedulerLimits(
                    global_limit=slots, session_limit=slots, kind_limits={ToolKind.WRITE: slots}
                )
            )
            sessions = [f"session-{i % 4}" for i in range(tasks)]
            ours_tput, ours_p99 = await _contended_run(
                _slot_per_task(sched, sessions, ToolKind.WRITE), tasks, iterations
            )
            ref_tput, ref_p99 = await _contended_run(_same(sem), tasks, iterations)
            tput_ratios.append(ours_tput / ref_tput)
            wait_ratios.append(ours_p99 / ref_p99)
        compiled = _compiled()
        return [
            Measurement(
                "contended",
                "throughput / Semaphore",
                statistics.median(tput_ratios),
                reference="asyncio.Semaphore",
                target=Target(">=", 1.0, ci_bound=0.8) if compiled else None,
                detail=f"{ours_tput:,.0f} vs {ref_tput:,.0f} acquisitions/s (last round)",
            ),
            Measurement(
                "contended",
                "p99 wait / Semaphore",
                statistics.median(wait_ratios),
                reference="asyncio.Semaphore",
                target=Target("<=", 1.2, ci_bound=1.5) if compiled else None,
                detail=f"{tasks} tasks, {slots} slots, {iterations} acquisitions each",
            ),
        ]

    return _run(loop, main)


FLOOD_BIG, FLOOD_SMALL, FLOOD_SLOTS, SERVICE = 1000, 10, 4, 0.001


async def _flood_once(
    factory: Callable[[str], Enterable],
) -> dict[str, float]:
    """Session A queues 1000 calls, then B, C, D queue 10 each; 4 slots, 1 ms of service."""
    records: list[tuple[str, float, float, float]] = []
    clock = time.perf_counter

    async def call(session: str) -> None:
        t0 = clock()
        async with factory(session):
            t1 = clock()
            await asyncio.sleep(SERVICE)
            records.append((session, t0, t1, clock()))

    start = clock()
    tasks = [asyncio.create_task(call("A")) for _ in range(FLOOD_BIG)]
    await asyncio.sleep(0)  # A's calls take the slots and fill the queue first
    tasks += [asyncio.create_task(call(s)) for s in "BCD" for _ in range(FLOOD_SMALL)]
    await asyncio.gather(*tasks)
    makespan = max(r[3] for r in records) - start
    service = statistics.mean(r[3] - r[2] for r in records)
    small_waits = [(r[2] - r[1]) / service for r in records if r[0] != "A"]
    # Window in which all four sessions are backlogged: from the last session's arrival until
    # the first session has no more queued calls (its last admission).
    arrivals = {s: min(r[1] for r in records if r[0] == s) for s in "ABCD"}
    last_admission = {s: max(r[2] for r in records if r[0] == s) for s in "ABCD"}
    lo, hi = max(arrivals.values()), min(last_admission.values())
    shares = [float(sum(1 for r in records if r[0] == s and lo <= r[2] <= hi)) for s in "ABCD"]
    return {
        "p99_small_wait": percentile(small_waits, 0.99),
        "jain": jain_index(shares),
        "makespan": makespan,
        "service_ms": service * 1000,
    }


FULL_QUEUE = 64


async def _full_queue_once() -> dict[str, float]:
    """The same flood at a queue that A alone fills (``max_queue`` 64): the share of B's, C's
    and D's calls refused, and of A's calls that gave them their place."""
    sched = ConcurrencyScheduler(
        SchedulerLimits(
            global_limit=FLOOD_SLOTS,
            session_limit=FLOOD_SLOTS,
            kind_limits={ToolKind.EXECUTE: FLOOD_SLOTS},
            max_queue=FULL_QUEUE,
        )
    )
    slot = sched.slot

    async def call(session: str) -> bool:
        """Whether the call ran (False: refused, or displaced from the queue)."""
        try:
            async with slot(session, ToolKind.EXECUTE):
                await asyncio.sleep(SERVICE)
        except ResourceExhausted:
            return False
        return True

    flood = [asyncio.create_task(call("A")) for _ in range(FLOOD_BIG)]
    await asyncio.sleep(0)
    small = [asyncio.create_task(call(s)) for s in "BCD" for _ in range(FLOOD_SMALL)]
    ran_small = await asyncio.gather(*small)
    await asyncio.gather(*flood)
    return {
        "small_refused": 1.0 - sum(ran_small) / len(small),
        "displaced": float(sched.stats().displaced),
    }


def run_fairness(config: BenchConfig, loop: str) -> list[Measurement]:
    """The fairness flood on the fair scheduler and on a FIFO Semaphore, same workload."""

    async def main() -> list[Measurement]:
        fair_runs, fifo_runs, full_runs = [], [], []
        for _ in range(config.fairness_runs):
            full_runs.append(await _full_queue_once())
            sched = ConcurrencyScheduler(
                SchedulerLimits(
                    global_limit=FLOOD_SLOTS,
                    session_limit=FLOOD_SLOTS,
                    kind_limits={ToolKind.EXECUTE: FLOOD_SLOTS},
                    max_queue=2048,
                )
            )
            fair_runs.append(await _flood_once(_slot_per_session(sched, ToolKind.EXECUTE)))
            fifo_runs.append(await _flood_once(_same(asyncio.Semaphore(FLOOD_SLOTS))))

        def med(runs: list[dict[str, float]], key: str) -> float:
            return statistics.median(r[key] for r in runs)

        makespan_ratio = statistics.median(
            f["makespan"] / g["makespan"] for f, g in zip(fair_runs, fifo_runs, strict=True)
        )
        detail = (
            f"FIFO p99 {med(fifo_runs, 'p99_small_wait'):.0f} service times; "
            f"service {med(fair_runs, 'service_ms'):.2f} ms"
        )
        return [
            Measurement(
                "fairness",
                "small sessions p99 wait",
                med(fair_runs, "p99_small_wait"),
                unit="service",
                reference="FIFO Semaphore",
                target=Target("<=", 12.0, ci_bound=14.0),
                detail=detail,
            ),
            Measurement(
                "fairness",
                "Jain's index (backlogged)",
                med(fair_runs, "jain"),
                unit="",
                target=Target(">=", 0.95, ci_bound=0.93),
                detail=f"FIFO {med(fifo_runs, 'jain'):.2f}",
            ),
            Measurement(
                "fairness",
                "makespan / FIFO",
                makespan_ratio,
                reference="FIFO Semaphore",
                # CI's bound: 0.98-1.08 on a quiet machine, up to 1.12 (the pure build) on a
                # loaded one; a slot left idle while work waits would read 4/3.
                target=Target("<=", 1.05, ci_bound=1.2),
                detail="work-conserving: no slot idles while work waits",
            ),
            Measurement(
                "fairness",
                "small sessions refused, full queue",
                med(full_runs, "small_refused"),
                unit="",
                target=Target("<=", 0.0, ci_bound=0.0),
                detail=(
                    f"max_queue {FULL_QUEUE} filled by A; {med(full_runs, 'displaced'):.0f} of "
                    "A's waiters gave way"
                ),
            ),
        ]

    return _run(loop, main)


class _NaiveLocks:
    """What a first implementation would do: realpath, sort, one asyncio.Lock per key."""

    def __init__(self) -> None:
        self.locks: dict[str, asyncio.Lock] = {}

    async def hold(self, paths: list[str]) -> None:
        # Blocking realpath inside a coroutine: what the naive reference really does.
        keys = sorted({os.path.realpath(p) for p in paths})  # noqa: ASYNC240
        held = []
        for key in keys:
            lock = self.locks.get(key)
            if lock is None:
                lock = self.locks[key] = asyncio.Lock()
            await lock.acquire()
            held.append(lock)
        for lock in reversed(held):
            lock.release()


def _make_files(root: str) -> list[str]:
    paths = []
    for name in ("src/app/models.py", "src/app/views.py", "tests/test_app.py"):
        full = os.path.join(root, name)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as fh:
            fh.write("x")
        paths.append(full)
    return paths


def run_multilock(config: BenchConfig, loop: str) -> list[Measurement]:
    """``acquire_many`` of 3 existing paths vs the naive approach, uncontended."""

    async def main(paths: list[str]) -> list[Measurement]:
        manager = FileLockManager()
        naive = _NaiveLocks()

        async def ours(n: int) -> None:
            for _ in range(n):
                async with manager.acquire_many(paths):
                    pass

        async def ref(n: int) -> None:
            for _ in range(n):
                await naive.hold(paths)

        ops = max(200, config.ops // 20)
        ratio, ns, ref_ns = await paired_rounds(ours, ref, ops, config.rounds)
        return [
            Measurement(
                "multi-lock",
                "acquire_many(3) / naive",
                ratio,
                reference="realpath + sorted + asyncio.Lock",
                target=Target("<=", 1.0, ci_bound=1.2) if _compiled() else None,
                detail=f"{ns / 1000:.1f} us vs {ref_ns / 1000:.1f} us per 3-path hold",
            )
        ]

    with tempfile.TemporaryDirectory(prefix="fastgate-bench-") as root:
        paths = _make_files(root)
        return _run(loop, lambda: main(paths))
