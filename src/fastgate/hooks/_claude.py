"""Claude Code's hook protocol (SPEC §6.5), spoken by ``CommandHook(..., protocol="claude")`` and
by every hook loaded from a settings file.

In: one JSON object on stdin (``session_id``, ``cwd``, ``hook_event_name``, ``tool_name`` as
Claude Code names the tool, ``tool_input``, and ``tool_response`` or ``error`` after the call).
Out: exit 0 with a JSON object, plain text or nothing; exit 2 blocks with stderr as the reason the
model sees; any other exit, a timeout or malformed JSON fails, which fastgate turns into a deny
(Claude Code would only warn). docs/hooks.md has the table of every field.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import msgspec

from fastgate.hooks._command import (
    CommandHook,
    HookExited,
    HookFailed,
    _to_json_default,
    parse_reply_object,
)
from fastgate.hooks._types import (
    PostToolUseEvent,
    PostToolUseFailureEvent,
    PostToolUseResult,
    PreToolUseEvent,
    PreToolUseResult,
)
from fastgate.model import Decision, ErrorCode

if TYPE_CHECKING:
    from fastgate.tools import ToolDefinition

log = logging.getLogger("fastgate.hooks")

_MCP_PREFIX: Final = "mcp__"
_REASON_LIMIT: Final = 8000  # characters of a blocking hook's stderr kept as the reason
_BLOCKING_STATUS: Final = 2

# Every key of a reply, by event; anything else fails closed (it may have meant "deny").
_COMMON_KEYS: Final = frozenset(
    {"continue", "stopReason", "suppressOutput", "systemMessage", "decision", "reason"}
)
_SPECIFIC_KEYS: Final = {
    "PreToolUse": frozenset(
        {
            "hookEventName",
            "permissionDecision",
            "permissionDecisionReason",
            "updatedInput",
            "additionalContext",
        }
    ),
    "PostToolUse": frozenset({"hookEventName", "additionalContext", "updatedMCPToolOutput"}),
    "PostToolUseFailure": frozenset({"hookEventName", "additionalContext"}),
}
_PERMISSION_DECISIONS: Final = {
    "allow": Decision.ALLOW,
    "ask": Decision.ASK,
    "deny": Decision.DENY,
    "defer": None,  # "let the permission flow go on": no opinion
}

_encoder = msgspec.json.Encoder(enc_hook=_to_json_default)

Event = PreToolUseEvent | PostToolUseEvent | PostToolUseFailureEvent


def claude_tool_name(tool_name: str, tool: ToolDefinition | None) -> str:
    """The name Claude Code gives the tool: a built-in's own rule name (``write`` → ``Write``,
    ``bash`` → ``Bash``), else its first rule name (``apply_patch`` → ``Edit``); an MCP tool and
    a tool without rule names keep their registered name."""
    if tool is None or tool_name.startswith(_MCP_PREFIX):
        return tool_name
    own = tool.name.lower()
    for name in tool.rule_names:
        if name.lower() == own:
            return name
    for name in tool.rule_names:
        if not name.startswith(_MCP_PREFIX):
            return name
    return tool_name


def _event_name(event: Event) -> str:
    if isinstance(event, PreToolUseEvent):
        return "PreToolUse"
    if isinstance(event, PostToolUseEvent):
        return "PostToolUse"
    return "PostToolUseFailure"


def claude_payload(event: Event, cwd: str) -> bytes:
    """The JSON document a Claude Code hook reads on stdin."""
    payload: dict[str, Any] = {
        "session_id": event.context.session_id,
        "cwd": cwd,
        "hook_event_name": _event_name(event),
        "tool_name": claude_tool_name(event.tool_name, event.tool),
        "tool_input": event.args,
    }
    if isinstance(event, PostToolUseEvent):
        # The canonical value never leaves the process (SPEC §10): the model-visible content does.
        payload["tool_response"] = {"ok": event.result.ok, "content": event.result.content}
    elif isinstance(event, PostToolUseFailureEvent):
        error = event.error
        payload["error"] = error.message
        payload["error_code"] = str(error.code)
        payload["is_interrupt"] = error.code is ErrorCode.ABORTED
    return _encoder.encode(payload) + b"\n"


async def call_claude_hook(
    hook: CommandHook, event: Event
) -> PreToolUseResult | PostToolUseResult | str | None:
    """Run ``hook`` for ``event`` in Claude Code's protocol; raises ``HookFailed``."""
    root = event.context.workspace_root or os.getcwd()
    cwd = hook.cwd if hook.cwd is not None else root
    env = dict(hook.env if hook.env is not None else os.environ)
    env["CLAUDE_PROJECT_DIR"] = root
    try:
        payload = claude_payload(event, cwd)
    except (TypeError, ValueError) as exc:
        raise HookFailed(f"the event cannot be encoded as JSON: {exc}") from None
    try:
        stdout = await hook.run(payload, cwd=cwd, env=env)
    except HookExited as exited:
        if exited.status != _BLOCKING_STATUS:
            raise
        return _blocked(event, exited.stderr)
    reply = _reply_object(stdout)
    if isinstance(event, PreToolUseEvent):
        return pre_result(event, reply)
    if isinstance(event, PostToolUseEvent):
        return post_result(reply)
    return failure_context(reply)


