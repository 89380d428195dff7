"""``SqliteToolUseStore``: the embedded default ``ToolUseStore`` (SPEC §12), on stdlib ``sqlite3``.

One file in WAL mode with ``synchronous=FULL``: a commit returns only once its WAL frames are
fsynced, so an acknowledged record survives a killed process and a power cut. One row per
tool-use, one per result; arguments and results are msgpack (msgspec). A dedicated writer thread
owns the connection and does every blocking call; the event loop only encodes and awaits.

Group commit: the writer takes every request queued while it was busy into one transaction, and
releases each caller only after the transaction holding its record committed. A record that fails
on its own (duplicate id, result without tool-use) fails alone; a transaction that fails (disk
full, locked, I/O error) is rolled back and fails every record in it: nothing is half-written.

Cancelling an ``await`` of ``record_tool_use``/``record_result`` stops the wait, not the write:
the record may still be committed. ``load`` and ``close`` are likewise safe to cancel.
"""

from __future__ import annotations

import asyncio
import os
import queue
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterable
from typing import Any, Final

import msgspec

from fastgate.durable.store import StoredCall, ToolUseRecord
from fastgate.errors import FastgateError
from fastgate.model.results import DurableResult, ToolResult

SCHEMA_VERSION: Final = 1
APPLICATION_ID: Final = 0x46475453  # "FGTS" in the SQLite header: this file is a fastgate store
MAX_BATCH: Final = 1024  # records per group transaction: bounds the latency of the last one

