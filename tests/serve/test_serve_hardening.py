"""What a hostile client cannot do to the gateway over HTTP: end a line of the console's event
streams with a tool's name or an argument, grow ``/metrics`` with made-up tool names, dodge the
console's sign-in limit with forwarding headers, hold a connection open by trickling its request
head, or read ``/metrics`` through a rebound DNS name."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from prometheus_client.parser import text_string_to_metric_families

from fastgate.model import ApprovalResponse
from fastgate.serve import Gateway, http_protocol
from tests.serve.browser import browsers, sign_in
from tests.serve.console_kit import ADMIN, console_gateway, origin_of
from tests.serve.kit import (
    LEGACY,
    client,
    executor,
    gateway_process,
    post_modern,
    registry,
    serving,
    tokens_file,
)

ALICE = "alice-secret-token"

# Tool names and arguments that try to end a line of an event stream, each way a parser may
# end one (CR, LF, CRLF), and characters some parsers (not EventSource's) take for line ends.
HOSTILE = (
    "zz\rid: forged\revent: gone\r",
    "yy\r\nevent: gone\r\ndata: {}\r\n\r\n",
    "xx\nevent: gone\n\nretry: 1\n",
    "ww\r\r\rid: x\r\rdata: y",
    "vv\u2028event: gone\u0085\x0b\x0c\x1c\x1d\x1e\u2029",
)


# -- the console's event streams --------------------------------------------------------------


def _events(text: str) -> list[dict[str, Any]]:
    """The events a stream's text holds, parsed as EventSource does (a line ends at CR, LF or
    CRLF; an empty line dispatches). Only complete events count."""
    if text.endswith("\r"):
        text = text[:-1]  # (maybe the first half of a CRLF)
    events: list[dict[str, Any]] = []
    current: dict[str, Any] = {"event": "message", "data": [], "fields": []}
    for line in re.split(r"\r\n|\r|\n", text)[:-1]:
        if not line:
            if current["data"] or current["fields"]:
                events.append(current)
            current = {"event": "message", "data": [], "fields": []}
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        current["fields"].append(field)
        if field == "event":
            current["event"] = value
        elif field == "data":
            current["data"].append(value)
    return events


async def _signed_in(http: httpx.AsyncClient, origin: str) -> None:
    answer = await http.post(f"{origin}/console/login", data={"token": ADMIN})
    assert answer.status_code == 303, answer.text
    assert http.cookies.get("fastgate_console")


@contextlib.asynccontextmanager
async def _stream(http: httpx.AsyncClient, url: str) -> AsyncIterator[AsyncIterator[str]]:
    """A console event stream's text, as it comes."""
    async with http.stream("GET", url) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        chunks = response.aiter_text()
        try:
            yield chunks
        finally:
            await chunks.aclose()  # type: ignore[attr-defined]


async def _until_events(
    chunks: AsyncIterator[str], wanted: Any, seen: list[str]
) -> list[dict[str, Any]]:
    """Read the stream until ``wanted(events)``; every event read so far."""
    async with asyncio.timeout(20):
        while True:
            events = _events("".join(seen))
            if wanted(events):
                return events
            seen.append(await anext(chunks))


def _count(kind: str, n: int) -> Any:
    return lambda events: sum(e["event"] == kind for e in events) >= n


def _check_whole(events: list[dict[str, Any]], names: set[str]) -> None:
    """Each event has exactly one event line and one data line, of a known name, and its data
    is JSON."""
    for event in events:
        assert event["event"] in names, event
        assert event["fields"] == ["event", "data"], event
        assert len(event["data"]) == 1, event
        json.loads(event["data"][0])


