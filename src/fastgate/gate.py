"""``ToolConcurrencyGate``: the per-executor shared/exclusive FIFO barrier (SPEC §8.1).

The state machine is ``fastgate._core.gate`` (compiled when available). This façade owns the
asyncio side: a future per queued entrant, cancellation, and closing.

Cancellation: cancelling a task that waits in ``__aenter__`` removes it from the queue without
disturbing the order of the others; if the gate had already been handed to it, the passage is
given back at once, so nobody behind it is left waiting.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, final

import msgspec

from fastgate import _core
from fastgate.errors import GateClosed

if TYPE_CHECKING:
    from fastgate._core._gate_py import GateEntry, GateWaiter


class GateStats(msgspec.Struct, frozen=True):
    shared_running: int
    exclusive_running: bool
    queued: int
    closed: bool


@final
class ToolConcurrencyGate:
    """``async with gate.shared():`` runs beside other shared holders; ``gate.exclusive()`` alone.

    Strict arrival order: a shared entrant waits behind any earlier exclusive one (queued or
    running); an exclusive entrant waits for everything before it and holds back everything after.
    """

    __slots__ = ("_core", "exclusive", "shared")

    #: ``async with gate.shared():`` -- one shared passage.
    shared: Callable[[], AbstractAsyncContextManager[None]]
    #: ``async with gate.exclusive():`` -- one exclusive passage.
    exclusive: Callable[[], AbstractAsyncContextManager[None]]

    def __init__(self) -> None:
        self._core = _core.gate.GateCore(_core.READY, self._enter_slow, self._wake)
        # Bound straight to the compiled core: no Python frame on the uncontended path.
        self.shared = self._core.shared_entry
        self.exclusive = self._core.exclusive_entry

    @property
    def closed(self) -> bool:
        return bool(self._core.closed)

    def close(self) -> None:
        """Refuse new entrants and fail every queued one with ``GateClosed``; holders finish."""
        for waiter in self._core.close():
            if not waiter.future.done():
                waiter.future.set_exception(GateClosed("the executor's gate is closed"))

    def statistics(self) -> GateStats:
        core = self._core
        return GateStats(
            shared_running=int(core.shared_running),
            exclusive_running=bool(core.exclusive_running),
            queued=int(core.queued),
            closed=bool(core.closed),
        )

    async def _enter_slow(self, entry: GateEntry) -> None:
        core = self._core
        if core.closed:
            raise GateClosed("the executor's gate is closed")
        waiter = core.enqueue(entry.exclusive)
        entry.waiter = waiter
        waiter.future = asyncio.get_running_loop().create_future()
        try:
            await waiter.future
        except BaseException:
            # Leave the queue, or pass on a passage handed over just before the cancellation.
            self._wake(core.withdraw(waiter))
            raise
        entry.held = True

    def _wake(self, granted: list[GateWaiter] | None) -> None:
        """Resolve granted waiters; a waiter whose future is already cancelled gives back at once."""
        pending = list(granted or ())
        for waiter in pending:  # grows while we iterate when a grant is passed on
            if waiter.future.done():
                pending.extend(self._core.finish(waiter) or ())
            else:
                waiter.future.set_result(None)
