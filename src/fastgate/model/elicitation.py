"""Elicitation: what an MCP server asks the user during a call, and the answer (SPEC §14).

``ExecutionContext.elicitor`` (an async or a plain function of the ``ElicitationRequest``) answers
with an ``ElicitationResponse``. The answer goes to the server that asked, never to the model.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

ElicitationMode = Literal["form", "url"]
ElicitationAction = Literal["accept", "decline", "cancel"]


class ElicitationRequest(msgspec.Struct, frozen=True):
    """What the elicitor is shown. ``mode="form"``: answer ``requested_schema`` (a JSON Schema
    object of primitive fields); ``mode="url"``: ask consent to open ``url`` (fastgate never
    opens it). ``tool_name`` is the tool as registered (``mcp__<server>__<tool>``)."""

    server: str
    tool_name: str
    message: str
    requested_schema: dict[str, Any] | None = None
    url: str | None = None
    mode: ElicitationMode = "form"
    session_id: str | None = None
    execution_id: str | None = None

    def __post_init__(self) -> None:
        if self.mode not in ("form", "url"):
            raise ValueError(f"mode: expected 'form' or 'url', got {self.mode!r}")


class ElicitationResponse(msgspec.Struct, frozen=True):
    """What an elicitor answers. ``accept`` with ``content`` (the form's fields; none for URL
    mode), ``decline`` (the user said no) or ``cancel`` (dismissed without a choice)."""

    action: ElicitationAction
    content: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.action not in ("accept", "decline", "cancel"):
            raise ValueError(
                f"action: expected 'accept', 'decline' or 'cancel', got {self.action!r}"
            )
