"""An HTTP server (or the gateway in front of it) that answers a call with 429 did not run it and
says when to try again. The bridge's result says so: ``RESOURCE_EXHAUSTED``, retryable, with
the ``Retry-After`` in seconds (``retry_after``), the server still ready; before, the SDK's
stand-in made it an internal error (``TOOL_ERROR``, JSON-RPC -32603, not retryable) with the
wait lost. A keyed call refused so leaves its key free: the retry runs the tool, once.
The server is the official SDK's, behind a real rate-limiting ASGI layer."""

from __future__ import annotations

import datetime
import email.utils
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from fastgate import (
    ErrorCode,
    ExecutionContext,
    PermissionMode,
    SqliteToolUseStore,
    ToolExecutor,
    ToolRegistry,
)
from fastgate.mcp import MCPServerConfig
from fastgate.mcp._auth import retry_after_seconds
from tests.mcp.servers import http_script_server, running

SERVER = Path(__file__).with_name("rate_limited_http_server.py")
CTX = ExecutionContext(session_id="s")


def serve(
    monkeypatch: pytest.MonkeyPatch, calls: int, retry_after: str
) -> AbstractContextManager[tuple[str, int]]:
    monkeypatch.setenv("RATE_LIMITED_CALLS", str(calls))
    monkeypatch.setenv("RATE_LIMIT_RETRY_AFTER", retry_after)
    return http_script_server(SERVER)


def http_date(seconds_from_now: int) -> str:
    when = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=seconds_from_now)
    return email.utils.format_datetime(when, usegmt=True)


@pytest.mark.parametrize(
    ("header", "low", "high"),
    [("7", 7, 7), ("0", 0, 0), ("", None, None), ("soon", None, None), ("120", 120, 120)],
)
async def test_a_429_is_resource_exhausted_with_its_wait(
    header: str, low: float | None, high: float | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    with serve(monkeypatch, 1, header) as (url, _pid):
        registry = ToolRegistry()
        async with running(registry, MCPServerConfig("web", url=url)) as bridge:
            executor = ToolExecutor(registry, mode=PermissionMode.YOLO)
            refused = await executor.execute("mcp__web__runs", {}, CTX)
            error = refused.error
            assert error is not None and error.code is ErrorCode.RESOURCE_EXHAUSTED, error
            assert error.retryable
            assert error.details["reason"] == "upstream_rate_limited"
            assert error.details["server"] == "web"
            assert "429" in error.message and "did not run" in error.message
            if low is None:
                assert error.retry_after is None
            else:
                assert error.retry_after == low == high
                assert f"wait {low:g}s" in error.message
            assert bridge.status()["web"]["state"] == "ready"
            again = await executor.execute("mcp__web__runs", {}, CTX)
            assert again.ok and again.content == "1", again  # the refused call never ran


async def test_an_http_date_is_read_as_seconds_from_now(monkeypatch: pytest.MonkeyPatch) -> None:
    with serve(monkeypatch, 1, http_date(90)) as (url, _pid):
        registry = ToolRegistry()
        async with running(registry, MCPServerConfig("web", url=url)):
            executor = ToolExecutor(registry, mode=PermissionMode.YOLO)
            error = (await executor.execute("mcp__web__runs", {}, CTX)).error
            assert error is not None and error.code is ErrorCode.RESOURCE_EXHAUSTED
            assert isinstance(error.retry_after, float) and 80 <= error.retry_after <= 90


async def test_a_keyed_call_refused_so_leaves_its_key_free(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    store = SqliteToolUseStore(str(tmp_path / "journal.db"))
    try:
        with serve(monkeypatch, 1, "1") as (url, _pid):
            registry = ToolRegistry()
            async with running(registry, MCPServerConfig("web", url=url)):
                executor = ToolExecutor(registry, mode=PermissionMode.YOLO, store=store)
                keyed = ExecutionContext(session_id="s", idempotency_key="k1")
                first = await executor.execute("mcp__web__runs", {}, keyed)
                assert first.error is not None
                assert first.error.code is ErrorCode.RESOURCE_EXHAUSTED
                retry = await executor.execute("mcp__web__runs", {}, keyed)
                assert retry.ok and retry.content == "1" and not retry.meta.replayed
                repeat = await executor.execute("mcp__web__runs", {}, keyed)
                assert repeat.meta.replayed and repeat.content == "1"  # ran once
    finally:
        await store.close()


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("7", 7.0),
        (" 30 ", 30.0),
        ("99999999", 86400.0),  # at most a day
        ("-5", None),
        ("1.5", None),  # not a spelling HTTP allows
        ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),  # a date gone by: now
        ("not a date", None),
        ("", None),
    ],
)
def test_retry_after_spellings(header: str, seconds: float | None) -> None:
    assert retry_after_seconds(header) == seconds
