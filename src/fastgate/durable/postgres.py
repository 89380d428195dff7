"""``PostgresToolUseStore``: the ``ToolUseStore`` and the journal of keyed calls (SPEC §12, §24)
in PostgreSQL, shared by every worker on every host that uses the same ``namespace``.

psycopg 3 with its async pool (the ``postgres`` extra); nothing of it is imported until a store
is made, so ``fastgate.PostgresToolUseStore`` can always be named. Each namespace is a schema of
its own, created and migrated on first use under an advisory lock (a version table says which
schema version it holds; a newer one is refused, another application's left untouched).

- Group commit: records queue for one writer, which writes everything queued while the previous
  transaction committed as one transaction (inserts batched with ``executemany``), and releases
  each caller only after the commit that holds its record. A record the server refuses (a
  number out of range, say) fails alone: the batch is written again, each record in a savepoint
  of its own. ``group_commit=False`` commits each record alone (the benchmark's reference).
- The journal: one row per (session, key), unique; a claim is ``INSERT ... ON CONFLICT DO
  NOTHING``, and when the key exists, a ``SELECT ... FOR UPDATE`` of that row decides what the
  call does, in one transaction. Leases run on the database's clock (``now()``).
- The server unreachable: each operation raises ``StoreError`` once ``timeout`` passes (so a
  call that needs its record fails before any side effect), and the pool reconnects by itself.
- Connections terminated (``pg_terminate_backend``, a failover): each connection is checked as
  it is handed out and a dead one replaced without pausing, so the next operations succeed as
  soon as new connections are made; an operation whose connection dies under it fails with
  ``StoreError`` (its transaction did not commit, or its outcome is unknown) and is not retried.

Use one store from one event loop (the pool belongs to the loop that first used the store).
"""

from __future__ import annotations

import asyncio
import re
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Final

from fastgate.durable.codec import calls_from_rows, decode_result, encode, new_writer
from fastgate.durable.sqlite import MAX_BATCH, StoreStatistics
from fastgate.durable.store import (
    ABORTED,
    JournalEntry,
    ResultWaiters,
    StoredCall,
    StoreError,
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
from fastgate.model.results import DurableResult, ToolResult

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg_pool import AsyncConnectionPool

SCHEMA_VERSION: Final = 1
_NAMESPACE: Final = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_EXTRA: Final = (
    "PostgresToolUseStore needs the 'postgres' extra (psycopg 3 and psycopg_pool): "
    "pip install 'fastgate[postgres]'"
)

# Each step migrates a namespace's schema from version i to i + 1; "{ns}" is its schema.
_MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
    (
        """CREATE TABLE {ns}.tool_use (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            execution_id text NOT NULL UNIQUE,
            session_id text,
            turn_id text,
            epoch bigint NOT NULL,
            seq bigint NOT NULL,
            call_id text,
            tool_name text NOT NULL,
            args bytea NOT NULL,
            recorded_at timestamptz NOT NULL DEFAULT now(),
            writer bigint
        )""",
        "CREATE INDEX tool_use_by_session ON {ns}.tool_use (session_id, id)",
        """CREATE TABLE {ns}.tool_result (
            use_id bigint PRIMARY KEY REFERENCES {ns}.tool_use (id),
            result bytea NOT NULL,
            outcome text NOT NULL,
            recorded_at timestamptz NOT NULL DEFAULT now()
        )""",
        """CREATE TABLE {ns}.journal (
            session_key text NOT NULL,
            key text NOT NULL,
            digest bytea NOT NULL,
            execution_id text NOT NULL,
            owner text NOT NULL,
            lease_expires timestamptz NOT NULL,
            PRIMARY KEY (session_key, key)
        )""",
    ),
)


# The store that wrote each tool-use (a random number per store). Positions come from each
# writer's own clock, so only one writer's positions may be compared; across writers the
# identity ``id`` decides. It is taken from a sequence as the row is inserted, so a record
# inserted after another was committed always has the larger one (two records written at the
# same moment, neither acknowledged before the other began, are concurrent: either order is
# true). Rows without a writer (written by a fastgate that predates it) keep their order by
# position.
_WRITER: Final = "ALTER TABLE {ns}.tool_use ADD COLUMN writer bigint"


