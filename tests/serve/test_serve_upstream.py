"""Upstream MCP servers behind the gateway: their tools as mcp__<server>__<tool>, per-caller
listing, list changes told to clients in both eras, progress and cancellation both ways, and a
server that dies failing only its own tools."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest
from mcp.shared.dispatcher import ProgressFnT
from mcp.types import RequestParamsMeta

from fastgate import PermissionConfig
from fastgate.mcp import MCPBridge, MCPServerConfig
from fastgate.serve import Gateway
from tests.mcp.servers import (
    all_pids,
    assert_gone,
    cancellations,
    fixture,
    http_script_server,
    records,
)
from tests.serve.kit import ERAS, LEGACY, MODERN, client, executor, fastgate_meta, serving, text_of

# Faults of real processes, the same under both builds and both loops: run once, in the
# compiled build, on uvloop.
pytestmark = pytest.mark.slow
RATE_LIMITED = Path(__file__).parents[1] / "mcp" / "rate_limited_http_server.py"


@contextlib.asynccontextmanager
async def upstream(
    tmp_path: Path, permissions: PermissionConfig | None = None, **options: Any
) -> AsyncIterator[tuple[Gateway, MCPBridge, Path]]:
    record = tmp_path / "fx.jsonl"
    served = executor(permissions=permissions or PermissionConfig(deny=["forbidden"]))
    bridge = MCPBridge(served.registry, [fixture("fx", record=record)])
    await bridge.start()
    try:
        gateway = Gateway(served, bridge=bridge, **options)
        yield gateway, bridge, record
    finally:
        pids = all_pids(bridge)
        await bridge.aclose()
        served.dispose()
        assert_gone(pids)


@pytest.mark.parametrize("era", ERAS)
async def test_upstream_tools_are_served_and_judged(tmp_path: Path, era: str) -> None:
    rules = PermissionConfig(
        deny=["forbidden", "mcp__fx__fail", "mcp__fx__crash"], allow=["mcp__fx"]
    )
    async with upstream(tmp_path, rules, approvals="deny") as (gateway, _, _):
        async with serving(gateway) as url, client(url, era) as mcp:
            names = {t.name for t in (await mcp.list_tools()).tools}
            assert {"echo", "deploy", "mcp__fx__echo", "mcp__fx__add", "mcp__fx__slow"} <= names
            assert not names & {"forbidden", "mcp__fx__fail", "mcp__fx__crash"}
            add = next(t for t in (await mcp.list_tools()).tools if t.name == "mcp__fx__add")
            assert add.output_schema is not None and add.output_schema["type"] == "object"
            summed = await mcp.call_tool("mcp__fx__add", {"a": 2, "b": 3})
            assert not summed.is_error, text_of(summed)
            assert summed.structured_content == {"sum": 5}
            # A tool denied outright is not shown, and is called as a name no tool has.
            refused = await mcp.call_tool("mcp__fx__fail", {"message": "boom"})
            assert refused.is_error and fastgate_meta(refused)["code"] == "UNKNOWN_TOOL"
            assert "mcp__fx__fail" in text_of(refused)


async def test_a_deny_rule_on_the_server_hides_all_its_tools(tmp_path: Path) -> None:
    async with upstream(tmp_path, PermissionConfig(deny=["mcp__fx"])) as (gateway, _, _):
        async with serving(gateway) as url, client(url, LEGACY) as mcp:
            names = {t.name for t in (await mcp.list_tools()).tools}
    assert names == {"echo", "deploy", "forbidden"}


async def test_listing_is_per_caller_mode(tmp_path: Path) -> None:
    """A caller in plan mode is not shown what plan mode refuses outright; a default-mode caller
    sees it (and no caller's listing is served to another)."""
    from tests.serve.kit import tokens_file

    tokens = tokens_file(tmp_path / "t.json", modes={"bob": "plan", "carol": "dont_ask"})
    rules = PermissionConfig(deny=["forbidden"], ask=["mcp__fx__slow"], allow=["mcp__fx__add"])
    async with upstream(tmp_path, rules, tokens=tokens, approvals="deny") as (gateway, _, _):
        async with serving(gateway) as url:
            seen = {}
            for who in ("alice", "bob", "carol"):
                async with client(url, MODERN, token=f"{who}-secret-token") as mcp:
                    seen[who] = {t.name for t in (await mcp.list_tools()).tools}
            async with client(url, MODERN, token="bob-secret-token") as mcp:
                planned = await mcp.call_tool("deploy", {"target": "x"})
    assert {"deploy", "mcp__fx__echo", "mcp__fx__slow", "mcp__fx__add"} <= seen["alice"]
    assert "deploy" not in seen["bob"] and "mcp__fx__echo" not in seen["bob"]
    assert {"echo", "mcp__fx__add", "mcp__fx__slow"} <= seen["bob"]  # allowed, asked by rule
    assert "mcp__fx__slow" not in seen["carol"] and "mcp__fx__add" in seen["carol"]
    # Not shown to bob (plan mode refuses it outright): to him, a name no tool has.
    assert planned.is_error and fastgate_meta(planned)["code"] == "UNKNOWN_TOOL"


async def test_list_changes_reach_clients_of_both_eras(tmp_path: Path) -> None:
    rules = PermissionConfig(allow=["mcp__fx"])
    async with upstream(tmp_path, rules, approvals="deny") as (gateway, bridge, _):
        async with serving(gateway) as url:
            told = asyncio.Event()

            async def on_message(message: Any) -> None:
                if getattr(getattr(message, "root", message), "method", "") == (
                    "notifications/tools/list_changed"
                ):
                    told.set()

            async with (
                client(url, LEGACY, message_handler=on_message) as old,
                client(url, MODERN) as new,
            ):
                before = {t.name for t in (await old.list_tools()).tools}
                assert "mcp__fx__extra" not in before
                await new.list_tools()
                async with new.listen(tools_list_changed=True) as events:
                    bumped = await old.call_tool("mcp__fx__bump", {})
                    assert not bumped.is_error, text_of(bumped)
                    async with asyncio.timeout(20):
                        event = await events.__anext__()
                        await told.wait()
                assert type(event).__name__ == "ToolsListChanged"
                after = {t.name for t in (await new.list_tools()).tools}
                assert "mcp__fx__extra" in after
        generation = bridge.status()["fx"]["generation"]
        assert generation >= 1


@pytest.mark.parametrize("era", ERAS)
async def test_progress_and_cancellation_pass_through(tmp_path: Path, era: str) -> None:
    rules = PermissionConfig(allow=["mcp__fx"])
    async with upstream(tmp_path, rules, approvals="deny") as (gateway, _, record):
        aborted = asyncio.Event()
        gateway.executor.set_tracer(_WatchAborted(gateway.executor.tracer, aborted))
        async with serving(gateway) as url, client(url, era) as mcp:
            seen: list[tuple[float, float | None, str | None]] = []
            started = asyncio.Event()

            async def on_progress(
                progress: float, total: float | None, message: str | None
            ) -> None:
                seen.append((progress, total, message))
                started.set()

            progress_callback: ProgressFnT = on_progress

            result = await mcp.call_tool(
                "mcp__fx__slow", {"seconds": 0.3, "steps": 3}, progress_callback=progress_callback
            )
            assert not result.is_error, text_of(result)
            assert [s[0] for s in seen] == [1.0, 2.0, 3.0] and seen[-1][2] == "step 3"
            started.clear()
            call = asyncio.create_task(
                mcp.call_tool(
                    "mcp__fx__slow",
                    {"seconds": 60, "steps": 600, "tag": "c"},
                    progress_callback=progress_callback,
                )
            )
            async with asyncio.timeout(20):
                await started.wait()  # the upstream is running it
            call.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await call
            async with asyncio.timeout(20):
                await aborted.wait()  # the gateway stopped the call, and told the upstream
    assert len(cancellations(record)) == 1
    assert [r["tag"] for r in records(record) if r["event"] == "cancelled"] == ["c"]


class _WatchAborted:
    """A tracer (chained to the gateway's) that sets ``event`` when a call ends ABORTED."""

    def __init__(self, chained: Any, event: asyncio.Event) -> None:
        self._chained = chained
        self._event = event

    def call_started(self, name: str, ctx: Any) -> Any:
        return self._chained.call_started(name, ctx)

    def call_ended(self, token: Any, result: Any, trace: Any) -> None:
        self._chained.call_ended(token, result, trace)
        if result is not None and result.error is not None and result.error.code == "ABORTED":
            self._event.set()


@pytest.mark.parametrize("era", ERAS)
async def test_an_upstream_that_dies_fails_only_its_tools(tmp_path: Path, era: str) -> None:
    async with upstream(tmp_path, PermissionConfig(allow=["mcp__fx"]), approvals="deny") as (
        gateway,
        bridge,
        _,
    ):
        async with serving(gateway) as url, client(url, era) as mcp:
            crashed = await mcp.call_tool("mcp__fx__crash", {})
            assert crashed.is_error
            assert fastgate_meta(crashed)["code"] == "TOOL_ERROR"
            assert fastgate_meta(crashed)["reason"] == "server_unavailable"
            fast = await mcp.call_tool("mcp__fx__echo", {"text": "x"})  # restarting: fails fast
            if fast.is_error:
                assert fastgate_meta(fast)["reason"] == "server_unavailable"
            still = await mcp.call_tool("echo", {"text": "alive"})
            assert not still.is_error and text_of(still) == "alive"
            async with asyncio.timeout(30):
                await bridge.wait_for("fx", state="ready")
            back = await mcp.call_tool("mcp__fx__echo", {"text": "back"})
            assert not back.is_error and text_of(back) == "back"


async def test_upstream_states_are_in_metrics(tmp_path: Path) -> None:
    async with upstream(tmp_path, approvals="deny") as (gateway, _, _):
        text = gateway.metrics.render().decode()
    assert 'fastgate_upstream_state{server="fx",state="ready"} 1.0' in text
    assert 'fastgate_upstream_state{server="fx",state="restarting"} 0.0' in text
    assert 'fastgate_upstream_tools{server="fx"}' in text


async def test_an_upstream_question_reaches_the_older_era_client(tmp_path: Path) -> None:
    """A server asking its user during a call (elicitation): the gateway puts the question to
    the client that made the call."""
    import sys

    from mcp_types import ElicitResult

    from fastgate.mcp import MCPServerConfig

    served = executor(permissions=PermissionConfig(allow=["mcp__el"]))
    script = Path(__file__).parents[1] / "mcp" / "elicit_sdk_server.py"
    bridge = MCPBridge(
        served.registry, [MCPServerConfig("el", command=[sys.executable, str(script)])]
    )
    await bridge.start()
    asked: list[str] = []

    async def answer(context: Any, params: Any) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult(action="accept", content={"name": "Ada"})

    try:
        gateway = Gateway(served, bridge=bridge, approvals="deny")
        async with serving(gateway) as url, client(url, LEGACY, elicitation_callback=answer) as mcp:
            booked = await mcp.call_tool("mcp__el__book", {"table": "T1"})
    finally:
        await bridge.aclose()
        served.dispose()
    assert not booked.is_error, text_of(booked)
    assert text_of(booked) == "booked T1 for Ada: 2 guests, vegetarian=False"
    assert asked == ["Book a table: under which name, for how many?"]


@pytest.mark.parametrize("era", ERAS)
async def test_an_upstream_rate_limit_reaches_the_client_with_its_wait(
    tmp_path: Path, era: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An upstream's 429 is an ``isError`` result saying ``RESOURCE_EXHAUSTED`` and the wait;
    the client's retry with the same key runs the tool (the refused call never ran)."""
    monkeypatch.setenv("RATE_LIMITED_CALLS", "1")
    monkeypatch.setenv("RATE_LIMIT_RETRY_AFTER", "5")
    with http_script_server(RATE_LIMITED) as (upstream_url, _pid):
        served = executor(permissions=PermissionConfig(allow=["mcp__web"]))
        bridge = MCPBridge(served.registry, [MCPServerConfig("web", url=upstream_url)])
        await bridge.start()
        try:
            gateway = Gateway(served, bridge=bridge)
            async with serving(gateway) as url, client(url, era) as mcp:
                key = cast(RequestParamsMeta, {"fastgate/idempotency-key": "k-429"})
                refused = await mcp.call_tool("mcp__web__runs", {}, meta=key)
                assert refused.is_error
                meta = fastgate_meta(refused)
                assert meta["code"] == "RESOURCE_EXHAUSTED", text_of(refused)
                assert (meta["reason"], meta["retry_after"]) == ("upstream_rate_limited", 5.0)
                assert "429" in text_of(refused)
                retried = await mcp.call_tool("mcp__web__runs", {}, meta=key)
                assert not retried.is_error and text_of(retried) == "1"
                assert not fastgate_meta(retried)["replayed"]
        finally:
            await bridge.aclose()
            served.dispose()
