"""Keyed calls in the pipeline (SPEC §24): ``claim_key`` runs once a call's tool and arguments
are known and valid, before any hook, guard or approver is consulted.

A call whose context carries an ``idempotency_key`` claims ``(session, key)`` in the executor's
store with its arguments' digest; the store decides atomically what the call does:

- the key is free: the call goes on, its tool-use record written by the claim, and its lease is
  renewed every third of ``lease_ttl`` until the call lets go of its holds (a body that ignored
  cancellation keeps it until it really ends);
- an earlier call with the key completed: its recorded result, ``meta.replayed = True``;
- it is running elsewhere (a live lease): wait for its result, up to the tool's own timeout;
- it was interrupted (its owner's lease expired with no result, or it was cancelled after it
  started): a retry-safe tool claims the key again and runs; any other gets ``ambiguous_outcome``
  until ``store.resolve`` records what happened;
- the key was used with other arguments: ``idempotency_key_reused``.

A keyed call whose entry cannot be written (the store fails, or keeps no journal) does not run
(``PERSISTENCE_FAILED``); an executor without a store records nothing, keys included. Calls made
by a ``run_code`` program are not keyed: their parent call is. A streamed call's claim records it
at the epoch and model-order position its stream gave it (``RecordPlace``).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import TYPE_CHECKING, Any, Final, TypeGuard

import msgspec

from fastgate import _core
from fastgate.admission.holds import Holds, until_cancelled
from fastgate.durable.store import (
    JournalEntry,
    JournalStore,
    ToolUseRecord,
    args_digest,
    key_problem,
    scope_problem,
    unrecordable,
)
from fastgate.model.kinds import ToolKind
from fastgate.model.results import DurableResult, ErrorCode, ToolResult

if TYPE_CHECKING:
    from fastgate.pipeline.executor import ToolExecutor, _Call
    from fastgate.tools import ToolDefinition

log = logging.getLogger("fastgate.pipeline.journal")

_FIRST_PAUSE: Final = 0.01  # seconds before asking again about a running call
_LONGEST_PAUSE: Final = 0.25  # another process's result is noticed within this
# Read per keyed call: an enum member read through its class takes EnumType's slow
# ``__getattr__`` on Python 3.11 (about 90 ns); bound once, compiled, it is a C static.
_READ_ONLY: Final = ToolKind.READ_ONLY


async def claim_key(
    executor: ToolExecutor, call: _Call, tool: ToolDefinition, args: Any, holds: Holds
) -> ToolResult | None:
    """None when the call goes on (it holds the key); else its answer from the journal."""
    key = call.ctx.idempotency_key
    if key is None or call.parent_execution_id is not None:
        return None
    problem = key_problem(key)
    if problem is not None:
        return executor._finalize(
            call, ErrorCode.INVALID_ARGS, problem, details={"reason": "idempotency_key"}
        )
    problem = scope_problem(call.ctx.idempotency_scope)
    if problem is not None:  # a scope no store can key: bad input, not a store that is down
        return _unrecordable(executor, call, problem)
    store = executor.store
    if store is None:  # an executor that records nothing keeps no journal: the key is unused
        return None
    if not _keeps_journal(store):
        message = (
            "The call was not run: a call with an idempotency key needs a store that keeps a "
            "journal (SqliteToolUseStore or PostgresToolUseStore), and this executor's does not."
        )
        return executor._finalize(call, ErrorCode.PERSISTENCE_FAILED, message)
    ctx = call.ctx
    place = call.place
    epoch, seq = (0, executor._next_position()) if place is None else (place.epoch, place.seq)
    record = ToolUseRecord(
        call.execution_id,
        call.call_id,
        ctx.session_id,
        ctx.turn_id,
        epoch,
        seq,
        tool.name,
        args,
        tool.kind is _READ_ONLY,
    )
    why = unrecordable(record)
    if why is not None:
        return _unrecordable(executor, call, why)
    digest = args_digest((tool.name, args))  # the key names one call: this tool, these args
    loop = asyncio.get_running_loop()
    deadline = None if tool.timeout is None else loop.time() + tool.timeout
    pause = _FIRST_PAUSE
    longest = min(_LONGEST_PAUSE, store.lease_ttl / 3)
    scope = ctx.idempotency_scope  # None: the session's keys
    while True:
        try:
            cancelled: asyncio.CancelledError | None = None
            try:
                entry = await store.claim(
                    record, key, digest, take_over=tool.retry_safe, scope=scope
                )
            except asyncio.CancelledError as exc:
                cancelled = exc  # (awaited below, not in this handler: compiled, that crashed)
            if cancelled is not None:
                # The claim may have been committed all the same (the store writes what it
                # was handed): find out, and if the key is this call's, hold it, so that the
                # result the executor records for a call cancelled before it started (nothing
                # ran) frees it again, instead of leaving it taken by a call with no result.
                held = await _held_after_cancel(store, record, key, digest, tool.retry_safe, scope)
                if held is not None:
                    _hold_key(store, loop, call, holds, key, held, scope)
                raise cancelled
        except Exception as exc:
            message = f"The call was not run: its journal entry could not be saved ({exc})."
            return executor._finalize(call, ErrorCode.PERSISTENCE_FAILED, message, retryable=True)
        finally:
            if place is not None:  # the stream may write the next call's record now
                place.settle()
        if entry.status == "claimed":
            _hold_key(store, loop, call, holds, key, entry, scope)
            return None
        if entry.status != "running":
            return _answer(executor, call, key, entry)
        # Running elsewhere: wait for its result (woken at once when it is recorded in this
        # process, else asking again), up to this call's own timeout.
        within = pause if deadline is None else min(pause, deadline - loop.time())
        if within <= 0:
            return _in_progress(executor, call, key, entry.execution_id)
        waiting = store.wait_result(entry.execution_id, within)
        cancel = ctx.cancel
        if cancel is not None:
            await until_cancelled(waiting, cancel)  # Aborted: nothing ran
        else:
            await waiting
        pause = min(2 * pause, longest)


async def _held_after_cancel(
    store: JournalStore,
    record: ToolUseRecord,
    key: str,
    digest: bytes,
    take_over: bool,
    scope: str | None,
) -> JournalEntry | None:
    """Whether the key is this call's after its caller was cancelled during the claim: the
    same claim again, which the store orders after the first (so it finds the key held by this
    very execution, alive, if the first was committed; else it claims it now). Its own task,
    waited for through further cancellations: it ends within the store's own timeouts."""
    asking = asyncio.ensure_future(
        store.claim(record, key, digest, take_over=take_over, scope=scope)
    )
    while not asking.done():
        try:
            await asyncio.wait((asking,))
        except asyncio.CancelledError:
            continue  # the caller is cancelled already: its CancelledError is raised after
    if asking.cancelled() or asking.exception() is not None:
        return None
    entry = asking.result()
    mine = entry.execution_id == record.execution_id and entry.status in ("claimed", "running")
    return JournalEntry("claimed", entry.execution_id) if mine else None


