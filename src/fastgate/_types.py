"""Typing helpers shared by the façades."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from fastgate.context import ExecutionContext
    from fastgate.executor import ToolExecutor
    from fastgate.results import ErrorCode
    from fastgate.tools import ToolDefinition


class AsyncHold(Protocol):
    """What ``slot()``, ``shared()``, ``exclusive()`` and ``acquire*()`` return (``async with``).

    ``__aenter__``/``__aexit__`` return plain awaitables (not coroutines): the uncontended path
    returns one that is already complete, so entering never costs a loop round-trip.
    """

    def __aenter__(self) -> Awaitable[None]: ...

    def __aexit__(self, exc_type: object, exc: object, tb: object, /) -> Awaitable[None]: ...


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
