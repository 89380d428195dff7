"""The "mcp" scenario: an MCP tool through the whole pipeline against the SDK's own call.

Two servers of the same ``echo`` tool (``mcp_echo_server``), each on one connection of one bridge:
one over stdio, one over streamable HTTP on 127.0.0.1 (negotiated in the 2026-07-28 era). On
each, ``execute()`` of ``echo`` (every stage: validation, policy, admission, invocation, result)
is timed against ``Client.call_tool`` of the same tool on the same connection, alternating in the
same run. Then, over stdio, 32 callers in 8 sessions (an executor each, one shared scheduler) call
it at once, against 32 concurrent ``call_tool`` tasks. Needs the ``mcp`` extra; without it the
scenario says so and measures nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import selectors
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

from fastgate import (
    ConcurrencyScheduler,
    ExecutionContext,
    PermissionConfig,
    SchedulerLimits,
    ToolExecutor,
    ToolRegistry,
)
from fastgate.cli.bench.children import child_environment
from fastgate.cli.bench.model import BenchConfig, Measurement, Target
from fastgate.cli.bench.timing import paired_rounds
from fastgate.runtime import loop_factory

SESSIONS, CALLERS = 8, 32
TOOL = "mcp__bench__echo"
HTTP_TOOL = "mcp__bench-http__echo"
HTTP_ERA = "2026-07-28"
ARGS = {"text": "hello from the bench"}
SERVER = [sys.executable, "-m", "fastgate.cli.bench.mcp_echo_server"]
START_TIMEOUT = 30.0  # seconds for the HTTP server to announce its port
STOP_TIMEOUT = 10.0


@contextlib.contextmanager
def _http_server() -> Iterator[str]:
    """The echo server over streamable HTTP, in a process of its own: its URL. Stopped (and
    reaped) at the end, whatever happened.

    A process of its own, as the stdio server is: served from the bench's own process, the
    server's request handling would share the event loop and the GIL with both sides of the
    comparison, adding the same large cost to each and hiding the bridge's own cost behind it
    (the ratio drifting toward 1); and no agent server runs its MCP servers on its own loop.
    """
    process = subprocess.Popen(
        [*SERVER, "http"], stdout=subprocess.PIPE, text=True, env=child_environment()
    )
    try:
        assert process.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            ready = selector.select(START_TIMEOUT)
        line = process.stdout.readline() if ready else ""
        if not line.startswith("PORT "):
            raise RuntimeError(f"the bench MCP HTTP server did not start: {line!r}")
        yield f"http://127.0.0.1:{int(line.split()[1])}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(STOP_TIMEOUT)
        if process.stdout is not None:
            process.stdout.close()


async def _measure(config: BenchConfig, url: str) -> list[Measurement]:
    from fastgate.mcp import MCPBridge, MCPServerConfig

    servers = [
        MCPServerConfig(
            "bench",
            command=SERVER,
            trust_annotations=True,  # echo is read-only by its hint: calls may overlap
            max_concurrency=CALLERS,
        ),
        MCPServerConfig(
            "bench-http",
            url=url,
            transport="http",
            trust_annotations=True,
            max_concurrency=CALLERS,
        ),
    ]
    registry = ToolRegistry()
    async with MCPBridge(registry, servers) as bridge:
        status = bridge.status()
        if any(status[s.name]["state"] != "ready" for s in servers):
            raise RuntimeError(f"the bench MCP servers did not start: {status}")
        if status["bench-http"]["protocol_version"] != HTTP_ERA:
            raise RuntimeError(f"the bench MCP HTTP server is not in the {HTTP_ERA} era: {status}")
        # The same connections, for the SDK's own calls.
        client = bridge._links["bench"]._client
        http_client = bridge._links["bench-http"]._client
        assert client is not None and http_client is not None
        limits = SchedulerLimits(global_limit=CALLERS, session_limit=CALLERS)
        scheduler = ConcurrencyScheduler(limits)
        permissions = PermissionConfig(allow=[TOOL, HTTP_TOOL])
        executors = [
            ToolExecutor(registry, permissions=permissions, scheduler=scheduler)
            for _ in range(SESSIONS)
        ]
        contexts = [ExecutionContext(session_id=f"session-{n}") for n in range(SESSIONS)]
        executor, ctx = executors[0], contexts[0]

        def paired(tool: str, sdk: Any) -> tuple[Any, Any]:
            async def ours(n: int) -> None:
                for _ in range(n):
                    result = await executor.execute(tool, ARGS, ctx)
                    if not result.ok:
                        raise RuntimeError(f"the bench call failed: {result.content}")

            async def reference(n: int) -> None:
                for _ in range(n):
                    await sdk.call_tool("echo", ARGS)

            return ours, reference

        calls = max(40, config.ops // 400)  # fewer calls per round: noisier ratios
        ratio, ours_ns, ref_ns = await paired_rounds(*paired(TOOL, client), calls, config.rounds)
        http_ratio, http_ours_ns, http_ref_ns = await paired_rounds(
            *paired(HTTP_TOOL, http_client), calls, config.rounds
        )

        async def concurrent_ours(per_caller: int) -> None:
            async def caller(k: int) -> None:
                target, context = executors[k % SESSIONS], contexts[k % SESSIONS]
                for _ in range(per_caller):
                    result = await target.execute(TOOL, ARGS, context)
                    if not result.ok:
                        raise RuntimeError(f"the bench call failed: {result.content}")

            await asyncio.gather(*(caller(k) for k in range(CALLERS)))

        async def concurrent_reference(per_caller: int) -> None:
            async def caller() -> None:
                for _ in range(per_caller):
                    await client.call_tool("echo", ARGS)

            await asyncio.gather(*(caller() for _ in range(CALLERS)))

        per_caller = max(5, calls // 8)
        ours_rates, ref_rates = [], []
        for _ in range(max(3, config.rounds // 3)):
            ours_rates.append(await _rate(concurrent_ours, per_caller))
            ref_rates.append(await _rate(concurrent_reference, per_caller))
        for target in executors:
            target.dispose()
    rate, ref_rate = statistics.median(ours_rates), statistics.median(ref_rates)
    return [
        Measurement(
            "mcp",
            "execute() / SDK call_tool, same connection",
            ratio,
            reference="mcp.Client.call_tool on the bridge's connection",
            target=Target("<=", 1.15, ci_bound=1.4),
            detail=f"{ours_ns / 1000:,.0f} vs {ref_ns / 1000:,.0f} us per call (stdio echo)",
        ),
        Measurement(
            "mcp",
            "execute() / SDK call_tool, same connection, streamable HTTP",
            http_ratio,
            reference="mcp.Client.call_tool on the bridge's streamable-HTTP connection",
            target=Target("<=", 1.15, ci_bound=1.4),
            detail=(
                f"{http_ours_ns / 1000:,.0f} vs {http_ref_ns / 1000:,.0f} us per call "
                f"(streamable-HTTP echo, {HTTP_ERA})"
            ),
        ),
        Measurement(
            "mcp",
            f"calls/s, {CALLERS} callers in {SESSIONS} sessions",
            rate,
            unit="calls/s",
            detail=f"SDK call_tool, {CALLERS} tasks on the connection: {ref_rate:,.0f} calls/s",
        ),
    ]


async def _rate(run: Any, per_caller: int) -> float:
    start = time.perf_counter()
    await run(per_caller)
    return CALLERS * per_caller / (time.perf_counter() - start)


def run_mcp(config: BenchConfig, loop: str) -> list[Measurement]:
    try:
        import fastgate.mcp  # noqa: F401
    except ImportError:
        return [
            Measurement(
                "mcp",
                "skipped: the mcp extra is not installed (pip install 'fastgate[mcp]')",
                0.0,
                unit="",
            )
        ]
    with _http_server() as url, asyncio.Runner(loop_factory=loop_factory(loop)) as runner:
        return runner.run(_measure(config, url))
