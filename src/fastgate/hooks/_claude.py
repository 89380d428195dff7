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
# Claude Code's tools that take a ``file_path``: a hook matching them reads the file there.
_FILE_TOOLS: Final = frozenset({"Edit", "Write", "Read", "MultiEdit", "NotebookEdit"})
_MAX_FILE_VIEWS: Final = 64  # files of one call shown to a hook one by one
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


def _tool_response(event: PostToolUseEvent, tool_input: Any) -> dict[str, Any]:
    """What the call gave, as a hook after it reads it: ``ok`` and the model-visible
    ``content``, and under the names Claude Code's own tools give their output, so that a filter
    written for them sees it: ``stdout`` (every text the model sees) for ``Bash``, ``filePath``
    for a file tool."""
    content = event.result.content
    response: dict[str, Any] = {"ok": event.result.ok, "content": content}
    name = claude_tool_name(event.tool_name, event.tool)
    if name == "Bash":
        response["stdout"] = (
            content
            if isinstance(content, str)
            else "\n".join(
                block if isinstance(block, str) else str(block.get("text", ""))
                for block in content
                if isinstance(block, str) or (isinstance(block, Mapping) and "text" in block)
            )
        )
    elif name in _FILE_TOOLS:
        arguments = event.args if tool_input is None else tool_input
        if isinstance(arguments, Mapping) and isinstance(arguments.get("file_path"), str):
            response["filePath"] = arguments["file_path"]
    return response


def claude_payload(event: Event, cwd: str, tool_input: Any = None) -> bytes:
    """The JSON document a Claude Code hook reads on stdin (``tool_input``: the arguments as the
    hook sees them, ``event.args`` unless given)."""
    payload: dict[str, Any] = {
        "session_id": event.context.session_id,
        "cwd": cwd,
        "hook_event_name": _event_name(event),
        "tool_name": claude_tool_name(event.tool_name, event.tool),
        "tool_input": event.args if tool_input is None else tool_input,
    }
    if isinstance(event, PostToolUseEvent):
        # The canonical value never leaves the process (SPEC §10): the model-visible content does.
        payload["tool_response"] = _tool_response(event, tool_input)
    elif isinstance(event, PostToolUseFailureEvent):
        error = event.error
        payload["error"] = error.message
        payload["error_code"] = str(error.code)
        payload["is_interrupt"] = error.code is ErrorCode.ABORTED
    return _encoder.encode(payload) + b"\n"


async def call_claude_hook(
    hook: CommandHook, event: Event
) -> PreToolUseResult | PostToolUseResult | str | None:
    """Run ``hook`` for ``event`` in Claude Code's protocol; raises ``HookFailed``.

    A file tool whose arguments name no ``file_path`` (``apply_patch``, which Claude Code's
    ``Edit`` hooks match) is shown to the hook once per file it touches, each time with that
    file as ``file_path``: hooks written for Claude Code read the file there, and a patch must
    not slip past them by naming it elsewhere. The strictest answer wins."""
    root = event.context.workspace_root or os.getcwd()
    cwd = hook.cwd if hook.cwd is not None else root
    env = dict(hook.env if hook.env is not None else os.environ)
    env["CLAUDE_PROJECT_DIR"] = root
    views = _file_views(event, root)
    if views is None:
        return await _call_once(hook, event, cwd, env, None)
    replies: list[Any] = []
    for view in views:
        reply = await _call_once(hook, event, cwd, env, view, len(views) == 1)
        if isinstance(reply, PreToolUseResult) and reply.decision is Decision.DENY:
            return reply
        if isinstance(reply, PostToolUseResult) and reply.block is not None:
            return reply
        replies.append(reply)
    return _combined(event, replies)


async def _call_once(
    hook: CommandHook,
    event: Event,
    cwd: str,
    env: dict[str, str],
    view: Mapping[str, Any] | None,
    whole: bool = True,
) -> PreToolUseResult | PostToolUseResult | str | None:
    """One run of ``hook``, shown ``view`` as its ``tool_input`` (``None``: the arguments)."""
    try:
        payload = claude_payload(event, cwd, view)
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
        return pre_result(reply, view, whole)
    if isinstance(event, PostToolUseEvent):
        return post_result(reply)
    return failure_context(reply)


