"""Small timing helpers: alternating rounds, medians, percentiles, Jain's index."""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager


@contextmanager
def no_gc() -> Iterator[None]:
    """Keep the cyclic collector from landing inside one side of a comparison."""
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


async def paired_rounds(
    ours: Callable[[int], Awaitable[None]],
    reference: Callable[[int], Awaitable[None]],
    ops: int,
    rounds: int,
) -> tuple[float, float, float]:
    """Alternate ``ours`` and ``reference`` (each running ``ops`` operations) for ``rounds`` rounds.

    Returns (median ratio ours/reference, median ns per op of ours, of the reference). Alternating
    inside one run keeps frequency scaling and background load from favouring either side.
    """
    await ours(ops // 10)  # warm up both paths (and any caches) before timing
    await reference(ops // 10)
    ratios, ours_ns, ref_ns = [], [], []
    with no_gc():
        for _ in range(rounds):
            t0 = time.perf_counter()
            await ours(ops)
            t1 = time.perf_counter()
            await reference(ops)
            t2 = time.perf_counter()
            ratios.append((t1 - t0) / (t2 - t1))
            ours_ns.append((t1 - t0) / ops * 1e9)
            ref_ns.append((t2 - t1) / ops * 1e9)
    return statistics.median(ratios), statistics.median(ours_ns), statistics.median(ref_ns)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile, ``q`` in [0, 1]."""
    if not values:
        return 0.0
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))
    return ordered[index]


def jain_index(shares: list[float]) -> float:
    """Jain's fairness index: 1.0 when all shares are equal, 1/n when one takes everything."""
    total = sum(shares)
    squares = sum(x * x for x in shares)
    return (total * total) / (len(shares) * squares) if squares else 1.0
