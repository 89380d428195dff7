"""OpenAI's formats: the registry as tools, the model's tool calls run in model order (SPEC §19).

Chat Completions::

    from fastgate.adapters import openai as fg_openai

    response = await client.chat.completions.create(
        model=model, messages=messages, tools=fg_openai.tools(registry, strict=True)
    )
    message = response.choices[0].message
    messages.append(message)
    messages += await fg_openai.execute_tool_calls(executor, message.tool_calls or [], ctx)

The Responses API has ``response_tools`` and ``execute_response_calls`` (``response.output`` in,
``function_call_output`` and ``custom_tool_call_output`` items out). Calls are read from the
SDK's objects or from plain dicts; the SDK itself is not needed at run time. Several calls of one
message run through ``executor.execute_parallel`` (shared tools overlap, exclusive ones are
barriers) and the answers come back in the order the model made the calls. A message is one
turn (at most 64 calls run) unless ``ctx`` names its own ``turn_id``. Arguments that are not
JSON get an ``INVALID_ARGS`` answer, never an exception.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final, cast

import msgspec

from fastgate.adapters._common import (
    Pending,
    blocks_of,
    call_id_of,
    error_text,
    field,
    flat_text,
    model_tools,
    provider_image,
    read_arguments,
    resource_text,
    run_in_order,
    text_of,
)
from fastgate.adapters._strict import decoder_for, strict_form_of
from fastgate.model import ExecutionContext, ToolResult
from fastgate.pipeline import ToolExecutor
from fastgate.tools import ToolRegistry

if TYPE_CHECKING:  # the SDK's own types, for callers' type checkers; not needed at run time
    from openai.types.chat import (
        ChatCompletionContentPartTextParam,
        ChatCompletionToolMessageParam,
        ChatCompletionToolParam,
    )
    from openai.types.responses import (
        FunctionToolParam,
        ResponseCustomToolCallOutputParam,
        ResponseInputImageContentParam,
    )
    from openai.types.responses.response_function_call_output_item_list_param import (
        ResponseFunctionCallOutputItemParam,
    )
    from openai.types.responses.response_input_item_param import FunctionCallOutput

    ResponseCallOutput = FunctionCallOutput | ResponseCustomToolCallOutputParam

__all__ = ("execute_response_calls", "execute_tool_calls", "response_tools", "tools")


def _parameters(tool: Any, schema: dict[str, Any], strict: bool) -> tuple[dict[str, Any], bool]:
    """(parameters, strict?) of one tool: its strict form when asked and equivalent."""
    if strict:
        form = strict_form_of(tool)
        if form is not None:
            # A copy: the caller may change what it is handed; the cached form must not change.
            copy: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(form.schema))
            return copy, True
    return schema["parameters"], False


def tools(
    registry: ToolRegistry, scope: str | None = None, strict: bool = False
) -> list[ChatCompletionToolParam]:
    """Chat Completions tools (``{"type": "function", "function": {...}}``), sorted by name.

    With ``strict=True`` each tool whose schema strict mode can say exactly gets its strict form
    and ``"strict": true``; any other gets its own schema and ``"strict": false``.
    """
    out: list[ChatCompletionToolParam] = []
    for tool, schema in model_tools(registry, scope):
        parameters, is_strict = _parameters(tool, schema, strict)
        function: Any = {
            "name": schema["name"],
            "description": schema["description"],
            "parameters": parameters,
        }
        if strict:
            function["strict"] = is_strict
        out.append({"type": "function", "function": function})
    return out


def response_tools(
    registry: ToolRegistry, scope: str | None = None, strict: bool = False
) -> list[FunctionToolParam]:
    """Responses API function tools (``{"type": "function", "name", ..., "strict"}``)."""
    out: list[FunctionToolParam] = []
    for tool, schema in model_tools(registry, scope):
        parameters, is_strict = _parameters(tool, schema, strict)
        out.append(
            {
                "type": "function",
                "name": schema["name"],
                "description": schema["description"],
                "parameters": parameters,
                "strict": is_strict,
            }
        )
    return out


async def execute_tool_calls(
    executor: ToolExecutor,
    tool_calls: Iterable[Any] | None,
    ctx: ExecutionContext | None = None,
    *,
    max_parallel: int = 10,
    idempotent: bool = False,
) -> list[ChatCompletionToolMessageParam]:
    """Run a Chat Completions message's ``tool_calls``; one ``{"role": "tool", "tool_call_id",
    "content"}`` message per call, in model order. A failed call's content starts with
    ``Error (CODE):``. ``idempotent=True``: each call's id is its idempotency key (SPEC §24),
    so a message run again gets the recorded results (the executor needs a journal store)."""
    pending = [_chat_call(executor, call, ctx) for call in tool_calls or ()]
    results = await run_in_order(executor, pending, ctx, max_parallel, idempotent)
    return [
        {"role": "tool", "tool_call_id": call.call_id, "content": _chat_content(result)}
        for call, result in zip(pending, results, strict=True)
    ]


async def execute_response_calls(
    executor: ToolExecutor,
    output_items: Iterable[Any] | None,
    ctx: ExecutionContext | None = None,
    *,
    max_parallel: int = 10,
    idempotent: bool = False,
) -> list[ResponseCallOutput]:
    """Run the ``function_call`` and ``custom_tool_call`` items of a response's ``output``
    (other items are skipped); one ``function_call_output`` or ``custom_tool_call_output`` item
    per call, in model order. A custom call's ``input`` is read as its JSON arguments.
    ``idempotent``: as for ``execute_tool_calls`` (the key is the item's ``call_id``)."""
    calls = [item for item in output_items or () if _answer_type(item) is not None]
    pending = [_response_call(executor, item, ctx) for item in calls]
    results = await run_in_order(executor, pending, ctx, max_parallel, idempotent)
    return [
        _response_answer(str(_answer_type(item)), call.call_id, result)
        for item, call, result in zip(calls, pending, results, strict=True)
    ]


# The Responses API's call items, and the type of the item that answers each.
_RESPONSE_CALLS: Final = {
    "function_call": "function_call_output",
    "custom_tool_call": "custom_tool_call_output",
}


def _answer_type(item: Any) -> str | None:
    """The type of the item that answers ``item``; None for an item that is not a call."""
    kind = field(item, "type")
    return _RESPONSE_CALLS.get(kind) if isinstance(kind, str) else None


def _response_call(executor: ToolExecutor, item: Any, ctx: ExecutionContext | None) -> Pending:
    raw = field(item, "input" if field(item, "type") == "custom_tool_call" else "arguments", "")
    call_id = call_id_of(field(item, "call_id"))
    return read_arguments(executor, call_id, str(field(item, "name", "")), raw, ctx, decoder_for)


def _response_answer(kind: str, call_id: str, result: ToolResult) -> ResponseCallOutput:
    # A custom call's output item names an image's detail (its type requires it).
    output = _response_output(result, image_detail=kind == "custom_tool_call_output")
    answer: Any = {"type": kind, "call_id": call_id, "output": output}
    return cast("ResponseCallOutput", answer)


def _chat_call(executor: ToolExecutor, call: Any, ctx: ExecutionContext | None) -> Pending:
    call_id = call_id_of(field(call, "id"))
    kind = field(call, "type", "function")
    if kind == "custom":  # a free-form call: its input is read as the JSON arguments
        custom = field(call, "custom")
        name, raw = field(custom, "name", ""), field(custom, "input", "")
    else:
        function = field(call, "function")
        name, raw = field(function, "name", ""), field(function, "arguments", "")
    return read_arguments(executor, call_id, str(name), raw, ctx, decoder_for)


def _chat_content(result: ToolResult) -> str | list[ChatCompletionContentPartTextParam]:
    """A tool message's content: text, or text parts for content blocks (a tool message holds
    no images: an image block is named in its place)."""
    if not result.ok:
        return error_text(result)
    if isinstance(result.content, str):
        return result.content
    # No blocks: "" (the API refuses an empty list of parts).
    return [{"type": "text", "text": flat_text(block)} for block in blocks_of(result.content)] or ""


def _response_output(
    result: ToolResult, *, image_detail: bool = False
) -> str | list[ResponseFunctionCallOutputItemParam]:
    """A call output item's output: text, or input_text / input_image items (``image_detail``:
    each image with ``"detail": "auto"``, the API's default)."""
    if not result.ok:
        return error_text(result)
    if isinstance(result.content, str):
        return result.content
    items = [_output_item(block, image_detail) for block in blocks_of(result.content)]
    return items or ""  # no blocks: "" (the API refuses an empty list, as for Chat)


def _output_item(block: Any, image_detail: bool) -> ResponseFunctionCallOutputItemParam:
    text = text_of(block)
    if text is None:
        text = resource_text(block)
    image = provider_image(block) if text is None else None
    if image is None:
        return {"type": "input_text", "text": text if text is not None else flat_text(block)}
    media, data = image
    item: ResponseInputImageContentParam = {
        "type": "input_image",
        "image_url": f"data:{media};base64,{data}",
    }
    if image_detail:
        item["detail"] = "auto"
    return item
