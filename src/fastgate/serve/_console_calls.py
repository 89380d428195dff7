"""What the console remembers of recent calls: a tracer on every executor the gateway serves
keeps each call's ``CallTrace`` (the stages it passed, what the policy stages said) with the
head of its result, for the recent-decisions table and the per-call page (the decision trail
of ``fastgate call``, timings, the result's head).

Bounded: the last ``limit`` calls; the trail is put into words only when a page shows it.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from fastgate.model import ExecutionContext, ToolResult, json_preview
from fastgate.permissions import ApprovalResponse, settings_path
from fastgate.pipeline import CallTrace, CallTracer, ToolExecutor

RESULT_HEAD: Final = 2_000  # characters of a result kept
ARGUMENTS_LIMIT: Final = 16_384  # characters of a call's arguments kept
_WAITING_LIMIT: Final = 65_536  # calls in flight whose arguments are kept
UNKNOWN: Final = object()  # arguments of a call the gateway did not start (a call from code)


@dataclass(frozen=True, slots=True)
class TrailStep:
    """One line of the decision trail: the stage, what happened there, how long it took."""

    stage: str
    outcome: str
    ms: float | None
    said: str
    rule_source: str | None = None


@dataclass(slots=True)
class CallRecord:
    """One call the console shows."""

    execution_id: str
    tool: str
    session: str | None
    principal: str | None
    started: float  # wall clock
    arguments: Any
    decision: str | None
    source: str | None
    outcome: str  # "ok" or the error code
    reason: str | None  # details.reason
    message: str | None
    result_head: str
    replayed: bool
    admission_wait_ms: float | None
    run_ms: float | None
    total_ms: float
    trace: CallTrace = field(repr=False)
    executor: ToolExecutor = field(repr=False)
    workspace: str | None = None
    answered_by: str | None = None

    def rule_source(self, rule: str) -> str:
        return rule_source(self.executor, rule, self.workspace)

    def trail(self) -> list[TrailStep]:
        """The stages the call passed, in order, each with what it said."""
        return [self._step(record) for record in self.trace.stages]

    def _step(self, record: Any) -> TrailStep:
        name = record.name
        outcome = str(record.outcome) if record.outcome is not None else "running"
        trace = self.trace
        said, source = "", None
        ended_here = record is trace.last and self.outcome != "ok"
        if ended_here and self.message:
            said = self.message
        if name == "rules" and trace.rule is not None:
            rule = trace.rule
            said = rule.reason if rule.matched_rule else f"no rule matched: {rule.reason}"
            if rule.matched_rule:
                source = self.rule_source(rule.matched_rule)
        elif name == "hooks" and not ended_here:
            said = (
                f"{trace.hook_decision or 'no opinion'}: {trace.hook_reason or ''}".rstrip(": ")
                if trace.hooks_ran
                else "none ran"
            )
        elif name == "merge" and trace.merged is not None:
            decision, decided_by, reason = trace.merged
            said = f"{decision} (source {decided_by}): {reason}"
        elif name == "guards" and trace.guard_reason is not None:
            said = f"deny: {trace.guard_reason}"
        elif name == "approval":
            said = self._approval_said()
        elif name == "admission" and not ended_here:
            said = "slot and file locks held"
        elif name == "invocation" and not ended_here:
            said = "the tool ran"
        return TrailStep(name, outcome, record.ms, said, source)

    def _approval_said(self) -> str:
        answer = self.trace.approval
        if answer is None:
            return "not needed"
        by = f" by {self.answered_by} at the console" if self.answered_by else ""
        if isinstance(answer, ApprovalResponse):
            if answer.approved:
                return f"allowed ({answer.scope}){by}"
            return f"rejected{by}: {answer.feedback or ''}".rstrip(": ")
        return f"no answer: {getattr(answer, 'message', answer)}"


def rule_source(executor: ToolExecutor, rule: str, workspace: str | None) -> str:
    """The settings file a rule came from, as ``fastgate call`` names it."""
    found = executor.permissions.source_of(rule)
    if found is not None:
        return found
    if workspace:  # rules approved for the project are in the project's own file
        return settings_path(workspace)
    return "given in code"


class CallRecorder:
    """The last ``limit`` calls of the executors it traces, by execution id."""

    def __init__(self, limit: int = 1_000, workspace: str | None = None) -> None:
        self.limit = limit
        self.workspace = workspace
        self._records: OrderedDict[str, CallRecord] = OrderedDict()
        self._arguments: OrderedDict[str, Any] = OrderedDict()
        self._answered_by: OrderedDict[str, str] = OrderedDict()

    def tracer(self, executor: ToolExecutor, chained: CallTracer | None) -> CallTracer:
        return _RecordingTracer(self, executor, chained)

    def begin(self, execution_id: str, canonical: bytes) -> None:
        """A call the gateway is about to run, with its arguments as canonical JSON (the
        encoding its digest was made of): what is kept of them is taken now, at most
        ``ARGUMENTS_LIMIT`` characters of it, and kept until the call ends."""
        waiting = self._arguments
        if len(waiting) >= _WAITING_LIMIT:  # calls that never ended (a cancelled task)
            waiting.popitem(last=False)
        waiting[execution_id] = _kept_arguments(canonical)

    def answered(self, execution_id: str | None, admin: str) -> None:
        """An admin answered this call's approval at the console."""
        if not execution_id:
            return
        if len(self._answered_by) >= _WAITING_LIMIT:
            self._answered_by.popitem(last=False)
        self._answered_by[execution_id] = admin

    def get(self, execution_id: str) -> CallRecord | None:
        return self._records.get(execution_id)

    def recent(
        self,
        *,
        tool: str | None = None,
        principal: str | None = None,
        outcome: str | None = None,
        limit: int = 50,
    ) -> list[CallRecord]:
        """The newest calls first, those matching every filter given."""
        out: list[CallRecord] = []
        for record in reversed(self._records.values()):
            if tool and record.tool != tool:
                continue
            if principal and record.principal != principal:
                continue
            if outcome and record.outcome != outcome:
                continue
            out.append(record)
            if len(out) >= limit:
                break
        return out

    def choices(self) -> tuple[list[str], list[str], list[str]]:
        """The tools, principals and outcomes seen, for the filters."""
        records: Iterable[CallRecord] = self._records.values()
        tools, principals, outcomes = set(), set(), set()
        for record in records:
            tools.add(record.tool)
            if record.principal:
                principals.add(record.principal)
            outcomes.add(record.outcome)
        return sorted(tools), sorted(principals), sorted(outcomes)

    def record(
        self, executor: ToolExecutor, started: float, result: ToolResult, trace: CallTrace
    ) -> None:
        meta = result.meta
        error = result.error
        reason = error.details.get("reason") if error is not None else None
        session = meta.session_id
        arguments = self._arguments.pop(meta.execution_id, UNKNOWN)
        answered_by = self._answered_by.pop(meta.execution_id, None)
        record = CallRecord(
            execution_id=meta.execution_id,
            tool=meta.tool_name,
            session=session,
            principal=None if session is None else session.split("/", 1)[0],
            started=started,
            arguments=arguments,
            decision=None if trace.decision is None else str(trace.decision),
            source=None if trace.source is None else str(trace.source),
            outcome="ok" if error is None else str(error.code),
            reason=reason if isinstance(reason, str) else None,
            message=None if error is None else error.message,
            result_head=_head(result),
            replayed=bool(meta.replayed),
            admission_wait_ms=trace.admission_wait_ms,
            run_ms=trace.run_ms,
            total_ms=meta.duration_ms,
            trace=trace,
            executor=executor,
            workspace=self.workspace,
            answered_by=answered_by,
        )
        records = self._records
        records.pop(record.execution_id, None)  # a retry of the 2026 era: the last word
        while len(records) >= self.limit:
            records.popitem(last=False)
        records[record.execution_id] = record


