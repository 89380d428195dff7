"""The OpenAI Agents SDK: the registry as ``FunctionTool`` s whose calls go through fastgate::

    from agents import Agent, Runner
    from fastgate.adapters.openai_agents import function_tools

    agent = Agent(name="coder", tools=function_tools(executor))
    result = await Runner.run(agent, "fix the test", context=ExecutionContext(session_id="s1"))

Each call runs the whole pipeline (validation, policy, approval through the context's approver,
fair admission, invocation, hooks). The tool's answer is what the SDK expects from a tool: its
text (or text and image outputs for content blocks); a call that did not succeed answers
``Error (CODE): explanation``, which the SDK sends to the model like any output (a refusal is
an answer the model can act on, not an exception that ends the run).

The call's ``ExecutionContext`` is ``context`` when one is given (or what a function of the
SDK's ``ToolContext`` returns), else the run's own context object when it is an
``ExecutionContext``, else the executor's ``context_defaults``. Needs the ``openai-agents`` extra.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

try:
    import agents  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise ImportError(
        "fastgate.adapters.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'fastgate[openai-agents]'"
    ) from exc

import msgspec
from agents import FunctionTool, Tool, ToolOutputImage, ToolOutputText
from agents.tool_context import ToolContext

from fastgate.adapters._common import (
    blocks_of,
    error_text,
    flat_text,
    in_scope,
    key_of,
    model_tools,
    provider_image,
    read_arguments,
    resource_text,
    text_of,
)
from fastgate.adapters._strict import decoder_for, strict_form_of
from fastgate.model import ErrorCode, ExecutionContext, ToolResult, with_idempotency_key
from fastgate.pipeline import ToolExecutor

__all__ = ("function_tools",)

ContextSource = ExecutionContext | Callable[[ToolContext[Any]], ExecutionContext] | None


def function_tools(
    executor: ToolExecutor,
    *,
    scope: str | None = None,
    context: ContextSource = None,
    strict: bool = True,
    idempotent: bool = False,
) -> list[Tool]:
    """One ``FunctionTool`` per tool ``scope`` sees, sorted by name (typed as the SDK's ``Tool``,
    what ``Agent(tools=...)`` takes).

    ``strict=True`` (the SDK's own default) gives a tool its strict schema where strict mode
    says the same as the tool's schema (``fastgate.adapters.openai``), and leaves it non-strict
    otherwise. ``idempotent=True``: the SDK's ``tool_call_id`` is the call's idempotency key
    (SPEC §24): the same call run again (a resumed run, a retried activity) gets the recorded
    result (the executor needs a journal store).
    """
    out: list[Tool] = []
    for tool, schema in model_tools(executor.registry, scope):
        form = strict_form_of(tool) if strict else None
        parameters = (
            msgspec.json.decode(msgspec.json.encode(form.schema))
            if form is not None
            else schema["parameters"]
        )
        out.append(
            FunctionTool(
                name=schema["name"],
                description=schema["description"],
                params_json_schema=parameters,
                on_invoke_tool=_invoker(executor, schema["name"], context, scope, idempotent),
                strict_json_schema=form is not None,
            )
        )
    return out


def _invoker(
    executor: ToolExecutor,
    name: str,
    context: ContextSource,
    scope: str | None,
    idempotent: bool,
) -> Callable[..., Any]:
    async def invoke(tool_context: ToolContext[Any], arguments: str) -> Any:
        ctx = in_scope(_context_of(context, tool_context), scope)
        call_id = tool_context.tool_call_id
        if idempotent:
            ctx = with_idempotency_key(ctx, key_of(call_id))
        call = read_arguments(executor, call_id, name, arguments, ctx, decoder_for)
        if call.unreadable is not None:
            result = executor.refuse(
                name,
                ErrorCode.INVALID_ARGS,
                call.unreadable,
                ctx,
                call_id=call_id,
                details={"reason": "invalid_json"},
            )
        else:
            result = await executor.execute(name, call.args, ctx, call_id=call_id)
        return _output(result)

    return invoke


def _context_of(context: ContextSource, tool_context: ToolContext[Any]) -> ExecutionContext | None:
    if isinstance(context, ExecutionContext):
        return context
    if context is not None:
        return context(tool_context)
    run_context = tool_context.context
    return run_context if isinstance(run_context, ExecutionContext) else None


def _output(result: ToolResult) -> Any:
    """What the SDK sends the model: text, or text and image outputs for content blocks."""
    if not result.ok:
        return error_text(result)
    if isinstance(result.content, str):
        return result.content
    outputs: list[ToolOutputText | ToolOutputImage] = []
    for block in blocks_of(result.content):
        text = text_of(block)
        if text is None:
            text = resource_text(block)
        image = provider_image(block) if text is None else None
        if image is not None:
            outputs.append(ToolOutputImage(image_url=f"data:{image[0]};base64,{image[1]}"))
        else:
            outputs.append(ToolOutputText(text=text if text is not None else flat_text(block)))
    return outputs or ""  # no blocks: "" (the SDK would send an empty list as the text "[]")
