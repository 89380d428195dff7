"""Call tracing: what a tracer (``fastgate.telemetry``, or a server's own) sees of each call.

``executor.set_tracer(tracer)`` installs one tracer on an executor. The executor then calls
``tracer.call_started(name, ctx)`` when a call enters ``execute`` (or ``refuse``), in the
caller's task, and ``tracer.call_ended(token, result, trace)`` when it leaves, whatever the
outcome: ``token`` is what ``call_started`` returned, ``result`` the final result (``None`` only
when ``execute`` raised something other than cancellation, a caller's programming error) and
``trace`` the timings and decision the result does not carry. A call cancelled by its caller
ends with its ``ABORTED`` result before the cancellation propagates. A tracer that raises is
logged and changes nothing.

Without a tracer the executor does none of this work: no clock reads, no trace object.
"""

from __future__ import annotations

from typing import Any, Protocol

from fastgate.model.context import ExecutionContext
from fastgate.model.decision import Decision
from fastgate.model.results import ToolResult
from fastgate.permissions.resolver import RuleDecision


class CallTrace:
    """Timestamps (``time.perf_counter()`` seconds) and the decision of one traced call.

    A stage the call never reached leaves its timestamps ``None``. ``decision`` is the verdict
    the call got: the merged rule/hook decision (stage 8), ``DENY`` when a guard refused it, the
    approver's ALLOW or DENY once asked; ``ASK`` when an approval was needed and none was given
    (no approver, an approver error, a cancellation); ``None`` when it was refused before a
    decision was made (unknown tool, invalid arguments, worktree violation).

    The policy's own words, for a debugger (``fastgate call``): ``rule``, the rule stage's
    ``RuleDecision`` (matched rule, source, reason, sensitive; after a hook rewrote the arguments,
    the stricter of the two); ``hooks_ran`` with the PreToolUse hooks' ``hook_decision`` and
    ``hook_reason``; ``guard_reason`` when a guard refused; ``approval``, the approver's
    ``ApprovalResponse`` or why no answer counted (a ``Refusal`` with ``code`` and ``message``).
    Each stays ``None`` (``False``) where the call did not get that far.
    """

    __slots__ = (
        "admission_began",
        "admitted",
        "approval",
        "decision",
        "ended",
        "guard_reason",
        "hook_decision",
        "hook_reason",
        "hooks_ran",
        "rule",
        "run_began",
        "run_ended",
    )

    def __init__(self) -> None:
        self.decision: Decision | None = None
        self.rule: RuleDecision | None = None
        self.hooks_ran = False
        self.hook_decision: Decision | None = None
        self.hook_reason: str | None = None
        self.guard_reason: str | None = None
        self.approval: Any = None
        self.admission_began: float | None = None  # asked for the scheduler slot
        self.admitted: float | None = None  # holds its slot and file locks
        self.run_began: float | None = None  # the body's first attempt is about to start
        self.run_ended: float | None = None  # the body (every attempt) has settled
        self.ended: float | None = None  # the call left the pipeline

    def policy(
        self,
        rule: RuleDecision,
        hooks_ran: bool,
        hook_decision: Decision | None,
        hook_reason: str | None,
    ) -> None:
        """What the rules and the hooks said (stage 8)."""
        self.rule = rule
        self.hooks_ran = hooks_ran
        self.hook_decision, self.hook_reason = hook_decision, hook_reason

    @property
    def admission_wait_ms(self) -> float | None:
        """Time spent waiting for the slot and the file locks, admitted or refused (None when
        the call never asked for a slot)."""
        if self.admission_began is None:
            return None
        end = self.admitted if self.admitted is not None else self.ended
        return None if end is None else (end - self.admission_began) * 1000.0

    @property
    def run_ms(self) -> float | None:
        """Time the body ran, retries and their backoff included (None when it never started)."""
        if self.run_began is None:
            return None
        end = self.run_ended if self.run_ended is not None else self.ended
        return None if end is None else (end - self.run_began) * 1000.0


class CallTracer(Protocol):
    """Told of every call of the executor it is installed on (see the module docstring)."""

    def call_started(self, name: str, ctx: ExecutionContext) -> Any: ...

    def call_ended(self, token: Any, result: ToolResult | None, trace: CallTrace) -> None: ...
