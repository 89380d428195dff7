"""``Hooks``: the registered hooks of an executor, with a per-tool lookup cheap enough for every
call (the executor asks ``has_pre(tool)`` once per tool definition and registration)."""

from __future__ import annotations

import math
import re
import shlex
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, Literal, final

import msgspec

from fastgate.hooks._claude import hook_names
from fastgate.hooks._command import CommandHook

if TYPE_CHECKING:
    import os

    from fastgate.tools import ToolDefinition

DEFAULT_HOOK_TIMEOUT: Final = 30.0
"""Seconds an async Python hook may take before it counts as failed (``None``: no limit)."""

_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
# Claude Code reads a matcher made of these characters as tool names joined by "|" or ",",
# anything else as a regular expression.
_NAMES_ONLY = re.compile(r"[A-Za-z0-9_|,\s-]+")
_NAME_SEPARATOR = re.compile(r"[|,]")
# "Bash(git push:*)" is a rule's syntax; as a regular expression it would silently match nothing.
# (A group of alternatives, "Notebook(Edit|Read)", is a regular expression.)
_RULE_LIKE = re.compile(r"\s*[A-Za-z0-9_-]+\([^|]*\)\s*", re.DOTALL)
_MAX_PATTERN = 1000
_CACHE_LIMIT = 4096  # distinct tools remembered per event before the cache starts over

PreOnError = Literal["deny", "ignore"]
PostOnError = Literal["block", "ignore"]


class HookEntry(msgspec.Struct, frozen=True):
    """One registration. ``tools``: the exact names matched (``None`` when every tool matches or
    ``pattern`` decides); ``pattern``: a compiled regular expression searched for in each name."""

    fn: Callable[[Any], Any]
    name: str
    tools: frozenset[str] | None
    on_error: str
    timeout: float | None
    pattern: Any = None  # an RE2 pattern (``search(name)``)

    def matches(self, tool: str | ToolDefinition) -> bool:
        """Whether this hook runs for ``tool``: a name, or a definition, which answers to its
        registered name and to each of its ``rule_names`` (SPEC §6.5)."""
        return self.matches_names(names_of(tool))

    def matches_names(self, names: tuple[str, ...]) -> bool:
        if self.pattern is not None:
            return any(self.pattern.search(name) for name in names)
        tools = self.tools
        return tools is None or any(name in tools for name in names)


def names_of(tool: str | ToolDefinition) -> tuple[str, ...]:
    """The names a matcher is tested against: the registered name, then the rule names (and
    ``Write`` for the built-in ``apply_patch``, which creates and deletes files)."""
    if isinstance(tool, str):
        return (tool,)
    return hook_names(tool)


def parse_matcher(matcher: object) -> frozenset[str] | Any | None:
    """A matcher as Claude Code reads it: ``""`` or ``"*"`` → ``None`` (every tool); tool names
    joined by ``|`` or ``,`` → the set of names; anything else → a regular expression, searched for
    anywhere in a name (``"mcp__github__.*"``; anchor it with ``^...$``), run on RE2: a
    repository's matcher cannot make the server backtrack for ever. Raises on a malformed one:
    an empty alternative, a rule's ``Tool(specifier)`` syntax, an invalid expression or one RE2
    cannot run (lookaround, back-references)."""
    if not isinstance(matcher, str):
        raise TypeError(f"matcher must be a string, got {type(matcher).__name__}")
    text = matcher.strip()
    if text in ("", "*"):
        return None
    if _NAMES_ONLY.fullmatch(text):
        names = [part.strip() for part in _NAME_SEPARATOR.split(text)]
        for name in names:
            if not _TOOL_NAME.fullmatch(name):
                raise ValueError(
                    f"matcher {matcher!r}: {name!r} is not a tool name; a matcher is '*', tool "
                    "names joined by '|' or ',', or a regular expression"
                )
        return frozenset(names)
    if _RULE_LIKE.fullmatch(text):
        raise ValueError(
            f"matcher {matcher!r}: a matcher names tools, it takes no specifier (that is a "
            "permission rule's syntax); match the tool and look at its arguments in the hook"
        )
    if len(text) > _MAX_PATTERN:
        raise ValueError(f"matcher: a regular expression longer than {_MAX_PATTERN} characters")
    import re2

    options = re2.Options()
    options.log_errors = False
    try:
        return re2.compile(text, options)
    except re2.error as exc:
        why = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else exc
        raise ValueError(
            f"matcher {matcher!r} is not a regular expression RE2 can run: {why}"
        ) from None


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
    parsed = parse_matcher(matcher)
    return HookEntry(
        fn=fn,
        name=name or _describe(fn),
        tools=parsed if isinstance(parsed, frozenset) else None,
        on_error=str(on_error),
        timeout=_check_timeout(timeout),
        pattern=None if parsed is None or isinstance(parsed, frozenset) else parsed,
    )


