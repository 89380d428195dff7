"""Content a PostToolUse hook puts in the tool's place is bounded like the tool's own: the model
never gets more than ``max_content_chars``, whoever wrote it; a hook's additional context is
bounded too."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from fastgate import ErrorCode, PostToolUseResult, PreToolUseResult, ToolExecutor
from fastgate.hooks import Hooks, PostToolUseEvent
from fastgate.hooks._runners import MAX_CONTEXT_CHARS
from tests.pipeline_kit import assert_idle, echo, executor, tool

BUDGET = 1_000
HUGE = 200_000


def replacing(*replies: Any, seen: list[Any] | None = None) -> Hooks:
    """Hooks that answer ``replies`` in order, each recording the content it was shown."""
    hooks = Hooks()
    for reply in replies:

        def hook(event: PostToolUseEvent, reply: Any = reply) -> Any:
            if seen is not None:
                seen.append(event.result.content)
            return reply

        hooks.add_post_tool_use(hook)
    return hooks


def bounded(ex: ToolExecutor) -> Any:
    return ex.execute("echo", {"text": "the tool's own output"})


def size(content: Any) -> int:
    return len(content) if isinstance(content, str) else len(json.dumps(list(content)))


@pytest.mark.parametrize(
    "content",
    [
        "x" * HUGE,
        ["y" * HUGE],
        [{"type": "text", "text": "z" * HUGE}],
        [{"type": "text", "text": f"block {i} " * 50} for i in range(2_000)],
        [[list(range(50))] * 1_000],
    ],
    ids=["text", "string-block", "text-block", "many-blocks", "nested-value"],
)
async def test_replacement_content_is_bounded_like_the_tools(content: Any) -> None:
    ex = executor(
        echo(), hooks=replacing(PostToolUseResult(content=content)), max_content_chars=BUDGET
    )
    result = await bounded(ex)
    assert result.ok, result.error
    assert size(result.content) <= BUDGET + 200, size(result.content)  # blocks' JSON overhead
    assert "cut" in json.dumps(result.content) or "left out" in json.dumps(result.content)
    assert_idle(ex)


async def test_a_later_hook_is_shown_the_bounded_content() -> None:
    seen: list[Any] = []
    hooks = replacing(PostToolUseResult(content="x" * HUGE), None, seen=seen)
    ex = executor(echo(), hooks=hooks, max_content_chars=BUDGET)
    result = await bounded(ex)
    assert result.ok and len(result.content) <= BUDGET
    assert seen[0] == "the tool's own output"
    assert len(seen[1]) <= BUDGET and "characters cut" in seen[1]


async def test_a_blocking_hooks_feedback_is_bounded() -> None:
    ex = executor(
        echo(), hooks=replacing(PostToolUseResult(block="no " * HUGE)), max_content_chars=BUDGET
    )
    result = await bounded(ex)
    assert result.error is not None and result.error.code is ErrorCode.BLOCKED_BY_HOOK
    assert len(result.content) <= BUDGET and "characters cut" in result.content
    assert_idle(ex)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path.resolve()
    (root / ".claude").mkdir()
    return root


async def test_a_claude_hooks_updated_output_is_bounded(ws: Path) -> None:
    reply = {"hookSpecificOutput": {"updatedMCPToolOutput": "w" * 100_000}}
    command = f"cat > /dev/null; printf '%s' {shlex.quote(json.dumps(reply))}"
    hook = {"type": "command", "command": command}
    settings = ws / ".claude" / "settings.json"
    settings.write_text(json.dumps({"hooks": {"PostToolUse": [{"hooks": [hook]}]}}))
    ex = executor(echo(), workspace=ws, hooks=Hooks.load(settings), max_content_chars=BUDGET)
    result = await bounded(ex)
    assert result.ok, result.error
    assert len(result.content) <= BUDGET and "characters cut" in result.content
    assert_idle(ex)


async def test_every_hooks_additional_context_is_bounded() -> None:
    """A hook's context reaches the model beside the result: each is cut head and tail, from a
    PreToolUse, a PostToolUse and a PostToolUseFailure hook alike."""
    hooks = Hooks()
    hooks.add_pre_tool_use(lambda event: PreToolUseResult(additional_context="a" * HUGE))
    hooks.add_post_tool_use(lambda event: PostToolUseResult(additional_context="b" * HUGE))
    ok = await executor(echo(), hooks=hooks).execute("echo", {"text": "x"})
    assert ok.ok and len(ok.meta.additional_context) == 2
    assert all(len(c) <= MAX_CONTEXT_CHARS for c in ok.meta.additional_context)
    assert ok.meta.additional_context[0].startswith("a") and "cut" in ok.meta.additional_context[0]

    def fails(args: Any, ctx: Any) -> Any:
        raise RuntimeError("boom")

    failing = Hooks()
    failing.add_post_tool_use_failure(lambda event: "c" * HUGE)
    failed = await executor(tool("t", fails), hooks=failing).execute("t", {"text": "x"})
    (context,) = failed.meta.additional_context
    assert not failed.ok and len(context) <= MAX_CONTEXT_CHARS and context.startswith("c")
