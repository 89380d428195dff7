"""Invocation (SPEC §9): deadlines, cancellation fusion, retries, worker threads, runaways."""

from __future__ import annotations

import asyncio
import errno
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from fastgate import (
    CancelToken,
    ConcurrencyScheduler,
    ErrorCode,
    ExecutionContext,
    Failure,
    RunContext,
    SchedulerLimits,
    ToolKind,
    define_tool,
)
from tests.pipeline_kit import NOTHING, assert_idle, executor, tool


async def test_signal_fuses_caller_cancel_and_deadline() -> None:
    seen: list[object] = []

    async def watch(args: Any, ctx: RunContext) -> str:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:  # the task is cancelled and the signal says why
            seen.append(ctx.signal.reason)
            raise
        return "late"

    ex = executor(tool("watch", watch, NOTHING, timeout=0.05))
    result = await ex.execute("watch", {})
    assert result.error is not None and result.error.code is ErrorCode.TIMEOUT
    assert repr(seen[0]) == "deadline"
    token = CancelToken()
    ex2 = executor(tool("watch", watch, NOTHING))
    task = asyncio.create_task(ex2.execute("watch", {}, ExecutionContext(cancel=token)))
    await asyncio.sleep(0.01)
    token.cancel("stop please")
    result = await task
    assert result.error is not None and result.error.code is ErrorCode.ABORTED
    assert seen[1] == "stop please"


async def test_body_that_swallows_cancellation_still_times_out_and_keeps_its_holds() -> None:
    release = asyncio.Event()
    finished = asyncio.Event()

    async def stubborn(args: Any, ctx: Any) -> str:
        while True:
            try:
                await release.wait()
                break
            except asyncio.CancelledError:
                continue  # ignores cancellation
        finished.set()
        return "done anyway"

    limits = SchedulerLimits(global_limit=1)
    ex = executor(
        tool("stubborn", stubborn, NOTHING, timeout=0.05),
        scheduler=ConcurrencyScheduler(limits),
        cancel_grace=0.05,
    )
    result = await ex.execute("stubborn", {})
    assert result.error is not None and result.error.code is ErrorCode.TIMEOUT
    assert result.error.details["still_running"] is True
    assert ex.scheduler.stats().in_flight == 1  # its slot stays taken while it runs
    release.set()
    await finished.wait()
    await asyncio.sleep(0)
    assert_idle(ex)


async def test_cancel_before_the_body_starts_is_aborted_before_dispatch() -> None:
    started: list[int] = []
    hold = asyncio.Event()

    async def blocker(args: Any, ctx: Any) -> str:
        await hold.wait()
        return "x"

    async def body(args: Any, ctx: Any) -> str:
        started.append(1)
        return "x"

    limits = SchedulerLimits(global_limit=1)
    ex = executor(
        tool("blocker", blocker, NOTHING, parallelism="shared"),
        tool("body", body, NOTHING, parallelism="shared"),
        scheduler=ConcurrencyScheduler(limits),
    )
    first = asyncio.create_task(ex.execute("blocker", {}))
    await asyncio.sleep(0.01)
    token = CancelToken()
    queued = asyncio.create_task(ex.execute("body", {}, ExecutionContext(cancel=token)))
    await asyncio.sleep(0.01)
    assert ex.scheduler.stats().queued == 1
    token.cancel()
    result = await queued
    assert result.error is not None and result.error.code is ErrorCode.ABORTED_BEFORE_DISPATCH
    assert result.meta.aborted_before_launch and started == []
    hold.set()
    await first
    assert_idle(ex)


async def test_cancelling_the_awaiting_task_propagates_and_releases() -> None:
    entered = asyncio.Event()
    cancelled: list[int] = []

    async def slow(args: Any, ctx: Any) -> str:
        entered.set()
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(1)
            raise
        return "x"

    ex = executor(tool("slow", slow, NOTHING))
    task = asyncio.create_task(ex.execute("slow", {}))
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cancelled == [1]
    last_error = ex.history()[-1].error
    assert last_error is not None and last_error.code is ErrorCode.ABORTED
    assert_idle(ex)


