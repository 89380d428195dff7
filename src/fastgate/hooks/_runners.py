"""The runners the executor calls at stages 7 and 13 (SPEC §4, §6).

Matching hooks of an event run one after another in registration order; each sees what the hooks
before it changed. A hook "fails" when it raises, exceeds its timeout, or returns something that
is not a valid reply; what a failure means depends on the event (see each runner).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Sequence
from typing import Any

from msgspec.structs import replace

from fastgate.hooks._claude import call_names, is_builtin_patch
from fastgate.hooks._command import CommandHook, HookFailed
from fastgate.hooks._registry import HookEntry, Hooks
from fastgate.hooks._types import (
    NO_POST_OUTCOME,
    NO_PRE_OUTCOME,
    UNSET,
    PostHookOutcome,
    PostToolUseEvent,
    PostToolUseFailureEvent,
    PostToolUseResult,
    PreHookOutcome,
    PreToolUseEvent,
    PreToolUseResult,
)
from fastgate.model import Decision, NotJSON, freeze
from fastgate.model.rendering import (
    DEFAULT_MAX_CONTENT_CHARS,
    bounded_blocks,
    cut,
    exception_line,
)
from fastgate.tools import ToolDefinition

log = logging.getLogger("fastgate.hooks")

# The reason a hook's ALLOW carries into the decision trail: it can never skip a rule's ask or
# deny (stage 8 keeps the strictest), so it counts as no opinion.
_ALLOW_NOTE = "a hook's allow is no opinion: hooks tighten, never loosen"


def _subject(
    event: PreToolUseEvent | PostToolUseEvent | PostToolUseFailureEvent,
) -> str | ToolDefinition:
    """What matchers are tested against: the definition (its name and rule names) when the
    event carries one, else the name."""
    return event.tool if event.tool is not None else event.tool_name


def _names(tool: ToolDefinition | None, args: Any) -> tuple[str, ...] | None:
    """The names this call answers to when they depend on its arguments (a patch that creates
    or deletes no file does not answer to ``Write``); ``None`` when the tool's names hold."""
    if tool is None or not is_builtin_patch(tool):
        return None
    return call_names(tool, args)


def _fires(entry: HookEntry, names: tuple[str, ...] | None) -> bool:
    return names is None or entry.matches_names(names)


async def _invoke(
    entry: HookEntry, event: PreToolUseEvent | PostToolUseEvent | PostToolUseFailureEvent
) -> Any:
    """Call one hook and return its raw reply; every way it can go wrong becomes ``HookFailed``.

    Cancellation of the awaiting task propagates as ``CancelledError``; a hook that raises
    ``CancelledError`` on its own (the task was not being cancelled) has failed.
    """
    deadline: asyncio.Timeout | None = None
    try:
        fn = entry.fn
        # A command hook shows a call file by file: each file only to the hooks matching it.
        reply = fn(event, answers=entry.matches_names) if isinstance(fn, CommandHook) else fn(event)
        if inspect.isawaitable(reply):
            async with asyncio.timeout(entry.timeout) as deadline:
                reply = await reply
        return reply
    except HookFailed:
        raise
    except TimeoutError as exc:
        if deadline is not None and deadline.expired():
            raise HookFailed(f"timed out after {entry.timeout:g} s") from None
        raise HookFailed(f"raised {exception_line(exc)}") from None
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
        raise HookFailed("raised CancelledError") from None
    except Exception as exc:
        raise HookFailed(f"raised {exception_line(exc)}") from None


# Passes over the PreToolUse hooks of one call: the first, then the rechecks a rewrite calls for
# (hooks that judged other arguments than the final ones are asked again); hooks that keep
# rewriting each other's arguments past this deny the call.
_MAX_PASSES = 4


