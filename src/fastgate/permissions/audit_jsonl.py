"""``JsonlAuditSink``: the audit trail as a JSON-lines file (SPEC §5).

One line per decision, appended: the ``AuditEvent`` fields (``time`` included); and one line per
network connection a sandboxed call was refused (``network_refused``: the ``NetworkAuditEvent``
fields after ``"event": "network_refused"``). ``record`` only encodes the event and queues it; a
writer thread appends the queued lines in one write and makes them durable with one
``fdatasync`` per batch (every ``batch_size`` events, or ``batch_interval`` seconds after the
first unsynced one, whichever comes first), so the event loop never waits for the disk.

Lines are only ever appended whole and in order, so a crash (SIGKILL, power loss) can cost at
most the lines after the last sync, and the only damage it can leave is a last line cut short,
without its newline. Opening the file removes such a cut line before anything is appended: the
file is a sequence of complete JSON lines again, and no new line is ever glued to a cut one.
"""

from __future__ import annotations

import asyncio
import atexit
import fcntl
import logging
import os
import threading
import time
import weakref
from types import TracebackType
from typing import Final

import msgspec

from fastgate.permissions.audit import AuditEvent, NetworkAuditEvent

log = logging.getLogger("fastgate.audit")

_ENCODER: Final = msgspec.json.Encoder()
_TAIL_SCAN: Final = 1 << 16  # bytes read at a time, from the end, to find the last newline


_OPEN_SINKS: weakref.WeakSet[JsonlAuditSink] = weakref.WeakSet()


@atexit.register
def _close_open_sinks() -> None:
    """At interpreter exit, a sink nobody closed still writes what it was given."""
    for sink in list(_OPEN_SINKS):
        sink.close()


class AuditSinkClosed(RuntimeError):
    """``record`` on a closed sink."""


