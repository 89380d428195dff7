"""What the provider adapters share: reading a model's calls, running them in model order, and
turning content blocks into what each provider accepts."""

from __future__ import annotations

import base64
import dataclasses
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import msgspec

from fastgate.model import ErrorCode, ExecutionContext, ToolCall, ToolResult
from fastgate.pipeline import ToolExecutor
from fastgate.tools import ToolDefinition, ToolRegistry

_NOT_JSON = (msgspec.DecodeError, msgspec.ValidationError, RecursionError)
#: The image types Anthropic's and OpenAI's APIs take in a tool's answer; any other (an SVG
#: chart, a BMP) would make the API refuse the next request, so it is named in text instead.
PROVIDER_IMAGES: Final = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})


class Pending:
    """One call as read from the model's message: its arguments, or why they could not be read."""

    __slots__ = ("args", "call_id", "name", "unreadable")

    def __init__(self, call_id: str, name: str, args: Any, unreadable: str | None = None) -> None:
        self.call_id = call_id
        self.name = name
        self.args = args
        self.unreadable = unreadable  # the model-facing reason, when the arguments are not JSON


def field(item: Any, name: str, default: Any = None) -> Any:
    """``item[name]`` of a dict, ``item.name`` of an SDK object."""
    if isinstance(item, Mapping):
        return item.get(name, default)
    return getattr(item, name, default)


def call_id_of(value: Any) -> str:
    """A provider's call id as text: a missing or ``null`` id is ``""`` (never ``"None"``, which
    would make every call without an id one idempotency key)."""
    if value is None:
        return ""
    return value if isinstance(value, str) else str(value)


def read_arguments(
    executor: ToolExecutor,
    call_id: str,
    name: str,
    raw: Any,
    ctx: ExecutionContext | None,
    decode: Callable[[ToolDefinition | None], Callable[[Any], Any]] | None = None,
) -> Pending:
    """A call whose arguments are a JSON text (OpenAI) or already decoded (Anthropic).

    Text that is not JSON makes the call unreadable with a message saying so; anything that is
    JSON goes to the executor, which answers a non-object with ``INVALID_ARGS`` itself. ``decode``
    reads strict-mode arguments back (see ``_strict``)."""
    tool = resolve_tool(executor.registry, name, ctx)
    if isinstance(raw, (str, bytes, bytearray)):
        if not raw.strip():
            raw = {}  # some models send "" for a call without arguments
        else:
            try:
                raw = msgspec.json.decode(raw)
            except _NOT_JSON as exc:
                if tool is None:  # the executor says UNKNOWN_TOOL, with close matches
                    return Pending(call_id, name, raw)
                reason = (
                    f"The arguments of {name} are not valid JSON ({exc}); send one JSON object "
                    "that matches the tool's parameters."
                )
                return Pending(call_id, name, None, reason)
    if decode is not None:
        raw = decode(tool)(raw)
    return Pending(call_id, name, raw)


def resolve_tool(
    registry: ToolRegistry, name: str, ctx: ExecutionContext | None
) -> ToolDefinition | None:
    try:
        return registry.resolve(name, ctx.agent_scope if ctx is not None else None)
    except KeyError:  # an unknown scope: the executor reports it on the call
        return None


def in_scope(ctx: ExecutionContext | None, scope: str | None) -> ExecutionContext | None:
    """The call's context, running in ``scope`` unless it names an agent scope of its own (a
    framework's tools list what ``scope`` sees, so they run there too)."""
    if scope is None or (ctx is not None and ctx.agent_scope is not None):
        return ctx
    return dataclasses.replace(ctx or ExecutionContext(), agent_scope=scope)


def one_turn(ctx: ExecutionContext | None) -> ExecutionContext:
    """The context one model message runs under. A message is one turn (at most 64 calls,
    SPEC §11): without a ``turn_id`` of the caller's, the message gets a fresh one of its own,
    so a message of 200 calls cannot run them all."""
    if ctx is not None and ctx.turn_id is not None:
        return ctx
    return dataclasses.replace(ctx or ExecutionContext(), turn_id=f"message-{uuid.uuid4().hex}")


