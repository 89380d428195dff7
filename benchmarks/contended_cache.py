"""The contended scenario of ``fastgate bench`` (32 tasks on 8 slots, ``await asyncio.sleep(0)``
inside, 4 sessions), one side at a time, for counting instructions and simulated cache misses
per acquisition with callgrind: ``sched`` (``scheduler.slot``) or ``semaphore``.

Count a side as the difference between two runs, so start-up cancels out (16,000 acquisitions
between 100 and 600 rounds per task)::

    count() { FASTGATE_REQUIRE_EXTENSIONS=1 valgrind --tool=callgrind --cache-sim=yes \\
        --callgrind-out-file=/tmp/contended.$1.$2 .venv/bin/python benchmarks/contended_cache.py \\
        "$1" "$2" uvloop > /dev/null 2>&1; callgrind_annotate /tmp/contended.$1.$2 \\
        | grep -m1 'PROGRAM TOTALS'; }
    count sched 100; count sched 600   # columns: Ir ... I1mr D1mr ...

``python benchmarks/contended_cache.py SIDE ROUNDS [LOOP]``
"""

from __future__ import annotations

import asyncio
import sys

from fastgate import ConcurrencyScheduler, SchedulerLimits, ToolKind
from fastgate.runtime import loop_factory

TASKS, SLOTS, SESSIONS = 32, 8, 4


async def contend(side: str, rounds: int) -> None:
    if side == "sched":
        scheduler = ConcurrencyScheduler(
            SchedulerLimits(
                global_limit=SLOTS, session_limit=SLOTS, kind_limits={ToolKind.WRITE: SLOTS}
            )
        )
        slot, kind = scheduler.slot, ToolKind.WRITE

        async def worker(i: int) -> None:
            session = f"session-{i % SESSIONS}"
            for _ in range(rounds):
                async with slot(session, kind):
                    await asyncio.sleep(0)

    elif side == "semaphore":
        semaphore = asyncio.Semaphore(SLOTS)

        async def worker(i: int) -> None:
            for _ in range(rounds):
                async with semaphore:
                    await asyncio.sleep(0)

    else:
        raise SystemExit(f"side: sched or semaphore, not {side!r}")
    await asyncio.gather(*(worker(i) for i in range(TASKS)))


if __name__ == "__main__":
    loop = sys.argv[3] if len(sys.argv) > 3 else "uvloop"
    with asyncio.Runner(loop_factory=loop_factory(loop)) as runner:
        runner.run(contend(sys.argv[1], int(sys.argv[2])))