def _blocked(event: Event, stderr: str) -> PreToolUseResult | PostToolUseResult | str | None:
    """Exit 2: stderr is the reason the model sees (for a failure hook, context for it)."""
    if len(stderr) > _REASON_LIMIT:
        stderr = stderr[:_REASON_LIMIT] + " [...]"
    if isinstance(event, PostToolUseFailureEvent):
        return stderr or None
    reason = stderr or "the hook exited with status 2 (blocking) and gave no reason on stderr"
    if isinstance(event, PreToolUseEvent):
        return PreToolUseResult(decision=Decision.DENY, reason=reason)
    return PostToolUseResult(block=reason)


_BOM: Final = "\ufeff".encode()


def _reply_object(stdout: bytes) -> dict[str, Any] | None:
    """Nothing or plain text is no opinion (plain text is not context); text that starts like a
    JSON object must be exactly one valid object."""
    text = stdout.strip()
    while text.startswith(_BOM):  # Claude Code trims it as whitespace (a Windows editor's mark)
        text = text[len(_BOM) :].strip()
    if not text.startswith(b"{"):
        return None
    return parse_reply_object(text)


class _Common(msgspec.Struct, frozen=True):
    """The fields every Claude Code reply may carry, checked."""

    stop: str | None  # continue: false → the stop reason (or a default)
    decision: str | None  # "block" or "approve"
    reason: str | None
    specific: Mapping[str, Any]


def _common(reply: dict[str, Any], event_name: str) -> _Common:
    allowed = _SPECIFIC_KEYS[event_name]
    unknown = sorted(set(reply) - _COMMON_KEYS - {"hookSpecificOutput"})
    specific = reply.get("hookSpecificOutput")
    if specific is None:
        specific = {}
    elif not isinstance(specific, dict):
        raise HookFailed("hookSpecificOutput must be a JSON object")
    unknown += sorted(f"hookSpecificOutput.{key}" for key in set(specific) - allowed)
    if unknown:
        raise HookFailed(
            f"unknown key(s) {', '.join(map(repr, unknown))} in a {event_name} reply of Claude "
            "Code's protocol (an unknown answer fails closed)"
        )
    named = specific.get("hookEventName")
    if named is not None and named != event_name:
        raise HookFailed(f"hookSpecificOutput.hookEventName is {named!r} in a {event_name} reply")
    go_on = reply.get("continue")
    if go_on is not None and not isinstance(go_on, bool):
        raise HookFailed("continue must be true or false")
    stop_reason = _text(reply, "stopReason")
    _check_type(reply, "suppressOutput", bool, "true or false")  # about Claude Code's transcript
    message = _text(reply, "systemMessage")
    if message:
        log.warning("a %s hook's systemMessage (shown to the user): %s", event_name, message)
    decision = _text(reply, "decision")
    if decision not in (None, "block", "approve"):
        raise HookFailed(f"decision must be 'block' or 'approve', got {decision!r}")
    stop = None
    if go_on is False:
        stop = stop_reason or f"a {event_name} hook stopped the session (continue: false)"
    return _Common(stop, decision, _text(reply, "reason"), specific)


