"""``SqliteToolUseStore``: the embedded default ``ToolUseStore`` (SPEC §12), on stdlib ``sqlite3``.

One file in WAL mode. A record written before a side effect (a tool-use, a claim, a resolution)
returns only once its WAL frames are synced (``synchronous=FULL``): it survives a killed process
and a power cut. A result returns once committed (it survives a killed process) and is synced
with the next such record, or within ``SYNC_WITHIN`` seconds when none comes: a power cut in
between can only turn a completed call back into an interrupted one, never run. The records of
a read (a ``ToolUseRecord`` with ``read_only``) are committed before it runs and synced like a
result: a power cut can lose the read with them, and a read made again changes nothing. One row
per tool-use, one per result; arguments and results are msgpack (msgspec). A dedicated writer
thread owns the connection and does every blocking call (syncs, checkpoints, waiting for a lock);
the event loop encodes and awaits, and commits only a record that needs no sync of a call that
is the only one under way (and the only task's in its turn of the loop), when the write lock is
free at once (``_Inline``).

Group commit: the writer takes every request queued while it was busy into one transaction, and
releases each caller only after the transaction holding its record committed. A loop's requests
are handed to the writer at the end of the loop iteration that made them, all at once, so that a
busy server wakes the writer once per iteration, not once per record. A record that fails
on its own (duplicate id, result without tool-use, a number or text SQLite cannot bind) fails
alone; a transaction that fails (disk full, locked, I/O error) is rolled back and fails every
record in it: nothing is half-written.

Cancelling an ``await`` of ``record_tool_use``/``record_result`` stops the wait, not the write:
the record may still be committed. ``load`` and ``close`` are likewise safe to cancel.

The journal of keyed calls (SPEC §24) is one more table: a claim reads and writes it inside the
group transaction, whose ``BEGIN IMMEDIATE`` holds the file's write lock, so it is atomic among
every process of the host that opens the file. Leases are kept by the host's wall clock.
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
from typing import Any, Final, Self

import msgspec

from fastgate.durable.codec import calls_from_rows, decode_result, encode, new_writer
from fastgate.durable.store import (
    ABORTED,
    JournalEntry,
    ResultWaiters,
    StoredCall,
    ToolUseRecord,
    as_durable,
    check_claim,
    check_lease_ttl,
    check_record,
    decide,
    journal_owner,
    journal_state,
    new_owner,
)
from fastgate.durable.store import StoreError as StoreError
from fastgate.model.results import DurableResult, ToolResult

SCHEMA_VERSION: Final = 2  # 2: the journal of keyed calls
APPLICATION_ID: Final = 0x46475453  # "FGTS" in the SQLite header: this file is a fastgate store
MAX_BATCH: Final = 1024  # records per group transaction: bounds the latency of the last one
# Results are synced with the next record written before a side effect, or this many seconds
# after their commit when none comes (see _Writer.commit).
SYNC_WITHIN: Final = 0.01

# Whether a record that needs no sync may be committed on the caller's thread (``_Inline``);
# off, every record goes through the writer thread (tests of its group commit switch it off).
INLINE_COMMITS = True
_OPEN_CALLS_KEPT: Final = 4096

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
        recorded_at REAL NOT NULL,
        writer INTEGER
    )""",
    "CREATE INDEX IF NOT EXISTS tool_use_by_session ON tool_use (session_id)",
    """CREATE TABLE IF NOT EXISTS tool_result (
        use_id INTEGER PRIMARY KEY REFERENCES tool_use (id),
        result BLOB NOT NULL,
        recorded_at REAL NOT NULL
    )""",
)
# Version 2: the journal, one row per (session, key): the arguments' digest, the attempt that
# holds the key, its owner and lease. A result's ``outcome`` (done, free: it says nothing ran,
# aborted: cancelled after it started) is what the key's holder left; NULL in older rows: done.
_JOURNAL_SCHEMA = (
    "ALTER TABLE tool_result ADD COLUMN outcome TEXT",
    """CREATE TABLE IF NOT EXISTS journal (
        session_key TEXT NOT NULL,
        key TEXT NOT NULL,
        digest BLOB NOT NULL,
        execution_id TEXT NOT NULL,
        owner TEXT NOT NULL,
        lease_expires REAL NOT NULL,
        PRIMARY KEY (session_key, key)
    ) WITHOUT ROWID""",
)
# The store that wrote each tool-use (a random number per store). Positions come from each
# writer's own clock, so only one writer's positions may be compared; across writers the row id,
# the write order (the file's write lock makes it the commit order), decides. Added to a file
# of version 2 as it is opened, without changing its version: a fastgate that predates it still
# reads and writes the file, and its rows (writer NULL) keep their order by position.
_WRITER_COLUMN: Final = "ALTER TABLE tool_use ADD COLUMN writer INTEGER"
_INSERT_TOOL_USE = (
    "INSERT INTO tool_use (execution_id, session_id, turn_id, epoch, seq, call_id, tool_name, "
    "args, recorded_at, writer) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
# A result is accepted only for a recorded tool-use: an orphan result could never be loaded.
_INSERT_RESULT = (
    "INSERT INTO tool_result (use_id, result, recorded_at, outcome) "
    "SELECT id, ?, ?, ? FROM tool_use WHERE execution_id = ?"
)
_INSERT_ENTRY = (
    "INSERT OR IGNORE INTO journal (session_key, key, digest, execution_id, owner, "
    "lease_expires) VALUES (?, ?, ?, ?, ?, ?)"
)
_DELETE_ENTRY = "DELETE FROM journal WHERE session_key = ? AND key = ?"
_SELECT_ENTRY = (
    "SELECT j.digest, j.execution_id, j.lease_expires, r.use_id IS NOT NULL, r.outcome, "
    "r.result FROM journal AS j LEFT JOIN tool_use AS u ON u.execution_id = j.execution_id "
    "LEFT JOIN tool_result AS r ON r.use_id = u.id WHERE j.session_key = ? AND j.key = ?"
)
_TAKE_OVER = (
    "UPDATE journal SET execution_id = ?, owner = ?, lease_expires = ? "
    "WHERE session_key = ? AND key = ?"
)
_RENEW = (
    "UPDATE journal SET lease_expires = ? "
    "WHERE session_key = ? AND key = ? AND execution_id = ? AND owner = ?"
)
_SELECT_OUTCOME = (
    "SELECT u.id, r.use_id IS NOT NULL, r.outcome, j.lease_expires FROM tool_use AS u "
    "LEFT JOIN tool_result AS r ON r.use_id = u.id "
    "LEFT JOIN journal AS j ON j.execution_id = u.execution_id WHERE u.execution_id = ?"
)
_SELECT_SESSION = (
    "SELECT u.execution_id, u.call_id, u.turn_id, u.epoch, u.seq, u.tool_name, u.args, r.result, "
    "u.writer FROM tool_use AS u LEFT JOIN tool_result AS r ON r.use_id = u.id "
    "WHERE u.session_id IS ? ORDER BY u.id"
)


class StoreStatistics(msgspec.Struct, frozen=True):
    """Writes so far: ``records / transactions`` is the mean group-commit batch."""

    transactions: int
    records: int
    largest_batch: int


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
        mode = _switch_to_wal(conn, busy_timeout)
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


def _switch_to_wal(conn: sqlite3.Connection, busy_timeout: float) -> object:
    """``PRAGMA journal_mode = WAL``; the journal mode it leaves. Switching a new file needs its
    exclusive lock, and SQLite answers BUSY at once, without waiting, to a connection that would
    otherwise wait for another one switching it at the same moment: tried again until
    ``busy_timeout`` passes (once the file is in WAL mode the switch takes no lock)."""
    deadline = time.monotonic() + busy_timeout
    pause = 0.001
    while True:
        try:
            return conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        except sqlite3.OperationalError as exc:
            name = getattr(exc, "sqlite_errorname", "") or ""
            if not name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
                raise
            if time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(2 * pause, 0.05)


def _check_or_create(conn: sqlite3.Connection, path: str) -> None:
    """Make a new (empty) file a store, bring a version 1 store to version 2 or a version 2 store
    without the writer column up to date, or check that the file is a store this version reads.
    Nothing is written until the file is known to be empty or one of ours: the header and tables
    are read first, in one read transaction (one consistent view, even while another process
    creates the file), and read again under the write lock before anything is created or
    migrated, since another process opening the same file at the same moment may have done it
    in between."""
    state = _read_state(conn)
    if _needs_writing(state):
        conn.execute("BEGIN IMMEDIATE")
        try:
            state = _read_state(conn)
            if state == _EMPTY:  # still empty: ours to create
                for statement in (*_SCHEMA, *_JOURNAL_SCHEMA):
                    conn.execute(statement)
                conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                state = (APPLICATION_ID, SCHEMA_VERSION, frozenset({"journal", *_V1_TABLES}), True)
            elif _needs_writing(state) and _V1_TABLES <= state[2]:
                app_id, version, tables, writer = state
                if version == 1:  # add the journal
                    for statement in _JOURNAL_SCHEMA:
                        conn.execute(statement)
                    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                    tables |= {"journal"}
                if not writer:
                    conn.execute(_WRITER_COLUMN)
                state = (app_id, SCHEMA_VERSION, tables, True)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    _check_state(state, path)


_V1_TABLES: Final = frozenset({"tool_use", "tool_result"})
# Application id, user version, table names, whether ``tool_use`` has the writer column.
_State = tuple[int, int, frozenset[str], bool]
_EMPTY: Final[_State] = (0, 0, frozenset(), False)


def _read_state(conn: sqlite3.Connection) -> _State:
    """The header's ids, the table names and the writer column, read in one transaction (one
    view of the file); inside a transaction the caller opened, in that one."""
    own = not conn.in_transaction
    if own:
        conn.execute("BEGIN")
    try:
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
        tables = frozenset(row[0] for row in rows)
        writer = conn.execute(
            "SELECT count(*) FROM pragma_table_info('tool_use') WHERE name = 'writer'"
        ).fetchone()[0]
    except BaseException:
        if own and conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # the read's own error is the one to report
        raise
    if own:
        conn.execute("COMMIT")  # (a read: nothing is written)
    return int(app_id), int(version), tables, bool(writer)


def _needs_writing(state: _State) -> bool:
    """Empty (to be created), or one of ours of version 1 or lacking the writer column (to be
    migrated)."""
    app_id, version, tables, writer = state
    return state == _EMPTY or (
        app_id == APPLICATION_ID
        and (version == 1 or (version == SCHEMA_VERSION and not writer and "tool_use" in tables))
    )


def _check_state(state: _State, path: str) -> None:
    app_id, version, tables, _ = state
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
    if version != SCHEMA_VERSION or not _V1_TABLES <= tables:
        raise StoreError(
            path, f"unknown or damaged schema (version {version}, tables {sorted(tables)})"
        )
    if "journal" not in tables:
        raise StoreError(path, f"unknown or damaged schema (version {version}, no journal)")


# -- the writer thread -----------------------------------------------------------------------------

_TOOL_USE, _RESULT, _LOAD, _STOP, _CLAIM, _RENEW_LEASE, _RESOLVE = range(7)
# A tool-use record and a claim of a call whose tool declares no side effect (READ_ONLY).
_READ_USE, _READ_CLAIM = 7, 8
_WRITES: Final = frozenset(
    {_TOOL_USE, _RESULT, _CLAIM, _RENEW_LEASE, _RESOLVE, _READ_USE, _READ_CLAIM}
)
# Records no side effect waits on: a result or a renewal (written after it; lost to a power
# cut, it leaves the call "interrupted", never runnable twice) and the records of a read (lost
# to a power cut with its result, the read may be made again, which changes nothing). Their
# commits are synced later; see ``_Writer.commit``.
_UNSYNCED: Final = frozenset({_RESULT, _RENEW_LEASE, _READ_USE, _READ_CLAIM})


# Requests the loop sends the writer without waiting: sync the WAL soon (a commit made on the
# loop's connection left it unsynced); checkpoint it (the loop's connection never does).
_SYNC, _CHECKPOINT = 9, 10
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


def _fails_alone(exc: Exception) -> bool:
    """Whether ``exc``, raised by one record's statements, is that record's own (text or a
    number SQLite cannot bind, a value too big) rather than the transaction's (the disk full,
    the file locked, an I/O error), which fails every record in it."""
    if isinstance(exc, sqlite3.Error):
        return isinstance(
            exc, (sqlite3.DataError, sqlite3.InterfaceError, sqlite3.ProgrammingError)
        )
    return True


class _Statements:
    """One record's statements on one connection, inside a transaction its caller opened."""

    def __init__(self, conn: sqlite3.Connection, path: str) -> None:
        self.conn = conn
        self.path = path

    def write(self, kind: int, params: Any, now: float) -> Any:
        """One record's statements, inside the open transaction; its answer, if any."""
        conn = self.conn
        if kind == _TOOL_USE or kind == _READ_USE:
            conn.execute(_INSERT_TOOL_USE, params)
        elif kind == _RESULT:
            blob, recorded_at, execution_id, outcome = params
            if (
                conn.execute(_INSERT_RESULT, (blob, recorded_at, outcome, execution_id)).rowcount
                == 0
            ):
                raise StoreError(self.path, f"no tool-use record for execution id {execution_id!r}")
        elif kind == _CLAIM or kind == _READ_CLAIM:
            return self.claim(params, now)
        elif kind == _RENEW_LEASE:
            session, key, execution_id, owner, lease_ttl = params
            renew = (now + lease_ttl, session, key, execution_id, owner)
            return conn.execute(_RENEW, renew).rowcount > 0
        else:
            self.resolve(params, now)
        return None

    def unwritable(self, kind: int, params: Any, exc: BaseException) -> StoreError:
        """The error of a record that cannot be written on its own (``_fails_alone``)."""
        if kind == _RESULT or kind == _RESOLVE or kind == _RENEW_LEASE:
            execution_id = params[2]
        else:
            execution_id = (params if kind == _TOOL_USE or kind == _READ_USE else params[0])[0]
        return StoreError(
            self.path,
            f"the record of execution id {execution_id!r:.80} cannot be written (nothing of it "
            f"was written): {type(exc).__name__}: {exc}",
        )

    def duplicate(self, kind: int, params: Any) -> StoreError:
        if kind == _RESULT or kind == _RESOLVE:
            return StoreError(self.path, f"a result for execution id {params[2]!r} already exists")
        use = params if kind == _TOOL_USE or kind == _READ_USE else params[0]
        return StoreError(
            self.path, f"a tool-use record for execution id {use[0]!r} already exists"
        )

    def claim(self, params: Any, now: float) -> JournalEntry:
        use, session, key, digest, owner, lease_ttl, take_over = params
        conn = self.conn
        execution_id = use[0]
        entry = (session, key, digest, execution_id, owner, now + lease_ttl)
        if conn.execute(_INSERT_ENTRY, entry).rowcount:  # the key was free: ours now
            try:
                conn.execute(_INSERT_TOOL_USE, use)
            except sqlite3.IntegrityError:
                conn.execute(_DELETE_ENTRY, (session, key))  # a duplicate id claims nothing
                raise
            return JournalEntry("claimed", execution_id)
        row = conn.execute(_SELECT_ENTRY, (session, key)).fetchone()
        stored_digest, holder, lease_expires, has_result, outcome, result = row
        status = decide(
            bytes(stored_digest) == digest,
            bool(has_result),
            outcome,
            lease_expires > now,
            take_over,
        )
        if status == "completed":
            return JournalEntry(status, holder, self.decode(holder, result))
        if status is not None:
            return JournalEntry(status, holder)
        conn.execute(_INSERT_TOOL_USE, use)
        conn.execute(_TAKE_OVER, (execution_id, owner, now + lease_ttl, session, key))
        return JournalEntry("claimed", execution_id)

    def decode(self, execution_id: str, blob: bytes) -> DurableResult:
        try:
            return decode_result(blob)
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as exc:
            raise StoreError(
                self.path, f"the result of {execution_id!r} cannot be decoded: {exc}"
            ) from None

    def resolve(self, params: Any, now: float) -> None:
        blob, recorded_at, execution_id, outcome = params
        conn = self.conn
        row = conn.execute(_SELECT_OUTCOME, (execution_id,)).fetchone()
        if row is None:
            raise StoreError(self.path, f"no tool-use record for execution id {execution_id!r}")
        use_id, has_result, previous, lease_expires = row
        if not has_result and lease_expires is not None and lease_expires > now:
            raise StoreError(
                self.path,
                f"execution id {execution_id!r} is still running (its owner's lease is alive)",
            )
        if has_result and previous != ABORTED:
            raise StoreError(
                self.path, f"a result for execution id {execution_id!r} already exists"
            )
        conn.execute(
            "INSERT OR REPLACE INTO tool_result (use_id, result, recorded_at, outcome) "
            "VALUES (?, ?, ?, ?)",
            (use_id, blob, recorded_at, outcome),
        )

    def roll_back(self) -> None:
        try:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # SQLite may already have rolled back (e.g. after SQLITE_FULL)


class _Writer(_Statements):
    """Owns the connection; runs in its own thread. Holds no reference to the store."""

    def __init__(self, conn: sqlite3.Connection, path: str, group_commit: bool) -> None:
        super().__init__(conn, path)
        self.group_commit = group_commit
        self.jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self.transactions = self.records = self.largest_batch = 0
        self.synchronous = "FULL"  # the connection's setting (see commit)
        self.unsynced = False  # a commit since the WAL was last synced was made without a sync
        self.wal_fd = -2  # the WAL, to sync after commits made without it; -2 not yet open
        # A commit on the loop's connection left the WAL unsynced and asked for a sync (a _SYNC
        # request); cleared before each sync that will cover what is committed by then.
        self.inline_unsynced = False
        self.thread = threading.Thread(target=self.run, name="fastgate-store-writer", daemon=True)

    def run(self) -> None:
        stop: _Job | None = None
        while stop is None:
            batch = [self.next_job()]
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

    def next_job(self) -> _Job:
        """The next request; the WAL is synced meanwhile if none comes within ``SYNC_WITHIN``
        of a commit that did not sync it (the next commit that syncs it covers it otherwise)."""
        if self.unsynced:
            try:
                return self.jobs.get(timeout=SYNC_WITHIN)
            except queue.Empty:
                self.sync_wal()
        return self.jobs.get()

    def process(self, batch: list[_Job]) -> _Job | None:
        """Writes in order, grouped into transactions; a load or stop ends the group before it."""
        writes: list[_Job] = []
        for job in batch:
            if job[0] in _WRITES:
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
            if job[0] == _SYNC:
                self.unsynced = True  # synced as a result's commit would be
            elif job[0] == _CHECKPOINT:
                self.checkpoint(job[1])
            else:
                self.load(job)
        if writes:
            self.commit(writes)
        return None

    def commit(self, writes: list[_Job]) -> None:
        """One transaction for ``writes``; each caller is released after its ``COMMIT``.

        A transaction holding a record written before a side effect (a tool-use, a claim, a
        resolution) syncs the WAL before its callers go on, and with it every commit before.
        One holding only results, lease renewals and the records of reads does not: the next
        such transaction, or ``next_job`` within ``SYNC_WITHIN``, syncs it. A process killed
        meanwhile loses nothing (the frames are in the OS); a power cut meanwhile may revert
        those results to "interrupted", a call that is never run twice, or lose a read, which
        may then be made again."""
        conn = self.conn
        values: list[Any] = [None] * len(writes)
        errors: list[BaseException | None] = [None] * len(writes)
        deferred = self.wal_fd != -1 and all(job[0] in _UNSYNCED for job in writes)
        if not deferred:
            self.inline_unsynced = False  # this commit's sync covers the loop's commits before it
        # A record that fails on its own in a way SQLite does not undo by itself (text it cannot
        # bind, halfway through a claim's statements) rolls the transaction back and is left
        # out: the others are written again without it, so it fails alone.
        pending = list(range(len(writes)))
        try:
            self.set_synchronous("NORMAL" if deferred else "FULL")
            changes = conn.total_changes
            while True:
                conn.execute("BEGIN IMMEDIATE")
                now = time.time()  # the journal's clock: the host's, shared by its processes
                failed = None
                for i in pending:
                    kind, params, _, _ = writes[i]
                    try:
                        values[i] = self.write(kind, params, now)
                        errors[i] = None
                    except StoreError as exc:
                        errors[i] = exc
                    except sqlite3.IntegrityError:  # only this statement was rolled back
                        errors[i] = self.duplicate(kind, params)
                    except Exception as exc:
                        if not _fails_alone(exc):
                            raise
                        errors[i] = self.unwritable(kind, params, exc)
                        failed = i
                        break
                if failed is None:
                    break
                self.roll_back()
                pending.remove(failed)
                for i in pending:
                    values[i] = None
            conn.execute("COMMIT")
        except Exception as exc:
            self.roll_back()
            failure = _store_error(self.path, exc, "the write failed")
            for i in pending:
                errors[i] = StoreError(self.path, failure.problem)
        else:
            self.transactions += 1
            self.records += len(writes)
            self.largest_batch = max(self.largest_batch, len(writes))
            if conn.total_changes != changes:  # (a commit that wrote nothing syncs nothing)
                self.unsynced = deferred
        self.deliver(
            (future, loop, value, error)
            for (_, _, future, loop), value, error in zip(writes, values, errors, strict=True)
            if future is not None and loop is not None
        )

    def set_synchronous(self, level: str) -> None:
        if level != self.synchronous:
            self.conn.execute(f"PRAGMA synchronous = {level}")
            self.synchronous = level

    def sync_wal(self) -> None:
        """Sync the WAL after commits made without it. Where the WAL cannot be opened or
        synced, every later commit syncs it itself (``synchronous=FULL``)."""
        self.unsynced = False
        self.inline_unsynced = False
        try:
            if self.wal_fd == -2:
                # Where SQLite keeps it: beside the database file, symbolic links resolved.
                wal = os.path.realpath(self.path) + "-wal"
                self.wal_fd = os.open(wal, os.O_RDONLY | os.O_CLOEXEC)
            os.fdatasync(self.wal_fd)  # as SQLite syncs it
        except OSError:
            self.close_wal()
            self.wal_fd = -1
            try:  # what the last commits left in the OS is made durable the way SQLite does it
                self.set_synchronous("FULL")
                self.conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
            except sqlite3.Error:
                pass  # the next commit (FULL) syncs the WAL, or fails its callers

    def sync_soon(self) -> None:
        """A commit on the loop's connection (``_Inline``) left the WAL unsynced: have it synced
        as a result's is. Called from the loop's thread; asks once until the next sync."""
        if not self.inline_unsynced:
            self.inline_unsynced = True
            self.jobs.put((_SYNC, None, None, None))

    def checkpoint(self, inline: _Inline) -> None:
        """Copy the WAL into the file for the loop's connection, which never checkpoints; it
        sends its records here until this is done, so the checkpoint catches up with the WAL
        and the next commit starts it over (else back-to-back commits there would keep it
        growing)."""
        try:
            self.conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        except sqlite3.Error:
            pass  # the next checkpoint, or the last connection's close, does it
        finally:
            inline.checkpointing = False

    def close_wal(self) -> None:
        if self.wal_fd >= 0:
            os.close(self.wal_fd)

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
        if self.unsynced:
            self.sync_wal()
        try:
            self.conn.close()  # the last connection checkpoints the WAL into the file
        except sqlite3.Error:
            pass
        self.close_wal()
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


class _Inline(_Statements):
    """Commits a record that needs no sync (``_UNSYNCED``) on the caller's own thread, on a
    connection of its own, when the file's write lock is free at once.

    A record that goes through the writer thread waits for two wake-ups across threads (the
    writer's, then the loop's), about 120 us here, for a commit that takes about 20 us; a call
    made one at a time (a client waiting for each answer) pays that for its claim and again for
    its result. This connection never waits for a lock (``busy_timeout`` 0: the caller then hands
    the record to the writer), never syncs (the writer syncs the WAL soon after, as for its own
    such commits) and never checkpoints (it asks the writer to, every ``CHECKPOINT_EVERY``
    commits), so nothing here blocks the loop beyond the commit itself."""

    CHECKPOINT_EVERY: Final = 256  # commits: about SQLite's own auto-checkpoint of 1,000 pages

    def __init__(self, conn: sqlite3.Connection, path: str) -> None:
        super().__init__(conn, path)
        self.lock = threading.Lock()
        self.open = True
        self.transactions = 0
        self.records = 0
        self.largest_batch = 0
        self.since_checkpoint = 0
        self.checkpointing = False  # the writer has been asked to checkpoint and has not yet

    @classmethod
    def connect(cls, path: str) -> _Inline:
        conn = sqlite3.connect(path, timeout=0.0, isolation_level=None, check_same_thread=False)
        try:
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA wal_autocheckpoint = 0")
        except BaseException:
            conn.close()
            raise
        return cls(conn, path)

    def try_commit(self, kind: int, params: Any) -> tuple[bool, Any]:
        """(True, the record's answer) once committed here; (False, None) when the caller must
        hand it to the writer: the lock is taken (by this connection in another thread, or by
        another connection), or anything went wrong (the writer then meets it and reports it
        as it reports its own). Raises the ``StoreError`` of a record that fails on its own
        (a duplicate id, a result without its tool-use), with nothing written."""
        if not self.lock.acquire(blocking=False):
            return False, None
        try:
            if not self.open:
                return False, None
            conn = self.conn
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error:
                return False, None
            try:
                value = self.write(kind, params, time.time())
                conn.execute("COMMIT")
            except BaseException as exc:
                # Whatever it was, the write lock is given back: a transaction left open here
                # would lock every connection to the file, in every process, until close.
                self.roll_back()
                if isinstance(exc, StoreError):
                    raise
                if isinstance(exc, sqlite3.IntegrityError):
                    raise self.duplicate(kind, params) from None
                if isinstance(exc, Exception) and _fails_alone(exc):
                    raise self.unwritable(kind, params, exc) from None
                if isinstance(exc, sqlite3.Error):
                    return False, None
                raise
            self.transactions += 1
            self.records += 1
            self.largest_batch = max(self.largest_batch, 1)
            self.since_checkpoint += 1
            return True, value
        finally:
            self.lock.release()

    def try_commit_all(self, jobs: list[_Job]) -> list[Any] | None:
        """Each job's answer once all of them are committed in one transaction here; None
        when they must go to the writer instead: the lock is taken, or anything went wrong,
        a record that fails on its own included (nothing was written, and the writer then
        commits the others and fails that one alone, as in its own groups)."""
        if not self.lock.acquire(blocking=False):
            return None
        try:
            if not self.open:
                return None
            conn = self.conn
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error:
                return None
            try:
                now = time.time()
                values = [self.write(kind, params, now) for kind, params, _, _ in jobs]
                conn.execute("COMMIT")
            except BaseException as exc:
                self.roll_back()  # the write lock is given back, as in try_commit
                if isinstance(exc, Exception):
                    return None
                raise
            self.transactions += 1
            self.records += len(jobs)
            self.largest_batch = max(self.largest_batch, len(jobs))
            self.since_checkpoint += 1
            return values
        finally:
            self.lock.release()

    def checkpoint_due(self) -> bool:
        if self.since_checkpoint < self.CHECKPOINT_EVERY:
            return False
        self.since_checkpoint = 0
        self.checkpointing = True
        return True

    def close(self) -> None:
        with self.lock:  # waits for a commit in another thread (microseconds)
            if self.open:
                self.open = False
                self.conn.close()


def _load_session(conn: sqlite3.Connection, path: str, session_id: str | None) -> list[StoredCall]:
    return calls_from_rows(conn.execute(_SELECT_SESSION, (session_id,)).fetchall(), path)


# -- the store -------------------------------------------------------------------------------------


class SqliteToolUseStore:
    """The default durable ``ToolUseStore``: one SQLite file, WAL, synced before every side
    effect (results are synced with the next record or within ``SYNC_WITHIN``: module docstring).

    The constructor opens and checks the file (blocking, once; in a coroutine prefer
    ``await SqliteToolUseStore.open(path)``) and raises ``StoreError`` for a file it cannot use:
    not writable, not SQLite, corrupt, another application's, or a newer schema. Such a file is
    left untouched. ``group_commit=False`` commits every record in its own transaction (the
    reference the benchmark compares against). ``busy_timeout`` is how long a write waits for a
    lock held by another connection before failing. ``lease_ttl``: how long a keyed call's claim
    lasts unless renewed (SPEC §24).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        group_commit: bool = True,
        busy_timeout: float = 5.0,
        lease_ttl: float = 10.0,
    ) -> None:
        self.path = os.fspath(path)
        if not self.path or self.path == ":memory:" or self.path.startswith("file:"):
            raise ValueError(f"path: a durable store needs a file path, got {self.path!r}")
        if busy_timeout < 0:
            raise ValueError(f"busy_timeout: expected seconds >= 0, got {busy_timeout!r}")
        self._lease_ttl = check_lease_ttl(lease_ttl)
        self._owner = new_owner()
        self._writer_id = new_writer()  # orders this store's records among other writers'
        self._waiters = ResultWaiters()
        self._writer = _Writer(_connect(self.path, busy_timeout), self.path, group_commit)
        try:
            self._inline: _Inline | None = _Inline.connect(self.path) if INLINE_COMMITS else None
        except sqlite3.Error:
            self._inline = None  # every record then goes through the writer
        self._waiting = 0  # requests handed to the writer whose callers still wait
        # Calls of this process with a tool-use record and no result yet (what tells a caller
        # alone from a busy server; bounded: a result never recorded must not grow it forever).
        self._open_calls: set[str] = set()
        # The task whose records were committed on the loop's thread in this turn of the loop.
        self._turn_task: asyncio.Task[Any] | None = None
        # Under load, the records needing no sync that one loop makes in one turn, committed
        # together on its thread at the turn's end (``_commit_batch``).
        self._batch: list[_Job] = []
        self._batch_loop: asyncio.AbstractEventLoop | None = None
        self._closing = False
        self._lock = threading.Lock()  # makes "not closing, then enqueue" atomic across threads
        # The requests one loop makes in one iteration, handed to the writer together at its end:
        # under load the writer then wakes once for many, not once for each.
        self._held: list[_Job] = []
        self._held_by: asyncio.AbstractEventLoop | None = None
        self._closed: asyncio.Future[Any] | None = None
        self._writer.thread.start()
        # A store dropped without close() still stops its thread (and checkpoints).
        self._finalizer = weakref.finalize(self, self._writer.jobs.put, (_STOP, None, None, None))
        self._finalizer.atexit = False  # at exit the daemon thread just ends, like a crash: safe

    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str],
        *,
        group_commit: bool = True,
        busy_timeout: float = 5.0,
        lease_ttl: float = 10.0,
    ) -> Self:
        """Construct the store in a worker thread, keeping the event loop free while it opens."""
        return await asyncio.to_thread(
            cls, path, group_commit=group_commit, busy_timeout=busy_timeout, lease_ttl=lease_ttl
        )

    @property
    def lease_ttl(self) -> float:
        return self._lease_ttl

    async def record_tool_use(self, record: ToolUseRecord) -> None:
        """Returns once the record is committed, and synced unless it is a read's (see the
        module's docstring); raises ``StoreError`` if it is not committed."""
        if not isinstance(record, ToolUseRecord):
            raise TypeError(f"record: expected a ToolUseRecord, got {type(record).__name__}")
        kind = _READ_USE if record.read_only else _TOOL_USE
        await self._submit(kind, self._tool_use_params(record))
        self._opened(record.execution_id)

    def _tool_use_params(self, record: ToolUseRecord) -> tuple[Any, ...]:
        check_record(record, self.path)
        args = encode(record.args, self.path, f"the arguments of {record.execution_id!r}")
        return (
            record.execution_id,
            record.session_id,
            record.turn_id,
            record.epoch,
            record.seq,
            record.call_id,
            record.tool_name,
            args,
            time.time(),  # information only: hosts' clocks disagree, and order nothing
            self._writer_id,
        )

    async def record_result(self, execution_id: str, result: DurableResult) -> None:
        """Returns once the result is committed; the canonical ``value`` is never stored."""
        if isinstance(result, ToolResult):
            result = result.durable()
        if not isinstance(result, DurableResult):
            raise TypeError(f"result: expected a DurableResult, got {type(result).__name__}")
        blob = encode(result, self.path, f"the result of {execution_id!r}")
        try:
            await self._submit(_RESULT, (blob, time.time(), execution_id, journal_state(result)))
        finally:
            self._open_calls.discard(execution_id)
        self._waiters.wake(execution_id)

    async def claim(
        self,
        record: ToolUseRecord,
        key: str,
        digest: bytes,
        *,
        take_over: bool,
        scope: str | None = None,
    ) -> JournalEntry:
        """The journal's decision for ``key`` in ``scope`` (default: ``record``'s session; see
        ``JournalEntry``), committed before it returns; a claim writes ``record`` and starts
        its lease."""
        check_claim(key, scope, self.path)
        use = self._tool_use_params(record)
        params = (use, journal_owner(record.session_id, scope), key, digest, self._owner)
        kind = _READ_CLAIM if record.read_only else _CLAIM
        entry: JournalEntry = await self._submit(kind, (*params, self._lease_ttl, take_over))
        if entry.status == "claimed":
            self._opened(record.execution_id)
        return entry

    async def renew(
        self, session_id: str | None, key: str, execution_id: str, scope: str | None = None
    ) -> bool:
        params = (journal_owner(session_id, scope), key, execution_id, self._owner, self._lease_ttl)
        renewed: bool = await self._submit(_RENEW_LEASE, params)
        return renewed

    async def wait_result(self, execution_id: str, within: float) -> None:
        await self._waiters.wait(execution_id, within)

    async def resolve(self, execution_id: str, result: ToolResult | DurableResult) -> None:
        """Record ``result`` as the outcome of the interrupted call ``execution_id`` (a
        tool-use without a result, or one cancelled after it started); later repeats of its
        key return it, replayed. Refused while the call's lease is alive."""
        durable = as_durable(result, execution_id)
        blob = encode(durable, self.path, f"the result of {execution_id!r}")
        await self._submit(_RESOLVE, (blob, time.time(), execution_id, journal_state(durable)))
        self._waiters.wake(execution_id)

    async def load(self, session_id: str | None) -> list[StoredCall]:
        """Every call of the session, ordered by turn, epoch and position (``seq``): one
        writer's positions, and across writers the order written (``recovered_order``)."""
        calls: list[StoredCall] = await self._submit(_LOAD, session_id)
        return calls

    async def close(self) -> None:
        """Commit what is queued, stop the writer, close the file; later calls raise."""
        with self._lock:
            if self._closed is None:
                self._closing = True
                if self._inline is not None:
                    self._inline.close()  # first: the writer's close, the last, checkpoints
                self._closed = asyncio.get_running_loop().create_future()
                self._finalizer.detach()
                self._hand_over_held()
                batch, self._batch, self._batch_loop = self._batch, [], None
                for job in batch:
                    self._writer.jobs.put(job)
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
        writer, inline = self._writer, self._inline
        if inline is None:
            return StoreStatistics(writer.transactions, writer.records, writer.largest_batch)
        return StoreStatistics(
            writer.transactions + inline.transactions,
            writer.records + inline.records,
            max(writer.largest_batch, inline.largest_batch),
        )

    async def __aenter__(self) -> SqliteToolUseStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closing else "open"
        return f"<SqliteToolUseStore {self.path!r} {state}>"

    async def _submit(self, kind: int, params: Any) -> Any:
        loop = asyncio.get_running_loop()
        inline = self._inline
        batched = False
        if kind in _UNSYNCED and inline is not None:
            committed, value = self._commit_inline(inline, kind, params)
            if committed:
                return value
            batched = self._writer.wal_fd != -1 and not inline.checkpointing
        future = loop.create_future()
        with self._lock:
            if self._closing:
                raise StoreError(self.path, "the store is closed")
            if batched and (self._batch_loop is None or self._batch_loop is loop):
                if self._batch_loop is None:
                    self._batch_loop = loop
                    loop.call_soon(self._commit_batch)
                self._batch.append((kind, params, future, loop))
            else:
                if self._held_by is None:
                    self._held_by = loop
                    loop.call_soon(self._hand_over)
                if self._held_by is loop:
                    self._held.append((kind, params, future, loop))
                else:  # another loop's requests are held: this one goes at once
                    self._writer.jobs.put((kind, params, future, loop))
            self._waiting += 1
        try:
            return await future
        finally:
            with self._lock:
                self._waiting -= 1

    def _commit_batch(self) -> None:
        """Commit the records that need no sync made in this turn of the loop, together, on
        the loop's own connection: under load a busy server's reads and results then cost one
        commit per turn and no hand-off to the writer's thread (two wake-ups across threads,
        and the interpreter's lock passed back and forth for each statement). They go to the
        writer when that cannot be (see ``_Inline.try_commit_all``)."""
        with self._lock:
            batch, self._batch, self._batch_loop = self._batch, [], None
        if not batch:  # close() handed them to the writer
            return
        inline = self._inline
        assert inline is not None
        if inline.checkpointing:  # the writer checkpoints: its records go there until it is done
            self._to_writer(batch)
            return
        try:
            values = inline.try_commit_all(batch)
        except BaseException:  # (KeyboardInterrupt, say): nothing was written, nor lost
            self._to_writer(batch)
            raise
        if values is None:
            self._to_writer(batch)
            return
        for (_, _, future, _), value in zip(batch, values, strict=True):
            if future is not None and not future.done():
                future.set_result(value)
        self._writer.sync_soon()
        if inline.checkpoint_due():
            self._writer.jobs.put((_CHECKPOINT, inline, None, None))

    def _to_writer(self, jobs: list[_Job]) -> None:
        with self._lock:
            if self._closed is None:
                put = self._writer.jobs.put
                for job in jobs:
                    put(job)
                return
        # Closed from another thread meanwhile: the writer has stopped taking records.
        for _, _, future, _ in jobs:
            if future is not None and not future.done():
                future.set_exception(StoreError(self.path, "the store is closed"))

    def _commit_inline(self, inline: _Inline, kind: int, params: Any) -> tuple[bool, Any]:
        """Commit a record that needs no sync here and now (``_Inline``) when its call is the
        only one under way: no other call of this process between its tool-use record and its
        result, and no caller waiting for the store. Calls made one at a time then never wait
        for the writer's thread; under load a record joins its turn's group instead
        (``_commit_batch``). (And only where the writer can sync the WAL later.)"""
        writer = self._writer
        if self._waiting or writer.wal_fd == -1 or self._closing or inline.checkpointing:
            return False, None
        open_calls = self._open_calls
        if open_calls:  # a result or a renewal ends or keeps its own call: the one open
            mine = params[2] if kind == _RESULT or kind == _RENEW_LEASE else None
            if len(open_calls) > 1 or mine not in open_calls:
                return False, None
        # One task per turn of the loop. A body that never waits takes its call from tool-use
        # record to result within one turn (its task starts eagerly), so a busy server's calls
        # no longer overlap in ``open_calls``: another task's record in the same turn (another
        # request's) is the sign of load, and goes to the writer, grouped, as it did. One
        # task's calls one after the other stay here.
        task = asyncio.current_task()
        turn_task = self._turn_task
        if turn_task is not None and turn_task is not task:
            return False, None
        committed, value = inline.try_commit(kind, params)
        if committed:
            if turn_task is None and task is not None:
                self._turn_task = task
                task.get_loop().call_soon(self._end_turn)
            writer.sync_soon()
            if inline.checkpoint_due():
                writer.jobs.put((_CHECKPOINT, inline, None, None))
        return committed, value

    def _end_turn(self) -> None:
        self._turn_task = None

    def _opened(self, execution_id: str) -> None:
        if len(self._open_calls) >= _OPEN_CALLS_KEPT:
            self._open_calls.clear()
        self._open_calls.add(execution_id)

    def _hand_over(self) -> None:
        with self._lock:
            self._hand_over_held()

    def _hand_over_held(self) -> None:
        """Queue the held requests, in order (called holding the lock). The writer wakes at
        the first and finds the rest queued when it takes the interpreter's lock."""
        held, self._held, self._held_by = self._held, [], None
        put = self._writer.jobs.put
        for job in held:
            put(job)