class Flaky:
    def __init__(self, failures: int, err: int = errno.EBUSY) -> None:
        self.failures = failures
        self.err = err
        self.calls: list[float] = []
        self.first_call = asyncio.Event()

    async def __call__(self, args: Any, ctx: Any) -> str:
        self.calls.append(time.monotonic())
        self.first_call.set()
        if len(self.calls) <= self.failures:
            raise OSError(self.err, "resource busy")
        return "ok"


async def test_retry_safe_tool_retries_transient_errno_with_linear_backoff() -> None:
    flaky = Flaky(2)
    ex = executor(
        define_tool("flaky", "f", NOTHING, flaky, retry_safe=True, kind=ToolKind.READ_ONLY)
    )
    result = await ex.execute("flaky", {})
    assert result.ok and result.meta.attempts == 3
    gaps = [b - a for a, b in zip(flaky.calls, flaky.calls[1:], strict=False)]
    assert gaps[0] >= 0.19 and gaps[1] >= 0.39


@pytest.mark.parametrize(
    ("retry_safe", "err", "attempts"),
    [(False, errno.EBUSY, 1), (True, errno.ENOENT, 1), (True, errno.EAGAIN, 3)],
)
async def test_retries_only_for_retry_safe_tools_and_the_errno_list(
    retry_safe: bool, err: int, attempts: int
) -> None:
    flaky = Flaky(5, err)
    ex = executor(
        define_tool("flaky", "f", NOTHING, flaky, retry_safe=retry_safe, kind=ToolKind.READ_ONLY)
    )
    result = await ex.execute("flaky", {})
    assert result.error is not None and result.error.code is ErrorCode.TOOL_ERROR
    assert result.meta.attempts == attempts == len(flaky.calls)


async def test_cancel_during_backoff_starts_no_further_attempt() -> None:
    flaky = Flaky(5)
    ex = executor(
        define_tool("flaky", "f", NOTHING, flaky, retry_safe=True, kind=ToolKind.READ_ONLY)
    )
    token = CancelToken()
    task = asyncio.create_task(ex.execute("flaky", {}, ExecutionContext(cancel=token)))
    await flaky.first_call.wait()
    token.cancel()
    result = await task
    assert len(flaky.calls) == 1 and result.meta.attempts == 1
    assert result.error is not None and result.error.code is ErrorCode.TOOL_ERROR  # its own


async def test_a_failure_is_never_retried() -> None:
    from fastgate import Failure

    calls: list[int] = []

    async def fails(args: Any, ctx: Any) -> Failure:
        calls.append(1)
        return Failure("nope")

    ex = executor(define_tool("f", "f", NOTHING, fails, retry_safe=True, kind=ToolKind.READ_ONLY))
    result = await ex.execute("f", {})
    assert result.error is not None and result.error.code is ErrorCode.TOOL_FAILURE
    assert calls == [1]


async def test_sync_tools_run_in_a_worker_thread_and_see_the_signal() -> None:
    loop_thread = threading.get_ident()
    seen: list[int] = []

    def blocking(args: Any, ctx: RunContext) -> str:
        seen.append(threading.get_ident())
        while not ctx.signal.cancelled:  # a well-behaved sync tool polls its signal
            time.sleep(0.005)
        return "stopped"

    ex = executor(
        define_tool("blocking", "b", NOTHING, blocking, timeout=0.05, kind=ToolKind.READ_ONLY)
    )
    result = await ex.execute("blocking", {})
    assert seen and seen[0] != loop_thread
    assert result.error is not None and result.error.code is ErrorCode.TIMEOUT
    assert "still_running" not in result.error.details  # it stopped within the grace period
    assert_idle(ex)


async def test_a_token_cancelled_in_another_thread_reaches_a_sync_body_at_once() -> None:
    """The guard cancels the body's signal in the canceller's own thread (not a loop turn
    later), so a sync body polling it in its worker thread sees the caller's reason."""
    started = threading.Event()
    reasons: list[object] = []

    def blocking(args: Any, ctx: RunContext) -> str:
        started.set()
        while not ctx.signal.cancelled:  # a well-behaved sync tool polls its signal
            time.sleep(0.001)
        reasons.append(ctx.signal.reason)
        return "stopped"

    def canceller() -> None:
        started.wait(5)
        token.cancel("from another thread")

    ex = executor(
        define_tool("blocking", "b", NOTHING, blocking, timeout=30.0, kind=ToolKind.READ_ONLY)
    )
    token = CancelToken()
    thread = threading.Thread(target=canceller)
    thread.start()
    try:
        result = await ex.execute("blocking", {}, ExecutionContext(cancel=token))
    finally:
        thread.join(5)
    assert reasons == ["from another thread"]
    assert result.error is not None and result.error.code is ErrorCode.ABORTED
    assert result.meta.aborted_before_launch is False
    assert_idle(ex)