def _file_views(event: Event, root: str) -> list[dict[str, Any]] | None:
    """The arguments once per file the call touches, with that file (absolute) as
    ``file_path``; ``None`` for a call Claude Code's own tools could make (its arguments name
    their ``file_path``, or the tool is no file tool, or declares no files)."""
    tool, args = event.tool, event.args
    if (
        tool is None
        or tool.paths is None
        or not isinstance(args, Mapping)
        or "file_path" in args
        or claude_tool_name(event.tool_name, tool) not in _FILE_TOOLS
    ):
        return None
    try:
        declared = tool.paths(args)
        paths = list(dict.fromkeys(declared))
    except Exception:  # arguments the tool cannot read: the executor has refused them already
        return None
    if not paths or not all(isinstance(path, str) for path in paths):
        return None
    if len(paths) > _MAX_FILE_VIEWS:
        raise HookFailed(
            f"the call touches {len(paths)} files; a Claude Code hook is shown at most "
            f"{_MAX_FILE_VIEWS} of them one by one (split the change)"
        )
    return [
        {**args, "file_path": os.path.normpath(os.path.join(root, os.path.expanduser(path)))}
        for path in paths
    ]


def _combined(
    event: Event, replies: list[Any]
) -> PreToolUseResult | PostToolUseResult | str | None:
    """The replies of one hook about each file of a call, as one (none of them denies or
    blocks: those were returned at once)."""
    contexts: list[str] = []
    for reply in replies:
        text = reply if isinstance(reply, str) or reply is None else reply.additional_context
        if text and text not in contexts:
            contexts.append(text)
    context = "\n".join(contexts) or None
    if isinstance(event, PostToolUseFailureEvent):
        return context
    if isinstance(event, PostToolUseEvent):
        contents = [r.content for r in replies if r is not None and r.content is not msgspec.UNSET]
        return PostToolUseResult(
            content=contents[-1] if contents else msgspec.UNSET, additional_context=context
        )
    decision, reason, updated = None, None, None
    for reply in replies:
        if reply is None:
            continue
        if reply.decision is not None and (
            decision is None or reply.decision.strictness > decision.strictness
        ):
            decision, reason = reply.decision, reply.reason
        if reply.updated_args is not None:
            updated = reply.updated_args
    return PreToolUseResult(
        decision=decision, reason=reason, updated_args=updated, additional_context=context
    )


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


# What Claude Code trims around a reply (JavaScript's ``trim``: Unicode spaces, line and
# paragraph separators, the byte order mark; older engines also U+180E) and what Python's
# ``str.strip`` removes: a reply it would read behind any of them must not pass as plain text.
_SPACES: Final = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005"
    "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff\u180e"
)


def _reply_object(stdout: bytes) -> dict[str, Any] | None:
    """Nothing or plain text is no opinion (plain text is not context); text that starts like a
    JSON object, once the whitespace Claude Code trims is gone, must be exactly one valid
    object."""
    text = stdout.decode("utf-8", "replace").strip(_SPACES)
    if not text.startswith("{"):
        return None
    try:
        stdout.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HookFailed(f"stdout is not valid UTF-8 ({exc})") from None
    return parse_reply_object(text.encode())


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


def pre_result(
    reply: dict[str, Any] | None,
    view: Mapping[str, Any] | None = None,
    whole: bool = True,
) -> PreToolUseResult | None:
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
        updated_args=_updated_input(specific, view, whole),
        additional_context=_text(specific, "additionalContext"),
    )


def _updated_input(
    specific: Mapping[str, Any],
    view: Mapping[str, Any] | None = None,
    whole: bool = True,
) -> dict[str, Any] | None:
    """``updatedInput`` as the new arguments, whole: as in Claude Code, it replaces the input
    (a field it leaves out is gone; the executor validates what is left). Over one file's
    ``view`` of a call: only when that file is the whole call, and a ``file_path`` it names
    must be the one it was shown (it is no argument of the tool, and is dropped)."""
    update = specific.get("updatedInput")
    if update is None:
        return None
    if not isinstance(update, dict):
        raise HookFailed(f"updatedInput must be a JSON object, got {type(update).__name__}")
    if view is None:
        return dict(update)
    if not whole:
        raise HookFailed(
            "updatedInput for one file of a call that changes several cannot be applied (the "
            "hook was shown each file as file_path)"
        )
    replaced = dict(update)
    if replaced.pop("file_path", view["file_path"]) != view["file_path"]:
        raise HookFailed("updatedInput changes file_path, which this tool does not take")
    return replaced


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
