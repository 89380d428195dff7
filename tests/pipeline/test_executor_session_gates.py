"""The gate orders one session's calls (SPEC §8.1, §7): an executor serving many sessions keeps
one gate per session, so one session's exclusive call, or its open prompt, never holds back
another session's calls, while a session's own exclusive calls stay barriers."""

from __future__ import annotations

import asyncio
from typing import Any

from fastgate import ApprovalResponse, ErrorCode, ExecutionContext, ToolKind
from tests.pipeline_kit import assert_idle, executor, tool


def _blocking_tool() -> tuple[Any, dict[str, asyncio.Event], dict[str, asyncio.Event]]:
    """An exclusive tool whose call ``text=X`` sets ``started[X]`` and waits for ``release[X]``."""
    started: dict[str, asyncio.Event] = {}
    release: dict[str, asyncio.Event] = {}

    async def body(args: Any, ctx: Any) -> str:
        key = str(args["text"])
        started.setdefault(key, asyncio.Event()).set()
        await release.setdefault(key, asyncio.Event()).wait()
        return key

    return tool("block", body, kind=ToolKind.WRITE), started, release


def _ctx(session: str, approver: Any = None) -> ExecutionContext:
    return ExecutionContext(session_id=session, approver=approver)


async def test_another_sessions_exclusive_call_does_not_wait() -> None:
    block, started, release = _blocking_tool()
    ex = executor(block, mode="accept_edits")
    a = asyncio.ensure_future(ex.execute("block", {"text": "a"}, _ctx("A")))
    await started.setdefault("a", asyncio.Event()).wait()
    # A holds its session's gate exclusively; B's exclusive call runs all the same.
    b = asyncio.ensure_future(ex.execute("block", {"text": "b"}, _ctx("B")))
    await started.setdefault("b", asyncio.Event()).wait()
    # A's own next exclusive call waits behind A's first.
    a2 = asyncio.ensure_future(ex.execute("block", {"text": "a2"}, _ctx("A")))
    for _ in range(20):
        await asyncio.sleep(0)
    assert "a2" not in started
    release.setdefault("b", asyncio.Event()).set()
    assert (await b).ok
    release["a"].set()
    await started.setdefault("a2", asyncio.Event()).wait()
    release.setdefault("a2", asyncio.Event()).set()
    assert (await a).ok and (await a2).ok
    assert_idle(ex)


async def test_an_open_prompt_holds_back_only_its_own_session() -> None:
    block, started, release = _blocking_tool()
    ex = executor(block)  # DEFAULT mode: a WRITE tool asks
    answered = asyncio.Event()
    prompted = asyncio.Event()

    async def slow_human(request: Any) -> ApprovalResponse:
        prompted.set()
        await answered.wait()
        return ApprovalResponse(True)

    async def at_once(request: Any) -> ApprovalResponse:
        return ApprovalResponse(True)

    a = asyncio.ensure_future(ex.execute("block", {"text": "a"}, _ctx("A", slow_human)))
    await prompted.wait()
    b = asyncio.ensure_future(ex.execute("block", {"text": "b"}, _ctx("B", at_once)))
    await started.setdefault("b", asyncio.Event()).wait()
    release.setdefault("b", asyncio.Event()).set()
    assert (await b).ok and not a.done()
    answered.set()
    await started.setdefault("a", asyncio.Event()).wait()
    release.setdefault("a", asyncio.Event()).set()
    assert (await a).ok
    assert_idle(ex)


async def test_idle_gates_are_dropped() -> None:
    ex = executor(tool("echo", lambda args, ctx: args["text"]))
    for i in range(2000):
        assert (await ex.execute("echo", {"text": "x"}, _ctx(f"s{i}"))).ok
    assert len(ex._gates) <= 512  # swept whenever the map doubles, never all 2000 kept
    assert_idle(ex)


async def test_dispose_fails_every_sessions_queued_callers() -> None:
    block, started, release = _blocking_tool()
    ex = executor(block, mode="accept_edits")
    a = asyncio.ensure_future(ex.execute("block", {"text": "a"}, _ctx("A")))
    b = asyncio.ensure_future(ex.execute("block", {"text": "b"}, _ctx("B")))
    await started.setdefault("a", asyncio.Event()).wait()
    await started.setdefault("b", asyncio.Event()).wait()
    queued = [asyncio.ensure_future(ex.execute("block", {"text": f"{s}2"}, _ctx(s))) for s in "AB"]
    for _ in range(20):
        await asyncio.sleep(0)
    ex.dispose()
    for call in queued:
        result = await call
        assert result.error is not None and result.error.code is ErrorCode.DISPOSED
    release.setdefault("a", asyncio.Event()).set()
    release.setdefault("b", asyncio.Event()).set()
    assert (await a).ok and (await b).ok  # running calls finish normally
    assert "a2" not in started and "b2" not in started
