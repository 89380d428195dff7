"""The order ``recover`` gives a turn written by several replicas, whatever their clocks say.

A record's position (``seq``) comes from the clock of the process that wrote it; two hosts'
clocks disagree, so positions of different writers cannot be compared. Each store notes which
writer wrote a record, and across writers the store's own write order decides: a record written
after another replica's was acknowledged comes after it, also when the later writer's clock is
seconds behind. One writer's records keep the order of their positions. A store made before
writers were noted gains the column as it is opened and keeps its old order.
"""

from __future__ import annotations

import asyncio
import itertools
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from fastgate import ExecutionContext, ToolResultProjector
from fastgate.durable.postgres import SCHEMA_VERSION as PG_SCHEMA_VERSION
from fastgate.durable.postgres import PostgresToolUseStore
from fastgate.durable.sqlite import APPLICATION_ID, SqliteToolUseStore
from fastgate.durable.store import StoredCall, ToolUseRecord, args_digest
from fastgate.model.results import DurableResult, ResultMeta
from fastgate.pipeline import executor as executor_module
from tests.durable.conftest import Backend, new_namespace
from tests.pipeline_kit import executor, tool

BEHIND_NS = 2_000_000_000  # the slow replica's clock: two seconds behind


def positions(offset_ns: int = 0) -> Iterator[int]:
    """A replica's positions as the executor takes them: increasing, from its wall clock."""
    last = 0
    while True:
        last = max(last + 1, time.time_ns() + offset_ns)
        yield last


def use(execution_id: str, seq: int, *, turn: str | None = "T", epoch: int = 0) -> ToolUseRecord:
    return ToolUseRecord(execution_id, f"call-{execution_id}", "s", turn, epoch, seq, "t", {})


def done(execution_id: str) -> DurableResult:
    meta = ResultMeta(execution_id, f"call-{execution_id}", "t", "s", 1.0, 2.0, 1000.0)
    return DurableResult(True, f"result of {execution_id}", None, meta)


async def recovered(backend: Backend) -> list[StoredCall]:
    async with backend.open() as store:
        return await ToolResultProjector(store).recover("s")


def assert_positions_increase(calls: list[StoredCall]) -> None:
    for before, after in itertools.pairwise(calls):
        if (before.turn_id, before.epoch) == (after.turn_id, after.epoch):
            assert before.seq < after.seq, (before, after)


async def test_a_replica_whose_clock_is_behind_is_recovered_in_the_order_written(
    backend: Backend,
) -> None:
    fast, slow = positions(), positions(-BEHIND_NS)
    digest = args_digest(("t", {}))
    async with backend.open() as a, backend.open() as b:
        # One turn, its calls taken in turn by the two replicas (each record acknowledged before
        # the next is written), plain records and claims of keyed calls alike.
        await a.record_tool_use(use("a0", next(fast)))
        await b.record_tool_use(use("b0", next(slow)))
        await a.record_result("a0", done("a0"))
        await a.record_tool_use(use("a1", next(fast)))
        await b.record_result("b0", done("b0"))
        await b.record_tool_use(use("b1", next(slow)))
        claimed = await a.claim(use("a2", next(fast)), "ka", digest, take_over=False)
        assert claimed.status == "claimed"
        claimed = await b.claim(use("b2", next(slow)), "kb", digest, take_over=False)
        assert claimed.status == "claimed"
        await b.record_tool_use(use("b3", next(slow), epoch=1))
        await a.record_tool_use(use("a3", next(fast), epoch=1))
    calls = await recovered(backend)
    assert [(c.execution_id, c.epoch, c.status) for c in calls] == [
        ("a0", 0, "completed"),
        ("b0", 0, "completed"),
        ("a1", 0, "interrupted"),
        ("b1", 0, "interrupted"),
        ("a2", 0, "interrupted"),
        ("b2", 0, "interrupted"),
        ("b3", 1, "interrupted"),
        ("a3", 1, "interrupted"),
    ]
    assert calls[0].result is not None and calls[0].result.content == "result of a0"
    assert_positions_increase(calls)


