"""The seam through which a capability stands between the model and the registry.

A ``CallInterceptor`` adds tools of its own and judges every call at stage 2, before any policy
stage sees it; the executor knows it by this protocol only. Code mode (SPEC §15) is one: given as
``ToolExecutor(code_mode=CodeMode(...))``, it adds ``run_code`` and refuses direct calls of the
other tools, which its programs call through ``ToolExecutor.execute_nested``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from fastgate.model.context import ExecutionContext
    from fastgate.model.results import ErrorCode
    from fastgate.pipeline.executor import ToolExecutor
    from fastgate.tools import ToolDefinition


class CallInterceptor(Protocol):
    """What ``ToolExecutor(code_mode=...)`` needs of the object it is given."""

    def attach(self, executor: ToolExecutor) -> Iterable[ToolDefinition]:
        """Bind to ``executor`` (once, as it is made) and return the tools to add to its
        registry; a name the registry already has is refused. The bodies of these tools make
        calls of their own through ``executor.execute_nested``, so they pass no gate and take no
        scheduler slot: the calls they make do, and would wait forever behind them."""
        ...

    def judge(
        self,
        name: str,
        tool: ToolDefinition | None,
        parent_execution_id: str | None,
        ctx: ExecutionContext,
    ) -> tuple[ErrorCode, str, dict[str, Any]] | None:
        """Stage 2, for every call once the registry has looked ``name`` up (``tool`` is
        ``None`` when no tool answers to it; ``parent_execution_id`` is set for a nested call):
        ``None`` lets the call go on; ``(code, message, details)`` refuses it."""
        ...

    def close(self) -> None:
        """The executor is being disposed: release what ``attach`` started."""
        ...
