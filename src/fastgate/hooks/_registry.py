"""``Hooks``: the registered hooks of an executor, with a per-tool lookup cheap enough for every
call (the executor asks ``has_pre(tool_name)`` on every call)."""

from __future__ import annotations

import math
import re
import shlex
import threading
from collections.abc import Callable
from typing import Any, Final, Literal, final

import msgspec

from fastgate.hooks._command import CommandHook

DEFAULT_HOOK_TIMEOUT: Final = 30.0
"""Seconds an async Python hook may take before it counts as failed (``None``: no limit)."""

_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_CACHE_LIMIT = 4096  # distinct tool names remembered per event before the cache starts over

PreOnError = Literal["deny", "ignore"]
PostOnError = Literal["block", "ignore"]


class HookEntry(msgspec.Struct, frozen=True):
    """One registration. ``tools`` is ``None`` for ``"*"``, else the exact tool names matched."""

    fn: Callable[[Any], Any]
    name: str
    tools: frozenset[str] | None
    on_error: str
    timeout: float | None

    def matches(self, tool_name: str) -> bool:
        return self.tools is None or tool_name in self.tools


def parse_matcher(matcher: object) -> frozenset[str] | None:
    """``"*"`` → ``None`` (every tool); ``"a|b"`` → ``{"a", "b"}``. Raises on anything else."""
    if not isinstance(matcher, str):
        raise TypeError(f"matcher must be a string, got {type(matcher).__name__}")
    if matcher.strip() == "*":
        return None
    names = [part.strip() for part in matcher.split("|")]
    for name in names:
        if not _TOOL_NAME.fullmatch(name):
            raise ValueError(
                f"matcher {matcher!r}: {name!r} is not a tool name; a matcher is '*', an exact "
                "tool name, or names separated by '|' (no patterns)"
            )
    return frozenset(names)


def _check_timeout(timeout: object) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be a number of seconds or None, got {timeout!r}")
    if not (math.isfinite(timeout) and timeout > 0):
        raise ValueError(f"timeout must be positive and finite, got {timeout!r}")
    return float(timeout)


def _describe(fn: object) -> str:
    if isinstance(fn, CommandHook):
        text = shlex.join(fn.argv)
        return f"command {text if len(text) <= 80 else text[:77] + '...'}"
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    return str(name)


def _entry(
    fn: object,
    matcher: object,
    on_error: object,
    allowed: tuple[str, ...],
    timeout: object,
    name: str | None,
) -> HookEntry:
    if not callable(fn):
        raise TypeError(f"hook must be callable (a function or a CommandHook), got {fn!r}")
    if on_error not in allowed:
        choices = ", ".join(map(repr, allowed))
        raise ValueError(f"on_error must be one of {choices}, got {on_error!r}")
    if name is not None and not isinstance(name, str):
        raise TypeError("name must be a string")
    return HookEntry(
        fn=fn,
        name=name or _describe(fn),
        tools=parse_matcher(matcher),
        on_error=str(on_error),
        timeout=_check_timeout(timeout),
    )


class _EventHooks:
    """The hooks of one event: an immutable tuple plus a per-tool-name cache of matches.

    Writers (registration, under the owner's lock) replace both at once; readers never lock.
    """

    __slots__ = ("by_tool", "entries")

    def __init__(self, entries: tuple[HookEntry, ...] = ()) -> None:
        self.entries = entries
        self.by_tool: dict[str, tuple[HookEntry, ...]] = {}

    def matching(self, tool_name: str) -> tuple[HookEntry, ...]:
        found = self.by_tool.get(tool_name)
        if found is None:
            found = tuple(e for e in self.entries if e.matches(tool_name))
            if len(self.by_tool) >= _CACHE_LIMIT:
                self.by_tool.clear()
            self.by_tool[tool_name] = found
        return found


@final
class Hooks:
    """Registered hooks. ``fn`` is a sync or async callable taking the event, or a
    ``CommandHook``; hooks of one event run in registration order (see ``docs/hooks.md``).

    Sync callables run inline on the event loop and cannot be timed out: keep them quick (use an
    async hook around ``asyncio.to_thread`` for blocking work). Async hooks and command hooks
    are bounded by ``timeout`` seconds. Registration is thread-safe and takes effect for calls
    that reach the hook stage afterwards.
    """

    __slots__ = ("_failure", "_lock", "_post", "_pre", "generation")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Bumped by every registration: a caller may keep the answers of has_pre() and the
        # like for as long as it has not changed.
        self.generation = 0
        self._pre = _EventHooks()
        self._post = _EventHooks()
        self._failure = _EventHooks()

    def add_pre_tool_use(
        self,
        fn: Callable[[Any], Any],
        matcher: str = "*",
        on_error: PreOnError = "deny",
        *,
        timeout: float | None = DEFAULT_HOOK_TIMEOUT,
        name: str | None = None,
    ) -> None:
        """``fn(PreToolUseEvent) -> PreToolUseResult | None``. If it raises, times out or replies
        garbage the call is denied, or with ``on_error="ignore"`` the hook is skipped."""
        entry = _entry(fn, matcher, on_error, ("deny", "ignore"), timeout, name)
        with self._lock:
            self._pre = _EventHooks((*self._pre.entries, entry))
            self.generation += 1

    def add_post_tool_use(
        self,
        fn: Callable[[Any], Any],
        matcher: str = "*",
        *,
        on_error: PostOnError = "block",
        timeout: float | None = DEFAULT_HOOK_TIMEOUT,
        name: str | None = None,
    ) -> None:
        """``fn(PostToolUseEvent) -> PostToolUseResult | None``. If it fails the result is
        blocked (``BLOCKED_BY_HOOK``), or with ``on_error="ignore"`` the hook is skipped."""
        entry = _entry(fn, matcher, on_error, ("block", "ignore"), timeout, name)
        with self._lock:
            self._post = _EventHooks((*self._post.entries, entry))
            self.generation += 1

    def add_post_tool_use_failure(
        self,
        fn: Callable[[Any], Any],
        matcher: str = "*",
        *,
        timeout: float | None = DEFAULT_HOOK_TIMEOUT,
        name: str | None = None,
    ) -> None:
        """``fn(PostToolUseFailureEvent) -> str | None``: context to add to the failed result.
        Failures of these hooks are logged and ignored (the call has already failed)."""
        entry = _entry(fn, matcher, "ignore", ("ignore",), timeout, name)
        with self._lock:
            self._failure = _EventHooks((*self._failure.entries, entry))
            self.generation += 1

    def has_pre(self, tool_name: str) -> bool:
        """Whether any PreToolUse hook matches ``tool_name`` (a dict lookup after the first)."""
        hooks = self._pre
        return bool(hooks.entries) and bool(hooks.matching(tool_name))

    def has_post(self, tool_name: str) -> bool:
        hooks = self._post
        return bool(hooks.entries) and bool(hooks.matching(tool_name))

    def has_post_failure(self, tool_name: str) -> bool:
        hooks = self._failure
        return bool(hooks.entries) and bool(hooks.matching(tool_name))

    def pre_tool_use(self, tool_name: str) -> tuple[HookEntry, ...]:
        """The PreToolUse hooks matching ``tool_name``, in registration order."""
        return self._pre.matching(tool_name)

    def post_tool_use(self, tool_name: str) -> tuple[HookEntry, ...]:
        return self._post.matching(tool_name)

    def post_tool_use_failure(self, tool_name: str) -> tuple[HookEntry, ...]:
        return self._failure.matching(tool_name)
