"""SqliteToolUseStore: records, order, encoding, group commit, closing, and what it refuses."""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from fastgate import ExecutionContext, ToolExecutor, ToolRegistry
from fastgate.durable.sqlite import APPLICATION_ID, SCHEMA_VERSION, SqliteToolUseStore, StoreError
from fastgate.durable.store import ToolUseRecord, ToolUseStore
from fastgate.model.results import DurableResult, ErrorCode, ResultMeta, ToolError, ToolResult
from tests.pipeline_kit import tool


def use(
    execution_id: str,
    seq: int = 0,
    *,
    session: str | None = "s1",
    turn: str | None = "turn-1",
    epoch: int = 0,
    args: Any = None,
    read_only: bool = False,
) -> ToolUseRecord:
    args = {"n": seq} if args is None else args
    return ToolUseRecord(
        execution_id, f"call-{execution_id}", session, turn, epoch, seq, "t", args, read_only
    )


def done(execution_id: str, content: Any = "ok", *, value: Any = None) -> ToolResult:
    meta = ResultMeta(execution_id, f"call-{execution_id}", "t", "s1", 1.0, 2.0, 1000.0)
    return ToolResult(True, content, None, meta, value)


def file_bytes(path: Path) -> bytes:
    return path.read_bytes()


def overwrite(path: Path, offset: int, data: bytes) -> None:
    """Write ``data`` at ``offset`` (creating the file if needed), as a disk fault would."""
    with open(path, "ab"):
        pass
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(data)


