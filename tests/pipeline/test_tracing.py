"""The executor's tracer hook (``fastgate.pipeline.tracing``): every call is told, once, with
the decision and the admission and run timings the result does not carry; no tracer, no
trace."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest

from fastgate import (
    ApprovalResponse,
    ConcurrencyScheduler,
    Decision,
    ErrorCode,
    ExecutionContext,
    Failure,
    PermissionConfig,
    PreToolUseResult,
    SchedulerLimits,
    ToolCall,
    ToolKind,
    ToolResult,
)
from fastgate.hooks import Hooks
from fastgate.pipeline.tracing import CallTrace
from tests.pipeline_kit import assert_idle, echo, executor, tool


class Recorder:
    """A tracer that keeps what it was told."""

    def __init__(self) -> None:
        self.started: list[tuple[str, str | None]] = []
        self.ended: list[tuple[Any, ToolResult | None, CallTrace]] = []

    def call_started(self, name: str, ctx: ExecutionContext) -> Any:
        self.started.append((name, ctx.session_id))
        return len(self.started)

    def call_ended(self, token: Any, result: ToolResult | None, trace: CallTrace) -> None:
        self.ended.append((token, result, trace))

    def only(self) -> tuple[ToolResult, CallTrace]:
        assert len(self.started) == len(self.ended) == 1
        token, result, trace = self.ended[0]
        assert token == 1 and result is not None
        return result, trace


def _approver(approved: bool) -> Any:
    async def approver(request: Any) -> ApprovalResponse:
        return ApprovalResponse(approved, feedback=None if approved else "no")

    return approver


async def _until_queued(scheduler: ConcurrencyScheduler) -> None:
    for _ in range(50):  # a few loop turns: the call goes through its stages to the queue
        if scheduler.stats().queued:
            return
        await asyncio.sleep(0)
    raise AssertionError("the call never queued for its slot")


def _failing(args: Any, ctx: Any) -> Failure:
    return Failure("nope", code="mine")


def _traced(**options: Any) -> tuple[Any, Recorder]:
    ex = executor(
        echo(),
        tool("write_note", lambda a, c: "written", kind=ToolKind.WRITE),
        tool("fail", _failing),
        **options,
    )
    recorder = Recorder()
    assert ex.set_tracer(recorder) is None
    assert ex.tracer is recorder
    return ex, recorder


async def test_an_allowed_call_has_its_decision_and_both_timings() -> None:
    ex, recorder = _traced()
    result = await ex.execute("echo", {"text": "hi"}, call_id="c1")
    assert result.ok
    got, trace = recorder.only()
    assert got is result
    assert recorder.started == [("echo", "s1")]
    assert trace.decision is Decision.ALLOW
    assert trace.admission_wait_ms is not None and trace.admission_wait_ms >= 0
    assert trace.run_ms is not None and trace.run_ms >= 0
    assert trace.admission_began is not None and trace.admitted is not None
    assert trace.run_began is not None and trace.run_ended is not None and trace.ended is not None
    assert trace.admission_began <= trace.admitted <= trace.run_began <= trace.run_ended
    assert trace.run_ended <= trace.ended
    assert_idle(ex)


@pytest.mark.parametrize(
    ("name", "args", "options", "code", "decision"),
    [
        ("nope", {}, {}, ErrorCode.UNKNOWN_TOOL, None),
        ("echo", {"text": 3}, {}, ErrorCode.INVALID_ARGS, None),
        ("echo", {"text": "x"}, {"permissions": PermissionConfig(deny=("echo",))},
         ErrorCode.PERMISSION_DENIED, Decision.DENY),
        ("echo", {"text": "x"}, {"guards": (lambda view: "owner says no",)},
         ErrorCode.PERMISSION_DENIED, Decision.DENY),
        ("write_note", {"text": "x"}, {}, ErrorCode.PERMISSION_DENIED, Decision.ASK),
    ],
    ids=["unknown", "invalid", "deny-rule", "guard", "no-approver"],
)  # fmt: skip
async def test_a_refusal_is_traced_with_no_admission_or_run(
    name: str, args: Any, options: Any, code: ErrorCode, decision: Decision | None
) -> None:
    ex, recorder = _traced(**options)
    result = await ex.execute(name, args)
    assert result.error is not None and result.error.code == code
    got, trace = recorder.only()
    assert got is result
    assert trace.decision == decision
    assert trace.admission_wait_ms is None and trace.run_ms is None
    assert trace.ended is not None


@pytest.mark.parametrize("approved", [True, False])
async def test_an_asked_call_carries_the_approvers_verdict(approved: bool) -> None:
    ex, recorder = _traced()
    ctx = ExecutionContext(approver=_approver(approved))
    result = await ex.execute("write_note", {"text": "x"}, ctx)
    assert result.ok is approved
    _, trace = recorder.only()
    assert trace.decision is (Decision.ALLOW if approved else Decision.DENY)
    assert result.meta.decision_source == "user"
    assert (trace.run_ms is not None) is approved


async def test_a_hook_that_denies_is_the_decision() -> None:
    hooks = Hooks()
    hooks.add_pre_tool_use(lambda event: PreToolUseResult(decision="deny", reason="hook says no"))
    ex, recorder = _traced(hooks=hooks)
    result = await ex.execute("echo", {"text": "x"})
    assert result.error is not None and result.error.code == ErrorCode.PERMISSION_DENIED
    _, trace = recorder.only()
    assert trace.decision is Decision.DENY and result.meta.decision_source == "hook"


async def test_a_tool_failure_ran_and_says_so() -> None:
    ex, recorder = _traced()
    result = await ex.execute("fail", {"text": "x"})
    assert result.error is not None and result.error.code == ErrorCode.TOOL_FAILURE
    _, trace = recorder.only()
    assert trace.decision is Decision.ALLOW and trace.run_ms is not None


async def test_the_wait_for_a_slot_is_in_the_admission_time() -> None:
    release = asyncio.Event()
    started = asyncio.Event()

    async def hold(args: Any, ctx: Any) -> str:
        started.set()
        await release.wait()
        return "held"

    scheduler = ConcurrencyScheduler(SchedulerLimits(global_limit=1))
    ex = executor(tool("hold", hold, parallelism="shared"), echo(parallelism="shared"),
                  scheduler=scheduler)  # fmt: skip
    recorder = Recorder()
    ex.set_tracer(recorder)
    first = asyncio.create_task(ex.execute("hold", {"text": "a"}))
    await started.wait()
    second = asyncio.create_task(ex.execute("echo", {"text": "b"}))
    await _until_queued(scheduler)
    queued_at = time.perf_counter()
    await asyncio.sleep(0)
    released_at = time.perf_counter()
    release.set()
    results = await asyncio.gather(first, second)
    assert all(r.ok for r in results)
    traces = {result.meta.tool_name: trace for _, result, trace in recorder.ended if result}
    wait = traces["echo"].admission_wait_ms
    assert wait is not None and wait >= (released_at - queued_at) * 1000.0
    run = traces["hold"].run_ms
    assert run is not None and run >= (released_at - queued_at) * 1000.0
    assert_idle(ex)


async def test_a_refusal_at_admission_measures_the_wait_until_refused() -> None:
    release = asyncio.Event()
    started = asyncio.Event()

    async def hold(args: Any, ctx: Any) -> str:
        started.set()
        await release.wait()
        return "held"

    scheduler = ConcurrencyScheduler(SchedulerLimits(global_limit=1, max_queue=1))
    ex = executor(tool("hold", hold, parallelism="shared"), echo(parallelism="shared"),
                  scheduler=scheduler)  # fmt: skip
    recorder = Recorder()
    ex.set_tracer(recorder)
    first = asyncio.create_task(ex.execute("hold", {"text": "a"}))
    await started.wait()
    queued = asyncio.create_task(ex.execute("hold", {"text": "b"}))
    await _until_queued(scheduler)
    refused = await ex.execute("echo", {"text": "c"})  # the queue is full
    assert refused.error is not None and refused.error.code == ErrorCode.RESOURCE_EXHAUSTED
    _, result, trace = recorder.ended[0]
    assert result is refused
    assert trace.admission_wait_ms is not None and trace.run_ms is None
    release.set()
    await asyncio.gather(first, queued)
    assert len(recorder.ended) == 3


async def test_a_caller_cancelled_mid_run_ends_its_trace_with_aborted() -> None:
    started = asyncio.Event()

    async def forever(args: Any, ctx: Any) -> str:
        started.set()
        await asyncio.Event().wait()
        return "never"

    ex, recorder = _traced()
    ex.registry.register(tool("forever", forever))
    task = asyncio.create_task(ex.execute("forever", {"text": "x"}))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    result, trace = recorder.only()
    assert result.error is not None and result.error.code == ErrorCode.ABORTED
    assert trace.run_began is not None and trace.run_ended is None
    assert trace.run_ms is not None  # up to the end of the call
    assert_idle(ex)


async def test_refuse_and_batches_are_traced_once_per_call() -> None:
    ex, recorder = _traced()
    refused = ex.refuse("echo", ErrorCode.INVALID_ARGS, "bad JSON", call_id="r1")
    assert recorder.ended[-1][1] is refused
    calls = [ToolCall(f"c{i}", "echo", {"text": str(i)}) for i in range(5)]
    results = await ex.execute_parallel(calls)
    assert [r.meta.call_id for r in results] == [f"c{i}" for i in range(5)]
    assert len(recorder.started) == len(recorder.ended) == 6
    ended = {result.meta.call_id for _, result, _ in recorder.ended if result is not None}
    assert ended == {"r1", "c0", "c1", "c2", "c3", "c4"}


async def test_a_tracer_that_raises_changes_nothing(caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        def call_started(self, name: str, ctx: ExecutionContext) -> Any:
            raise RuntimeError("start")

        def call_ended(self, token: Any, result: ToolResult | None, trace: CallTrace) -> None:
            raise RuntimeError("end")

    ex, _ = _traced()
    ex.set_tracer(Broken())
    with caplog.at_level(logging.ERROR, logger="fastgate.pipeline.executor"):
        result = await ex.execute("echo", {"text": "hi"})
    assert result.ok and result.content == "hi"
    assert sum("tracer" in record.getMessage() for record in caplog.records) == 2
    assert_idle(ex)


async def test_without_a_tracer_nothing_is_traced() -> None:
    ex, recorder = _traced()
    assert ex.set_tracer(None) is recorder
    assert ex.tracer is None
    result = await ex.execute("echo", {"text": "hi"})
    assert result.ok
    assert recorder.started == [] and recorder.ended == []
