"""The tracer's stage records (``CallTrace.stages``): the pipeline records each stage as it
enters it, in ``STAGES`` order and without a gap, and a call that ends early stops the list at
the stage that ended it, with its error code there."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from fastgate import (
    ApprovalResponse,
    CancelToken,
    ConcurrencyScheduler,
    ErrorCode,
    ExecutionContext,
    Failure,
    Hooks,
    PermissionConfig,
    PostToolUseResult,
    PreToolUseResult,
    SchedulerLimits,
    ToolKind,
    ToolResult,
    schema,
)
from fastgate.pipeline import STAGES, CallTrace, ToolExecutor
from fastgate.pipeline.tracing import PASSED
from fastgate.tools import Output
from tests.pipeline_kit import PATH, assert_idle, echo, executor, tool


class Recorder:
    """A tracer that keeps each call's result and trace."""

    def __init__(self) -> None:
        self.ended: list[tuple[ToolResult | None, CallTrace]] = []

    def call_started(self, name: str, ctx: ExecutionContext) -> None:
        return None

    def call_ended(self, token: Any, result: ToolResult | None, trace: CallTrace) -> None:
        self.ended.append((result, trace))

    def only(self) -> CallTrace:
        ((_, trace),) = self.ended
        return trace


def traced(*tools: Any, **options: Any) -> tuple[ToolExecutor, Recorder]:
    ex = executor(*tools, **options) if tools else executor(echo(), **options)
    recorder = Recorder()
    ex.set_tracer(recorder)
    return ex, recorder


def assert_stopped_at(trace: CallTrace, stage: str, outcome: str) -> None:
    """Every stage up to ``stage`` recorded in order, each one passed on from at the moment the
    next began, and ``stage`` the last, with ``outcome``."""
    names = [record.name for record in trace.stages]
    assert names == list(STAGES[: STAGES.index(stage) + 1])
    for record, following in zip(trace.stages, trace.stages[1:], strict=False):
        assert record.outcome == PASSED and record.ended == following.began
    last = trace.last
    assert last.outcome == outcome and last.ended is not None and last.began <= last.ended
    assert trace.ended is not None and last.ended <= trace.ended


async def test_a_call_that_runs_records_every_stage_in_order() -> None:
    ex, recorder = traced()
    result = await ex.execute("echo", {"text": "hi"})
    assert result.ok
    trace = recorder.only()
    assert_stopped_at(trace, "finalize", "ok")
    assert trace.stage("nope") is None
    invocation = trace.stage("invocation")
    assert invocation is not None and invocation.ms is not None
    assert trace.run_ms == invocation.ms and trace.run_began == invocation.began
    assert trace.admission_wait_ms == trace.stages[STAGES.index("admission")].ms
    assert_idle(ex)


def _failing(args: Any, ctx: Any) -> Failure:
    return Failure("nope")


def _raising(args: Any, ctx: Any) -> str:
    raise RuntimeError("broken")


def _hook(result: Any) -> Hooks:
    hooks = Hooks()
    hooks.add_pre_tool_use(lambda event: result)
    return hooks


def _post_hook(result: Any) -> Hooks:
    hooks = Hooks()
    hooks.add_post_tool_use(lambda event: result)
    return hooks


def _failure_hooks() -> Hooks:
    hooks = Hooks()
    hooks.add_post_tool_use_failure(lambda event: "see the runbook")
    return hooks


class _BrokenStore:
    async def record_tool_use(self, record: Any) -> None:
        raise OSError(28, "No space left on device")

    async def record_result(self, execution_id: str, result: Any) -> None:
        raise AssertionError("never reached")

    async def load(self, session_id: str) -> list[Any]:
        return []

    async def close(self) -> None:
        return None


async def _rejecting(request: Any) -> ApprovalResponse:
    return ApprovalResponse(False, feedback="no")


def _cancelled() -> CancelToken:
    token = CancelToken()
    token.cancel()
    return token


_MISTYPED = Output(schema=schema.Object({"n": schema.Integer()}, required=("n",)))

