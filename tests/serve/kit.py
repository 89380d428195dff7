"""What the gateway's tests share: tools, a gateway on a real uvicorn server in the test's loop,
the official Python SDK's client in either protocol era, and a ``fastgate serve`` process."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import httpx2
import uvicorn
from mcp.client.streamable_http import streamable_http_client

import fastgate
from fastgate import (
    ConcurrencyScheduler,
    FileLockManager,
    PermissionConfig,
    SchedulerLimits,
    ToolExecutor,
    ToolKind,
    ToolRegistry,
)
from fastgate.serve import Gateway, token_digest
from mcp import Client

ROOT = Path(__file__).resolve().parents[2]
ERAS = ("legacy", "2026-07-28")
LEGACY, MODERN = ERAS
TOKENS = {"alice-secret-token": "alice", "bob-secret-token": "bob", "carol-secret-token": "carol"}


@fastgate.tool(kind=ToolKind.READ_ONLY)
async def echo(text: str) -> str:
    """Return the text.

    Args:
        text: what to return.
    """
    return text


@fastgate.tool(kind=ToolKind.EXECUTE)
async def deploy(target: str) -> str:
    """Deploy the build.

    Args:
        target: where to.
    """
    return f"deployed to {target}"


@fastgate.tool(kind=ToolKind.WRITE)
async def forbidden(text: str) -> str:
    """A tool a rule denies outright.

    Args:
        text: anything.
    """
    return text


def registry(*extra: Any) -> ToolRegistry:
    found = ToolRegistry()
    for tool in (echo, deploy, forbidden, *extra):
        found.register(tool)
    return found


def executor(
    tools: ToolRegistry | None = None,
    *,
    permissions: PermissionConfig | None = None,
    limits: SchedulerLimits | None = None,
    **options: Any,
) -> ToolExecutor:
    return ToolExecutor(
        tools if tools is not None else registry(),
        permissions=permissions or PermissionConfig(deny=["forbidden"]),
        scheduler=ConcurrencyScheduler(limits or SchedulerLimits()),
        locks=FileLockManager(),
        **options,
    )


def tokens_file(path: Path, modes: Mapping[str, str | None] | None = None) -> Path:
    entries = {
        token_digest(token): {"principal": who, "mode": (modes or {}).get(who), "scope": None}
        for token, who in TOKENS.items()
    }
    path.write_text(json.dumps(entries))
    return path


@contextlib.asynccontextmanager
async def serving(gateway: Gateway) -> AsyncIterator[str]:
    """``gateway`` on uvicorn (httptools) at a free loopback port; its ``/mcp`` URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        gateway.asgi(), http="httptools", lifespan="on", log_level="warning", access_log=False
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.should_exit = True
        await task
        sock.close()
        await _stop_sse_watcher()


async def _stop_sse_watcher() -> None:
    """sse-starlette (under the SDK's SSE responses) polls for uvicorn's shutdown in a task of
    its own per loop; it outlives the server by one poll. End it with the server."""
    for task in asyncio.all_tasks():
        if getattr(task.get_coro(), "__name__", "") == "_shutdown_watcher":
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


@contextlib.asynccontextmanager
async def client(
    url: str,
    era: str,
    *,
    token: str | None = None,
    headers: Mapping[str, str] | None = None,
    **options: Any,
) -> AsyncIterator[Client]:
    """The official SDK's client in ``era`` (``legacy``: 2025-11-25, else 2026-07-28)."""
    sent = dict(headers or {})
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    http = httpx2.AsyncClient(headers=sent, timeout=httpx2.Timeout(30.0))
    async with http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, mode=era, **options) as connected:
            yield connected


def text_of(result: Any) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


def fastgate_meta(result: Any) -> dict[str, Any]:
    meta = result.meta or {}
    found: dict[str, Any] = meta["fastgate"]
    return found


# -- a gateway process ------------------------------------------------------------------------


class GatewayProcess:
    """``fastgate serve`` in a process of its own; ``url`` once it listens."""

    def __init__(self, *args: str, cwd: Path, env: Mapping[str, str] | None = None) -> None:
        command = [sys.executable, "-m", "fastgate", "serve", "--listen", "127.0.0.1:0", *args]
        environment = {**os.environ, "PYTHONPATH": str(ROOT / "src"), **(env or {})}
        self.stderr_path = cwd / f"serve-{time.monotonic_ns()}.err"
        self._stderr = open(self.stderr_path, "wb")
        self.process = subprocess.Popen(
            command,
            cwd=cwd,
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
            start_new_session=True,
        )
        self.url = self._wait_for_url()

    def _wait_for_url(self, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(r"listening on (http://\S+/mcp)", self.stderr())
            if found:
                return found.group(1)
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"fastgate serve exited {self.process.returncode}: {self.stderr()}"
                )
            time.sleep(0.05)
        raise RuntimeError(f"fastgate serve did not start: {self.stderr()}")

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            return self.process.wait(timeout)
        finally:
            self._stderr.close()

    def kill(self) -> None:
        """SIGKILL the gateway's whole process group (its upstream servers included)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(30)
        self._stderr.close()


@contextlib.contextmanager
def gateway_process(*args: str, cwd: Path, **options: Any) -> Iterator[GatewayProcess]:
    process = GatewayProcess(*args, cwd=cwd, **options)
    try:
        yield process
    finally:
        if process.process.poll() is None:
            process.stop()


# -- the wire, by hand ------------------------------------------------------------------------


ACCEPT: dict[str, str] = {"accept": "application/json, text/event-stream"}
INITIALIZE: dict[str, Any] = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}


async def legacy_session(http: httpx.AsyncClient, url: str) -> dict[str, str]:
    """A 2025-11-25 session opened as a client opens one (initialize, then initialized): the
    headers its requests carry."""
    opened = await http.post(url, json=INITIALIZE, headers=ACCEPT)
    headers = {
        **ACCEPT,
        "mcp-session-id": opened.headers["mcp-session-id"],
        "mcp-protocol-version": "2025-11-25",
    }
    await http.post(
        url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers
    )
    return headers


def modern_envelope(elicits: bool = True) -> dict[str, Any]:
    capabilities: dict[str, Any] = {"elicitation": {"form": {}}} if elicits else {}
    return {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    }


async def post_modern(
    http: httpx.AsyncClient,
    url: str,
    method: str,
    params: dict[str, Any],
    *,
    token: str | None = None,
    request_id: int = 1,
    headers: Mapping[str, str] | None = None,
    elicits: bool = True,
) -> httpx.Response:
    """One 2026-era request as a client puts it on the wire (headers and ``_meta``)."""
    sent = {
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": MODERN,
        "mcp-method": method,
        **(headers or {}),
    }
    if "name" in params:
        sent["mcp-name"] = params["name"]
    if token is not None:
        sent["authorization"] = f"Bearer {token}"
    meta = {**modern_envelope(elicits), **params.get("_meta", {})}
    body = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": method,
        "params": {**params, "_meta": meta},
    }
    return await http.post(url, json=body, headers=sent)


def rpc_result(response: Any) -> dict[str, Any]:
    """The JSON-RPC result of a response (JSON or a one-event SSE stream)."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
        message = json.loads(data[-1])
    else:
        message = response.json()
    assert "result" in message, message
    found: dict[str, Any] = message["result"]
    return found
