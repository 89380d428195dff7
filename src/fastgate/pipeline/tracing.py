"""Call tracing: what a tracer (``fastgate.telemetry``, ``fastgate call``, or a server's own) sees
of each call.

``executor.set_tracer(tracer)`` installs one tracer on an executor. The executor then calls
``tracer.call_started(name, ctx)`` when a call enters ``execute`` (or ``refuse``), in the
caller's task, and ``tracer.call_ended(token, result, trace)`` when it leaves, whatever the
outcome: ``token`` is what ``call_started`` returned, ``result`` the final result (``None`` only
when ``execute`` raised something other than cancellation, a caller's programming error) and
``trace`` the ``CallTrace``: each stage the call went through, as the pipeline passed it, and
what the policy stages said. A call cancelled by its caller ends with its ``ABORTED`` result
before the cancellation propagates. A tracer that raises is logged and changes nothing.

Without a tracer the executor does none of this work: no clock reads, no trace object.
"""

from __future__ import annotations

import time
from typing import Any, Final, Protocol

from fastgate.model.context import ExecutionContext
from fastgate.model.decision import Decision, DecisionSource
from fastgate.model.results import ToolResult
from fastgate.permissions.resolver import RuleDecision

#: The stages a call goes through, in the order of ``ToolExecutor._pipeline`` (SPEC §4; "record"
#: is the durable tool-use record that ends admission, "observers" the file-change observers and
#: AutoVerify).
STAGES: Final = (
    "identity",
    "lookup",
    "validation",
    "gate",
    "worktree",
    "rules",
    "hooks",
    "merge",
    "guards",
    "approval",
    "admission",
    "record",
    "invocation",
    "post_hooks",
    "observers",
    "finalize",
)
#: The outcome of a stage the call went on from.
PASSED: Final = "passed"
#: The outcome of the last stage of a call whose ``execute`` raised (a caller's programming error).
RAISED: Final = "raised"

_clock: Final = time.perf_counter


class StageRecord:
    """One stage of a traced call: its ``name`` (one of ``STAGES``), when it ``began`` and
    ``ended`` (``time.perf_counter()`` seconds), and its ``outcome``: ``"passed"`` when the call
    went on to the next stage; for the stage the call ended in, the call's own outcome: ``"ok"``,
    the result's ``ErrorCode``, or ``"raised"``. ``None`` while the stage runs."""

    __slots__ = ("began", "ended", "name", "outcome")

    def __init__(self, name: str, began: float) -> None:
        self.name = name
        self.began = began
        self.ended: float | None = None
        self.outcome: str | None = None

    @property
    def ms(self) -> float | None:
        """How long the call spent in this stage (``None`` while it is still there)."""
        return None if self.ended is None else (self.ended - self.began) * 1000.0

    def __repr__(self) -> str:
        return f"StageRecord({self.name!r}, {self.outcome!r}, ms={self.ms})"


