"""A call's ``ToolResult`` as the frameworks built on pydantic keep it (pydantic-ai's message
history, a LangChain ``ToolMessage``'s ``artifact``, LangGraph's checkpoints): the result itself
in this process, and its durable part when they serialize it. Imported only by the adapters of
those frameworks, which bring ``pydantic_core``."""

from __future__ import annotations

from typing import Any

import msgspec
from pydantic_core import SchemaSerializer, core_schema

from fastgate.model import ToolResult


def _shown(value: Any) -> str:
    try:
        return repr(value)
    except Exception:
        return f"<{type(value).__name__}>"


def _durable(result: ToolResult) -> Any:
    return msgspec.to_builtins(result.durable(), enc_hook=_shown)


class ReturnedResult(ToolResult, frozen=True):
    """A ``ToolResult`` that pydantic can serialize: as its durable part (``ok``, ``content``,
    ``error``, ``meta``; never the canonical ``value``, which lives in-process only). Without
    it, serializing the conversation (``all_messages_json()``, ``model_dump_json()``, a
    LangGraph checkpointer) fails on the unknown type."""

    __pydantic_serializer__ = SchemaSerializer(
        core_schema.any_schema(
            serialization=core_schema.plain_serializer_function_ser_schema(_durable)
        )
    )

    @classmethod
    def of(cls, result: ToolResult) -> ReturnedResult:
        return cls(**{name: getattr(result, name) for name in ToolResult.__struct_fields__})