# (name, args, tools, executor options, context, stage it ends in, its code)
_ENDINGS: list[tuple[str, Any, tuple[Any, ...], dict[str, Any], Any, str, ErrorCode]] = [
    ("echo", {"text": {1}}, (), {}, None, "identity", ErrorCode.INVALID_ARGS),
    ("echo", {"text": "x"}, (), {}, ExecutionContext(cancel=_cancelled()),
     "identity", ErrorCode.ABORTED_BEFORE_DISPATCH),
    ("nope", {}, (), {}, None, "lookup", ErrorCode.UNKNOWN_TOOL),
    ("echo", {"text": 3}, (), {}, None, "validation", ErrorCode.INVALID_ARGS),
    ("echo", [1], (), {}, None, "validation", ErrorCode.INVALID_ARGS),
    ("write", {"file_path": "../out"}, (), {}, None, "worktree", ErrorCode.WORKTREE_VIOLATION),
    ("echo", {"text": "x"}, (), {"permissions": PermissionConfig(deny=("echo",))}, None,
     "merge", ErrorCode.PERMISSION_DENIED),
    ("echo", {"text": "x"}, (), {"hooks": _hook(PreToolUseResult(decision="deny"))}, None,
     "merge", ErrorCode.PERMISSION_DENIED),
    ("echo", {"text": "x"}, (), {"hooks": _hook(PreToolUseResult(updated_args={"text": 3}))},
     None, "hooks", ErrorCode.INVALID_ARGS),
    ("write", {"file_path": "in"}, (),
     {"hooks": _hook(PreToolUseResult(updated_args={"file_path": "../out"}))}, None,
     "hooks", ErrorCode.WORKTREE_VIOLATION),
    ("echo", {"text": "x"}, (), {"guards": (lambda view: "owner says no",)}, None,
     "guards", ErrorCode.PERMISSION_DENIED),
    ("write", {"file_path": "in"}, (), {}, None, "approval", ErrorCode.PERMISSION_DENIED),
    ("write", {"file_path": "in"}, (), {}, ExecutionContext(approver=_rejecting),
     "approval", ErrorCode.USER_REJECTED),
    ("echo", {"text": "x"}, (), {"store": _BrokenStore(), "require_persistence": True}, None,
     "record", ErrorCode.PERSISTENCE_FAILED),
    ("fail", {"text": "x"}, (tool("fail", _failing),), {}, None,
     "invocation", ErrorCode.TOOL_FAILURE),
    ("raise", {"text": "x"}, (tool("raise", _raising),), {}, None,
     "invocation", ErrorCode.TOOL_ERROR),
    ("raise", {"text": "x"}, (tool("raise", _raising),), {"hooks": _failure_hooks()}, None,
     "post_hooks", ErrorCode.TOOL_ERROR),
    ("typed", {"text": "x"}, (tool("typed", lambda a, c: {"n": "x"}, output=_MISTYPED),), {},
     None, "post_hooks", ErrorCode.OUTPUT_INVALID),
    ("echo", {"text": "x"}, (), {"hooks": _post_hook(PostToolUseResult(block="withheld"))},
     None, "post_hooks", ErrorCode.BLOCKED_BY_HOOK),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "args", "tools", "options", "ctx", "stage", "code"),
    _ENDINGS,
    ids=[f"{stage}-{code}-{i}" for i, (*_, stage, code) in enumerate(_ENDINGS)],
)
async def test_a_call_that_ends_early_stops_the_list_at_its_stage(
    tmp_path: Path,
    name: str,
    args: Any,
    tools: tuple[Any, ...],
    options: dict[str, Any],
    ctx: ExecutionContext | None,
    stage: str,
    code: ErrorCode,
) -> None:
    write = tool("write", lambda a, c: "written", PATH, kind=ToolKind.WRITE)
    ex, recorder = traced(echo(), write, *tools, workspace=tmp_path, **options)
    result = await ex.execute(name, args, ctx)
    assert result.error is not None and result.error.code == code, result
    assert_stopped_at(recorder.only(), stage, code)
    assert_idle(ex)