async def run_in_order(
    executor: ToolExecutor,
    pending: Sequence[Pending],
    ctx: ExecutionContext | None,
    max_parallel: int,
    idempotent: bool = False,
) -> list[ToolResult]:
    """Results in model order: readable calls through ``execute_parallel``, unreadable ones
    refused with ``INVALID_ARGS`` (recorded like any result) without running. The calls are
    one turn (``one_turn``). ``idempotent``: each call's id is its idempotency key."""
    if not pending:
        return []
    ctx = one_turn(ctx)
    results: list[ToolResult | None] = [None] * len(pending)
    calls: list[ToolCall] = []
    positions: list[int] = []
    for index, call in enumerate(pending):
        if call.unreadable is not None:
            results[index] = executor.refuse(
                call.name,
                ErrorCode.INVALID_ARGS,
                call.unreadable,
                ctx,
                call_id=call.call_id,
                details={"reason": "invalid_json"},
            )
        else:
            key = key_of(call.call_id) if idempotent else None
            calls.append(ToolCall(call.call_id, call.name, call.args, idempotency_key=key))
            positions.append(index)
    if calls:
        ran = await executor.execute_parallel(calls, ctx, max_parallel=max_parallel)
        for index, result in zip(positions, ran, strict=True):
            results[index] = result
    return [r for r in results if r is not None]


def key_of(call_id: str | None) -> str | None:
    """The idempotency key a provider's call id gives (SPEC §24): the id itself, so that the
    same call re-sent is answered from the journal; none for a call without an id."""
    return call_id or None


def model_tools(
    registry: ToolRegistry, scope: str | None
) -> list[tuple[ToolDefinition, dict[str, Any]]]:
    """(definition, ``{name, description, parameters}``) of each tool ``scope`` sees, by name."""
    tools = registry.visible(scope)
    return [(tools[name], tools[name].model_schema()) for name in sorted(tools)]


# -- content blocks ---------------------------------------------------------------------------


def blocks_of(content: Any) -> list[Any]:
    """A result's content as a list of blocks (a string is one text block)."""
    if content is None:
        return []
    if isinstance(content, str):
        return [content]
    if isinstance(content, (list, tuple)):
        return list(content)
    return [content]


def text_of(block: Any) -> str | None:
    """The text of a text block (``str`` or ``{"type": "text", "text": ...}``), else None."""
    if isinstance(block, str):
        return block
    if isinstance(block, Mapping) and block.get("type") == "text":
        text = block.get("text")
        return text if isinstance(text, str) else None
    return None


def image_of(block: Any) -> tuple[str, str] | None:
    """(media type, base64 data) of an image block in MCP's, Anthropic's or OpenAI's shape."""
    if not isinstance(block, Mapping):
        return None
    kind = block.get("type")
    if kind == "image":
        source = block.get("source")
        if isinstance(source, Mapping) and source.get("type") == "base64":
            media, data = source.get("media_type"), source.get("data")
        else:  # MCP: {"type": "image", "data": ..., "mimeType": ...}
            media, data = block.get("mimeType"), block.get("data")
    elif kind == "input_image" and isinstance(block.get("image_url"), str):
        url: str = block["image_url"]
        head, _, data = url.partition(",")
        if not (head.startswith("data:") and head.endswith(";base64")):
            return None
        media = head[len("data:") : -len(";base64")]
    else:
        return None
    if isinstance(media, str) and isinstance(data, (str, bytes)) and media.startswith("image/"):
        return media, data if isinstance(data, str) else base64.b64encode(data).decode()
    return None


def provider_image(block: Any) -> tuple[str, str] | None:
    """``image_of`` for an image of a type the providers' APIs take (``PROVIDER_IMAGES``)."""
    image = image_of(block)
    if image is None:
        return None
    media = image[0].lower()
    media = "image/jpeg" if media == "image/jpg" else media
    return (media, image[1]) if media in PROVIDER_IMAGES else None


def resource_text(block: Any) -> str | None:
    """The text of an MCP embedded text resource block."""
    if isinstance(block, Mapping) and block.get("type") == "resource":
        resource = block.get("resource")
        if isinstance(resource, Mapping) and isinstance(resource.get("text"), str):
            text: str = resource["text"]
            return text
    return None


def as_json_text(block: Any) -> str:
    """A block no provider shape fits, as JSON text (so nothing is silently lost), else its
    ``str``; a block whose ``str`` raises too is named by its type: answering the model never
    raises."""
    try:
        return msgspec.json.encode(block).decode()
    except (TypeError, ValueError, RecursionError, msgspec.EncodeError):
        pass
    try:
        return str(block)
    except Exception:
        return f"[a {type(block).__name__} content block that cannot be shown as text]"


def flat_text(content: Any) -> str:
    """All of a content as one text: text blocks joined, an image named, others as JSON."""
    parts: list[str] = []
    for block in blocks_of(content):
        text = text_of(block)
        if text is None:
            text = resource_text(block)
        if text is None:
            image = image_of(block)
            text = f"[image: {image[0]}]" if image is not None else as_json_text(block)
        parts.append(text)
    return "\n".join(parts)


def error_text(result: ToolResult) -> str:
    """What the model reads for a call that did not succeed: the code, then the explanation."""
    code = result.error.code if result.error is not None else "ERROR"
    return f"Error ({code}): {flat_text(result.content)}"
