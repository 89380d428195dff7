"""A context that names an agent scope the registry does not have is a refused call
(``UNKNOWN_TOOL``, the scope named in the details), never an exception out of ``execute``,
``execute_parallel`` or an adapter; nothing is held afterwards."""

from __future__ import annotations

from fastgate import ErrorCode, ExecutionContext, ToolCall, ToolResult
from fastgate.adapters import openai as fg_openai
from tests.pipeline_kit import assert_idle, echo, executor, tool

GHOST = ExecutionContext(session_id="s1", agent_scope="ghost")


def _refused_for_the_scope(result: ToolResult) -> None:
    assert not result.ok
    assert result.error is not None and result.error.code is ErrorCode.UNKNOWN_TOOL
    assert result.error.details == {"reason": "unknown_scope", "scope": "ghost"}
    assert "ghost" in result.error.message


async def test_execute_refuses_a_call_in_an_unknown_scope() -> None:
    ran: list[str] = []
    ex = executor(tool("echo", lambda args, ctx: ran.append(args["text"])))
    _refused_for_the_scope(await ex.execute("echo", {"text": "x"}, GHOST))
    assert ran == []
    assert_idle(ex)


async def test_execute_parallel_refuses_each_call_in_an_unknown_scope() -> None:
    ex = executor(echo())
    calls = [ToolCall("c1", "echo", {"text": "x"}), ToolCall("c2", "nope", {})]
    results = await ex.execute_parallel(calls, GHOST)
    assert len(results) == 2
    for result in results:
        _refused_for_the_scope(result)
    assert ex.classify("echo", {"text": "x"}, GHOST) == "exclusive"
    assert_idle(ex)


async def test_an_adapter_answers_a_call_in_an_unknown_scope_with_a_tool_message() -> None:
    ex = executor(echo())
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "echo", "arguments": '{"text": "x"}'},
    }
    messages = await fg_openai.execute_tool_calls(ex, [call], GHOST)
    assert len(messages) == 1
    assert messages[0]["tool_call_id"] == "c1"
    assert "ghost" in str(messages[0]["content"])
    assert_idle(ex)