def fingerprint(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "calls.db"


async def test_is_a_tool_use_store(db: Path) -> None:
    async with await SqliteToolUseStore.open(db) as store:
        assert isinstance(store, ToolUseStore)


async def test_completed_and_interrupted_calls_come_back(db: Path) -> None:
    async with SqliteToolUseStore(db) as store:
        await store.record_tool_use(use("a", 0))
        await store.record_result("a", done("a", "first").durable())
        await store.record_tool_use(use("b", 1))
        calls = await store.load("s1")
    assert [(c.execution_id, c.status) for c in calls] == [("a", "completed"), ("b", "interrupted")]
    first, second = calls
    assert first.result is not None and first.result.content == "first"
    assert first.call_id == "call-a" and first.tool_name == "t" and first.args == {"n": 0}
    assert second.result is None


async def test_rows_survive_reopening(db: Path) -> None:
    async with SqliteToolUseStore(db) as store:
        await store.record_tool_use(use("a"))
        await store.record_result("a", done("a").durable())
    async with SqliteToolUseStore(db) as store:
        calls = await store.load("s1")
    assert [(c.execution_id, c.status) for c in calls] == [("a", "completed")]


async def test_order_is_turn_then_epoch_then_position(db: Path) -> None:
    writes = [
        use("t10-e0-s1", 1, turn="turn-10"),  # turn-10 is written first: it sorts first
        use("t10-e1-s0", 0, turn="turn-10", epoch=1),
        use("t10-e0-s0", 0, turn="turn-10"),
        use("t9-e0-s0", 0, turn="turn-9"),
        use("t10-e0-s2", 2, turn="turn-10"),
    ]
    async with SqliteToolUseStore(db) as store:
        for record in writes:
            await store.record_tool_use(record)
        calls = await store.load("s1")
    assert [c.execution_id for c in calls] == [
        "t10-e0-s0",
        "t10-e0-s1",
        "t10-e0-s2",
        "t10-e1-s0",
        "t9-e0-s0",
    ]


async def test_sessions_are_separate_and_none_is_a_session(db: Path) -> None:
    async with SqliteToolUseStore(db) as store:
        await store.record_tool_use(use("a", session="s1"))
        await store.record_tool_use(use("b", session="s2"))
        await store.record_tool_use(use("c", session=None))
        assert [c.execution_id for c in await store.load("s2")] == ["b"]
        assert [c.execution_id for c in await store.load(None)] == ["c"]
        assert await store.load("nobody") == []


async def test_the_canonical_value_is_never_stored(db: Path) -> None:
    async with SqliteToolUseStore(db) as store:
        await store.record_tool_use(use("a"))
        # Even handed a full ToolResult, the store keeps only its durable part.
        await store.record_result("a", done("a", value="CANONICAL-SECRET"))  # type: ignore[arg-type]
        [call] = await store.load("s1")
    assert isinstance(call.result, DurableResult)
    assert not hasattr(call.result, "value")
    assert b"CANONICAL-SECRET" not in file_bytes(db)


async def test_content_blocks_errors_and_odd_text_round_trip(db: Path) -> None:
    odd = "bytes \udcff\udcfe, a pair \ud83d\ude00 and a lone \ud800 in text"
    blocks = ("text", {"type": "image", "data": b"\x89PNG"}, {"type": "text", "text": odd})
    error = ToolError(ErrorCode.TOOL_ERROR, odd, details={"path": odd, odd: [1, 2.5, None]})
    meta = done("a").meta
    result = DurableResult(False, blocks, error, meta)
    async with SqliteToolUseStore(db) as store:
        await store.record_tool_use(use("a", args={"file": odd, "nested": [{"k": odd}]}))
        await store.record_result("a", result)
        [call] = await store.load("s1")
    assert call.args == {"file": odd, "nested": [{"k": odd}]}
    assert call.result == result
    assert isinstance(call.result.content, tuple)


def deeply_nested(depth: int, leaf: Any) -> list[Any]:
    value: list[Any] = [leaf]
    for _ in range(depth):
        value = [value]
    return value


# Not JSON: an object, shallow or nested past the encoder's depth (which a JSON value may be).
@pytest.mark.parametrize("args", [{"x": object()}, {"deep": deeply_nested(20_000, object())}])
async def test_a_record_that_cannot_be_encoded_writes_nothing(db: Path, args: Any) -> None:
    async with SqliteToolUseStore(db) as store:
        with pytest.raises(StoreError, match="cannot be encoded") as caught:
            await store.record_tool_use(use("bad", args=args))
        assert str(db) in str(caught.value)
        await store.record_tool_use(use("good"))  # the store is still fine
        assert [c.execution_id for c in await store.load("s1")] == ["good"]


async def test_duplicates_and_orphan_results_fail_alone(db: Path) -> None:
    async with SqliteToolUseStore(db) as store:
        await store.record_tool_use(use("a"))
        outcomes = await asyncio.gather(
            store.record_tool_use(use("a")),  # duplicate
            store.record_tool_use(use("b", 1)),
            store.record_result("nobody", done("nobody").durable()),  # no tool-use
            store.record_result("b", done("b").durable()),
            return_exceptions=True,
        )
        assert isinstance(outcomes[0], StoreError) and "already exists" in str(outcomes[0])
        assert isinstance(outcomes[2], StoreError) and "no tool-use record" in str(outcomes[2])
        assert outcomes[1] is None and outcomes[3] is None
        with pytest.raises(StoreError, match="already exists"):
            await store.record_result("b", done("b").durable())
        calls = await store.load("s1")
    assert [(c.execution_id, c.status) for c in calls] == [("a", "interrupted"), ("b", "completed")]


async def test_group_commit_releases_each_caller_only_once_committed(db: Path) -> None:
    async with SqliteToolUseStore(db) as store:
        reader = sqlite3.connect(db)

        async def record_then_look(i: int) -> None:
            await store.record_tool_use(use(f"e{i}", i, session=f"s{i % 8}"))
            found = reader.execute("SELECT 1 FROM tool_use WHERE execution_id = ?", (f"e{i}",))
            assert found.fetchone() is not None, f"e{i} acknowledged before its commit"

        try:
            await asyncio.gather(*(record_then_look(i) for i in range(200)))
        finally:
            reader.close()
        stats = store.statistics()
    assert stats.records == 200
    assert stats.transactions < stats.records  # concurrent records shared transactions
    assert stats.largest_batch > 1


async def test_requests_made_in_one_loop_iteration_share_one_transaction(db: Path) -> None:
    """A busy server lets go of the interpreter's lock between its requests (a system call, a
    lock): the writer must not take the first request alone and wake again for each next one
    (thread switches are a large part of what the journal costs a loaded server)."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1.0)  # no forced switch: only the releases below hand the lock over
    try:
        async with SqliteToolUseStore(db) as store:
            await store.record_tool_use(use("first"))  # the writer has started and idles
            before = store.statistics().transactions

            async def release_then_record(i: int) -> None:
                time.sleep(0.002)  # noqa: ASYNC251 -- the point: it lets go of the GIL, as work does
                await store.record_tool_use(use(f"e{i}", i))

            await asyncio.gather(*(release_then_record(i) for i in range(20)))
            stats = store.statistics()
    finally:
        sys.setswitchinterval(interval)
    assert stats.records == 21
    assert stats.transactions == before + 1


async def test_without_group_commit_each_record_is_a_transaction(db: Path) -> None:
    async with SqliteToolUseStore(db, group_commit=False) as store:
        await asyncio.gather(*(store.record_tool_use(use(f"e{i}", i)) for i in range(20)))
        stats = store.statistics()
    assert stats.transactions == stats.records == 20


async def test_close_flushes_queued_records_then_refuses(db: Path) -> None:
    store = SqliteToolUseStore(db)
    pending = [asyncio.ensure_future(store.record_tool_use(use(f"e{i}", i))) for i in range(50)]
    await asyncio.sleep(0)  # the records are queued
    await store.close()
    await asyncio.gather(*pending)  # all committed, none refused
    assert store.closed
    await store.close()  # idempotent
    with pytest.raises(StoreError, match="closed"):
        await store.record_tool_use(use("late"))
    with pytest.raises(StoreError, match="closed"):
        await store.load("s1")
    async with SqliteToolUseStore(db) as again:
        assert len(await again.load("s1")) == 50


async def test_a_locked_database_is_a_clear_error_and_writes_nothing(db: Path) -> None:
    async with SqliteToolUseStore(db, busy_timeout=0.05) as store:
        other = sqlite3.connect(db, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            with pytest.raises(StoreError, match="locked") as caught:
                await store.record_tool_use(use("a"))
            assert str(db) in str(caught.value)
            other.execute("ROLLBACK")
            await store.record_tool_use(use("b"))
        finally:
            other.close()
        assert [c.execution_id for c in await store.load("s1")] == ["b"]


async def test_a_full_database_rolls_back_the_whole_transaction(db: Path) -> None:
    async with SqliteToolUseStore(db) as store:
        await store.record_tool_use(use("before"))
        # SQLite's own "database or disk is full" (SQLITE_FULL), by capping the page count; the
        # writer is idle, so touching its connection here does not race it.
        pages = store._writer.conn.execute("PRAGMA page_count").fetchone()[0]
        store._writer.conn.execute(f"PRAGMA max_page_count = {pages}")
        big = {"pad": "z" * 20_000}
        outcomes = await asyncio.gather(
            *(store.record_tool_use(use(f"e{i}", i + 1, args=big)) for i in range(5)),
            return_exceptions=True,
        )
        assert all(isinstance(o, StoreError) for o in outcomes)
        assert "full" in str(outcomes[0]) and str(db) in str(outcomes[0])
        assert [c.execution_id for c in await store.load("s1")] == ["before"]


def test_a_missing_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="cannot be opened") as caught:
        SqliteToolUseStore(tmp_path / "missing" / "calls.db")
    assert "missing" in str(caught.value)


def test_a_directory_is_not_a_store(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="directory"):
        SqliteToolUseStore(tmp_path)


def test_a_parent_that_is_a_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(StoreError):
        SqliteToolUseStore(tmp_path / "file" / "calls.db")


@pytest.mark.parametrize("path", ["", ":memory:", "file:x?mode=memory"])
def test_memory_databases_are_refused(path: str) -> None:
    with pytest.raises(ValueError, match="file path"):
        SqliteToolUseStore(path)


def test_a_file_that_is_not_sqlite_is_refused_and_left_untouched(db: Path) -> None:
    db.write_bytes(b"this is not a database, just text " * 200)
    before = fingerprint(db)
    with pytest.raises(StoreError, match="not a SQLite database") as caught:
        SqliteToolUseStore(db)
    assert str(db) in str(caught.value)
    assert fingerprint(db) == before


async def test_a_corrupt_header_is_refused_and_left_untouched(db: Path) -> None:
    await SqliteToolUseStore(db).close()
    overwrite(db, 16, b"\xff" * 8)  # page size and format bytes of the header
    before = fingerprint(db)
    with pytest.raises(StoreError):
        SqliteToolUseStore(db)
    assert fingerprint(db) == before


def _make_store_file(db: Path, app_id: int, version: int) -> None:
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE tool_use (x)")
    conn.execute("CREATE TABLE tool_result (x)")
    conn.execute(f"PRAGMA application_id = {app_id}")
    conn.execute(f"PRAGMA user_version = {version}")
    conn.commit()
    conn.close()


def test_a_newer_schema_is_refused_and_left_untouched(db: Path) -> None:
    _make_store_file(db, APPLICATION_ID, SCHEMA_VERSION + 1)
    before = fingerprint(db)
    with pytest.raises(StoreError, match="newer fastgate") as caught:
        SqliteToolUseStore(db)
    assert f"schema version {SCHEMA_VERSION + 1}" in str(caught.value)
    assert fingerprint(db) == before
    assert not db.with_name(db.name + "-wal").exists()


def test_another_applications_database_is_refused_and_left_untouched(db: Path) -> None:
    _make_store_file(db, 0, 0)
    before = fingerprint(db)
    with pytest.raises(StoreError, match="another application"):
        SqliteToolUseStore(db)
    assert fingerprint(db) == before


async def test_an_empty_file_becomes_a_store(db: Path) -> None:
    overwrite(db, 0, b"")
    await SqliteToolUseStore(db).close()
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()


async def test_open_does_not_block_the_loop_and_reports_errors(tmp_path: Path) -> None:
    with pytest.raises(StoreError):
        await SqliteToolUseStore.open(tmp_path / "missing" / "x.db")


async def test_wrong_types_are_refused(db: Path) -> None:
    async with SqliteToolUseStore(db) as store:
        with pytest.raises(TypeError):
            await store.record_tool_use({"execution_id": "a"})  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            await store.record_result("a", "ok")  # type: ignore[arg-type]


async def test_the_executor_records_before_and_after_the_call(db: Path) -> None:
    registry = ToolRegistry()
    registry.register(tool("echo", lambda args, ctx: args["text"]))
    async with SqliteToolUseStore(db) as store:
        executor = ToolExecutor(registry, store=store, require_persistence=True)
        ctx = ExecutionContext(session_id="s1", turn_id="turn-1")
        result = await executor.execute("echo", {"text": "hi"}, ctx, call_id="c1")
        assert result.ok
        [call] = await store.load("s1")
    assert call.status == "completed" and call.call_id == "c1" and call.args == {"text": "hi"}
    assert call.result is not None and call.result.content == "hi"


async def test_a_closed_store_fails_the_call_before_its_side_effect(db: Path) -> None:
    effects: list[str] = []
    registry = ToolRegistry()
    registry.register(tool("effect", lambda args, ctx: effects.append(args["text"])))
    store = SqliteToolUseStore(db)
    await store.close()
    executor = ToolExecutor(registry, store=store, require_persistence=True)
    result = await executor.execute("effect", {"text": "x"}, ExecutionContext(session_id="s1"))
    assert result.error is not None and result.error.code == ErrorCode.PERSISTENCE_FAILED
    assert effects == []
