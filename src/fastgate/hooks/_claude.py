"""Claude Code's hook protocol (SPEC §6.5), spoken by ``CommandHook(..., protocol="claude")`` and
by every hook loaded from a settings file.

In: one JSON object on stdin (``session_id``, ``cwd``, ``hook_event_name``, ``tool_name`` as
Claude Code names the tool, ``tool_input``, and ``tool_response`` or ``error`` after the call).
Out: exit 0 with a JSON object, plain text or nothing; exit 2 blocks with stderr as the reason the
model sees; any other exit, a timeout, malformed JSON or a JSON array fails, which fastgate turns
into a deny (Claude Code would only warn, or take the array as plain text).
docs/hooks.md has the table of every field.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import uuid
from collections.abc import Callable, Mapping
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


# Claude Code always sends a session id, a string; a call made without one gets this, the
# same for every such call of the process (fastgate keeps those calls' approvals together too),
# and random, so that state a hook keys on it is never shared with another process.
_SESSIONLESS_ID: Final = str(uuid.uuid4())


def session_id(event: Event) -> str:
    """The ``session_id`` a Claude Code hook reads: the call's session, or the process's
    stand-in for calls without one."""
    sid = event.context.session_id
    return sid if isinstance(sid, str) else _SESSIONLESS_ID


def claude_payload(event: Event, cwd: str, tool_input: Any = None) -> bytes:
    """The JSON document a Claude Code hook reads on stdin (``tool_input``: the arguments as the
    hook sees them, ``event.args`` unless given)."""
    payload: dict[str, Any] = {
        "session_id": session_id(event),
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
    hook: CommandHook, event: Event, answers: Callable[[tuple[str, ...]], bool] | None = None
) -> PreToolUseResult | PostToolUseResult | str | None:
    """Run ``hook`` for ``event`` in Claude Code's protocol; raises ``HookFailed``.

    A file tool whose arguments name no ``file_path`` (``apply_patch``, which Claude Code's
    ``Edit`` hooks match) is shown to the hook once per file it touches, each time with that
    file as ``file_path``: hooks written for Claude Code read the file there, and a patch must
    not slip past them by naming it elsewhere. ``answers`` is the matcher the hook was
    registered with: it is shown only the files whose names it matches (a ``Write`` hook sees
    the files a patch creates or deletes, not those it only edits). The strictest answer wins."""
    root = event.context.workspace_root or os.getcwd()
    cwd = hook.cwd if hook.cwd is not None else root
    env = dict(hook.env if hook.env is not None else os.environ)
    env["CLAUDE_PROJECT_DIR"] = root
    views = _file_views(event, root)
    if views is None:
        return await _call_once(hook, event, cwd, env, None)
    whole = len(views) == 1  # updatedInput can stand for the call only if it has one file
    replies: list[Any] = []
    for view in views:
        if answers is not None and not answers(view.names):
            continue
        reply = await _call_once(hook, event, cwd, env, view, whole)
        if isinstance(reply, PreToolUseResult) and reply.decision is Decision.DENY:
            return reply
        if isinstance(reply, PostToolUseResult) and reply.block is not None:
            return reply
        replies.append(reply)
    return _combined(event, replies) if replies else None


async def _call_once(
    hook: CommandHook,
    event: Event,
    cwd: str,
    env: dict[str, str],
    view: _FileView | None,
    whole: bool = True,
) -> PreToolUseResult | PostToolUseResult | str | None:
    """One run of ``hook``, shown ``view`` as its ``tool_input`` (``None``: the arguments)."""
    try:
        payload = claude_payload(event, cwd, None if view is None else view.tool_input)
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


class _FileView(msgspec.Struct, frozen=True):
    """One file of a call, as a Claude Code hook is shown it: ``tool_input`` (the arguments,
    that file as ``file_path``, and what Claude Code's tool for that change would take, under
    ``added``), and the ``names`` a matcher must match for the hook to see it."""

    tool_input: dict[str, Any]
    names: tuple[str, ...]
    added: frozenset[str]


# What one change of a patch is for a Claude Code hook: the Claude Code names it answers to
# beyond the tool's own, and the fields that tool would take. A file a patch creates or deletes
# is a write (a ``Write`` hook guards it); every file it touches is an edit (the patch answers
# to ``Edit`` and ``MultiEdit``).
_WRITE: Final = ("Write",)
_MULTI_EDIT: Final = "MultiEdit"


def _edit(old: str, new: str) -> dict[str, Any]:
    """One edit as Claude Code's ``MultiEdit`` lists it."""
    return {"old_string": old, "new_string": new, "replace_all": False}