async def test_a_disposed_executor_and_refuse_end_at_identity() -> None:
    ex, recorder = traced()
    refused = ex.refuse("echo", ErrorCode.INVALID_ARGS, "bad JSON")
    ex.dispose()
    disposed = await ex.execute("echo", {"text": "x"})
    assert disposed.error is not None and disposed.error.code == ErrorCode.DISPOSED
    (_, first), (_, second) = recorder.ended
    assert_stopped_at(first, "identity", ErrorCode.INVALID_ARGS)
    assert refused.error is not None
    assert_stopped_at(second, "identity", ErrorCode.DISPOSED)


async def test_the_turn_limit_ends_at_identity() -> None:
    ex, recorder = traced()
    ctx = ExecutionContext(turn_id="t1")
    for _ in range(64):
        assert (await ex.execute("echo", {"text": "x"}, ctx)).ok
    limited = await ex.execute("echo", {"text": "x"}, ctx)
    assert limited.error is not None and limited.error.code == ErrorCode.RESOURCE_EXHAUSTED
    assert_stopped_at(recorder.ended[-1][1], "identity", ErrorCode.RESOURCE_EXHAUSTED)


async def test_a_full_queue_ends_at_admission() -> None:
    release, started = asyncio.Event(), asyncio.Event()

    async def hold(args: Any, ctx: Any) -> str:
        started.set()
        await release.wait()
        return "held"

    scheduler = ConcurrencyScheduler(SchedulerLimits(global_limit=1, max_queue=1))
    shared = {"parallelism": "shared"}
    ex, recorder = traced(tool("hold", hold, **shared), echo(**shared), scheduler=scheduler)
    first = asyncio.create_task(ex.execute("hold", {"text": "a"}))
    await started.wait()
    queued = asyncio.create_task(ex.execute("hold", {"text": "b"}))
    for _ in range(50):  # a few loop turns: the call goes through its stages to the queue
        if scheduler.stats().queued:
            break
        await asyncio.sleep(0)
    assert scheduler.stats().queued
    refused = await ex.execute("echo", {"text": "c"})
    assert refused.error is not None and refused.error.code == ErrorCode.RESOURCE_EXHAUSTED
    assert_stopped_at(recorder.ended[0][1], "admission", ErrorCode.RESOURCE_EXHAUSTED)
    release.set()
    await asyncio.gather(first, queued)
    assert_idle(ex)


async def test_a_caller_cancelled_mid_run_ends_at_invocation_with_aborted() -> None:
    started = asyncio.Event()

    async def forever(args: Any, ctx: Any) -> str:
        started.set()
        await asyncio.Event().wait()
        return "never"

    ex, recorder = traced(tool("forever", forever))
    task = asyncio.create_task(ex.execute("forever", {"text": "x"}))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    trace = recorder.only()
    assert_stopped_at(trace, "invocation", ErrorCode.ABORTED)
    assert trace.run_ended is None and trace.admitted is not None
    assert_idle(ex)


async def test_a_stage_that_waits_is_timed_by_its_record() -> None:
    # The approval stage lasts as long as the approver takes to answer.
    asking, answered = asyncio.Event(), asyncio.Event()
    seen: dict[str, float] = {}

    async def approver(request: Any) -> ApprovalResponse:
        seen["asked"] = time.perf_counter()
        asking.set()
        await answered.wait()
        seen["answering"] = time.perf_counter()
        return ApprovalResponse(True)

    write = tool("write", lambda a, c: "written", PATH, kind=ToolKind.WRITE)
    ex, recorder = traced(write)
    call = asyncio.create_task(
        ex.execute("write", {"file_path": "in"}, ExecutionContext(approver=approver))
    )
    await asking.wait()
    answered.set()
    assert (await call).ok
    approval = recorder.only().stage("approval")
    assert approval is not None and approval.ended is not None
    assert approval.began <= seen["asked"] and seen["answering"] <= approval.ended
    assert_idle(ex)


def test_a_trace_settles_once_and_says_when_execute_raised() -> None:
    trace = CallTrace()
    trace.enter("lookup")
    trace.settle(None)  # execute raised: a caller's programming error, or a bug
    trace.settle(None)  # once only
    assert [(r.name, r.outcome) for r in trace.stages] == [
        ("identity", PASSED),
        ("lookup", "raised"),
    ]
    assert trace.run_ms is None and trace.admission_wait_ms is None and trace.admitted is None
