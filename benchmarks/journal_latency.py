"""What the journal adds to one call at a time: a no-op tool through ``execute()`` without a
store, with a SQLite store, and with a store and an idempotency key, each call after a pause
(as calls from a client arrive: its round trip between them), with the store's own operations
timed as the executor awaits them (the claim before the tool runs, the result after). Two
no-op tools: ``noop``, ``READ_ONLY`` (the gateway bench's), and ``touch``, ``WRITE``.

    .venv/bin/python benchmarks/journal_latency.py [LOOP] [CALLS] [PAUSE_MS]

Medians in microseconds. A write's tool-use record or claim is committed and its WAL synced
before the tool runs (what keeps "never twice" through a power cut); a read's is committed
without a sync, as every result is.
"""

from __future__ import annotations

import asyncio
import collections
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

from fastgate import (
    ConcurrencyScheduler,
    ExecutionContext,
    FileLockManager,
    PermissionConfig,
    SchedulerLimits,
    SqliteToolUseStore,
    ToolExecutor,
    ToolRegistry,
)
from fastgate.cli.bench.serve_server import noop_tool
from fastgate.runtime import loop_factory


def _executor(store: SqliteToolUseStore | None) -> ToolExecutor:
    registry = ToolRegistry()
    registry.register(noop_tool())
    registry.register(noop_tool("touch", "WRITE"))
    return ToolExecutor(
        registry,
        permissions=PermissionConfig(allow=["noop", "touch"]),
        scheduler=ConcurrencyScheduler(SchedulerLimits()),
        locks=FileLockManager(),
        store=store,
    )


def _timed(spent: list[float], operation: Callable[..., Awaitable[Any]]) -> Any:
    async def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return await operation(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - start)

    return timed


async def _calls(
    executor: ToolExecutor, tool: str, calls: int, pause: float, keyed: str | None
) -> float:
    """The median microseconds of ``calls`` calls of ``tool``, one at a time."""
    times = []
    for i in range(calls):
        key = f"{keyed}-{i}" if keyed is not None else None
        context = ExecutionContext(session_id="bench", idempotency_key=key)
        start = time.perf_counter()
        result = await executor.execute(tool, {"text": "x"}, context)
        times.append(time.perf_counter() - start)
        if not result.ok:
            raise RuntimeError(f"the call failed: {result.error}")
        await asyncio.sleep(pause)
    return statistics.median(times) * 1e6


async def main(calls: int, pause: float) -> None:
    bare = _executor(None)
    print(f"no store: {await _calls(bare, 'noop', calls, pause, None):,.0f} us")
    bare.dispose()
    for tool in ("noop", "touch"):
        with tempfile.TemporaryDirectory() as directory:
            store = await SqliteToolUseStore.open(f"{directory}/journal.db")
            spent: dict[str, list[float]] = collections.defaultdict(list)
            for name in ("claim", "record_tool_use", "record_result"):
                setattr(store, name, _timed(spent[name], getattr(store, name)))
            executor = _executor(store)
            unkeyed = await _calls(executor, tool, calls, pause, None)
            keyed = await _calls(executor, tool, calls, pause, str(time.time()))
            print(f"{tool}, store: {unkeyed:,.0f} us")
            print(f"{tool}, store, keyed: {keyed:,.0f} us")
            for name, each in spent.items():
                print(f"  {name}: {statistics.median(each) * 1e6:,.0f} us ({len(each)} awaited)")
            executor.dispose()
            await store.close()


if __name__ == "__main__":
    loop = sys.argv[1] if len(sys.argv) > 1 else "uvloop"
    calls = int(sys.argv[2]) if len(sys.argv) > 2 else 400
    pause = float(sys.argv[3]) / 1000 if len(sys.argv) > 3 else 0.004
    with asyncio.Runner(loop_factory=loop_factory(loop)) as runner:
        runner.run(main(calls, pause))
