"""``async with scheduler.slot(...)`` against ``async with semaphore``, as a caller writes them.

Unlike the ``uncontended`` scenario of ``fastgate bench`` (the slot factory bound once, the
collector off), this looks the scheduler's ``slot`` up on every call and leaves the collector
on. The kind is held in a variable, as a caller holding a tool's definition has it; a second
line names it on every call (``ToolKind.WRITE``: on Python 3.11 reading an enum member from its
class costs about 90 ns by itself). Alternated rounds of 20,000 of each; prints the median
ratio and each side's time.

    FASTGATE_NO_EXTENSIONS=1 .venv/bin/python benchmarks/slot_vs_semaphore.py asyncio
    FASTGATE_NO_EXTENSIONS=1 .venv/bin/python benchmarks/slot_vs_semaphore.py uvloop
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time

from fastgate import IMPLEMENTATION, ConcurrencyScheduler, ToolKind
from fastgate.runtime import loop_factory

N = 20_000
ROUNDS = 15


async def measure(named: bool) -> tuple[float, float, float]:
    scheduler = ConcurrencyScheduler()
    semaphore = asyncio.Semaphore(32)
    kind = ToolKind.WRITE

    async def slots(n: int) -> None:
        if named:
            for _ in range(n):
                async with scheduler.slot("session", ToolKind.WRITE):
                    pass
        else:
            for _ in range(n):
                async with scheduler.slot("session", kind):
                    pass

    async def semaphores(n: int) -> None:
        for _ in range(n):
            async with semaphore:
                pass

    await slots(N)
    await semaphores(N)
    ratios, ours, theirs = [], [], []
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        await slots(N)
        t1 = time.perf_counter()
        await semaphores(N)
        t2 = time.perf_counter()
        ratios.append((t1 - t0) / (t2 - t1))
        ours.append((t1 - t0) / N * 1e9)
        theirs.append((t2 - t1) / N * 1e9)
    return statistics.median(ratios), statistics.median(ours), statistics.median(theirs)


def main() -> None:
    loop = sys.argv[1] if len(sys.argv) > 1 else "asyncio"
    build = IMPLEMENTATION["_sched"]
    for named, spelling in ((False, "the kind held"), (True, "ToolKind.WRITE named each call")):
        with asyncio.Runner(loop_factory=loop_factory(loop)) as runner:
            ratio, ours, theirs = runner.run(measure(named))
        print(
            f"{build}, {loop}, {spelling}: slot / Semaphore {ratio:.3f}x "
            f"({ours:.0f} vs {theirs:.0f} ns)"
        )


if __name__ == "__main__":
    main()
