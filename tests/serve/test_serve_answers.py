"""How a 2026-era ``tools/call`` is answered on the wire: one JSON body when it ends within the
keepalive window; an SSE stream (pings, progress events, then the answer) when it runs past it or
reports progress; a client closing the connection cancels the call."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import json
from collections.abc import AsyncIterator
from typing import Any, cast

import httpx
import pytest

import fastgate
from fastgate import RunContext, ToolKind
from fastgate.serve import Gateway, _answers
from fastgate.serve._gateway import PROGRESS_CHARS
from tests.serve.kit import (
    MODERN,
    executor,
    modern_envelope,
    post_modern,
    registry,
    rpc_result,
    serving,
)


class _Gate:
    """A tool's way to hold a call until the test lets it go, and to say where it got to."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.cancelled = asyncio.Event()


@contextlib.asynccontextmanager
async def _served(gate: _Gate) -> AsyncIterator[str]:
    """A gateway serving ``held``; the gate opens on the way out, so that a failed test ends
    (the server's shutdown waits for its calls)."""
    gateway = Gateway(executor(registry(_gated(gate))), approvals="deny")
    try:
        async with serving(gateway) as url:
            try:
                yield url
            finally:
                gate.release.set()
    finally:
        gateway.executor.dispose()


def _gated(gate: _Gate) -> Any:
    @fastgate.tool(kind=ToolKind.READ_ONLY)
    async def held(steps: int, ctx: RunContext) -> str:
        """Report ``steps`` progress steps, then wait until released.

        Args:
            steps: progress reports made before waiting.
        """
        for step in range(steps):
            ctx.report_progress({"progress": step + 1, "message": f"step {step + 1}"})
        gate.started.set()
        try:
            await gate.release.wait()
        except asyncio.CancelledError:
            gate.cancelled.set()
            raise
        return "released"

    return held


def _call_body(steps: int, progress_token: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = modern_envelope()
    if progress_token is not None:
        meta["progressToken"] = progress_token
    return {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "held", "arguments": {"steps": steps}, "_meta": meta},
    }


_HEADERS = {
    "accept": "application/json, text/event-stream",
    "mcp-protocol-version": MODERN,
    "mcp-method": "tools/call",
    "mcp-name": "held",
}


async def _events(response: httpx.Response) -> AsyncIterator[str | dict[str, Any]]:
    """The stream's items in order: ``"ping"`` for a comment, else the event's JSON message."""
    async for line in response.aiter_lines():
        if line.startswith(":"):
            yield "ping"
        elif line.startswith("data:"):
            yield json.loads(line[5:])


async def _answer_tasks_left() -> list[asyncio.Task[Any]]:
    """The answers' helper tasks (pings, disconnect watches) still there after the loop has
    turned enough times for cancelled ones to end."""
    names = ("_keep_alive", "_wait_for_disconnect")
    for _ in range(100):
        left = [
            t
            for t in asyncio.all_tasks()
            if getattr(t.get_coro(), "__name__", "") in names and not t.done()
        ]
        if not left:
            break
        await asyncio.sleep(0)
    return left


async def test_a_call_that_ends_within_the_window_is_one_json_body(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_answers, "WATCH_AFTER", 0.0)  # its disconnect watch starts at once
    gate = _Gate()
    gate.release.set()
    async with _served(gate) as url, httpx.AsyncClient() as http:
        for spelling in ("application/json, text/event-stream", "text/event-stream, */*"):
            answer = await post_modern(
                http,
                url,
                "tools/call",
                {"name": "held", "arguments": {"steps": 0}},
                headers={"accept": spelling},
            )
            assert answer.status_code == 200
            assert answer.headers["content-type"] == "application/json"
            assert rpc_result(answer)["content"][0]["text"] == "released"
        assert await _answer_tasks_left() == []


async def test_a_call_past_the_window_streams_pings_then_its_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_answers, "KEEPALIVE", 0.05)
    gate = _Gate()
    async with _served(gate) as url, httpx.AsyncClient(timeout=30) as http:
        async with (
            asyncio.timeout(20),
            http.stream("POST", url, json=_call_body(0), headers=_HEADERS) as response,
        ):
            assert response.status_code == 200
            assert response.headers["content-type"] == "text/event-stream"
            seen: list[str | dict[str, Any]] = []
            async for item in _events(response):
                seen.append(item)
                if seen.count("ping") == 2:
                    gate.release.set()  # two windows passed: let the call end
        assert seen[:2] == ["ping", "ping"]
        last = seen[-1]
        assert isinstance(last, dict) and last["id"] == 7
        assert last["result"]["content"][0]["text"] == "released"
        assert all(item == "ping" for item in seen[:-1])
    assert await _answer_tasks_left() == []


async def test_progress_opens_the_stream_before_the_window_passes() -> None:
    gate = _Gate()
    async with _served(gate) as url, httpx.AsyncClient(timeout=30) as http:
        body = _call_body(3, progress_token="p-1")
        async with (
            asyncio.timeout(20),
            http.stream("POST", url, json=body, headers=_HEADERS) as response,
        ):
            assert response.headers["content-type"] == "text/event-stream"
            seen: list[str | dict[str, Any]] = []
            async for item in _events(response):
                seen.append(item)
                if isinstance(item, dict) and item.get("params", {}).get("progress") == 3:
                    gate.release.set()  # the window (15 s) is far off: progress opened it
    reports = [item for item in seen if isinstance(item, dict) and "method" in item]
    assert [r["method"] for r in reports] == ["notifications/progress"] * 3
    assert [r["params"]["progress"] for r in reports] == [1, 2, 3]
    assert {r["params"]["progressToken"] for r in reports} == {"p-1"}
    assert reports[-1]["params"]["message"] == "step 3"
    last = seen[-1]
    assert isinstance(last, dict) and last["result"]["content"][0]["text"] == "released"


