"""The MCP bridge against a stdio server whose messages are not valid UTF-8 (``tests/mcp/
hostile_server.py``, modes ``unreadable`` and ``unreadable-list``): the request such a reply
answers fails at once with a protocol error, never waits for a clock; a request of the server's
is refused at once; the connection and every other call go on; nothing is left behind. And over
streamable HTTP (``tests/mcp/unreadable_http_server.py``): a JSON body or an event of an event
stream that is not UTF-8 is a protocol error too, at once, and a character cut between two
chunks of a stream is read whole."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

import httpx2

from fastgate import (
    ErrorCode,
    ExecutionContext,
    PermissionMode,
    RunContext,
    ToolExecutor,
    ToolRegistry,
)
from fastgate.mcp import MCPBridge, MCPServerConfig, MCPStartupError, _http
from tests.mcp.servers import (
    all_pids,
    assert_gone,
    assert_settled,
    hostile,
    http_script_server,
    records,
    running,
)

CTX = ExecutionContext(session_id="s1")
# Long enough that a call answered by its clock, not by the bridge, shows as a TIMEOUT.
IDLE = 5.0

# Every way ``hostile_server.py`` spells a reply that is not UTF-8 (its ``UNREADABLE``).
SPELLINGS = [
    "continuation",  # a lone continuation byte in the text
    "truncated",  # a multibyte sequence cut short, in the text
    "truncated-end",  # and after the reply's last brace
    "overlong",  # '/' in two bytes
    "overlong-3",  # and in three
    "surrogate",  # U+D800 encoded as if it were a character
    "surrogate-low",  # U+DFFF
    "latin-1",  # text of another encoding
    "invalid-bytes",  # 0xff 0xfe 0xf8 0xf5: bytes UTF-8 never has
    "key",  # inside a key of an otherwise valid reply
    "id",  # inside the id string
    "between",  # between two tokens, in no string at all
    "error",  # in the message of an error reply
]


def yolo(registry: ToolRegistry) -> ToolExecutor:
    return ToolExecutor(registry, mode=PermissionMode.YOLO)


def assert_unreadable(result: Any) -> None:
    assert result.error is not None, result
    assert result.error.code is ErrorCode.TOOL_ERROR, result.error
    assert result.error.details == {"reason": "protocol_error", "server": "h"}, result.error
    assert not result.error.retryable  # the server answered: its outcome is unknown
    assert "answered the call of mangled with a reply that is not valid UTF-8" in result.content
    assert "not repeated automatically" in result.content


@pytest.mark.parametrize("how", SPELLINGS)
async def test_a_reply_that_is_not_utf8_fails_its_call_at_once(tmp_path: Path, how: str) -> None:
    registry = ToolRegistry()
    record = tmp_path / "record.jsonl"
    config = hostile("unreadable", record=record, idle_timeout=IDLE, call_timeout=4 * IDLE)
    async with running(registry, config) as bridge:
        executor = yolo(registry)
        assert_unreadable(await executor.execute("mcp__h__mangled", {"how": how}, CTX))
        # The connection goes on: the next call is answered, nothing restarted.
        echoed = await executor.execute("mcp__h__echo", {"text": "still here"}, CTX)
        assert echoed.ok and echoed.content == "still here", echoed.error
        status = bridge.status()["h"]
        assert status["state"] == "ready" and status["restarts"] == 0, status
        assert bridge._links["h"]._stdio is not None
        assert bridge._links["h"]._stdio.unreadable == 1
        assert_settled(executor, bridge, calls=2)
    # Failed by the bridge, not by a clock: no cancellation was sent for it.
    assert not [r for r in records(record) if r["method"] == "notifications/cancelled"]


async def test_an_unreadable_reply_costs_only_its_own_call() -> None:
    registry = ToolRegistry()
    async with running(registry, hostile("unreadable", idle_timeout=IDLE)) as bridge:
        executor = yolo(registry)
        held = registry.resolve("mcp__h__held")
        assert held is not None
        reached = asyncio.Event()
        # A call in flight on the same connection (the server holds its reply until it has
        # sent the unreadable one)...
        waiting = asyncio.ensure_future(
            held.execute({}, RunContext(tool_name=held.name, progress=lambda _: reached.set()))
        )
        async with asyncio.timeout(30):
            await reached.wait()
        # ... sees the other call fail, and gets its own reply.
        for how in ("continuation", "between", "error"):
            assert_unreadable(await executor.execute("mcp__h__mangled", {"how": how}, CTX))
            if not waiting.done():
                assert await waiting == "held, then answered"
        assert waiting.done() and waiting.result() == "held, then answered"
        assert bridge.status()["h"]["restarts"] == 0
        assert_settled(executor, bridge, calls=3)


async def test_a_request_of_the_server_that_is_not_utf8_is_refused_at_once(
    tmp_path: Path,
) -> None:
    registry = ToolRegistry()
    record = tmp_path / "record.jsonl"
    config = hostile("unreadable", record=record, idle_timeout=IDLE)
    async with running(registry, config) as bridge:
        executor = yolo(registry)
        asked = await executor.execute("mcp__h__ask", {}, CTX)
        assert asked.ok, asked.error
        assert asked.content.startswith("the client said: the request is not valid UTF-8 (")
        echoed = await executor.execute("mcp__h__echo", {"text": "after"}, CTX)
        assert echoed.ok and echoed.content == "after"
        assert bridge.status()["h"]["restarts"] == 0
        assert_settled(executor, bridge, calls=2)
    answers = [r for r in records(record) if r["id"] == "ask-1"]
    assert len(answers) == 1  # answered once, by the bridge


async def test_a_tools_list_reply_that_is_not_utf8_is_a_clear_startup_error() -> None:
    registry = ToolRegistry()
    config = hostile("unreadable-list", required=True, startup_timeout=4 * IDLE)
    bridge = MCPBridge(registry, [config])
    with pytest.raises(MCPStartupError) as raised:
        await bridge.start()
    assert_gone(all_pids(bridge))
    reason = raised.value.reason
    assert reason.startswith("the server's reply to tools/list is not valid UTF-8 ("), reason
    assert registry.resolve("mcp__h__echo") is None


# -- over streamable HTTP -------------------------------------------------------------------------

UNREADABLE_HTTP = Path(__file__).with_name("unreadable_http_server.py")
HTTP_SPELLINGS = ["continuation", "truncated", "overlong", "surrogate", "invalid-bytes", "between"]


async def test_a_json_body_that_is_not_utf8_is_a_protocol_error_over_http() -> None:
    # The SDK fails the request at once; the bridge says what it was: a reply that cannot be
    # read (not the server's own error, which the server "refused" the call with).
    with http_script_server(UNREADABLE_HTTP) as (url, _):
        registry = ToolRegistry()
        config = MCPServerConfig("web", url=url, idle_timeout=IDLE, call_timeout=4 * IDLE)
        async with running(registry, config) as bridge:
            executor = yolo(registry)
            calls = 0
            for how in [*HTTP_SPELLINGS, "error"]:
                result = await executor.execute("mcp__web__json", {"how": how}, CTX)
                calls += 1
                assert result.error is not None, (how, result)
                assert result.error.code is ErrorCode.TOOL_ERROR, (how, result.error)
                assert result.error.details == {"reason": "protocol_error", "server": "web"}
                assert "with a reply that is not a JSON-RPC message that can be read (" in (
                    result.content
                )
                assert "refused" not in result.content and "input_value" not in result.content
            fine = await executor.execute("mcp__web__fine", {}, CTX)
            assert fine.ok and fine.content == "fine"
            assert bridge.status()["web"]["state"] == "ready"
            assert_settled(executor, bridge, calls=calls + 1)


# Every way ``unreadable_http_server.py`` spells an event stream with bytes that are not UTF-8:
# in the reply's data (its ``SPELLINGS``), or elsewhere in the stream (its ``EVENT_SPELLINGS``).
EVENT_SPELLINGS = [
    *HTTP_SPELLINGS,
    "overlong-3",  # '/' in three bytes
    "surrogate-low",  # U+DFFF
    "latin-1",  # text of another encoding
    "error",  # in the message of an error reply
    "comment",  # in a comment line before the reply
    "event-name",  # in the name of an event before the reply
    "event-id",  # in the id of the reply's event
    "notification",  # in a notification sent before the reply
    "truncated-end",  # a multibyte sequence cut short after the reply's JSON
    "truncated-split",  # and the newline after it in the next chunk
    "cut-at-close",  # and the stream closing after it
]


@pytest.fixture(scope="module")
def unreadable_url() -> Iterator[str]:
    with http_script_server(UNREADABLE_HTTP) as (url, _):
        yield url


@contextlib.asynccontextmanager
async def web(url: str) -> AsyncIterator[tuple[MCPBridge, ToolExecutor]]:
    registry = ToolRegistry()
    config = MCPServerConfig("web", url=url, idle_timeout=IDLE, call_timeout=4 * IDLE)
    async with running(registry, config) as bridge:
        yield bridge, yolo(registry)


@pytest.mark.parametrize("how", EVENT_SPELLINGS)
async def test_an_event_that_is_not_utf8_fails_its_call_at_once(
    unreadable_url: str, how: str
) -> None:
    async with web(unreadable_url) as (bridge, executor):
        result = await executor.execute("mcp__web__sse", {"how": how}, CTX)
        assert result.error is not None, (how, result)
        # (a call failed by its clock would be a TIMEOUT; one failed as a lost stream,
        # server_unavailable)
        assert result.error.code is ErrorCode.TOOL_ERROR, result.error
        assert result.error.details == {"reason": "protocol_error", "server": "web"}
        assert not result.error.retryable
        said = "answered the call of sse with a reply that is not valid UTF-8 ("
        assert said in result.content and "of the event stream)" in result.content, result
        assert "not repeated automatically" in result.content
        # The connection goes on.
        fine = await executor.execute("mcp__web__fine", {}, CTX)
        assert fine.ok and fine.content == "fine", fine.error
        status = bridge.status()["web"]
        assert status["state"] == "ready" and status["restarts"] == 0, status
        assert_settled(executor, bridge, calls=2)


READ_WHOLE = {
    "split-emoji": "coffee \u2615 and \U0001f600",  # cut inside the emoji
    "split-cjk": "\u6f22\u5b57",  # after the first byte of the second character
    "split-bytewise": "a face \U0001f600 here",  # each byte of the emoji in a chunk of its own
    "gzip": "caf\u00e9",  # compressed: what is checked is what it decodes to
    "charset": "caf\u00e9",  # named latin-1: an event stream is UTF-8 all the same
}


@pytest.mark.parametrize("how", READ_WHOLE)
async def test_a_valid_event_stream_is_read_as_sent(unreadable_url: str, how: str) -> None:
    expected = READ_WHOLE[how]
    async with web(unreadable_url) as (_, executor):
        result = await executor.execute("mcp__web__sse", {"how": how}, CTX)
        assert result.ok and result.content == expected, result.error


@pytest.mark.parametrize(
    ("method", "request_name"), [("initialize", "the handshake"), ("tools/list", "tools/list")]
)
async def test_an_unreadable_event_at_start_is_a_clear_startup_error(
    monkeypatch: pytest.MonkeyPatch, method: str, request_name: str
) -> None:
    monkeypatch.setenv("UNREADABLE_AT", method)
    with http_script_server(UNREADABLE_HTTP) as (url, _):
        registry = ToolRegistry()
        config = MCPServerConfig("web", url=url, required=True, startup_timeout=4 * IDLE)
        bridge = MCPBridge(registry, [config])
        with pytest.raises(MCPStartupError) as raised:
            await bridge.start()
        await bridge.aclose()
    reason = raised.value.reason
    assert reason.startswith(f"the server's reply to {request_name} is not valid UTF-8 ("), reason
    assert registry.resolve("mcp__web__fine") is None


# -- the check itself, chunk by chunk -------------------------------------------------------------


async def _passed(chunks: list[bytes]) -> tuple[bytes, BaseException | None]:
    """What ``_Utf8Checked`` passes on of a body that comes in ``chunks``, and what it raised."""

    class Body(httpx2.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            for chunk in chunks:
                yield chunk

    passed = b""
    try:
        async for part in _http._Utf8Checked(Body()):
            passed += part
    except httpx2.SSEError as exc:
        return passed, exc
    return passed, None


VALID = "data: caf\u00e9 \u6f22 \U0001f600\n\n".encode()


async def test_valid_utf8_passes_whole_wherever_its_chunks_are_cut() -> None:
    for cut in range(len(VALID) + 1):
        assert await _passed([VALID[:cut], VALID[cut:]]) == (VALID, None), cut
    assert await _passed([bytes([b]) for b in VALID]) == (VALID, None)


@pytest.mark.parametrize(
    ("chunks", "bad", "offset"),
    [
        ([b"data: ok\n\ndata: caf\x80"], "80", 19),
        ([b"data: ok\n\ndata: \xf0\x9f", b"!\n\n"], "f0 9f", 16),
        ([b"data: \xed", b"\xa0\x80\n\n"], "ed", 6),
        ([b": \xc0\xaf\n"], "c0", 2),
        ([b"data: ok\n\n: cut \xe2\x82"], "e2 82", 16),
    ],
)
async def test_the_first_byte_that_is_not_utf8_ends_the_stream(
    chunks: list[bytes], bad: str, offset: int
) -> None:
    passed, raised = await _passed(chunks)
    assert isinstance(raised, _http.UnreadableEvent), raised
    assert f"byte(s) {bad} at offset {offset} of the event stream" in str(raised), raised
    # What was passed on reads as exactly what came before the bad byte (the start of a
    # character the next chunk broke is passed on with its chunk, and never finished).
    body = b"".join(chunks)
    assert body.startswith(passed), passed
    assert passed.decode("utf-8", "ignore") == body[:offset].decode(), passed
