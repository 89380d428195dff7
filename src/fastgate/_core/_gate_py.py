"""Sans-I/O state machine of the per-executor shared/exclusive FIFO gate (SPEC §8.1).

Strict arrival order: a shared entrant joins running shared holders only while nobody waits ahead
of it; an exclusive entrant needs the gate empty and holds back everyone after it. Grants happen
here (state first), and the façade then wakes the futures it stored on the returned waiters
("grant, then wake"). Nothing in this module knows about asyncio: the only awaitables are the
already-complete ``ready`` object and whatever the façade's ``slow_enter`` returns.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

QUEUED = 0
GRANTED = 1
FINISHED = 2


class GateWaiter:
    """One queued entrant. ``future`` is owned by the façade; the core never touches it."""

    def __init__(self, exclusive: bool) -> None:
        self.exclusive = exclusive
        self.state = QUEUED
        self.prev: GateWaiter | None = None
        self.next: GateWaiter | None = None
        self.future: Any = None


class GateCore:
    """Counts of running holders plus a doubly linked FIFO of waiters (O(1) removal on cancel)."""

    def __init__(
        self,
        ready: Awaitable[None],
        slow_enter: Callable[[GateEntry], Awaitable[None]],
        wake: Callable[[list[GateWaiter]], None],
    ) -> None:
        self.ready = ready
        self.slow_enter = slow_enter  # (entry) -> awaitable, used when entry must queue
        self.wake = wake  # (list[GateWaiter]) -> None, resolves the granted waiters' futures
        self.shared_running = 0
        self.exclusive_running = False
        self.queued = 0
        self.head: GateWaiter | None = None
        self.tail: GateWaiter | None = None
        self.closed = False

    def try_enter(self, exclusive: bool) -> bool:
        """Enter at once if arrival order allows it; False means the caller must queue."""
        if self.head is not None or self.exclusive_running:
            return False
        if exclusive:
            if self.shared_running:
                return False
            self.exclusive_running = True
        else:
            self.shared_running += 1
        return True

    def enqueue(self, exclusive: bool) -> GateWaiter:
        waiter = GateWaiter(exclusive)
        tail = self.tail
        if tail is None:
            self.head = waiter
        else:
            tail.next = waiter
            waiter.prev = tail
        self.tail = waiter
        self.queued += 1
        return waiter

    def _unlink(self, waiter: GateWaiter) -> None:
        prev = waiter.prev
        nxt = waiter.next
        if prev is None:
            self.head = nxt
        else:
            prev.next = nxt
        if nxt is None:
            self.tail = prev
        else:
            nxt.prev = prev
        waiter.prev = None
        waiter.next = None
        self.queued -= 1

    def _grant_from_head(self) -> list[GateWaiter]:
        """Admit waiters from the head while arrival order allows; returns them (may be empty)."""
        granted: list[GateWaiter] = []
        while self.head is not None and not self.exclusive_running:
            waiter = self.head
            if waiter.exclusive:
                if self.shared_running:
                    break
                self.exclusive_running = True
            else:
                self.shared_running += 1
            self._unlink(waiter)
            waiter.state = GRANTED
            granted.append(waiter)
            if waiter.exclusive:
                break
        return granted

    def leave(self, exclusive: bool) -> list[GateWaiter] | None:
        """A holder leaves; returns the waiters granted in its place (None when nobody waits)."""
        if exclusive:
            if not self.exclusive_running:
                raise RuntimeError("gate released twice: no exclusive holder")
            self.exclusive_running = False
        else:
            if self.shared_running <= 0:
                raise RuntimeError("gate released twice: no shared holder")
            self.shared_running -= 1
        if self.head is None:
            return None
        return self._grant_from_head()

    def finish(self, waiter: GateWaiter) -> list[GateWaiter] | None:
        """A granted waiter leaves (or gives its grant back before using it)."""
        if waiter.state != GRANTED:
            raise RuntimeError("gate released twice")
        waiter.state = FINISHED
        return self.leave(waiter.exclusive)

    def remove(self, waiter: GateWaiter) -> list[GateWaiter] | None:
        """Withdraw a queued waiter; a removed head may let those behind it in."""
        if waiter.state != QUEUED:
            return None
        was_head = waiter is self.head
        self._unlink(waiter)
        waiter.state = FINISHED
        if was_head:
            return self._grant_from_head()
        return None

    def withdraw(self, waiter: GateWaiter) -> list[GateWaiter] | None:
        """The waiter's task gave up (cancelled or failed): undo whatever it got.

        Still queued: leave the queue. Already granted (the grant and the cancellation crossed):
        give the passage back. Returns the waiters admitted as a consequence.
        """
        if waiter.state == GRANTED:
            return self.finish(waiter)
        return self.remove(waiter)

    def close(self) -> list[GateWaiter]:
        """Refuse new entrants; return every queued waiter so the façade can fail them."""
        self.closed = True
        dropped: list[GateWaiter] = []
        while self.head is not None:
            waiter = self.head
            self._unlink(waiter)
            waiter.state = FINISHED
            dropped.append(waiter)
        return dropped

    def shared_entry(self) -> GateEntry:
        return GateEntry(self, False)

    def exclusive_entry(self) -> GateEntry:
        return GateEntry(self, True)


class GateEntry:
    """``async with`` context for one passage through the gate; not reusable."""

    def __init__(self, core: GateCore, exclusive: bool) -> None:
        self.core = core
        self.exclusive = exclusive
        self.waiter: GateWaiter | None = None
        self.held = False
        self.used = False

    def __aenter__(self) -> Awaitable[None]:
        core = self.core
        if self.used:
            raise RuntimeError("a gate entry can be entered only once")
        self.used = True
        if core.closed:
            return core.slow_enter(self)  # the façade raises GateClosed
        if core.try_enter(self.exclusive):
            self.held = True
            return core.ready
        return core.slow_enter(self)

    def __aexit__(self, *exc_info: object) -> Awaitable[None]:
        if not self.held:
            raise RuntimeError("gate entry released without being held")
        self.held = False
        core = self.core
        waiter = self.waiter
        if waiter is None:
            granted = core.leave(self.exclusive)
        else:
            granted = core.finish(waiter)
        if granted:
            core.wake(granted)
        return core.ready