async def test_a_caller_s_text_never_ends_a_line_of_the_live_state_stream(tmp_path: Path) -> None:
    gateway = console_gateway(tmp_path, approvals="deny")
    async with serving(gateway) as url, httpx.AsyncClient(timeout=30) as http:
        origin = origin_of(url)
        await _signed_in(http, origin)
        async with _stream(http, f"{origin}/console/state/events") as stream:
            seen: list[str] = []
            await _until_events(stream, lambda events: len(events) >= 1, seen)
            async with client(url, LEGACY) as mcp:
                for name in HOSTILE:
                    result = await mcp.call_tool(name, {})
                    assert result.is_error
                await mcp.call_tool("pay", {"amount": 1.0, "to": "Zed", "memo": HOSTILE[1]})

            def shown(events: list[dict[str, Any]]) -> bool:
                last = [e for e in events if e["event"] == "state"]
                return bool(last) and all(
                    marker in "".join(last[-1]["data"]) for marker in ("zz", "vv", "pay")
                )

            events = await _until_events(stream, shown, seen)
        _check_whole(events, {"state"})
        html = json.loads(events[-1]["data"][0])
        for name in HOSTILE:
            assert name[:2] in html
    gateway.executor.dispose()


async def test_a_caller_s_arguments_never_end_a_line_of_the_approvals_stream(
    tmp_path: Path,
) -> None:
    gateway = console_gateway(tmp_path)
    async with serving(gateway) as url, httpx.AsyncClient(timeout=30) as http:
        origin = origin_of(url)
        await _signed_in(http, origin)
        async with _stream(http, f"{origin}/console/events") as stream:
            seen: list[str] = []
            await _until_events(stream, lambda events: len(events) >= 1, seen)
            async with client(url, LEGACY) as mcp:
                for n, memo in enumerate(HOSTILE, 1):  # (one question at a time per session)
                    call = asyncio.create_task(
                        mcp.call_tool("pay", {"amount": 1.0, "to": memo, "memo": memo})
                    )
                    await _until_events(stream, _count("added", n), seen)
                    (waiting,) = gateway.pending.pending()
                    assert gateway.pending.answer(waiting.id, ApprovalResponse(False))
                    events = await _until_events(stream, _count("gone", n), seen)
                    assert (await call).is_error
        _check_whole(events, {"snapshot", "added", "gone"})
        cards = "".join(json.loads(e["data"][0]) for e in events if e["event"] == "added")
        for memo in HOSTILE:
            assert memo[:2] in cards
        for event in events:
            if event["event"] == "gone":
                assert set(json.loads(event["data"][0])) == {"id", "message"}
    gateway.executor.dispose()


@pytest.mark.slow
@pytest.mark.one_loop
async def test_the_live_view_keeps_updating_in_a_browser_after_a_hostile_tool_name(
    tmp_path: Path,
) -> None:
    gateway = console_gateway(tmp_path, approvals="deny")
    async with serving(gateway) as url, browsers(tmp_path) as opened:
        origin = origin_of(url)
        page = await (await opened.launch()).new_page()
        await sign_in(page, origin, ADMIN)
        await page.goto(f"{origin}/console/state")
        await page.evaluate(
            """() => { window.seen = [];
                const source = new EventSource('/console/state/events');
                for (const type of ['state', 'gone', 'added', 'message']) {
                    source.addEventListener(type, event => window.seen.push(
                        {type: type, id: event.lastEventId, json: (() => {
                            try { JSON.parse(event.data); return true; }
                            catch (e) { return false; } })()}));
                } }"""
        )
        await page.wait_for_function("() => window.seen.length >= 1")
        async with client(url, LEGACY) as mcp:
            for name in HOSTILE:
                assert (await mcp.call_tool(name, {})).is_error
            await page.locator("#live", has_text="vv").wait_for()
            await mcp.call_tool("pay", {"amount": 2.0, "to": "After"})
            await page.locator("#live", has_text="pay").wait_for()
        seen = await page.evaluate("window.seen")
        assert seen and all(e == {"type": "state", "id": "", "json": True} for e in seen), seen
    gateway.executor.dispose()


# -- /metrics: no series from a caller's text -------------------------------------------------


def _calls_series(text: str) -> dict[tuple[str, str], float]:
    found: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "fastgate_calls_total":
                found[(sample.labels["tool"], sample.labels["outcome"])] = sample.value
    return found


