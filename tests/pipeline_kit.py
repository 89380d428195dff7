"""Small builders shared by the executor tests."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastgate import (
    ConcurrencyScheduler,
    FileLockManager,
    SchedulerLimits,
    ToolExecutor,
    ToolKind,
    ToolRegistry,
    define_tool,
    schema,
)
from fastgate.pipeline import invocation
from fastgate.tools import ToolDefinition

TEXT = schema.Object({"text": schema.String()}, required=("text",))
PATH = schema.Object({"file_path": schema.String()}, required=("file_path",))
COMMAND = schema.Object({"command": schema.String()}, required=("command",))
NOTHING = schema.Object({})


def tool(
    name: str, body: Callable[..., Any], parameters: Any = TEXT, **options: Any
) -> ToolDefinition:
    """An async tool whose body is ``body(args, ctx)`` (sync bodies are wrapped, not threaded)."""

    async def execute(args: Any, ctx: Any) -> Any:
        result = body(args, ctx)
        if hasattr(result, "__await__"):
            return await result
        return result

    options.setdefault("kind", ToolKind.READ_ONLY)
    return define_tool(name, f"The {name} tool.", parameters, execute, **options)


def echo(**options: Any) -> ToolDefinition:
    return tool("echo", lambda args, ctx: args["text"], **options)


def executor(
    *tools: ToolDefinition,
    workspace: Path | None = None,
    executor_class: Any = ToolExecutor,
    **options: Any,
) -> ToolExecutor:
    """An executor with private scheduler and locks (tests never share process-wide state)."""
    registry = ToolRegistry()
    for definition in tools:
        registry.register(definition)
    options.setdefault("scheduler", ConcurrencyScheduler(SchedulerLimits()))
    options.setdefault("locks", FileLockManager())
    defaults = {"session_id": "s1"}
    if workspace is not None:
        defaults["workspace_root"] = str(workspace)
    options.setdefault("context_defaults", defaults)
    options.setdefault("cancel_grace", 0.5)
    executor: ToolExecutor = executor_class(registry, **options)
    return executor


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def assert_idle(ex: ToolExecutor) -> None:
    """Nothing held after the calls: slots, gate, locks, deadlines."""
    deadlines = invocation._deadlines
    if deadlines is not None and deadlines.loop is _running_loop():  # not another thread's
        assert deadlines.pending() == 0, deadlines.pending()
    stats = ex.scheduler.stats()
    assert stats.in_flight == 0 and stats.queued == 0, stats
    for gate in (g.statistics() for g in ex._gates.values()):
        assert gate.shared_running == 0 and not gate.exclusive_running and gate.queued == 0, gate
    assert len(ex.locks) == 0
