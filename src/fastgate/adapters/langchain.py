"""LangChain and LangGraph: the registry as tools whose calls go through fastgate::

    from langgraph.prebuilt import ToolNode
    from fastgate.adapters.langchain import tools

    node = ToolNode(tools(executor))
    config = {"configurable": {"fastgate_context": ExecutionContext(session_id="s1")}}
    update = await node.ainvoke({"messages": [ai_message]}, config)

Each call (a model's tool call, with its id) runs the whole pipeline and answers with a
``ToolMessage``: ``status="success"`` and the tool's content, or ``status="error"`` and
``Error (CODE): explanation``; its ``artifact`` is the fastgate ``ToolResult`` (serialized, by
``model_dump_json()`` or a LangGraph checkpointer, as its durable part). The tools are
asynchronous only (``ainvoke``; a sync ``invoke`` raises): the executor is.

The call's ``ExecutionContext`` is ``context`` when one is given (or what a function of the
``RunnableConfig`` returns), else ``config["configurable"]["fastgate_context"]``, else the
executor's ``context_defaults``. Needs the ``langchain`` extra (``langchain-core``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

try:
    import langchain_core  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise ImportError(
        "fastgate.adapters.langchain needs langchain-core: pip install 'fastgate[langchain]'"
    ) from exc

from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from pydantic import ConfigDict

from fastgate.adapters._common import (
    blocks_of,
    error_text,
    flat_text,
    image_of,
    in_scope,
    model_tools,
    resource_text,
    text_of,
)
from fastgate.adapters._serialized import ReturnedResult
from fastgate.model import ExecutionContext, ToolResult
from fastgate.pipeline import ToolExecutor

__all__ = ("CONTEXT_KEY", "FastgateTool", "ReturnedResult", "tools")

CONTEXT_KEY = "fastgate_context"  # in config["configurable"]
ContextSource = ExecutionContext | Callable[[RunnableConfig], ExecutionContext] | None


class FastgateTool(BaseTool):
    """One registry tool, its calls run by ``executor``."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    executor: ToolExecutor
    context: Any = None  # a ContextSource
    scope: str | None = None

    def _to_args_and_kwargs(
        self, tool_input: str | dict[str, Any], tool_call_id: str | None
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        # The arguments as one object, unparsed: fastgate validates them (and an argument named
        # like a keyword of _arun cannot collide with it).
        return (tool_input, tool_call_id), {}

    def _run(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{self.name} runs through fastgate: call it with ainvoke")

    async def _arun(
        self, tool_input: Any, tool_call_id: str | None, *, config: RunnableConfig
    ) -> Any:
        ctx = in_scope(self._context_of(config), self.scope)
        result = await self.executor.execute(self.name, tool_input, ctx, call_id=tool_call_id)
        content = _content(result)
        if tool_call_id is None:  # invoked with bare arguments: LangChain returns the content
            return content
        return ToolMessage(
            content=content,
            tool_call_id=tool_call_id,
            name=self.name,
            status="success" if result.ok else "error",
            artifact=ReturnedResult.of(result),
        )

    def _context_of(self, config: RunnableConfig) -> ExecutionContext | None:
        if isinstance(self.context, ExecutionContext):
            return self.context
        if self.context is not None:
            made: ExecutionContext = self.context(config)
            return made
        given = (config.get("configurable") or {}).get(CONTEXT_KEY)
        return given if isinstance(given, ExecutionContext) else None


def tools(
    executor: ToolExecutor, *, scope: str | None = None, context: ContextSource = None
) -> list[BaseTool]:
    """One LangChain tool per tool ``scope`` sees, sorted by name (for ``ToolNode``, or a chat
    model's ``bind_tools``)."""
    return [
        FastgateTool(
            name=schema["name"],
            description=schema["description"],
            args_schema=schema["parameters"],
            executor=executor,
            context=context,
            scope=scope,
        )
        for _, schema in model_tools(executor.registry, scope)
    ]


def _content(result: ToolResult) -> str | list[str | dict[str, Any]]:
    """A ToolMessage's content: text, or LangChain's standard text and image blocks."""
    if not result.ok:
        return error_text(result)
    if isinstance(result.content, str):
        return result.content
    out: list[str | dict[str, Any]] = []
    for block in blocks_of(result.content):
        text = text_of(block)
        if text is None:
            text = resource_text(block)
        image = image_of(block) if text is None else None
        if image is not None:
            out.append({"type": "image", "base64": image[1], "mime_type": image[0]})
        else:
            out.append({"type": "text", "text": text if text is not None else flat_text(block)})
    return out
