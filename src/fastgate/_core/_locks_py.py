"""Sans-I/O state machine of the canonical-path lock table (SPEC §8.3).

One exclusive FIFO lock per key (a canonical path), created on first use and dropped as soon as it
is free with nobody waiting, so memory does not grow with the number of paths ever locked. A
``MultiLock`` takes its keys in the sorted order it was given, one after another: two multi-path
holders can never wait on each other in a cycle. Keys are computed by the façade (that part touches
the filesystem); this module only does the bookkeeping.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

QUEUED = 0
GRANTED = 1
FINISHED = 2


class LockWaiter:
    def __init__(self, lock: KeyLock, owner: object) -> None:
        self.lock = lock
        self.owner = owner
        self.state = QUEUED
        self.prev: LockWaiter | None = None
        self.next: LockWaiter | None = None
        self.future: Any = None


class KeyLock:
    """The holder of one key and the FIFO of those waiting for it."""

    def __init__(self, key: str, owner: object) -> None:
        self.key = key
        self.owner = owner
        self.head: LockWaiter | None = None
        self.tail: LockWaiter | None = None
        self.waiting = 0


class LockTableCore:
    def __init__(
        self,
        ready: Awaitable[None],
        slow_lock: Callable[[MultiLock], Awaitable[None]],
        wake: Callable[[list[LockWaiter]], None],
    ) -> None:
        self.ready = ready
        self.slow_lock = slow_lock  # (multilock) -> awaitable that takes the remaining keys
        self.wake = wake  # (granted waiters) -> None
        self.table: dict[str, KeyLock] = {}

    def try_lock(self, key: str, owner: object) -> bool:
        lock = self.table.get(key)
        if lock is None:
            self.table[key] = KeyLock(key, owner)
            return True
        if owner is not None and (lock.owner is owner or lock.owner == owner):
            raise RuntimeError(f"lock for {key!r} is already held by the same owner {owner!r}")
        return False

    def enqueue(self, key: str, owner: object) -> LockWaiter:
        """Queue for a key that ``try_lock`` found held."""
        lock = self.table[key]
        waiter = LockWaiter(lock, owner)
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

    def multi(self, keys: tuple[str, ...], owner: object) -> MultiLock:
        return MultiLock(self, keys, owner)


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

    def __aenter__(self) -> Awaitable[None]:
        if self.used:
            raise RuntimeError("a lock context can be entered only once")
        self.used = True
        if self.take_available():
            self.held = True
            return self.core.ready
        return self.core.slow_lock(self)

    def __aexit__(self, *exc_info: object) -> Awaitable[None]:
        if not self.held:
            raise RuntimeError("lock context released without being held")
        self.held = False
        granted = self.release_taken()
        if granted:
            self.core.wake(granted)
        return self.core.ready
