"""PreToolUse / PostToolUse / PostToolUseFailure runners with Python callables (SPEC §6)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from fastgate.hooks import (
    UNSET,
    Hooks,
    PostToolUseEvent,
    PostToolUseFailureEvent,
    PostToolUseResult,
    PreToolUseEvent,
    PreToolUseResult,
    run_post_tool_use,
    run_post_tool_use_failure,
    run_pre_tool_use,
)
from fastgate.model.context import ExecutionContext
from fastgate.model.decision import Decision, DecisionSource
from fastgate.model.freeze import freeze
from fastgate.model.results import ErrorCode, ResultMeta, ToolError, ToolResult
from fastgate.permissions import RuleDecision
from fastgate.permissions.merge import merge_decision

CTX = ExecutionContext(session_id="s1")


def pre_event(tool: str = "Bash", **args: Any) -> PreToolUseEvent:
    return PreToolUseEvent(tool, freeze(args or {"command": "ls"}), CTX)


def ok_result(content: Any = "out", value: Any = "out") -> ToolResult:
    meta = ResultMeta("e1", None, "Bash", "s1", 0.0, 0.0, 0.0)
    return ToolResult(ok=True, content=content, error=None, meta=meta, value=value)


def post_event(result: ToolResult | None = None) -> PostToolUseEvent:
    return PostToolUseEvent("Bash", freeze({"command": "ls"}), CTX, result or ok_result())


def failure_event() -> PostToolUseFailureEvent:
    error = ToolError(ErrorCode.TOOL_ERROR, "boom")
    return PostToolUseFailureEvent("Bash", freeze({"command": "ls"}), CTX, error)


def deciding(decision: str | None, reason: str | None = None) -> Callable[[Any], Any]:
    def hook(event: PreToolUseEvent) -> PreToolUseResult:
        return PreToolUseResult(decision=decision, reason=reason)

    hook.__qualname__ = f"decide_{decision}"
    return hook


# -- PreToolUse: decisions -----------------------------------------------------------------------


async def test_no_matching_hooks_is_no_opinion() -> None:
    hooks = Hooks()
    hooks.add_pre_tool_use(deciding("deny"), matcher="Read")
    outcome = await run_pre_tool_use(hooks, pre_event("Bash"))
    assert outcome.decision is None
    assert outcome.updated_args is None
    assert outcome.failures == ()


@pytest.mark.parametrize(
    ("decisions", "expected"),
    [
        (["allow"], Decision.ALLOW),
        (["allow", "ask"], Decision.ASK),
        (["ask", "allow"], Decision.ASK),
        (["allow", "deny", "allow"], Decision.DENY),
        ([None, "allow", None], Decision.ALLOW),
        (["ask", None, "allow", "ask"], Decision.ASK),
        ([None, None], None),
    ],
)
async def test_decisions_only_tighten(decisions: list[str | None], expected: Decision) -> None:
    hooks = Hooks()
    for decision in decisions:
        hooks.add_pre_tool_use(deciding(decision))
    outcome = await run_pre_tool_use(hooks, pre_event())
    assert outcome.decision is expected


@pytest.mark.parametrize("rule", [Decision.ASK, Decision.DENY])
async def test_hook_allow_never_loosens_the_rule_decision(rule: Decision) -> None:
    hooks = Hooks()
    hooks.add_pre_tool_use(deciding("allow"))
    outcome = await run_pre_tool_use(hooks, pre_event())
    assert outcome.decision is Decision.ALLOW
    # The executor's stage 8 merge keeps the strictest of the rule's and the hook's decisions.
    ruled = RuleDecision(rule, DecisionSource.RULE, "a rule", signature="s")
    assert merge_decision(ruled, outcome.decision, outcome.reason)[0] is rule


async def test_reason_is_the_one_given_with_the_strictest_decision() -> None:
    hooks = Hooks()
    hooks.add_pre_tool_use(deciding("allow", "fine"))
    hooks.add_pre_tool_use(deciding("ask"))
    hooks.add_pre_tool_use(deciding("ask", "risky"))
    hooks.add_pre_tool_use(deciding("ask", "second opinion"))
    outcome = await run_pre_tool_use(hooks, pre_event())
    assert (outcome.decision, outcome.reason) == (Decision.ASK, "risky")


async def test_deny_stops_the_chain() -> None:
    called: list[str] = []
    hooks = Hooks()
    hooks.add_pre_tool_use(deciding("deny", "no"))
    hooks.add_pre_tool_use(lambda event: called.append("late"))
    outcome = await run_pre_tool_use(hooks, pre_event())
    assert (outcome.decision, outcome.reason) == (Decision.DENY, "no")
    assert called == []


async def test_decision_strings_and_members_are_accepted_in_any_case() -> None:
    assert PreToolUseResult(decision="DENY").decision is Decision.DENY
    assert PreToolUseResult(decision=Decision.ASK).decision is Decision.ASK
    with pytest.raises(ValueError, match="maybe"):
        PreToolUseResult(decision="maybe")
    with pytest.raises(TypeError, match="updated_args"):
        PreToolUseResult(updated_args=["ls"])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="reason"):
        PreToolUseResult(reason=5)  # type: ignore[arg-type]


async def test_sync_async_and_callable_objects_all_count() -> None:
    class AsyncCallable:
        async def __call__(self, event: PreToolUseEvent) -> PreToolUseResult:
            return PreToolUseResult(additional_context="object")

    async def async_hook(event: PreToolUseEvent) -> PreToolUseResult:
        await asyncio.sleep(0)
        return PreToolUseResult(additional_context="async")

    hooks = Hooks()
    hooks.add_pre_tool_use(lambda event: PreToolUseResult(additional_context="sync"))
    hooks.add_pre_tool_use(async_hook)
    hooks.add_pre_tool_use(AsyncCallable())
    outcome = await run_pre_tool_use(hooks, pre_event())
    assert outcome.additional_context == ("sync", "async", "object")
    assert outcome.decision is None


# -- PreToolUse: rewritten arguments -------------------------------------------------------------


async def test_rewrites_chain_and_are_snapshotted() -> None:
    kept: list[dict[str, Any]] = []
    seen: list[Any] = []

    def first(event: PreToolUseEvent) -> PreToolUseResult | None:
        if "-la" in event.args["command"]:  # asked again about the final arguments: fine
            return None
        new = {"command": event.args["command"] + " -la", "opts": {"depth": [1]}}
        kept.append(new)
        return PreToolUseResult(updated_args=new)

    def second(event: PreToolUseEvent) -> PreToolUseResult:
        seen.append(event.args)
        kept[0]["command"] = "rm -rf /"  # the first hook goes on mutating what it returned
        kept[0]["opts"]["depth"].append(2)
        command = event.args["command"] + " /"
        return PreToolUseResult(updated_args={**event.args, "command": command})

    hooks = Hooks()
    hooks.add_pre_tool_use(first)
    hooks.add_pre_tool_use(second)
    hooks.add_pre_tool_use(lambda event: seen.append(event.args))
    original = pre_event(command="ls")
    outcome = await run_pre_tool_use(hooks, original)

    assert seen[0] == {"command": "ls -la", "opts": {"depth": [1]}}
    assert outcome.updated_args == {"command": "ls -la /", "opts": {"depth": [1]}}
    assert seen[1] == outcome.updated_args
    assert original.args == {"command": "ls"}
    with pytest.raises(TypeError):
        outcome.updated_args["command"] = "whoami"
    with pytest.raises(TypeError):
        outcome.updated_args["opts"]["depth"].append(3)


def _no_rm(verdict: str) -> Callable[[Any], Any]:
    """A guard that judges whatever command it is given."""

    def guard(event: PreToolUseEvent) -> PreToolUseResult | None:
        if "rm" in event.args["command"]:
            return PreToolUseResult(decision=verdict, reason=f"guard: {event.args['command']}")
        return None

    return guard


def _rewrite_to(command: str) -> Callable[[Any], Any]:
    def rewrite(event: PreToolUseEvent) -> PreToolUseResult:
        return PreToolUseResult(decision="allow", updated_args={**event.args, "command": command})

    return rewrite


@pytest.mark.parametrize("verdict", ["deny", "ask"])
@pytest.mark.parametrize(
    "rewriters",
    [
        [_rewrite_to("rm -rf data")],
        [lambda e: PreToolUseResult(updated_args={"command": "rm -rf data"})],
        [
            lambda e: (
                PreToolUseResult(updated_args={"command": "echo step"})
                if e.args["command"] == "echo hi"
                else None
            ),
            lambda e: None,
            _rewrite_to("rm -rf data"),
        ],
    ],
)
async def test_a_hook_before_a_rewrite_judges_the_arguments_that_run(
    verdict: str, rewriters: list[Callable[[Any], Any]]
) -> None:
    # The guard saw "echo hi" and had no opinion: it must also judge what runs instead.
    hooks = Hooks()
    hooks.add_pre_tool_use(_no_rm(verdict))
    for rewriter in rewriters:
        hooks.add_pre_tool_use(rewriter)
    outcome = await run_pre_tool_use(hooks, pre_event(command="echo hi"))
    assert outcome.decision is Decision.parse(verdict)
    assert outcome.reason == "guard: rm -rf data"
    if verdict == "ask":
        assert outcome.updated_args == {"command": "rm -rf data"}


async def test_a_recheck_that_rewrites_again_is_judged_again_and_endless_rewrites_deny() -> None:
    asked: list[str] = []

    def sanitize(event: PreToolUseEvent) -> PreToolUseResult | None:
        asked.append(event.args["command"])
        command = event.args["command"].replace(" --force", "")
        return PreToolUseResult(updated_args={"command": command})

    hooks = Hooks()
    hooks.add_pre_tool_use(sanitize)  # idempotent: rewrites only what still needs it
    hooks.add_pre_tool_use(_rewrite_to("git push --force"))
    outcome = await run_pre_tool_use(hooks, pre_event(command="git push"))
    # the sanitizer, asked about the forced push, takes "--force" out; the rewriter puts it back:
    # they never agree on what runs
    assert outcome.decision is Decision.DENY
    assert "still rewrote the arguments after" in (outcome.reason or "")
    assert asked[:2] == ["git push", "git push --force"]

    converging = Hooks()
    converging.add_pre_tool_use(sanitize)
    converging.add_pre_tool_use(_rewrite_to("echo tidy"))  # same output whatever it is given
    settled = await run_pre_tool_use(converging, pre_event(command="echo a --force"))
    assert settled.decision is Decision.ALLOW and settled.updated_args == {"command": "echo tidy"}

    endless = Hooks()
    endless.add_pre_tool_use(lambda e: PreToolUseResult(updated_args={"command": "a"}))
    endless.add_pre_tool_use(lambda e: PreToolUseResult(updated_args={"command": "b"}))
    refused = await run_pre_tool_use(endless, pre_event())
    assert refused.decision is Decision.DENY
    assert "every hook must judge the arguments that run" in (refused.reason or "")


async def test_hooks_given_the_final_arguments_run_once() -> None:
    calls: list[str] = []

    def record(label: str) -> Callable[[Any], Any]:
        def hook(event: PreToolUseEvent) -> PreToolUseResult | None:
            calls.append(f"{label}:{event.args['command']}")
            return PreToolUseResult(additional_context=f"{label} context")

        return hook

    hooks = Hooks()
    hooks.add_pre_tool_use(record("before"))
    hooks.add_pre_tool_use(_rewrite_to("echo new"))
    hooks.add_pre_tool_use(record("after"))
    hooks.add_pre_tool_use(lambda e: PreToolUseResult(updated_args=dict(e.args)))  # the same
    outcome = await run_pre_tool_use(hooks, pre_event(command="echo old"))
    assert calls == ["before:echo old", "after:echo new", "before:echo new"]
    assert outcome.additional_context == ("before context", "after context")


async def test_no_rewrite_leaves_updated_args_none() -> None:
    hooks = Hooks()
    hooks.add_pre_tool_use(deciding("allow"))
    assert (await run_pre_tool_use(hooks, pre_event())).updated_args is None


# -- PreToolUse: failing hooks fail closed --------------------------------------------------------


def _raises(event: PreToolUseEvent) -> None:
    raise RuntimeError("hook bug")


async def _async_raises(event: PreToolUseEvent) -> None:
    await asyncio.sleep(0)
    raise KeyError("missing")


async def _hangs(event: PreToolUseEvent) -> None:
    await asyncio.Event().wait()


async def _cancels_itself(event: PreToolUseEvent) -> None:
    raise asyncio.CancelledError


def _returns_dict(event: PreToolUseEvent) -> dict[str, str]:
    return {"decision": "allow"}


def _returns_string(event: PreToolUseEvent) -> str:
    return "allow"


def _unknown_decision(event: PreToolUseEvent) -> PreToolUseResult:
    return PreToolUseResult(decision="yes please")


def _args_not_an_object(event: PreToolUseEvent) -> PreToolUseResult:
    return PreToolUseResult(updated_args="ls")  # type: ignore[arg-type]


def _args_not_json(event: PreToolUseEvent) -> PreToolUseResult:
    return PreToolUseResult(updated_args={"command": {"a", "set"}})


def _args_bad_key(event: PreToolUseEvent) -> PreToolUseResult:
    return PreToolUseResult(updated_args={"command": {1: "x"}})


BAD_HOOKS = [
    (_raises, "RuntimeError"),
    (_async_raises, "KeyError"),
    (_hangs, "timed out"),
    (_cancels_itself, "CancelledError"),
    (_returns_dict, "returned dict"),
    (_returns_string, "returned str"),
    (_unknown_decision, "yes please"),
    (_args_not_an_object, "updated_args"),
    (_args_not_json, "updated_args"),
    (_args_bad_key, "updated_args"),
]


@pytest.mark.parametrize(("hook", "why"), BAD_HOOKS)
async def test_a_failing_hook_denies_naming_itself(hook: Callable[[Any], Any], why: str) -> None:
    hooks = Hooks()
    hooks.add_pre_tool_use(deciding("allow"))
    hooks.add_pre_tool_use(hook, timeout=0.05)
    outcome = await run_pre_tool_use(hooks, pre_event())
    assert outcome.decision is Decision.DENY
    assert outcome.reason is not None
    assert hook.__name__ in outcome.reason and why in outcome.reason
    assert len(outcome.failures) == 1 and hook.__name__ in outcome.failures[0]


@pytest.mark.parametrize(("hook", "why"), BAD_HOOKS)
async def test_on_error_ignore_skips_the_hook(hook: Callable[[Any], Any], why: str) -> None:
    hooks = Hooks()
    hooks.add_pre_tool_use(hook, on_error="ignore", timeout=0.05)
    hooks.add_pre_tool_use(deciding("ask", "later hook"))
    outcome = await run_pre_tool_use(hooks, pre_event())
    assert (outcome.decision, outcome.reason) == (Decision.ASK, "later hook")
    assert len(outcome.failures) == 1
    assert "ignored" in outcome.failures[0] and why in outcome.failures[0]


async def test_failure_after_a_rewrite_still_denies() -> None:
    hooks = Hooks()
    hooks.add_pre_tool_use(lambda e: PreToolUseResult(decision="allow", updated_args={"a": 1}))
    hooks.add_pre_tool_use(_raises)
    outcome = await run_pre_tool_use(hooks, pre_event())
    assert outcome.decision is Decision.DENY


async def test_cancelling_the_awaiting_task_propagates() -> None:
    started = asyncio.Event()

    async def slow(event: PreToolUseEvent) -> None:
        started.set()
        await asyncio.Event().wait()

    hooks = Hooks()
    hooks.add_pre_tool_use(slow)
    task = asyncio.create_task(run_pre_tool_use(hooks, pre_event()))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_timeout_none_means_no_limit_for_that_hook() -> None:
    gate = asyncio.Event()

    async def waits(event: PreToolUseEvent) -> PreToolUseResult:
        await gate.wait()
        return PreToolUseResult(decision="ask")

    hooks = Hooks()
    hooks.add_pre_tool_use(waits, timeout=None)
    task = asyncio.create_task(run_pre_tool_use(hooks, pre_event()))
    await asyncio.sleep(0)
    gate.set()
    assert (await task).decision is Decision.ASK


# -- PostToolUse ---------------------------------------------------------------------------------


def test_value_and_content_together_raise_type_error() -> None:
    with pytest.raises(TypeError, match="not both"):
        PostToolUseResult(value=1, content="1")
    with pytest.raises(TypeError, match="content"):
        PostToolUseResult(content=5)
    assert PostToolUseResult(content=["a", "b"]).content == ("a", "b")
    reply = PostToolUseResult()
    assert reply.value is UNSET and reply.content is UNSET and reply.block is None


async def test_post_chain_sees_earlier_changes() -> None:
    seen: list[tuple[Any, Any]] = []

    def remember(event: PostToolUseEvent) -> None:
        seen.append((event.result.value, event.result.content))

    hooks = Hooks()
    hooks.add_post_tool_use(lambda e: PostToolUseResult(content="redacted"))
    hooks.add_post_tool_use(remember)
    hooks.add_post_tool_use(lambda e: PostToolUseResult(value={"n": 1}, additional_context="v"))
    hooks.add_post_tool_use(remember)
    outcome = await run_post_tool_use(hooks, post_event())
    assert seen == [("out", "redacted"), ({"n": 1}, "redacted")]
    # A later value change supersedes the earlier content: the executor renders the value.
    assert outcome.value == {"n": 1} and outcome.content is UNSET
    assert outcome.block is None and outcome.additional_context == ("v",)


async def test_content_after_value_keeps_both() -> None:
    hooks = Hooks()
    hooks.add_post_tool_use(lambda e: PostToolUseResult(value=42))
    hooks.add_post_tool_use(lambda e: PostToolUseResult(content="forty-two"))
    outcome = await run_post_tool_use(hooks, post_event())
    assert (outcome.value, outcome.content) == (42, "forty-two")


async def test_no_post_hooks_keeps_everything() -> None:
    outcome = await run_post_tool_use(Hooks(), post_event())
    assert outcome.value is UNSET and outcome.content is UNSET and outcome.block is None


async def test_block_stops_the_chain() -> None:
    called: list[str] = []
    hooks = Hooks()
    hooks.add_post_tool_use(lambda e: PostToolUseResult(block="contains a secret"))
    hooks.add_post_tool_use(lambda e: called.append("late"))
    outcome = await run_post_tool_use(hooks, post_event())
    assert outcome.block == "contains a secret"
    assert called == []


async def test_empty_block_text_still_blocks() -> None:
    def blocker(event: PostToolUseEvent) -> PostToolUseResult:
        return PostToolUseResult(block="")

    hooks = Hooks()
    hooks.add_post_tool_use(blocker)
    outcome = await run_post_tool_use(hooks, post_event())
    assert outcome.block is not None and "blocker" in outcome.block


def _post_raises(event: PostToolUseEvent) -> None:
    raise ValueError("filter bug")


def _post_wrong_type(event: PostToolUseEvent) -> str:
    return "fine"


async def _post_hangs(event: PostToolUseEvent) -> None:
    await asyncio.Event().wait()


@pytest.mark.parametrize("hook", [_post_raises, _post_wrong_type, _post_hangs])
async def test_failing_post_hook_blocks_or_is_ignored(hook: Callable[[Any], Any]) -> None:
    hooks = Hooks()
    hooks.add_post_tool_use(hook, timeout=0.05)
    outcome = await run_post_tool_use(hooks, post_event())
    assert outcome.block is not None and hook.__name__ in outcome.block

    ignoring = Hooks()
    ignoring.add_post_tool_use(hook, on_error="ignore", timeout=0.05)
    ignoring.add_post_tool_use(lambda e: PostToolUseResult(content="after"))
    outcome = await run_post_tool_use(ignoring, post_event())
    assert outcome.block is None and outcome.content == "after"


# -- PostToolUseFailure --------------------------------------------------------------------------


async def test_failure_hooks_only_add_context_and_their_errors_are_ignored() -> None:
    async def hint(event: PostToolUseFailureEvent) -> str:
        return f"hint for {event.error.code}"

    hooks = Hooks()
    hooks.add_post_tool_use_failure(hint)
    hooks.add_post_tool_use_failure(_raises)
    hooks.add_post_tool_use_failure(lambda e: PostToolUseResult(block="no"))  # wrong type
    hooks.add_post_tool_use_failure(_hangs, timeout=0.05)
    hooks.add_post_tool_use_failure(lambda e: None)
    hooks.add_post_tool_use_failure(lambda e: "second", matcher="Bash")
    hooks.add_post_tool_use_failure(lambda e: "other tool", matcher="Read")
    contexts = await run_post_tool_use_failure(hooks, failure_event())
    assert contexts == ("hint for TOOL_ERROR", "second")
