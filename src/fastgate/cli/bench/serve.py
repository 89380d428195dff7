"""The "serve" scenario: ``tools/call`` through the gateway against a bare MCP SDK server.

Three server processes on uvicorn (``serve_server``): the bare SDK server with a no-op tool,
the gateway serving the same tool (policy, journal and audit on), and a gateway proxying the
bare server's tool through the bridge. The client is the official Python SDK's, streamable
HTTP, the older protocol era (sessions: every call is journaled under its session and request
id). Measured in the same run, alternating: one call at a time (gateway / bare), calls/s with 64
concurrent clients (gateway / bare), and the upstream tool through the gateway against the same
tool called directly; with the gateway's absolute calls/s.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

from fastgate.cli.bench.model import BenchConfig, Measurement, Target
from fastgate.cli.bench.timing import paired_rounds
from fastgate.runtime import loop_factory

CLIENTS = 64
ARGS = {"text": "hello from the bench"}
SERVER_MODULE = "fastgate.cli.bench.serve_server"


class _ServerProcess:
    def __init__(self, *argv: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", SERVER_MODULE, *argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline().decode()
        if not line.startswith("PORT "):
            self.stop()
            raise RuntimeError(f"the bench server {argv[0]} did not start: {self._stderr()}")
        self.url = f"http://127.0.0.1:{int(line.split()[1])}/mcp"

    def _stderr(self) -> str:
        if self.process.stderr is None:
            return ""
        return self.process.stderr.read().decode(errors="replace")[-2000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(20)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


@contextlib.contextmanager
def _servers(directory: str) -> Iterator[tuple[_ServerProcess, _ServerProcess, _ServerProcess]]:
    started: list[_ServerProcess] = []
    try:
        bare = _ServerProcess("bare", directory)
        started.append(bare)
        gateway = _ServerProcess("gateway", directory)
        started.append(gateway)
        proxy = _ServerProcess("proxy", bare.url, directory)
        started.append(proxy)
        yield bare, gateway, proxy
    finally:
        for server in started:
            server.stop()


@contextlib.asynccontextmanager
async def _client(url: str) -> AsyncIterator[Any]:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    from fastgate.cli.bench.serve_server import TOKEN
    from mcp import Client

    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {TOKEN}"}, timeout=httpx2.Timeout(60.0)
    )
    async with http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, mode="legacy") as connected:
            yield connected


def _caller(client: Any, tool: str) -> Callable[[int], Awaitable[None]]:
    async def call(n: int) -> None:
        for _ in range(n):
            result = await client.call_tool(tool, ARGS)
            if result.is_error:
                raise RuntimeError(f"the bench call of {tool} failed: {result.content}")

    return call


async def _rate(clients: list[Any], tool: str, per_client: int) -> float:
    start = time.perf_counter()
    await asyncio.gather(*(_caller(c, tool)(per_client) for c in clients))
    return len(clients) * per_client / (time.perf_counter() - start)


async def _measure(config: BenchConfig) -> list[Measurement]:
    calls = max(40, config.ops // 400)
    with tempfile.TemporaryDirectory() as directory, _servers(directory) as servers:
        bare, gateway, proxy = servers
        async with _client(gateway.url) as ours, _client(bare.url) as reference:
            ratio, ours_ns, ref_ns = await paired_rounds(
                _caller(ours, "noop"), _caller(reference, "noop"), calls, config.rounds
            )
        async with _client(proxy.url) as proxied, _client(bare.url) as direct:
            up_ratio, up_ns, direct_ns = await paired_rounds(
                _caller(proxied, "mcp__up__noop"), _caller(direct, "noop"), calls, config.rounds
            )
        async with contextlib.AsyncExitStack() as stack:
            gateway_clients = [
                await stack.enter_async_context(_client(gateway.url)) for _ in range(CLIENTS)
            ]
            bare_clients = [
                await stack.enter_async_context(_client(bare.url)) for _ in range(CLIENTS)
            ]
            per_client = max(4, calls // 16)
            await _rate(gateway_clients, "noop", 1)  # warm every session
            await _rate(bare_clients, "noop", 1)
            ours_rates, ref_rates = [], []
            for _ in range(max(3, config.rounds // 3)):
                ours_rates.append(await _rate(gateway_clients, "noop", per_client))
                ref_rates.append(await _rate(bare_clients, "noop", per_client))
    rate, ref_rate = statistics.median(ours_rates), statistics.median(ref_rates)
    return [
        Measurement(
            "serve",
            "tools/call through the gateway / bare SDK server",
            ratio,
            reference="mcp lowlevel Server, same transport and client",
            target=Target("<=", 1.25, ci_bound=1.5),
            detail=f"{ours_ns / 1000:,.0f} vs {ref_ns / 1000:,.0f} us per call "
            "(policy, journal, audit on)",
        ),
        Measurement(
            "serve",
            f"calls/s with {CLIENTS} clients, gateway / bare",
            rate / ref_rate,
            reference="mcp lowlevel Server, same clients",
            target=Target(">=", 0.8, ci_bound=0.65),
            detail=f"{rate:,.0f} vs {ref_rate:,.0f} calls/s",
        ),
        Measurement(
            "serve",
            "upstream tool through the gateway / called directly",
            up_ratio,
            reference="the same bare server called directly",
            target=Target("<=", 1.3, ci_bound=1.6),
            detail=f"{up_ns / 1000:,.0f} vs {direct_ns / 1000:,.0f} us per call",
        ),
        Measurement(
            "serve",
            f"calls/s per gateway process, {CLIENTS} clients",
            rate,
            unit="calls/s",
            detail="one uvicorn process (uvloop, httptools); the client in another",
        ),
    ]


def run_serve(config: BenchConfig, loop: str) -> list[Measurement]:
    try:
        import uvicorn  # noqa: F401

        import fastgate.serve  # noqa: F401
    except ImportError:
        return [
            Measurement(
                "serve",
                "skipped: the serve extra is not installed (pip install 'fastgate[serve]')",
                0.0,
                unit="",
            )
        ]
    with asyncio.Runner(loop_factory=loop_factory(loop)) as runner:
        return runner.run(_measure(config))
