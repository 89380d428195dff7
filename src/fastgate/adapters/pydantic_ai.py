"""pydantic-ai: the registry as a toolset whose calls go through fastgate::

    from pydantic_ai import Agent
    from fastgate.adapters.pydantic_ai import toolset

    agent = Agent(model, toolsets=[toolset(executor)], deps_type=ExecutionContext)
    result = await agent.run("fix the test", deps=ExecutionContext(session_id="s1"))

Each call runs the whole pipeline; the answer comes back in pydantic-ai's own shapes: a success
is a ``ToolReturn`` (its ``metadata`` the fastgate ``ToolResult``, which serialized message
history holds as its durable part), a refusal by policy or by the approver a ``ToolDenied``
(the part's outcome ``"denied"``), invalid arguments a ``ModelRetry`` (the model is asked to
fix them, within the tool's ``max_retries``), any other failure a ``ToolFailed``. fastgate
validates the arguments itself: the toolset's own validator accepts any JSON. The tools are
listed again at every step, so registry changes take effect at once.

The call's ``ExecutionContext`` is ``context`` when one is given (or what a function of the run's
``RunContext`` returns), else the run's ``deps`` when they are an ``ExecutionContext``, else the
executor's ``context_defaults``. The calls of one model response are one turn (the context's
``turn_id`` when it has one, else one of the run step's own). Needs the ``pydantic-ai`` extra.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
from collections.abc import Callable
from typing import Any

try:
    import pydantic_ai  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise ImportError(
        "fastgate.adapters.pydantic_ai needs pydantic-ai: pip install 'fastgate[pydantic-ai]'"
    ) from exc

import msgspec
from pydantic_ai import BinaryContent, ModelRetry, RunContext, ToolDenied, ToolFailed, ToolReturn
from pydantic_ai.tools import ToolDefinition as PydanticToolDefinition
from pydantic_ai.toolsets import AbstractToolset, ToolsetTool
from pydantic_core import SchemaValidator, core_schema

from fastgate.adapters._common import (
    blocks_of,
    error_text,
    flat_text,
    image_of,
    in_scope,
    model_tools,
    resolve_tool,
    resource_text,
    text_of,
)
from fastgate.adapters._serialized import ReturnedResult
from fastgate.adapters._strict import decoder_for, strict_form_of
from fastgate.model import ErrorCode, ExecutionContext, ToolResult
from fastgate.pipeline import ToolExecutor

__all__ = ("FastgateToolset", "ReturnedResult", "toolset")

ContextSource = ExecutionContext | Callable[[RunContext[Any]], ExecutionContext] | None
_ANY_JSON = SchemaValidator(core_schema.any_schema())  # fastgate validates, with its own errors
_DENIED = frozenset({ErrorCode.PERMISSION_DENIED, ErrorCode.USER_REJECTED})


class FastgateToolset(AbstractToolset[Any]):
    """The tools a registry scope sees, each call run by ``executor``."""

    def __init__(
        self,
        executor: ToolExecutor,
        *,
        scope: str | None = None,
        context: ContextSource = None,
        max_retries: int = 1,
        id: str | None = None,
    ) -> None:
        self.executor = executor
        self.scope = scope
        self.context = context
        self.max_retries = max_retries
        self._id = id

    @property
    def id(self) -> str | None:
        return self._id

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        tools: dict[str, ToolsetTool[Any]] = {}
        for tool, schema in model_tools(self.executor.registry, self.scope):
            form = strict_form_of(tool)
            parameters = (
                msgspec.json.decode(msgspec.json.encode(form.schema))
                if form is not None
                else schema["parameters"]
            )
            definition = PydanticToolDefinition(
                name=schema["name"],
                description=schema["description"],
                parameters_json_schema=parameters,
                # Strict only where strict mode says the same as the tool's schema.
                strict=form is not None,
            )
            tools[tool.name] = ToolsetTool(
                toolset=self,
                tool_def=definition,
                max_retries=self.max_retries,
                args_validator=_ANY_JSON,
            )
        return tools

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        context = _model_turn(in_scope(self._context_of(ctx), self.scope), ctx)
        args = decoder_for(resolve_tool(self.executor.registry, name, context))(tool_args)
        result = await self.executor.execute(name, args, context, call_id=ctx.tool_call_id)
        return _answer(result)

    def _context_of(self, ctx: RunContext[Any]) -> ExecutionContext | None:
        if isinstance(self.context, ExecutionContext):
            return self.context
        if self.context is not None:
            return self.context(ctx)
        return ctx.deps if isinstance(ctx.deps, ExecutionContext) else None


def _model_turn(context: ExecutionContext | None, ctx: RunContext[Any]) -> ExecutionContext | None:
    """One model response is one turn (at most 64 calls, SPEC §11): without a ``turn_id`` of the
    caller's, the calls of one run step of one run share a turn of their own."""
    if context is not None and context.turn_id is not None:
        return context
    run_id = getattr(ctx, "run_id", None)
    if run_id is None:
        return context
    turn = f"pydantic-ai:{run_id}:{ctx.run_step}"
    return dataclasses.replace(context or ExecutionContext(), turn_id=turn)


def toolset(
    executor: ToolExecutor,
    *,
    scope: str | None = None,
    context: ContextSource = None,
    max_retries: int = 1,
    id: str | None = None,
) -> FastgateToolset:
    """A pydantic-ai toolset of the tools ``scope`` sees, run through ``executor``."""
    return FastgateToolset(executor, scope=scope, context=context, max_retries=max_retries, id=id)


def _answer(result: ToolResult) -> Any:
    if result.ok:
        return ToolReturn(
            return_value=_value_of(result.content), metadata=ReturnedResult.of(result)
        )
    assert result.error is not None
    text = error_text(result)
    if result.error.code in _DENIED:
        return ToolDenied(text)
    if result.error.code == ErrorCode.INVALID_ARGS:
        raise ModelRetry(text)
    raise ToolFailed(text)


def _value_of(content: Any) -> Any:
    """Text, or text and images (``BinaryContent``) for content blocks."""
    if isinstance(content, str):
        return content
    parts: list[Any] = []
    for block in blocks_of(content):
        text = text_of(block)
        if text is None:
            text = resource_text(block)
        image = image_of(block) if text is None else None
        if image is not None:
            try:
                data = base64.b64decode(image[1], validate=True)
            except (binascii.Error, ValueError):
                parts.append(flat_text(block))
                continue
            parts.append(BinaryContent(data=data, media_type=image[0]))
        else:
            parts.append(text if text is not None else flat_text(block))
    return parts
