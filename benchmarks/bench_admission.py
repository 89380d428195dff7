"""Per-operation cost of the admission primitives and of their references, on both loops."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from fastgate import ConcurrencyScheduler, FileLockManager, ToolConcurrencyGate, ToolKind

BATCH = 1000  # operations per timed call, so loop start-up is amortized


def _batched(
    runner: asyncio.Runner, body: Callable[[], Coroutine[Any, Any, None]]
) -> Callable[[], None]:
    return lambda: runner.run(body())


@pytest.mark.benchmark(group="uncontended")
def test_semaphore(benchmark: BenchmarkFixture, runner: asyncio.Runner) -> None:
    async def body() -> None:
        sem = asyncio.Semaphore(32)
        for _ in range(BATCH):
            async with sem:
                pass

    benchmark(_batched(runner, body))


@pytest.mark.benchmark(group="uncontended")
def test_scheduler_slot(benchmark: BenchmarkFixture, runner: asyncio.Runner) -> None:
    sched = ConcurrencyScheduler()

    async def body() -> None:
        for _ in range(BATCH):
            async with sched.slot("s", ToolKind.WRITE):
                pass

    benchmark(_batched(runner, body))


@pytest.mark.benchmark(group="uncontended")
def test_gate_shared(benchmark: BenchmarkFixture, runner: asyncio.Runner) -> None:
    gate = ToolConcurrencyGate()

    async def body() -> None:
        for _ in range(BATCH):
            async with gate.shared():
                pass

    benchmark(_batched(runner, body))


@pytest.mark.benchmark(group="multi-lock")
def test_acquire_many_three_paths(
    benchmark: BenchmarkFixture, runner: asyncio.Runner, tmp_path: Path
) -> None:
    paths = [tmp_path / name for name in ("a.py", "b.py", "c.py")]
    for path in paths:
        path.write_text("x")
    locks = FileLockManager()

    async def body() -> None:
        for _ in range(BATCH):
            async with locks.acquire_many(paths):
                pass

    benchmark(_batched(runner, body))