async def test_made_up_tool_names_never_become_metric_series(tmp_path: Path) -> None:
    gateway = Gateway(
        executor(registry()), tokens=tokens_file(tmp_path / "tokens.json"), rate_limit=None
    )
    bearer = {"authorization": f"Bearer {ALICE}"}
    made_up = [  # on the wire of the 2026 era (Mcp-Name too)
        *(f"{i:04d}-" + "x" * 500 for i in range(60)),
        "ECHO",
        "deploy/../echo",
        'a"b',
        "a\\b",
        "fastgate_calls_total",
        "(unknown)x",
    ]
    spoken = [*HOSTILE, "echo\u200b", "é", " echo", "echo ", "x" * 5000]  # in a 2025-11-25 session
    async with serving(gateway) as url, httpx.AsyncClient(timeout=30) as http:
        origin = origin_of(url)
        assert (
            await post_modern(
                http, url, "tools/call", {"name": "echo", "arguments": {"text": "a"}}, token=ALICE
            )
        ).status_code == 200
        for i, name in enumerate(made_up):
            call = {"name": name, "arguments": {}}
            answer = await post_modern(http, url, "tools/call", call, token=ALICE, request_id=i)
            assert answer.status_code == 200, answer.text
        # The refused paths name the tool too: a bad idempotency key, a forged requestState.
        for name in made_up[:10]:
            call = {"name": name, "arguments": {}}
            key = {"idempotency-key": "k" * 300}
            await post_modern(http, url, "tools/call", call, token=ALICE, headers=key)
            forged = {**call, "requestState": "forged"}
            await post_modern(http, url, "tools/call", forged, token=ALICE)
        async with client(url, LEGACY, token=ALICE) as mcp:
            for name in spoken:
                assert (await mcp.call_tool(name, {})).is_error
        metrics = await http.get(origin + "/metrics", headers=bearer)
    assert metrics.status_code == 200
    series = _calls_series(metrics.text)
    assert {tool for tool, _ in series} <= {"echo", "deploy", "forbidden", "(unknown)"}, series
    assert series[("echo", "ok")] == 1
    unknown = sum(value for (tool, _), value in series.items() if tool == "(unknown)")
    assert unknown >= len(made_up) + 20 + len(spoken)
    assert len(series) <= 8, series
    assert len(metrics.text) < 20_000
    gateway.executor.dispose()


# -- the console's sign-in limit and forwarding headers ---------------------------------------

FORWARDED: tuple[Callable[[int], dict[str, str]], ...] = (
    lambda i: {"x-forwarded-for": f"10.9.0.{i}"},
    lambda i: {"x-forwarded-for": f"10.9.1.{i}, 127.0.0.1"},
    lambda i: {"x-forwarded-for": f"2001:db8::{i:x}"},
    lambda i: {"forwarded": f"for=10.9.2.{i}"},
    lambda i: {"x-real-ip": f"10.9.3.{i}"},
    lambda i: {"x-forwarded-for": f"10.9.4.{i}", "x-forwarded-proto": "https"},
)


@contextlib.contextmanager
def _console_process(tmp_path: Path, *extra: str) -> Iterator[tuple[str, str]]:
    """``fastgate serve --console``: its origin and the admin token it printed."""
    work = tmp_path / f"work-{len(list(tmp_path.iterdir()))}"
    work.mkdir()
    with gateway_process(
        "--console",
        "--builtin",
        "read",
        "--no-discover",
        "--workspace",
        str(work),
        *extra,
        cwd=work,
    ) as gw:
        deadline = time.monotonic() + 30
        while (found := re.search(r"admin token (\S+) ", gw.stderr())) is None:
            assert time.monotonic() < deadline, gw.stderr()
            time.sleep(0.05)
        yield origin_of(gw.url), found.group(1)


def test_forwarding_headers_do_not_reset_the_sign_in_limit(tmp_path: Path) -> None:
    with _console_process(tmp_path) as (origin, _), httpx.Client(timeout=30) as http:
        login = f"{origin}/console/login"
        statuses = [
            http.post(login, data={"token": f"wrong-{i}"}, headers=FORWARDED[i % 6](i)).status_code
            for i in range(10)
        ]
        assert statuses == [401] * 10
        for i, spelling in enumerate(FORWARDED):
            answer = http.post(login, data={"token": f"again-{i}"}, headers=spelling(100 + i))
            assert answer.status_code == 429, spelling(100 + i)


