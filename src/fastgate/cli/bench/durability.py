"""The "durability" scenario: group commit against one transaction per record, same run, same disk,
on SQLite and on PostgreSQL; and what a keyed call costs over an unkeyed one.

32 sessions each record tool-use + result pairs as fast as their awaits return, on a store with
group commit and on one with ``group_commit=False`` (every record its own committed
transaction). A call is one pair; calls/s counts pairs whose result was acknowledged
(committed). Rounds alternate between the two stores. SQLite's files share one temporary
directory; PostgreSQL is a private server (``initdb`` into a temporary directory, a Unix socket)
started for the scenario, skipped with the reason when it or psycopg is not installed.

Keyed calls: the same 32 sessions call a no-op tool through a ``ToolExecutor`` over one SQLite
store, without a key and with a fresh key per call (claimed in the journal before it runs);
the figure is the keyed call's time over the unkeyed one's.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

from fastgate.admission.locks import FileLockManager
from fastgate.admission.scheduler import ConcurrencyScheduler, SchedulerLimits
from fastgate.cli.bench.model import BenchConfig, Measurement, Target
from fastgate.durable.sqlite import SqliteToolUseStore
from fastgate.durable.store import ToolUseRecord
from fastgate.model.context import ExecutionContext
from fastgate.model.kinds import ToolKind
from fastgate.model.results import DurableResult, ResultMeta
from fastgate.pipeline.executor import ToolExecutor
from fastgate.runtime import loop_factory
from fastgate.schema import Object, String
from fastgate.tools import define_tool
from fastgate.tools.registry import ToolRegistry

SESSIONS: Final = 32
ARGS: Final = {"file_path": "src/app/models.py", "old": "x = 1", "new": "x = 2"}
CALL_ARGS: Final = {"text": "x = 2"}


async def _calls_per_second(store: Any, tag: str, pairs: int) -> float:
    """Run ``pairs`` calls in each of the sessions at once; calls acknowledged per second."""

    async def session(n: int) -> None:
        session_id = f"session-{n}"
        for seq in range(pairs):
            execution_id = f"{tag}-{n}-{seq}"
            record = ToolUseRecord(
                execution_id, f"call-{seq}", session_id, "turn-1", 0, seq, "edit", ARGS
            )
            await store.record_tool_use(record)
            now = time.time()
            meta = ResultMeta(execution_id, f"call-{seq}", "edit", session_id, now, now, 0.1)
            await store.record_result(execution_id, DurableResult(True, "edited", None, meta))

    start = time.perf_counter()
    await asyncio.gather(*(session(n) for n in range(SESSIONS)))
    return SESSIONS * pairs / (time.perf_counter() - start)


async def _group_commit(
    config: BenchConfig, name: str, grouped: Any, single: Any, reference: str
) -> list[Measurement]:
    # Each side runs long enough to be timed; the per-record side (a commit per record) is the
    # slow one, so it gets fewer calls and fewer rounds keep the scenario to a few seconds.
    single_pairs = max(1, config.ops // 25_000)
    grouped_pairs = single_pairs * 10
    await _calls_per_second(grouped, "warm", 2)
    await _calls_per_second(single, "warm", 1)
    ratios, grouped_rates, single_rates = [], [], []
    for r in range(min(config.rounds, 5)):
        grouped_rate = await _calls_per_second(grouped, f"r{r}", grouped_pairs)
        single_rate = await _calls_per_second(single, f"r{r}", single_pairs)
        ratios.append(grouped_rate / single_rate)
        grouped_rates.append(grouped_rate)
        single_rates.append(single_rate)
    stats = grouped.statistics()
    batch = stats.records / max(1, stats.transactions)
    return [
        Measurement(
            "durability",
            f"{name}: group commit / one transaction per record",
            statistics.median(ratios),
            reference=reference,
            target=Target(">=", 5.0, ci_bound=3.0),
            detail=(
                f"{statistics.median(grouped_rates):,.0f} vs "
                f"{statistics.median(single_rates):,.0f} calls/s "
                f"({SESSIONS} sessions, tool-use + result per call)"
            ),
        ),
        Measurement(
            "durability",
            f"{name}: group commit calls/s",
            statistics.median(grouped_rates),
            unit="calls/s",
            detail=f"mean batch {batch:.1f} records, largest {stats.largest_batch}",
        ),
    ]


async def _sqlite(config: BenchConfig, directory: str) -> list[Measurement]:
    grouped = SqliteToolUseStore(os.path.join(directory, "grouped.db"))
    single = SqliteToolUseStore(os.path.join(directory, "single.db"), group_commit=False)
    try:
        return await _group_commit(
            config, "SQLite", grouped, single, "SqliteToolUseStore(group_commit=False)"
        )
    finally:
        await grouped.close()
        await single.close()


async def _postgres(config: BenchConfig, dsn: str) -> list[Measurement]:
    from fastgate.durable.postgres import PostgresToolUseStore

    grouped = PostgresToolUseStore(dsn, namespace="bench_grouped")
    single = PostgresToolUseStore(dsn, namespace="bench_single", group_commit=False)
    try:
        return await _group_commit(
            config, "PostgreSQL", grouped, single, "PostgresToolUseStore(group_commit=False)"
        )
    finally:
        await grouped.close()
        await single.close()


def _postgres_rows(config: BenchConfig, loop: str) -> list[Measurement]:
    from fastgate.cli.bench.postgres_server import PostgresServer, postgres_bindir

    if postgres_bindir() is None:
        return _skipped("PostgreSQL is not installed (scripts/setup-postgres installs it)")
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError:
        return _skipped("psycopg is not installed (pip install 'fastgate[postgres]')")
    with PostgresServer() as server, asyncio.Runner(loop_factory=loop_factory(loop)) as runner:
        return runner.run(_postgres(config, server.dsn))


def _skipped(why: str) -> list[Measurement]:
    return [Measurement("durability", f"PostgreSQL skipped: {why}", 0.0, unit="")]


# -- keyed calls -----------------------------------------------------------------------------------


def _executor(store: SqliteToolUseStore) -> ToolExecutor:
    async def edit(args: Any, ctx: Any) -> str:
        return "edited"

    # No path argument: calls on one file would queue for its lock, one record after another.
    parameters = Object({"text": String()}, required=("text",))
    registry = ToolRegistry()
    registry.register(
        define_tool(
            "edit", "Edit.", parameters, edit, kind=ToolKind.READ_ONLY, parallelism="shared"
        )
    )
    limits = SchedulerLimits(global_limit=SESSIONS, session_limit=SESSIONS)
    return ToolExecutor(
        registry,
        store=store,
        scheduler=ConcurrencyScheduler(limits),
        locks=FileLockManager(),
        require_persistence=True,
    )


async def _seconds_per_call(
    executor: ToolExecutor, calls: int, context: Callable[[int, int], ExecutionContext]
) -> float:
    async def session(n: int) -> None:
        for i in range(calls):
            result = await executor.execute("edit", CALL_ARGS, context(n, i))
            if not result.ok:
                raise RuntimeError(f"the benchmark's call failed: {result.error}")

    start = time.perf_counter()
    await asyncio.gather(*(session(n) for n in range(SESSIONS)))
    return (time.perf_counter() - start) / (SESSIONS * calls)


async def _keyed(config: BenchConfig, directory: str) -> list[Measurement]:
    store = SqliteToolUseStore(os.path.join(directory, "keyed.db"))
    executor = _executor(store)
    fresh = itertools.count()

    def unkeyed(n: int, i: int) -> ExecutionContext:  # a context per call, as keyed calls have
        return ExecutionContext(session_id=f"session-{n}")

    def keyed(n: int, i: int) -> ExecutionContext:
        return ExecutionContext(session_id=f"session-{n}", idempotency_key=f"k{next(fresh)}")

    calls = max(5, config.ops // 500)
    runs: list[tuple[str, Callable[[], Awaitable[float]]]] = [
        ("unkeyed", lambda: _seconds_per_call(executor, calls, unkeyed)),
        ("keyed", lambda: _seconds_per_call(executor, calls, keyed)),
    ]
    try:
        await _seconds_per_call(executor, 2, unkeyed)
        await _seconds_per_call(executor, 2, keyed)
        times: dict[str, list[float]] = {"unkeyed": [], "keyed": []}
        ratios = []
        for r in range(min(config.rounds, 7)):
            for name, run in runs if r % 2 == 0 else runs[::-1]:
                times[name].append(await run())
            ratios.append(times["keyed"][-1] / times["unkeyed"][-1])
    finally:
        executor.dispose()
        await store.close()
    keyed_us = statistics.median(times["keyed"]) * 1e6
    unkeyed_us = statistics.median(times["unkeyed"]) * 1e6
    return [
        Measurement(
            "durability",
            "SQLite: keyed call / unkeyed call (time)",
            statistics.median(ratios),
            reference="the same call without an idempotency key",
            # CI's bound guards a regression from where the figure stands on a loaded two-core
            # machine (1.3-1.5x): the unkeyed call's records share its loop iteration's
            # transaction, while a claim also writes the journal's (session, key) index, a page
            # per session in a group transaction.
            target=Target("<=", 1.2, ci_bound=1.8),
            detail=(
                f"{keyed_us:,.0f} vs {unkeyed_us:,.0f} µs per call through the executor "
                f"({SESSIONS} sessions, require_persistence, group commit)"
            ),
        )
    ]


async def _measure(config: BenchConfig, directory: str) -> list[Measurement]:
    return [*await _sqlite(config, directory), *await _keyed(config, directory)]


def run_durability(config: BenchConfig, loop: str) -> list[Measurement]:
    with tempfile.TemporaryDirectory(prefix="fastgate-bench-") as directory:
        with asyncio.Runner(loop_factory=loop_factory(loop)) as runner:
            rows = runner.run(_measure(config, directory))
    return [*rows, *_postgres_rows(config, loop)]
