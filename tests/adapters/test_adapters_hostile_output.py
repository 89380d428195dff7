"""Odd model output and tool answers the providers' APIs would refuse: calls whose id is missing
or ``null`` (never one shared idempotency key ``"None"``), and images of types Anthropic's and
OpenAI's APIs do not take (named in text, so the next request is not refused)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fastgate import ExecutionContext, Output, SqliteToolUseStore, ToolExecutor, define_tool, schema
from fastgate.adapters import anthropic as fg_anthropic
from fastgate.adapters import openai as fg_openai
from tests.adapters_kit import PNG, READ, registry
from tests.pipeline_kit import assert_idle, executor, tool

TEXT = schema.Object({"text": schema.String()}, required=("text",))
ACCEPTED = {"image/jpeg", "image/png", "image/gif", "image/webp"}


def _counting(runs: list[str]) -> ToolExecutor:
    async def body(args: Any, ctx: Any) -> str:
        runs.append(args["text"])
        return f"wrote {args['text']}"

    return executor(tool("write", body, TEXT, parallelism="shared"))


def _chat(call_id: Any, text: str, *, with_id: bool = True) -> dict[str, Any]:
    call: dict[str, Any] = {
        "type": "function",
        "function": {"name": "write", "arguments": f'{{"text": "{text}"}}'},
    }
    if with_id:
        call["id"] = call_id
    return call


async def _chat_turn(ex: ToolExecutor, call_id: Any, text: str, ctx: ExecutionContext) -> Any:
    (message,) = await fg_openai.execute_tool_calls(
        ex, [_chat(call_id, text)], ctx, idempotent=True
    )
    return message["content"], message["tool_call_id"]


async def _chat_no_id_turn(ex: ToolExecutor, _: Any, text: str, ctx: ExecutionContext) -> Any:
    (message,) = await fg_openai.execute_tool_calls(
        ex, [_chat(None, text, with_id=False)], ctx, idempotent=True
    )
    return message["content"], message["tool_call_id"]


async def _response_turn(ex: ToolExecutor, call_id: Any, text: str, ctx: ExecutionContext) -> Any:
    item = {
        "type": "function_call",
        "call_id": call_id,
        "name": "write",
        "arguments": f'{{"text": "{text}"}}',
    }
    (out,) = await fg_openai.execute_response_calls(ex, [item], ctx, idempotent=True)
    return out["output"], out["call_id"]


async def _anthropic_turn(ex: ToolExecutor, call_id: Any, text: str, ctx: ExecutionContext) -> Any:
    block = {"type": "tool_use", "id": call_id, "name": "write", "input": {"text": text}}
    (out,) = await fg_anthropic.execute_tool_uses(ex, [block], ctx, idempotent=True)
    return out["content"], out["tool_use_id"]


TURNS = {
    "chat, id null": _chat_turn,
    "chat, no id": _chat_no_id_turn,
    "responses, call_id null": _response_turn,
    "anthropic, id null": _anthropic_turn,
}


@pytest.mark.parametrize("spelling", list(TURNS))
async def test_calls_without_an_id_are_never_one_shared_key(tmp_path: Path, spelling: str) -> None:
    """Each turn's call without an id runs (none is answered from another's journal entry, none
    is refused as a key reused with other arguments), and its answer carries no made-up id."""
    turn = TURNS[spelling]
    runs: list[str] = []
    ex = _counting(runs)
    async with SqliteToolUseStore(tmp_path / "j.db") as store:
        ex.store = store
        ctx = ExecutionContext(session_id="s")
        answers = [await turn(ex, None, text, ctx) for text in ("x", "x", "y")]
    assert runs == ["x", "x", "y"]
    assert [content for content, _ in answers] == ["wrote x", "wrote x", "wrote y"]
    assert {call_id for _, call_id in answers} == {""}
    assert not any(r.meta.replayed for r in ex.history())
    assert_idle(ex)


async def test_an_id_that_is_not_text_is_its_text(tmp_path: Path) -> None:
    runs: list[str] = []
    ex = _counting(runs)
    async with SqliteToolUseStore(tmp_path / "j.db") as store:
        ex.store = store
        ctx = ExecutionContext(session_id="s")
        first = await _chat_turn(ex, 7, "x", ctx)
        again = await _chat_turn(ex, 7, "x", ctx)  # the same call re-sent: from the journal
    assert first == again == ("wrote x", "7") and runs == ["x"]


# -- images the APIs refuse ------------------------------------------------------------------

IMAGES = (
    {"type": "image", "data": PNG, "mimeType": "image/svg+xml"},
    {"type": "image", "data": PNG, "mimeType": "image/bmp"},
    {"type": "image", "source": {"type": "base64", "media_type": "image/tiff", "data": PNG}},
    {"type": "image", "data": PNG, "mimeType": "image/x-icon"},
    {"type": "image", "data": PNG, "mimeType": "image/png"},
    {"type": "image", "data": PNG, "mimeType": "image/JPG"},
)


def _returning(name: str, value: Any) -> ToolExecutor:
    """An executor of one tool ``name`` whose content is ``value`` as it is (no rendering)."""

    async def body(args: Any, ctx: Any) -> Any:
        return value

    ex = executor()
    ex.registry = registry(
        define_tool(
            name,
            "Returns its content as it is.",
            schema.Object({}),
            body,
            kind=READ,
            output=Output(render=lambda value: value),
        )
    )
    return ex


def _pictures() -> ToolExecutor:
    return _returning("pictures", IMAGES)


async def test_anthropic_gets_only_image_types_it_takes() -> None:
    ex = _pictures()
    use = {"type": "tool_use", "id": "p", "name": "pictures", "input": {}}
    (result,) = await fg_anthropic.execute_tool_uses(ex, [use])
    blocks: list[Any] = list(result["content"])
    images = [b["source"]["media_type"] for b in blocks if b["type"] == "image"]
    assert images == ["image/png", "image/jpeg"]
    assert [b["text"] for b in blocks if b["type"] == "text"] == [
        "[image: image/svg+xml]",
        "[image: image/bmp]",
        "[image: image/tiff]",
        "[image: image/x-icon]",
    ]
    assert_idle(ex)


async def test_responses_get_only_image_types_the_api_takes() -> None:
    ex = _pictures()
    call = {"type": "function_call", "call_id": "p", "name": "pictures", "arguments": "{}"}
    (out,) = await fg_openai.execute_response_calls(ex, [call])
    items: list[Any] = list(out["output"])
    urls = [i["image_url"] for i in items if i["type"] == "input_image"]
    assert urls == [f"data:image/png;base64,{PNG}", f"data:image/jpeg;base64,{PNG}"]
    texts = [i["text"] for i in items if i["type"] == "input_text"]
    assert texts == [
        "[image: image/svg+xml]",
        "[image: image/bmp]",
        "[image: image/tiff]",
        "[image: image/x-icon]",
    ]
    assert_idle(ex)


async def test_the_agents_sdk_gets_only_image_types_the_api_takes() -> None:
    pytest.importorskip("agents", reason="needs the test extra (openai-agents)")
    from agents import FunctionTool, ToolOutputImage, ToolOutputText
    from agents.tool_context import ToolContext

    from fastgate.adapters.openai_agents import function_tools

    ex = _pictures()
    (pictures,) = [t for t in function_tools(ex) if isinstance(t, FunctionTool)
                   and t.name == "pictures"]  # fmt: skip
    context = ToolContext(
        context=ExecutionContext(session_id="s"),
        tool_name="pictures",
        tool_call_id="p",
        tool_arguments="{}",
    )
    outputs = await pictures.on_invoke_tool(context, "{}")
    images = [o.image_url for o in outputs if isinstance(o, ToolOutputImage)]
    assert images == [f"data:image/png;base64,{PNG}", f"data:image/jpeg;base64,{PNG}"]
    texts = [o.text for o in outputs if isinstance(o, ToolOutputText)]
    assert texts == [
        "[image: image/svg+xml]",
        "[image: image/bmp]",
        "[image: image/tiff]",
        "[image: image/x-icon]",
    ]
    assert_idle(ex)


# -- no content at all -------------------------------------------------------------------------


async def test_a_result_without_content_is_an_empty_string_never_an_empty_list() -> None:
    # The API refuses a tool message or output item whose content is an empty list.
    ex = _returning("nothing", ())
    (message,) = await fg_openai.execute_tool_calls(ex, [_call_of("c", "nothing")])
    assert message["content"] == ""
    output: list[Any] = [
        {"type": "function_call", "call_id": "f", "name": "nothing", "arguments": "{}"},
        {"type": "custom_tool_call", "call_id": "k", "name": "nothing", "input": "{}"},
    ]
    items = await fg_openai.execute_response_calls(ex, output)
    assert [item["output"] for item in items] == ["", ""]
    uses = [{"type": "tool_use", "id": "a", "name": "nothing", "input": {}}]
    (block,) = await fg_anthropic.execute_tool_uses(ex, uses)
    assert block["content"] == ""  # the same answer from every adapter
    assert [r.content for r in ex.history()] == [(), (), (), ()]
    assert_idle(ex)


async def test_the_agents_sdk_gets_an_empty_string_for_no_content() -> None:
    pytest.importorskip("agents", reason="needs the test extra (openai-agents)")
    from agents import FunctionTool
    from agents.tool_context import ToolContext

    from fastgate.adapters.openai_agents import function_tools

    ex = _returning("nothing", ())
    (nothing,) = [t for t in function_tools(ex) if isinstance(t, FunctionTool)
                  and t.name == "nothing"]  # fmt: skip
    context = ToolContext(
        context=ExecutionContext(session_id="s"),
        tool_name="nothing",
        tool_call_id="n",
        tool_arguments="{}",
    )
    # An empty list would reach the model as the text "[]".
    assert await nothing.on_invoke_tool(context, "{}") == ""
    assert_idle(ex)


def _call_of(call_id: str, name: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}


# -- content blocks that cannot be shown ------------------------------------------------------


class _Unprintable:
    """A block a tool returned that neither JSON nor ``str`` can show."""

    def __str__(self) -> str:
        raise RuntimeError("no text for this")

    __repr__ = __str__


class _UnprintableDict(dict[Any, Any]):
    """A mapping with a key JSON cannot take and a ``str`` that raises."""

    def __str__(self) -> str:
        raise ValueError("no text for this either")


def _unprintable() -> ToolExecutor:
    odd = ("before", _Unprintable(), _UnprintableDict({(1, 2): "tuple key"}), "after")
    return _returning("odd", odd)


def _texts(blocks: Any) -> list[str]:
    return [str(b["text"]) if isinstance(b, dict) else str(b) for b in blocks]


UNPRINTABLE_TEXTS = [
    "before",
    "[... a '_Unprintable' content block left out: not JSON ...]",
    "[... a '_UnprintableDict' content block left out: not JSON ...]",
    "after",
]


async def test_blocks_that_cannot_be_shown_are_named_never_raised() -> None:
    ex = _unprintable()
    use = {"type": "tool_use", "id": "u", "name": "odd", "input": {}}
    (block,) = await fg_anthropic.execute_tool_uses(ex, [use])
    assert _texts(block["content"]) == UNPRINTABLE_TEXTS
    call = {"id": "c", "type": "function", "function": {"name": "odd", "arguments": "{}"}}
    (message,) = await fg_openai.execute_tool_calls(ex, [call])
    assert _texts(message["content"]) == UNPRINTABLE_TEXTS
    item = {"type": "function_call", "call_id": "r", "name": "odd", "arguments": "{}"}
    (out,) = await fg_openai.execute_response_calls(ex, [item])
    assert _texts(out["output"]) == UNPRINTABLE_TEXTS
    assert_idle(ex)


async def test_blocks_that_cannot_be_shown_through_the_frameworks() -> None:
    pytest.importorskip("agents", reason="needs the test extra (openai-agents)")
    pytest.importorskip("langchain_core", reason="needs the test extra (langchain-core)")
    from agents import FunctionTool
    from agents.tool_context import ToolContext

    from fastgate.adapters.langchain import tools as langchain_tools
    from fastgate.adapters.openai_agents import function_tools

    ex = _unprintable()
    (odd,) = [t for t in function_tools(ex) if isinstance(t, FunctionTool) and t.name == "odd"]
    context = ToolContext(
        context=ExecutionContext(session_id="s"),
        tool_name="odd",
        tool_call_id="a",
        tool_arguments="{}",
    )
    outputs = await odd.on_invoke_tool(context, "{}")
    assert [o.text for o in outputs] == UNPRINTABLE_TEXTS
    (lc,) = [t for t in langchain_tools(ex) if t.name == "odd"]
    message = await lc.ainvoke({"type": "tool_call", "id": "l", "name": "odd", "args": {}})
    assert _texts(message.content) == UNPRINTABLE_TEXTS
    assert_idle(ex)
