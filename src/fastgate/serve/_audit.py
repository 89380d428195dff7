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

No line carries argument text: the arguments appear only as their digest. A reason is written
with what quotes the arguments withheld (``withhold_arguments``): the permission resolver quotes
them in backticks ("rule Bash(curl:*) denies `curl ...`") and names some paths bare ("touches
sensitive file ..."), and a hook's reason may say anything.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from typing import Any, NamedTuple, cast

import msgspec

from fastgate.model import ToolResult
from fastgate.permissions import AuditEvent, JsonlAuditSink, NetworkAuditEvent

_PENDING_LIMIT = 65_536  # calls in flight whose caller the audit remembers
WITHHELD = "[…]"  # in place of what a reason quoted of the arguments
_MAX_LEAVES = 10_000  # of the arguments' strings looked through for a reason's words
_WORD_EDGES = "()[]{}<>,;:.!?'\"`"
_SHORTEST_WORD = 3  # a shorter word of a reason is kept, found in the arguments or not
_WORD = re.compile(r"\S+")
_SEPARATOR = "\x00"  # between the arguments' strings when they are searched as one
_SCALARS = frozenset({int, float, bool, type(None)})  # JSON's leaves that are not text


def withhold_arguments(reason: str, arguments: Any = None) -> str:
    """``reason`` without argument text: everything from its first backtick to its last (the
    resolver's quotes, however many, whatever they hold), and each word found in one of the
    strings of ``arguments`` (a path the reason names bare, what a hook quotes)."""
    first = reason.find("`")
    if first >= 0:
        last = reason.rfind("`")
        tail = reason[last + 1 :] if last > first else ""  # a lone backtick: the rest goes
        reason = f"{reason[:first]}{WITHHELD}{tail}"
    strings = _strings_in(arguments)
    if not strings:
        return reason
    # One search of all the strings at once per word; most reasons name none of them, and are
    # then returned as they are, without a replacement per word.
    haystack = _SEPARATOR.join(strings)
    if not any(_found(word, strings, haystack) for word in _WORD.findall(reason)):
        return reason
    return _WORD.sub(lambda word: _withheld_word(word.group(), strings, haystack), reason)


def _found(word: str, strings: list[str], haystack: str) -> bool:
    core = word.strip(_WORD_EDGES)
    if len(core) < _SHORTEST_WORD or core == WITHHELD:
        return False
    if _SEPARATOR in core:  # it could span two strings of the haystack: each on its own
        return any(core in s for s in strings)
    return core in haystack


def _withheld_word(word: str, strings: list[str], haystack: str) -> str:
    if not _found(word, strings, haystack):
        return word
    return word.replace(word.strip(_WORD_EDGES), WITHHELD)


def _strings_in(value: Any) -> list[str]:
    """The strings among ``value``'s values (not its keys: the schema's names), the first
    ``_MAX_LEAVES``."""
    found: list[str] = []
    pending = [value]
    while pending and len(found) < _MAX_LEAVES:
        item = pending.pop()
        kind = type(item)
        if isinstance(item, str):
            found.append(item)
        elif kind is dict:  # the usual JSON object, without the Mapping check
            pending.extend(item.values())
        elif isinstance(item, (list, tuple)):
            pending.extend(item)
        elif kind not in _SCALARS and isinstance(item, Mapping):
            pending.extend(item.values())
    return found


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
        # Execution id -> the call the gateway started, until its result line.
        self._calls: dict[str, _Call] = {}

    def begin(
        self,
        execution_id: str,
        principal: str,
        arguments_sha256: str,
        arguments: Any = None,
        session: str | None = None,
    ) -> None:
        """A call the gateway starts: its ``arguments`` are kept only to withhold them from its
        reasons and from those of the calls its program makes (same ``session``), never
        written."""
        if len(self._calls) >= _PENDING_LIMIT:  # calls that never ended (a cancelled task)
            self._calls.pop(next(iter(self._calls)))
        self._calls[execution_id] = _Call(principal, arguments_sha256, arguments, session)

    def record(self, event: AuditEvent) -> None:
        """A decision of the pipeline (the ``AuditSink`` protocol)."""
        principal, digest = self._caller(event.execution_id, event.session_id)
        reason = self._withheld(event.reason, event.execution_id, event.session_id)
        line = DecisionLine(
            time=event.time,
            event="decision",
            principal=principal,
            session=event.session_id,
            tool=event.tool_name,
            arguments_sha256=digest,
            decision=str(event.decision),
            source=str(event.source),
            reason=reason,
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
            reason=self._withheld(event.reason, event.execution_id, event.session_id),
            execution_id=event.execution_id,
        )
        self._write(line)

    def result(
        self, result: ToolResult, reason: str | None = None, execution_id: str | None = None
    ) -> None:
        """The result line of a call. ``execution_id``: the id the call was begun under, when
        the result carries another (a repeat the journal answered carries the first call's)."""
        meta = result.meta
        begun = execution_id or meta.execution_id
        error = result.error
        if reason is None and error is not None:
            found = error.details.get("reason")
            reason = found if isinstance(found, str) else None
        if reason is not None:
            reason = self._withheld(reason, begun, meta.session_id)
        principal, digest = self._caller(begun, meta.session_id)
        self._calls.pop(begun, None)
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
        principal, digest = self._caller(execution_id, session)
        self._calls.pop(execution_id, None)
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
            return known.principal, known.arguments_sha256
        return _principal(session), None  # a call from code: its session names the caller

    def _withheld(self, reason: str, execution_id: str, session: str | None) -> str:
        known = self._calls.get(execution_id)
        if known is not None:
            return withhold_arguments(reason, known.arguments)
        # A call from code: its arguments come from its program, the arguments of a call of
        # the same session the gateway started.
        for call in self._calls.values() if session is not None else ():
            if call.session == session and call.arguments is not None:
                reason = withhold_arguments(reason, call.arguments)
        return withhold_arguments(reason)

    def _write(self, line: Any) -> None:
        # The sink's writer encodes whatever struct it is given: the gateway's lines share it.
        self._sink.record(cast(AuditEvent, line))


class _Call(NamedTuple):
    principal: str
    arguments_sha256: str
    arguments: Any
    session: str | None


def _principal(session: str | None) -> str | None:
    return None if session is None else session.split("/", 1)[0]
