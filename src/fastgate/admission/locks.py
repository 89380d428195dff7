"""``FileLockManager`` and ``lock_key``: writers of one file take turns (SPEC §8.3).

Keys are canonical paths, so every alias of a file (a symlink, ``a/../b``, a relative spelling)
maps to one lock. ``acquire_many`` de-duplicates keys and takes them in sorted order, so two
multi-path holders can never deadlock. The bookkeeping is ``fastgate._core.locks`` (compiled when
available); this façade canonicalizes paths and owns futures and cancellation.

Cancellation: a task cancelled while waiting for its n-th key releases the keys it already holds
(and a key handed to it at the same moment), then re-raises ``CancelledError``.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterable
from typing import final

from fastgate import _core
from fastgate.admission.protocol import AsyncHold
from fastgate.paths.canonical import (
    lock_key as lock_key,  # defined beside the path resolution it uses
)

StrPath = str | os.PathLike[str]


@final
class FileLockManager:
    """One FIFO lock per canonical path; entries vanish when released with nobody waiting."""

    __slots__ = ("_core",)

    def __init__(self) -> None:
        self._core = _core.locks.LockTableCore(_core.READY, _core.WAIT, asyncio.get_running_loop)

    def acquire(self, path: StrPath, owner: object = None) -> AsyncHold:
        """``async with locks.acquire(path, owner=...)``: hold the lock of one file."""
        return self._core.multi((lock_key(path),), owner)

    def acquire_many(self, paths: Iterable[StrPath], owner: object = None) -> AsyncHold:
        """Hold the locks of several files, taken in sorted key order (no deadlock)."""
        return self._core.multi(tuple(sorted({lock_key(p) for p in paths})), owner)

    def acquire_keys(self, keys: Iterable[str], owner: object = None) -> AsyncHold:
        """Like ``acquire_many`` for keys already made by ``lock_key``."""
        ordered = tuple(keys)
        if len(ordered) > 1:  # one key (a single path argument) is already in order
            ordered = tuple(sorted(set(ordered)))
        return self._core.multi(ordered, owner)

    def locked(self, path: StrPath) -> bool:
        return lock_key(path) in self._core.table

    def __len__(self) -> int:
        """How many keys are held (or waited for) right now."""
        return len(self._core.table)


_default_lock = threading.Lock()
_default: FileLockManager | None = None


def default_lock_manager() -> FileLockManager:
    """The process-wide lock manager every executor shares unless given its own."""
    global _default
    with _default_lock:
        if _default is None:
            _default = FileLockManager()
        return _default
