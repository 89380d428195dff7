"""The gateway's older era (2025-11-25, sessions) on the wire: a request whose id is not a string
or an integer is an invalid request, not a notification; a request re-using the id of one in
flight on its session is refused while the first keeps its answer; and a call in flight when
the gateway is told to stop finishes and is answered, within the server's shutdown bound."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from mcp.shared.dispatcher import ProgressFnT

import fastgate
from fastgate import PermissionConfig, SqliteToolUseStore, ToolKind
from fastgate.serve import Gateway
from tests.mcp.servers import FIXTURE, alive, records
from tests.processes_kit import until_dead
from tests.serve.kit import (
    LEGACY,
    client,
    executor,
    gateway_process,
    legacy_session,
    registry,
    serving,
    text_of,
)

RUNS: list[str] = []
HELD: dict[str, asyncio.Event] = {}


@fastgate.tool(kind=ToolKind.EXECUTE)
async def charge(order: str) -> str:
    """Charge an order (records each run; waits while the test holds it).

    Args:
        order: which.
    """
    RUNS.append(order)
    HELD["running"].set()
    await HELD["release"].wait()
    return f"charged {order}"


@fastgate.tool(kind=ToolKind.EXECUTE)
async def stuck(order: str) -> str:
    """Never ends by itself (records whether it was cancelled).

    Args:
        order: which.
    """
    RUNS.append(order)
    HELD["running"].set()
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        HELD["cancelled"].set()
        raise
    return "unreachable"


@pytest.fixture(autouse=True)
def _fresh() -> None:
    RUNS.clear()
    HELD.clear()
    for name in ("running", "release", "cancelled"):
        HELD[name] = asyncio.Event()


def _rules() -> PermissionConfig:
    return PermissionConfig(allow=["charge", "stuck", "echo"])


def _call(request_id: Any, name: str = "charge", **arguments: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments or {"order": "o-1"}},
    }


def _sse_message(response: httpx.Response) -> dict[str, Any]:
    data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
    found: dict[str, Any] = json.loads(data[-1])
    return found


# -- ids that are not ids ------------------------------------------------------------------------

_NOT_IDS: list[Any] = [{"a": 1}, {}, [1], [], True, False, 1.5, 1.0, 1e3, None]


async def test_a_request_whose_id_is_not_a_string_or_integer_is_an_invalid_request() -> None:
    """JSON-RPC's invalid request (-32600, id null) for every kind of id that is not one, on
    every method; nothing runs, and the session serves the next request as usual."""
    gateway = Gateway(executor(registry(charge), permissions=_rules()), rate_limit=None)
    HELD["release"].set()
    async with serving(gateway) as url, httpx.AsyncClient(timeout=30) as http:
        headers = await legacy_session(http, url)
        for request_id in _NOT_IDS:
            for body in (
                _call(request_id),
                {"jsonrpc": "2.0", "id": request_id, "method": "tools/list"},
            ):
                answer = await http.post(url, json=body, headers=headers)
                assert answer.status_code == 400, (request_id, answer.status_code, answer.text)
                error = answer.json()
                assert error["id"] is None and error["error"]["code"] == -32600, error
                assert "string or an integer" in error["error"]["message"]
        # The same bytes a client writes by hand (a fraction, an exponent, nested ids).
        for raw in ('{"id": 2.50', '{"id": -0.0', '{"id": 1E2', '{"id": {"id": 1}'):
            text = (
                raw
                + ', "jsonrpc": "2.0", "method": "tools/call", "params": '
                + json.dumps({"name": "charge", "arguments": {"order": "raw"}})
            )
            answer = await http.post(
                url,
                content=text + "}",
                headers={**headers, "content-type": "application/json"},
            )
            assert answer.status_code == 400 and answer.json()["error"]["code"] == -32600, raw
        assert RUNS == []
        served = await http.post(url, json=_call(9), headers=headers)
        assert served.status_code == 200
        assert _sse_message(served)["result"]["content"][0]["text"] == "charged o-1"
    assert RUNS == ["o-1"]
    assert gateway.metrics.http_rejections.labels("400")._value.get() == 2 * len(_NOT_IDS) + 4


# -- a re-sent request ----------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _journaled(tmp_path: Path) -> AsyncIterator[tuple[Gateway, str]]:
    store = await SqliteToolUseStore.open(tmp_path / "journal.db")
    served = executor(registry(charge), store=store, permissions=_rules())
    gateway = Gateway(served, rate_limit=None)
    try:
        async with serving(gateway) as url:
            yield gateway, url
    finally:
        served.dispose()
        await store.close()


@pytest.mark.parametrize(
    ("first", "again"),
    [(7, 7), ("seven", "seven"), (7, "7"), ("7", 7)],
    ids=["same-integer", "same-string", "integer-then-its-digits", "digits-then-the-integer"],
)
async def test_a_request_re_sent_while_in_flight_is_refused_and_the_first_keeps_its_answer(
    tmp_path: Path, first: Any, again: Any
) -> None:
    """The re-send gets -32600 with its id (HTTP 409) at once; the first is answered on its own
    response, the body runs once, and once the first has answered a re-send gets the recorded
    result. Another session's request with the same id is not affected."""
    async with _journaled(tmp_path) as (_, url), httpx.AsyncClient(timeout=30) as http:
        headers = await legacy_session(http, url)
        other = await legacy_session(http, url)
        pending = asyncio.create_task(http.post(url, json=_call(first), headers=headers))
        async with asyncio.timeout(20):
            await HELD["running"].wait()
        for _ in range(2):
            async with asyncio.timeout(10):  # refused at once, not held until the call ends
                refused = await http.post(url, json=_call(again), headers=headers)
            assert refused.status_code == 409, refused.text
            error = refused.json()
            assert error["id"] == again and error["error"]["code"] == -32600, error
            assert "still in flight" in error["error"]["message"]
        elsewhere = await http.post(url, json=_call(first, name="echo", text="hi"), headers=other)
        assert elsewhere.status_code == 200
        assert _sse_message(elsewhere)["result"]["content"][0]["text"] == "hi"
        HELD["release"].set()
        async with asyncio.timeout(20):
            answered = _sse_message(await pending)
        assert answered["id"] == first
        assert answered["result"]["content"][0]["text"] == "charged o-1"
        assert answered["result"]["_meta"]["fastgate"]["replayed"] is False
        # Answered: the same request again is served, from the journal.
        again_answered = _sse_message(await http.post(url, json=_call(first), headers=headers))
        assert again_answered["id"] == first
        assert again_answered["result"]["content"][0]["text"] == "charged o-1"
        assert again_answered["result"]["_meta"]["fastgate"]["replayed"] is True
    assert RUNS == ["o-1"]


