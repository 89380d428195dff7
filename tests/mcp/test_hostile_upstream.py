"""The bridge against upstreams that answer what a malicious one would (``tests/mcp/
upstream_server.py`` over stdio, ``tests/mcp/error_http_server.py`` on the SDK over streamable
HTTP): a JSON-RPC error with the code -32000 is the server's error, not a lost connection;
``isError`` spelled any way the SDK reads as true, or not readable as a boolean, is a failure;
control characters of the server never reach a log line or ``status()`` raw."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from fastgate import ErrorCode, ExecutionContext, PermissionMode, ToolExecutor, ToolRegistry
from fastgate.mcp import MCPBridge, MCPServerConfig, MCPStartupError
from fastgate.mcp._text import printable
from tests.mcp.servers import assert_settled, http_script_server, running

CTX = ExecutionContext(session_id="s1")
UPSTREAM = Path(__file__).with_name("upstream_server.py")
ERROR_HTTP = Path(__file__).with_name("error_http_server.py")
ERAS = ["legacy", "modern"]
RAW_CONTROLS = ("\x1b", "\x07", "\r", "\n")


def upstream(era: str, mode: str = "plain", **options: Any) -> MCPServerConfig:
    return MCPServerConfig("up", command=[sys.executable, str(UPSTREAM), era, mode], **options)


def yolo(registry: ToolRegistry) -> ToolExecutor:
    return ToolExecutor(registry, mode=PermissionMode.YOLO)


# -- a JSON-RPC error with the code -32000 ------------------------------------------------------

# (code, message, data): what a server may answer a call with; each is its own error.
SERVER_ERRORS: list[tuple[int, str, Any]] = [
    (-32000, "quota exceeded for this account", None),
    (-32000, "Server error", None),
    (-32000, "connection closed by the database; nothing was changed", None),
    (-32000, "Connection closed", {"retry": False}),  # the SDK's words, but with data
    (-32000, "SSE stream ended without a response", None),  # over stdio: the server's words
    (-32001, "Connection closed", None),
    (-32603, "Internal error", None),
]


def assert_server_error(result: Any, code: int, message: str) -> None:
    assert result.error is not None and result.error.code is ErrorCode.TOOL_ERROR, result
    assert not result.error.retryable  # the server answered: nothing to try again
    assert result.error.details["reason"] == "server_error", result.error.details
    assert result.error.details["mcp_code"] == code
    assert f"{message} (JSON-RPC error {code})" in result.content
    assert "closed the connection" not in result.content


@pytest.mark.parametrize("era", ERAS)
async def test_a_server_error_with_code_32000_is_the_servers_error_over_stdio(era: str) -> None:
    registry = ToolRegistry()
    async with running(registry, upstream(era)) as bridge:
        executor = yolo(registry)
        calls = 0
        for code, message, data in SERVER_ERRORS:
            args: dict[str, Any] = {"code": code, "message": message}
            if data is not None:
                args["data"] = data
            assert_server_error(await executor.execute("mcp__up__fail", args, CTX), code, message)
            calls += 1
        echoed = await executor.execute("mcp__up__echo", {"text": "still up"}, CTX)
        assert echoed.ok and echoed.content == "still up"
        calls += 1
        status = bridge.status()["up"]
        assert status["state"] == "ready" and status["restarts"] == 0, status

        # The SDK's own words for a closing connection, no data: the server is taken at them.
        closing = {"code": -32000, "message": "Connection closed"}
        said = await executor.execute("mcp__up__fail", closing, CTX)
        assert said.error is not None and said.error.retryable
        assert said.error.details["reason"] == "server_unavailable"
        calls += 1

        # A real close during the call stays a lost connection: retryable, it may have run.
        died = await executor.execute("mcp__up__die", {}, CTX)
        assert died.error is not None and died.error.code is ErrorCode.TOOL_ERROR
        assert died.error.retryable and died.error.details["reason"] == "server_unavailable"
        assert died.error.details["sent"] is True
        assert "closed the connection during the call" in died.content
        calls += 1
        assert_settled(executor, bridge, calls=calls)


async def test_a_server_error_with_code_32000_is_the_servers_error_over_http() -> None:
    with http_script_server(ERROR_HTTP) as (url, pid):
        registry = ToolRegistry()
        async with running(registry, MCPServerConfig("web", url=url)) as bridge:
            assert bridge.status()["web"]["transport"] == "http"
            executor = yolo(registry)
            spellings: list[tuple[int, str, Any]] = [
                (-32000, "rate limit exceeded; nothing was changed", None),
                (-32000, "Server error", None),
                (-32000, "Connection closed", "the upstream database"),
                (-32001, "Connection closed", None),
            ]
            for code, message, data in spellings:
                args: dict[str, Any] = {"code": code, "message": message}
                if data is not None:
                    args["data"] = data
                result = await executor.execute("mcp__web__fail", args, CTX)
                assert_server_error(result, code, message)
            fine = await executor.execute("mcp__web__ok", {}, CTX)
            assert fine.ok and fine.content == "fine"
            assert bridge.status()["web"]["state"] == "ready"

            # The server really goes away: a lost connection, retryable.
            os.kill(pid, signal.SIGKILL)
            dead = await executor.execute("mcp__web__ok", {}, CTX)
            assert dead.error is not None and dead.error.code is ErrorCode.TOOL_ERROR
            assert dead.error.retryable and dead.error.details["reason"] == "server_unavailable"


# -- isError spelled otherwise than true ----------------------------------------------------------

# What the SDK's validation reads as true: a failure.
TRUE_SPELLINGS: list[Any] = [True, "yes", 1, "true", "TRUE", "on", "t", "Y", "1", 1.0]
# What it cannot read as a boolean at all: a failure too (failing closed).
UNREADABLE: list[Any] = ["maybe", 2, -1, 0.5, ["true"], {"value": True}, " yes", ""]
# What it reads as false, and an absent or null isError: a success.
FALSE_SPELLINGS: list[Any] = [False, "no", 0, "false", "off", "0", None]


@pytest.mark.parametrize("era", ERAS)
async def test_is_error_the_sdk_reads_as_true_or_cannot_read_is_a_failure(era: str) -> None:
    registry = ToolRegistry()
    async with running(registry, upstream(era)) as bridge:
        executor = yolo(registry)
        for value in TRUE_SPELLINGS:
            failed = await executor.execute("mcp__up__flag", {"value": value}, CTX)
            assert failed.error is not None, f"isError={value!r} passed as a success"
            assert failed.error.code is ErrorCode.TOOL_FAILURE, (value, failed.error)
            assert failed.content == "FAILED: could not delete the backup"
            assert failed.error.details == {"server": "up", "tool": "flag"}
        for value in UNREADABLE:
            failed = await executor.execute("mcp__up__flag", {"value": value}, CTX)
            assert failed.error is not None, f"isError={value!r} passed as a success"
            # (the older era's result type refuses it outright: a protocol error)
            assert failed.error.code in (ErrorCode.TOOL_FAILURE, ErrorCode.TOOL_ERROR)
            if failed.error.code is ErrorCode.TOOL_ERROR:
                assert failed.error.details["reason"] == "protocol_error", failed.error
        for value in FALSE_SPELLINGS:
            passed = await executor.execute("mcp__up__flag", {"value": value}, CTX)
            assert passed.ok, (value, passed.error)
            assert passed.content == "FAILED: could not delete the backup"
        absent = await executor.execute("mcp__up__flag", {}, CTX)
        assert absent.ok
        calls = len(TRUE_SPELLINGS) + len(UNREADABLE) + len(FALSE_SPELLINGS) + 1
        assert_settled(executor, bridge, calls=calls)


# -- control characters of the server -------------------------------------------------------------


def test_printable_escapes_controls_and_keeps_ordinary_text() -> None:
    assert printable("plain text, café, 名前\tand a tab") == "plain text, café, 名前\tand a tab"
    assert printable("\x1b]0;t\x07\r\n") == "\\x1b]0;t\\x07\\r\\n"
    assert printable("a\x00b\x7fc\x9bd") == "a\\x00b\\x7fc\\x9bd"
    assert printable("evil\u202eexe.txt\u200b\u2028") == "evil\\u202eexe.txt\\u200b\\u2028"


async def test_control_characters_of_a_server_never_reach_logs_or_status_raw(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # It writes escapes, BEL and CR to stderr and stdout, then refuses the handshake with a
    # message full of them and a line break that would forge a log line.
    caplog.set_level(logging.DEBUG, logger="fastgate.mcp")
    registry = ToolRegistry()
    async with running(registry, upstream("legacy", "ansi")) as bridge:
        link = bridge._links["up"]
        # stderr is drained on its own: the tail may first be quoted by a later attempt.
        async with asyncio.timeout(30):
            while "owned-title" not in (link.last_error or ""):
                await link.changed()
        status = bridge.status()["up"]
        last_error = status["last_error"]
        assert not any(c in last_error for c in RAW_CONTROLS), repr(last_error)
        assert "go away \\x1b]0;owned-title\\x07\\x1b[2J\\x1b[H\\rfastgate" in last_error
        assert "\\nINFO forged" in last_error
        assert "its stderr ends with: \\x1b]0;owned-title\\x07" in last_error
        tail = status["stderr_tail"]
        assert tail and not any(c in tail for c in RAW_CONTROLS[:3]), repr(tail)
        first = "\\x1b]0;owned-title\\x07\\x1b[2J\\x1b[H\\rfastgate: all servers ready"
        assert tail.splitlines()[0] == first
    records = [r.getMessage() for r in caplog.records if r.name == "fastgate.mcp"]
    assert any("go away \\x1b]0;owned-title" in m for m in records), records
    assert any("stream:" in m and "banner" in m for m in records), records
    for message in records:
        assert not any(c in message for c in RAW_CONTROLS), repr(message)


async def test_a_required_servers_startup_error_is_escaped() -> None:
    bridge = MCPBridge(ToolRegistry(), [upstream("legacy", "ansi", required=True)])
    with pytest.raises(MCPStartupError) as raised:
        await bridge.start()
    reason = raised.value.reason
    assert "go away \\x1b]0;owned-title" in reason
    assert not any(c in reason for c in RAW_CONTROLS) and "\x1b" not in str(raised.value)