# Results are keyed by their tool-use's row id, which grows in write order: a group transaction
# then appends to the end of the result table instead of touching one page per record.
_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS tool_use (
        id INTEGER PRIMARY KEY,
        execution_id TEXT NOT NULL UNIQUE,
        session_id TEXT,
        turn_id TEXT,
        epoch INTEGER NOT NULL,
        seq INTEGER NOT NULL,
        call_id TEXT,
        tool_name TEXT NOT NULL,
        args BLOB NOT NULL,
        recorded_at REAL NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS tool_use_by_session ON tool_use (session_id)",
    """CREATE TABLE IF NOT EXISTS tool_result (
        use_id INTEGER PRIMARY KEY REFERENCES tool_use (id),
        result BLOB NOT NULL,
        recorded_at REAL NOT NULL
    )""",
)
_INSERT_TOOL_USE = (
    "INSERT INTO tool_use (execution_id, session_id, turn_id, epoch, seq, call_id, tool_name, "
    "args, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
# A result is accepted only for a recorded tool-use: an orphan result could never be loaded.
_INSERT_RESULT = (
    "INSERT INTO tool_result (use_id, result, recorded_at) "
    "SELECT id, ?, ? FROM tool_use WHERE execution_id = ?"
)
_SELECT_SESSION = (
    "SELECT u.execution_id, u.call_id, u.turn_id, u.epoch, u.seq, u.tool_name, u.args, r.result "
    "FROM tool_use AS u LEFT JOIN tool_result AS r ON r.use_id = u.id "
    "WHERE u.session_id IS ? ORDER BY u.id"
)


class StoreError(FastgateError):
    """The store could not open, write or read its file; the message names the file and why."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"tool-use store {path!r}: {problem}")
        self.path = path
        self.problem = problem


class StoreStatistics(msgspec.Struct, frozen=True):
    """Writes so far: ``records / transactions`` is the mean group-commit batch."""

    transactions: int
    records: int
    largest_batch: int


# -- encoding --------------------------------------------------------------------------------------

# msgpack extensions, used only for text UTF-8 cannot encode (lone surrogates, e.g. from
# surrogateescape'd tool output): such a str, and a map with such a key (as [key, value] pairs).
_SURROGATE_TEXT, _SURROGATE_MAP = 1, 2
_encoder = msgspec.msgpack.Encoder()


def _escape_surrogates(value: Any) -> Any:
    """Builtins where each str that UTF-8 cannot encode becomes a ``_SURROGATE_TEXT`` extension."""
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError:
            return msgspec.msgpack.Ext(_SURROGATE_TEXT, value.encode("utf-8", "surrogatepass"))
        return value
    if isinstance(value, dict):
        items = [(_escape_surrogates(k), _escape_surrogates(v)) for k, v in value.items()]
        if any(isinstance(k, msgspec.msgpack.Ext) for k, _ in items):  # an Ext cannot be a key
            return msgspec.msgpack.Ext(_SURROGATE_MAP, _encoder.encode([list(i) for i in items]))
        return dict(items)
    if isinstance(value, (list, tuple)):
        return [_escape_surrogates(v) for v in value]
    return value


def _encode(value: Any, path: str, what: str) -> bytes:
    """msgpack bytes of ``value``, or ``StoreError`` saying why it cannot be stored."""
    try:
        return _encoder.encode(value)
    except UnicodeEncodeError:
        pass  # lone surrogates (surrogateescape'd tool output): stored losslessly below
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:
        raise StoreError(path, f"{what} cannot be encoded (nothing was written): {exc}") from None
    try:
        builtins = msgspec.to_builtins(value, builtin_types=(bytes, bytearray, memoryview))
        return _encoder.encode(_escape_surrogates(builtins))
    except (TypeError, ValueError, OverflowError, RecursionError, UnicodeError) as exc:
        raise StoreError(path, f"{what} cannot be encoded (nothing was written): {exc}") from None


def _ext_hook(code: int, data: memoryview) -> Any:
    if code == _SURROGATE_TEXT:
        return bytes(data).decode("utf-8", "surrogatepass")
    if code == _SURROGATE_MAP:
        return dict(_decoder.decode(data))
    raise ValueError(f"unknown msgpack extension {code}")


_decoder = msgspec.msgpack.Decoder(ext_hook=_ext_hook)


def _decode_result(blob: bytes) -> DurableResult:
    result = msgspec.convert(_decoder.decode(blob), DurableResult)
    if isinstance(result.content, list):  # msgpack has no tuple; content blocks are a tuple
        result = msgspec.structs.replace(result, content=tuple(result.content))
    return result


# -- errors ----------------------------------------------------------------------------------------

_PROBLEMS = {
    "SQLITE_FULL": "the disk (or the file-size limit) is full; the transaction was rolled back",
    "SQLITE_BUSY": "the database is locked by another connection (busy timeout expired)",
    "SQLITE_LOCKED": "the database is locked by another connection",
    "SQLITE_READONLY": "the database is read-only (check the file's and directory's permissions)",
    "SQLITE_CANTOPEN": "the file cannot be opened (does the directory exist and is it writable?)",
    "SQLITE_NOTADB": "the file is not a SQLite database (or its header is corrupt); left untouched",
    "SQLITE_CORRUPT": "the database file is corrupt",
    "SQLITE_IOERR": "an I/O error occurred",
    "SQLITE_PERM": "permission denied",
}


def _store_error(path: str, exc: BaseException, doing: str) -> StoreError:
    name = getattr(exc, "sqlite_errorname", "") or ""
    problem = next((text for key, text in _PROBLEMS.items() if name.startswith(key)), None)
    detail = f"{problem} ({exc})" if problem else f"{type(exc).__name__}: {exc}"
    return StoreError(path, f"{doing}: {detail}")


# -- opening ---------------------------------------------------------------------------------------


def _connect(path: str, busy_timeout: float) -> sqlite3.Connection:
    """Open, check and (only if the file is new) initialise; an existing file is never rewritten."""
    if os.path.isdir(path):
        raise StoreError(path, "the path is a directory, not a database file")
    try:
        conn = sqlite3.connect(
            path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
        )
    except sqlite3.Error as exc:
        raise _store_error(path, exc, "cannot open") from None
    try:
        _check_or_create(conn, path)
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise StoreError(path, f"cannot switch to WAL mode (journal mode stays {mode!r})")
        conn.execute("PRAGMA synchronous = FULL")
    except sqlite3.Error as exc:
        conn.close()
        raise _store_error(path, exc, "cannot open") from None
    except BaseException:
        conn.close()
        raise
    return conn


def _check_or_create(conn: sqlite3.Connection, path: str) -> None:
    # Read first: nothing is written until the file is known to be empty or one of ours.
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if app_id == 0 and version == 0 and not tables:
        conn.execute("BEGIN IMMEDIATE")
        for statement in _SCHEMA:
            conn.execute(statement)
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
        return
    if app_id != APPLICATION_ID:
        raise StoreError(
            path, "the file is a SQLite database of another application; left untouched"
        )
    if version > SCHEMA_VERSION:
        raise StoreError(
            path,
            f"written by a newer fastgate (schema version {version}; this version reads up to "
            f"{SCHEMA_VERSION}); left untouched: upgrade fastgate to read it",
        )
    if version != SCHEMA_VERSION or not {"tool_use", "tool_result"} <= tables:
        raise StoreError(
            path, f"unknown or damaged schema (version {version}, tables {sorted(tables)})"
        )


# -- the writer thread -----------------------------------------------------------------------------

_TOOL_USE, _RESULT, _LOAD, _STOP = range(4)
# (kind, parameters, future or None, loop or None)
_Job = tuple[int, Any, "asyncio.Future[Any] | None", "asyncio.AbstractEventLoop | None"]
_Outcome = tuple["asyncio.Future[Any]", "asyncio.AbstractEventLoop", Any, "BaseException | None"]


def _settle(outcomes: list[tuple[asyncio.Future[Any], Any, BaseException | None]]) -> None:
    for future, value, error in outcomes:
        if future.done():  # the caller stopped waiting (cancelled)
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)


class _Writer:
    """Owns the connection; runs in its own thread. Holds no reference to the store."""

    def __init__(self, conn: sqlite3.Connection, path: str, group_commit: bool) -> None:
        self.conn = conn
        self.path = path
        self.group_commit = group_commit
        self.jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self.transactions = self.records = self.largest_batch = 0
        self.thread = threading.Thread(target=self.run, name="fastgate-store-writer", daemon=True)

    def run(self) -> None:
        stop: _Job | None = None
        while stop is None:
            batch = [self.jobs.get()]
            if self.group_commit:
                while len(batch) < MAX_BATCH:
                    try:
                        batch.append(self.jobs.get_nowait())
                    except queue.Empty:
                        break
            try:
                stop = self.process(batch)
            except Exception as exc:  # a bug here must never leave callers waiting forever
                self.deliver(
                    (future, loop, None, _store_error(self.path, exc, "internal error"))
                    for _, _, future, loop in batch
                    if future is not None and loop is not None
                )
        self.shut_down(stop)

    def process(self, batch: list[_Job]) -> _Job | None:
        """Writes in order, grouped into transactions; a load or stop ends the group before it."""
        writes: list[_Job] = []
        for job in batch:
            if job[0] in (_TOOL_USE, _RESULT):
                writes.append(job)
                if not self.group_commit:
                    self.commit(writes)
                    writes = []
                continue
            if writes:
                self.commit(writes)
                writes = []
            if job[0] == _STOP:
                return job
            self.load(job)
        if writes:
            self.commit(writes)
        return None

    def commit(self, writes: list[_Job]) -> None:
        conn = self.conn
        errors: list[BaseException | None] = [None] * len(writes)
        try:
            conn.execute("BEGIN IMMEDIATE")
            for i, (kind, params, _, _) in enumerate(writes):
                try:
                    if kind == _TOOL_USE:
                        conn.execute(_INSERT_TOOL_USE, params)
                    elif conn.execute(_INSERT_RESULT, params).rowcount == 0:
                        errors[i] = StoreError(
                            self.path, f"no tool-use record for execution id {params[-1]!r}"
                        )
                except sqlite3.IntegrityError:  # only this statement was rolled back
                    what = "tool-use record" if kind == _TOOL_USE else "result"
                    execution_id = params[0] if kind == _TOOL_USE else params[-1]
                    errors[i] = StoreError(
                        self.path, f"a {what} for execution id {execution_id!r} already exists"
                    )
            conn.execute("COMMIT")
        except Exception as exc:
            self.roll_back()
            errors = [_store_error(self.path, exc, "the write failed") for _ in writes]
        else:
            self.transactions += 1
            self.records += len(writes)
            self.largest_batch = max(self.largest_batch, len(writes))
        self.deliver(
            (future, loop, None, error)
            for (_, _, future, loop), error in zip(writes, errors, strict=True)
            if future is not None and loop is not None
        )

    def roll_back(self) -> None:
        try:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # SQLite may already have rolled back (e.g. after SQLITE_FULL)

    def load(self, job: _Job) -> None:
        _, session_id, future, loop = job
        assert future is not None and loop is not None
        try:
            value: Any = _load_session(self.conn, self.path, session_id)
            error: BaseException | None = None
        except StoreError as exc:
            value, error = None, exc
        except Exception as exc:
            value, error = None, _store_error(self.path, exc, "the read failed")
        self.deliver([(future, loop, value, error)])

    def shut_down(self, stop: _Job) -> None:
        try:
            self.conn.close()  # the last connection checkpoints the WAL into the file
        except sqlite3.Error:
            pass
        closed = StoreError(self.path, "the store is closed")
        late: list[_Outcome] = []
        while True:  # anything queued after the stop is refused, never left hanging
            try:
                _, _, future, loop = self.jobs.get_nowait()
            except queue.Empty:
                break
            if future is not None and loop is not None:
                late.append((future, loop, None, StoreError(self.path, closed.problem)))
        _, _, future, loop = stop
        if future is not None and loop is not None:
            late.append((future, loop, None, None))
        self.deliver(late)

    @staticmethod
    def deliver(outcomes: Iterable[_Outcome]) -> None:
        """One wake-up per loop for the whole batch, not one per record."""
        by_loop: dict[asyncio.AbstractEventLoop, list[Any]] = {}
        for future, loop, value, error in outcomes:
            by_loop.setdefault(loop, []).append((future, value, error))
        for loop, items in by_loop.items():
            try:
                loop.call_soon_threadsafe(_settle, items)
            except RuntimeError:
                pass  # that loop is closed: nobody waits for these any more


def _load_session(conn: sqlite3.Connection, path: str, session_id: str | None) -> list[StoredCall]:
    rows = conn.execute(_SELECT_SESSION, (session_id,)).fetchall()
    calls: list[tuple[tuple[int, int, int, int], StoredCall]] = []
    turn_order: dict[str | None, int] = {}  # a turn sorts where its first record was written
    for index, (execution_id, call_id, turn_id, epoch, seq, tool_name, args, result) in enumerate(
        rows
    ):
        try:
            decoded_args = _decoder.decode(args)
            durable = None if result is None else _decode_result(result)
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as exc:
            raise StoreError(
                path, f"the record of {execution_id!r} cannot be decoded: {exc}"
            ) from None
        call = StoredCall(
            call_id,
            execution_id,
            tool_name,
            decoded_args,
            "interrupted" if durable is None else "completed",
            durable,
            turn_id,
            epoch,
            seq,
        )
        turn = turn_order.setdefault(turn_id, len(turn_order))
        calls.append(((turn, epoch, seq, index), call))
    calls.sort(key=lambda pair: pair[0])
    return [call for _, call in calls]


# -- the store -------------------------------------------------------------------------------------


class SqliteToolUseStore:
    """The default durable ``ToolUseStore``: one SQLite file, WAL, ``synchronous=FULL``.

    The constructor opens and checks the file (blocking, once; in a coroutine prefer
    ``await SqliteToolUseStore.open(path)``) and raises ``StoreError`` for a file it cannot use:
    not writable, not SQLite, corrupt, another application's, or a newer schema. Such a file is
    left untouched. ``group_commit=False`` commits every record in its own transaction (the
    reference the benchmark compares against). ``busy_timeout`` is how long a write waits for a
    lock held by another connection before failing.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        group_commit: bool = True,
        busy_timeout: float = 5.0,
    ) -> None:
        self.path = os.fspath(path)
        if not self.path or self.path == ":memory:" or self.path.startswith("file:"):
            raise ValueError(f"path: a durable store needs a file path, got {self.path!r}")
        if busy_timeout < 0:
            raise ValueError(f"busy_timeout: expected seconds >= 0, got {busy_timeout!r}")
        self._writer = _Writer(_connect(self.path, busy_timeout), self.path, group_commit)
        self._closing = False
        self._lock = threading.Lock()  # makes "not closing, then enqueue" atomic across threads
        self._closed: asyncio.Future[Any] | None = None
        self._writer.thread.start()
        # A store dropped without close() still stops its thread (and checkpoints).
        self._finalizer = weakref.finalize(self, self._writer.jobs.put, (_STOP, None, None, None))
        self._finalizer.atexit = False  # at exit the daemon thread just ends, like a crash: safe

    @classmethod
    async def open(
        cls, path: str | os.PathLike[str], *, group_commit: bool = True, busy_timeout: float = 5.0
    ) -> SqliteToolUseStore:
        """Construct the store in a worker thread, keeping the event loop free while it opens."""
        return await asyncio.to_thread(
            cls, path, group_commit=group_commit, busy_timeout=busy_timeout
        )

    async def record_tool_use(self, record: ToolUseRecord) -> None:
        """Returns once the record is committed (durable); raises ``StoreError`` if it is not."""
        if not isinstance(record, ToolUseRecord):
            raise TypeError(f"record: expected a ToolUseRecord, got {type(record).__name__}")
        args = _encode(record.args, self.path, f"the arguments of {record.execution_id!r}")
        params = (
            record.execution_id,
            record.session_id,
            record.turn_id,
            record.epoch,
            record.seq,
            record.call_id,
            record.tool_name,
            args,
            time.time(),
        )
        await self._submit(_TOOL_USE, params)

    async def record_result(self, execution_id: str, result: DurableResult) -> None:
        """Returns once the result is committed; the canonical ``value`` is never stored."""
        if isinstance(result, ToolResult):
            result = result.durable()
        if not isinstance(result, DurableResult):
            raise TypeError(f"result: expected a DurableResult, got {type(result).__name__}")
        blob = _encode(result, self.path, f"the result of {execution_id!r}")
        await self._submit(_RESULT, (blob, time.time(), execution_id))

    async def load(self, session_id: str | None) -> list[StoredCall]:
        """Every call of the session, ordered by turn, epoch and position (``seq``)."""
        calls: list[StoredCall] = await self._submit(_LOAD, session_id)
        return calls

    async def close(self) -> None:
        """Commit what is queued, stop the writer, close the file; later calls raise."""
        with self._lock:
            if self._closed is None:
                self._closing = True
                self._closed = asyncio.get_running_loop().create_future()
                self._finalizer.detach()
                self._writer.jobs.put((_STOP, None, self._closed, self._closed.get_loop()))
            closed = self._closed
        if closed.get_loop() is asyncio.get_running_loop():
            await asyncio.shield(closed)
        else:  # closed from another loop meanwhile: wait for the thread instead
            await asyncio.to_thread(self._writer.thread.join)

    @property
    def closed(self) -> bool:
        return self._closing

    def statistics(self) -> StoreStatistics:
        writer = self._writer
        return StoreStatistics(writer.transactions, writer.records, writer.largest_batch)

    async def __aenter__(self) -> SqliteToolUseStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closing else "open"
        return f"<SqliteToolUseStore {self.path!r} {state}>"

    async def _submit(self, kind: int, params: Any) -> Any:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        with self._lock:
            if self._closing:
                raise StoreError(self.path, "the store is closed")
            self._writer.jobs.put((kind, params, future, loop))
        return await future
