"""Approvals per session: one executor and one store serving many sessions (SPEC §7)."""

from __future__ import annotations

import asyncio
import functools
import threading
from pathlib import Path
from typing import Any

import pytest

from fastgate import ApprovalResponse, ApprovalStore, ErrorCode, ExecutionContext, ToolKind, schema
from tests.pipeline_kit import COMMAND, assert_idle, executor, tool


def _deploy() -> Any:
    return tool(
        "deploy",
        lambda a, c: "deployed",
        schema.Object({}),
        kind=ToolKind.EXECUTE,
        parallelism="shared",
    )


async def test_a_session_approval_does_not_cover_another_session() -> None:
    store = ApprovalStore()
    ex = executor(_deploy(), approval_store=store)
    asked: list[str | None] = []

    async def approve_for_session(request: Any) -> ApprovalResponse:
        asked.append(request.session_id)
        return ApprovalResponse(True, scope="session")

    def ctx(session: str) -> ExecutionContext:
        return ExecutionContext(session_id=session, approver=approve_for_session)

    assert (await ex.execute("deploy", {}, ctx("s1"))).ok
    assert (await ex.execute("deploy", {}, ctx("s1"))).ok  # covered: no prompt
    assert asked == ["s1"]
    # the same call from s2, on the same executor and store, is asked again
    assert (await ex.execute("deploy", {}, ctx("s2"))).ok
    assert asked == ["s1", "s2"]
    # and without an approver s3 is not covered by either approval
    refused = await ex.execute("deploy", {}, ExecutionContext(session_id="s3"))
    assert refused.error is not None and refused.error.code is ErrorCode.PERMISSION_DENIED
    assert refused.error.details["reason"] == "no_approver"
    assert_idle(ex)


async def test_a_blocked_prompt_holds_back_only_its_own_session() -> None:
    store = ApprovalStore()
    ex = executor(_deploy(), approval_store=store)
    s1_asked = asyncio.Event()
    s1_release = asyncio.Event()
    s1_prompts = 0

    async def slow_human(request: Any) -> ApprovalResponse:
        nonlocal s1_prompts
        s1_prompts += 1
        s1_asked.set()
        await s1_release.wait()
        return ApprovalResponse(True)

    async def quick_human(request: Any) -> ApprovalResponse:
        return ApprovalResponse(True)

    s1 = ExecutionContext(session_id="s1", approver=slow_human)
    first = asyncio.ensure_future(ex.execute("deploy", {}, s1))
    second = asyncio.ensure_future(ex.execute("deploy", {}, s1))
    await s1_asked.wait()
    # s1's human has not answered; s2's prompt is shown and answered meanwhile
    s2 = ExecutionContext(session_id="s2", approver=quick_human)
    # (bounded: with one prompt lock for every session this would wait for s1's human forever)
    other = await asyncio.wait_for(ex.execute("deploy", {}, s2), timeout=30)
    assert other.ok
    assert not first.done() and not second.done()
    assert s1_prompts == 1  # s1's second prompt waits for its first: one at a time per session
    s1_release.set()
    assert (await first).ok and (await second).ok
    assert s1_prompts == 2
    assert store._prompt_locks == {}  # no lock kept for sessions with nothing open
    assert_idle(ex)


async def test_prompts_of_one_session_stay_one_at_a_time() -> None:
    ex = executor(_deploy())
    active = peak = 0
    release = asyncio.Event()

    async def approver(request: Any) -> ApprovalResponse:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await release.wait()
        active -= 1
        return ApprovalResponse(True)

    ctx = ExecutionContext(session_id="s1", approver=approver)
    calls = [asyncio.ensure_future(ex.execute("deploy", {}, ctx)) for _ in range(4)]
    for _ in range(10):
        await asyncio.sleep(0)  # let every call reach its prompt
    release.set()
    results = await asyncio.gather(*calls)
    assert all(r.ok for r in results) and peak == 1
    assert_idle(ex)