class _Sql:
    """The statements, with the namespace's schema written in (checked to be an identifier)."""

    def __init__(self, ns: str) -> None:
        self.insert_use = (
            f"INSERT INTO {ns}.tool_use (execution_id, session_id, turn_id, epoch, seq, call_id, "
            "tool_name, args, writer) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (execution_id) DO NOTHING RETURNING id"
        )
        self.insert_result = (
            f"INSERT INTO {ns}.tool_result (use_id, result, outcome) "
            f"SELECT id, %s, %s FROM {ns}.tool_use WHERE execution_id = %s "
            "ON CONFLICT (use_id) DO NOTHING RETURNING use_id"
        )
        self.has_use = f"SELECT 1 FROM {ns}.tool_use WHERE execution_id = %s"
        self.select_session = (
            "SELECT u.execution_id, u.call_id, u.turn_id, u.epoch, u.seq, u.tool_name, u.args, "
            f"r.result, u.writer FROM {ns}.tool_use AS u LEFT JOIN {ns}.tool_result AS r "
            "ON r.use_id = u.id WHERE u.session_id IS NOT DISTINCT FROM %s ORDER BY u.id"
        )
        self.insert_entry = (
            f"INSERT INTO {ns}.journal (session_key, key, digest, execution_id, owner, "
            "lease_expires) VALUES (%s, %s, %s, %s, %s, now() + %s * interval '1 second') "
            "ON CONFLICT (session_key, key) DO NOTHING RETURNING execution_id"
        )
        # Locked first, read after: a statement that waited for a row lock sees the row as
        # committed, but not the rows committed with it (its snapshot is older), so the result
        # is read by a statement of its own, once the entry is ours.
        self.lock_entry = (
            "SELECT digest, execution_id, lease_expires > now() "
            f"FROM {ns}.journal WHERE session_key = %s AND key = %s FOR UPDATE"
        )
        self.result_of = (
            f"SELECT r.outcome, r.result FROM {ns}.tool_use AS u JOIN {ns}.tool_result AS r "
            "ON r.use_id = u.id WHERE u.execution_id = %s"
        )
        self.take_over = (
            f"UPDATE {ns}.journal SET execution_id = %s, owner = %s, "
            "lease_expires = now() + %s * interval '1 second' "
            "WHERE session_key = %s AND key = %s"
        )
        self.renew = (
            f"UPDATE {ns}.journal SET lease_expires = now() + %s * interval '1 second' "
            "WHERE session_key = %s AND key = %s AND execution_id = %s AND owner = %s"
        )
        # Locking the tool-use holds off a result for it (its foreign key's lock conflicts).
        self.lock_use = f"SELECT id FROM {ns}.tool_use WHERE execution_id = %s FOR UPDATE"
        self.select_outcome = (
            f"SELECT r.use_id IS NOT NULL, r.outcome, j.lease_expires > now() "
            f"FROM {ns}.tool_use AS u "
            f"LEFT JOIN {ns}.tool_result AS r ON r.use_id = u.id "
            f"LEFT JOIN {ns}.journal AS j ON j.execution_id = u.execution_id "
            "WHERE u.id = %s"
        )
        self.upsert_result = (
            f"INSERT INTO {ns}.tool_result (use_id, result, outcome) VALUES (%s, %s, %s) "
            "ON CONFLICT (use_id) DO UPDATE SET result = EXCLUDED.result, "
            "outcome = EXCLUDED.outcome, recorded_at = now()"
        )


def _import_psycopg() -> tuple[Any, Any]:
    try:
        import psycopg
        import psycopg_pool
    except ImportError as exc:
        raise ImportError(_EXTRA) from exc
    return psycopg, psycopg_pool


