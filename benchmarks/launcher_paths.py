"""What a command's launcher costs, by the way it is started: forked by the resident launcher
(what ``spawn`` does), started as a program of its own for the command (what it did before
the resident, and still does for the pure launcher), and no launcher at all (``Popen`` of
``bash -c true`` awaited on its exit). Each side once per round, 200 rounds, in turn; prints
the 10th percentile and the median of each side's whole command and of the synchronous
``spawn()`` call alone.

    .venv/bin/python benchmarks/launcher_paths.py [asyncio|uvloop]
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from fastgate.processes import _spawn, spawn
from fastgate.runtime import loop_factory

COMMAND = ["bash", "-c", "true"]
ROUNDS = 200


def _per_command_launcher(launcher: str, program: str, args: list[str], *rest: Any) -> Any:
    """In place of ``_fork_launcher`` (the same arguments): the launcher as a program."""
    grace, control, report, std = rest[:4]
    return _spawn._start_launcher([launcher], [program, *args], grace, control, report, std)


async def main() -> None:
    resident_path = _spawn._fork_launcher
    ways: dict[str, Callable[..., Any]] = {
        "resident": resident_path,
        "per command": _per_command_launcher,
    }
    calls: dict[str, list[float]] = {name: [] for name in [*ways, "no launcher"]}
    totals: dict[str, list[float]] = {name: [] for name in [*ways, "no launcher"]}
    try:
        for _ in range(ROUNDS):
            for name, way in ways.items():
                _spawn._fork_launcher = way
                start = time.perf_counter()
                process = spawn(COMMAND)
                called = time.perf_counter()
                await process.wait()
                calls[name].append(called - start)
                totals[name].append(time.perf_counter() - start)
            start = time.perf_counter()
            direct = subprocess.Popen(COMMAND)  # noqa: ASYNC220 -- spawning only
            called = time.perf_counter()
            await asyncio.to_thread(direct.wait)
            calls["no launcher"].append(called - start)
            totals["no launcher"].append(time.perf_counter() - start)
    finally:
        _spawn._fork_launcher = resident_path
    for name in totals:
        p10 = statistics.quantiles(totals[name], n=10)[0] * 1e3
        median = statistics.median(totals[name]) * 1e3
        call = statistics.median(calls[name]) * 1e3
        print(
            f"{name:12s} command p10 {p10:.2f} ms, median {median:.2f} ms; "
            f"the spawn call alone, median {call:.2f} ms"
        )


if __name__ == "__main__":
    loop = sys.argv[1] if len(sys.argv) > 1 else "uvloop"
    with asyncio.Runner(loop_factory=loop_factory(loop)) as runner:
        runner.run(main())
