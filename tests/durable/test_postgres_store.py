"""PostgresToolUseStore as a ToolUseStore: the records, their order, group commit, what it refuses,
its schema per namespace (created and migrated on first use), recovery equal to SQLite's, and
the name importable without the extra. SQLite's journal migration is here too."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from fastgate.cli.bench.postgres_server import PostgresServer
from fastgate.durable import JournalStore, ToolResultProjector
from fastgate.durable.postgres import SCHEMA_VERSION, PostgresToolUseStore
from fastgate.durable.sqlite import SqliteToolUseStore
from fastgate.durable.store import StoreError, ToolUseRecord, ToolUseStore, args_digest
from fastgate.model.results import DurableResult, ErrorCode, ResultMeta, ToolError
from tests.durable.conftest import new_namespace


def use(execution_id: str, seq: int = 0, *, session: str | None = "s1", **fields: Any) -> Any:
    turn = fields.pop("turn", "turn-1")
    epoch = fields.pop("epoch", 0)
    args = fields.pop("args", {"n": seq})
    return ToolUseRecord(execution_id, f"call-{execution_id}", session, turn, epoch, seq, "t", args)


def done(execution_id: str, content: Any = "ok", error: ToolError | None = None) -> DurableResult:
    meta = ResultMeta(execution_id, f"call-{execution_id}", "t", "s1", 1.0, 2.0, 1000.0)
    return DurableResult(error is None, content, error, meta)


@pytest.fixture
def pg(postgres_server: PostgresServer) -> PostgresToolUseStore:
    return PostgresToolUseStore(postgres_server.dsn, namespace=new_namespace())


async def test_is_a_journal_store(pg: PostgresToolUseStore) -> None:
    async with pg:
        assert isinstance(pg, ToolUseStore) and isinstance(pg, JournalStore)
        assert pg.lease_ttl == 10.0


async def test_records_come_back_in_model_order(pg: PostgresToolUseStore) -> None:
    async with pg:
        await pg.record_tool_use(use("a", 0))
        await pg.record_result("a", done("a", ("x", {"type": "text", "text": "y"})))
        await pg.record_tool_use(use("b", 1, args={"deep": [[{"z": None}]], "s": "é\udcff"}))
        await pg.record_tool_use(use("c", 2, session="other"))
        calls = await pg.load("s1")
        others = await pg.load("other")
        nothing = await pg.load(None)
    assert [(c.execution_id, c.status) for c in calls] == [("a", "completed"), ("b", "interrupted")]
    assert calls[0].result is not None
    assert calls[0].result.content == ("x", {"type": "text", "text": "y"})
    assert calls[1].args == {"deep": [[{"z": None}]], "s": "é\udcff"}  # lone surrogate kept
    assert [c.execution_id for c in others] == ["c"] and nothing == []


async def test_a_record_fails_alone_and_the_others_commit(pg: PostgresToolUseStore) -> None:
    async with pg:
        await pg.record_tool_use(use("a"))
        outcomes = await asyncio.gather(
            pg.record_tool_use(use("a")),  # a duplicate
            pg.record_tool_use(use("b", 1)),
            pg.record_result("missing", done("missing")),  # no tool-use
            pg.record_result("b", done("b")),
            return_exceptions=True,
        )
        with pytest.raises(StoreError, match="already exists"):
            await pg.record_result("b", done("b"))
        calls = await pg.load("s1")
    assert isinstance(outcomes[0], StoreError) and "already exists" in str(outcomes[0])
    assert outcomes[1] is None and outcomes[3] is None
    assert isinstance(outcomes[2], StoreError) and "no tool-use record" in str(outcomes[2])
    assert [(c.execution_id, c.status) for c in calls] == [("a", "interrupted"), ("b", "completed")]


async def test_group_commit_batches_concurrent_records(postgres_server: PostgresServer) -> None:
    ns = new_namespace()
    async with PostgresToolUseStore(postgres_server.dsn, namespace=ns) as grouped:
        await asyncio.gather(*(grouped.record_tool_use(use(f"g{i}", i)) for i in range(64)))
        stats = grouped.statistics()
    async with PostgresToolUseStore(
        postgres_server.dsn, namespace=ns, group_commit=False
    ) as single:
        await asyncio.gather(*(single.record_tool_use(use(f"o{i}", i)) for i in range(8)))
        one_by_one = single.statistics()
        assert len(await single.load("s1")) == 72
    assert stats.records == 64 and stats.transactions < 64 and stats.largest_batch > 1
    assert one_by_one.transactions == 8 and one_by_one.largest_batch == 1


async def test_text_postgres_cannot_hold_is_refused_before_queueing(
    pg: PostgresToolUseStore,
) -> None:
    async with pg:
        for record in (use("a\x00b"), use("c", session="s\x00"), use("d", turn="\ud800")):
            with pytest.raises(StoreError, match="nothing was written"):
                await pg.record_tool_use(record)
        with pytest.raises(StoreError, match="cannot be encoded"):
            await pg.record_tool_use(use("e", args={"x": object()}))
        await pg.record_tool_use(use("fine"))
        assert [c.execution_id for c in await pg.load("s1")] == ["fine"]


async def test_namespaces_are_journals_of_their_own(postgres_server: PostgresServer) -> None:
    first, second = new_namespace(), new_namespace()
    digest = args_digest({})
    async with (
        PostgresToolUseStore(postgres_server.dsn, namespace=first) as a,
        PostgresToolUseStore(postgres_server.dsn, namespace=second) as b,
    ):
        claimed = await a.claim(use("a"), "k", digest, take_over=False)
        also = await b.claim(use("b"), "k", digest, take_over=False)
        await a.record_tool_use(use("x"))
        assert [c.execution_id for c in await b.load("s1")] == ["b"]
    assert claimed.status == also.status == "claimed"


async def test_the_schema_is_created_once_by_racing_stores(postgres_server: PostgresServer) -> None:
    ns = new_namespace()
    stores = [PostgresToolUseStore(postgres_server.dsn, namespace=ns) for _ in range(4)]
    try:
        await asyncio.gather(*(s.record_tool_use(use(f"e{i}", i)) for i, s in enumerate(stores)))
        assert len(await stores[0].load("s1")) == 4
    finally:
        for store in stores:
            await store.close()
    import psycopg

    with psycopg.connect(postgres_server.dsn) as conn:
        versions = conn.execute(f'SELECT version FROM "{ns}".schema_version').fetchall()
    assert versions == [(SCHEMA_VERSION,)]


async def test_a_newer_or_foreign_schema_is_refused_and_left_untouched(
    postgres_server: PostgresServer,
) -> None:
    import psycopg

    newer, foreign = new_namespace(), new_namespace()
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{newer}"')
        conn.execute(f'CREATE TABLE "{newer}".schema_version (version integer NOT NULL)')
        conn.execute(f'INSERT INTO "{newer}".schema_version VALUES ({SCHEMA_VERSION + 1})')
        conn.execute(f'CREATE SCHEMA "{foreign}"')
        conn.execute(f'CREATE TABLE "{foreign}".orders (id integer)')
    for ns, problem in ((newer, "newer fastgate"), (foreign, "another application")):
        async with PostgresToolUseStore(postgres_server.dsn, namespace=ns) as store:
            with pytest.raises(StoreError, match=problem):
                await store.record_tool_use(use("a"))
    with psycopg.connect(postgres_server.dsn) as conn:
        tables = conn.execute(
            "SELECT schemaname, tablename FROM pg_tables WHERE schemaname IN (%s, %s) "
            "ORDER BY 1, 2",
            (newer, foreign),
        ).fetchall()
    assert sorted(tables) == sorted([(newer, "schema_version"), (foreign, "orders")])


def test_bad_options_are_refused() -> None:
    for options in (
        {"namespace": "Has-Caps"},
        {"namespace": "1st"},
        {"namespace": 'x"; DROP'},
        {"min_size": -1},
        {"max_size": 0},
        {"lease_ttl": 0},
        {"lease_ttl": float("nan")},
        {"timeout": 0},
    ):
        with pytest.raises(ValueError):
            PostgresToolUseStore("host=/nowhere", **options)


async def test_an_unreachable_server_is_a_store_error_and_a_closed_store_refuses(
    tmp_path: Path,
) -> None:
    store = PostgresToolUseStore(f"host={tmp_path} dbname=x password=secret", timeout=0.5)
    with pytest.raises(StoreError) as caught:
        await store.record_tool_use(use("a"))
    assert "secret" not in str(caught.value) and str(tmp_path) in str(caught.value)
    await store.close()
    with pytest.raises(StoreError, match="closed"):
        await store.record_tool_use(use("a"))


def test_the_name_needs_no_extra_and_using_it_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['psycopg'] = None; sys.modules['psycopg_pool'] = None\n"
        "import fastgate\n"
        "try:\n"
        "    fastgate.PostgresToolUseStore('host=/nowhere')\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "fastgate[postgres]" in done.stdout and "'postgres' extra" in done.stdout


async def test_recovery_over_postgres_equals_sqlites(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    """The same records, in the same order, recover the same calls from either store."""
    failed = ToolError(ErrorCode.TOOL_ERROR, "boom", details={"type": "RuntimeError"})
    script: list[tuple[str, Any]] = [
        ("use", use("t2-a", 0, turn="turn-10")),
        ("use", use("t1-a", 0, turn="turn-9")),
        ("result", ("t2-a", done("t2-a", "ten"))),
        ("use", use("t1-b", 1, turn="turn-9", args={"big": "x" * 70_000})),
        ("use", use("t1-old", 0, turn="turn-9", epoch=0)),
        ("use", use("t1-new", 0, turn="turn-9", epoch=1)),
        ("result", ("t1-new", done("t1-new", ({"type": "image", "data": "AAAA"},)))),
        ("result", ("t1-b", done("t1-b", "x", failed))),
        ("use", use("none", 0, session=None)),
    ]
    sqlite = SqliteToolUseStore(tmp_path / "same.db")
    postgres = PostgresToolUseStore(postgres_server.dsn, namespace=new_namespace())
    recovered = []
    for store in (sqlite, postgres):
        async with store:
            for kind, item in script:
                if kind == "use":
                    await store.record_tool_use(item)
                else:
                    await store.record_result(*item)
            projector = ToolResultProjector(store)
            recovered.append(
                [await projector.recover("s1"), await projector.recover(None)]  # type: ignore[arg-type]
            )
    assert msgspec.to_builtins(recovered[0]) == msgspec.to_builtins(recovered[1])
    assert recovered[0] == recovered[1]
    order = [c.execution_id for c in recovered[1][0]]
    assert order == ["t2-a", "t1-a", "t1-old", "t1-b", "t1-new"]


async def test_a_sqlite_store_of_schema_1_gains_the_journal(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    conn = sqlite3.connect(db)
    conn.executescript(
        """
        CREATE TABLE tool_use (id INTEGER PRIMARY KEY, execution_id TEXT NOT NULL UNIQUE,
            session_id TEXT, turn_id TEXT, epoch INTEGER NOT NULL, seq INTEGER NOT NULL,
            call_id TEXT, tool_name TEXT NOT NULL, args BLOB NOT NULL, recorded_at REAL NOT NULL);
        CREATE INDEX tool_use_by_session ON tool_use (session_id);
        CREATE TABLE tool_result (use_id INTEGER PRIMARY KEY REFERENCES tool_use (id),
            result BLOB NOT NULL, recorded_at REAL NOT NULL);
        PRAGMA application_id = 1179079763;
        PRAGMA user_version = 1;
        """
    )
    conn.execute(
        "INSERT INTO tool_use VALUES (1, 'old', 's1', 't', 0, 0, 'c', 't', ?, 0.0)",
        (msgspec.msgpack.encode({"n": 1}),),
    )
    conn.commit()
    conn.close()
    async with SqliteToolUseStore(db) as store:
        claimed = await store.claim(use("new", 1), "k", args_digest({}), take_over=False)
        calls = await store.load("s1")
    assert claimed.status == "claimed"
    assert [(c.execution_id, c.args) for c in calls] == [("old", {"n": 1}), ("new", {"n": 1})]
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 2
    finally:
        conn.close()
