"""The MCP bridge against the fixture server over stdio (SPEC §14): names, schemas, results,
time limits, progress, cancellation, list_changed, supervision."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from fastgate import (
    CancelToken,
    ErrorCode,
    ExecutionContext,
    PermissionMode,
    ToolExecutor,
    ToolKind,
    ToolRegistry,
)
from fastgate.mcp import MCPServerConfig, tool_name
from tests.mcp.servers import (
    alive,
    assert_gone,
    assert_settled,
    cancellations,
    fixture,
    records,
    running,
)

CTX = ExecutionContext(session_id="s1")
LONG = "summarize_the_quarterly_revenue_figures_for_every_region_and_product"


def yolo(registry: ToolRegistry) -> ToolExecutor:
    return ToolExecutor(registry, mode=PermissionMode.YOLO)


async def test_names_schemas_and_results(tmp_path: Path) -> None:
    registry = ToolRegistry()
    record = tmp_path / "record.jsonl"
    async with running(registry, fixture(record=record)) as bridge:
        executor = yolo(registry)
        status = bridge.status()["fx"]
        assert status["state"] == "ready" and status["generation"] == 1

        # Names: a 64+ and a non-ASCII name fit, distinct, hashed from the original.
        long, accented = tool_name("fx", LONG), tool_name("fx", "café_au_lait")
        for name in (long, accented):
            assert re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name) and name in status["tool_names"]
        assert long != accented and long.startswith("mcp__fx__summarize_")
        assert accented.startswith("mcp__fx__caf_") and re.search(r"_[0-9a-f]{8}$", accented)
        assert (await executor.execute(long, {}, CTX)).content == "long"
        assert (await executor.execute(accented, {}, CTX)).content == "accented"

        # The model sees {name, description, parameters} only.
        schema = next(s for s in registry.schemas() if s["name"] == "mcp__fx__add")
        assert set(schema) == {"name", "description", "parameters"}
        assert schema["parameters"]["required"] == ["a", "b"]

        # A tool whose schema does not compile is quarantined; the rest keep working.
        assert registry.resolve("mcp__fx__uncompilable") is None
        assert "patternProperties" in status["quarantined"]["uncompilable"]
        assert status["tools"] == len(status["tool_names"])

        # Arguments go through fastgate's validator: a bad call never reaches the server.
        bad = await executor.execute("mcp__fx__add", {"a": "two", "b": 3}, CTX)
        assert bad.error is not None and bad.error.code is ErrorCode.INVALID_ARGS
        assert "a" in bad.error.message

        # structuredContent (checked against outputSchema) is the value; the model gets the
        # text, once.
        added = await executor.execute("mcp__fx__add", {"a": 2, "b": 3}, CTX)
        assert added.ok and added.value == {"sum": 5}
        assert isinstance(added.content, str) and added.content.count("5") == 1
        structured_only = await executor.execute("mcp__fx__structured_only", {}, CTX)
        assert structured_only.content == '{"rows":[1,2,3]}'
        assert structured_only.value == {"rows": [1, 2, 3]}
        wrong = await executor.execute("mcp__fx__wrong_output", {}, CTX)
        assert wrong.error is not None and wrong.error.code is ErrorCode.OUTPUT_INVALID
        assert "sum" in wrong.error.message

        # isError is TOOL_FAILURE with the server's text.
        failed = await executor.execute("mcp__fx__fail", {"message": "disk on fire"}, CTX)
        assert failed.error is not None and failed.error.code is ErrorCode.TOOL_FAILURE
        assert failed.content == "Error executing tool fail: disk on fire"  # the server's words
        assert failed.error.details == {"server": "fx", "tool": "fail"}

        # Kind and policy without trust_annotations: EXECUTE, exclusive, not concurrency safe.
        echo = registry.resolve("mcp__fx__echo")
        assert echo is not None and echo.kind is ToolKind.EXECUTE
        assert echo.classify_parallelism({}) == "exclusive" and not echo.concurrency_safe({})
        assert echo.retry_safe is False
    assert not [r for r in records(record) if r["event"] == "start"]  # nothing slow ran


async def test_idle_timeout_is_reset_by_progress_and_the_call_timeout_caps(
    tmp_path: Path,
) -> None:
    registry = ToolRegistry()
    record = tmp_path / "record.jsonl"
    config = fixture(record=record, idle_timeout=0.8, call_timeout=2.5)
    async with running(registry, config) as bridge:
        executor = yolo(registry)
        seen: list[Any] = []

        async def collect() -> None:
            async for event in executor.progress():  # until cancelled: kept as they come
                seen.append(event)  # noqa: PERF401

        collector = asyncio.create_task(collect())
        # 1.6 s in all, twice the idle limit, with progress every 0.2 s: it finishes.
        args = {"seconds": 1.6, "steps": 8, "tag": "chatty"}
        chatty = await executor.execute("mcp__fx__slow", args, CTX)
        assert chatty.ok, chatty.content
        data = [e.data for e in seen if e.execution_id == chatty.meta.execution_id]
        assert data[0] == {"progress": 1.0, "total": 8.0, "message": "step 1"}
        assert [d["progress"] for d in data] == [float(i) for i in range(1, 9)]

        silent = await executor.execute("mcp__fx__slow", {"seconds": 30, "tag": "silent"}, CTX)
        assert silent.error is not None and silent.error.code is ErrorCode.TIMEOUT
        assert silent.error.details["reason"] == "idle_timeout" and "0.8s" in silent.content

        args = {"seconds": 30, "steps": 150, "tag": "endless"}
        endless = await executor.execute("mcp__fx__slow", args, CTX)
        assert endless.error is not None and endless.error.code is ErrorCode.TIMEOUT
        assert endless.error.details["reason"] == "call_timeout" and "2.5s" in endless.content
        collector.cancel()
        await asyncio.gather(collector, return_exceptions=True)
        assert_settled(executor, bridge, calls=3)
    # Exactly one notifications/cancelled per timed-out call, and the handlers saw it.
    cancelled = cancellations(record)
    assert len(cancelled) == 2 and len(set(cancelled)) == 2
    tags = [r["tag"] for r in records(record) if r["event"] == "cancelled"]
    assert sorted(tags) == ["endless", "silent"]


async def first_progress(executor: ToolExecutor) -> str:
    """The execution id of the first call that reports progress (it is running)."""
    async for event in executor.progress():
        return event.execution_id
    raise AssertionError("no progress")


async def test_a_cancelled_call_sends_exactly_one_notifications_cancelled(
    tmp_path: Path,
) -> None:
    registry = ToolRegistry()
    record = tmp_path / "record.jsonl"
    async with running(registry, fixture(record=record)) as bridge:
        executor = yolo(registry)
        args = {"seconds": 60, "steps": 600, "tag": "token"}

        # Through the context's cancel token.
        token = CancelToken()
        ctx = ExecutionContext(session_id="s1", cancel=token)
        started = asyncio.create_task(first_progress(executor))
        call = asyncio.create_task(executor.execute("mcp__fx__slow", args, ctx))
        await started
        token.cancel("the user pressed stop")
        result = await call
        assert result.error is not None and result.error.code is ErrorCode.ABORTED

        # By cancelling the task awaiting execute(), twice for good measure.
        started = asyncio.create_task(first_progress(executor))
        call = asyncio.create_task(executor.execute("mcp__fx__slow", {**args, "tag": "task"}, CTX))
        await started
        call.cancel()
        await asyncio.sleep(0)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        # The next call works: nothing was left half-open.
        assert (await executor.execute("mcp__fx__echo", {"text": "still here"}, CTX)).ok
        assert_settled(executor, bridge, calls=3)
    cancelled = cancellations(record)
    assert len(cancelled) == 2 and len(set(cancelled)) == 2
    tags = sorted(r["tag"] for r in records(record) if r["event"] == "cancelled")
    assert tags == ["task", "token"]


async def test_list_changed_swaps_the_generation_and_a_call_in_flight_keeps_its_definition(
    tmp_path: Path,
) -> None:
    registry = ToolRegistry()
    async with running(registry, fixture()) as bridge:
        executor = yolo(registry)
        before = registry.resolve("mcp__fx__versioned")
        assert before is not None and registry.resolve("mcp__fx__extra") is None
        started = asyncio.create_task(first_progress(executor))
        in_flight = asyncio.create_task(
            executor.execute("mcp__fx__versioned", {"seconds": 1.0}, CTX)
        )
        await started
        assert (await executor.execute("mcp__fx__bump", {}, CTX)).content == "generation 2"
        async with asyncio.timeout(30):
            await bridge.wait_for("fx", generation=2)
        after = registry.resolve("mcp__fx__versioned")
        assert after is not None and after is not before
        assert after.output.schema["properties"]["v"]["type"] == "string"
        assert registry.resolve("mcp__fx__extra") is not None
        # The call resolved before the swap is judged by the old definition ({"v": int}).
        old = await in_flight
        assert old.ok and old.value == {"v": 1}
        new = await executor.execute("mcp__fx__versioned", {}, CTX)
        assert new.ok and new.value == {"v": "one"}
        assert bridge.status()["fx"]["generation"] == 2


async def test_a_crashed_server_fails_fast_and_is_restarted(tmp_path: Path) -> None:
    registry = ToolRegistry()
    async with running(registry, fixture()) as bridge:
        executor = yolo(registry)
        first_pid = (await executor.execute("mcp__fx__pid", {}, CTX)).value["result"]
        assert first_pid == bridge.status()["fx"]["pid"]

        crashed = await executor.execute("mcp__fx__crash", {}, CTX)
        assert crashed.error is not None and crashed.error.code is ErrorCode.TOOL_ERROR
        assert crashed.error.retryable and crashed.error.details["reason"] == "server_unavailable"
        assert crashed.error.details["sent"] is True  # its outcome is unknown: not replayed

        # While it restarts, calls are refused at once without being sent.
        async with asyncio.timeout(30):
            await bridge.wait_for("fx", state="restarting")
        refused = await executor.execute("mcp__fx__echo", {"text": "x"}, CTX)
        assert refused.error is not None and refused.error.retryable
        assert refused.error.details == {
            "reason": "server_unavailable",
            "server": "fx",
            "state": "restarting",
            "sent": False,
        }
        assert "exited with status 3" in refused.content

        async with asyncio.timeout(30):
            await bridge.wait_for("fx")
        again = await executor.execute("mcp__fx__pid", {}, CTX)
        assert again.ok and again.value["result"] != first_pid
        assert not alive(first_pid) and bridge.status()["fx"]["restarts"] == 1

        # Killed from outside: the same.
        os.kill(again.value["result"], signal.SIGKILL)
        async with asyncio.timeout(30):
            await bridge.wait_for("fx", state="restarting")
        async with asyncio.timeout(30):
            await bridge.wait_for("fx")
        assert (await executor.execute("mcp__fx__echo", {"text": "back"}, CTX)).content == "back"
        assert len(bridge.status()["fx"]["pids"]) == 3
        assert_settled(executor, bridge, calls=5)


async def test_aclose_ends_the_whole_process_group_and_stderr_is_drained(
    tmp_path: Path,
) -> None:
    registry = ToolRegistry()
    async with running(registry, fixture()) as bridge:
        executor = yolo(registry)
        child = (await executor.execute("mcp__fx__spawn_child", {}, CTX)).value["result"]
        assert alive(child)
        # 20,000 lines on stderr: drained, so the server never blocks on the pipe.
        shouted = await executor.execute("mcp__fx__shout", {"lines": 20000}, CTX)
        assert shouted.ok and shouted.content == "wrote 20000 lines"
        tail = bridge.status()["fx"]["stderr_tail"].splitlines()
        assert 0 < len(tail) <= 40 and tail[-1].startswith("stderr line 19999 ")
        server = bridge.status()["fx"]["pid"]
    assert_gone([server, child])
    assert bridge.status()["fx"]["state"] == "closed"
    assert registry.resolve("mcp__fx__echo") is None  # its tools left with it


async def test_a_server_that_never_answers_the_handshake_is_an_error_not_a_hang(
    tmp_path: Path,
) -> None:
    # It starts and reads stdin, but never answers `initialize`: startup_timeout ends the wait.
    silent = tmp_path / "silent.py"
    silent.write_text("import sys\nfor line in sys.stdin:\n    pass\n")
    registry = ToolRegistry()
    config = MCPServerConfig("mute", command=[sys.executable, str(silent)], startup_timeout=1.0)
    async with running(registry, config, within=30.0) as bridge:
        status = bridge.status()["mute"]
        assert status["state"] == "restarting", status
        assert "startup_timeout" in status["last_error"], status
        assert registry.resolve("mcp__mute__anything") is None
        refused = await yolo(registry).execute("mcp__mute__anything", {}, CTX)
        assert refused.error is not None and refused.error.code is ErrorCode.UNKNOWN_TOOL


async def test_a_huge_result_is_cut_head_and_tail() -> None:
    registry = ToolRegistry()
    async with running(registry, fixture()):
        result = await yolo(registry).execute("mcp__fx__big", {"chars": 3_000_000}, CTX)
        assert result.ok and isinstance(result.content, str)
        assert len(result.content) <= 200_000
        assert "characters cut ...]" in result.content
        assert result.content.startswith("yyyy") and result.content.endswith("yyyy")
