"""``Hooks`` registration: matchers, validation, the per-tool lookup the executor relies on."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from fastgate.hooks import CommandHook, Hooks, PreToolUseEvent, PreToolUseResult, run_pre_tool_use
from fastgate.model.context import ExecutionContext
from fastgate.model.freeze import freeze


def noop(event: Any) -> None:
    return None


@pytest.mark.parametrize(
    ("matcher", "matches", "misses"),
    [
        ("*", ["Bash", "Read", "mcp__srv__tool"], []),
        ("", ["Bash", "Read", "mcp__srv__tool"], []),
        ("Bash", ["Bash"], ["bash", "Bash2", "Read"]),
        ("Bash|Read", ["Bash", "Read"], ["Write", "Bash|Read"]),
        (" Edit | Write ", ["Edit", "Write"], ["Read"]),
        # Claude Code's lists joined by "," too.
        ("Edit, Write", ["Edit", "Write"], ["Read", "Edit, Write"]),
        ("Edit,Write", ["Edit", "Write"], ["Read"]),
        ("Bash, Edit | Write", ["Bash", "Edit", "Write"], ["Read"]),
        # A regular expression is searched for anywhere in the name, as Claude Code does.
        ("mcp__github__.*", ["mcp__github__issue", "mcp__github__"], ["mcp__git__x", "Bash"]),
        ("Notebook.*", ["NotebookEdit", "MyNotebook"], ["Bash", "notebook"]),
        ("^Bash$", ["Bash"], ["Bash2", "MyBash"]),
        ("Ba*", ["Bash", "B", "xBy"], ["Read"]),
        ("Notebook(Edit|Read)", ["NotebookEdit", "NotebookRead"], ["Notebook", "Edit"]),
    ],
)
def test_matchers(matcher: str, matches: list[str], misses: list[str]) -> None:
    hooks = Hooks()
    hooks.add_pre_tool_use(noop, matcher=matcher)
    hooks.add_post_tool_use(noop, matcher=matcher)
    hooks.add_post_tool_use_failure(noop, matcher=matcher)
    for name in matches:
        assert hooks.has_pre(name) and hooks.has_post(name) and hooks.has_post_failure(name)
    for name in misses:
        assert not (hooks.has_pre(name) or hooks.has_post(name) or hooks.has_post_failure(name))


@pytest.mark.parametrize(
    "matcher",
    [
        *("Bash|", "a||b", "a b", "x" * 65),  # names joined by "|": an empty or a bad name
        *("Bash,", ",Bash", "Edit,,Write", "Edit, |Write"),  # or by ",": an empty name
        *("Bash(ls)", "Bash(git push:*)"),  # a rule's syntax would match nothing
        *("a|*", "(", "[a-", "." * 1001),  # invalid or oversized regular expressions
    ],
)
def test_bad_matchers_are_refused_at_registration(matcher: str) -> None:
    hooks = Hooks()
    with pytest.raises(ValueError, match="matcher"):
        hooks.add_pre_tool_use(noop, matcher=matcher)
    assert not hooks.has_pre("Bash")


@pytest.mark.parametrize(
    "matcher", ["^(a+)+$", "^(a|a)*$", "(x+x+)+y", "^([a-z_]+)*$", "^(\\w+\\s?)*$"]
)
def test_a_backtracking_matcher_answers_at_once(matcher: str) -> None:
    # A repository's settings choose the matcher, an MCP server a long tool name: Python's
    # backtracking engine would take 2**60 steps on this name.
    hooks = Hooks()
    hooks.add_pre_tool_use(noop, matcher=matcher)
    name = "a" * 60 + "!"
    started = time.monotonic()
    assert not hooks.has_pre(name)
    assert time.monotonic() - started < 1.0
    assert hooks.has_pre("a" * 60) is (matcher != "(x+x+)+y")


@pytest.mark.parametrize("matcher", ["(?=Bash)Bash", "(?<!mcp)__x", "(a)\\1"])
def test_a_matcher_only_a_backtracking_engine_can_run_is_refused(matcher: str) -> None:
    with pytest.raises(ValueError, match="RE2 can run"):
        Hooks().add_pre_tool_use(noop, matcher=matcher)


def test_bad_registrations_are_refused() -> None:
    hooks = Hooks()
    with pytest.raises(TypeError, match="matcher"):
        hooks.add_pre_tool_use(noop, matcher=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="callable"):
        hooks.add_pre_tool_use("rm -rf /")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="on_error"):
        hooks.add_pre_tool_use(noop, on_error="allow")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="on_error"):
        hooks.add_post_tool_use(noop, on_error="deny")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout"):
        hooks.add_pre_tool_use(noop, timeout=0)
    with pytest.raises(ValueError, match="timeout"):
        hooks.add_post_tool_use(noop, timeout=float("inf"))
    with pytest.raises(TypeError, match="timeout"):
        hooks.add_post_tool_use_failure(noop, timeout="1")  # type: ignore[arg-type]
    assert not (hooks.has_pre("Bash") or hooks.has_post("Bash") or hooks.has_post_failure("Bash"))


def test_command_hook_arguments_are_validated() -> None:
    with pytest.raises(TypeError, match="list of strings"):
        CommandHook("python3 hook.py")
    with pytest.raises(TypeError, match="non-empty"):
        CommandHook([])
    with pytest.raises(TypeError, match="non-empty"):
        CommandHook(["python3", 1])  # type: ignore[list-item,unused-ignore]
    with pytest.raises(ValueError, match="timeout"):
        CommandHook(["true"], timeout=0)
    with pytest.raises(ValueError, match="max_output_bytes"):
        CommandHook(["true"], max_output_bytes=0)
    hooks = Hooks()
    hooks.add_pre_tool_use(CommandHook(["true"]), matcher="Bash")
    assert hooks.has_pre("Bash")


def test_lookup_is_invalidated_by_registration() -> None:
    hooks = Hooks()
    assert not hooks.has_pre("Bash")
    hooks.add_pre_tool_use(noop, matcher="Read")
    assert not hooks.has_pre("Bash")  # now cached as "no hooks for Bash"
    hooks.add_pre_tool_use(noop, matcher="Bash")
    assert hooks.has_pre("Bash")
    first = hooks.pre_tool_use("Bash")
    assert hooks.pre_tool_use("Bash") is first  # computed once per tool name
    assert not hooks.has_post("Bash") and not hooks.has_post_failure("Bash")


def test_many_tool_names_keep_the_cache_bounded() -> None:
    hooks = Hooks()
    hooks.add_pre_tool_use(noop, matcher="Bash")
    for i in range(10_000):
        assert not hooks.has_pre(f"tool{i}")
    assert hooks.has_pre("Bash")
    assert len(hooks._pre.by_tool) <= 4096


async def test_hooks_added_later_run_in_registration_order() -> None:
    order: list[str] = []
    hooks = Hooks()

    def recorder(name: str) -> Callable[[Any], None]:
        return lambda event: order.append(name)

    for name in ("a", "b", "c"):
        hooks.add_pre_tool_use(recorder(name), matcher="Bash")
        hooks.add_pre_tool_use(lambda e: order.append("never"), matcher="Read")
    event = PreToolUseEvent("Bash", freeze({}), ExecutionContext())
    await run_pre_tool_use(hooks, event)
    assert order == ["a", "b", "c"]


async def test_name_defaults_and_overrides_appear_in_reasons() -> None:
    hooks = Hooks()
    hooks.add_pre_tool_use(lambda e: PreToolUseResult(decision="bogus"), name="policy-v2")
    event = PreToolUseEvent("Bash", freeze({}), ExecutionContext())
    outcome = await run_pre_tool_use(hooks, event)
    assert outcome.reason is not None and "'policy-v2'" in outcome.reason
