"""Where a command's time goes, from its launcher's own reports: ``LocalShell.run("true")``
against ``SandboxedShell.run("true")``, 40 commands each; prints the median time from the
call's start until the server read each report: P (the command's first process exists), S
(its exec succeeded), X (it exited), Z (every process of it is gone), the launcher's end, and
the call's return.

    .venv/bin/python benchmarks/command_timeline.py
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from typing import Any

from fastgate.builtin import LocalShell
from fastgate.processes import _spawn
from fastgate.sandbox import SandboxedShell, sandbox_support

MARKS = (b"P", b"S", b"X", b"Z", "end")
seen: dict[object, float] = {}
_on_line = _spawn.Process._on_line
_on_end = _spawn.Process._on_end


def _noting_line(self: _spawn.Process, line: bytes) -> None:
    seen.setdefault(line[:1], time.perf_counter())
    _on_line(self, line)


def _noting_end(self: _spawn.Process) -> None:
    seen["end"] = time.perf_counter()
    _on_end(self)


async def timeline(shell: Any, workspace: str) -> list[float]:
    await shell.run("true", cwd=workspace, timeout=60)  # warm: the plan made and cached
    rows = []
    for _ in range(40):
        seen.clear()
        start = time.perf_counter()
        await shell.run("true", cwd=workspace, timeout=60)
        done = time.perf_counter()
        rows.append(
            [(seen.get(mark, done) - start) * 1e3 for mark in MARKS] + [(done - start) * 1e3]
        )
    return [statistics.median(column) for column in zip(*rows, strict=True)]


def main() -> None:
    _spawn.Process._on_line = _noting_line  # type: ignore[method-assign]
    _spawn.Process._on_end = _noting_end  # type: ignore[method-assign]
    shells: list[tuple[str, Any]] = [("LocalShell", LocalShell())]
    if sandbox_support().available:
        shells.append(("SandboxedShell", SandboxedShell()))
    with tempfile.TemporaryDirectory() as workspace:
        for name, shell in shells:
            medians = asyncio.run(timeline(shell, workspace))
            labels = ["P", "S", "X", "Z", "end", "return"]
            pairs = zip(labels, medians, strict=True)
            text = ", ".join(f"{label} {value:.2f}" for label, value in pairs)
            print(f"{name:15s} ms from the call's start: {text}")


if __name__ == "__main__":
    main()