def test_forwarding_headers_count_only_from_the_proxies_named(tmp_path: Path) -> None:
    # (With tokens: without them, a client the proxy names on another machine is refused.)
    tokens = str(tokens_file(tmp_path / "tokens.json"))
    with (
        _console_process(tmp_path, "--forwarded-allow-ips", "127.0.0.1", "--tokens", tokens) as (
            origin,
            _,
        ),
        httpx.Client(timeout=30) as http,
    ):
        login = f"{origin}/console/login"
        statuses = [
            http.post(
                login, data={"token": "wrong"}, headers={"x-forwarded-for": f"10.8.0.{i}"}
            ).status_code
            for i in range(15)
        ]
        assert statuses == [401] * 15  # each from its own address, as the proxy says


# -- the request head's deadline --------------------------------------------------------------


async def _trickle(port: int, opening: bytes, every: float, seconds: float) -> tuple[bytes, float]:
    """Connect, send ``opening``, then one header byte every ``every`` s for up to ``seconds``
    (nothing at all when ``opening`` is empty); what the server answered and when it closed."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started = time.monotonic()
    answer = b""
    try:
        if opening:
            writer.write(opening)
        while time.monotonic() - started < seconds:
            try:
                async with asyncio.timeout(every):
                    chunk = await reader.read(4096)
            except TimeoutError:
                if opening:
                    with contextlib.suppress(ConnectionError):
                        writer.write(b"a")
                continue
            if not chunk:
                return answer, time.monotonic() - started
            answer += chunk
        return answer, float("inf")
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


def _openings(port: int) -> list[bytes]:
    """Request heads begun, each to be continued one byte at a time (``a``: still valid)."""
    head = f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode()
    return [
        b"POST /mcp",
        b"POST /mcp HTTP/1.1\r\n",
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-A: ".encode(),
        head,
        head + b"\r\nGET /metrics HTTP/1.1\r\n",  # one request answered, the next one slow
    ]


async def _check_heads_time_out(port: int, limit: float) -> None:
    openings = _openings(port)
    results = await asyncio.gather(
        _trickle(port, b"", 0.25, limit + 4),
        *(_trickle(port, opening, 0.25, limit + 4) for opening in openings),
    )
    (silent, silent_closed), *trickled = results
    assert silent_closed <= limit + 2 and silent == b""
    for opening, (answer, closed) in zip(openings, trickled, strict=True):
        assert closed <= limit + 2, (opening, answer)
        assert b"HTTP/1.1 408 " in answer, (opening, answer)
        if opening.startswith(b"GET /healthz") and opening.count(b"HTTP/1.1") == 2:
            assert answer.startswith(b"HTTP/1.1 200 "), answer  # the complete one is answered


def test_fastgate_serve_times_out_a_request_head_that_never_ends(tmp_path: Path) -> None:
    with gateway_process(
        "--builtin",
        "read",
        "--no-discover",
        "--workspace",
        str(tmp_path),
        "--read-timeout",
        "1",
        cwd=tmp_path,
    ) as gw:
        port = int(gw.url.rsplit(":", 1)[1].split("/")[0])
        asyncio.run(_check_heads_time_out(port, 1.0))
        metrics = httpx.get(origin_of(gw.url) + "/metrics").text
        assert 'fastgate_http_rejections_total{status="408"} 5.0' in metrics


@contextlib.asynccontextmanager
async def _uvicorn(gateway: Gateway, http: Any) -> AsyncIterator[int]:
    """``gateway.asgi()`` under uvicorn with the HTTP protocol ``http`` (a name, or a class of
    ``http_protocol``) on a port of 127.0.0.1: the port, once it serves; stopped on the way out."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    config = uvicorn.Config(
        gateway.asgi(), http=http, lifespan="on", log_level="warning", access_log=False
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            assert not task.done()
            await asyncio.sleep(0.01)
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        await task
        sock.close()