def _patch_changes(args: Mapping[str, Any]) -> list[tuple[str, tuple[str, ...], dict[str, Any]]]:
    """Each file the built-in ``apply_patch`` call touches, in patch order: its path as written,
    the extra names it answers to, and the fields Claude Code's tool would take for it: an
    update is ``MultiEdit``'s ``edits``, one per ``@@`` chunk (its old lines, context included,
    for its new ones)."""
    module = sys.modules["fastgate.builtin._patch"]
    changes: list[tuple[str, tuple[str, ...], dict[str, Any]]] = []
    for hunk in module.parse_patch(args["patch"]):
        if hunk.kind == "add":
            # Write's content, and the Edit that creates a file: old_string "" (Claude Code's).
            fields = {"content": hunk.contents, "edits": [_edit("", hunk.contents)]}
            changes.append((hunk.path, _WRITE, fields))
        elif hunk.kind == "delete":
            changes.append((hunk.path, _WRITE, {"content": ""}))
        else:
            edits = [_edit("\n".join(c.old), "\n".join(c.new)) for c in hunk.chunks]
            changes.append((hunk.path, (), {"edits": edits}))
            if hunk.move_to is not None:  # the file is created there
                changes.append((hunk.move_to, _WRITE, {}))
    return changes


def _merged(given: list[dict[str, Any]]) -> dict[str, Any]:
    """The fields of every change of one file, as one: each text written there counts (a patch
    may add, delete and add a file again, or add a file and then update it). ``edits`` lists
    every edit; ``old_string`` and ``new_string`` (Claude Code's ``Edit``) join them in order,
    so a hook reading only those still sees every line the patch removes and writes. A file
    the patch adds or deletes has ``content`` (``Write``'s): the text added, then, one per line,
    what updates of it write, so a hook reading only ``content`` misses none of them."""
    fields: dict[str, Any] = {}
    if any("content" in f for f in given):
        parts = [f["content"] for f in given if f.get("content")]
        parts += [e["new_string"] for f in given if "content" not in f for e in f.get("edits", ())]
        fields["content"] = "\n".join(parts)
    edits = [edit for f in given for edit in f.get("edits", ())]
    if edits:
        fields["old_string"] = "\n".join(e["old_string"] for e in edits)
        fields["new_string"] = "\n".join(e["new_string"] for e in edits)
        fields["replace_all"] = False
        fields["edits"] = edits
    return fields


def is_builtin_patch(tool: ToolDefinition) -> bool:
    """Whether ``tool`` runs fastgate's built-in ``apply_patch`` (under any registered name)."""
    module = sys.modules.get("fastgate.builtin._patch")  # not imported: no tool runs it
    return module is not None and tool.execute is getattr(module, "apply_patch", None)


def _own_names(tool: ToolDefinition) -> tuple[str, ...]:
    """The names every file of a call answers to: the registered name, the ``rule_names``, and
    for the built-in ``apply_patch`` also ``MultiEdit`` (an update is Claude Code's edits)."""
    names = (tool.name, *tool.rule_names)
    if _MULTI_EDIT not in names and is_builtin_patch(tool):
        names = (*names, _MULTI_EDIT)
    return names


def hook_names(tool: ToolDefinition) -> tuple[str, ...]:
    """Every name a matcher may match ``tool`` by: its registered name, its ``rule_names``, and
    for the built-in ``apply_patch`` also ``MultiEdit`` and ``Write`` (a patch can create and
    delete files)."""
    names = _own_names(tool)
    if "Write" not in names and is_builtin_patch(tool):
        names = (*names, "Write")
    return names


