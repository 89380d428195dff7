"""The "durability" scenario: group commit against one transaction per record, same run, same disk.

32 sessions each record tool-use + result pairs as fast as their awaits return, on
``SqliteToolUseStore`` with group commit and with ``group_commit=False`` (every record its own
fsynced transaction), both files in one temporary directory. A call is one pair; calls/s counts
pairs whose result was acknowledged (committed). Rounds alternate between the two stores.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
from typing import Final

from fastgate.cli.bench.model import BenchConfig, Measurement, Target
from fastgate.durable.sqlite import SqliteToolUseStore
from fastgate.durable.store import ToolUseRecord
from fastgate.model.results import DurableResult, ResultMeta
from fastgate.runtime import loop_factory

SESSIONS: Final = 32
ARGS: Final = {"file_path": "src/app/models.py", "old": "x = 1", "new": "x = 2"}


async def _calls_per_second(store: SqliteToolUseStore, tag: str, pairs: int) -> float:
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


async def _measure(config: BenchConfig, directory: str) -> list[Measurement]:
    grouped = SqliteToolUseStore(os.path.join(directory, "grouped.db"))
    single = SqliteToolUseStore(os.path.join(directory, "single.db"), group_commit=False)
    # Each side runs long enough to be timed; the per-record side (an fsync per record) is the
    # slow one, so it gets fewer calls and fewer rounds keep the scenario to a few seconds.
    single_pairs = max(1, config.ops // 25_000)
    grouped_pairs = single_pairs * 10
    try:
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
    finally:
        await grouped.close()
        await single.close()
    batch = stats.records / max(1, stats.transactions)
    return [
        Measurement(
            "durability",
            "group commit / one transaction per record",
            statistics.median(ratios),
            reference="SqliteToolUseStore(group_commit=False)",
            target=Target(">=", 5.0, ci_bound=3.0),
            detail=(
                f"{statistics.median(grouped_rates):,.0f} vs "
                f"{statistics.median(single_rates):,.0f} calls/s "
                f"({SESSIONS} sessions, tool-use + result per call)"
            ),
        ),
        Measurement(
            "durability",
            "group commit calls/s",
            statistics.median(grouped_rates),
            unit="calls/s",
            detail=f"mean batch {batch:.1f} records, largest {stats.largest_batch}",
        ),
    ]


def run_durability(config: BenchConfig, loop: str) -> list[Measurement]:
    with (
        tempfile.TemporaryDirectory(prefix="fastgate-bench-") as directory,
        asyncio.Runner(loop_factory=loop_factory(loop)) as runner,
    ):
        return runner.run(_measure(config, directory))
