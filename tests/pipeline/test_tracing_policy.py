"""What a tracer hears of the policy stages (``CallTrace.rule``, ``hooks_ran``,
``hook_decision``, ``guard_reason``, ``approval``): the decision trail of ``fastgate call``."""

from __future__ import annotations

from typing import Any

from fastgate import (
    ApprovalResponse,
    ExecutionContext,
    Hooks,
    PermissionConfig,
    PermissionMode,
    PreToolUseResult,
    ToolKind,
)
from fastgate.pipeline.tracing import CallTrace
from tests.pipeline_kit import COMMAND, executor, tool


class Recorder:
    def __init__(self) -> None:
        self.traces: list[CallTrace] = []

    def call_started(self, name: str, ctx: Any) -> None:
        return None

    def call_ended(self, token: Any, result: Any, trace: CallTrace) -> None:
        self.traces.append(trace)


def traced(**options: Any) -> tuple[Any, Recorder]:
    shell = tool("sh", lambda args, ctx: f"ran {args['command']}", COMMAND, kind=ToolKind.EXECUTE)
    ex = executor(shell, **options)
    recorder = Recorder()
    ex.set_tracer(recorder)
    return ex, recorder


async def test_the_matched_rule_and_the_timings_are_in_the_trace() -> None:
    ex, recorder = traced(permissions=PermissionConfig(allow=("sh(make test)",)))
    assert (await ex.execute("sh", {"command": "make test"})).ok
    (trace,) = recorder.traces
    assert trace.rule is not None and trace.rule.matched_rule == "sh(make test)"
    assert str(trace.rule.source) == "rule" and str(trace.decision) == "allow"
    assert trace.hooks_ran is False and trace.guard_reason is None and trace.approval is None
    assert trace.admission_wait_ms is not None and trace.run_ms is not None


async def test_a_deny_rule_is_in_the_trace_and_nothing_after_it() -> None:
    ex, recorder = traced(permissions=PermissionConfig(deny=("sh(rm:*)",)))
    await ex.execute("sh", {"command": "rm -rf /"})
    (trace,) = recorder.traces
    assert trace.rule is not None and trace.rule.matched_rule == "sh(rm:*)"
    assert str(trace.decision) == "deny"
    assert trace.admission_wait_ms is None and trace.run_ms is None


async def test_the_approvers_answer_or_the_refusal_is_in_the_trace() -> None:
    ex, recorder = traced()

    async def approver(request: Any) -> ApprovalResponse:
        return ApprovalResponse(True, scope="session")

    await ex.execute("sh", {"command": "make"}, ExecutionContext(approver=approver))
    await ex.execute("sh", {"command": "make"})  # approved for the session now
    refused, refused_recorder = traced()
    await refused.execute("sh", {"command": "make"})  # no approver
    first, second = recorder.traces
    assert isinstance(first.approval, ApprovalResponse) and first.approval.scope == "session"
    assert str(first.rule.source if first.rule else None) == "mode"
    assert second.approval is None and str(second.rule.source if second.rule else None) == "session"
    (no_answer,) = refused_recorder.traces
    assert no_answer.approval.details == {"reason": "no_approver"}


async def test_sensitive_paths_hooks_and_guards_are_in_the_trace() -> None:
    hooks = Hooks()
    hooks.add_pre_tool_use(lambda event: PreToolUseResult(decision="deny", reason="no make"))
    ex, recorder = traced(hooks=hooks, mode=PermissionMode.YOLO)
    await ex.execute("sh", {"command": "cat .env"})
    (trace,) = recorder.traces
    assert trace.rule is not None and trace.rule.sensitive and str(trace.rule.source) == "sensitive"
    assert trace.hooks_ran and str(trace.hook_decision) == "deny" and trace.hook_reason == "no make"
    guarded, guard_recorder = traced(
        mode=PermissionMode.YOLO, guards=[lambda view: "owner says no"]
    )
    await guarded.execute("sh", {"command": "ls"})
    (guard_trace,) = guard_recorder.traces
    assert guard_trace.guard_reason == "owner says no" and str(guard_trace.decision) == "deny"
