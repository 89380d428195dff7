"""The MCP bridge against a stdio server whose messages are not valid UTF-8 (``tests/mcp/
hostile_server.py``, modes ``unreadable`` and ``unreadable-list``): the request such a reply
answers fails at once with a protocol error, never waits for a clock; a request of the server's
is refused at once; the connection and every other call go on; nothing is left behind. And over
streamable HTTP (``tests/mcp/unreadable_http_server.py``): a JSON body that is not UTF-8 is a
protocol error too."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from fastgate import (
    ErrorCode,
    ExecutionContext,
    PermissionMode,
    RunContext,
    ToolExecutor,
    ToolRegistry,
)
from fastgate.mcp import MCPBridge, MCPServerConfig, MCPStartupError
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
            # An event stream is decoded as event streams are (bytes that are not UTF-8 become
            # U+FFFD): only one whose JSON breaks is unreadable.
            broken = await executor.execute("mcp__web__sse", {"how": "between"}, CTX)
            assert broken.error is not None
            assert broken.error.details == {"reason": "protocol_error", "server": "web"}
            replaced = await executor.execute("mcp__web__sse", {"how": "continuation"}, CTX)
            assert replaced.ok and replaced.content == "caf\ufffd au lait"
            fine = await executor.execute("mcp__web__fine", {}, CTX)
            assert fine.ok and fine.content == "fine"
            assert bridge.status()["web"]["state"] == "ready"
            assert_settled(executor, bridge, calls=calls + 3)
