"""What an approver is shown and answers (SPEC §7): ``ApprovalRequest``, ``ApprovalResponse``."""

from __future__ import annotations

from typing import Any, Literal

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
    """What an approver (``ExecutionContext.approver``: an async or a plain function of the
    ``ApprovalRequest``) answers. ``scope``: ``"once"`` (this call), ``"session"`` (this call's
    session, in the store's memory) or ``"project"`` (an allow rule matching exactly this call,
    appended to ``<workspace>/.fastgate/settings.local.json``; kept for the session instead
    when no rule can name only this call)."""

    approved: bool
    scope: ApprovalScope = "once"
    feedback: str | None = None

    def __post_init__(self) -> None:
        if self.scope not in ("once", "session", "project"):
            raise ValueError(f"scope: expected 'once', 'session' or 'project', got {self.scope!r}")
