"""Hooks (SPEC §6): Python callables or external commands around each tool call.

``Hooks`` holds the registrations (``Hooks.load`` reads them from Claude Code settings files);
the executor calls ``run_pre_tool_use`` (stage 7), ``run_post_tool_use`` and
``run_post_tool_use_failure`` (stage 13). docs/hooks.md has the API, matchers, both command-hook
protocols (fastgate's and Claude Code's) and what every kind of failure does.
"""

from __future__ import annotations

from fastgate.hooks._command import DEFAULT_COMMAND_TIMEOUT as DEFAULT_COMMAND_TIMEOUT
from fastgate.hooks._command import MAX_OUTPUT_BYTES as MAX_OUTPUT_BYTES
from fastgate.hooks._command import CommandHook as CommandHook
from fastgate.hooks._command import HookExited as HookExited
from fastgate.hooks._command import HookFailed as HookFailed
from fastgate.hooks._registry import DEFAULT_HOOK_TIMEOUT as DEFAULT_HOOK_TIMEOUT
from fastgate.hooks._registry import HookEntry as HookEntry
from fastgate.hooks._registry import Hooks as Hooks
from fastgate.hooks._runners import run_post_tool_use as run_post_tool_use
from fastgate.hooks._runners import run_post_tool_use_failure as run_post_tool_use_failure
from fastgate.hooks._runners import run_pre_tool_use as run_pre_tool_use
from fastgate.hooks._types import UNSET as UNSET
from fastgate.hooks._types import PostHookOutcome as PostHookOutcome
from fastgate.hooks._types import PostToolUseEvent as PostToolUseEvent
from fastgate.hooks._types import PostToolUseFailureEvent as PostToolUseFailureEvent
from fastgate.hooks._types import PostToolUseResult as PostToolUseResult
from fastgate.hooks._types import PreHookOutcome as PreHookOutcome
from fastgate.hooks._types import PreToolUseEvent as PreToolUseEvent
from fastgate.hooks._types import PreToolUseResult as PreToolUseResult
from fastgate.hooks._types import UnsetType as UnsetType

__all__ = (
    "DEFAULT_COMMAND_TIMEOUT",
    "DEFAULT_HOOK_TIMEOUT",
    "MAX_OUTPUT_BYTES",
    "UNSET",
    "CommandHook",
    "HookEntry",
    "HookExited",
    "HookFailed",
    "Hooks",
    "PostHookOutcome",
    "PostToolUseEvent",
    "PostToolUseFailureEvent",
    "PostToolUseResult",
    "PreHookOutcome",
    "PreToolUseEvent",
    "PreToolUseResult",
    "UnsetType",
    "run_post_tool_use",
    "run_post_tool_use_failure",
    "run_pre_tool_use",
)
