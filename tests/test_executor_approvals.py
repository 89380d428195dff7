"""Approvals per session: one executor and one store serving many sessions (SPEC §7)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

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