async def test_progress_is_bounded_and_streamed() -> None:
    go = asyncio.Event()

    async def chatty(args: Any, ctx: RunContext) -> str:
        for i in range(300):
            ctx.report_progress(i)
        await go.wait()
        ctx.report_progress("last")
        return "done"

    ex = executor(tool("chatty", chatty, NOTHING))
    task = asyncio.create_task(ex.execute("chatty", {}))
    for _ in range(10):
        await asyncio.sleep(0)
    execution_id = next(iter(ex._progress._buffers))
    received: list[Any] = []

    async def consume() -> None:
        received.extend([event.data async for event in ex.progress(execution_id)])

    consumer = asyncio.create_task(consume())
    await asyncio.sleep(0)
    go.set()
    await task
    await consumer
    assert len(received) == 257 and received[0] == 44 and received[-1] == "last"


async def test_cancel_while_waiting_at_any_pre_launch_stage_is_aborted_before_dispatch(
    tmp_path: Any,
) -> None:
    """Gate queue, approval prompt, file lock: a cancel there runs nothing and holds nothing."""
    from fastgate import ApprovalResponse, PermissionConfig, schema

    ran: list[str] = []
    hold = asyncio.Event()
    path_args = schema.Object({"file_path": schema.String()}, required=("file_path",))

    async def blocker(args: Any, ctx: Any) -> str:
        await hold.wait()
        return "done"

    async def body(args: Any, ctx: Any) -> str:
        ran.append("body")
        return "x"

    prompt_open = asyncio.Event()

    async def slow_approver(request: Any) -> ApprovalResponse:
        prompt_open.set()
        await asyncio.sleep(30)
        return ApprovalResponse(True)

    ex = executor(
        tool("hold_exclusive", blocker, NOTHING),  # exclusive: later calls queue at the gate
        tool("write_a", blocker, path_args, kind=ToolKind.WRITE),
        tool("write_b", body, path_args, kind=ToolKind.WRITE),
        tool("ask", body, NOTHING, kind=ToolKind.EXECUTE, parallelism="shared"),
        workspace=tmp_path,
        permissions=PermissionConfig(allow=("write_a", "write_b")),
    )

    async def cancelled_at(name: str, args: Any, ready: Any) -> Any:
        token = CancelToken()
        call = asyncio.create_task(
            ex.execute(name, args, ExecutionContext(cancel=token, approver=slow_approver))
        )
        await ready()
        token.cancel("user stop")
        return await call

    async def settle() -> None:
        for _ in range(20):
            await asyncio.sleep(0)

    # 1. queued at the gate behind an exclusive call
    first = asyncio.create_task(ex.execute("hold_exclusive", {}))
    await settle()
    result = await cancelled_at("ask", {}, settle)
    assert result.error is not None and result.error.code is ErrorCode.ABORTED_BEFORE_DISPATCH
    hold.set()
    await first
    hold.clear()
    # 2. waiting for the approver
    result = await cancelled_at("ask", {}, prompt_open.wait)
    assert result.error is not None and result.error.code is ErrorCode.ABORTED_BEFORE_DISPATCH
    # 3. waiting for a file lock held by another call
    writer = asyncio.create_task(ex.execute("write_a", {"file_path": "f.txt"}))
    await settle()
    result = await cancelled_at("write_b", {"file_path": "f.txt"}, settle)
    assert result.error is not None and result.error.code is ErrorCode.ABORTED_BEFORE_DISPATCH
    hold.set()
    await writer
    assert ran == []
    assert all(
        r.meta.aborted_before_launch
        for r in ex.history()
        if r.error and r.error.code is ErrorCode.ABORTED_BEFORE_DISPATCH
    )
    assert_idle(ex)