async def test_a_project_approval_still_covers_every_session(tmp_path: Path) -> None:
    shell = tool("bash", lambda a, c: "ran", COMMAND, kind=ToolKind.EXECUTE)
    ex = executor(shell, workspace=tmp_path)

    async def approve_project(request: Any) -> ApprovalResponse:
        return ApprovalResponse(True, scope="project")

    ctx = ExecutionContext(session_id="s1", approver=approve_project)
    assert (await ex.execute("bash", {"command": "make lint"}, ctx)).ok
    other_session = await ex.execute("bash", {"command": "make lint"}, ExecutionContext("s2"))
    assert other_session.ok  # the project's rule, whatever the session
    assert_idle(ex)


async def test_a_cancelled_prompt_wait_leaves_no_lock() -> None:
    from fastgate import CancelToken

    store = ApprovalStore()
    ex = executor(_deploy(), approval_store=store)
    asked = asyncio.Event()
    release = asyncio.Event()

    async def approver(request: Any) -> ApprovalResponse:
        asked.set()
        await release.wait()
        return ApprovalResponse(True)

    holder = asyncio.ensure_future(
        ex.execute("deploy", {}, ExecutionContext(session_id="s1", approver=approver))
    )
    await asked.wait()
    token = CancelToken()
    waiter = asyncio.ensure_future(
        ex.execute("deploy", {}, ExecutionContext(session_id="s1", approver=approver, cancel=token))
    )
    for _ in range(5):
        await asyncio.sleep(0)
    token.cancel()
    cancelled = await waiter
    assert cancelled.error is not None
    assert cancelled.error.code is ErrorCode.ABORTED_BEFORE_DISPATCH
    release.set()
    assert (await holder).ok
    assert store._prompt_locks == {}
    assert_idle(ex)


# -- approvers that are plain functions --------------------------------------------------------


async def test_a_plain_function_approver_runs_in_a_thread_of_its_own() -> None:
    ex = executor(_deploy())
    loop_thread = threading.get_ident()
    threads: list[int] = []

    def approve(request: Any) -> ApprovalResponse:
        threads.append(threading.get_ident())
        return ApprovalResponse(True, scope="session")

    assert (await ex.execute("deploy", {}, ExecutionContext("s1", approver=approve))).ok
    assert (await ex.execute("deploy", {}, ExecutionContext("s1", approver=approve))).ok
    assert len(threads) == 1 and threads[0] != loop_thread  # then covered for the session
    assert_idle(ex)


async def test_a_blocking_plain_approver_holds_back_neither_the_loop_nor_other_sessions() -> None:
    store = ApprovalStore()
    ex = executor(_deploy(), approval_store=store)
    asked, answer = threading.Event(), threading.Event()

    def human(request: Any) -> ApprovalResponse:  # a terminal prompt, say: blocks its thread
        asked.set()
        answer.wait(30)
        return ApprovalResponse(True)

    waiting = asyncio.ensure_future(
        ex.execute("deploy", {}, ExecutionContext("s1", approver=human))
    )
    assert await asyncio.to_thread(asked.wait, 30)
    # Other sessions' plain approvers, more than the loop's worker threads on a small box.
    quick = [
        ex.execute(
            "deploy", {}, ExecutionContext(f"s{n}", approver=lambda r: ApprovalResponse(True))
        )
        for n in range(2, 40)
    ]
    results = await asyncio.wait_for(asyncio.gather(*quick), 30)
    assert all(r.ok for r in results) and not waiting.done()
    answer.set()
    assert (await waiting).ok
    assert store._prompt_locks == {}
    assert_idle(ex)


