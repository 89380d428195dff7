"""The ``RunContext`` a tool's body gets from the executor (stage 12).

A module of its own: the stage-order test runs the executor's source interpreted, and takes this
class from source with it (compiled, it would only accept the compiled executor's classes).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast

from fastgate.paths.canonical import absolute_path, lock_key
from fastgate.pipeline.run_context import RunContext

if TYPE_CHECKING:
    from fastgate.admission.holds import Holds
    from fastgate.pipeline.executor import ToolExecutor, _Call


class BodyContext(RunContext):
    """Progress reports and ``lock_paths`` go back to the executor and the call's holds.
    ``signal`` is made on first use; invocation cancels it when the caller's token or the
    deadline fires."""

    __slots__ = ("_call", "_executor", "_holds")

    def __init__(
        self,
        executor: ToolExecutor,
        call: _Call,
        holds: Holds,
    ) -> None:
        # Every RunContext field set here directly: no keyword parsing on the hot path.
        ctx = call.ctx
        self.execution_id = call.execution_id
        self.tool_name = call.name  # the name the registry resolved
        self.context = ctx
        self.session_id = ctx.session_id
        self.workspace_root = ctx.workspace_root
        self._signal = None
        # Set to 1 as the body starts (invocation): still 0 when the caller is cancelled means
        # the body's task never took a step, so nothing ran.
        self.attempt = 0
        self._progress = self._lock_paths = None
        # A tuple once the config is made (declared as an Iterable for its constructor).
        self.additional_dirs = cast(tuple[str, ...], executor.permissions.additional_dirs)
        self._fs = None
        self._shell = None
        self._changed = None
        self._executor = executor
        self._call = call
        self._holds = holds

    def report_progress(self, data: Any) -> None:
        self._executor._progress.report(self.execution_id, self.tool_name, data)

    def audit_network_refusal(self, host: str, port: int, reason: str) -> None:
        self._executor._audit_network_refusal(self._call, host, port, reason)

    async def lock_paths(self, paths: Iterable[str]) -> None:
        root = self.workspace_root or os.getcwd()
        keys = {lock_key(os.path.join(root, p)) for p in paths} - set(self._call.lock_keys)
        if keys:
            locks = self._executor.locks.acquire_keys(keys, self.execution_id)
            await self._holds.enter(locks, None)

    def checked_path(self, path: str) -> str:
        root = self.workspace_root or os.getcwd()
        given = absolute_path(root, path)
        for absolute, canonical in self._call.checked_paths:
            if absolute == given:
                return canonical
        return RunContext.checked_path(self, path)  # a path stage 5 did not see

    def may_read(self, path: str) -> bool:
        plan = self._call.plan
        assert plan is not None  # a body runs only once its tool is known
        return self._executor._resolver.may_read(plan.tool, path, self.context)
