"""``--audit FILE``: one JSON line per decision and per result, with the caller.

``GatewayAudit`` is the executors' ``AuditSink`` (it hears every decision the pipeline makes,
as it makes it) and the gateway's record of every result. Lines are written by the writer of
``JsonlAuditSink``: appended whole, in order, fsync'd in batches, the file held by one writer.

A decision line: ``{"time", "event": "decision", "principal", "session", "tool",
"arguments_sha256", "decision", "source", "reason", "execution_id"}``; a result line:
``{"time", "event": "result", "principal", "session", "tool", "arguments_sha256", "code",
"reason", "decision_source", "replayed", "execution_id"}`` (``code`` null when ok); a line for
each network connection a sandboxed call was refused: ``{"time", "event": "network_refused",
"principal", "session", "tool", "host", "port", "reason", "execution_id"}``.
"""

from __future__ import annotations

import os
import time
from typing import Any, cast

import msgspec

from fastgate.model import ToolResult
from fastgate.permissions import AuditEvent, JsonlAuditSink, NetworkAuditEvent

_PENDING_LIMIT = 65_536  # calls in flight whose caller the audit remembers


class DecisionLine(msgspec.Struct, frozen=True, omit_defaults=False):
    time: float
    event: str
    principal: str | None
    session: str | None
    tool: str
    arguments_sha256: str | None
    decision: str
    source: str
    reason: str
    execution_id: str


class ResultLine(msgspec.Struct, frozen=True, omit_defaults=False):
    time: float
    event: str
    principal: str | None
    session: str | None
    tool: str
    arguments_sha256: str | None
    code: str | None
    reason: str | None
    decision_source: str | None
    replayed: bool
    execution_id: str


class NetworkLine(msgspec.Struct, frozen=True, omit_defaults=False):
    time: float
    event: str
    principal: str | None
    session: str | None
    tool: str
    host: str
    port: int
    reason: str
    execution_id: str


class GatewayAudit:
    """Give it to every executor the gateway serves (``ToolExecutor(..., audit=audit)``) and
    to the gateway (``Gateway(..., audit=audit)``)."""

    def __init__(self, path: str | os.PathLike[str], *, batch_interval: float = 0.05) -> None:
        self._sink = JsonlAuditSink(path, batch_interval=batch_interval)
        self.path = self._sink.path
        # Execution id -> (principal, arguments digest): the calls the gateway started.
        self._calls: dict[str, tuple[str, str]] = {}

    def begin(self, execution_id: str, principal: str, arguments_sha256: str) -> None:
        if len(self._calls) >= _PENDING_LIMIT:  # calls that never ended (a cancelled task)
            self._calls.pop(next(iter(self._calls)))
        self._calls[execution_id] = (principal, arguments_sha256)

    def record(self, event: AuditEvent) -> None:
        """A decision of the pipeline (the ``AuditSink`` protocol)."""
        principal, digest = self._caller(event.execution_id, event.session_id)
        line = DecisionLine(
            time=event.time,
            event="decision",
            principal=principal,
            session=event.session_id,
            tool=event.tool_name,
            arguments_sha256=digest,
            decision=str(event.decision),
            source=str(event.source),
            reason=event.reason,
            execution_id=event.execution_id,
        )
        self._write(line)

    def network_refused(self, event: NetworkAuditEvent) -> None:
        """A connection a sandboxed call was refused (``NetworkAuditSink``), with its caller."""
        principal, _ = self._caller(event.execution_id, event.session_id)
        line = NetworkLine(
            time=event.time,
            event="network_refused",
            principal=principal,
            session=event.session_id,
            tool=event.tool_name,
            host=event.host,
            port=event.port,
            reason=event.reason,
            execution_id=event.execution_id,
        )
        self._write(line)

    def result(
        self, result: ToolResult, reason: str | None = None, execution_id: str | None = None
    ) -> None:
        """The result line of a call. ``execution_id``: the id the call was begun under, when
        the result carries another (a repeat the journal answered carries the first call's)."""
        meta = result.meta
        known = self._calls.pop(execution_id or meta.execution_id, None)
        principal, digest = known if known is not None else (_principal(meta.session_id), None)
        error = result.error
        if reason is None and error is not None:
            found = error.details.get("reason")
            reason = found if isinstance(found, str) else None
        self._write(
            ResultLine(
                time=time.time(),
                event="result",
                principal=principal,
                session=meta.session_id,
                tool=meta.tool_name,
                arguments_sha256=digest,
                code=str(error.code) if error is not None else None,
                reason=reason,
                decision_source=meta.decision_source,
                replayed=bool(getattr(meta, "replayed", False)),
                execution_id=meta.execution_id,
            )
        )

    def cancelled(self, execution_id: str, tool: str, session: str | None) -> None:
        """A call whose client went away (or cancelled it) while it ran: ``ABORTED``."""
        known = self._calls.pop(execution_id, None)
        principal, digest = known if known is not None else (_principal(session), None)
        self._write(
            ResultLine(
                time=time.time(),
                event="result",
                principal=principal,
                session=session,
                tool=tool,
                arguments_sha256=digest,
                code="ABORTED",
                reason="cancelled_by_client",
                decision_source=None,
                replayed=False,
                execution_id=execution_id,
            )
        )

    def forget(self, execution_id: str) -> None:
        self._calls.pop(execution_id, None)

    @property
    def synced(self) -> int:
        return self._sink.synced

    def flush(self) -> None:
        self._sink.flush()

    async def aclose(self) -> None:
        await self._sink.aclose()

    def close(self) -> None:
        self._sink.close()

    def _caller(self, execution_id: str, session: str | None) -> tuple[str | None, str | None]:
        known = self._calls.get(execution_id)
        if known is not None:
            return known
        return _principal(session), None  # a call from code: its session names the caller

    def _write(self, line: Any) -> None:
        # The sink's writer encodes whatever struct it is given: the gateway's lines share it.
        self._sink.record(cast(AuditEvent, line))


def _principal(session: str | None) -> str | None:
    return None if session is None else session.split("/", 1)[0]