# -- shutdown ------------------------------------------------------------------------------------


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    (project / ".fastgate").mkdir(parents=True)
    (project / ".fastgate" / "settings.json").write_text(
        json.dumps({"permissions": {"allow": ["mcp__fx"]}})
    )
    fx = {
        "command": sys.executable,
        "args": [str(FIXTURE), "stdio"],
        "env": {"FIXTURE_RECORD": str(tmp_path / "fx.jsonl")},
    }
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": {"fx": fx}}))
    return project


@pytest.mark.slow
async def test_a_call_in_flight_at_sigterm_finishes_and_is_answered(
    workspace: Path, tmp_path: Path
) -> None:
    """SIGTERM while an older-era call runs upstream: the call finishes, its client gets the
    answer, the gateway exits 0, and neither it nor the upstream server outlives it."""
    home = tmp_path / "home"
    home.mkdir()
    with gateway_process("--builtin", "none", cwd=workspace, env={"HOME": str(home)}) as gw:
        async with client(gw.url, LEGACY) as mcp:
            await mcp.list_tools()  # the client checks results against these schemas
            server_pid = int(text_of(await mcp.call_tool("mcp__fx__pid", {})))
            reported = asyncio.Event()

            async def on_progress(
                progress: float, total: float | None, message: str | None
            ) -> None:
                reported.set()

            progress_callback: ProgressFnT = on_progress
            call = asyncio.create_task(
                mcp.call_tool(
                    "mcp__fx__slow",
                    {"seconds": 1.5, "steps": 6, "tag": "drained"},
                    progress_callback=progress_callback,
                )
            )
            async with asyncio.timeout(30):
                await reported.wait()  # running upstream
            gw.process.send_signal(signal.SIGTERM)
            async with asyncio.timeout(30):
                result = await call
        assert not result.is_error, text_of(result)
        assert text_of(result) == "slept 1.5"
        status = await asyncio.to_thread(gw.process.wait, 30)
        assert status == 0 and gw.stop() == 0, gw.stderr()  # (stop: exited, closes its log)
        await until_dead([server_pid])
        assert not alive(gw.pid) and not alive(server_pid)
    events = [(r["event"], r.get("tag")) for r in records(tmp_path / "fx.jsonl")]
    assert ("done", "drained") in events and ("cancelled", "drained") not in events


@contextlib.asynccontextmanager
async def _serving_with_grace(
    gateway: Gateway, grace: int
) -> AsyncIterator[tuple[uvicorn.Server, asyncio.Task[None], str]]:
    """``gateway`` on uvicorn with a graceful shutdown timeout of ``grace`` seconds."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    config = uvicorn.Config(
        gateway.asgi(),
        http="httptools",
        lifespan="on",
        log_level="critical",
        access_log=False,
        timeout_graceful_shutdown=grace,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        async with asyncio.timeout(20):
            while not server.started:  # uvicorn reports its start by this flag alone
                if task.done():
                    task.result()
                await asyncio.sleep(0.01)
        yield server, task, f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    finally:
        server.should_exit = True
        await task
        sock.close()
        for each in asyncio.all_tasks():  # sse-starlette's shutdown poller outlives the server
            if getattr(each.get_coro(), "__name__", "") == "_shutdown_watcher":
                each.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await each


async def test_the_wait_for_calls_in_flight_is_bounded_by_the_server_s_shutdown_timeout() -> None:
    """A call that does not end is given the server's graceful shutdown timeout, no longer:
    it is then cancelled, and the server stops with nothing left running."""
    gateway = Gateway(executor(registry(stuck), permissions=_rules()), rate_limit=None)
    async with _serving_with_grace(gateway, 1) as (server, task, url):
        async with httpx.AsyncClient(timeout=30) as http:
            headers = await legacy_session(http, url)
            pending = asyncio.create_task(
                http.post(url, json=_call(1, name="stuck"), headers=headers)
            )
            async with asyncio.timeout(20):
                await HELD["running"].wait()
            began = time.monotonic()
            server.should_exit = True
            async with asyncio.timeout(20):
                await HELD["cancelled"].wait()
            held = time.monotonic() - began
            async with asyncio.timeout(20):
                await task
            assert 0.9 <= held < 10, held  # given the server's second, then cancelled
            with contextlib.suppress(httpx.HTTPError):
                await pending
    assert RUNS == ["o-1"]
    stats = gateway.executor.scheduler.stats()
    assert stats.in_flight == 0 and stats.queued == 0
