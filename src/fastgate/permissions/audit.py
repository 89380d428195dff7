"""The audit trail: every permission decision with its source (SPEC §5), and every network
connection a sandboxed call was refused (SPEC §22)."""

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


class NetworkAuditEvent(msgspec.Struct, frozen=True, tag="network_refused", tag_field="event"):
    """One connection a call's sandboxed command asked for and fastgate's proxy refused (SPEC
    §22): ``host`` and ``port`` as the proxy judged them (``NetworkEvent``), ``reason`` one of
    its refusal reasons. Encoded with ``"event": "network_refused"``, so it stands out among the
    decisions of a JSON-lines trail. ``time`` is wall-clock seconds since the epoch."""

    execution_id: str
    session_id: str | None
    tool_name: str
    host: str
    port: int
    reason: str
    time: float


@runtime_checkable
class NetworkAuditSink(Protocol):
    """An ``AuditSink`` that also records network refusals: the executor calls
    ``network_refused`` when the sink has it (a sink without it keeps working, and hears only
    decisions). The same rules as ``record``: synchronous, fast, never waiting for the disk."""

    def record(self, event: AuditEvent) -> None: ...

    def network_refused(self, event: NetworkAuditEvent) -> None: ...
