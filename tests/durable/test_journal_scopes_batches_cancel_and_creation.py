"""Keyed calls and records whose text or numbers a store cannot hold, claims cut short by a
cancelled caller, a new SQLite file opened by several stores at once, and the stores'
construction and schema checks, on SQLite and on PostgreSQL.

What matters: a record that can never be written is refused as bad input, the same way on both
stores, and fails alone (never the records that share its transaction, never the file's write
lock); a caller cancelled before its call started leaves its key free.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
from pathlib import Path
from typing import Any

import pytest

from fastgate import ExecutionContext, PermissionConfig, ToolKind, ToolResult, schema
from fastgate.durable.postgres import PostgresToolUseStore
from fastgate.durable.sqlite import SqliteToolUseStore
from fastgate.durable.store import StoreError, ToolUseRecord, args_digest
from fastgate.model.results import DurableResult, ErrorCode, ResultMeta
from tests.durable.conftest import Backend, need_postgres, new_namespace
from tests.pipeline_kit import assert_idle, executor, tool

ANY = schema.Object({}, additional=True)
ALLOW = PermissionConfig(allow=("t", "w"))


class Runs:
    """A tool body that counts its runs."""

    def __init__(self) -> None:
        self.count = 0

    async def __call__(self, args: Any, ctx: Any) -> str:
        self.count += 1
        return f"run {self.count}"


def code_of(result: ToolResult) -> ErrorCode | None:
    return result.error.code if result.error is not None else None


def code_of_stored(result: DurableResult | None) -> ErrorCode | None:
    assert result is not None
    return result.error.code if result.error is not None else None


def assert_unrecordable(result: ToolResult, what: object) -> None:
    assert code_of(result) is ErrorCode.INVALID_ARGS, (what, result)
    assert result.error is not None
    assert result.error.details["reason"] == "unrecordable", (what, result.error)
    assert result.error.retryable is False


def use(
    execution_id: str,
    *,
    session: str | None = "s",
    epoch: int = 0,
    seq: int = 1,
    read_only: bool = False,
) -> ToolUseRecord:
    return ToolUseRecord(
        execution_id, f"call-{execution_id}", session, "t1", epoch, seq, "t", {}, read_only
    )


def done(execution_id: str) -> DurableResult:
    meta = ResultMeta(execution_id, f"call-{execution_id}", "t", "s", 1.0, 2.0, 1000.0)
    return DurableResult(True, "done", None, meta)


# -- bad scopes and session ids: refused, the same way on both stores ---------------------------

NOT_TEXT: list[Any] = [7, b"tenant", ["tenant"]]
ODD_TEXT = ["ten\x00ant", "tenant-\udcff", "\ud800", "", "é" * 512 + "x", secrets.token_hex(1500)]


async def test_a_scope_no_store_can_key_is_bad_input_on_both_stores(backend: Backend) -> None:
    body = Runs()
    async with backend.open() as store:
        ex = executor(tool("t", body, ANY, kind=ToolKind.WRITE), store=store, permissions=ALLOW)
        for scope in [*NOT_TEXT, *ODD_TEXT]:
            try:
                ctx = ExecutionContext(session_id="s", idempotency_key="k", idempotency_scope=scope)
            except TypeError:  # the compiled build checks the declared type as the context is made
                assert not isinstance(scope, str)
                continue
            for _ in range(2):  # refused every time: nothing was claimed
                assert_unrecordable(await ex.execute("t", {}, ctx), scope)
        assert body.count == 0
        assert await store.load("s") == []
        # The most a scope may be: 1024 bytes of UTF-8.
        fine = ExecutionContext(session_id="s", idempotency_key="k", idempotency_scope="é" * 512)
        assert (await ex.execute("t", {}, fine)).ok
        assert body.count == 1
        assert_idle(ex)


async def test_a_session_id_no_store_can_hold_is_bad_input_keyed_or_not(backend: Backend) -> None:
    body = Runs()
    async with backend.open() as store:
        ex = executor(tool("t", body, ANY, kind=ToolKind.WRITE), store=store, permissions=ALLOW)
        for session in ["s\x00", "s\udcff", "é" * 512 + "x", secrets.token_hex(1500)]:
            keyed = ExecutionContext(session_id=session, idempotency_key="k")
            assert_unrecordable(await ex.execute("t", {}, keyed), session)
            plain = ExecutionContext(session_id=session)
            assert_unrecordable(await ex.execute("t", {}, plain), session)
        assert body.count == 0
        longest = "é" * 512  # 1024 bytes: the most
        assert (await ex.execute("t", {}, ExecutionContext(longest, idempotency_key="k"))).ok
        assert (await ex.execute("t", {}, ExecutionContext(longest))).ok
        assert [c.status for c in await store.load(longest)] == ["completed", "completed"]
        assert_idle(ex)


async def test_the_stores_refuse_a_bad_claim_before_writing_anything(backend: Backend) -> None:
    async with backend.open() as store:
        digest = args_digest(("t", {}))
        for scope in [*NOT_TEXT, *ODD_TEXT]:
            with pytest.raises(StoreError, match="idempotency_scope"):
                await store.claim(use("e1"), "k", digest, take_over=False, scope=scope)
        for key in ["", "k\x00", "k\udcff", "k" * 1025, 7]:
            with pytest.raises(StoreError, match="idempotency_key"):
                await store.claim(use("e1"), key, digest, take_over=False)  # type: ignore[arg-type]
        with pytest.raises(StoreError, match="session id"):
            await store.record_tool_use(use("e2", session="x" * 1025))
        assert (await store.claim(use("e1"), "k", digest, take_over=False)).status == "claimed"
        assert [c.execution_id for c in await store.load("s")] == ["e1"]


# -- a record that fails on its own fails alone ------------------------------------------------


async def test_a_record_that_cannot_be_written_fails_alone_in_a_group(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Numbers past a 64-bit column, and (past the stores' own checks) text one store or the
    other cannot hold, in the same group transaction as records that can be written."""
    if backend.kind == "sqlite":
        monkeypatch.setattr("fastgate.durable.sqlite.check_record", lambda *a: None, raising=False)
        monkeypatch.setattr("fastgate.durable.sqlite.check_claim", lambda *a: None, raising=False)
        odd_session = "s\udcff"  # UTF-8 cannot encode it
    else:
        monkeypatch.setattr(
            "fastgate.durable.postgres.check_record", lambda *a: None, raising=False
        )
        monkeypatch.setattr("fastgate.durable.postgres.check_claim", lambda *a: None, raising=False)
        odd_session = secrets.token_hex(1500)  # past PostgreSQL's index entry size
    bad = [
        use("big-seq", seq=2**64),
        use("small-epoch", epoch=-(2**70)),
        use("odd-session", session=odd_session),
    ]
    async with backend.open() as store:
        for round_ in range(2):
            earlier = [use(f"r{round_}-{i}") for i in range(4)]
            await asyncio.gather(*(store.record_tool_use(record) for record in earlier))
            good = [use(f"g{round_}-{i}") for i in range(6)]
            bad_now = [msgspec_replace(r, f"{r.execution_id}-{round_}") for r in bad]
            outcomes = await asyncio.gather(
                *(store.record_tool_use(record) for record in good[:3]),
                *(store.record_tool_use(record) for record in bad_now),
                *(store.record_result(r.execution_id, done(r.execution_id)) for r in earlier),
                *(store.record_tool_use(record) for record in good[3:]),
                return_exceptions=True,
            )
            failed = [o for o in outcomes if isinstance(o, BaseException)]
            assert len(failed) == len(bad_now), outcomes
            assert all(isinstance(o, StoreError) for o in failed), failed
            assert all(o is None for o in outcomes[:3] + outcomes[6:]), outcomes
        # The tool-use records, good and bad, did share a transaction (SQLite commits the
        # results, which need no sync, apart from them: on the loop's thread, together).
        assert store.statistics().largest_batch >= len(good) + len(bad)
        calls = {c.execution_id: c.status for c in await store.load("s")}
    expected = {f"r{n}-{i}": "completed" for n in range(2) for i in range(4)}
    expected |= {f"g{n}-{i}": "interrupted" for n in range(2) for i in range(6)}
    assert calls == expected


