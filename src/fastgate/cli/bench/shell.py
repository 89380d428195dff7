"""The "shell" scenario: ``execute("bash", {"command": "true"})`` against spawning the same
``bash -c true`` directly, in the same run.

The reference is the cheaper, round by round, of two direct spawns an async server would write:
asyncio's ``create_subprocess_exec`` with ``communicate()``, and ``subprocess.Popen`` with the
exit awaited on the loop (a pidfd) and the output read to its end. ``execute()`` adds the whole
pipeline (validation, a ``Bash(true)`` allow rule, admission) and ``LocalShell``'s supervision
(the environment without secrets, the search for processes left behind). A second row shows
``LocalShell.run`` alone against the same reference, and a third ``SandboxedShell.run`` (the
command sandbox: namespaces or Landlock, seccomp; the built-ins' default) where this host has
one.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
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
    ToolExecutor,
    ToolRegistry,
)
from fastgate.cli.bench.model import BenchConfig, Measurement, Target
from fastgate.runtime import loop_factory

COMMAND = ["bash", "-c", "true"]
CI_SHELL = 2.0  # CI's bound: spawning varies by 20-30% from round to round on a shared VM
CI_SANDBOX = 5.0  # a regression guard: namespaces per command, each process hop waits for a CPU


def run_shell(config: BenchConfig, loop: str) -> list[Measurement]:
    try:
        from fastgate.builtin import LocalShell, register_builtins
        from fastgate.sandbox import SandboxedShell, sandbox_support
    except ImportError:
        return []  # the 'builtin' extra is not installed: nothing to measure
    if not hasattr(os, "pidfd_open"):
        return []  # the minimal direct spawn needs a pidfd (Linux)
    with tempfile.TemporaryDirectory(prefix="fastgate-bench-shell-") as workspace:
        registry = ToolRegistry()
        register_builtins(registry, include=("bash",))
        executor = ToolExecutor(
            registry,
            permissions=PermissionConfig(allow=("Bash(true)",)),
            scheduler=ConcurrencyScheduler(SchedulerLimits()),
            locks=FileLockManager(),
            context_defaults={"workspace_root": workspace},
        )
        support = sandbox_support()
        sandboxed = SandboxedShell() if support.available else None
        with asyncio.Runner(loop_factory=loop_factory(loop)) as runner:
            out = runner.run(
                _measure(config, executor, LocalShell(), workspace, sandboxed, support.mechanism)
            )
        executor.dispose()
        return out


async def _measure(
    config: BenchConfig,
    executor: ToolExecutor,
    shell: Any,
    workspace: str,
    sandboxed: Any = None,
    mechanism: str = "",
) -> list[Measurement]:
    ctx = ExecutionContext(session_id="bench", shell=shell)  # the seam measured below
    args = {"command": "true"}
    run = shell.run

    async def ours() -> None:
        result = await executor.execute("bash", args, ctx)
        if not result.ok:
            raise RuntimeError(f"benchmark bash failed: {result.error}")

    async def shell_only() -> None:
        await run("true", cwd=workspace, timeout=120.0)

    async def confined() -> None:
        result = await sandboxed.run("true", cwd=workspace, timeout=120.0)
        if not result.sandboxed or result.exit_code != 0:
            raise RuntimeError(f"benchmark sandboxed bash failed: {result}")

    sides: list[Callable[[], Awaitable[None]]] = [ours, _asyncio_spawn, _popen_spawn, shell_only]
    if sandboxed is not None:
        sides.append(confined)

    async def round_(n: int) -> list[float]:
        # One call of each side in turn, n times: a burst of load on this shared machine then
        # falls on every side alike instead of on whichever ran during it.
        totals = [0.0] * len(sides)
        for _ in range(n):
            for index, side in enumerate(sides):
                start = time.perf_counter()
                await side()
                totals[index] += time.perf_counter() - start
        return [total / n for total in totals]

    n = max(20, config.ops // 1000)
    await ours()  # warm: the rule's analysis, the first spawn
    if sandboxed is not None:
        await confined()  # warm: the host probed once, the plan cached
    ratios, shell_ratios, ours_us, reference_us, via = [], [], [], [], []
    confined_ratios, confined_us = [], []
    for _ in range(config.rounds):
        t_ours, t_asyncio, t_popen, t_shell, *t_confined = await round_(n)
        reference = min(t_asyncio, t_popen)
        via.append("asyncio" if t_asyncio <= t_popen else "Popen + pidfd")
        ratios.append(t_ours / reference)
        shell_ratios.append(t_shell / reference)
        ours_us.append(t_ours * 1e6)
        reference_us.append(reference * 1e6)
        if t_confined:
            confined_ratios.append(t_confined[0] / reference)
            confined_us.append(t_confined[0] * 1e6)
    cheaper = max(set(via), key=via.count)
    rows = []
    if confined_ratios:
        rows.append(
            Measurement(
                "shell",
                "SandboxedShell.run('true') / bash -c true spawned directly",
                statistics.median(confined_ratios),
                reference="the same direct spawn",
                target=Target("<=", 1.5, ci_bound=CI_SANDBOX),
                detail=f"{statistics.median(confined_us):,.0f} us per command; {mechanism}, the "
                "built-ins' default: the workspace writable, no network",
            )
        )
    return [
        *rows,
        Measurement(
            "shell",
            'execute("bash", {"command": "true"}) / bash -c true spawned directly',
            statistics.median(ratios),
            reference=f"the cheaper direct spawn of the round (mostly: {cheaper})",
            target=Target("<=", 1.3, ci_bound=CI_SHELL),
            detail=f"{statistics.median(ours_us):,.0f} us vs "
            f"{statistics.median(reference_us):,.0f} us per command",
        ),
        Measurement(
            "shell",
            "LocalShell.run('true') / bash -c true spawned directly",
            statistics.median(shell_ratios),
            reference="the same direct spawn",
            detail="the shell seam alone: environment filter, supervision, the search for "
            "processes left behind",
        ),
    ]


async def _asyncio_spawn() -> None:
    proc = await asyncio.create_subprocess_exec(
        *COMMAND,
        stdin=subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    await proc.communicate()


async def _popen_spawn() -> None:
    loop = asyncio.get_running_loop()
    read_fd, write_fd = os.pipe()
    try:
        proc = subprocess.Popen(  # noqa: ASYNC220 -- spawning only, as asyncio itself does
            COMMAND, stdin=subprocess.DEVNULL, stdout=write_fd, stderr=write_fd
        )
    finally:
        os.close(write_fd)
    watch = os.pidfd_open(proc.pid)
    exited: asyncio.Future[None] = loop.create_future()
    loop.add_reader(watch, exited.set_result, None)
    try:
        await exited
    finally:
        loop.remove_reader(watch)
        os.close(watch)
    proc.wait()  # exited: this only collects the status
    while os.read(read_fd, 65536):  # the writer is gone: the rest is read at once
        pass
    os.close(read_fd)
