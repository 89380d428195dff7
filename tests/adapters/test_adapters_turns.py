"""One model message is one turn (SPEC §11, §19): an adapter gives a message without a caller's
``turn_id`` a turn of its own, so at most 64 of its calls run; a caller's ``turn_id`` is kept and
spans the messages run under it. Calls are plain dicts: no SDK is needed."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from fastgate import ErrorCode, ExecutionContext, ToolExecutor, define_tool, schema
from fastgate.adapters import anthropic as fg_anthropic
from fastgate.adapters import openai as fg_openai
from fastgate.pipeline.executor import TURN_LIMIT
from tests.pipeline_kit import assert_idle, executor

Runner = Callable[[ToolExecutor, list[int], ExecutionContext | None], Awaitable[list[str]]]


def counting_executor() -> tuple[ToolExecutor, list[int]]:
    ran: list[int] = []

    async def tick(args: Any, ctx: Any) -> str:
        ran.append(args["n"])
        return f"tick {args['n']}"

    params = schema.Object({"n": schema.Integer()}, required=("n",))
    tool = define_tool("tick", "Count.", params, tick, kind="read_only", parallelism="shared")
    return executor(tool), ran


async def chat(ex: ToolExecutor, numbers: list[int], ctx: ExecutionContext | None) -> list[str]:
    calls = [
        {
            "id": f"c{n}",
            "type": "function",
            "function": {"name": "tick", "arguments": f'{{"n": {n}}}'},
        }
        for n in numbers
    ]
    return [m["content"] for m in await fg_openai.execute_tool_calls(ex, calls, ctx)]  # type: ignore[misc]


async def responses(
    ex: ToolExecutor, numbers: list[int], ctx: ExecutionContext | None
) -> list[str]:
    items = [
        {"type": "function_call", "call_id": f"c{n}", "name": "tick", "arguments": f'{{"n": {n}}}'}
        for n in numbers
    ]
    return [i["output"] for i in await fg_openai.execute_response_calls(ex, items, ctx)]  # type: ignore[misc]


async def messages(ex: ToolExecutor, numbers: list[int], ctx: ExecutionContext | None) -> list[str]:
    blocks = [
        {"type": "tool_use", "id": f"c{n}", "name": "tick", "input": {"n": n}} for n in numbers
    ]
    return [b["content"] for b in await fg_anthropic.execute_tool_uses(ex, blocks, ctx)]  # type: ignore[misc]


RUNNERS = pytest.mark.parametrize("run", [chat, responses, messages], ids=lambda r: r.__name__)
REFUSED = f"Error ({ErrorCode.RESOURCE_EXHAUSTED})"


def refused(ex: ToolExecutor) -> list[Any]:
    return [
        r
        for r in ex.history()
        if r.error is not None and r.error.code is ErrorCode.RESOURCE_EXHAUSTED
    ]


@RUNNERS
@pytest.mark.parametrize("ctx", [None, ExecutionContext(session_id="s1")], ids=["none", "no-turn"])
async def test_a_message_of_200_calls_runs_64(run: Runner, ctx: ExecutionContext | None) -> None:
    ex, ran = counting_executor()
    answers = await run(ex, list(range(200)), ctx)
    assert len(answers) == 200
    assert sorted(ran) == list(range(TURN_LIMIT))  # the first 64, in model order
    assert answers[:TURN_LIMIT] == [f"tick {n}" for n in range(TURN_LIMIT)]
    assert all(a.startswith(REFUSED) for a in answers[TURN_LIMIT:])
    limited = refused(ex)
    assert len(limited) == 200 - TURN_LIMIT
    assert all(r.error.details["reason"] == "turn_limit" for r in limited)
    assert_idle(ex)


@RUNNERS
async def test_each_message_is_a_turn_of_its_own(run: Runner) -> None:
    ex, ran = counting_executor()
    ctx = ExecutionContext(session_id="s1")
    for message in range(3):
        numbers = list(range(message * 100, message * 100 + TURN_LIMIT))
        answers = await run(ex, numbers, ctx)
        assert answers == [f"tick {n}" for n in numbers]
    assert len(ran) == 3 * TURN_LIMIT and not refused(ex)
    assert_idle(ex)


@RUNNERS
async def test_the_callers_turn_spans_its_messages(run: Runner) -> None:
    ex, ran = counting_executor()
    ctx = ExecutionContext(session_id="s1", turn_id="turn-7")
    first = await run(ex, list(range(40)), ctx)
    second = await run(ex, list(range(100, 140)), ctx)
    assert first == [f"tick {n}" for n in range(40)]
    assert second[:24] == [f"tick {n}" for n in range(100, 124)]
    assert all(a.startswith(REFUSED) for a in second[24:])
    assert len(ran) == TURN_LIMIT and len(refused(ex)) == 16
    # Another turn of the caller's starts afresh.
    third = await run(ex, [500], ExecutionContext(session_id="s1", turn_id="turn-8"))
    assert third == ["tick 500"]
    assert_idle(ex)