def call_names(tool: ToolDefinition, args: Any) -> tuple[str, ...]:
    """The names a matcher may match this call by: those of ``tool`` (``hook_names``), less
    ``Write`` for a patch that creates and deletes nothing (it only edits)."""
    names = hook_names(tool)
    if "Write" in tool.rule_names or not is_builtin_patch(tool) or not isinstance(args, Mapping):
        return names
    try:
        changes = _patch_changes(args)
    except Exception:  # arguments the tool cannot read: every name, the safe side
        return names
    if any(extra for _path, extra, _fields in changes):
        return names
    return tuple(name for name in names if name != "Write")


def _file_views(event: Event, root: str) -> list[_FileView] | None:
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
    own = _own_names(tool)
    try:
        declared = tool.paths(args)
        paths = list(dict.fromkeys(declared))
        changes = _patch_changes(args) if is_builtin_patch(tool) else []
    except Exception:  # arguments the tool cannot read: the executor has refused them already
        return None
    if not paths or not all(isinstance(path, str) for path in paths):
        return None
    if len(paths) > _MAX_FILE_VIEWS:
        raise HookFailed(
            f"the call touches {len(paths)} files; a Claude Code hook is shown at most "
            f"{_MAX_FILE_VIEWS} of them one by one (split the change)"
        )
    # Per path as written: the names it answers to and Claude Code's fields for it. A path
    # the tool declares beyond its changes (what git reads through a .git it writes) is
    # shown to every hook of the call.
    extra: dict[str, tuple[str, ...]] = {}
    given: dict[str, list[dict[str, Any]]] = {}
    for path, names, fields in changes:
        extra[path] = tuple(dict.fromkeys((*extra.get(path, ()), *names)))
        given.setdefault(path, []).append(fields)
    views = []
    for path in paths:
        names = (*own, *extra.get(path, _WRITE if changes else ()))
        shown = _merged(given.get(path, []))
        added = {key: value for key, value in shown.items() if key not in args}
        absolute = os.path.normpath(os.path.join(root, os.path.expanduser(path)))
        tool_input = {**args, **added, "file_path": absolute}
        views.append(_FileView(tool_input, names, frozenset({*added, "file_path"})))
    return views


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
    object. A JSON array fails too: it is a structured answer in the wrong shape (a list of
    decisions, say), and a hook that meant "deny" by it must not pass as having no opinion
    (Claude Code reads it as plain text). A lone number, string or ``true`` stays plain text:
    scripts print counts and words as they go."""
    text = stdout.decode("utf-8", "replace").strip(_SPACES)
    if not text.startswith("{"):
        if text.startswith("[") and _is_json_array(text):
            raise HookFailed(
                "stdout is a JSON array, not a JSON object: a reply must be one JSON object "
                "(or plain text, or nothing, for no opinion)"
            )
        return None
    try:
        stdout.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HookFailed(f"stdout is not valid UTF-8 ({exc})") from None
    return parse_reply_object(text.encode())


def _number(text: str) -> int:
    return 0  # only whether it parses matters: no limit on the digits of an integer applies


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _is_json_array(text: str) -> bool:
    """Whether ``text`` is exactly one valid JSON array (nested too deeply to parse counts:
    it is no plain text either)."""
    try:
        json.loads(text, parse_int=_number, parse_float=_number, parse_constant=_not_json)
    except RecursionError:
        return True
    except ValueError:
        return False
    return True


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
    view: _FileView | None = None,
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
    view: _FileView | None = None,
    whole: bool = True,
) -> dict[str, Any] | None:
    """``updatedInput`` as the new arguments, whole: as in Claude Code, it replaces the input
    (a field it leaves out is gone; the executor validates what is left). Over one file's
    ``view`` of a call: only when that file is the whole call; the fields the view added
    (``file_path``, and ``content`` and the like) are no arguments of the tool and are dropped,
    and may not be changed: such a change cannot be carried into the call."""
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
    for key in sorted(view.added):
        shown = view.tool_input[key]
        if replaced.pop(key, shown) != shown:
            raise HookFailed(f"updatedInput changes {key}, which this tool does not take")
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
