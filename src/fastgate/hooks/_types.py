"""Hook events, hook replies and the outcomes the executor reads (SPEC §6.1, §6.2)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import msgspec
from msgspec.structs import force_setattr

from fastgate.model import Decision, ExecutionContext, ToolError, ToolResult
from fastgate.tools import ToolDefinition

UNSET: Final = msgspec.UNSET
"""``PostToolUseResult`` field default meaning "keep what the tool produced" (``msgspec.UNSET``)."""

UnsetType = msgspec.UnsetType


class PreToolUseEvent(msgspec.Struct, frozen=True):
    """Before a call runs. ``args`` are the frozen arguments (``fastgate.model.freeze`` snapshot).
    ``tool`` is the called tool's definition (the executor always sets it; its ``rule_names``
    say which Claude Code tool it stands for)."""

    tool_name: str
    args: Any
    context: ExecutionContext
    tool: ToolDefinition | None = None


class PostToolUseEvent(msgspec.Struct, frozen=True):
    """After a call succeeded. ``result`` is the result as changed by earlier PostToolUse hooks."""

    tool_name: str
    args: Any
    context: ExecutionContext
    result: ToolResult
    tool: ToolDefinition | None = None


class PostToolUseFailureEvent(msgspec.Struct, frozen=True):
    """After a call failed with an exception path (timeout, tool error, ...). ``result`` is the
    failed result as it stands, ``error`` its error (the executor sets it), before the hooks'
    additional context is added to it."""

    tool_name: str
    args: Any
    context: ExecutionContext
    error: ToolError
    tool: ToolDefinition | None = None
    result: ToolResult | None = None


def _optional_str(name: str, value: object) -> None:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{name}: expected a string or None, got {type(value).__name__}")


class PreToolUseResult(msgspec.Struct, frozen=True):
    """A PreToolUse reply; every field ``None`` means "no opinion".

    ``decision`` is a ``Decision`` or its string (``"allow"``, ``"ask"``, ``"deny"``) and is stored
    as a ``Decision``. ``updated_args`` replaces the arguments (a JSON object); the runner snapshots
    it as soon as the hook returns. Bad values raise at construction.
    """

    decision: Decision | str | None = None  # always a Decision (or None) once constructed
    reason: str | None = None
    updated_args: Mapping[str, Any] | None = None
    additional_context: str | None = None

    def __post_init__(self) -> None:
        if self.decision is not None:
            force_setattr(self, "decision", Decision.parse(self.decision))
        _optional_str("reason", self.reason)
        _optional_str("additional_context", self.additional_context)
        if self.updated_args is not None and not isinstance(self.updated_args, Mapping):
            raise TypeError(
                "updated_args: expected a JSON object (a dict of arguments), "
                f"got {type(self.updated_args).__name__}"
            )


class PostToolUseResult(msgspec.Struct, frozen=True):
    """A PostToolUse reply; all fields unset accepts the result as it is.

    ``value``: a new canonical value (validated and re-rendered by the executor). ``content``: new
    model-visible content (``str`` or a sequence of content blocks), the value is kept. Setting both
    raises ``TypeError``. ``block``: feedback text; the result becomes ``BLOCKED_BY_HOOK`` and no
    later hook runs. ``additional_context`` is appended to ``meta.additional_context``.
    """

    value: Any = UNSET
    content: Any = UNSET
    block: str | None = None
    additional_context: str | None = None

    def __post_init__(self) -> None:
        if self.value is not UNSET and self.content is not UNSET:
            raise TypeError(
                "PostToolUseResult: set value (re-rendered into content) or content (value kept), "
                "not both"
            )
        _optional_str("block", self.block)
        _optional_str("additional_context", self.additional_context)
        if self.content is not UNSET:
            force_setattr(self, "content", check_content(self.content))


def check_content(content: object) -> Any:
    """Model-visible content is a ``str`` or a sequence of blocks (kept as a tuple)."""
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        return tuple(content)
    raise TypeError(
        f"content: expected a string or a list of content blocks, got {type(content).__name__}"
    )


class PreHookOutcome(msgspec.Struct, frozen=True):
    """What the PreToolUse hooks of one call decided, merged.

    ``decision``: the strictest decision any hook gave (``None``: no hook had an opinion); a hook
    that failed closed contributes ``DENY``. ``reason``: the reason given with that decision.
    ``updated_args``: the arguments after every rewrite, a frozen snapshot (``None``: unchanged).
    ``failures``: one description per hook that failed, whether it failed closed or was ignored.
    """

    decision: Decision | None
    reason: str | None
    updated_args: Any | None
    additional_context: tuple[str, ...]
    failures: tuple[str, ...]


class PostHookOutcome(msgspec.Struct, frozen=True):
    """What the PostToolUse hooks of one call changed.

    ``value``: the new canonical value, ``UNSET`` to keep the tool's (a new value means the content
    must be rendered again unless ``content`` is set too). ``content``: the new content, ``UNSET``
    to keep (or re-render). ``block``: the feedback of a hook that blocked the result (or failed).
    """

    value: Any
    content: Any
    block: str | None
    additional_context: tuple[str, ...]


NO_PRE_OUTCOME: Final = PreHookOutcome(None, None, None, (), ())
NO_POST_OUTCOME: Final = PostHookOutcome(UNSET, UNSET, None, ())