def _hold_key(
    store: JournalStore,
    loop: asyncio.AbstractEventLoop,
    call: _Call,
    holds: Holds,
    key: str,
    entry: JournalEntry,
    scope: str | None,
) -> None:
    """The key is the call's: its claim wrote its tool-use record, and its lease is renewed
    until both its holds are released and its result is recorded."""
    call.recorded = True
    claim = (call.ctx.session_id, key, entry.execution_id, scope)
    lease = KeyLease(_renewer(store, loop), claim)
    holds.add(lease)
    call.lease = lease


def _unrecordable(executor: ToolExecutor, call: _Call, why: str) -> ToolResult:
    return executor._finalize(
        call,
        ErrorCode.INVALID_ARGS,
        f"The call was not run: {why}, so it cannot be recorded.",
        details={"reason": "unrecordable"},
    )


class RecordPlace:
    """Where a streamed call is recorded (SPEC §12): the epoch and the model-order position its
    ``StreamingToolExecutor`` gave it. The stream writes an unkeyed call's tool-use record
    before the call starts (``recorded``: it was saved); a keyed call's record is its claim, and
    ``claimed`` is done once the claim has answered, so that the stream writes the next call's
    record after it, in model order."""

    __slots__ = ("claimed", "epoch", "recorded", "seq")

    def __init__(self, epoch: int, seq: int, recorded: bool) -> None:
        self.epoch = epoch
        self.seq = seq
        self.recorded = recorded
        self.claimed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def settle(self) -> None:
        """The claim answered, or the call ended without one."""
        if not self.claimed.done():
            self.claimed.set_result(None)


# Whether a store's class keeps the journal: a runtime protocol check walks the protocol's
# members on every call, so it is answered once per class.
_journal_classes: dict[type, bool] = {}


def _keeps_journal(store: Any) -> TypeGuard[JournalStore]:
    known = _journal_classes.get(type(store))
    if known is None:
        known = _journal_classes[type(store)] = isinstance(store, JournalStore)
    return known


def _answer(executor: ToolExecutor, call: _Call, key: str, entry: JournalEntry) -> ToolResult:
    """The answer to a repeat: the recorded result, or why it is not run."""
    if entry.status == "completed":
        assert entry.result is not None
        return _replay(executor, call, entry.result)
    details = {"execution_id": entry.execution_id, "idempotency_key": key}
    if entry.status == "reused":
        message = (
            f"The idempotency key {key!r} was already used in this session for a call with "
            "other arguments; a new call needs a new key."
        )
        details["reason"] = "idempotency_key_reused"
        return executor._finalize(call, ErrorCode.INVALID_ARGS, message, details=details)
    message = (
        f"An earlier call with the idempotency key {key!r} (execution {entry.execution_id}) was "
        "interrupted after it started, so whether it took effect is unknown. It is not run "
        "again until its outcome is recorded (store.resolve)."
    )
    details["reason"] = "ambiguous_outcome"
    return executor._finalize(call, ErrorCode.TOOL_ERROR, message, details=details)