async def test_lock_paths_holds_a_multi_path_set_until_the_body_ends(tmp_path: Any) -> None:
    from fastgate import PermissionConfig, schema

    inside = asyncio.Event()
    release = asyncio.Event()
    order: list[str] = []

    async def patch(args: Any, ctx: RunContext) -> str:
        # apply_patch-style: the tool takes the locks of every file it will touch, sorted.
        await ctx.lock_paths(["b.txt", "a.txt", str(tmp_path / "a.txt")])
        order.append("patch locked")
        inside.set()
        await release.wait()
        return "patched"

    async def write(args: Any, ctx: Any) -> str:
        order.append(f"write {args['file_path']}")
        return "written"

    params = schema.Object({"file_path": schema.String()}, required=("file_path",))
    ex = executor(
        tool("patch", patch, NOTHING, kind=ToolKind.WRITE, parallelism="shared"),
        tool("write", write, params, kind=ToolKind.WRITE, parallelism="shared"),
        workspace=tmp_path,
        permissions=PermissionConfig(allow=("patch", "write")),
    )
    patching = asyncio.create_task(ex.execute("patch", {}))
    await inside.wait()
    assert ex.locks.locked(tmp_path / "a.txt") and ex.locks.locked(tmp_path / "b.txt")
    writing = asyncio.create_task(ex.execute("write", {"file_path": "b.txt"}))
    for _ in range(10):
        await asyncio.sleep(0)
    assert order == ["patch locked"]  # the writer waits for the patch's lock on b.txt
    release.set()
    assert (await patching).ok and (await writing).ok
    assert order == ["patch locked", "write b.txt"]
    assert_idle(ex)


async def test_lock_paths_skips_a_path_the_call_already_holds(tmp_path: Any) -> None:
    from fastgate import PermissionConfig, schema

    async def edit(args: Any, ctx: RunContext) -> str:
        await ctx.lock_paths([args["file_path"], "other.txt"])  # its own file is held already
        return "ok"

    params = schema.Object({"file_path": schema.String()}, required=("file_path",))
    ex = executor(
        tool("edit", edit, params, kind=ToolKind.WRITE),
        workspace=tmp_path,
        permissions=PermissionConfig(allow=("edit",)),
    )
    result = await asyncio.wait_for(ex.execute("edit", {"file_path": "f.txt"}), 30)
    assert result.ok, result.error
    assert_idle(ex)


async def test_without_token_or_deadline_a_swallowed_cancellation_still_reaches_the_caller() -> (
    None
):
    # The fast path (no ctx.cancel, no timeout, async, not retry-safe) runs the tool's coroutine
    # as the body task itself; a body that ignores the cancellation must not turn the caller's
    # cancellation into a normal result.
    entered = asyncio.Event()
    finished: list[str] = []

    async def stubborn(args: Any, ctx: RunContext) -> str:
        entered.set()
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            finished.append("swallowed")
        return "done anyway"

    ex = executor(tool("stubborn", stubborn, NOTHING))
    task = asyncio.create_task(ex.execute("stubborn", {}))
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert finished == ["swallowed"]
    last = ex.history()[-1]
    assert last.error is not None and last.error.code is ErrorCode.ABORTED
    assert_idle(ex)


async def test_fast_path_reports_errors_failures_and_one_attempt() -> None:
    async def broken(args: Any, ctx: RunContext) -> str:
        raise ValueError("no such thing")

    async def refusing(args: Any, ctx: RunContext) -> Any:
        return Failure("not today", code="E_LATER")

    async def fine(args: Any, ctx: RunContext) -> str:
        assert ctx.attempt == 1 and not ctx.signal.cancelled  # a signal made on first use
        return "ok"

    ex = executor(
        tool("broken", broken, NOTHING),
        tool("refusing", refusing, NOTHING),
        tool("fine", fine, NOTHING),
    )
    error = await ex.execute("broken", {})
    assert error.error is not None and error.error.code is ErrorCode.TOOL_ERROR
    assert "ValueError" in error.error.message and error.meta.attempts == 1
    failure = await ex.execute("refusing", {})
    assert failure.error is not None and failure.error.code is ErrorCode.TOOL_FAILURE
    assert failure.error.details["code"] == "E_LATER"
    ok = await ex.execute("fine", {})
    assert ok.ok and ok.value == "ok" and ok.meta.attempts == 1
    assert_idle(ex)