async def run_pre_tool_use(hooks: Hooks, event: PreToolUseEvent) -> PreHookOutcome:
    """Run the PreToolUse hooks matching ``event.tool_name``; never raises (but cancellation).

    Decisions merge to the strictest (a hook can tighten, never loosen); the reason kept is the
    first one given with that decision (an ALLOW's reason says it is no opinion). A hook's
    ``updated_args`` is snapshotted at once (``fastgate.model.freeze``: a frozen deep copy)
    and is what the next hook sees. The chain stops at the first DENY.
    Rewrites: a hook that ran before a later hook's rewrite judged arguments that will not run,
    so once a pass is over, every hook that judged (or produced) other arguments than the final
    ones runs again on them, in registration order; a rewrite in that recheck calls for another,
    and hooks still rewriting after ``_MAX_PASSES`` passes deny the call. A hook that was given
    the final arguments, or produced them, is not asked again.
    Errors: a hook that raises, times out, or returns anything but ``PreToolUseResult | None``
    (including ``updated_args`` that is not a JSON object) denies the call with a reason naming
    it; registered with ``on_error="ignore"`` it is skipped instead. Both are listed in
    ``failures``.
    """
    entries = hooks.pre_tool_use(_subject(event))
    if not entries:
        return NO_PRE_OUTCOME
    decision: Decision | None = None
    reason: str | None = None
    updated: Any = None
    contexts: list[str] = []
    failures: list[str] = []
    args = event.args
    answering = _names(event.tool, args)
    judged: list[Any] = [None] * len(entries)  # the arguments each hook last judged or produced
    pending: Sequence[int] = range(len(entries))
    for passes in range(1, _MAX_PASSES + 1):
        for index in pending:
            entry = entries[index]
            if not _fires(entry, answering):
                # Not this call's hook for these arguments; asked again if a rewrite changes them.
                judged[index] = args
                continue
            current = PreToolUseEvent(event.tool_name, args, event.context, event.tool)
            try:
                reply = await _invoke(entry, current)
                if reply is not None and not isinstance(reply, PreToolUseResult):
                    raise HookFailed(
                        f"returned {type(reply).__name__}; expected PreToolUseResult or None"
                    )
                new_args = None
                if reply is not None and reply.updated_args is not None:
                    try:
                        new_args = freeze(reply.updated_args)
                    except NotJSON as exc:
                        raise HookFailed(f"updated_args is not a JSON object: {exc}") from None
            except HookFailed as failure:
                judged[index] = args
                if entry.on_error == "ignore":
                    note = f"PreToolUse hook {entry.name!r} failed and was ignored: {failure}"
                    log.warning("%s (tool %s)", note, event.tool_name)
                    failures.append(note)
                    continue
                note = f"PreToolUse hook {entry.name!r} failed: {failure}"
                log.warning("%s (tool %s); the call is denied", note, event.tool_name)
                failures.append(note)
                return PreHookOutcome(
                    Decision.DENY,
                    f"{note}. The call is denied because a failing hook fails closed.",
                    updated,
                    tuple(contexts),
                    tuple(failures),
                )
            judged[index] = args
            if reply is None:
                continue
            if reply.decision is not None:
                said = Decision.parse(reply.decision)  # already a Decision: an isinstance check
                if decision is None or said.strictness > decision.strictness:
                    decision, reason = said, reply.reason
                elif said is decision and reason is None:
                    reason = reply.reason
            context = reply.additional_context
            if context:
                context = _context(context)
            if context and (passes == 1 or context not in contexts):  # a recheck's once
                contexts.append(context)
            if new_args is not None and new_args != args:
                updated = args = judged[index] = new_args
                answering = _names(event.tool, args)
            if decision is Decision.DENY:
                return PreHookOutcome(decision, reason, updated, tuple(contexts), tuple(failures))
        pending = [i for i, seen in enumerate(judged) if seen is not args and seen != args]
        if not pending:
            break
    else:
        names = ", ".join(repr(entries[i].name) for i in pending)
        note = (
            f"the PreToolUse hooks still rewrote the arguments after {_MAX_PASSES} passes "
            f"(not yet judged on the final ones: {names})"
        )
        log.warning("%s (tool %s); the call is denied", note, event.tool_name)
        failures.append(note)
        return PreHookOutcome(
            Decision.DENY,
            f"{note}. The call is denied: every hook must judge the arguments that run.",
            updated,
            tuple(contexts),
            tuple(failures),
        )
    if decision is Decision.ALLOW:
        reason = f"{reason} ({_ALLOW_NOTE})" if reason else _ALLOW_NOTE
    return PreHookOutcome(decision, reason, updated, tuple(contexts), tuple(failures))


