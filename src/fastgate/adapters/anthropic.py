"""Anthropic's Messages format: the registry as tools, ``tool_use`` blocks run in model order
(SPEC §19)::

    from fastgate.adapters import anthropic as fg_anthropic

    response = await client.messages.create(
        model=model, max_tokens=1024, messages=messages, tools=fg_anthropic.tools(registry)
    )
    messages.append({"role": "assistant", "content": response.content})
    results = await fg_anthropic.execute_tool_uses(executor, response.content, ctx)
    messages.append({"role": "user", "content": results})

Blocks are read from the SDK's objects or from plain dicts (other blocks than ``tool_use`` are
skipped); the SDK itself is not needed at run time. Several calls run through
``executor.execute_parallel`` and the ``tool_result`` blocks come back in model order, with
``is_error`` for every call that did not succeed. A message is one turn (at most 64 calls run)
unless ``ctx`` names its own ``turn_id``. Content blocks are kept: text as text blocks,
images (MCP's or Anthropic's shape) as image blocks.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final

from fastgate.adapters._common import (
    as_json_text,
    blocks_of,
    call_id_of,
    error_text,
    field,
    image_of,
    model_tools,
    provider_image,
    read_arguments,
    resource_text,
    run_in_order,
    text_of,
)
from fastgate.model import ExecutionContext, ToolResult
from fastgate.pipeline import ToolExecutor
from fastgate.tools import ToolRegistry

if TYPE_CHECKING:  # the SDK's own types, for callers' type checkers; not needed at run time
    from anthropic.types import ToolParam, ToolResultBlockParam

__all__ = ("execute_tool_uses", "tools")

# Blocks a tool_result may hold as they are (Anthropic's own shapes).
_NATIVE: Final = frozenset({"document", "search_result"})


def tools(registry: ToolRegistry, scope: str | None = None) -> list[ToolParam]:
    """Messages API tools (``{"name", "description", "input_schema"}``), sorted by name."""
    return [
        {
            "name": schema["name"],
            "description": schema["description"],
            "input_schema": schema["parameters"],
        }
        for _, schema in model_tools(registry, scope)
    ]


async def execute_tool_uses(
    executor: ToolExecutor,
    content_blocks: Iterable[Any] | None,
    ctx: ExecutionContext | None = None,
    *,
    max_parallel: int = 10,
    idempotent: bool = False,
) -> list[ToolResultBlockParam]:
    """Run the ``tool_use`` blocks of an assistant message's content; one ``tool_result`` block
    per call, in model order. ``idempotent=True``: each block's ``id`` is its call's
    idempotency key (SPEC §24), so a message run again gets the recorded results (the executor
    needs a journal store)."""
    pending = [
        read_arguments(
            executor,
            call_id_of(field(block, "id")),
            str(field(block, "name", "")),
            field(block, "input", {}),
            ctx,
        )
        for block in content_blocks or ()
        if field(block, "type") == "tool_use"
    ]
    results = await run_in_order(executor, pending, ctx, max_parallel, idempotent)
    return [_tool_result(call.call_id, r) for call, r in zip(pending, results, strict=True)]


def _tool_result(tool_use_id: str, result: ToolResult) -> ToolResultBlockParam:
    block: ToolResultBlockParam = {"type": "tool_result", "tool_use_id": tool_use_id}
    if not result.ok:
        block["content"] = error_text(result)
        block["is_error"] = True
    elif isinstance(result.content, str):
        block["content"] = result.content
    else:
        block["content"] = _content_blocks(result.content)
    return block


def _content_blocks(content: Any) -> Any:
    """The tool_result's content blocks (or "" when none is left)."""
    out: list[dict[str, Any]] = []
    for block in blocks_of(content):
        text = text_of(block)
        if text is None:
            text = resource_text(block)
        if text is not None:
            if text:  # the API refuses empty text blocks
                out.append({"type": "text", "text": text})
            continue
        image = provider_image(block)
        if image is not None:
            media, data = image
            source = {"type": "base64", "media_type": media, "data": data}
            out.append({"type": "image", "source": source})
        elif (other := image_of(block)) is not None:  # a type the API refuses: named
            out.append({"type": "text", "text": f"[image: {other[0]}]"})
        elif isinstance(block, dict) and block.get("type") in _NATIVE:
            out.append(block)
        else:
            out.append({"type": "text", "text": as_json_text(block)})
    return out or ""
