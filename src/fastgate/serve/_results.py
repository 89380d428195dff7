"""A fastgate ``ToolResult`` as an MCP ``tools/call`` result.

Ok: the content blocks, and ``structuredContent`` when the tool declares an output schema. A
structured value is sent only when its JSON fits in ``MAX_STRUCTURED_CHARS`` (the executor's
default content budget: content blocks are held to it already); a larger one, or one that
cannot be written as JSON, is never encoded whole: the result is ``isError: true``, its content
the tool's content and a note saying why the structured value is left out (a client bound to
the output schema cannot take the result without it, nor a cut copy of it). A refusal or a
failure: ``isError: true`` with fastgate's message, never a JSON-RPC error. Every
result carries ``_meta.fastgate``: the execution id, the decision's source, the error code and
``details.reason`` (both null on success) and whether the journal answered it (``replayed``).
An ``UNKNOWN_TOOL`` refusal names only tools the caller is shown (``unknown_tool_result``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Final

import msgspec

from fastgate.model import DEFAULT_MAX_CONTENT_CHARS, ToolResult, json_size
from fastgate.pipeline import unknown_tool

_COMPACT: Final = msgspec.json.Encoder()
MAX_STRUCTURED_CHARS: Final = DEFAULT_MAX_CONTENT_CHARS  # of a structured value's JSON


def fastgate_meta(result: ToolResult) -> dict[str, Any]:
    error = result.error
    reason = error.details.get("reason") if error is not None else None
    meta: dict[str, Any] = {
        "execution_id": result.meta.execution_id,
        "decision_source": result.meta.decision_source,
        "code": str(error.code) if error is not None else None,
        "reason": reason if isinstance(reason, str) else None,
        "replayed": bool(getattr(result.meta, "replayed", False)),
    }
    if error is not None and error.retry_after is not None:
        meta["retry_after"] = error.retry_after  # seconds, or words ("retry next turn")
    return meta


def call_result(
    result: ToolResult, *, structured: bool, object_only: bool, modern: bool
) -> dict[str, Any]:
    """The wire result. ``structured``: the tool has an output schema; ``object_only``: the
    protocol era allows only an object as structured content."""
    out: dict[str, Any] = {"content": content_blocks(result), "isError": not result.ok}
    value = result.value
    if result.ok and structured and value is not None and (_object(value) or not object_only):
        value, left_out = structured_value(value)
        if left_out is not None:
            out["content"].append({"type": "text", "text": left_out})
            out["isError"] = True
        elif value is not None and (isinstance(value, dict) or not object_only):
            out["structuredContent"] = value
    out["_meta"] = {"fastgate": fastgate_meta(result)}
    if modern:
        out["resultType"] = "complete"
    return out


def structured_value(value: Any, limit: int = MAX_STRUCTURED_CHARS) -> tuple[Any, str | None]:
    """``(value as plain JSON, None)`` when its JSON fits in ``limit`` characters, else
    ``(None, why it is left out)``. A value over the limit is found so without encoding it:
    what it costs is the limit's, not the value's."""
    if json_size(value, limit) > limit:
        return None, _left_out(f"its JSON is over {limit} characters")
    try:
        encoded = _COMPACT.encode(value)
    except (TypeError, ValueError, RecursionError, msgspec.EncodeError) as exc:
        return None, _left_out(f"it cannot be written as JSON ({type(exc).__name__})")
    if len(encoded) > limit:  # its strings took escapes
        return None, _left_out(f"its JSON is over {limit} characters")
    return msgspec.json.decode(encoded), None


def _left_out(why: str) -> str:
    return (
        f"[... the tool's structured result is left out: {why}; the gateway sends a "
        "structured result only as a whole ...]"
    )


def unknown_tool_result(result: ToolResult, shown: Sequence[str]) -> ToolResult:
    """``result``, an ``UNKNOWN_TOOL`` refusal, whose message and suggestions name only tools
    of ``shown`` (the caller's listing): the pipeline suggests from every tool of the scope,
    tools policy hides from this caller included."""
    error = result.error
    if error is None:
        return result
    message, details = unknown_tool(result.meta.tool_name, shown)
    error = msgspec.structs.replace(error, message=message, details={**error.details, **details})
    # Its content too is the new message: the pipeline's may name the hidden tools.
    return msgspec.structs.replace(result, error=error, content=message)


def content_blocks(result: ToolResult) -> list[dict[str, Any]]:
    content = result.content
    if not result.ok and _empty(content) and result.error is not None:
        content = result.error.message
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, (tuple, list)):
        blocks = [_block(item) for item in content]
        return blocks or [{"type": "text", "text": ""}]
    if content is None:
        return [{"type": "text", "text": ""}]
    return [{"type": "text", "text": _COMPACT.encode(_plain(content)).decode()}]


def _object(value: Any) -> bool:
    """Whether ``value`` is written as a JSON object."""
    return isinstance(value, (Mapping, msgspec.Struct)) or (
        dataclasses.is_dataclass(value) and not isinstance(value, type)
    )


def _empty(content: Any) -> bool:
    return content is None or content == "" or content == ()


def _block(item: Any) -> dict[str, Any]:
    """A content block as MCP shapes it; anything else becomes its text."""
    if isinstance(item, dict) and isinstance(item.get("type"), str):
        return _plain(item)  # type: ignore[no-any-return]
    if isinstance(item, str):
        return {"type": "text", "text": item}
    return {"type": "text", "text": _COMPACT.encode(_plain(item)).decode()}


def _plain(value: Any) -> Any:
    """Frozen values (fastgate's argument snapshots, structs) as plain JSON values."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return msgspec.json.decode(_COMPACT.encode(value))
