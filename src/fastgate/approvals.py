"""Approvals: what the executor asks a human (or a policy) when a decision is ASK (SPEC §7)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Literal, final

import msgspec

ApprovalScope = Literal["once", "session", "project"]


class ApprovalRequest(msgspec.Struct, frozen=True):
    """What the approver is shown. ``signature`` identifies the permission being granted."""

    tool_name: str
    args: Any
    signature: str
    reason: str | None
    source: str
    session_id: str | None = None
    execution_id: str | None = None


class ApprovalResponse(msgspec.Struct, frozen=True):
    """``scope``: ``"once"`` (this call), ``"session"`` (this store, in memory) or ``"project"``
    (an allow rule appended to ``<workspace>/.fastgate/settings.local.json``)."""

    approved: bool
    scope: ApprovalScope = "once"
    feedback: str | None = None

    def __post_init__(self) -> None:
        if self.scope not in ("once", "session", "project"):
            raise ValueError(f"scope: expected 'once', 'session' or 'project', got {self.scope!r}")


@final
class ApprovalStore:
    """Session approvals by permission signature, and the one-prompt-at-a-time lock.

    Share one store between the executors of a session so an approval given to one agent holds
    for its sub-agents too. Session approvals never cover DENY rules or sensitive paths.
    """

    __slots__ = ("_approved", "_guard", "_prompt_lock")

    def __init__(self) -> None:
        self._approved: set[str] = set()
        self._guard = threading.Lock()
        self._prompt_lock: asyncio.Lock | None = None

    def is_approved(self, signature: str) -> bool:
        return signature in self._approved

    def approve(self, signature: str) -> None:
        with self._guard:
            self._approved.add(signature)

    def revoke(self, signature: str) -> None:
        with self._guard:
            self._approved.discard(signature)

    def clear(self) -> None:
        with self._guard:
            self._approved.clear()

    def __len__(self) -> int:
        return len(self._approved)

    @property
    def prompt_lock(self) -> asyncio.Lock:
        """Held while one approval prompt is open: requests are serialized per store."""
        if self._prompt_lock is None:
            self._prompt_lock = asyncio.Lock()
        return self._prompt_lock