async def test_a_per_call_concurrency_answer_decides_the_file_lock(tmp_path: Any) -> None:
    """``is_concurrency_safe`` as a function is asked on every call (never cached): a read of a
    file runs beside a write that holds its lock, a second write waits for it."""
    from fastgate import PermissionConfig, schema

    release, holding = asyncio.Event(), asyncio.Event()
    inside: list[str] = []

    async def body(args: Any, ctx: RunContext) -> str:
        inside.append(args["mode"])
        if args["mode"] == "write" and len(inside) == 1:
            holding.set()
            await release.wait()  # the first write holds the file's lock until released
        return str(args["mode"])

    params = schema.Object(
        {"file_path": schema.String(), "mode": schema.String()}, required=("file_path", "mode")
    )
    ex = executor(
        tool(
            "touch",
            body,
            params,
            kind=ToolKind.WRITE,
            parallelism="shared",
            is_concurrency_safe=lambda args: args["mode"] == "read",
        ),
        workspace=tmp_path,
        permissions=PermissionConfig(allow=("touch",)),
    )
    first = asyncio.create_task(ex.execute("touch", {"file_path": "f.txt", "mode": "write"}))
    await holding.wait()
    assert ex.locks.locked(tmp_path / "f.txt")
    read = await asyncio.wait_for(ex.execute("touch", {"file_path": "f.txt", "mode": "read"}), 30)
    assert read.ok and read.value == "read"  # ran while the write held the lock
    second = asyncio.create_task(ex.execute("touch", {"file_path": "f.txt", "mode": "write"}))
    for _ in range(20):  # let it run as far as it can: it must stop at the lock
        await asyncio.sleep(0)
    assert inside == ["write", "read"]
    release.set()
    assert [r.value for r in await asyncio.gather(first, second)] == ["write", "write"]
    assert inside == ["write", "read", "write"]
    assert_idle(ex)


@pytest.mark.parametrize("deadline", [None, 5.0], ids=["fast path", "with a deadline"])
async def test_the_body_runs_in_its_own_task_named_after_the_tool(deadline: float | None) -> None:
    """SPEC §9.1: its own task, not the caller's; named so a task dump shows what runs."""
    seen: list[asyncio.Task[Any] | None] = []

    async def where(args: Any, ctx: Any) -> str:
        seen.append(asyncio.current_task())
        return "here"

    ex = executor(tool("where", where, NOTHING, timeout=deadline))
    result = await ex.execute("where", {})
    assert result.ok
    body = seen[0]
    assert body is not None and body is not asyncio.current_task()
    assert body.get_name() == "fastgate:where"


async def test_a_task_factory_installed_on_the_loop_makes_the_body_task() -> None:
    loop = asyncio.get_running_loop()
    made: list[asyncio.Task[Any]] = []
    seen: list[asyncio.Task[Any] | None] = []

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        made.append(asyncio.Task(coro, loop=loop, **kwargs))
        return made[-1]

    async def where(args: Any, ctx: Any) -> str:
        seen.append(asyncio.current_task())
        return "here"

    ex = executor(tool("where", where, NOTHING))
    loop.set_task_factory(factory)
    try:
        result = await ex.execute("where", {})
    finally:
        loop.set_task_factory(None)
    assert result.ok
    assert made == seen
    assert made[0].get_name() == "fastgate:where"


