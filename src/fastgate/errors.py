"""Exceptions raised by fastgate's concurrency primitives (and, later, by schema compilation)."""

from __future__ import annotations

import asyncio
from typing import Final

USER_CODE_ERRORS: Final = (Exception, asyncio.CancelledError)
"""What a synchronous callback of the user's (an observer, a classifier, ``paths``, a renderer)
may raise as an error of its own: a ``CancelledError`` raised there is never a cancellation of
the caller's task (those arrive only where it awaits), so it is the callback's failure."""


class FastgateError(Exception):
    """Base class of every exception fastgate raises on purpose."""


class AdmissionError(FastgateError):
    """A request for a slot, a gate passage or a lock was refused."""


class ResourceExhausted(AdmissionError):
    """The scheduler's queue was full, or the request waited longer than ``queue_timeout``.

    ``reason`` is ``"queue_full"`` or ``"queue_timeout"``; ``retry_after`` is a hint for the caller
    (the executor turns it into "retry next turn").
    """

    def __init__(self, message: str, *, reason: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.retry_after = retry_after


class SchedulerClosed(AdmissionError):
    """The scheduler was closed while the request was queued, or before it was made."""


class OwnerCancelled(SchedulerClosed):
    """``scheduler.cancel_owner(owner)`` withdrew this queued request (its owner was disposed)."""


class GateClosed(AdmissionError):
    """The executor's gate was closed while the entrant was queued, or before it arrived."""


class SchemaError(FastgateError, ValueError):
    """A schema (DSL node or raw JSON Schema) cannot be compiled.

    ``pointer`` is the JSON pointer of the offending schema location (``"#/properties/x"``),
    ``keyword`` the keyword at fault (``None`` when the location as a whole is wrong) and
    ``reason`` what is wrong with it.
    """

    def __init__(self, reason: str, *, pointer: str = "#", keyword: str | None = None) -> None:
        where = f"{keyword!r} at {pointer}" if keyword else pointer
        super().__init__(f"{reason} ({where})")
        self.reason = reason
        self.pointer = pointer
        self.keyword = keyword


class FastgateConfigWarning(UserWarning):
    """A settings or MCP config file holds something fastgate reads but does not act on.

    Issued with ``warnings.warn`` by the loaders (an unsupported hook event or hook type, a field
    another MCP client adds, a rule that can never match) and listed by their ``warnings()``;
    the command line prints them on stderr. A warning never means a rule was loosened.
    """
