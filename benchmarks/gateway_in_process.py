"""The gateway's own cost per ``tools/call``, without HTTP: the bench's bare SDK server and its
gateway (``fastgate.cli.bench.serve_server``) driven as ASGI apps in this process, 64 callers
at a time posting 2026-era calls, as the 64-client row of ``fastgate bench --scenario serve``
does over TCP. Prints the CPU time per call of each side (alternated rounds, medians).

    .venv/bin/python benchmarks/gateway_in_process.py
    FASTGATE_BENCH_SERVE_OFF=journal,audit,telemetry \
        .venv/bin/python benchmarks/gateway_in_process.py

``--only bare|gateway --calls N`` runs one side once, for an instruction count: the difference
between two runs under ``valgrind --tool=callgrind`` (say 128 and 640 calls) divided by the
difference in calls is what one call costs, start-up excluded.

``--variant`` takes a part away from the gateway, to see what it costs: ``saved`` answers every
call with the result its first call got instead of running ``execute`` (``saved-in-task``: the
same, returned through a task of its own, as ``execute`` runs a body), ``sdk-answer`` sends
2026-era calls through the SDK's own streamed answer instead of the gateway's answer path; the
flag may be given more than once (``--variant sdk-answer --variant saved``).

``--threads`` also prints, for each thread of this process, how often it gave up its CPU to
wait (voluntary context switches: a thread waiting for work or for the interpreter's lock) and
the CPU it used, read from ``/proc`` (Linux) before the apps shut down.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastgate.cli.bench import serve_server
from fastgate.cli.bench.serve import call_request
from fastgate.runtime import loop_factory

CALLERS = 64
WARM_UP = 200
App = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


def _request(n: int) -> tuple[dict[str, Any], bytes]:
    body, named = call_request("noop", n, f"in-process-{n}")
    headers = [(b"host", b"127.0.0.1:8000")]
    headers += [(name.encode(), value.encode()) for name, value in named]
    headers.append((b"content-length", str(len(body)).encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/mcp",
        "raw_path": b"/mcp",
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }
    return scope, body


async def _call(app: App, n: int, closed: asyncio.Event) -> None:
    scope, body = _request(n)
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await closed.wait()  # the connection stays open: the server's disconnect watch waits
        return {"type": "http.disconnect"}

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    answer = b"".join(m.get("body", b"") for m in sent[1:])
    if sent[0].get("status") != 200 or b'"isError":false' not in answer:
        raise RuntimeError(f"the call failed: {sent[0]} {answer[:300]!r}")


@contextlib.asynccontextmanager
async def _running(app: App) -> AsyncIterator[None]:
    """The app's lifespan (the SDK's session manager runs inside it)."""
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    await inbox.put({"type": "lifespan.startup"})

    async def lifespan() -> None:
        scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
        await app(scope, inbox.get, outbox.put)

    task = asyncio.create_task(lifespan())
    started = await outbox.get()
    if started["type"] != "lifespan.startup.complete":
        raise RuntimeError(f"the app did not start: {started}")
    try:
        yield
    finally:
        await inbox.put({"type": "lifespan.shutdown"})
        await task


async def _cpu_per_call(app: App, calls: int, first: int, closed: asyncio.Event) -> float:
    """CPU microseconds per call, ``CALLERS`` callers at a time."""

    async def caller(k: int) -> None:
        for i in range(calls // CALLERS):
            await _call(app, first + k * calls + i, closed)

    start = time.process_time()
    await asyncio.gather(*(caller(k) for k in range(CALLERS)))
    return (time.process_time() - start) / (calls // CALLERS * CALLERS) * 1e6


@contextlib.asynccontextmanager
async def _apps(directory: str, only: str | None) -> AsyncIterator[dict[str, App]]:
    apps: dict[str, App] = {}
    async with contextlib.AsyncExitStack() as stack:
        if only in (None, "bare"):
            apps["bare"] = serve_server._bare()
        if only in (None, "gateway"):
            apps["gateway"] = await stack.enter_async_context(
                serve_server._gateway(directory, None)
            )
        for app in apps.values():
            await stack.enter_async_context(_running(app))
        yield apps


def _take_away(variant: str) -> None:
    """Patch the part ``variant`` names out of the gateway (before it is built)."""
    if variant == "sdk-answer":
        from fastgate.serve._answers import QuickAnswers

        async def through_the_sdk(self: QuickAnswers, scope: Any, receive: Any, send: Any) -> None:
            await self.fallback(scope, receive, send)

        QuickAnswers.__call__ = through_the_sdk  # type: ignore[method-assign]
        return
    from fastgate import ToolExecutor, ToolResult

    original_execute = ToolExecutor.execute
    saved: dict[str, ToolResult] = {}

    async def returned(result: ToolResult) -> ToolResult:
        return result

    async def replay(self: ToolExecutor, name: str, *args: Any, **kwargs: Any) -> ToolResult:
        result = saved.get(name)
        if result is None:
            result = saved[name] = await original_execute(self, name, *args, **kwargs)
        if variant == "saved-in-task":
            return await asyncio.get_running_loop().create_task(returned(result))
        return result

    ToolExecutor.execute = replay  # type: ignore[method-assign]


def _threads() -> list[tuple[str, int, float]]:
    """(name, voluntary context switches, CPU seconds) of each thread of this process."""
    names = {str(thread.native_id): thread.name for thread in threading.enumerate()}
    ticks = os.sysconf("SC_CLK_TCK")
    found = []
    for tid in sorted(os.listdir("/proc/self/task"), key=int):
        try:
            with open(f"/proc/self/task/{tid}/status") as status:
                switches = next(
                    int(line.split(":")[1]) for line in status if line.startswith("voluntary_ctxt")
                )
            with open(f"/proc/self/task/{tid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except (OSError, StopIteration):
            continue  # the thread ended meanwhile
        cpu = (int(fields[11]) + int(fields[12])) / ticks  # utime + stime
        found.append((names.get(tid, f"thread {tid}"), switches, cpu))
    return found


async def main(only: str | None, calls: int, rounds: int, threads: bool) -> None:
    closed = asyncio.Event()
    with tempfile.TemporaryDirectory() as directory:
        async with _apps(directory, only) as apps:
            for name, app in apps.items():
                await _cpu_per_call(app, WARM_UP, 10_000_000 * (1 + len(name)), closed)
            times: dict[str, list[float]] = {name: [] for name in apps}
            for r in range(rounds):
                for name, app in apps.items():
                    times[name].append(await _cpu_per_call(app, calls, r * 1_000_000, closed))
            closed.set()
            if threads:
                for name, switches, cpu in _threads():
                    print(f"thread {name}: {switches:,} voluntary switches, {cpu:.2f} s of CPU")
    medians = {name: statistics.median(each) for name, each in times.items()}
    for name, value in medians.items():
        print(f"{name}: {value:.0f} us of CPU per call (median of {rounds} rounds of {calls})")
    if len(medians) == 2:
        print(f"gateway / bare: {medians['gateway'] / medians['bare']:.2f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=("bare", "gateway"))
    parser.add_argument("--calls", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--variant", action="append", default=[], choices=("saved", "saved-in-task", "sdk-answer")
    )
    parser.add_argument("--threads", action="store_true")
    options = parser.parse_args()
    for variant in options.variant:
        _take_away(variant)
    rounds = 1 if options.only else options.rounds
    with asyncio.Runner(loop_factory=loop_factory("uvloop")) as runner:
        runner.run(main(options.only, options.calls, rounds, options.threads))
