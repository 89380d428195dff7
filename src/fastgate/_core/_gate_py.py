"""Sans-I/O state machine of the per-executor shared/exclusive FIFO gate (SPEC §8.1).

Strict arrival order: a shared entrant joins running shared holders only while nobody waits ahead
of it; an exclusive entrant needs the gate empty and holds back everyone after it. Grants happen
here, state first, then the granted waiters' futures are resolved ("grant, then wake"). This module
imports nothing from asyncio: futures come from the injected ``get_loop`` and are only created,
resolved and checked through their own methods.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from fastgate.errors import GateClosed

if TYPE_CHECKING:
    from fastgate._core import _cython_shim as cython
else:
    try:
        import cython
    except ImportError:  # the pure build without Cython installed: the decorators do nothing
        from fastgate._core import _cython_shim as cython


QUEUED = 0
GRANTED = 1
FINISHED = 2


@cython.freelist(64)
@cython.cclass
class GateWaiter:
    """One queued entrant and the future its task awaits."""

    def __init__(self, exclusive: bool, future: Any) -> None:
        self.exclusive = exclusive
        self.future = future
        self.state = QUEUED
        self.prev: GateWaiter | None = None
        self.next: GateWaiter | None = None


@cython.freelist(64)
@cython.cclass
class GateCore:
    """Counts of running holders plus a doubly linked FIFO of waiters (O(1) removal on cancel)."""

    def __init__(
        self,
        ready: Awaitable[None],
        wait_type: Callable[..., Awaitable[None]],
        get_loop: Callable[[], Any],
    ) -> None:
        self.ready = ready
        self.wait_type = wait_type
        self.get_loop = get_loop
        self.shared_running = 0
        self.exclusive_running = False
        self.queued = 0
        self.head: GateWaiter | None = None
        self.tail: GateWaiter | None = None
        self.closed = False

    def try_enter(self, exclusive: bool) -> bool:
        """Enter at once if arrival order allows it; False means the caller must queue."""
        if self.head is not None or self.exclusive_running or self.closed:
            return False
        if exclusive:
            if self.shared_running:
                return False
            self.exclusive_running = True
        else:
            self.shared_running += 1
        return True

    def enqueue(self, exclusive: bool, future: Any) -> GateWaiter:
        waiter = GateWaiter(exclusive, future)
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
        """The waiter's task gave up: leave the queue, or give back a passage granted meanwhile."""
        if waiter.state == GRANTED:
            return self.finish(waiter)
        return self.remove(waiter)

    def wake(self, granted: list[GateWaiter] | None) -> None:
        """Resolve granted waiters' futures; one already cancelled passes its passage on."""
        if not granted:
            return
        i = 0
        while i < len(granted):
            waiter = granted[i]
            i += 1
            if waiter.future.done():
                passed_on = self.finish(waiter)
                if passed_on:
                    granted.extend(passed_on)
            else:
                waiter.future.set_result(None)

    def queue(self, entry: GateEntry) -> Awaitable[None]:
        """The entrant could not pass now: queue it and return what its task awaits."""
        if self.closed:
            raise GateClosed("the executor's gate is closed")
        future = self.get_loop().create_future()
        entry.waiter = self.enqueue(entry.exclusive, future)
        return self.wait_type(entry, future)

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


@cython.freelist(64)
@cython.cclass
class GateEntry:
    """``async with`` context for one passage through the gate; not reusable."""

    def __init__(self, core: GateCore, exclusive: bool) -> None:
        self.core = core
        self.exclusive = exclusive
        self.waiter: GateWaiter | None = None
        self.held = False
        self.used = False

    def __aenter__(self) -> Awaitable[None]:
        if self.used:
            raise RuntimeError("a gate entry can be entered only once")
        self.used = True
        core = self.core
        if core.try_enter(self.exclusive):
            self.held = True
            return core.ready
        return core.queue(self)

    def __aexit__(self, exc_type: object, exc: object, tb: object) -> Awaitable[None]:
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

    # The Wait protocol (see _wait_py).
    def granted(self) -> None:
        self.held = True

    def abandon(self) -> None:
        if self.waiter is not None:
            self.core.wake(self.core.withdraw(self.waiter))
