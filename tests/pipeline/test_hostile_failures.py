"""User code that fails badly still gets a result: an exception whose message cannot be read
(from a tool, a guard, a hook, an approver, a renderer) and a malformed ``Failure`` are named,
recorded in history, and hold nothing; a batch goes on past them (SPEC §9.3, §21)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from fastgate import (
    ApprovalResponse,
    ErrorCode,
    ExecutionContext,
    Failure,
    Output,
    PermissionConfig,
    ToolCall,
)
from fastgate.hooks import Hooks
from tests.pipeline_kit import NOTHING, assert_idle, executor, tool


class RaisingMessage(Exception):
    def __str__(self) -> str:
        raise RuntimeError("the message itself fails")


class TextlessMessage(Exception):
    def __str__(self) -> Any:
        return 42  # str() of it raises TypeError


class RecursiveMessage(Exception):
    def __str__(self) -> str:
        return str(self)


UNREADABLE = [RaisingMessage, TextlessMessage, RecursiveMessage]


def fails_with(kind: type[Exception]) -> Any:
    def body(args: Any, ctx: Any) -> Any:
        raise kind()

    return body


@pytest.mark.parametrize("kind", UNREADABLE, ids=lambda k: k.__name__)
async def test_a_tool_raising_an_unreadable_exception_gets_tool_error(
    kind: type[Exception],
) -> None:
    ex = executor(tool("bad", fails_with(kind), NOTHING))
    result = await ex.execute("bad", {})
    assert result.error is not None and result.error.code is ErrorCode.TOOL_ERROR
    assert f"bad raised {kind.__name__}" in result.error.message
    assert [entry.meta.execution_id for entry in ex.history()] == [result.meta.execution_id]
    assert_idle(ex)


@pytest.mark.parametrize("kind", UNREADABLE, ids=lambda k: k.__name__)
async def test_a_batch_goes_on_past_an_unreadable_exception(kind: type[Exception]) -> None:
    ran: list[str] = []

    def fine(args: Any, ctx: Any) -> str:
        ran.append("fine")
        return "ok"

    ex = executor(tool("bad", fails_with(kind), NOTHING), tool("fine", fine, NOTHING))
    calls = [ToolCall("1", "bad", {}), ToolCall("2", "fine", {}), ToolCall("3", "fine", {})]
    results = await ex.execute_parallel(calls, ExecutionContext(session_id="s1"))
    assert [r.ok for r in results] == [False, True, True]
    assert ran == ["fine", "fine"]
    assert_idle(ex)


MALFORMED = {
    "a message that is None": lambda: Failure(None),  # type: ignore[arg-type]
    "a message that is a number": lambda: Failure(123),  # type: ignore[arg-type]
    "a code that is a number": lambda: Failure("no", code=5),  # type: ignore[arg-type]
    "details that are a list": lambda: Failure("no", details=["x"]),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("make", MALFORMED.values(), ids=MALFORMED.keys())
async def test_a_malformed_failure_is_the_tools_error(make: Any) -> None:
    ex = executor(tool("sloppy", lambda args, ctx: make(), NOTHING))
    result = await ex.execute("sloppy", {})
    assert result.error is not None and result.error.code is ErrorCode.TOOL_ERROR
    assert "sloppy raised TypeError: Failure(" in result.error.message
    assert len(ex.history()) == 1
    assert_idle(ex)


@pytest.mark.parametrize("kind", UNREADABLE, ids=lambda k: k.__name__)
async def test_a_guard_raising_an_unreadable_exception_denies_naming_itself(
    kind: type[Exception],
) -> None:
    def strict_guard(view: Any) -> None:
        raise kind()

    ex = executor(tool("t", lambda a, c: "ran", NOTHING), guards=[strict_guard])
    result = await ex.execute("t", {})
    assert result.error is not None and result.error.code is ErrorCode.PERMISSION_DENIED
    assert "strict_guard" in result.error.message and kind.__name__ in result.error.message
    assert_idle(ex)


@pytest.mark.parametrize("kind", UNREADABLE, ids=lambda k: k.__name__)
async def test_a_hook_raising_an_unreadable_exception_fails_closed(kind: type[Exception]) -> None:
    hooks = Hooks()

    def hook(event: Any) -> None:
        raise kind()

    hooks.add_pre_tool_use(hook)
    ex = executor(tool("t", lambda a, c: "ran", NOTHING), hooks=hooks)
    result = await ex.execute("t", {})
    assert result.error is not None and result.error.code is ErrorCode.PERMISSION_DENIED
    assert kind.__name__ in result.error.message
    assert_idle(ex)


@pytest.mark.parametrize("kind", UNREADABLE, ids=lambda k: k.__name__)
async def test_an_approver_raising_an_unreadable_exception_denies(kind: type[Exception]) -> None:
    async def approver(request: Any) -> ApprovalResponse:
        raise kind()

    ex = executor(tool("t", lambda a, c: "ran", NOTHING), permissions=PermissionConfig(ask=("t",)))
    result = await ex.execute("t", {}, ExecutionContext(session_id="s1", approver=approver))
    assert result.error is not None and result.error.code is ErrorCode.PERMISSION_DENIED
    assert kind.__name__ in result.error.message
    assert_idle(ex)


@pytest.mark.parametrize("kind", UNREADABLE, ids=lambda k: k.__name__)
async def test_a_renderer_raising_an_unreadable_exception_is_output_invalid(
    kind: type[Exception],
) -> None:
    def render(value: Any) -> str:
        raise kind()

    ex = executor(tool("t", lambda a, c: {"v": 1}, NOTHING, output=Output(render=render)))
    result = await ex.execute("t", {})
    assert result.error is not None and result.error.code is ErrorCode.OUTPUT_INVALID
    assert kind.__name__ in result.error.message
    assert_idle(ex)


@pytest.mark.parametrize(
    ("args", "named"),
    [
        ([1], "an array"),
        ((1, 2), "an array"),
        ([], "an array"),
        ("text", "a string"),
        (True, "a boolean"),
        (None, "null"),
        (3.5, "a number"),
    ],
)
async def test_arguments_that_are_not_an_object_are_named_in_json_terms(
    args: Any, named: str
) -> None:
    ex = executor(tool("t", lambda a, c: "ran", NOTHING))
    result = await ex.execute("t", args)
    assert result.error is not None and result.error.code is ErrorCode.INVALID_ARGS
    assert result.error.message.endswith(f"got {named}."), result.error.message


@pytest.mark.parametrize("bad_items", [50, 51, 200])
async def test_a_refusal_cut_at_the_validators_limit_says_more_may_follow(bad_items: int) -> None:
    strings = {
        "type": "object",
        "properties": {"xs": {"type": "array", "items": {"type": "string"}}},
    }
    ex = executor(tool("t", lambda a, c: "ran", strings))
    result = await ex.execute("t", {"xs": list(range(bad_items))})
    assert result.error is not None and result.error.code is ErrorCode.INVALID_ARGS
    assert len(result.error.details["issues"]) == 50
    assert result.error.details["truncated"] is True
    assert "there may be more" in result.error.message


async def test_a_refusal_under_the_limit_is_whole() -> None:
    strings = {
        "type": "object",
        "properties": {"xs": {"type": "array", "items": {"type": "string"}}},
    }
    ex = executor(tool("t", lambda a, c: "ran", strings))
    result = await ex.execute("t", {"xs": list(range(49))})
    assert result.error is not None and len(result.error.details["issues"]) == 49
    assert "truncated" not in result.error.details
    assert "there may be more" not in result.error.message


async def test_a_results_details_and_blocks_cannot_be_changed_after_the_fact() -> None:
    def failing(args: Any, ctx: Any) -> Failure:
        return Failure("no", code="C1", details={"rows": [1, 2], "where": {"line": 3}})

    def blocks(args: Any, ctx: Any) -> list[Any]:
        return [{"type": "text", "text": "a", "_meta": {"tags": ["x"]}}]

    as_blocks = Output(render=lambda value: value)  # the value is the content blocks
    ex = executor(
        tool("failing", failing, NOTHING), tool("blocks", blocks, NOTHING, output=as_blocks)
    )
    failed = await ex.execute("failing", {})
    shown = await ex.execute("blocks", {})
    assert failed.error is not None
    details = failed.error.details
    attempts: list[Callable[[], Any]] = [
        lambda: details.__setitem__("code", "FORGED"),
        lambda: details["rows"].append(3),
        lambda: details["where"].update(line=4),
        lambda: shown.content[0].__setitem__("text", "forged"),
        lambda: shown.content[0]["_meta"]["tags"].append("y"),
    ]
    for attempt in attempts:
        with pytest.raises(TypeError):
            attempt()
    recorded = {entry.meta.tool_name: entry for entry in ex.history()}
    assert recorded["failing"].error is not None
    assert recorded["failing"].error.details["code"] == "C1"
    assert recorded["failing"].error.details["rows"] == [1, 2]
    assert recorded["blocks"].content[0]["text"] == "a"
    # A copy is the caller's to change.
    mine = dict(details)
    mine["code"] = "mine"
    assert failed.error.details["code"] == "C1"
