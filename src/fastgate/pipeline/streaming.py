"""``StreamingToolExecutor``: tool calls that arrive while the model is still streaming
(SPEC §12).

- A call in the ``prelaunch`` allow-list whose ``is_concurrency_safe(args)`` is exactly ``True``
  starts at once, unless an earlier call of the stream was held back: pre-launch follows model
  order, so one held-back call holds back everything after it. Everything else waits for
  ``finish()``; then ``parallelism`` shapes the batch (shared pool, exclusive barriers), as in
  ``execute_parallel``. Parallelism never widens pre-launch.
- Each call's tool-use record is written to the store before the call can start, one record
  after another in model order, with the call's epoch and its model-order position (taken from
  the executor's positions as the call arrives). With ``require_persistence=True`` a call whose
  record cannot be written fails with ``PERSISTENCE_FAILED`` and never runs. Results are
  recorded too, refusals included.
- The store is the stream's or the executor's (never both). With the executor's, keyed calls
  are journaled (SPEC §24): a keyed call's record is its claim, made when it starts, and the
  next call's record waits for it. The stream's own store keeps no journal for the executor,
  so a keyed call there is a ``ValueError`` naming the fix.
- ``results()`` yields results in model order. ``fallback()`` (the model was switched mid-stream)
  starts a new epoch: old calls that have not started never start, running ones are cancelled,
  and no old result is ever delivered; their outcomes are still recorded.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator, Coroutine, Iterable
from typing import Any, TypeVar

from fastgate.durable.store import ToolUseRecord, ToolUseStore, unrecordable
from fastgate.model.cancel import CancelToken
from fastgate.model.context import ExecutionContext, ToolCall, with_idempotency_key
from fastgate.model.kinds import ToolKind
from fastgate.model.results import ErrorCode, ToolResult
from fastgate.pipeline.executor import ToolExecutor
from fastgate.pipeline.journal import RecordPlace

log = logging.getLogger("fastgate.pipeline.streaming")


class Unrecordable(Exception):
    """A call's record holds text no store can hold (``unrecordable``): the call is refused."""


T = TypeVar("T")


class _Entry:
    """One call of the stream: its place, its record, its task and its result."""

    __slots__ = (
        "call",
        "claim",
        "epoch",
        "execution_id",
        "previous",
        "record",
        "result",
        "seq",
        "task",
    )

    def __init__(self, call: ToolCall, execution_id: str, epoch: int, seq: int) -> None:
        self.call = call
        # The record's id is the result's: unique even when a new epoch reuses the model's call
        # ids, so a record, its result and the history entry join on it.
        self.execution_id = execution_id
        self.epoch = epoch
        self.seq = seq
        # A keyed call of an executor with a store: its journal claim writes its record.
        self.claim: RecordPlace | None = None
        self.previous: asyncio.Task[BaseException | None] | None = None  # the record before
        self.record: asyncio.Task[BaseException | None] | None = None
        self.task: asyncio.Task[None] | None = None
        self.result: asyncio.Future[ToolResult] = asyncio.get_running_loop().create_future()


