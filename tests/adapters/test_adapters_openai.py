"""``fastgate.adapters.openai``: the output is what the official ``openai`` package's types accept,
strict schemas only where they say the same thing, calls answered in model order."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import pytest

pytest.importorskip("openai", reason="needs the test extra (openai)")

import openai
from openai.types.chat import (
    ChatCompletionFunctionTool,
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionMessageParam,
    ChatCompletionToolMessageParam,
    ChatCompletionToolParam,
)
from openai.types.chat.chat_completion_message_function_tool_call import Function
from openai.types.responses import (
    FunctionTool,
    FunctionToolParam,
    ResponseCustomToolCall,
    ResponseCustomToolCallOutputParam,
    ResponseFunctionToolCall,
)
from openai.types.responses.response_input_item_param import FunctionCallOutput
from openai.types.responses.response_input_param import ResponseInputParam

from fastgate import (
    ApprovalResponse,
    ErrorCode,
    ExecutionContext,
    PermissionConfig,
    ToolExecutor,
    define_tool,
    schema,
)
from fastgate.adapters import openai as fg_openai
from fastgate.adapters._strict import strict_form
from tests.adapters_kit import PNG, READ, ScriptedServer, assert_fits, registry, wait_all
from tests.pipeline_kit import assert_idle

STRICT_ELIGIBLE = {"echo", "search", "note_null", "picture", "boom", "run"}


def _executor(*extra: Any, **options: Any) -> ToolExecutor:
    from tests.pipeline_kit import executor

    ex = executor(**options)
    ex.registry = registry(*extra)  # the executor reads its registry on every call
    return ex


def _call(call_id: str, name: str, arguments: str) -> ChatCompletionMessageFunctionToolCall:
    return ChatCompletionMessageFunctionToolCall(
        id=call_id, type="function", function=Function(name=name, arguments=arguments)
    )


def _dict_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


# -- tools --------------------------------------------------------------------------------------


def test_chat_tools_are_what_the_sdk_types_accept() -> None:
    reg = registry()
    for strict in (False, True):
        out = fg_openai.tools(reg, strict=strict)
        assert [t["function"]["name"] for t in out] == sorted(reg.visible())
        for tool in out:
            assert_fits(ChatCompletionToolParam, tool)
            ChatCompletionFunctionTool.model_validate(tool)
            assert ("strict" in tool["function"]) is strict
    plain = {t["function"]["name"]: t["function"]["parameters"] for t in fg_openai.tools(reg)}
    assert plain == {s["name"]: s["parameters"] for s in reg.schemas()}


def test_response_tools_are_what_the_sdk_types_accept() -> None:
    reg = registry()
    for strict in (False, True):
        out = fg_openai.response_tools(reg, strict=strict)
        assert [t["name"] for t in out] == sorted(reg.visible())
        for tool in out:
            assert_fits(FunctionToolParam, tool)
            FunctionTool.model_validate(tool)
    assert all(t["strict"] is False for t in fg_openai.response_tools(reg))


def test_strict_only_where_the_schema_says_the_same_thing() -> None:
    from agents.strict_schema import ensure_strict_json_schema

    out = {t["function"]["name"]: t["function"] for t in fg_openai.tools(registry(), strict=True)}
    assert {name for name, f in out.items() if f["strict"]} == STRICT_ELIGIBLE
    # note: optional, nullable, no default: absent and null differ, so it stays as it is.
    assert out["note"]["parameters"] == registry().resolve("note").input_schema  # type: ignore[union-attr]
    for name in STRICT_ELIGIBLE:
        parameters = out[name]["parameters"]
        # Already strict: the Agents SDK's own strictness pass finds nothing to change.
        assert ensure_strict_json_schema(copy.deepcopy(parameters)) == parameters
    search: Any = out["search"]["parameters"]
    assert search["required"] == ["query", "limit"]
    assert search["properties"]["limit"] == {"type": ["integer", "null"], "minimum": 1}
    assert out["note_null"]["parameters"]["required"] == ["title", "body"]
    # The projection is a copy: changing it changes neither the tool nor the next projection.
    search["properties"].clear()
    again = fg_openai.tools(registry(), strict=True)
    assert any(t["function"]["parameters"]["properties"] for t in again)


@pytest.mark.parametrize(
    "parameters",
    [
        {"type": "object", "properties": {"a": {"type": "string", "minLength": 1}}},
        {"type": "object", "properties": {"a": {"type": "string"}}},  # open: no additional=false
        {
            "type": "object",
            "properties": {"a": {"oneOf": [{"type": "string"}, {"type": "integer"}]}},
            "additionalProperties": False,
        },
        {
            "type": "object",
            "properties": {
                "a": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
            },
            "additionalProperties": False,
        },
        {"type": "object", "properties": {"a": {}}, "additionalProperties": False},
        {
            "type": "object",
            "properties": {"a": {"anyOf": [{"type": "object", "properties": {
                "b": {"type": "string"}}, "additionalProperties": False}, {"type": "null"}]}},
            "required": ["a"],
            "additionalProperties": False,
        },
    ],
    ids=["minLength", "open-object", "oneOf", "uniqueItems", "untyped", "optional-in-anyOf"],
)  # fmt: skip
def test_what_strict_mode_cannot_say_stays_non_strict(parameters: dict[str, Any]) -> None:
    assert strict_form(parameters) is None
    reg = registry(define_tool("odd", "An odd schema.", parameters, lambda args, ctx: "x"))
    (odd,) = [t for t in fg_openai.tools(reg, strict=True) if t["function"]["name"] == "odd"]
    assert odd["function"]["strict"] is False and odd["function"]["parameters"] == parameters


def test_strict_form_follows_refs_and_keeps_what_strict_mode_supports() -> None:
    parameters = {
        "type": "object",
        "properties": {
            "when": {"type": "string", "format": "date-time", "description": "When."},
            "where": {"type": "string", "format": "uri-reference"},
            "node": {"$ref": "#/$defs/node", "description": "The root node."},
            "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3},
        },
        "required": ["when", "node"],
        "additionalProperties": False,
        "$defs": {
            "node": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "child": {"$ref": "#/$defs/node"}},
                "required": ["name"],
                "additionalProperties": False,
                "examples": [{"name": "x"}],
            }
        },
    }
    form = strict_form(parameters)
    assert form is not None
    props = form.schema["properties"]
    # format is an annotation to fastgate: dropped, strict mode would enforce it.
    assert props["when"] == {"type": "string", "description": "When."}
    assert props["where"] == {"type": ["string", "null"]}
    assert props["node"]["description"] == "The root node."  # inlined: nothing beside a $ref
    assert props["node"]["properties"]["child"] == {"anyOf": [{"$ref": "#/$defs/node"},
                                                              {"type": "null"}]}  # fmt: skip
    assert props["tags"]["items"] == {"enum": ["a", "b"], "type": "string"}
    assert "examples" not in form.schema["$defs"]["node"]
    # A null the model had to send for an optional field is read back as absent, at any depth,
    # through the recursive definition too; the model's own dict is left alone.
    sent = {
        "when": "2024-01-01T00:00:00Z",
        "where": None,
        "node": {"name": "a", "child": {"name": "b", "child": None}},
        "tags": None,
    }
    before = copy.deepcopy(sent)
    assert form.decode(sent) == {"when": "2024-01-01T00:00:00Z", "node": {"name": "a",
                                 "child": {"name": "b"}}}  # fmt: skip
    assert sent == before


# -- calls --------------------------------------------------------------------------------------


async def test_calls_from_sdk_objects_and_dicts_answer_in_model_order() -> None:
    second_ran = asyncio.Event()

    async def slow(args: Any, ctx: Any) -> str:
        await wait_all(second_ran)  # finishes after the call made after it
        return "slow done"

    async def fast(args: Any, ctx: Any) -> str:
        second_ran.set()
        return "fast done"

    nothing = schema.Object({})
    ex = _executor(
        define_tool("slow", "Slow.", nothing, slow, kind=READ, parallelism="shared"),
        define_tool("fast", "Fast.", nothing, fast, kind=READ, parallelism="shared"),
    )
    calls: list[Any] = [
        _call("c1", "slow", "{}"),
        _dict_call("c2", "fast", "{}"),
        _call("c3", "echo", '{"text": "three"}'),
    ]
    messages = await fg_openai.execute_tool_calls(ex, calls, ExecutionContext(session_id="s1"))
    assert messages == [
        {"role": "tool", "tool_call_id": "c1", "content": "slow done"},
        {"role": "tool", "tool_call_id": "c2", "content": "fast done"},
        {"role": "tool", "tool_call_id": "c3", "content": "three"},
    ]
    for message in messages:
        assert_fits(ChatCompletionToolMessageParam, message)
    finished = [r.meta.call_id for r in ex.history()]
    assert finished.index("c2") < finished.index("c1")  # they ran together: c1 waited for c2
    assert_idle(ex)


async def test_malformed_arguments_get_an_invalid_args_message_never_an_exception() -> None:
    ex = _executor()
    calls = [
        _call("bad", "echo", '{"text": "unterminated'),
        _call("unknown", "nosuch", "{not json"),
        _call("array", "echo", "[1, 2]"),
        _call("empty", "picture", ""),
        _call("deep", "echo", "[" * 100_000 + "]" * 100_000),
        _call("ok", "echo", '{"text": "fine"}'),
    ]
    messages = await fg_openai.execute_tool_calls(ex, calls)
    content: dict[str, Any] = {m["tool_call_id"]: m["content"] for m in messages}
    assert content["bad"].startswith("Error (INVALID_ARGS): The arguments of echo are not valid")
    assert content["unknown"].startswith("Error (UNKNOWN_TOOL):")
    assert content["array"].startswith("Error (INVALID_ARGS):")
    assert content["empty"][0] == {"type": "text", "text": "a chart"}  # "": no arguments
    assert content["deep"].startswith("Error (INVALID_ARGS):")
    assert content["ok"] == "fine"
    codes = {r.meta.call_id: r.error.code if r.error else None for r in ex.history()}
    assert codes == {
        "bad": ErrorCode.INVALID_ARGS,
        "unknown": ErrorCode.UNKNOWN_TOOL,
        "array": ErrorCode.INVALID_ARGS,
        "empty": None,
        "deep": ErrorCode.INVALID_ARGS,
        "ok": None,
    }
    (bad,) = [r for r in ex.history() if r.meta.call_id == "bad"]
    assert bad.error is not None and bad.error.details == {"reason": "invalid_json"}


@pytest.mark.parametrize("strict", [True, False])
async def test_a_tool_with_optional_fields_both_ways(strict: bool) -> None:
    ex = _executor()
    tools = {t["function"]["name"]: t for t in fg_openai.tools(ex.registry, strict=strict)}
    assert tools["search"]["function"].get("strict", False) is strict
    # What each form's model sends for "no limit": null in strict mode, nothing otherwise.
    arguments = '{"query": "q", "limit": null}' if strict else '{"query": "q"}'
    calls = [
        _call("a", "search", arguments),
        _call("b", "search", '{"query": "q", "limit": 3}'),
        _call("c", "note_null", '{"title": "t", "body": null}'),
        _call("d", "note", '{"title": "t", "body": null}'),
        _call("e", "note", '{"title": "t"}'),
    ]
    answers = await fg_openai.execute_tool_calls(ex, calls, ExecutionContext(approver=_approve))
    content: dict[str, Any] = {m["tool_call_id"]: m["content"] for m in answers}
    assert json.loads(content["a"]) == {"query": "q", "limit": "absent"}
    assert json.loads(content["b"]) == {"query": "q", "limit": 3}
    assert content["c"] == "body=None"  # null is what the schema says absent means
    assert content["d"] == "body=None" and content["e"] == "body absent"  # never rewritten


async def _approve(request: Any) -> ApprovalResponse:
    return ApprovalResponse(True)


async def test_policy_answers_come_back_as_tool_messages() -> None:
    asked: list[str] = []

    async def approver(request: Any) -> ApprovalResponse:
        asked.append(request.tool_name)
        return ApprovalResponse(False, feedback="not during the demo")

    ex = _executor(permissions=PermissionConfig(deny=("run(rm:*)",)))
    calls = [_call("1", "run", '{"command": "rm -rf /"}'), _call("2", "run", '{"command": "ls"}')]
    messages: list[Any] = await fg_openai.execute_tool_calls(
        ex, calls, ExecutionContext(approver=approver)
    )
    assert messages[0]["content"].startswith("Error (PERMISSION_DENIED): Not permitted")
    assert messages[1]["content"] == "Error (USER_REJECTED): not during the demo"
    assert asked == ["run"]


async def test_response_calls_skip_other_items_and_answer_in_order() -> None:
    ex = _executor()
    output: list[Any] = [
        {"type": "reasoning", "id": "rs_1", "summary": []},
        ResponseFunctionToolCall(
            type="function_call", call_id="c1", name="echo", arguments='{"text": "one"}'
        ),
        {"type": "message", "role": "assistant", "content": []},
        {"type": "function_call", "call_id": "c2", "name": "picture", "arguments": "{}"},
        {"type": "function_call", "call_id": "c3", "name": "boom", "arguments": "{}"},
        {"type": "function_call", "call_id": "c4", "name": "echo", "arguments": "{oops"},
    ]
    items: list[Any] = await fg_openai.execute_response_calls(ex, output)
    assert [item["call_id"] for item in items] == ["c1", "c2", "c3", "c4"]
    for item in items:
        assert_fits(FunctionCallOutput, item)
    assert items[0]["output"] == "one"
    assert items[1]["output"] == [
        {"type": "input_text", "text": "a chart"},
        {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="},
    ]
    assert items[2]["output"].startswith("Error (TOOL_ERROR):")
    assert items[3]["output"].startswith("Error (INVALID_ARGS):")


async def test_chat_content_blocks_become_text_parts() -> None:
    ex = _executor()
    (message,) = await fg_openai.execute_tool_calls(ex, [_call("p", "picture", "{}")])
    assert message["content"] == [
        {"type": "text", "text": "a chart"},
        {"type": "text", "text": "[image: image/png]"},  # a tool message holds no image
    ]
    assert_fits(ChatCompletionToolMessageParam, message)


async def test_custom_tool_calls_get_custom_outputs_in_model_order() -> None:
    ex = _executor()
    output: list[Any] = [
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": ["custom_tool_call"], "call_id": "odd"},  # not a type name: skipped
        ResponseCustomToolCall(
            type="custom_tool_call", call_id="k1", name="echo", input='{"text": "one"}'
        ),
        {"type": "function_call", "call_id": "f2", "name": "echo", "arguments": '{"text": "two"}'},
        {"type": "custom_tool_call", "call_id": "k3", "name": "picture", "input": ""},
        {"type": "custom_tool_call", "call_id": "k4", "name": "echo", "input": "one, please"},
    ]
    items: list[Any] = await fg_openai.execute_response_calls(ex, output)
    assert [(item["type"], item["call_id"]) for item in items] == [
        ("custom_tool_call_output", "k1"),
        ("function_call_output", "f2"),
        ("custom_tool_call_output", "k3"),
        ("custom_tool_call_output", "k4"),
    ]
    assert [items[0]["output"], items[1]["output"]] == ["one", "two"]
    assert items[2]["output"] == [
        {"type": "input_text", "text": "a chart"},
        {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}", "detail": "auto"},
    ]
    assert items[3]["output"].startswith("Error (INVALID_ARGS): The arguments of echo are not")
    for item in items:
        kind = FunctionCallOutput if item["type"] == "function_call_output" else None
        assert_fits(kind or ResponseCustomToolCallOutputParam, item)
    from pydantic import TypeAdapter

    TypeAdapter(ResponseInputParam).validate_python(items)
    assert {r.meta.call_id for r in ex.history()} == {"k1", "f2", "k3", "k4"}


# -- a whole loop through the SDK's client --------------------------------------------------------


def _completion(message: dict[str, Any], finish: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "scripted",
        "choices": [{"index": 0, "finish_reason": finish, "message": message}],
    }


async def test_a_chat_completions_loop_through_the_sdk() -> None:
    calls = [
        _dict_call("call_1", "echo", '{"text": "hello"}'),
        _dict_call("call_2", "search", '{"query": "fastgate", "limit": null}'),
    ]
    server = ScriptedServer(
        [
            _completion({"role": "assistant", "content": None, "tool_calls": calls}, "tool_calls"),
            _completion({"role": "assistant", "content": "done"}, "stop"),
        ]
    )
    client = openai.AsyncOpenAI(api_key="test", base_url="http://model.test/v1",
                                http_client=server.client())  # fmt: skip
    ex = _executor()
    tools = fg_openai.tools(ex.registry, strict=True)
    messages: list[Any] = [{"role": "user", "content": "go"}]
    async with client:
        while True:
            response = await client.chat.completions.create(
                model="scripted",
                messages=messages,
                tools=tools,
            )
            message = response.choices[0].message
            messages.append(message)  # as the README writes it: the SDK's own message object
            if not message.tool_calls:
                break
            messages += await fg_openai.execute_tool_calls(ex, message.tool_calls)
    assert response.choices[0].message.content == "done"
    first, second = (r["body"] for r in server.requests)
    assert first["tools"] == tools
    sent = second["messages"]
    assert sent[2:] == [
        {"role": "tool", "tool_call_id": "call_1", "content": "hello"},
        {"role": "tool", "tool_call_id": "call_2",
         "content": '{"query":"fastgate","limit":"absent"}'},
    ]  # fmt: skip
    from pydantic import TypeAdapter

    TypeAdapter(list[ChatCompletionMessageParam]).validate_python(sent)


async def test_a_responses_loop_through_the_sdk() -> None:
    def reply(output: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": "resp_1",
            "object": "response",
            "created_at": 0,
            "model": "scripted",
            "status": "completed",
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
        }

    call = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "echo",
            "arguments": '{"text": "hi"}', "status": "completed"}  # fmt: skip
    text = {"type": "message", "id": "m_1", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": "done", "annotations": []}]}  # fmt: skip
    server = ScriptedServer([reply([call]), reply([text])])
    client = openai.AsyncOpenAI(api_key="test", base_url="http://model.test/v1",
                                http_client=server.client())  # fmt: skip
    ex = _executor()
    tools = fg_openai.response_tools(ex.registry, strict=True)
    items: list[Any] = [{"role": "user", "content": "go"}]
    async with client:
        response = await client.responses.create(model="scripted", input=items, tools=tools)
        outputs = await fg_openai.execute_response_calls(ex, response.output)
        items += [item.model_dump(exclude_none=True) for item in response.output] + outputs
        final = await client.responses.create(model="scripted", input=items, tools=tools)
    assert final.output_text == "done"
    sent = server.requests[1]["body"]["input"]
    assert sent[-1] == {"type": "function_call_output", "call_id": "call_1", "output": "hi"}
    from pydantic import TypeAdapter

    TypeAdapter(ResponseInputParam).validate_python(sent)
