"""The adapters' ``idempotent=True``: the provider's call id is the call's idempotency key, so a
message run again (the same ids) is answered from the journal; off by default, because some
OpenAI-compatible servers number calls per response and repeat the ids across turns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fastgate import ExecutionContext, SqliteToolUseStore, ToolExecutor, schema
from fastgate.adapters import anthropic as fg_anthropic
from fastgate.adapters import openai as fg_openai
from tests.pipeline_kit import executor, tool

TEXT = schema.Object({"text": schema.String()}, required=("text",))


def counting(runs: list[str]) -> ToolExecutor:
    async def body(args: Any, ctx: Any) -> str:
        runs.append(args["text"])
        return f"wrote {args['text']} (run {len(runs)})"

    return executor(tool("write", body, TEXT, parallelism="shared"))


def chat_call(call_id: str, text: str) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": "write", "arguments": f'{{"text": "{text}"}}'},
    }


async def test_openai_chat_calls_run_again_are_answered_from_the_journal(tmp_path: Path) -> None:
    runs: list[str] = []
    ex = counting(runs)
    async with SqliteToolUseStore(tmp_path / "j.db") as store:
        ex.store = store
        ctx = ExecutionContext(session_id="s")
        calls = [chat_call("call_a", "x"), chat_call("call_b", "y")]
        first = await fg_openai.execute_tool_calls(ex, calls, ctx, idempotent=True)
        again = await fg_openai.execute_tool_calls(ex, calls, ctx, idempotent=True)
        items = [
            {"type": "function_call", "call_id": "resp_1", "name": "write", "arguments": "{}"},
            {"type": "function_call", "call_id": "resp_2", "name": "write",
             "arguments": '{"text": "z"}'},
        ]  # fmt: skip
        responses = await fg_openai.execute_response_calls(ex, items, ctx, idempotent=True)
        responses_again = await fg_openai.execute_response_calls(ex, items, ctx, idempotent=True)
    assert first == again and runs == ["x", "y", "z"]
    assert [m["tool_call_id"] for m in again] == ["call_a", "call_b"]
    assert responses == responses_again  # the invalid call is refused both times, z runs once
    assert history_replays(ex) == 3


async def test_anthropic_tool_uses_run_again_are_answered_from_the_journal(
    tmp_path: Path,
) -> None:
    runs: list[str] = []
    ex = counting(runs)
    blocks = [
        {"type": "text", "text": "writing"},
        {"type": "tool_use", "id": "toolu_1", "name": "write", "input": {"text": "x"}},
    ]
    async with SqliteToolUseStore(tmp_path / "j.db") as store:
        ex.store = store
        ctx = ExecutionContext(session_id="s")
        first = await fg_anthropic.execute_tool_uses(ex, blocks, ctx, idempotent=True)
        again = await fg_anthropic.execute_tool_uses(ex, blocks, ctx, idempotent=True)
    assert first == again and runs == ["x"] and history_replays(ex) == 1


async def test_without_the_option_ids_are_not_keys(tmp_path: Path) -> None:
    """An OpenAI-compatible server that numbers calls per response (call_0 in every turn):
    by default each turn's call runs, and other arguments under the same id are no error."""
    runs: list[str] = []
    ex = counting(runs)
    async with SqliteToolUseStore(tmp_path / "j.db") as store:
        ex.store = store
        ctx = ExecutionContext(session_id="s")
        turn1 = await fg_openai.execute_tool_calls(ex, [chat_call("call_0", "x")], ctx)
        turn2 = await fg_openai.execute_tool_calls(ex, [chat_call("call_0", "x")], ctx)
        turn3 = await fg_openai.execute_tool_calls(ex, [chat_call("call_0", "y")], ctx)
    assert runs == ["x", "x", "y"] and history_replays(ex) == 0
    assert not any(str(m["content"]).startswith("Error") for m in (*turn1, *turn2, *turn3))


async def test_the_agents_sdk_call_id_is_the_key(tmp_path: Path) -> None:
    pytest.importorskip("agents", reason="needs the test extra (openai-agents)")
    from agents import Agent, RunConfig, Runner
    from agents.testing import ScriptedModel, assistant_message, function_call

    from fastgate.adapters.openai_agents import function_tools

    runs: list[str] = []
    ex = counting(runs)
    async with SqliteToolUseStore(tmp_path / "j.db") as store:
        ex.store = store
        for _ in range(2):  # the same run resumed: the model's call ids come again
            model = ScriptedModel(
                [
                    [function_call("write", {"text": "x"}, call_id="fc_1")],
                    [assistant_message("done")],
                ]
            )
            agent = Agent(name="w", model=model, tools=function_tools(ex, idempotent=True))
            await Runner.run(
                agent,
                "go",
                context=ExecutionContext(session_id="s"),
                run_config=RunConfig(tracing_disabled=True),
            )
    assert runs == ["x"] and history_replays(ex) == 1


def history_replays(ex: ToolExecutor) -> int:
    return sum(r.meta.replayed for r in ex.history())