@pytest.mark.parametrize(
    "approver",
    [
        lambda request: 1 / 0,
        lambda request: None,
        lambda request: "yes",
        lambda request: True,
    ],
    ids=["raises", "none", "a string", "a bool"],
)
async def test_a_plain_approver_that_fails_refuses_the_call(approver: Any) -> None:
    ran: list[bool] = []
    ex = executor(
        tool("deploy", lambda a, c: ran.append(True), schema.Object({}), kind=ToolKind.EXECUTE)
    )
    result = await ex.execute("deploy", {}, ExecutionContext("s1", approver=approver))
    assert result.error is not None and result.error.code is ErrorCode.PERMISSION_DENIED
    assert result.error.details == {"reason": "approver_error"}
    assert ran == []
    assert_idle(ex)


async def test_a_plain_approver_that_exits_its_thread_refuses_the_call() -> None:
    def leave(request: Any) -> ApprovalResponse:
        raise SystemExit(3)

    ex = executor(_deploy())
    result = await ex.execute("deploy", {}, ExecutionContext("s1", approver=leave))
    assert result.error is not None and result.error.details == {"reason": "approver_error"}
    assert_idle(ex)


class _AsyncCallable:
    async def __call__(self, request: Any) -> ApprovalResponse:
        return ApprovalResponse(True)


async def _approve_async(request: Any, scope: str) -> ApprovalResponse:
    return ApprovalResponse(True, scope=scope)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "approver",
    [
        _AsyncCallable(),
        functools.partial(_approve_async, scope="once"),
        lambda request: _approve_async(request, "once"),  # a function handing back a coroutine
    ],
    ids=["async __call__", "partial", "returns a coroutine"],
)
async def test_async_approvers_in_every_shape(approver: Any) -> None:
    ex = executor(_deploy())
    assert (await ex.execute("deploy", {}, ExecutionContext("s1", approver=approver))).ok
    assert_idle(ex)


async def test_an_approver_raising_cancelled_error_on_its_own_refuses_the_call() -> None:
    async def confused(request: Any) -> ApprovalResponse:
        raise asyncio.CancelledError

    ex = executor(_deploy())
    result = await ex.execute("deploy", {}, ExecutionContext("s1", approver=confused))
    assert result.error is not None and result.error.details == {"reason": "approver_error"}
    assert_idle(ex)


async def test_a_cancelled_call_keeps_its_sessions_prompt_until_the_plain_approver_returns() -> (
    None
):
    from fastgate import CancelToken

    store = ApprovalStore()
    ex = executor(_deploy(), approval_store=store)
    first_asked, first_answer = threading.Event(), threading.Event()
    open_prompts = peak = 0
    guard = threading.Lock()

    def human(request: Any) -> ApprovalResponse:
        nonlocal open_prompts, peak
        with guard:
            open_prompts += 1
            peak = max(peak, open_prompts)
        first_asked.set()
        first_answer.wait(30)
        with guard:
            open_prompts -= 1
        return ApprovalResponse(True)

    token = CancelToken()
    first = asyncio.ensure_future(
        ex.execute("deploy", {}, ExecutionContext("s1", approver=human, cancel=token))
    )
    assert await asyncio.to_thread(first_asked.wait, 30)
    token.cancel()
    cancelled = await asyncio.wait_for(first, 30)  # the call stops waiting at once
    assert cancelled.error is not None
    assert cancelled.error.code is ErrorCode.ABORTED_BEFORE_DISPATCH
    second = asyncio.ensure_future(ex.execute("deploy", {}, ExecutionContext("s1", approver=human)))
    for _ in range(20):
        await asyncio.sleep(0.01)
    assert not second.done() and peak == 1  # its prompt waits for the first one to close
    first_answer.set()
    assert (await asyncio.wait_for(second, 30)).ok
    assert peak == 1 and store._prompt_locks == {}
    for thread in threading.enumerate():  # the approver threads end once they returned
        if thread.name == "fastgate-approver":
            thread.join(10)
    assert not any(t.name == "fastgate-approver" for t in threading.enumerate())
    assert_idle(ex)