def _in_progress(executor: ToolExecutor, call: _Call, key: str, execution_id: str) -> ToolResult:
    message = (
        f"An earlier call with the idempotency key {key!r} is still running; "
        "retry to get its result."
    )
    details = {"reason": "in_progress", "execution_id": execution_id, "idempotency_key": key}
    return executor._finalize(
        call, ErrorCode.RESOURCE_EXHAUSTED, message, retryable=True, details=details
    )


def _replay(executor: ToolExecutor, call: _Call, durable: DurableResult) -> ToolResult:
    """The recorded result, as the repeat's answer: its original meta (the execution id that
    ran), ``replayed`` set, and the repeat's own call id (what a caller pairs the answer with:
    the model's id for this tool call). Like every result it goes to the history and the
    result observers."""
    meta = msgspec.structs.replace(durable.meta, replayed=True, call_id=call.call_id)
    result = ToolResult(durable.ok, durable.content, durable.error, meta)
    code = durable.error.code if durable.error is not None else None
    executor._history.add(result, call.name, code, call.elapsed_ms())
    for observer in executor._result_observers:
        try:
            observer(result)
        except Exception:
            log.exception("result observer %r failed; the result is unchanged", observer)
    return result


_Claim = tuple[str | None, str, str, str | None]  # (session id, key, execution id, scope)


class KeyLease:
    """A claim's lease, renewed until both its call's body has ended (it is a hold of the call,
    released with its slot and locks, so a body that ignored cancellation keeps it until it
    really ends) and its result is recorded (``recorded``): a repeat meanwhile waits for the
    result instead of taking the key over. Registering costs a dict entry: one renewer per store
    and loop renews every live lease each third of ``lease_ttl``."""

    __slots__ = ("_claim", "_owners", "_renewer")

    def __init__(self, renewer: _Renewer, claim: _Claim) -> None:
        self._renewer = renewer
        self._claim = claim
        self._owners = 2  # the call's holds, and its result's record
        renewer.add(claim)

    def __aenter__(self) -> Any:
        return _core.READY

    def __aexit__(self, exc_type: object, exc: object, tb: object, /) -> Any:
        self._let_go()
        return _core.READY

    def recorded(self) -> None:
        self._let_go()

    def _let_go(self) -> None:
        self._owners -= 1
        if self._owners == 0:
            self._renewer.discard(self._claim)


class _Renewer:
    """The live leases of one store on one loop, and the task that renews them while any is
    live: a lease taken just after a round is renewed by the next, within a third of its
    lifetime, so none expires while its call runs."""

    __slots__ = ("_live", "_loop", "_store", "_task")

    def __init__(self, store: JournalStore, loop: asyncio.AbstractEventLoop) -> None:
        self._store = store
        self._loop = loop
        self._live: set[_Claim] = set()
        self._task: asyncio.Task[None] | None = None

    def add(self, claim: _Claim) -> None:
        self._live.add(claim)
        if self._task is None:
            self._task = self._loop.create_task(self._renew_while_live())

    def discard(self, claim: _Claim) -> None:
        self._live.discard(claim)
        if not self._live and self._task is not None:
            self._task.cancel()
            self._task = None

    async def _renew_while_live(self) -> None:
        period = self._store.lease_ttl / 3
        while True:
            await asyncio.sleep(period)
            live = list(self._live)
            outcomes = await asyncio.gather(
                *(self._store.renew(*claim) for claim in live), return_exceptions=True
            )
            for claim, outcome in zip(live, outcomes, strict=True):
                if isinstance(outcome, BaseException):  # unreachable: try again next round
                    log.warning("lease of %s not renewed: %s", claim[2], outcome)
                elif not outcome:
                    log.warning("lease of %s was lost; it is not renewed", claim[2])
                    self._live.discard(claim)
            if not self._live:
                self._task = None
                return


# One renewer per store and loop (stores are used from one loop; a test may use many loops).
_renewers: weakref.WeakKeyDictionary[Any, dict[asyncio.AbstractEventLoop, _Renewer]] = (
    weakref.WeakKeyDictionary()
)


def _renewer(store: JournalStore, loop: asyncio.AbstractEventLoop) -> _Renewer:
    by_loop = _renewers.get(store)
    if by_loop is None:
        by_loop = _renewers[store] = {}
    renewer = by_loop.get(loop)
    if renewer is None:
        for closed in [other for other in by_loop if other.is_closed()]:
            del by_loop[closed]
        renewer = by_loop[loop] = _Renewer(store, loop)
    return renewer
