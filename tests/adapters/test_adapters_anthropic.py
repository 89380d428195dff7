"""``fastgate.adapters.anthropic``: tools and ``tool_result`` blocks are what the official
``anthropic`` package's types accept; every non-ok result is marked; content blocks are kept."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("anthropic", reason="needs the test extra (anthropic)")

import anthropic
from anthropic.types import (
    MessageParam,
    TextBlock,
    ToolParam,
    ToolResultBlockParam,
    ToolUseBlock,
)
from pydantic import TypeAdapter

from fastgate import (
    ApprovalResponse,
    ErrorCode,
    ExecutionContext,
    Output,
    PermissionConfig,
    ToolExecutor,
    define_tool,
    schema,
)
from fastgate.adapters import anthropic as fg_anthropic
from tests.adapters_kit import PNG, READ, ScriptedServer, assert_fits, registry
from tests.pipeline_kit import assert_idle, executor

DOCUMENT = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "d"}}


def _executor(*extra: Any, **options: Any) -> ToolExecutor:
    ex = executor(**options)
    ex.registry = registry(*extra)
    return ex


def _use(use_id: str, name: str, args: Any) -> ToolUseBlock:
    return ToolUseBlock(id=use_id, type="tool_use", name=name, input=args)


def test_tools_are_what_the_sdk_types_accept() -> None:
    reg = registry()
    out = fg_anthropic.tools(reg)
    assert [t["name"] for t in out] == sorted(reg.visible())
    for tool in out:
        assert_fits(ToolParam, tool)
    assert {t["name"]: t["input_schema"] for t in out} == {
        s["name"]: s["parameters"] for s in reg.schemas()
    }


async def test_tool_uses_answer_in_model_order_marking_every_failure() -> None:
    asked: list[str] = []

    async def approver(request: Any) -> ApprovalResponse:
        asked.append(request.tool_name)
        return ApprovalResponse(False, feedback="no commands today")

    ex = _executor(permissions=PermissionConfig(deny=("note",)))
    content: list[Any] = [
        TextBlock(type="text", text="Let me look."),
        _use("t1", "echo", {"text": "one"}),
        {"type": "thinking", "thinking": "...", "signature": "x"},
        {"type": "tool_use", "id": "t2", "name": "nosuch", "input": {}},
        _use("t3", "echo", {"text": 7}),
        _use("t4", "note", {"title": "x"}),
        _use("t5", "run", {"command": "ls"}),
        _use("t6", "boom", {}),
        {"type": "tool_use", "id": "t7", "name": "echo", "input": '{"text": "from a string"}'},
        {"type": "tool_use", "id": "t8", "name": "echo", "input": '{"text": '},
        _use("t9", "echo", {"text": "nine"}),
    ]
    blocks = await fg_anthropic.execute_tool_uses(ex, content, ExecutionContext(approver=approver))
    assert [b["tool_use_id"] for b in blocks] == [f"t{i}" for i in range(1, 10) if i != 0]
    for block in blocks:
        assert_fits(ToolResultBlockParam, block)
    by_id: dict[str, Any] = {b["tool_use_id"]: b for b in blocks}
    assert by_id["t1"] == {"type": "tool_result", "tool_use_id": "t1", "content": "one"}
    assert by_id["t7"]["content"] == "from a string"
    assert by_id["t9"]["content"] == "nine"
    failed = {
        "t2": "UNKNOWN_TOOL",
        "t3": "INVALID_ARGS",
        "t4": "PERMISSION_DENIED",
        "t5": "USER_REJECTED",
        "t6": "TOOL_ERROR",
        "t8": "INVALID_ARGS",
    }
    for use_id, code in failed.items():
        assert by_id[use_id]["is_error"] is True
        assert by_id[use_id]["content"].startswith(f"Error ({code}):")
    assert all("is_error" not in by_id[i] for i in ("t1", "t7", "t9"))
    assert by_id["t5"]["content"] == "Error (USER_REJECTED): no commands today"
    assert asked == ["run"]
    (t8,) = [r for r in ex.history() if r.meta.call_id == "t8"]
    assert t8.error is not None and t8.error.code == ErrorCode.INVALID_ARGS
    assert "not valid JSON" in t8.error.message
    assert_idle(ex)


async def test_content_blocks_are_kept() -> None:
    blocks = (
        "plain text",
        {"type": "text", "text": "a text block"},
        {"type": "text", "text": ""},  # the API refuses empty text blocks: dropped
        {"type": "image", "data": PNG, "mimeType": "image/png"},  # MCP's shape
        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": PNG}},
        {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "resource text"}},
        DOCUMENT,
        {"type": "audio", "data": "AAAA", "mimeType": "audio/wav"},  # no Anthropic shape
    )

    async def many(args: Any, ctx: Any) -> Any:
        return blocks

    tool = define_tool("many", "Many blocks.", schema.Object({}), many, kind=READ,
                       output=Output(render=lambda value: value))  # fmt: skip
    ex = _executor(tool)
    (result,) = await fg_anthropic.execute_tool_uses(ex, [_use("m", "many", {})])
    assert_fits(ToolResultBlockParam, result)
    assert result["content"] == [
        {"type": "text", "text": "plain text"},
        {"type": "text", "text": "a text block"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": PNG}},
        {"type": "text", "text": "resource text"},
        DOCUMENT,
        {"type": "text", "text": '{"type":"audio","data":"AAAA","mimeType":"audio/wav"}'},
    ]


async def test_a_messages_loop_through_the_sdk() -> None:
    def message(content: list[dict[str, Any]], stop: str) -> dict[str, Any]:
        return {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "scripted",
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }

    uses: list[dict[str, Any]] = [
        {"type": "text", "text": "Two calls."},
        {"type": "tool_use", "id": "toolu_1", "name": "echo", "input": {"text": "hello"}},
        {"type": "tool_use", "id": "toolu_2", "name": "picture", "input": {}},
    ]
    server = ScriptedServer(
        [message(uses, "tool_use"), message([{"type": "text", "text": "done"}], "end_turn")]
    )
    client = anthropic.AsyncAnthropic(api_key="test", base_url="http://model.test",
                                      http_client=server.client())  # fmt: skip
    ex = _executor()
    tools = fg_anthropic.tools(ex.registry)
    messages: list[Any] = [{"role": "user", "content": "go"}]
    async with client:
        while True:
            response = await client.messages.create(
                model="scripted",
                max_tokens=100,
                messages=messages,
                tools=tools,
            )
            messages.append({"role": "assistant", "content": response.content})
            if response.stop_reason != "tool_use":
                break
            results = await fg_anthropic.execute_tool_uses(ex, response.content)
            messages.append({"role": "user", "content": results})
    assert isinstance(response.content[0], TextBlock) and response.content[0].text == "done"
    first, second = (r["body"] for r in server.requests)
    assert first["tools"] == tools
    sent = second["messages"]
    assert sent[2] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "hello"},
            {
                "type": "tool_result",
                "tool_use_id": "toolu_2",
                "content": [
                    {"type": "text", "text": "a chart"},
                    {"type": "image",
                     "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
                ],
            },
        ],
    }  # fmt: skip
    TypeAdapter(list[MessageParam]).validate_python(sent)
