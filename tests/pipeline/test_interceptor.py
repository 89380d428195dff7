"""The call interceptor seam (``fastgate.pipeline.interceptor``): a toy interceptor, plugged in
as code mode is, adds a tool whose body calls other tools, and judges calls at stage 2. It works
through the protocol alone: the executor knows no capability by name."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import fastgate.pipeline.executor
from fastgate import (
    ConcurrencyScheduler,
    ErrorCode,
    ExecutionContext,
    Hooks,
    PermissionConfig,
    SchedulerLimits,
    ToolKind,
    ToolResult,
    define_tool,
    schema,
)
from fastgate.pipeline import CallInterceptor, CallTrace, ToolExecutor
from fastgate.tools import ToolDefinition
from tests.pipeline_kit import assert_idle, echo, executor, tool

CALL = schema.Object({"name": schema.String(), "text": schema.String()}, required=("name", "text"))


class Delegator:
    """Adds ``delegate``, which calls another tool for the model; direct calls of ``secret``
    are refused, and so are nested calls that claim a parent which is not running."""

    def __init__(self) -> None:
        self.executor: ToolExecutor | None = None
        self.running: set[str] = set()
        self.judged: list[tuple[str, str | None]] = []
        self.closed = 0

    def attach(self, executor: ToolExecutor) -> list[ToolDefinition]:
        self.executor = executor
        delegate = define_tool(
            "delegate", "Calls a tool.", CALL, self._delegate, kind=ToolKind.READ_ONLY
        )
        return [delegate]

    async def _delegate(self, args: Any, ctx: Any) -> Any:
        assert self.executor is not None
        self.running.add(ctx.execution_id)
        try:
            nested = {"text": args["text"]}
            result = await self.executor.execute_nested(
                ctx.execution_id, args["name"], nested, ctx.context
            )
        finally:
            self.running.discard(ctx.execution_id)
        if result.error is not None:
            return f"refused: {result.error.code}"
        return result.content

    def judge(
        self, name: str, tool: ToolDefinition | None, parent: str | None, ctx: ExecutionContext
    ) -> tuple[ErrorCode, str, dict[str, Any]] | None:
        self.judged.append((name, parent))
        if parent is None and name == "secret":
            return ErrorCode.PERMISSION_DENIED, "call secret through delegate", {"reason": "toy"}
        if parent is not None and parent not in self.running:
            return ErrorCode.PERMISSION_DENIED, "no such parent", {"reason": "toy"}
        return None

    def close(self) -> None:
        self.closed += 1


def _protocol_check(interceptor: Delegator) -> CallInterceptor:
    return interceptor  # mypy: the toy is a CallInterceptor


async def test_an_interceptors_tool_calls_tools_through_the_pipeline_without_a_slot() -> None:
    # One slot in all, and an exclusive delegate: were it gated or slotted, its nested call
    # would wait behind it forever.
    toy = Delegator()
    ex = executor(
        echo(),
        tool("secret", lambda a, c: "the secret"),
        scheduler=ConcurrencyScheduler(SchedulerLimits(global_limit=1)),
        code_mode=_protocol_check(toy),
    )
    seen: list[ToolResult] = []
    ex.on_result(seen.append)
    for name in ("echo", "secret"):
        outer = await asyncio.wait_for(
            ex.execute("delegate", {"name": name, "text": "hi"}), timeout=30
        )
        assert outer.ok, outer
        nested = [r for r in seen if r.meta.parent_execution_id == outer.meta.execution_id]
        assert [r.meta.tool_name for r in nested] == [name]
        assert outer.content == ("hi" if name == "echo" else "the secret")
    assert ("secret", None) not in toy.judged  # every call judged, the nested ones with a parent
    assert [parent is not None for _, parent in toy.judged] == [False, True, False, True]
    assert_idle(ex)


async def test_nested_calls_go_through_the_policy_stages() -> None:
    toy = Delegator()
    ex = executor(echo(), permissions=PermissionConfig(deny=("echo",)), code_mode=toy)
    outer = await ex.execute("delegate", {"name": "echo", "text": "hi"})
    assert outer.ok and outer.content == "refused: PERMISSION_DENIED"
    assert_idle(ex)


async def test_the_interceptor_refuses_before_any_policy_stage() -> None:
    hooked: list[Any] = []
    audited: list[Any] = []
    hooks = Hooks()
    hooks.add_pre_tool_use(hooked.append)

    class Audit:
        def record(self, event: Any) -> None:
            audited.append(event)

    class Recorder:
        trace: CallTrace | None = None

        def call_started(self, name: str, ctx: ExecutionContext) -> None:
            return None

        def call_ended(self, token: Any, result: Any, trace: CallTrace) -> None:
            self.trace = trace

    toy = Delegator()
    ex = executor(
        tool("secret", lambda a, c: "the secret"),
        hooks=hooks,
        guards=(lambda view: hooked.append(view),),
        audit=Audit(),
        code_mode=toy,
    )
    recorder = Recorder()
    ex.set_tracer(recorder)
    result = await ex.execute("secret", {"text": "x"})
    assert result.error is not None and result.error.code == ErrorCode.PERMISSION_DENIED
    assert result.error.details == {"reason": "toy"} and result.meta.decision_source is None
    assert hooked == [] and audited == []
    assert recorder.trace is not None and recorder.trace.last.name == "lookup"
    orphan = await ex.execute_nested("not-running", "secret", {"text": "x"}, ExecutionContext())
    assert orphan.error is not None and orphan.error.details == {"reason": "toy"}
    assert orphan.meta.parent_execution_id == "not-running"
    assert hooked == [] and audited == []


def test_dispose_closes_the_interceptor_once() -> None:
    toy = Delegator()
    ex = executor(echo(), code_mode=toy)
    assert ex.registry.resolve("delegate") is not None
    ex.dispose()
    ex.dispose()
    assert toy.closed == 1


def test_a_tool_name_the_registry_has_is_refused_and_the_interceptor_closed() -> None:
    toy = Delegator()
    taken = tool("delegate", lambda a, c: "mine")
    with pytest.raises(ValueError, match="delegate"):
        executor(taken, code_mode=toy)
    assert toy.closed == 1


def test_the_executor_names_no_capability() -> None:
    # Code mode reaches the executor through the seam alone: its source names no code-mode
    # tool, module or class (the ``code_mode=`` keyword of SPEC §4 aside).
    source_file = Path(str(fastgate.pipeline.executor.__file__))
    source = source_file.with_name("executor.py").read_text()
    for name in ("run_code", "codemode", "CodeMode", "code mode", "_code_mode"):
        assert name not in source, name