def _check_type(reply: Mapping[str, Any], key: str, kind: type, expected: str) -> Any:
    value = reply.get(key)
    if value is not None and not isinstance(value, kind):
        raise HookFailed(f"{key} must be {expected}, got {type(value).__name__}")
    return value


def _text(reply: Mapping[str, Any], key: str) -> str | None:
    value: str | None = _check_type(reply, key, str, "a string")
    return value


def pre_result(event: PreToolUseEvent, reply: dict[str, Any] | None) -> PreToolUseResult | None:
    """A PreToolUse reply as a ``PreToolUseResult``; the strictest of what it says wins."""
    if reply is None:
        return None
    common = _common(reply, "PreToolUse")
    specific = common.specific
    said: list[tuple[Decision, str | None]] = []
    if common.stop is not None:
        said.append((Decision.DENY, common.stop))
    if common.decision == "block":
        said.append((Decision.DENY, common.reason))
    elif common.decision == "approve":
        said.append((Decision.ALLOW, common.reason))
    permission = _text(specific, "permissionDecision")
    if permission is not None:
        if permission not in _PERMISSION_DECISIONS:
            raise HookFailed(
                f"permissionDecision must be 'allow', 'ask', 'deny' or 'defer', got {permission!r}"
            )
        decided = _PERMISSION_DECISIONS[permission]
        if decided is not None:
            said.append((decided, _text(specific, "permissionDecisionReason")))
    decision, reason = None, None
    for candidate, why in said:
        if decision is None or candidate.strictness > decision.strictness:
            decision, reason = candidate, why
    return PreToolUseResult(
        decision=decision,
        reason=reason,
        updated_args=_updated_input(event, specific),
        additional_context=_text(specific, "additionalContext"),
    )


def _updated_input(event: PreToolUseEvent, specific: Mapping[str, Any]) -> dict[str, Any] | None:
    """``updatedInput``'s fields laid over the arguments (fields it leaves out are kept)."""
    update = specific.get("updatedInput")
    if update is None:
        return None
    if not isinstance(update, dict):
        raise HookFailed(f"updatedInput must be a JSON object, got {type(update).__name__}")
    base = event.args if isinstance(event.args, Mapping) else {}
    return {**base, **update}


def post_result(reply: dict[str, Any] | None) -> PostToolUseResult | None:
    """A PostToolUse reply: ``decision: "block"`` (or ``continue: false``) blocks the result with
    the reason; ``additionalContext`` adds context; ``updatedMCPToolOutput`` replaces the
    content."""
    if reply is None:
        return None
    common = _common(reply, "PostToolUse")
    if common.decision == "approve":
        raise HookFailed("decision 'approve' means nothing after the call; use 'block' or leave it")
    block = common.stop
    if block is None and common.decision == "block":
        block = common.reason or "the PostToolUse hook blocked the result and gave no reason"
    specific = common.specific
    content = specific.get("updatedMCPToolOutput")
    try:
        return PostToolUseResult(
            content=msgspec.UNSET if content is None else content,
            block=block,
            additional_context=_text(specific, "additionalContext"),
        )
    except TypeError as exc:
        raise HookFailed(f"updatedMCPToolOutput: {exc}") from None


def failure_context(reply: dict[str, Any] | None) -> str | None:
    """A PostToolUseFailure reply: its ``additionalContext`` (and a block's reason, which Claude
    Code shows the model) become context on the failed result."""
    if reply is None:
        return None
    common = _common(reply, "PostToolUseFailure")
    parts = [
        text
        for text in (
            common.reason if common.decision == "block" else None,
            _text(common.specific, "additionalContext"),
        )
        if text
    ]
    return "\n".join(parts) or None