class JsonlAuditSink:
    """An ``AuditSink`` appending one JSON line per decision to ``path`` (and, as a
    ``NetworkAuditSink``, one per refused network connection of a sandboxed call).

    A new file is created with mode 0600 (an existing file keeps its mode); one sink holds the
    file at a time (an exclusive ``flock``: a second sink on it, in any process, is refused).
    ``synced`` counts the events known to be on disk. ``flush()`` waits until everything
    recorded so far is; ``close()`` (or leaving ``with``) flushes and closes. The async
    ``aflush()`` and ``aclose()`` wait in a thread, leaving the loop free. A write that fails
    (a full or broken disk) stops the sink: ``error`` holds it and ``record`` raises from then on.
    ``max_pending`` bounds the lines waiting for the writer: past it, ``record`` waits for room
    (only when the disk stays slower than the decisions for that long).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        batch_size: int = 256,
        batch_interval: float = 0.05,
        max_pending: int = 100_000,
    ) -> None:
        if type(batch_size) is not int or batch_size < 1:
            raise ValueError(f"batch_size: expected an integer >= 1, got {batch_size!r}")
        if not isinstance(batch_interval, (int, float)) or not 0 < batch_interval <= 60:
            raise ValueError(f"batch_interval: expected seconds in (0, 60], got {batch_interval!r}")
        if type(max_pending) is not int or max_pending < batch_size:
            raise ValueError(f"max_pending: expected an integer >= batch_size, got {max_pending!r}")
        self.path = os.fspath(path)
        self.batch_size = batch_size
        self.batch_interval = float(batch_interval)
        self.max_pending = max_pending
        self.error: OSError | None = None
        self._fd = _open_exclusive(self.path)
        self._pending: list[bytes] = []
        self._recorded = 0  # events handed to record()
        self._synced = 0  # events written and fdatasync'ed
        self._flushers = 0  # flush() calls waiting: the writer does not wait for a full batch
        self._closing = False
        self._changed = threading.Condition()
        self._writer = threading.Thread(
            target=self._write_batches, name=f"fastgate-audit:{self.path}", daemon=True
        )
        self._writer.start()
        _OPEN_SINKS.add(self)

    @property
    def synced(self) -> int:
        return self._synced

    def record(self, event: AuditEvent) -> None:
        self._queue(_ENCODER.encode(event) + b"\n")

    def network_refused(self, event: NetworkAuditEvent) -> None:
        """A connection a sandboxed call was refused (``NetworkAuditSink``): one line, queued
        and written as ``record``'s are."""
        self._queue(_ENCODER.encode(event) + b"\n")

    def _queue(self, line: bytes) -> None:
        with self._changed:
            while len(self._pending) >= self.max_pending and self._usable():
                self._changed.wait()
            self._usable(raise_=True)
            self._pending.append(line)
            self._recorded += 1
            if len(self._pending) == 1 or len(self._pending) >= self.batch_size:
                self._changed.notify_all()  # the first starts the interval; a full batch goes

    def flush(self) -> None:
        """Return once every event recorded before the call is on disk (``OSError`` if the
        disk failed first)."""
        with self._changed:
            target = self._recorded
            self._flushers += 1
            self._changed.notify_all()
            try:
                while self._synced < target and self.error is None:
                    self._changed.wait()
            finally:
                self._flushers -= 1
            if self._synced < target:
                raise OSError(f"the audit log {self.path} could not be written") from self.error

    def close(self) -> None:
        """Flush, stop the writer and close the file. Idempotent."""
        with self._changed:
            if self._closing:
                already = True
            else:
                already, self._closing = False, True
                self._changed.notify_all()
        self._writer.join()
        if not already:
            os.close(self._fd)  # releases the lock too
        if self.error is not None and not already:
            log.error("audit log %s: lines lost after a write failure: %s", self.path, self.error)

    async def aflush(self) -> None:
        await asyncio.to_thread(self.flush)

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    def __enter__(self) -> JsonlAuditSink:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- the writer thread --------------------------------------------------------------------

    def _usable(self, *, raise_: bool = False) -> bool:
        problem = "closed" if self._closing else None
        if self.error is not None:
            problem = f"stopped: a write failed ({self.error})"
        if problem is not None and raise_:
            raise AuditSinkClosed(f"the audit log {self.path} is {problem}")
        return problem is None

    def _write_batches(self) -> None:
        while True:
            with self._changed:
                batch = self._next_batch()
            if batch is None:
                return
            try:
                _append(self._fd, b"".join(batch))
                os.fdatasync(self._fd)
            except OSError as exc:
                with self._changed:
                    self.error = exc
                    self._changed.notify_all()
                log.error("audit log %s: writing failed, the sink is stopped: %s", self.path, exc)
                return
            with self._changed:
                self._synced += len(batch)
                self._changed.notify_all()

    def _next_batch(self) -> list[bytes] | None:
        """The lines to write now (called holding the condition): a full batch at once; else
        what is pending once ``batch_interval`` has passed since the writer saw the first of
        it, or at once when a flush waits or the sink closes. None: closed, nothing left."""
        deadline: float | None = None
        while True:
            if self._pending:
                if len(self._pending) >= self.batch_size or self._closing or self._flushers:
                    break
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self.batch_interval
                if now >= deadline:
                    break
                self._changed.wait(deadline - now)
            elif self._closing:
                return None
            else:
                deadline = None
                self._changed.wait()
        batch, self._pending = self._pending, []
        return batch


def _open_exclusive(path: str) -> int:
    """The log opened for appending, held by this sink alone, a cut last line removed."""
    flags = os.O_RDWR | os.O_APPEND | os.O_CLOEXEC
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600)
        created = True
    except FileExistsError:
        fd = os.open(path, flags)
        created = False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OSError(f"the audit log {path} is held by another JsonlAuditSink") from None
        if created:
            _sync_directory(os.path.dirname(os.path.abspath(path)))
        else:
            _drop_cut_line(fd)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _drop_cut_line(fd: int) -> None:
    """Truncate the file after its last newline: a line without one was cut by a crash."""
    size = os.fstat(fd).st_size
    end = size
    while end > 0:
        start = max(0, end - _TAIL_SCAN)
        chunk = os.pread(fd, end - start, start)
        newline = chunk.rfind(b"\n")
        if newline >= 0:
            end = start + newline + 1
            break
        end = start
    if end != size:
        log.warning("audit log: removed a last line cut short (%d bytes)", size - end)
        os.ftruncate(fd, end)
        os.fsync(fd)


def _sync_directory(directory: str) -> None:
    """A new file's name is durable once its directory is synced."""
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _append(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
