"""The "mcp" scenario: an MCP tool through the whole pipeline against the SDK's own call.

One stdio server (``mcp_echo_server``), one connection. ``execute()`` of its ``echo`` tool (every
stage: validation, policy, admission, invocation, result) is timed against ``Client.call_tool``
of the same tool on the same connection, alternating in the same run; then 32 callers in 8
sessions (an executor each, one shared scheduler) call it at once, against 32 concurrent
``call_tool`` tasks. Needs the ``mcp`` extra; without it the scenario says so and measures nothing.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from typing import Any

from fastgate import (
    ConcurrencyScheduler,
    ExecutionContext,
    PermissionConfig,
    SchedulerLimits,
    ToolExecutor,
    ToolRegistry,
)
from fastgate.cli.bench.model import BenchConfig, Measurement, Target
from fastgate.cli.bench.timing import paired_rounds
from fastgate.runtime import loop_factory

SESSIONS, CALLERS = 8, 32
TOOL = "mcp__bench__echo"
ARGS = {"text": "hello from the bench"}


async def _measure(config: BenchConfig) -> list[Measurement]:
    from fastgate.mcp import MCPBridge, MCPServerConfig

    server = MCPServerConfig(
        "bench",
        command=[sys.executable, "-m", "fastgate.cli.bench.mcp_echo_server"],
        trust_annotations=True,  # echo is read-only by its hint: calls may overlap
        max_concurrency=CALLERS,
    )
    registry = ToolRegistry()
    async with MCPBridge(registry, [server]) as bridge:
        if bridge.status()["bench"]["state"] != "ready":
            raise RuntimeError(f"the bench MCP server did not start: {bridge.status()}")
        client = bridge._links["bench"]._client  # the same connection, for the SDK's own call
        assert client is not None
        limits = SchedulerLimits(global_limit=CALLERS, session_limit=CALLERS)
        scheduler = ConcurrencyScheduler(limits)
        permissions = PermissionConfig(allow=[TOOL])
        executors = [
            ToolExecutor(registry, permissions=permissions, scheduler=scheduler)
            for _ in range(SESSIONS)
        ]
        contexts = [ExecutionContext(session_id=f"session-{n}") for n in range(SESSIONS)]
        executor, ctx = executors[0], contexts[0]

        async def ours(n: int) -> None:
            for _ in range(n):
                result = await executor.execute(TOOL, ARGS, ctx)
                if not result.ok:
                    raise RuntimeError(f"the bench call failed: {result.content}")

        async def reference(n: int) -> None:
            for _ in range(n):
                await client.call_tool("echo", ARGS)

        calls = max(40, config.ops // 400)  # fewer calls per round: noisier ratios
        ratio, ours_ns, ref_ns = await paired_rounds(ours, reference, calls, config.rounds)

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
    with asyncio.Runner(loop_factory=loop_factory(loop)) as runner:
        return runner.run(_measure(config))