class StreamingToolExecutor:
    """Runs one turn's tool calls as the model streams them. Use it from one event loop."""

    def __init__(
        self,
        executor: ToolExecutor,
        ctx: ExecutionContext | None = None,
        store: ToolUseStore | None = None,
        require_persistence: bool = False,
        prelaunch: Iterable[str] = (),
        *,
        max_parallel: int = 10,
    ) -> None:
        if not isinstance(executor, ToolExecutor):
            raise TypeError(f"executor: expected a ToolExecutor, got {type(executor).__name__}")
        if isinstance(prelaunch, str):
            raise TypeError("prelaunch: expected a collection of tool names, not one string")
        if isinstance(max_parallel, bool) or not isinstance(max_parallel, int) or max_parallel < 1:
            raise ValueError(f"max_parallel: expected a positive integer, got {max_parallel!r}")
        if store is not None and executor.store is not None:
            raise ValueError("store: the executor already records calls; give the store to one")
        self.executor = executor
        self.store = store
        # Where the stream writes records: its store, else the executor's (which journals keys).
        self._records_to = store if store is not None else executor.store
        self.require_persistence = require_persistence
        self.prelaunch = frozenset(prelaunch)
        self.max_parallel = max_parallel
        self._ctx = ctx if ctx is not None else ExecutionContext()
        self._epoch = 0
        self._epoch_cancel = CancelToken()
        self._epoch_ctx = self._context_for_epoch()
        self._entries: list[_Entry] = []
        self._held_back = False
        self._finished = False
        self._last_record: asyncio.Task[BaseException | None] | None = None
        self._dispatcher: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._changed = asyncio.Event()

    @property
    def epoch(self) -> int:
        return self._epoch

    # -- the stream -----------------------------------------------------------------------------

    def add_tool(self, call: ToolCall) -> None:
        """A tool call arrived; it starts now if it may be pre-launched (see module docs)."""
        if not isinstance(call, ToolCall):
            raise TypeError(f"call: expected a ToolCall, got {type(call).__name__}")
        if self._finished:
            raise RuntimeError("the stream is finished: call fallback() to start a new epoch")
        keyed = self._key_of(call) is not None
        if keyed and self.store is not None:
            raise ValueError(
                f"call {call.id!r} has an idempotency key, but the stream's executor has no store "
                "to journal keys in, so a repeat would run it again: give the store to the "
                "executor (ToolExecutor(..., store=store)) instead of the stream"
            )
        entry = _Entry(
            call, self.executor.new_execution_id(), self._epoch, self.executor._next_position()
        )
        if keyed and self._records_to is not None:
            entry.claim = RecordPlace(entry.epoch, entry.seq, recorded=False)
        self._entries.append(entry)
        entry.previous = self._last_record
        entry.record = self._spawn(self._write_record(entry, self._last_record))
        self._last_record = entry.record
        if not self._held_back and self._may_prelaunch(call):
            self._start(entry)
        else:
            self._held_back = True  # model order: nothing after a held-back call pre-launches
        self._changed.set()

    def finish(self) -> None:
        """The model finished streaming: every call not yet started now runs."""
        if self._finished:
            return
        self._finished = True
        self._dispatcher = self._spawn(self._dispatch(self._epoch, list(self._entries)))
        self._changed.set()

    def fallback(self) -> None:
        """Start a new epoch: old calls never deliver results (see module docs)."""
        old = self._entries
        self._epoch_cancel.cancel("fallback")
        self._epoch += 1
        self._epoch_cancel = CancelToken()
        self._epoch_ctx = self._context_for_epoch()
        self._entries = []
        self._held_back = False
        self._finished = False
        for entry in old:
            if entry.task is None:  # never started: it will record its refusal and stop
                self._start(entry)
        self._changed.set()

    async def results(self) -> AsyncIterator[ToolResult]:
        """Results of the current epoch in model order, until ``finish()``ed calls are all out.

        After a ``fallback()`` it goes on with the new epoch's calls from the first one.
        """
        epoch, index = self._epoch, 0
        while True:
            if epoch != self._epoch:
                epoch, index = self._epoch, 0
            if index < len(self._entries):
                entry = self._entries[index]
                changed = asyncio.ensure_future(self._changed_after_clear())
                try:
                    await asyncio.wait((entry.result, changed), return_when=asyncio.FIRST_COMPLETED)
                finally:
                    changed.cancel()
                if entry.epoch != self._epoch:
                    continue  # a fallback happened: never deliver an old result
                if entry.result.done():
                    yield entry.result.result()
                    index += 1
            elif self._finished:
                return
            else:
                await self._changed_after_clear()

    async def aclose(self) -> None:
        """Cancel what is still running (results are recorded) and wait for every task."""
        self._epoch_cancel.cancel("closed")
        self._finished = True
        for entry in self._entries:
            if entry.task is None:
                self._start(entry)
        while self._tasks:
            await asyncio.wait(set(self._tasks))

    async def __aenter__(self) -> StreamingToolExecutor:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- internals ------------------------------------------------------------------------------

    def _context_for_epoch(self) -> ExecutionContext:
        cancel = (
            CancelToken.any(self._ctx.cancel, self._epoch_cancel)
            if self._ctx.cancel is not None
            else self._epoch_cancel
        )
        return dataclasses.replace(self._ctx, cancel=cancel)

    def _key_of(self, call: ToolCall) -> str | None:
        return (
            call.idempotency_key if call.idempotency_key is not None else self._ctx.idempotency_key
        )

    def _reads_only(self, name: str) -> bool:
        try:
            tool = self.executor.registry.resolve(name, self._ctx.agent_scope)
        except KeyError:  # an unknown scope: the call will be refused, its record kept synced
            return False
        return tool is not None and tool.kind is ToolKind.READ_ONLY

    def _may_prelaunch(self, call: ToolCall) -> bool:
        if call.name not in self.prelaunch:
            return False
        try:
            tool = self.executor.registry.resolve(call.name, self._ctx.agent_scope)
        except KeyError:  # an unknown scope: the call will be refused
            return False
        return tool is not None and tool.concurrency_safe(call.args) is True

    def _spawn(self, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _start(self, entry: _Entry) -> asyncio.Task[None]:
        task = entry.task = self._spawn(self._run(entry))
        return task

    async def _changed_after_clear(self) -> None:
        self._changed.clear()
        await self._changed.wait()

    async def _write_record(
        self, entry: _Entry, previous: asyncio.Task[Any] | None
    ) -> BaseException | None:
        """Write this call's tool-use record after the previous one: serial, in model order."""
        if previous is not None:
            await asyncio.wait((previous,))
        if entry.claim is not None:  # its claim writes it once the call starts (or it is refused)
            await asyncio.wait((entry.claim.claimed,))
            return None
        return await self._save_tool_use(entry)

    async def _save_tool_use(self, entry: _Entry) -> BaseException | None:
        if self._records_to is None:
            return None
        call, ctx = entry.call, self._ctx
        record = ToolUseRecord(
            entry.execution_id,
            call.id,
            ctx.session_id,
            ctx.turn_id,
            entry.epoch,
            entry.seq,
            call.name,
            call.args,
            self._reads_only(call.name),
        )
        why = unrecordable(record)
        if why is not None:
            return Unrecordable(why)
        try:
            await self._records_to.record_tool_use(record)
        except Exception as exc:
            log.warning("tool-use record of %s not saved: %s", call.id, exc)
            return exc
        return None

    async def _save_result(self, entry: _Entry, result: ToolResult) -> None:
        assert self._records_to is not None
        try:
            await self._records_to.record_result(entry.execution_id, result.durable())
        except Exception as exc:
            log.warning("result record of %s not saved: %s", entry.call.id, exc)

    def _refusal(
        self, entry: _Entry, record_error: BaseException | None
    ) -> tuple[ErrorCode, str, dict[str, Any] | None] | None:
        """Why the call is not run, if it is not: its record holds text no store can hold
        (whatever the persistence setting), its record was not saved and persistence is
        required, or the model was switched before it started."""
        if isinstance(record_error, Unrecordable):
            message = f"The call was not run: {record_error}, so it cannot be recorded."
            return ErrorCode.INVALID_ARGS, message, {"reason": "unrecordable"}
        if record_error is not None and self._requires_persistence():
            message = f"The call was not run: its record could not be saved ({record_error})."
            return ErrorCode.PERSISTENCE_FAILED, message, None
        if entry.epoch != self._epoch or self._epoch_cancel.cancelled:
            message = "The model was switched before this call started; it was not run."
            return ErrorCode.ABORTED_BEFORE_DISPATCH, message, None
        return None

    def _requires_persistence(self) -> bool:
        executor = self.executor
        return self.require_persistence or (
            executor.store is not None and executor._require_persistence
        )

    async def _run(self, entry: _Entry) -> None:
        try:
            result = await self._outcome(entry)
        finally:
            if entry.claim is not None:  # whatever happened, the next record may be written
                entry.claim.settle()
        entry.result.set_result(result)
        self._changed.set()

    async def _outcome(self, entry: _Entry) -> ToolResult:
        """Run the call, or refuse it; either way its records are written (see module docs)."""
        if entry.claim is not None:
            return await self._keyed_outcome(entry, entry.claim)
        assert entry.record is not None
        return await self._recorded_outcome(entry, await entry.record)

    async def _keyed_outcome(self, entry: _Entry, claim: RecordPlace) -> ToolResult:
        """A keyed call of an executor with a store: after the records before it, its claim
        writes its own. Refused, it claims no key (it stays free) but is recorded all the same."""
        if entry.previous is not None:
            await asyncio.wait((entry.previous,))
        if self._refusal(entry, None) is None:
            return await self._execute(entry, claim)
        return await self._recorded_outcome(entry, await self._save_tool_use(entry))

    async def _recorded_outcome(
        self, entry: _Entry, record_error: BaseException | None
    ) -> ToolResult:
        """The call once its tool-use record was written (or not: ``record_error``)."""
        refusal = self._refusal(entry, record_error)
        if refusal is None and self.executor.store is not None:  # it records the result
            place = RecordPlace(entry.epoch, entry.seq, recorded=record_error is None)
            return await self._execute(entry, place)
        if refusal is None:
            result = await self._execute(entry, None)
        else:
            result = self._refuse(entry, *refusal)
        if self._records_to is not None and record_error is None:
            await self._save_result(entry, result)
        return result

    async def _execute(self, entry: _Entry, place: RecordPlace | None) -> ToolResult:
        call = entry.call
        ctx = with_idempotency_key(self._epoch_ctx, call.idempotency_key)
        assert ctx is not None
        if place is None:
            return await self.executor.execute(
                call.name, call.args, ctx, call_id=call.id, execution_id=entry.execution_id
            )
        return await self.executor._execute_streamed(
            place, call.name, call.args, ctx, call_id=call.id, execution_id=entry.execution_id
        )

    def _refuse(
        self, entry: _Entry, code: ErrorCode, message: str, details: dict[str, Any] | None
    ) -> ToolResult:
        call = entry.call
        return self.executor.refuse(
            call.name,
            code,
            message,
            self._ctx,
            call_id=call.id,
            details=details,
            execution_id=entry.execution_id,
        )

    async def _dispatch(self, epoch: int, entries: list[_Entry]) -> None:
        """After the stream: shared calls in a rolling pool, exclusive calls as barriers."""
        running = {e.task for e in entries if e.task is not None and not e.task.done()}
        for entry in entries:
            if entry.task is not None:
                continue
            if epoch != self._epoch:
                return  # fallback() takes care of the rest
            mode = self.executor.classify(entry.call.name, entry.call.args, self._ctx)
            if mode == "shared":
                while len(running) >= self.max_parallel:
                    _, running = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            elif running:
                await asyncio.wait(running)
                running = set()
            if epoch != self._epoch or entry.task is not None:
                continue
            task = self._start(entry)
            if mode == "shared":
                running.add(task)
            else:
                await asyncio.wait((task,))