def _label(psycopg: Any, dsn: str, namespace: str) -> str:
    """What errors call the store: server and namespace, never the password."""
    try:
        parts = psycopg.conninfo.conninfo_to_dict(dsn)
    except Exception:
        return f"postgresql ({namespace})"
    host = parts.get("host") or "localhost"
    dbname = parts.get("dbname") or parts.get("user") or ""
    return f"postgresql://{host}/{dbname} ({namespace})"


def _text(value: str | None, what: str, label: str) -> str | None:
    """PostgreSQL text holds neither NUL nor lone surrogates: refuse them before anything is
    queued (in a group transaction they would fail every record with them)."""
    if value is None:
        return None
    try:
        value.encode()
    except UnicodeEncodeError:
        raise StoreError(label, f"{what} is not valid text (nothing was written)") from None
    if "\x00" in value:
        raise StoreError(label, f"{what} contains a NUL character (nothing was written)")
    return value


_TOOL_USE, _RESULT = 0, 1
# (kind, parameters, future)
_Job = tuple[int, Any, "asyncio.Future[Any]"]


class PostgresToolUseStore:
    """A ``ToolUseStore`` with the journal of keyed calls, in PostgreSQL.

    ``dsn``: a libpq connection string or URI. ``min_size``/``max_size``: the pool's
    connections. ``namespace``: the schema that holds this journal (lower-case letters, digits
    and ``_``); stores of one namespace share one journal. ``lease_ttl``: how long a keyed call's
    claim lasts unless renewed. ``group_commit=False`` commits every record alone. ``timeout``:
    how long an operation waits for a connection (the server unreachable) before ``StoreError``.
    """

    def __init__(
        self,
        dsn: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        namespace: str = "fastgate",
        lease_ttl: float = 10.0,
        group_commit: bool = True,
        timeout: float = 5.0,
    ) -> None:
        psycopg, psycopg_pool = _import_psycopg()
        if not isinstance(dsn, str):
            raise TypeError(f"dsn: expected a connection string, got {type(dsn).__name__}")
        if not isinstance(namespace, str) or not _NAMESPACE.fullmatch(namespace):
            raise ValueError(
                f"namespace: expected lower-case letters, digits and _ (at most 63, not "
                f"starting with a digit), got {namespace!r}"
            )
        if isinstance(min_size, bool) or not isinstance(min_size, int) or min_size < 0:
            raise ValueError(f"min_size: expected an integer >= 0, got {min_size!r}")
        if (
            isinstance(max_size, bool)
            or not isinstance(max_size, int)
            or max_size < max(1, min_size)
        ):
            raise ValueError(f"max_size: expected an integer >= max(1, min_size), got {max_size!r}")
        if not timeout > 0:
            raise ValueError(f"timeout: expected seconds > 0, got {timeout!r}")
        self.namespace = namespace
        self.path = _label(psycopg, dsn, namespace)  # as SqliteToolUseStore.path: errors name it
        self._lease_ttl = check_lease_ttl(lease_ttl)
        self._timeout = float(timeout)
        self._group_commit = group_commit
        self._owner = new_owner()
        self._writer_id = new_writer()  # orders this store's records among other writers'
        self._waiters = ResultWaiters()
        self._sql = _Sql(f'"{namespace}"')
        self._errors: tuple[type[BaseException], ...] = (psycopg.Error, psycopg_pool.PoolTimeout)
        self._broken: type[BaseException] = psycopg.Error
        self._pool_timeout: type[BaseException] = psycopg_pool.PoolTimeout
        self._check = psycopg_pool.AsyncConnectionPool.check_connection
        self._pool: AsyncConnectionPool[Any] = psycopg_pool.AsyncConnectionPool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            open=False,
            timeout=self._timeout,
            # No check by the pool: ``_connection`` checks each connection as it is handed out
            # (the pool's check pauses after each broken one; see there).
            # Reconnecting backs off (1 s, doubling); giving up after 10 s and starting afresh
            # at the next request keeps the wait after a long outage short.
            reconnect_timeout=10.0,
            name=f"fastgate-{namespace}",
        )
        self._ready = False
        self._opening: asyncio.Lock | None = None
        self._closing = False
        self._closed = False
        self._jobs: deque[_Job] = deque()
        self._wake: asyncio.Event | None = None
        self._writer: asyncio.Task[None] | None = None
        self.transactions = self.records = self.largest_batch = 0

    @property
    def lease_ttl(self) -> float:
        return self._lease_ttl

    @property
    def closed(self) -> bool:
        return self._closing

    def statistics(self) -> StoreStatistics:
        return StoreStatistics(self.transactions, self.records, self.largest_batch)

    def __repr__(self) -> str:
        return f"<PostgresToolUseStore {self.path} {'closed' if self._closing else 'open'}>"

    async def __aenter__(self) -> PostgresToolUseStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- the protocol -----------------------------------------------------------------------------

    async def record_tool_use(self, record: ToolUseRecord) -> None:
        """Returns once the record is committed; raises ``StoreError`` if it is not."""
        await self._submit(_TOOL_USE, self._use_params(record))

    async def record_result(self, execution_id: str, result: DurableResult) -> None:
        """Returns once the result is committed; the canonical ``value`` is never stored."""
        if isinstance(result, ToolResult):
            result = result.durable()
        if not isinstance(result, DurableResult):
            raise TypeError(f"result: expected a DurableResult, got {type(result).__name__}")
        blob = encode(result, self.path, f"the result of {execution_id!r}")
        await self._submit(_RESULT, (blob, journal_state(result), execution_id))
        self._waiters.wake(execution_id)

    async def load(self, session_id: str | None) -> list[StoredCall]:
        """Every call of the session, ordered by turn, epoch and position (``seq``): one
        writer's positions, and across writers the order written (``recovered_order``)."""
        _text(session_id, "the session id", self.path)
        await self._open()
        try:
            async with self._connection() as conn:
                rows = await (
                    await conn.execute(self._sql.select_session, (session_id,))
                ).fetchall()
        except self._errors as exc:
            raise self._error(exc, "the read failed") from None
        return calls_from_rows(rows, self.path)

    async def close(self) -> None:
        """Commit what is queued, then close the pool; later calls raise ``StoreError``."""
        if self._closing:
            if self._writer is not None:
                await asyncio.wait((self._writer,))
            return
        self._closing = True
        if self._writer is not None and self._wake is not None:
            self._wake.set()
            await asyncio.wait((self._writer,))
        self._closed = True
        await self._pool.close()

    # -- the journal ------------------------------------------------------------------------------

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
        use = self._use_params(record)
        session = journal_owner(record.session_id, scope)
        await self._open()
        sql = self._sql
        try:
            async with self._connection() as conn, conn.transaction():
                claim = (session, key, digest, use[0], self._owner, self._lease_ttl)
                if await (await conn.execute(sql.insert_entry, claim)).fetchone() is not None:
                    await self._insert_use(conn, use)
                    return JournalEntry("claimed", use[0])
                row = await (await conn.execute(sql.lock_entry, (session, key))).fetchone()
                assert row is not None  # the conflict's row; rows are never deleted
                stored_digest, holder, alive = row
                found = await (await conn.execute(sql.result_of, (holder,))).fetchone()
                outcome, result = (None, None) if found is None else found
                status = decide(
                    bytes(stored_digest) == digest, found is not None, outcome, alive, take_over
                )
                if status == "completed":
                    return JournalEntry(status, holder, self._decode(holder, result))
                if status is not None:
                    return JournalEntry(status, holder)
                await self._insert_use(conn, use)
                await conn.execute(
                    sql.take_over, (use[0], self._owner, self._lease_ttl, session, key)
                )
                return JournalEntry("claimed", use[0])
        except self._errors as exc:
            raise self._error(exc, "the claim failed") from None

    def _decode(self, execution_id: str, blob: Any) -> DurableResult:
        try:
            return decode_result(bytes(blob))
        except ValueError as exc:  # msgspec's decode and validation errors are ValueErrors
            raise StoreError(
                self.path, f"the result of {execution_id!r} cannot be decoded: {exc}"
            ) from None

    async def _insert_use(self, conn: AsyncConnection[Any], use: tuple[Any, ...]) -> None:
        if await (await conn.execute(self._sql.insert_use, use)).fetchone() is None:
            raise StoreError(
                self.path, f"a tool-use record for execution id {use[0]!r} already exists"
            )

    async def renew(
        self, session_id: str | None, key: str, execution_id: str, scope: str | None = None
    ) -> bool:
        await self._open()
        try:
            async with self._connection() as conn:
                session = journal_owner(session_id, scope)
                params = (self._lease_ttl, session, key, execution_id, self._owner)
                renewed: bool = (await conn.execute(self._sql.renew, params)).rowcount > 0
                return renewed
        except self._errors as exc:
            raise self._error(exc, "the lease was not renewed") from None

    async def wait_result(self, execution_id: str, within: float) -> None:
        await self._waiters.wait(execution_id, within)

    async def resolve(self, execution_id: str, result: ToolResult | DurableResult) -> None:
        """Record ``result`` as the outcome of the interrupted call ``execution_id``; later
        repeats of its key return it, replayed. Refused while the call's lease is alive."""
        durable = as_durable(result, execution_id)
        blob = encode(durable, self.path, f"the result of {execution_id!r}")
        await self._open()
        sql = self._sql
        try:
            async with self._connection() as conn, conn.transaction():
                use = await (await conn.execute(sql.lock_use, (execution_id,))).fetchone()
                if use is None:
                    raise StoreError(
                        self.path, f"no tool-use record for execution id {execution_id!r}"
                    )
                use_id = use[0]
                row = await (await conn.execute(sql.select_outcome, (use_id,))).fetchone()
                assert row is not None
                has_result, previous, alive = row
                if not has_result and alive:
                    raise StoreError(
                        self.path,
                        f"execution id {execution_id!r} is still running "
                        "(its owner's lease is alive)",
                    )
                if has_result and previous != ABORTED:
                    raise StoreError(
                        self.path, f"a result for execution id {execution_id!r} already exists"
                    )
                await conn.execute(sql.upsert_result, (use_id, blob, journal_state(durable)))
        except self._errors as exc:
            raise self._error(exc, "the result was not recorded") from None
        self._waiters.wake(execution_id)

    # -- connections ------------------------------------------------------------------------------

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[AsyncConnection[Any]]:
        """A working connection from the pool, as ``pool.connection()`` (committed on success,
        rolled back on an error, then given back), or ``PoolTimeout`` once ``timeout`` passed.

        Each connection is checked (one empty statement) as it is handed out, before anything of
        the operation is sent. One found broken (its backend terminated, the server restarted)
        is closed and given back, which makes the pool open a replacement, and the next one is
        taken at once. The pool's own check slept after each broken connection (1 s, doubling),
        and the dead ones stay ahead of their replacements: once every connection was
        terminated together, each operation slept its whole ``timeout`` away on a few of them
        and failed, the longer the more connections the pool held.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout
        while True:
            try:
                # The time left (0 once past the deadline: PoolTimeout at once).
                conn = await self._pool.getconn(max(deadline - loop.time(), 0.0))
            except self._pool_timeout:
                raise self._pool_timeout(
                    f"couldn't get a working connection after {self._timeout:.2f} sec"
                ) from None
            try:
                await self._check(conn)
            except self._broken:
                await conn.close()  # closed, the pool drops it and connects a replacement
                await self._pool.putconn(conn)
                continue
            except BaseException:  # cancelled: give it back as it is (the pool resets it)
                await self._pool.putconn(conn)
                raise
            break
        try:
            async with conn:
                yield conn
        finally:
            await self._pool.putconn(conn)

    # -- opening and migrating --------------------------------------------------------------------

    async def _open(self) -> None:
        if self._ready:
            return
        if self._closing:
            raise StoreError(self.path, "the store is closed")
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            await self._open_once()

    async def _open_once(self) -> None:
        """Open the pool and migrate, unless a caller that held the lock before us did."""
        if self._ready:
            return
        try:
            await self._pool.open(wait=False)
            async with self._connection() as conn:
                await self._migrate(conn)
        except self._errors as exc:
            raise self._error(exc, "cannot open") from None
        self._ready = True

    async def _migrate(self, conn: AsyncConnection[Any]) -> None:
        """Create or bring the namespace's schema up to ``SCHEMA_VERSION``; one process at a
        time (an advisory lock), each step in the same transaction as the version it writes."""
        ns = f'"{self.namespace}"'
        async with conn.transaction():
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtext('fastgate schema ' || %s))",
                (self.namespace,),
            )
            exists = await (
                await conn.execute(
                    "SELECT to_regclass(%s) IS NOT NULL, (SELECT count(*) FROM pg_tables "
                    "WHERE schemaname = %s)",
                    (f"{ns}.schema_version", self.namespace),
                )
            ).fetchone()
            assert exists is not None
            has_version, tables = exists
            if not has_version and tables:
                raise StoreError(
                    self.path,
                    f"the schema {self.namespace!r} holds another application's tables; "
                    "left untouched",
                )
            version = 0
            if has_version:
                # The highest version written (the table holds one row; were there more, the
                # newest is the one that decides whether this version may use the schema).
                row = await (
                    await conn.execute(f"SELECT max(version) FROM {ns}.schema_version")
                ).fetchone()
                version = 0 if row is None or row[0] is None else int(row[0])
            if version > SCHEMA_VERSION:
                raise StoreError(
                    self.path,
                    f"written by a newer fastgate (schema version {version}; this version reads "
                    f"up to {SCHEMA_VERSION}); left untouched: upgrade fastgate to use it",
                )
            if version == SCHEMA_VERSION:
                await self._add_writer_column(conn, ns)
                return
            await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {ns}")
            await conn.execute(
                f"CREATE TABLE IF NOT EXISTS {ns}.schema_version (version integer NOT NULL)"
            )
            for step in _MIGRATIONS[version:]:
                for statement in step:
                    await conn.execute(statement.format(ns=ns))
            await conn.execute(f"DELETE FROM {ns}.schema_version")
            await conn.execute(
                f"INSERT INTO {ns}.schema_version (version) VALUES (%s)", (SCHEMA_VERSION,)
            )

    async def _add_writer_column(self, conn: AsyncConnection[Any], ns: str) -> None:
        """Give a namespace made before stores noted their writer the column (see ``_WRITER``),
        once; its version stays, so that a fastgate that predates it still uses the namespace."""
        row = await (
            await conn.execute(
                "SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass(%s) "
                "AND attname = 'writer' AND NOT attisdropped",
                (f"{ns}.tool_use",),
            )
        ).fetchone()
        if row is not None and row[0] == 0:
            await conn.execute(_WRITER.format(ns=ns))

    # -- group commit -----------------------------------------------------------------------------

    def _use_params(self, record: ToolUseRecord) -> tuple[Any, ...]:
        if not isinstance(record, ToolUseRecord):
            raise TypeError(f"record: expected a ToolUseRecord, got {type(record).__name__}")
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
            self._writer_id,
        )

    async def _submit(self, kind: int, params: Any) -> None:
        if self._closing:
            raise StoreError(self.path, "the store is closed")
        await self._open()
        if self._closing:
            raise StoreError(self.path, "the store is closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._jobs.append((kind, params, future))
        if self._wake is None:
            self._wake = asyncio.Event()
        self._wake.set()
        if self._writer is None:
            self._writer = loop.create_task(self._write_forever(), name="fastgate-pg-writer")
        await future

    async def _write_forever(self) -> None:
        assert self._wake is not None
        jobs = self._jobs
        while True:
            if not jobs:
                if self._closing:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            take = MAX_BATCH if self._group_commit else 1
            batch = [jobs.popleft() for _ in range(min(take, len(jobs)))]
            try:
                await self._commit(batch)
            except Exception as exc:  # a bug here must never leave callers waiting forever
                error = self._error(exc, "internal error")
                for _, _, future in batch:
                    if not future.done():
                        future.set_exception(error)

    async def _commit(self, batch: list[_Job]) -> None:
        """One transaction for the batch; each record fails alone (a duplicate, a result without
        a tool-use, a value the server refuses) or all fail together (the transaction did not
        commit)."""
        errors: list[BaseException | None] = [None] * len(batch)
        try:
            async with self._connection() as conn:
                if not await self._write_batch(conn, batch, errors):
                    # A statement failed, and with it the whole transaction, nothing committed:
                    # write the batch again, each record in a savepoint of its own, so that a
                    # record the server refuses (an index entry too big, say) fails alone.
                    errors = [None] * len(batch)
                    async with conn.transaction():
                        for i in range(len(batch)):
                            try:
                                async with conn.transaction():  # a savepoint
                                    await self._write_run(conn, batch, i, i + 1, errors)
                            except Exception as exc:  # the server's refusal, or psycopg's
                                if conn.broken:
                                    raise
                                errors[i] = self._error(exc, "the record was not written")
        except Exception as exc:
            failed = self._error(exc, "the write failed")
            errors = [failed] * len(batch)
        else:
            self.transactions += 1
            self.records += len(batch)
            self.largest_batch = max(self.largest_batch, len(batch))
        for (_, _, future), error in zip(batch, errors, strict=True):
            if future.done():  # the caller stopped waiting (cancelled)
                continue
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(None)

    async def _write_batch(
        self, conn: AsyncConnection[Any], batch: list[_Job], errors: list[BaseException | None]
    ) -> bool:
        """The batch in one transaction, runs of one kind each one ``executemany``: True once
        committed; False when a statement failed on a connection still working (the transaction
        was rolled back, nothing of it is written). A failed commit, or a connection that
        broke, raises: its outcome is not known, so nothing may be written again."""
        written = False
        try:
            async with conn.transaction():
                start = 0
                while start < len(batch):
                    end = start
                    while end < len(batch) and batch[end][0] == batch[start][0]:
                        end += 1
                    await self._write_run(conn, batch, start, end, errors)
                    start = end
                written = True
        except Exception:  # (psycopg's, or a value it could not send: either may be one record's)
            if written or conn.broken:
                raise
            return False
        return True

    async def _write_run(
        self,
        conn: AsyncConnection[Any],
        batch: list[_Job],
        start: int,
        end: int,
        errors: list[BaseException | None],
    ) -> None:
        sql = self._sql
        run = batch[start:end]
        async with conn.cursor() as cur:
            if run[0][0] == _TOOL_USE:
                await cur.executemany(
                    sql.insert_use, [params for _, params, _ in run], returning=True
                )
                for i, (_, params, _) in enumerate(run, start):
                    if await cur.fetchone() is None:
                        errors[i] = StoreError(
                            self.path,
                            f"a tool-use record for execution id {params[0]!r} already exists",
                        )
                    cur.nextset()
                return
            await cur.executemany(
                sql.insert_result, [params for _, params, _ in run], returning=True
            )
            missing: list[int] = []
            for i in range(start, end):
                if await cur.fetchone() is None:
                    missing.append(i)
                cur.nextset()
            for i in missing:
                eid = batch[i][1][2]
                exists = await (await conn.execute(sql.has_use, (eid,))).fetchone()
                problem = (
                    f"a result for execution id {eid!r} already exists"
                    if exists is not None
                    else f"no tool-use record for execution id {eid!r}"
                )
                errors[i] = StoreError(self.path, problem)

    def _error(self, exc: BaseException, doing: str) -> StoreError:
        if isinstance(exc, StoreError):
            return exc
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return StoreError(self.path, f"{doing}: {type(exc).__name__}: {detail}")
