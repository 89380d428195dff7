"""What each session last saw of each file: the stale-file check of ``write`` and ``edit``.

A record is the file's size, mtime and an xxh3-128 digest of its bytes, kept per file system,
session and canonical path, in bounded LRU maps. A file is fresh for a session when its size
and mtime are the recorded ones, or when its bytes hash to the recorded digest (a touch that
changed nothing is not a change: Claude Code's mtime-only check refuses such edits).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, NamedTuple

import xxhash

from fastgate.builtin._fs import FileStat

PER_FILE_SYSTEM = 16_384  # records per file system (sessions x files), oldest forgotten first
FILE_SYSTEMS = 256  # file systems remembered at once


class Seen(NamedTuple):
    size: int
    mtime_ns: int
    digest: bytes


def digest(data: bytes) -> bytes:
    return xxhash.xxh3_128_digest(data)


class Ledger:
    """Records of one file system. Thread-safe (a sync tool may run in a worker thread)."""

    __slots__ = ("_lock", "_records", "limit")

    def __init__(self, limit: int | None = None) -> None:
        self.limit = PER_FILE_SYSTEM if limit is None else limit
        self._records: OrderedDict[tuple[str | None, str], Seen] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._records)

    def remember(self, session: str | None, path: str, stat: FileStat | None, data: bytes) -> None:
        size, mtime = (stat.size, stat.mtime_ns) if stat is not None else (len(data), -1)
        key = (session, path)
        with self._lock:
            self._records[key] = Seen(size, mtime, digest(data))
            self._records.move_to_end(key)
            while len(self._records) > self.limit:
                self._records.popitem(last=False)

    def forget(self, session: str | None, path: str) -> None:
        with self._lock:
            self._records.pop((session, path), None)

    def seen(self, session: str | None, path: str) -> Seen | None:
        with self._lock:
            record = self._records.get((session, path))
            if record is not None:
                self._records.move_to_end((session, path))
            return record


def is_fresh(record: Seen, stat: FileStat, data: bytes | None) -> bool | None:
    """True when the file is what the session saw; None when only its bytes can tell (pass
    them); False when they differ."""
    if record.size == stat.size and record.mtime_ns == stat.mtime_ns:
        return True
    if data is None:
        return None
    return digest(data) == record.digest


_LEDGERS: OrderedDict[int, tuple[Any, Ledger]] = OrderedDict()
_LEDGERS_LOCK = threading.Lock()


def ledger_of(fs: Any) -> Ledger:
    """The ledger of ``fs`` (by identity; the file system is held, so its id stays its own)."""
    key = id(fs)
    with _LEDGERS_LOCK:
        entry = _LEDGERS.get(key)
        if entry is not None and entry[0] is fs:
            _LEDGERS.move_to_end(key)
            return entry[1]
        ledger = Ledger()
        _LEDGERS[key] = (fs, ledger)
        while len(_LEDGERS) > FILE_SYSTEMS:
            _LEDGERS.popitem(last=False)
        return ledger
