"""Results of a tool call: ``ToolResult``, ``ToolError``, ``ResultMeta``, ``ErrorCode``, ``Failure``

A result is frozen. Only ``content``, ``error`` and ``meta`` ever leave the process (persisted or
sent elsewhere, msgspec-encoded); ``value``, the tool's canonical value, lives in memory only.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import msgspec

from fastgate.model.freeze import FrozenDict, freeze_loosely


class ErrorCode(StrEnum):
    """Why a call did not succeed; values are the names (``ErrorCode.TIMEOUT == "TIMEOUT"``)."""

    UNKNOWN_TOOL = "UNKNOWN_TOOL"
    INVALID_ARGS = "INVALID_ARGS"
    WORKTREE_VIOLATION = "WORKTREE_VIOLATION"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    USER_REJECTED = "USER_REJECTED"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
    ABORTED_BEFORE_DISPATCH = "ABORTED_BEFORE_DISPATCH"
    ABORTED = "ABORTED"
    TIMEOUT = "TIMEOUT"
    TOOL_ERROR = "TOOL_ERROR"
    TOOL_FAILURE = "TOOL_FAILURE"
    BLOCKED_BY_HOOK = "BLOCKED_BY_HOOK"
    OUTPUT_INVALID = "OUTPUT_INVALID"
    DISPOSED = "DISPOSED"
    PERSISTENCE_FAILED = "PERSISTENCE_FAILED"


class ToolError(msgspec.Struct, frozen=True):
    """``message`` is written for the model: it says what to change to succeed next time."""

    code: ErrorCode
    message: str
    retryable: bool = False
    retry_after: str | float | None = None
    details: dict[str, Any] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        # Frozen like the rest of the result: a caller, an observer or an adapter that changes
        # the details of its result would otherwise change the history's copy too.
        if type(self.details) is not FrozenDict:
            msgspec.structs.force_setattr(self, "details", freeze_loosely(self.details))


class ResultMeta(msgspec.Struct, frozen=True):
    execution_id: str
    call_id: str | None
    tool_name: str
    session_id: str | None
    started_at: float  # wall clock, seconds since the epoch
    completed_at: float
    duration_ms: float
    attempts: int = 0
    aborted_before_launch: bool = False
    decision_source: str | None = None
    additional_context: tuple[str, ...] = ()
    parent_execution_id: str | None = None  # the run_code call a call from code came from
    replayed: bool = False  # answered from the journal: nothing ran (SPEC §24)


class ToolResult(msgspec.Struct, frozen=True):
    """The one canonical outcome of a call. ``content`` is ``str`` or a tuple of content blocks."""

    ok: bool
    content: Any
    error: ToolError | None
    meta: ResultMeta
    value: Any = None

    def durable(self) -> DurableResult:
        """What may be persisted or sent to another process: never the canonical value."""
        return DurableResult(self.ok, self.content, self.error, self.meta)


class DurableResult(msgspec.Struct, frozen=True):
    ok: bool
    content: Any
    error: ToolError | None
    meta: ResultMeta


class Failure(msgspec.Struct, frozen=True):
    """Returned (not raised) by a tool for an expected failure: result ``TOOL_FAILURE``.

    ``code`` is the tool's own code, kept in ``error.details["code"]``. Never retried.
    """

    message: str
    code: str | None = None
    details: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        # Checked here, in the tool's own code: a malformed Failure is the tool's error
        # (TOOL_ERROR naming it), never a crash of the pipeline that reads it.
        if not isinstance(self.message, str):
            raise TypeError(f"Failure(message): expected str, got {type(self.message).__name__}")
        if self.code is not None and not isinstance(self.code, str):
            raise TypeError(f"Failure(code=): expected str or None, got {type(self.code).__name__}")
        if self.details is not None and not isinstance(self.details, dict):
            raise TypeError(
                f"Failure(details=): expected a dict or None, got {type(self.details).__name__}"
            )


class ToolFault(Exception):
    """Raised by a tool body whose failure is not the tool's own exception: a bridge that lost
    its server, a remote call that timed out, a remote service that is rate limiting. The
    result gets ``code`` (``TOOL_ERROR``, ``TIMEOUT`` or ``RESOURCE_EXHAUSTED``), the message
    as written (for the model), ``details``, ``retryable`` and ``retry_after`` (seconds, or
    words such as "retry next turn": when trying again may succeed)."""

    CODES = frozenset({ErrorCode.TOOL_ERROR, ErrorCode.TIMEOUT, ErrorCode.RESOURCE_EXHAUSTED})

    def __init__(
        self,
        message: str,
        *,
        code: ErrorCode = ErrorCode.TOOL_ERROR,
        retryable: bool = False,
        details: dict[str, Any] | None = None,
        retry_after: str | float | None = None,
    ) -> None:
        if code not in self.CODES:
            raise ValueError(
                f"ToolFault code must be TOOL_ERROR, TIMEOUT or RESOURCE_EXHAUSTED, got {code!r}"
            )
        if retry_after is not None and (
            isinstance(retry_after, bool) or not isinstance(retry_after, (str, int, float))
        ):
            raise TypeError(
                "ToolFault(retry_after=): expected seconds, words or None, "
                f"got {type(retry_after).__name__}"
            )
        super().__init__(message)
        self.message = message
        self.code = ErrorCode(code)
        self.retryable = retryable
        self.retry_after = float(retry_after) if isinstance(retry_after, int) else retry_after
        self.details = dict(details or {})
