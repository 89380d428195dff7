"""``ToolConcurrencyGate``: the per-executor shared/exclusive FIFO barrier (SPEC §8.1).

The state machine and its waiting protocol are ``fastgate._core.gate`` (compiled when available).

Cancellation: cancelling a task that waits in ``__aenter__`` removes it from the queue without
disturbing the order of the others; if the gate had already been handed to it, the passage is
given back at once, so nobody behind it is left waiting.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import final

import msgspec

from fastgate import _core
from fastgate.admission.protocol import AsyncHold
from fastgate.errors import GateClosed


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
    One gate serves one event loop at a time.
    """

    __slots__ = ("_core", "exclusive", "shared")

    #: ``async with gate.shared():`` -- one shared passage.
    shared: Callable[[], AsyncHold]
    #: ``async with gate.exclusive():`` -- one exclusive passage.
    exclusive: Callable[[], AsyncHold]

    def __init__(self) -> None:
        self._core = _core.gate.GateCore(_core.READY, _core.WAIT, asyncio.get_running_loop)
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