class CallTrace:
    """One traced call, as the pipeline passed it.

    ``stages``: a ``StageRecord`` per stage the call entered, in order, starting with
    ``identity``. A stage with nothing to do for the call (no hooks registered, no approval
    needed) is still entered, so a call that ran to the end has one record per name of
    ``STAGES``; a call that ended early stops at the stage that ended it, whose outcome is the
    result's error code. Arguments a PreToolUse hook rewrote are checked again within ``hooks``
    (a refusal of the rewritten call ends there); a body that failed ends at ``invocation``, or at
    ``post_hooks`` when PostToolUseFailure hooks ran; an output that does not match its schema
    ends at ``post_hooks``.

    What the policy stages said, for a debugger (``fastgate call``): ``rule``, the rule stage's
    ``RuleDecision`` (matched rule, source, reason, sensitive; after a hook rewrote the arguments,
    the stricter of the two); ``hooks_ran`` with the PreToolUse hooks' ``hook_decision`` and
    ``hook_reason``; ``merged``, stage 8's ``(decision, source, reason)``; ``guard_reason`` when a
    guard refused; ``approval``, the approver's ``ApprovalResponse`` or why no answer counted (a
    ``Refusal`` with ``code`` and ``message``). Each stays ``None`` (``False``) where the call did
    not get that far. ``decision`` and ``source`` are the verdict the call got in the end and
    where it came from: the merged decision, ``DENY`` from a guard, the approver's ALLOW or DENY;
    ``ASK`` when an approval was needed and none was given (no approver, an approver error, a
    cancellation); ``None`` when it was refused before a decision was made.
    """

    __slots__ = (
        "approval",
        "decision",
        "ended",
        "guard_reason",
        "hook_decision",
        "hook_reason",
        "hooks_ran",
        "merged",
        "rule",
        "source",
        "stages",
    )

    def __init__(self) -> None:
        self.stages: list[StageRecord] = [StageRecord(STAGES[0], _clock())]
        self.decision: Decision | None = None
        self.source: DecisionSource | None = None
        self.rule: RuleDecision | None = None
        self.hooks_ran = False
        self.hook_decision: Decision | None = None
        self.hook_reason: str | None = None
        self.merged: tuple[Decision, DecisionSource, str] | None = None
        self.guard_reason: str | None = None
        self.approval: Any = None
        self.ended: float | None = None  # the call left the pipeline

    # -- what the executor calls -----------------------------------------------------------------

    def enter(self, name: str) -> None:
        """The call has passed the stage it was in and enters ``name``."""
        now = _clock()
        last = self.stages[-1]
        last.ended, last.outcome = now, PASSED
        self.stages.append(StageRecord(name, now))

    def settle(self, result: ToolResult | None) -> None:
        """The call's result is made (stage 15): the stage it is in ends with the result's
        outcome. Once only: later calls change nothing."""
        last = self.stages[-1]
        if last.outcome is not None:
            return
        last.ended = _clock()
        if result is None:
            last.outcome = RAISED
        elif result.error is None:
            last.outcome = "ok"
        else:
            last.outcome = result.error.code

    # -- for tracers ------------------------------------------------------------------------------

    @property
    def last(self) -> StageRecord:
        """The stage the call ended in (or is in now)."""
        return self.stages[-1]

    def stage(self, name: str) -> StageRecord | None:
        """The record of stage ``name``, ``None`` when the call never entered it."""
        for record in self.stages:
            if record.name == name:
                return record
        return None

    @property
    def admission_wait_ms(self) -> float | None:
        """Time spent waiting for the slot and the file locks, admitted or refused (None when
        the call never asked for a slot)."""
        return self._ms("admission")

    @property
    def run_ms(self) -> float | None:
        """Time the body ran, retries and their backoff included (None when it never started)."""
        return self._ms("invocation")

    @property
    def admission_began(self) -> float | None:
        record = self.stage("admission")
        return None if record is None else record.began

    @property
    def admitted(self) -> float | None:
        """When the call held its slot and file locks (None: it never did)."""
        return self._passed("admission")

    @property
    def run_began(self) -> float | None:
        record = self.stage("invocation")
        return None if record is None else record.began

    @property
    def run_ended(self) -> float | None:
        """When the body (every attempt) had settled and the call went on (None: it did not)."""
        return self._passed("invocation")

    def _ms(self, name: str) -> float | None:
        record = self.stage(name)
        if record is None:
            return None
        end = record.ended if record.ended is not None else self.ended
        return None if end is None else (end - record.began) * 1000.0

    def _passed(self, name: str) -> float | None:
        record = self.stage(name)
        return None if record is None or record.outcome != PASSED else record.ended


class CallTracer(Protocol):
    """Told of every call of the executor it is installed on (see the module docstring)."""

    def call_started(self, name: str, ctx: ExecutionContext) -> Any: ...

    def call_ended(self, token: Any, result: ToolResult | None, trace: CallTrace) -> None: ...