class _RecordingTracer:
    def __init__(
        self, recorder: CallRecorder, executor: ToolExecutor, chained: CallTracer | None
    ) -> None:
        self._recorder = recorder
        self._executor = executor
        self._chained = chained

    def call_started(self, name: str, ctx: ExecutionContext) -> Any:
        chained = self._chained
        return (time.time(), chained.call_started(name, ctx) if chained is not None else None)

    def call_ended(self, token: Any, result: ToolResult | None, trace: CallTrace) -> None:
        started, chained = token
        if self._chained is not None:
            self._chained.call_ended(chained, result, trace)
        if result is not None:
            self._recorder.record(self._executor, started, result, trace)


def _kept_arguments(canonical: bytes) -> Any:
    """The arguments (decoded again: a copy) when their JSON fits in ``ARGUMENTS_LIMIT``
    characters, else its head: never more of it read than that, whatever the call was sent."""
    head = canonical[: 4 * ARGUMENTS_LIMIT]  # at least ARGUMENTS_LIMIT characters of UTF-8
    text = head.decode("utf-8", "ignore")  # a character cut in two at the end is left out
    if len(head) == len(canonical) and len(text) <= ARGUMENTS_LIMIT:
        return msgspec.json.decode(canonical)
    return text[:ARGUMENTS_LIMIT] + f"… (cut after {ARGUMENTS_LIMIT} characters)"


def _head(result: ToolResult) -> str:
    """The head of a result's content: text as it is, anything else as pretty JSON; at most
    ``RESULT_HEAD`` characters and a note. Nothing past the head is encoded, whatever the
    content holds (a ``finalize_content`` may have replaced what the executor bounded)."""
    content = result.content
    if isinstance(content, str):
        text = content
    elif content is None:
        text = ""
    else:
        return json_preview(content, RESULT_HEAD, sort_keys=False)[0]
    if not text and result.error is not None:
        text = result.error.message
    if len(text) > RESULT_HEAD:
        return text[:RESULT_HEAD] + f"\n… ({len(text) - RESULT_HEAD} more characters)"
    return text
