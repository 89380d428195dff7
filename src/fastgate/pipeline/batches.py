"""``execute_parallel``: a batch of calls from one model turn (SPEC §11).

Each call is classified when it reaches the front of the batch (not once for the whole batch:
a registry swap or a classifier that depends on state takes effect at once). Shared calls run
in a rolling pool of ``max_parallel``; an exclusive call waits for everything started before it,
runs alone, and only then lets the batch go on. Results are committed in model order:
``on_commit`` sees the longest prefix whose results are all ready, never a later one first.

If ``execute`` itself fails (an exception instead of a result: a bug, not a tool error), no new
call is started, the calls already running are drained, no result is made up for the others,
and the first failure is raised.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fastgate.model.context import ExecutionContext, ToolCall, with_idempotency_key
from fastgate.model.results import ToolResult

if TYPE_CHECKING:
    from fastgate.pipeline.executor import ToolExecutor

log = logging.getLogger("fastgate.pipeline.batches")


async def run_parallel(
    executor: ToolExecutor,
    calls: list[ToolCall],
    ctx: ExecutionContext | None,
    max_parallel: int,
    on_commit: Callable[[ToolResult], Any] | None,
) -> list[ToolResult]:
    if isinstance(max_parallel, bool) or not isinstance(max_parallel, int) or max_parallel < 1:
        raise ValueError(f"max_parallel: expected a positive integer, got {max_parallel!r}")
    for call in calls:
        if not isinstance(call, ToolCall):
            raise TypeError(f"calls: expected ToolCall items, got {type(call).__name__}")
    batch = _Batch(executor, calls, ctx, on_commit)
    running: set[asyncio.Task[None]] = set()
    try:
        for index, call in enumerate(calls):
            if batch.failed():
                break
            if executor.classify(call.name, call.args, ctx) == "shared":
                while len(running) >= max_parallel:
                    _, running = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                if batch.failed():
                    break
                running.add(asyncio.create_task(batch.run(index)))
            else:
                if running:  # a barrier: everything started before it finishes first
                    await asyncio.wait(running)
                    running.clear()
                if batch.failed():
                    break
                await batch.run(index)
        if running:
            await asyncio.wait(running)
    except asyncio.CancelledError:
        for task in running:
            task.cancel()
        if running:
            await asyncio.wait(running)
        raise
    if batch.failure is not None:
        raise batch.failure
    return [r for r in batch.results if r is not None]


class _Batch:
    __slots__ = ("calls", "committed", "ctx", "executor", "failure", "on_commit", "results")

    def __init__(
        self,
        executor: ToolExecutor,
        calls: list[ToolCall],
        ctx: ExecutionContext | None,
        on_commit: Callable[[ToolResult], Any] | None,
    ) -> None:
        self.executor = executor
        self.calls = calls
        self.ctx = ctx
        self.on_commit = on_commit
        self.results: list[ToolResult | None] = [None] * len(calls)
        self.committed = 0
        self.failure: BaseException | None = None

    async def run(self, index: int) -> None:
        call = self.calls[index]
        try:
            ctx = with_idempotency_key(self.ctx, call.idempotency_key)
            result = await self.executor.execute(call.name, call.args, ctx, call_id=call.id)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if self.failure is None:
                self.failure = exc
            return
        self.results[index] = result
        self._commit_ready()

    def failed(self) -> bool:
        return self.failure is not None

    def _commit_ready(self) -> None:
        results = self.results
        while self.committed < len(results):
            result = results[self.committed]
            if result is None:
                return
            self.committed += 1
            if self.on_commit is not None:
                try:
                    self.on_commit(result)
                except Exception:
                    log.exception("on_commit callback failed for %s", result.meta.tool_name)
