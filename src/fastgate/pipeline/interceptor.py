"""What ``ToolExecutor(code_mode=...)`` needs of a code mode (SPEC §15)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from fastgate.model.context import ExecutionContext
    from fastgate.model.results import ErrorCode
    from fastgate.pipeline.executor import ToolExecutor
    from fastgate.tools import ToolDefinition


class CodeModeHost(Protocol):
    """What ``ToolExecutor(code_mode=...)`` needs of ``fastgate.codemode.CodeMode`` (SPEC §15);
    the core never imports the subpackage."""

    def attach(self, executor: ToolExecutor) -> ToolDefinition:
        """Bind to ``executor``, register the reserved ``run_code`` tool, return it."""
        ...

    def judge(
        self,
        name: str,
        tool: ToolDefinition | None,
        parent_execution_id: str | None,
        ctx: ExecutionContext,
    ) -> tuple[ErrorCode, str, dict[str, Any]] | None:
        """``None`` when the call may go on to the policy stages, else its refusal."""
        ...

    def close(self) -> None:
        """Stop the warm workers (the executor is being disposed)."""
        ...