async def run_post_tool_use(
    hooks: Hooks, event: PostToolUseEvent, *, max_content_chars: int = DEFAULT_MAX_CONTENT_CHARS
) -> PostHookOutcome:
    """Run the PostToolUse hooks matching ``event.tool_name``; never raises (but cancellation).

    Each hook sees ``event.result`` as changed by the hooks before it: a new ``value`` (with the
    content it had: the executor renders the final value once) or new ``content``. A later value
    resets an earlier content change and the other way round keeps both. ``block`` stops the
    chain. New content and a block's feedback are bounded to ``max_content_chars`` as the
    tool's own content is (``fastgate.model.rendering``), before any later hook sees them.
    Errors: a hook that raises, times out or returns anything but ``PostToolUseResult | None``
    blocks the result with a reason naming it (the model does not see output a filter failed
    on); registered with ``on_error="ignore"`` it is logged and skipped.
    """
    names = _names(event.tool, event.args)
    entries = tuple(e for e in hooks.post_tool_use(_subject(event)) if _fires(e, names))
    if not entries:
        return NO_POST_OUTCOME
    value: Any = UNSET
    content: Any = UNSET
    contexts: list[str] = []
    current = event
    for entry in entries:
        try:
            reply = await _invoke(entry, current)
            if reply is not None and not isinstance(reply, PostToolUseResult):
                raise HookFailed(
                    f"returned {type(reply).__name__}; expected PostToolUseResult or None"
                )
        except HookFailed as failure:
            note = f"PostToolUse hook {entry.name!r} failed: {failure}"
            if entry.on_error == "ignore":
                log.warning("%s (tool %s); ignored", note, event.tool_name)
                continue
            log.warning("%s (tool %s); the result is blocked", note, event.tool_name)
            withheld = cut(f"{note}. The result is withheld.", max_content_chars)
            return PostHookOutcome(value, content, withheld, tuple(contexts))
        if reply is None:
            continue
        if reply.additional_context:
            contexts.append(_context(reply.additional_context))
        if reply.block is not None:
            feedback = reply.block or f"The result was blocked by PostToolUse hook {entry.name!r}."
            return PostHookOutcome(
                value, content, cut(feedback, max_content_chars), tuple(contexts)
            )
        if reply.value is not UNSET:
            value, content = reply.value, UNSET
            result = replace(current.result, value=value)
        elif reply.content is not UNSET:
            content = _bounded(reply.content, max_content_chars)
            result = replace(current.result, content=content)
        else:
            continue
        current = PostToolUseEvent(event.tool_name, event.args, event.context, result, event.tool)
    return PostHookOutcome(value, content, None, tuple(contexts))


def _bounded(content: str | tuple[Any, ...], max_chars: int) -> str | tuple[Any, ...]:
    """A hook's content within the budget of the tool's own: a string cut head and tail,
    blocks sharing the budget (the reply type made it one or the other)."""
    if isinstance(content, str):
        return cut(content, max_chars)
    return bounded_blocks(content, max_chars)


async def run_post_tool_use_failure(
    hooks: Hooks, event: PostToolUseFailureEvent
) -> tuple[str, ...]:
    """Run the PostToolUseFailure hooks; returns the context strings they added, in order.

    Errors: the call has already failed, so a hook that raises, times out or returns anything but
    ``str | None`` is logged and ignored. Never raises (but cancellation).
    """
    names = _names(event.tool, event.args)
    entries = [e for e in hooks.post_tool_use_failure(_subject(event)) if _fires(e, names)]
    contexts: list[str] = []
    for entry in entries:
        try:
            reply = await _invoke(entry, event)
            if reply is not None and not isinstance(reply, str):
                raise HookFailed(f"returned {type(reply).__name__}; expected str or None")
        except HookFailed as failure:
            log.warning(
                "PostToolUseFailure hook %r failed: %s (tool %s); ignored",
                entry.name,
                failure,
                event.tool_name,
            )
            continue
        if reply:
            contexts.append(_context(reply))
    return tuple(contexts)


#: Characters of one hook's additional context kept (it reaches the model beside the result).
MAX_CONTEXT_CHARS = 10_000


def _context(text: str) -> str:
    """A hook's additional context, cut head and tail to ``MAX_CONTEXT_CHARS``."""
    return text if len(text) <= MAX_CONTEXT_CHARS else cut(text, MAX_CONTEXT_CHARS)
