"""The audit trail: every permission decision with its source (SPEC §5)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import msgspec

from fastgate.model.decision import Decision, DecisionSource


class AuditEvent(msgspec.Struct, frozen=True):
    """One decision about one call. ``time`` is wall-clock seconds since the epoch."""

    execution_id: str
    session_id: str | None
    tool_name: str
    decision: Decision
    source: DecisionSource
    reason: str
    signature: str
    time: float


@runtime_checkable
class AuditSink(Protocol):
    """Receives every decision, synchronously. Keep ``record`` fast and non-blocking (queue the
    event if it must be written somewhere slow); an exception it raises is the caller's to
    isolate."""

    def record(self, event: AuditEvent) -> None: ...