def msgspec_replace(record: ToolUseRecord, execution_id: str) -> ToolUseRecord:
    return ToolUseRecord(
        execution_id,
        record.call_id,
        record.session_id,
        record.turn_id,
        record.epoch,
        record.seq,
        record.tool_name,
        record.args,
        record.read_only,
    )


async def test_a_claim_that_cannot_be_written_frees_its_key_and_the_others_stand(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim whose tool-use record fails after its journal entry was written takes nothing:
    the key is free for the next claim, and the claims beside it in its group are kept."""
    module = "sqlite" if backend.kind == "sqlite" else "postgres"
    monkeypatch.setattr(f"fastgate.durable.{module}.check_claim", lambda *a: None, raising=False)
    digest = args_digest(("t", {}))
    async with backend.open() as store:
        for n, record in enumerate([use("x1", seq=2**64), use("x2", epoch=2**65)]):
            outcomes = await asyncio.gather(
                store.claim(use(f"a{n}"), f"a{n}", digest, take_over=False),
                store.claim(record, f"k{n}", digest, take_over=False),
                store.claim(use(f"b{n}"), f"b{n}", digest, take_over=False),
                return_exceptions=True,
            )
            assert isinstance(outcomes[1], StoreError), outcomes
            assert [getattr(o, "status", o) for o in (outcomes[0], outcomes[2])] == [
                "claimed",
                "claimed",
            ]
            again = await store.claim(use(f"c{n}"), f"k{n}", digest, take_over=False)
            assert (again.status, again.execution_id) == ("claimed", f"c{n}")
        if backend.kind == "sqlite":  # text SQLite cannot bind, in the scope of a claim
            entry = store.claim(use("x3"), "k", digest, take_over=False, scope="t\udcff")
            with pytest.raises(StoreError):
                await entry
            again = await store.claim(use("c3"), "k", digest, take_over=False, scope="t")
            assert again.status == "claimed"


async def test_an_unwritable_claim_made_alone_never_keeps_the_file_locked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read's claim made while nothing else is under way is committed on the caller's own
    connection: one that fails there must give the write lock back at once, or every other
    connection to the file (any process) waits for it until the store is closed."""
    monkeypatch.setattr("fastgate.durable.sqlite.check_claim", lambda *a: None, raising=False)
    path = tmp_path / "journal.db"
    digest = args_digest(("t", {}))
    async with SqliteToolUseStore(path) as store:
        other = SqliteToolUseStore(path, busy_timeout=0.5)
        try:
            spellings: list[tuple[ToolUseRecord, str | None]] = [
                (use("e1", seq=2**64, read_only=True), None),
                (use("e2", epoch=-(2**64), read_only=True), None),
                (use("e3", read_only=True), "t\udcff"),
                (use("e4", read_only=True), "\udc80"),
            ]
            for n, (record, scope) in enumerate(spellings):
                with pytest.raises(StoreError, match=r"cannot be written|not valid"):
                    await store.claim(record, f"k{n}", digest, take_over=False, scope=scope)
                await other.record_tool_use(use(f"other-{n}"))  # the lock is free
                entry = await store.claim(
                    use(f"fine-{n}", read_only=True), f"k{n}", digest, take_over=False
                )
                assert entry.status == "claimed"
            loaded = [c.execution_id for c in await other.load("s")]
            assert loaded == [p for n in range(4) for p in (f"other-{n}", f"fine-{n}")]
        finally:
            await other.close()


async def test_a_keyed_read_with_an_odd_scope_leaves_the_store_writable(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    body = Runs()
    async with SqliteToolUseStore(path) as store:
        other = SqliteToolUseStore(path, busy_timeout=0.5)
        try:
            ex = executor(tool("read", body, ANY), store=store)  # READ_ONLY: its claim is inline
            for scope in ["t\udcff", "\ud800x", "t\x00"]:
                ctx = ExecutionContext("s", idempotency_key="k", idempotency_scope=scope)
                assert_unrecordable(await ex.execute("read", {}, ctx), scope)
                await other.record_tool_use(use(f"o-{len(scope)}-{ord(scope[-1])}"))
            assert (await ex.execute("read", {}, ExecutionContext("s", idempotency_key="k"))).ok
            assert body.count == 1
            assert_idle(ex)
        finally:
            await other.close()


# -- a caller cancelled while its claim is committed ---------------------------------------------


@pytest.mark.one_loop
async def test_a_caller_cancelled_during_its_claim_leaves_the_key_free(backend: Backend) -> None:
    """Whatever the moment the caller's deadline falls, a call whose body never started leaves
    its key free: the next call with the key runs (a key left claimed with no result would
    answer ambiguous_outcome forever)."""
    body = Runs()
    deadlines = [0.0005, 0.001, 0.0015, 0.002, 0.003, 0.005]
    freed = 0
    async with backend.open(lease_ttl=1.0) as store:
        ex = executor(tool("w", body, ANY, kind=ToolKind.WRITE), store=store, permissions=ALLOW)
        await store.load("warm")
        for repeat in range(4):
            for deadline in deadlines:
                session = f"s-{repeat}-{deadline}"
                ctx = ExecutionContext(session, idempotency_key="k")
                before = body.count
                try:
                    await asyncio.wait_for(ex.execute("w", {}, ctx), deadline)
                except TimeoutError:
                    pass
                ran = body.count > before
                # A repeat waits for the first call's result (woken as soon as it is written).
                again = await ex.execute("w", {}, ctx)
                calls = await store.load(session)
                assert all(c.status == "completed" for c in calls), calls  # none left open
                codes = [code_of_stored(c.result) for c in calls]
                if again.meta.replayed:  # the first call completed
                    assert ran and codes == [None], (session, calls)
                elif again.ok:  # the key was free: the first call claimed it and gave it back
                    assert codes in ([None], [ErrorCode.ABORTED_BEFORE_DISPATCH, None]), calls
                    assert not ran
                    freed += len(codes) - 1
                else:  # cancelled once its body was launched: its outcome is unknown
                    assert codes == [ErrorCode.ABORTED], (session, calls, again)
                    assert again.error is not None
                    assert again.error.details["reason"] == "ambiguous_outcome"
        assert freed > 0  # the claim was cut short at least once
        assert_idle(ex)


# -- one new SQLite file opened by several stores at once ---------------------------------------


def open_from_threads(path: Path, count: int) -> list[SqliteToolUseStore | BaseException]:
    """``count`` threads each open a store on ``path``, released together by a barrier."""
    start = threading.Barrier(count)
    opened: list[SqliteToolUseStore | BaseException] = []

    def open_store() -> None:
        start.wait()
        try:
            opened.append(SqliteToolUseStore(path))
        except BaseException as exc:
            opened.append(exc)

    threads = [threading.Thread(target=open_store) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return opened


async def test_several_stores_opening_one_new_file_at_once_all_open(tmp_path: Path) -> None:
    count = 6
    for round_ in range(12):
        opened = await asyncio.to_thread(open_from_threads, tmp_path / f"j-{round_}.db", count)
        stores = [s for s in opened if isinstance(s, SqliteToolUseStore)]
        try:
            assert len(stores) == count, [o for o in opened if isinstance(o, BaseException)]
            for n, store in enumerate(stores):
                await store.record_tool_use(use(f"e{n}"))
            assert len(await stores[0].load("s")) == count
        finally:
            for store in stores:
                await store.close()


# -- construction and schema ---------------------------------------------------------------------


@pytest.mark.parametrize("lease_ttl", [1e13, 86_400.5, float("inf"), float("nan"), 0, -1.0, True])
def test_a_lease_no_clock_can_hold_is_refused_when_the_store_is_made(
    tmp_path: Path, lease_ttl: Any
) -> None:
    with pytest.raises(ValueError, match="lease_ttl"):
        SqliteToolUseStore(tmp_path / "j.db", lease_ttl=lease_ttl)
    need_postgres()
    with pytest.raises(ValueError, match="lease_ttl"):
        PostgresToolUseStore("host=/nonexistent", lease_ttl=lease_ttl)
    assert not (tmp_path / "j.db").exists()  # refused before the file was made


async def test_the_longest_lease_works_for_a_keyed_call(backend: Backend) -> None:
    body = Runs()
    async with backend.open(lease_ttl=86_400) as store:
        ex = executor(tool("t", body, ANY, kind=ToolKind.WRITE), store=store, permissions=ALLOW)
        first = await ex.execute("t", {}, ExecutionContext("s", idempotency_key="k"))
        again = await ex.execute("t", {}, ExecutionContext("s", idempotency_key="k"))
        assert first.ok and again.ok and again.meta.replayed, (first, again)
        assert body.count == 1
        assert_idle(ex)


@pytest.mark.one_loop
async def test_a_version_table_of_several_rows_is_read_by_its_newest(
    postgres_server: Any,
) -> None:
    import psycopg

    namespace = new_namespace()
    async with PostgresToolUseStore(postgres_server.dsn, namespace=namespace) as store:
        await store.load("s")  # created
    async with await psycopg.AsyncConnection.connect(postgres_server.dsn) as conn:
        await conn.execute(f'INSERT INTO "{namespace}".schema_version VALUES (1)')
    async with PostgresToolUseStore(postgres_server.dsn, namespace=namespace) as store:
        assert await store.load("s") == []  # two rows of this version: fine
    async with await psycopg.AsyncConnection.connect(postgres_server.dsn) as conn:
        await conn.execute(f'INSERT INTO "{namespace}".schema_version VALUES (7)')
    async with PostgresToolUseStore(postgres_server.dsn, namespace=namespace) as store:
        with pytest.raises(StoreError, match="newer fastgate"):
            await store.load("s")