async def test_two_replica_executors_sharing_a_turn_recover_it_in_the_order_of_their_calls(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    echo = tool("echo", lambda args, ctx: args["text"])
    async with backend.open() as store_a, backend.open() as store_b:
        replica_a = executor(echo, store=store_a)
        with monkeypatch.context() as patch:  # replica b's clock is two seconds behind a's
            patch.setattr(executor_module, "_positions", lambda: positions(-BEHIND_NS))
            replica_b = executor(echo, store=store_b)
        try:
            for n, replica in enumerate([replica_a, replica_b] * 3):
                key = f"key-{n}" if n % 3 == 2 else None  # keyed calls write a claim instead
                ctx = ExecutionContext(session_id="s", turn_id="T", idempotency_key=key)
                result = await replica.execute("echo", {"text": str(n)}, ctx)
                assert result.ok, result.error
        finally:
            replica_a.dispose()
            replica_b.dispose()
    calls = await recovered(backend)
    assert [c.args["text"] for c in calls] == ["0", "1", "2", "3", "4", "5"]
    assert [c.status for c in calls] == ["completed"] * 6
    assert_positions_increase(calls)


class Writer:
    """One replica writing a turn's records one after another; when each was handed to the
    store and when it was acknowledged (the monotonic clock, the same for every thread)."""

    def __init__(self, name: str, offset_ns: int) -> None:
        self.name = name
        self.positions = positions(offset_ns)
        self.handed: dict[str, int] = {}
        self.acknowledged: dict[str, int] = {}

    async def write(
        self, backend: Backend, count: int, started: threading.Event, wait_for: threading.Event
    ) -> None:
        digest = args_digest(("t", {}))
        async with backend.open() as store:
            for n in range(count):
                if n == 3:
                    started.set()
                    # (a thread's event: waited for off the loop, so the loop stays free)
                    assert await asyncio.to_thread(wait_for.wait, 30.0)
                execution_id = f"{self.name}{n}"
                record = use(execution_id, next(self.positions))
                self.handed[execution_id] = time.monotonic_ns()
                if n % 4 == 3:
                    entry = await store.claim(record, execution_id, digest, take_over=False)
                    assert entry.status == "claimed"
                else:
                    await store.record_tool_use(record)
                self.acknowledged[execution_id] = time.monotonic_ns()


async def test_concurrent_replicas_writing_one_turn_get_distinct_positions_in_written_order(
    backend: Backend,
) -> None:
    """Two replicas, each in a thread and event loop of its own, write one turn at once; the
    slow one's clock is two seconds behind. Each has written three records before the other
    goes on, so the two do interleave."""
    count = 24
    a, b = Writer("a", 0), Writer("b", -BEHIND_NS)
    a_started, b_started = threading.Event(), threading.Event()
    failure: list[BaseException] = []

    def replica_b() -> None:
        try:
            asyncio.run(b.write(backend, count, b_started, a_started))
        except BaseException as exc:
            failure.append(exc)
            b_started.set()

    thread = threading.Thread(target=replica_b)
    thread.start()
    try:
        await a.write(backend, count, a_started, b_started)
    finally:
        a_started.set()
        await asyncio.to_thread(thread.join)
    assert not failure, failure
    calls = await recovered(backend)
    order = [c.execution_id for c in calls]
    assert sorted(order) == sorted([*a.handed, *b.handed])  # every record, once
    assert_positions_increase(calls)
    assert len({c.seq for c in calls}) == 2 * count
    # Each replica's records in the order it wrote them...
    for writer in (a, b):
        assert [e for e in order if e in writer.handed] == list(writer.handed)
    # ... and a record written after another replica's was acknowledged comes after it.
    index = {execution_id: i for i, execution_id in enumerate(order)}
    later = [
        (first, then)
        for one, other in ((a, b), (b, a))
        for first, acknowledged in one.acknowledged.items()
        for then, handed in other.handed.items()
        if acknowledged < handed
    ]
    assert len(later) >= 3 * count  # (the three records each wrote before the other went on)
    misplaced = [(first, then) for first, then in later if index[first] > index[then]]
    assert misplaced == []


# The schema of a SQLite store before stores noted their writer (version 2).
_OLD_SQLITE = f"""
CREATE TABLE tool_use (id INTEGER PRIMARY KEY, execution_id TEXT NOT NULL UNIQUE,
    session_id TEXT, turn_id TEXT, epoch INTEGER NOT NULL, seq INTEGER NOT NULL, call_id TEXT,
    tool_name TEXT NOT NULL, args BLOB NOT NULL, recorded_at REAL NOT NULL);
CREATE INDEX tool_use_by_session ON tool_use (session_id);
CREATE TABLE tool_result (use_id INTEGER PRIMARY KEY REFERENCES tool_use (id),
    result BLOB NOT NULL, recorded_at REAL NOT NULL, outcome TEXT);
CREATE TABLE journal (session_key TEXT NOT NULL, key TEXT NOT NULL, digest BLOB NOT NULL,
    execution_id TEXT NOT NULL, owner TEXT NOT NULL, lease_expires REAL NOT NULL,
    PRIMARY KEY (session_key, key)) WITHOUT ROWID;
PRAGMA application_id = {APPLICATION_ID};
PRAGMA user_version = 2;
"""
# What a fastgate of that schema writes (it names its columns; the writer stays NULL).
_OLD_INSERT = (
    "INSERT INTO tool_use (execution_id, session_id, turn_id, epoch, seq, call_id, tool_name, "
    "args, recorded_at) VALUES (?, 's', ?, 0, ?, ?, 't', ?, 0.0)"
)
# Written in this order, with positions out of it: the old order is by position.
_OLD_ROWS = [("old-30", "T", 30), ("old-10", "T", 10), ("other-5", "U", 5), ("old-20", "T", 20)]
_OLD_ORDER = ["old-10", "old-20", "old-30", "other-5"]


def _old_row(execution_id: str, turn: str, seq: int) -> tuple[Any, ...]:
    return (execution_id, turn, seq, f"call-{execution_id}", msgspec.msgpack.encode({}))


def _columns(db: Path) -> list[str]:
    conn = sqlite3.connect(db)
    try:
        return [row[1] for row in conn.execute("PRAGMA table_info(tool_use)")]
    finally:
        conn.close()


async def test_a_sqlite_store_of_the_previous_schema_keeps_its_order_and_orders_new_writers(
    tmp_path: Path,
) -> None:
    db = tmp_path / "old.db"
    conn = sqlite3.connect(db)
    conn.executescript(_OLD_SQLITE)
    conn.executemany(_OLD_INSERT, [_old_row(*row) for row in _OLD_ROWS])
    conn.commit()
    conn.close()
    # Opened by several stores at once: the column is added once, the version kept.
    stores = await asyncio.gather(*(SqliteToolUseStore.open(db) for _ in range(3)))
    for store in stores:
        await store.close()
    assert _columns(db).count("writer") == 1
    old = Backend("sqlite", str(db), "")
    assert [c.execution_id for c in await recovered(old)] == _OLD_ORDER
    async with SqliteToolUseStore(db) as store:  # a replica whose clock is behind
        await store.record_tool_use(use("new", 1))
    # A fastgate that predates the column still writes the file; its record is one of the old
    # writer's, after the new replica's (written before it).
    conn = sqlite3.connect(db)
    conn.execute(_OLD_INSERT, _old_row("old-40", "T", 40))
    conn.commit()
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 2
    conn.close()
    calls = await recovered(old)
    assert [c.execution_id for c in calls] == [
        "old-10",
        "old-20",
        "old-30",
        "new",
        "old-40",
        "other-5",
    ]
    assert [c.seq for c in calls if c.execution_id.startswith("old")] == [10, 20, 30, 40]
    assert_positions_increase(calls)


async def test_a_postgres_namespace_of_the_previous_schema_keeps_its_order_and_orders_new_writers(
    postgres_server: Any,
) -> None:
    import psycopg

    ns = new_namespace()
    quoted = f'"{ns}"'
    old_insert = (
        f"INSERT INTO {quoted}.tool_use (execution_id, session_id, turn_id, epoch, seq, call_id, "
        "tool_name, args) VALUES (%s, 's', %s, 0, %s, %s, 't', %s)"
    )
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        # The schema of a namespace before stores noted their writer (version 1).
        conn.execute(f"CREATE SCHEMA {quoted}")
        conn.execute(f"CREATE TABLE {quoted}.schema_version (version integer NOT NULL)")
        conn.execute(f"INSERT INTO {quoted}.schema_version VALUES (1)")
        conn.execute(
            f"""CREATE TABLE {quoted}.tool_use (
                id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                execution_id text NOT NULL UNIQUE, session_id text, turn_id text,
                epoch bigint NOT NULL, seq bigint NOT NULL, call_id text,
                tool_name text NOT NULL, args bytea NOT NULL,
                recorded_at timestamptz NOT NULL DEFAULT now())"""
        )
        conn.execute(f"CREATE INDEX tool_use_by_session ON {quoted}.tool_use (session_id, id)")
        conn.execute(
            f"""CREATE TABLE {quoted}.tool_result (
                use_id bigint PRIMARY KEY REFERENCES {quoted}.tool_use (id),
                result bytea NOT NULL, outcome text NOT NULL,
                recorded_at timestamptz NOT NULL DEFAULT now())"""
        )
        conn.execute(
            f"""CREATE TABLE {quoted}.journal (
                session_key text NOT NULL, key text NOT NULL, digest bytea NOT NULL,
                execution_id text NOT NULL, owner text NOT NULL,
                lease_expires timestamptz NOT NULL, PRIMARY KEY (session_key, key))"""
        )
        for row in _OLD_ROWS:
            conn.execute(old_insert, _old_row(*row))
    old = Backend("postgres", postgres_server.dsn, ns)
    stores = [PostgresToolUseStore(postgres_server.dsn, namespace=ns) for _ in range(3)]
    try:  # opened by several stores at once: the column is added once
        loaded = await asyncio.gather(*(store.load("s") for store in stores))
    finally:
        for store in stores:
            await store.close()
    assert [[c.execution_id for c in calls] for calls in loaded] == [_OLD_ORDER] * 3
    async with old.open() as new_store:  # a replica whose clock is behind
        await new_store.record_tool_use(use("new", 1))
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        conn.execute(old_insert, _old_row("old-40", "T", 40))  # a fastgate of the old schema
        versions = conn.execute(f"SELECT version FROM {quoted}.schema_version").fetchall()
        writers = conn.execute(
            "SELECT count(*) FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = 'tool_use' AND column_name = 'writer'",
            (ns,),
        ).fetchone()
    assert versions == [(PG_SCHEMA_VERSION,)] and writers == (1,)
    calls = await recovered(old)
    assert [c.execution_id for c in calls] == [
        "old-10",
        "old-20",
        "old-30",
        "new",
        "old-40",
        "other-5",
    ]
    assert [c.seq for c in calls if c.execution_id.startswith("old")] == [10, 20, 30, 40]
    assert_positions_increase(calls)