@pytest.mark.parametrize("implementation", ["httptools", "h11"])
async def test_either_http_implementation_times_out_a_request_head(
    tmp_path: Path, implementation: str
) -> None:
    gateway = Gateway(executor(registry()))
    async with _uvicorn(gateway, http_protocol(implementation, 1.0)) as port:
        await _check_heads_time_out(port, 1.0)
        async with httpx.AsyncClient(timeout=10) as http:  # a prompt client is served as ever
            answer = await http.get(f"http://127.0.0.1:{port}/healthz")
            assert answer.json() == {"status": "ok"}
    gateway.executor.dispose()


async def _pour(port: int, opening: bytes, seconds: float) -> bytes:
    """Connect, send ``opening``, then header bytes without a pause until the server ends the
    stream (or ``seconds`` pass); everything it answered. A reset is an error here: it is what
    a close with the client's bytes unread sends, and it can destroy the answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(opening)
    answer = b""

    async def pour() -> None:
        with contextlib.suppress(ConnectionError):
            while True:
                writer.write(b"a" * 8)
                await writer.drain()
                await asyncio.sleep(0.001)

    pouring = asyncio.create_task(pour())
    try:
        async with asyncio.timeout(seconds):
            while chunk := await reader.read(4096):
                answer += chunk
    finally:
        pouring.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pouring
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    return answer


@pytest.mark.parametrize("implementation", ["httptools", "h11"])
async def test_a_client_pouring_its_head_gets_the_408_before_the_close(
    implementation: str,
) -> None:
    gateway = Gateway(executor(registry()))
    async with _uvicorn(gateway, http_protocol(implementation, 0.5)) as port:
        for opening in (b"POST /mcp HTTP/1.1\r\nX-A: ", b"GET /healthz HTTP/1.1\r\nX-B: "):
            for _ in range(3):
                answer = await _pour(port, opening, 10.0)
                assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    gateway.executor.dispose()


@pytest.mark.parametrize("implementation", ["httptools", "h11"])
async def test_the_app_times_a_slow_body_under_a_plain_server(implementation: str) -> None:
    """``gateway.asgi()`` under a server of someone else's (uvicorn as it comes, no head
    deadline): a body that stops coming is still answered 408 within ``read_timeout``."""
    gateway = Gateway(executor(registry()), read_timeout=1.0)
    async with _uvicorn(gateway, implementation) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            'Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"jsonrpc"'.encode()
        )
        try:
            async with asyncio.timeout(5):
                answer = await reader.read()  # until the server closes
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
        assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert 'fastgate_http_rejections_total{status="408"} 1.0' in gateway.metrics.render().decode()
    gateway.executor.dispose()


# -- the Host check covers every endpoint that answers data -----------------------------------

BAD_HOSTS = (
    "evil.example",
    "evil.example:80",
    "127.0.0.1.evil.example:80",
    "localhost.evil.example:8765",
    "127.0.0.1",  # no port: not "127.0.0.1:*"
    "127.0.0.2:80",
    "LOCALHOST:1:2x",
)


async def test_every_endpoint_but_healthz_checks_the_host_and_origin(tmp_path: Path) -> None:
    gateway = console_gateway(tmp_path, allowed_hosts=["127.0.0.1:*", "localhost:*"])
    async with serving(gateway) as url, httpx.AsyncClient(timeout=30) as http:
        origin = origin_of(url)
        paths = ("/metrics", "/console", "/console/login", "/console/state/events")
        assert (await http.get(origin + "/metrics")).status_code == 200
        for host in BAD_HOSTS:
            for path in paths:
                answer = await http.get(origin + path, headers={"host": host})
                assert answer.status_code == 421, (host, path, answer.status_code)
                assert "fastgate" not in answer.text
            mcp = await post_modern(http, url, "tools/list", {}, headers={"host": host})
            assert mcp.status_code == 421, host
            health = await http.get(origin + "/healthz", headers={"host": host})
            assert health.status_code == 200 and health.json() == {"status": "ok"}
        for bad in ("http://evil.example", "null", "http://127.0.0.1.evil.example:80"):
            answer = await http.get(origin + "/metrics", headers={"origin": bad})
            assert answer.status_code == 403, bad
        good = await http.get(origin + "/metrics", headers={"origin": origin})
        assert good.status_code == 200 and "fastgate_calls_total" in good.text
    gateway.executor.dispose()