# A tool's progress data of any size reaches the client as a message of at most
# PROGRESS_CHARS characters, written no further than that (a million-item list is not
# encoded whole to keep its first thousand characters).
_HUGE_PROGRESS = {
    "text": "x" * 5_000_000,
    "a mapping's message": {"progress": 1, "message": "y" * 5_000_000},
    "a long list": list(range(1_000_000)),
    "a deep value": functools.reduce(lambda inner, _: [inner], range(100_000), cast(Any, [])),
}


@pytest.mark.parametrize("data", list(_HUGE_PROGRESS.values()), ids=list(_HUGE_PROGRESS))
async def test_a_huge_progress_report_reaches_the_client_bounded(data: Any) -> None:
    heard = asyncio.Event()

    @fastgate.tool(kind=ToolKind.READ_ONLY)
    async def chatty(ctx: RunContext) -> str:
        """Report one huge progress step, then wait until the client has it."""
        ctx.report_progress(data)
        await heard.wait()
        return "said"

    gateway = Gateway(executor(registry(chatty)), approvals="deny")
    body = _call_body(0, progress_token="p-9")
    body["params"]["name"] = "chatty"
    body["params"]["arguments"] = {}
    try:
        async with serving(gateway) as url, httpx.AsyncClient(timeout=30) as http:
            headers = {**_HEADERS, "mcp-name": "chatty"}
            async with (
                asyncio.timeout(20),
                http.stream("POST", url, json=body, headers=headers) as response,
            ):
                seen: list[str | dict[str, Any]] = []
                async for item in _events(response):
                    seen.append(item)
                    if isinstance(item, dict) and item.get("method") == "notifications/progress":
                        heard.set()
    finally:
        heard.set()
        gateway.executor.dispose()
    reports = [item for item in seen if isinstance(item, dict) and "method" in item]
    assert [r["method"] for r in reports] == ["notifications/progress"]
    message = reports[0]["params"]["message"]
    assert 0 < len(message) <= PROGRESS_CHARS + 100
    assert message[:3] in ("xxx", "yyy", "[0,", "[[[")
    last = seen[-1]
    assert isinstance(last, dict) and last["result"]["content"][0]["text"] == "said"


@pytest.mark.parametrize("streaming", [False, True], ids=["before-the-head", "mid-stream"])
async def test_closing_the_connection_cancels_the_call(
    monkeypatch: pytest.MonkeyPatch, streaming: bool
) -> None:
    if streaming:
        monkeypatch.setattr(_answers, "KEEPALIVE", 0.05)
    gate = _Gate()
    async with _served(gate) as url:
        http = httpx.AsyncClient(timeout=30)
        first_ping = asyncio.Event()

        async def call() -> None:
            async with http.stream("POST", url, json=_call_body(0), headers=_HEADERS) as answer:
                async for _ in answer.aiter_raw():
                    first_ping.set()

        request = asyncio.create_task(call())
        async with asyncio.timeout(20):
            await gate.started.wait()
            if streaming:
                await first_ping.wait()
        assert first_ping.is_set() is streaming
        request.cancel()  # the client gives up: its connection closes
        await http.aclose()
        async with asyncio.timeout(20):
            await gate.cancelled.wait()
        async with asyncio.timeout(20):  # the gateway serves on
            gate.release.set()
            async with httpx.AsyncClient() as again:
                answer = await post_modern(
                    again, url, "tools/call", {"name": "held", "arguments": {"steps": 0}}
                )
        assert rpc_result(answer)["content"][0]["text"] == "released"
    assert await _answer_tasks_left() == []


@pytest.mark.parametrize("window", ["within", "past"])
async def test_a_finished_answer_is_freed_without_the_garbage_collector(
    monkeypatch: pytest.MonkeyPatch, window: str
) -> None:
    """An answer's timers and helper tasks hold a context that holds the answer: if it kept
    them after the call, every call would leave a cycle for the collector (under load such
    cycles reach the oldest generation, which only a full collection clears)."""
    monkeypatch.setattr(_answers, "WATCH_AFTER", 0.0)  # the disconnect watch starts at once
    if window == "past":
        monkeypatch.setattr(_answers, "KEEPALIVE", 0.05)
    gate = _Gate()
    collecting = gc.isenabled()
    gc.collect()
    gc.disable()  # from here on only reference counts free the answers
    try:
        async with _served(gate) as url, httpx.AsyncClient(timeout=30) as http:
            if window == "past":
                async with http.stream("POST", url, json=_call_body(0), headers=_HEADERS) as r:
                    async for item in _events(r):
                        if item == "ping":
                            gate.release.set()  # the answer is a stream with a pinger now
            else:
                gate.release.set()
                answer = await post_modern(
                    http, url, "tools/call", {"name": "held", "arguments": {"steps": 0}}
                )
                assert rpc_result(answer)["content"][0]["text"] == "released"
        # The server has shut down: its request tasks have ended.
        left = [o for o in gc.get_objects() if isinstance(o, _answers._Answer)]
    finally:
        if collecting:
            gc.enable()
    assert left == []
