"""How many programs run at once: each is a process of up to ``memory_mb``, and ``run_code``
takes no scheduler slot (its calls do, and would wait forever behind one it held), so the
scheduler's caps would never count them. A run past the cap waits, first come first served,
for one to end (within its own timeout); a session at its own cap holds back no other.

The caps are the executor's scheduler's, read at each run: ``session_limit`` programs per
session, and in all ``global_limit`` or the ``EXECUTE`` kind's limit, the lower.
"""

from __future__ import annotations

import asyncio
import collections
import threading
from typing import Any

from fastgate.admission import SchedulerLimits
from fastgate.model import ToolKind

_Waiter = tuple[str | None, "asyncio.Future[None]"]


def limits_of(scheduler: Any) -> tuple[int, int]:
    """(per session, in all) from a scheduler's ``SchedulerLimits``; its defaults when it has
    none."""
    limits = getattr(scheduler, "limits", None)
    if not isinstance(limits, SchedulerLimits):
        limits = SchedulerLimits()
    overall = min(limits.global_limit, limits.kind_limits.get(ToolKind.EXECUTE, 1 << 30))
    return limits.session_limit, overall


class Programs:
    """The programs running now, by session; and the runs waiting to start one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # runs may come from more than one thread's loop
        self._running: dict[str | None, int] = {}
        self._total = 0
        self._per_session = 1
        self._overall = 1
        self._waiting: collections.deque[_Waiter] = collections.deque()

    def running(self) -> int:
        return self._total

    def waiting(self) -> int:
        return len(self._waiting)

    async def enter(self, session: str | None, per_session: int, overall: int) -> None:
        """Wait until ``session`` may start a program; it then counts until ``leave``."""
        loop = asyncio.get_running_loop()
        with self._lock:
            self._per_session, self._overall = per_session, overall
            if self._fits(session):  # no waiter fits now (each is granted once it does)
                self._take(session)
                return
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiting.append((session, waiter))
        try:
            await waiter
        except asyncio.CancelledError:
            with self._lock:
                try:
                    self._waiting.remove((session, waiter))
                    queued = True
                except ValueError:  # granted meanwhile
                    queued = False
            if not queued and waiter.done() and not waiter.cancelled():
                self.leave(session)  # granted just as it was cancelled: passed on
            # (granted but its wake-up still on its way: _wake passes it on)
            raise

    def leave(self, session: str | None) -> None:
        """A program of ``session`` has ended: the first waiters that fit now start."""
        granted: list[_Waiter] = []
        with self._lock:
            left = self._running.get(session, 0) - 1
            if left > 0:
                self._running[session] = left
            else:
                self._running.pop(session, None)
            self._total = max(0, self._total - 1)
            for entry in tuple(self._waiting):
                waiting_session, waiter = entry
                if waiter.done():  # cancelled (its enter finds it gone: nothing to pass on)
                    self._waiting.remove(entry)
                    continue
                if self._fits(waiting_session):
                    self._take(waiting_session)
                    self._waiting.remove(entry)
                    granted.append(entry)
        for waiting_session, waiter in granted:
            try:
                waiter.get_loop().call_soon_threadsafe(self._wake, waiting_session, waiter)
            except RuntimeError:  # its loop is closed: nobody will take it
                self.leave(waiting_session)

    def _wake(self, session: str | None, waiter: asyncio.Future[None]) -> None:
        if waiter.done():  # cancelled after it was granted
            self.leave(session)
        else:
            waiter.set_result(None)

    def _fits(self, session: str | None) -> bool:
        return self._total < self._overall and self._running.get(session, 0) < self._per_session

    def _take(self, session: str | None) -> None:
        self._running[session] = self._running.get(session, 0) + 1
        self._total += 1
