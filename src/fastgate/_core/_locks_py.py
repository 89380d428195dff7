"""Sans-I/O state machine of the canonical-path lock table (SPEC §8.3).

One exclusive FIFO lock per key (a canonical path), created on first use and dropped as soon as it
is free with nobody waiting, so memory does not grow with the number of paths ever locked. A
``MultiLock`` takes its keys in the sorted order it was given, one after another: two multi-path
holders can never wait on each other in a cycle. Keys are computed by the façade (that part touches
the filesystem); this module only does the bookkeeping.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

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
class LockWaiter:
    def __init__(self, lock: KeyLock, owner: object, future: Any) -> None:
        self.lock = lock
        self.owner = owner
        self.future = future
        self.state = QUEUED
        self.prev: LockWaiter | None = None
        self.next: LockWaiter | None = None


@cython.freelist(64)
@cython.cclass
class KeyLock:
    """The holder of one key and the FIFO of those waiting for it."""

    def __init__(self, key: str, owner: object) -> None:
        self.key = key
        self.owner = owner
        self.head: LockWaiter | None = None
        self.tail: LockWaiter | None = None
        self.waiting = 0


@cython.freelist(64)
@cython.cclass
class LockTableCore:
    def __init__(
        self,
        ready: Awaitable[None],
        wait_type: Callable[..., Awaitable[None]],
        get_loop: Callable[[], Any],
    ) -> None:
        self.ready = ready
        self.wait_type = wait_type
        self.get_loop = get_loop
        self.table: dict[str, KeyLock] = {}

    def try_lock(self, key: str, owner: object) -> bool:
        lock = self.table.get(key)
        if lock is None:
            self.table[key] = KeyLock(key, owner)
            return True
        if owner is not None and (lock.owner is owner or lock.owner == owner):
            raise RuntimeError(f"lock for {key!r} is already held by the same owner {owner!r}")
        return False

    def enqueue(self, key: str, owner: object, future: Any) -> LockWaiter:
        """Queue for a key that ``try_lock`` found held."""
        lock = self.table[key]
        waiter = LockWaiter(lock, owner, future)
        tail = lock.tail
        if tail is None:
            lock.head = waiter
        else:
            tail.next = waiter
            waiter.prev = tail
        lock.tail = waiter
        lock.waiting += 1
        return waiter

    def _unlink(self, waiter: LockWaiter) -> None:
        lock = waiter.lock
        prev = waiter.prev
        nxt = waiter.next
        if prev is None:
            lock.head = nxt
        else:
            prev.next = nxt
        if nxt is None:
            lock.tail = prev
        else:
            nxt.prev = prev
        waiter.prev = None
        waiter.next = None
        lock.waiting -= 1

    def unlock(self, key: str) -> LockWaiter | None:
        """Release a key: hand it to the first waiter (returned) or drop the entry."""
        lock = self.table.get(key)
        if lock is None:
            raise RuntimeError(f"lock for {key!r} released twice")
        waiter = lock.head
        if waiter is None:
            del self.table[key]
            return None
        self._unlink(waiter)
        lock.owner = waiter.owner
        waiter.state = GRANTED
        return waiter

    def finish(self, waiter: LockWaiter) -> LockWaiter | None:
        """Release a key that was handed to ``waiter`` (used, or given back unused)."""
        if waiter.state != GRANTED:
            raise RuntimeError(f"lock for {waiter.lock.key!r} released twice")
        waiter.state = FINISHED
        return self.unlock(waiter.lock.key)

    def remove(self, waiter: LockWaiter) -> bool:
        """Withdraw a queued waiter; False when it was already granted."""
        if waiter.state != QUEUED:
            return False
        self._unlink(waiter)
        waiter.state = FINISHED
        return True

    def withdraw(self, waiter: LockWaiter) -> LockWaiter | None:
        """The waiter's task gave up: leave the queue, or pass on a key handed over meanwhile."""
        if waiter.state == GRANTED:
            return self.finish(waiter)
        self.remove(waiter)
        return None

    def wake(self, granted: list[LockWaiter] | None) -> None:
        """Resolve granted waiters' futures; one already cancelled passes its key on."""
        if not granted:
            return
        i = 0
        while i < len(granted):
            waiter = granted[i]
            i += 1
            if waiter.future.done():
                passed_on = self.finish(waiter)
                if passed_on is not None:
                    granted.append(passed_on)
            else:
                waiter.future.set_result(None)

    def multi(self, keys: tuple[str, ...], owner: object) -> MultiLock:
        return MultiLock(self, keys, owner)


@cython.freelist(64)
@cython.cclass
class MultiLock:
    """``async with`` context holding ``keys`` (sorted, distinct) in order; not reusable."""

    def __init__(self, core: LockTableCore, keys: tuple[str, ...], owner: object) -> None:
        self.core = core
        self.keys = keys
        self.owner = owner
        self.taken = 0  # keys[:taken] are held
        self.waiter: LockWaiter | None = None
        self.held = False
        self.used = False

    def take_available(self) -> bool:
        """Take keys in order while they are free; True when all are held."""
        core = self.core
        keys = self.keys
        count = len(keys)
        while self.taken < count:
            if not core.try_lock(keys[self.taken], self.owner):
                return False
            self.taken += 1
        return True

    def release_taken(self) -> list[LockWaiter] | None:
        """Unlock every held key, last taken first; returns the waiters that got them."""
        core = self.core
        granted: list[LockWaiter] | None = None
        while self.taken > 0:
            self.taken -= 1
            waiter = core.unlock(self.keys[self.taken])
            if waiter is not None:
                if granted is None:
                    granted = []
                granted.append(waiter)
        return granted

    def wait_for_next(self) -> Any:
        """Queue for the first key not yet held; returns the future to await."""
        core = self.core
        future = core.get_loop().create_future()
        self.waiter = core.enqueue(self.keys[self.taken], self.owner, future)
        return future

    def __aenter__(self) -> Awaitable[None]:
        if self.used:
            raise RuntimeError("a lock context can be entered only once")
        self.used = True
        core = self.core
        try:
            if self.take_available():
                self.held = True
                return core.ready
            return core.wait_type(self, self.wait_for_next())
        except BaseException:
            self.abandon()
            raise

    def __aexit__(self, exc_type: object, exc: object, tb: object) -> Awaitable[None]:
        if not self.held:
            raise RuntimeError("lock context released without being held")
        self.held = False
        self.core.wake(self.release_taken())
        return self.core.ready

    # The Wait protocol (see _wait_py).
    def granted(self) -> Any:
        """The awaited key was handed over; take what is free next, else wait again."""
        self.waiter = None
        self.taken += 1
        if self.take_available():
            self.held = True
            return None
        return self.wait_for_next()

    def abandon(self) -> None:
        """Give back every key held, and the one handed over meanwhile, if any."""
        core = self.core
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            passed_on = core.withdraw(waiter)
            if passed_on is not None:
                core.wake([passed_on])
        core.wake(self.release_taken())