class _EventHooks:
    """The hooks of one event: an immutable tuple plus a per-tool cache of matches.

    The cache is keyed by the names a tool answers to (a name alone for a string), so two
    definitions that answer to the same names share an answer and no definition is kept alive.
    Writers (registration, under the owner's lock) replace both at once; readers never lock.
    """

    __slots__ = ("by_tool", "entries")

    def __init__(self, entries: tuple[HookEntry, ...] = ()) -> None:
        self.entries = entries
        self.by_tool: dict[object, tuple[HookEntry, ...]] = {}

    def matching(self, tool: str | ToolDefinition) -> tuple[HookEntry, ...]:
        names = names_of(tool)
        found = self.by_tool.get(names)
        if found is None:
            found = tuple(e for e in self.entries if e.matches_names(names))
            if len(self.by_tool) >= _CACHE_LIMIT:
                self.by_tool.clear()
            self.by_tool[names] = found
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

    __slots__ = ("_failure", "_lock", "_post", "_pre", "_warnings", "generation")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._warnings: tuple[str, ...] = ()
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

    @classmethod
    def load(
        cls,
        *settings_paths: str | os.PathLike[str],
        workspace: str | os.PathLike[str] | None = None,
    ) -> Hooks:
        """The hooks of Claude Code settings files (their ``hooks`` key), in file order (SPEC
        §6.5). Each command runs as ``sh -c`` from the call's workspace root, speaking Claude
        Code's protocol (``CommandHook(..., protocol="claude")``). The files each command names
        are pinned now in ``workspace`` (the workspace the calls will run in) and in the
        workspace of every file read. Events and hook types fastgate does not run are
        ``FastgateConfigWarning``s naming the file, listed by ``warnings()``. ``ValueError``
        naming the file for a JSON error or a malformed ``hooks`` section; nothing is
        half-loaded."""
        from fastgate.hooks._settings import load_settings_hooks

        hooks = cls()
        loaded = load_settings_hooks(settings_paths, workspace)
        for setting in loaded.hooks:
            add = {
                "PreToolUse": hooks.add_pre_tool_use,
                "PostToolUse": hooks.add_post_tool_use,
                "PostToolUseFailure": hooks.add_post_tool_use_failure,
            }[setting.event]
            # The command bounds itself with its own timeout (Claude Code's default: 60 s).
            add(setting.hook, setting.matcher, timeout=None, name=setting.name)
        hooks._warnings = loaded.warnings
        return hooks

    def warnings(self) -> list[str]:
        """What ``load`` read and does not act on (unsupported events, hook types, keys), each
        naming its file. Empty for hooks registered in code."""
        return list(self._warnings)

    def has_pre(self, tool: str | ToolDefinition) -> bool:
        """Whether any PreToolUse hook matches ``tool``: a definition (matched by its name and
        its ``rule_names``) or a name. A dict lookup after the first time."""
        hooks = self._pre
        return bool(hooks.entries) and bool(hooks.matching(tool))

    def has_post(self, tool: str | ToolDefinition) -> bool:
        hooks = self._post
        return bool(hooks.entries) and bool(hooks.matching(tool))

    def has_post_failure(self, tool: str | ToolDefinition) -> bool:
        hooks = self._failure
        return bool(hooks.entries) and bool(hooks.matching(tool))

    def pre_tool_use(self, tool: str | ToolDefinition) -> tuple[HookEntry, ...]:
        """The PreToolUse hooks matching ``tool``, in registration order."""
        return self._pre.matching(tool)

    def post_tool_use(self, tool: str | ToolDefinition) -> tuple[HookEntry, ...]:
        return self._post.matching(tool)

    def post_tool_use_failure(self, tool: str | ToolDefinition) -> tuple[HookEntry, ...]:
        return self._failure.matching(tool)