@pytest.mark.parametrize(
    ("deadline", "retry_safe"),
    [(None, False), (None, True), (5.0, False)],
    ids=["fast path", "fast path, retry-safe", "with a deadline and a token"],
)
async def test_a_body_task_cancelled_by_a_third_party_before_it_starts_still_settles(
    deadline: float | None, retry_safe: bool
) -> None:
    """A server shutting down may cancel every task, the body's before its first step: its code
    never runs, so only the task's own end can settle the call, which must not hang, and the
    caller, not cancelled itself, gets a result rather than a ``CancelledError``."""
    loop = asyncio.get_running_loop()
    started: list[str] = []

    def cancel_at_once(
        loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any
    ) -> asyncio.Task[Any]:
        task = asyncio.Task(coro, loop=loop, **kwargs)
        task.cancel()  # before the loop ever runs its first step
        return task

    async def body(args: Any, ctx: Any) -> str:
        started.append("ran")
        return "ran"

    ex = executor(tool("body", body, NOTHING, timeout=deadline, retry_safe=retry_safe))
    # A caller token too, so both guarded routes (token and deadline) are taken.
    ctx = ExecutionContext(cancel=CancelToken()) if deadline is not None else None
    loop.set_task_factory(cancel_at_once)
    try:
        async with asyncio.timeout(5):  # a hang fails here instead of stalling the suite
            result = await ex.execute("body", {}, ctx)
    finally:
        loop.set_task_factory(None)
    # Not the caller's cancellation: the call ends ABORTED, the caller itself goes on.
    assert result.error is not None and result.error.code == ErrorCode.ABORTED
    assert result.meta.aborted_before_launch is False
    assert started == []
    assert_idle(ex)


async def _turns_of_one_call(
    body: Callable[..., Any], deadline: float | None, with_token: bool
) -> int:
    """How many turns of the loop one call of ``body`` takes (after a warm-up call)."""
    loop = asyncio.get_running_loop()
    turns = 0
    ticking = True

    def tick() -> None:  # runs once per turn of the loop while the call is under way
        nonlocal turns
        turns += 1
        if ticking:
            loop.call_soon(tick)

    ex = executor(tool("quick", body, NOTHING, timeout=deadline))
    ctx = ExecutionContext(cancel=CancelToken()) if with_token else None
    await ex.execute("quick", {}, ctx)  # warm up
    loop.call_soon(tick)
    await asyncio.sleep(0)  # the ticker's first turn
    before = turns
    result = await ex.execute("quick", {}, ctx)
    used = turns - before
    ticking = False
    assert result.ok
    assert_idle(ex)
    return used


_ROUTES = pytest.mark.parametrize(
    ("deadline", "with_token"),
    [(None, False), (30.0, False), (None, True), (30.0, True)],
    ids=["fast path", "deadline", "caller token", "deadline and token"],
)


@_ROUTES
async def test_a_body_that_never_waits_takes_no_turn_of_the_loop(
    deadline: float | None, with_token: bool
) -> None:
    """Its first step runs inside the call (the body's task starts eagerly): a call whose body
    finishes at once never waits behind the other ready callbacks of a loaded server."""
    assert await _turns_of_one_call(lambda args, ctx: "done", deadline, with_token) == 0


@_ROUTES
async def test_a_body_that_waits_once_takes_two_turns_of_the_loop(
    deadline: float | None, with_token: bool
) -> None:
    """One turn resumes the body after its wait, the next resumes the caller: no more."""

    async def yield_once(args: Any, ctx: Any) -> str:
        await asyncio.sleep(0)
        return "done"

    assert await _turns_of_one_call(yield_once, deadline, with_token) == 2


def test_deadlines_hold_with_a_loop_per_thread() -> None:
    """Deadlines are kept per loop: executors on loops in two threads at once (their calls
    swapping the current loop's ``Deadlines`` back and forth) still expire exactly their calls."""

    async def slow(args: Any, ctx: Any) -> str:
        await asyncio.sleep(10)
        return "late"

    async def quick(args: Any, ctx: Any) -> str:
        await asyncio.sleep(0)
        return "done"

    async def session() -> list[ErrorCode | None]:
        ex = executor(
            tool("slow", slow, NOTHING, timeout=0.02),
            tool("quick", quick, NOTHING, timeout=30.0),
            cancel_grace=1.0,
        )
        calls = [ex.execute("slow" if i % 4 == 0 else "quick", {}) for i in range(40)]
        results = await asyncio.gather(*calls)
        assert_idle(ex)
        return [r.error.code if r.error is not None else None for r in results]

    outcomes: list[list[ErrorCode | None]] = []

    def run() -> None:
        outcomes.append(asyncio.run(session()))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    expected = [ErrorCode.TIMEOUT if i % 4 == 0 else None for i in range(40)]
    assert outcomes == [expected, expected]
