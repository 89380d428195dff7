"""Where a command's time goes: ``LocalShell.run("true")`` against ``SandboxedShell.run("true")``.

Builds a copy of the launcher that marks each of its stages (``-DFASTGATE_STAGE_MARKS``: the
spare launcher the resident forked ahead receiving the request, the launcher's own steps, the
namespaces' first process and its mounts, the command confined and exec'd, its exit, every
process gone, the clean-up), runs the shells with it, and prints the median time of each mark
from the call's start, beside the moments the server read the launcher's reports (P: first
process, S: exec seen, X: exit, Z: every process gone), saw the launcher end, and returned.
All marks are ``CLOCK_MONOTONIC``, so the server's and the launcher's line up. Last, the
server's own CPU time per command (user and system, this process only).

    .venv/bin/python benchmarks/command_timeline.py [LOOP] [COMMANDS]

Needs gcc; without it, only the server's marks are printed.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from fastgate.builtin import LocalShell
from fastgate.processes import _spawn
from fastgate.runtime import loop_factory
from fastgate.sandbox import SandboxedShell, sandbox_support

SOURCE = os.path.join(os.path.dirname(_spawn.__file__), "_launcher.c")
marks: list[tuple[float, str]] = []  # the server's own, in this process


def _mark(label: str) -> None:
    marks.append((time.monotonic(), label))


def _instrument_server() -> None:
    on_line, on_end = _spawn.Process._on_line, _spawn.Process._on_end

    def noting_line(self: _spawn.Process, line: bytes) -> None:
        _mark(f"server: report {line[:1].decode()} read")
        on_line(self, line)

    def noting_end(self: _spawn.Process) -> None:
        _mark("server: launcher's end seen")
        on_end(self)

    _spawn.Process._on_line = noting_line  # type: ignore[method-assign]
    _spawn.Process._on_end = noting_end  # type: ignore[method-assign]


def _marked_launcher(directory: str, log: str) -> bool:
    """Compile the marking launcher and make it the one ``spawn`` uses; False without gcc."""
    if shutil.which("gcc") is None:
        return False
    program = os.path.join(directory, "fastgate-launcher")
    subprocess.run(
        ["gcc", "-O2", "-static", f'-DFASTGATE_STAGE_MARKS="{log}"', "-o", program, SOURCE],
        check=True,
    )
    _spawn.COMPILED_LAUNCHER = program
    return True


def _launcher_marks(log: str) -> list[tuple[float, str]]:
    if not os.path.exists(log):
        return []
    with open(log) as lines:
        fields = (line.rstrip("\n").split(" ", 2) for line in lines)
        return [(float(seconds), label) for _, seconds, label in fields]


async def timeline(
    shell: Any, workspace: str, log: str, commands: int
) -> tuple[dict[str, float], float]:
    """The median of each mark, in ms from the call's start; the server's CPU ms a command."""
    for _ in range(5):  # warm: the resident started, the plan made and cached
        await shell.run("true", cwd=workspace, timeout=60)
    marks.clear()
    with contextlib.suppress(FileNotFoundError):  # (none without gcc)
        os.truncate(log, 0)  # not replaced: the resident holds it open
    before = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(commands):
        _mark("call")
        await shell.run("true", cwd=workspace, timeout=60)
        _mark("server: returned")
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    every = sorted(marks + _launcher_marks(log))
    since: dict[str, list[float]] = collections.defaultdict(list)
    start = 0.0
    seen: set[str] = set()
    for moment, label in every:
        if label == "call":
            start, seen = moment, set()
        elif label not in seen:
            seen.add(label)
            since[label].append((moment - start) * 1e3)
    medians = {label: statistics.median(times) for label, times in since.items()}
    return medians, cpu / commands * 1e3


def main() -> None:
    loop = sys.argv[1] if len(sys.argv) > 1 else "uvloop"
    commands = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    _instrument_server()
    shells: list[tuple[str, Any]] = [("LocalShell", LocalShell())]
    if sandbox_support().available:
        shells.append(("SandboxedShell", SandboxedShell()))
    with tempfile.TemporaryDirectory() as workspace, tempfile.TemporaryDirectory() as build:
        log = os.path.join(build, "stages.log")
        if not _marked_launcher(build, log):
            print("gcc not found: the server's marks only")
        for name, shell in shells:
            with asyncio.Runner(loop_factory=loop_factory(loop)) as runner:
                medians, cpu = runner.run(timeline(shell, workspace, log, commands))
            print(f"{name} ({loop}, median of {commands} commands), ms from the call's start:")
            for label, value in sorted(medians.items(), key=lambda item: item[1]):
                print(f"  {value:6.2f}  {label}")
            print(f"  the server's own CPU (user + system): {cpu:.2f} ms a command")


if __name__ == "__main__":
    main()
