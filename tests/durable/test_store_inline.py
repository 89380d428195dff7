"""SqliteToolUseStore: records that need no sync are committed on the caller's thread.

A record that needs no sync (a read's tool-use or claim, a result, a lease renewal) of a call
that is the only one under way is committed on a connection of the caller's own, without a
round trip to the writer thread; under load, such records made in one turn of the loop are
committed there together, in one transaction at the turn's end. Anything else, or that
connection finding the write lock taken, goes to the writer, so the loop never waits for a
lock.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
from pathlib import Path

import pytest

import fastgate.durable.sqlite as sqlite_store
from fastgate.durable.sqlite import SqliteToolUseStore, StoreError
from tests.durable.test_store import done, use


def through_writer(store: SqliteToolUseStore) -> int:
    return store._writer.records


def on_callers_thread(store: SqliteToolUseStore) -> int:
    assert store._inline is not None
    return store._inline.transactions


async def test_a_call_alone_commits_its_unsynced_records_without_the_writer(tmp_path: Path) -> None:
    db = tmp_path / "calls.db"
    async with await SqliteToolUseStore.open(db) as store:
        await store.record_tool_use(use("r1", read_only=True))
        await store.record_result("r1", done("r1").durable())
        entry = await store.claim(use("r2", 1, read_only=True), "k", b"d", take_over=False)
        assert entry.status == "claimed"
        assert await store.renew("s1", "k", "r2")
        await store.record_result("r2", done("r2").durable())
        assert (through_writer(store), on_callers_thread(store)) == (0, 5)
        with sqlite3.connect(db) as other:  # committed: another connection sees every row
            assert other.execute("SELECT count(*) FROM tool_result").fetchone()[0] == 2
        # A record written before a side effect is synced by the writer, as always.
        await store.record_tool_use(use("w1", 2))
        assert (through_writer(store), on_callers_thread(store)) == (1, 5)
        calls = await store.load("s1")
    assert [(c.execution_id, c.status) for c in calls] == [
        ("r1", "completed"),
        ("r2", "completed"),
        ("w1", "interrupted"),
    ]


def records_on_callers_thread(store: SqliteToolUseStore) -> int:
    assert store._inline is not None
    return store._inline.records


def committed_rows(db: Path, table: str) -> int:
    with sqlite3.connect(db) as other:  # another connection sees only what was committed
        count: int = other.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    return count


async def test_with_other_calls_under_way_records_are_committed_together(
    tmp_path: Path,
) -> None:
    db = tmp_path / "calls.db"
    async with await SqliteToolUseStore.open(db) as store:
        await asyncio.gather(
            *(store.record_tool_use(use(f"r{i}", i, read_only=True)) for i in range(8))
        )
        # The first alone (no other call was under way yet), the other seven in one
        # transaction at the end of the turn, both on the caller's thread.
        assert (on_callers_thread(store), records_on_callers_thread(store)) == (2, 8)
        before = store.statistics().transactions
        await asyncio.gather(
            *(store.record_result(f"r{i}", done(f"r{i}").durable()) for i in range(8))
        )
        assert store.statistics().transactions == before + 1  # one group for the eight
        assert (records_on_callers_thread(store), through_writer(store)) == (16, 0)
        assert store.statistics().largest_batch == 8
        assert committed_rows(db, "tool_result") == 8


async def test_calls_of_several_tasks_in_one_turn_are_committed_together(
    tmp_path: Path,
) -> None:
    """A read whose body never waits goes from tool-use record to result within one turn of
    the loop, so the calls of a busy server's requests do not overlap: the second task's call
    in the same turn is the sign of load, and the turn's records are committed in one
    transaction at its end."""
    started = asyncio.Event()

    async def whole_call(store: SqliteToolUseStore, n: int) -> None:
        await started.wait()  # every task resumes in the same turn
        await store.record_tool_use(use(f"r{n}", n, read_only=True))
        await store.record_result(f"r{n}", done(f"r{n}").durable())

    db = tmp_path / "calls.db"
    async with await SqliteToolUseStore.open(db) as store:
        tasks = [asyncio.ensure_future(whole_call(store, n)) for n in range(8)]
        await asyncio.sleep(0)  # all eight now wait for the event
        started.set()
        await asyncio.gather(*tasks)
        # The first task's call, whole, one record at a time; the others' tool-use records in
        # one transaction, then their results in another.
        assert (on_callers_thread(store), records_on_callers_thread(store)) == (4, 16)
        assert through_writer(store) == 0
        assert committed_rows(db, "tool_result") == 8
        # Later turns: one task's calls one after the other stay on the caller's thread.
        for n in range(8, 11):
            await store.record_tool_use(use(f"r{n}", n, read_only=True))
            await store.record_result(f"r{n}", done(f"r{n}").durable())
        assert on_callers_thread(store) == 10


async def test_a_turn_s_records_go_to_the_writer_when_the_lock_is_held_elsewhere(
    tmp_path: Path,
) -> None:
    db = tmp_path / "calls.db"
    async with await SqliteToolUseStore.open(db) as store:
        await store.record_tool_use(use("r0", read_only=True))  # (the writer is warm)
        other = sqlite3.connect(db, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")  # another process's write transaction
            recording = asyncio.gather(
                *(store.record_tool_use(use(f"r{i}", i, read_only=True)) for i in range(1, 6))
            )
            loop = asyncio.get_running_loop()
            started = loop.time()
            for _ in range(20):  # the loop keeps turning while the records wait for the lock
                await asyncio.sleep(0)
            assert loop.time() - started < 2.0  # not the store's busy_timeout (5 s)
            assert not recording.done()
            other.execute("ROLLBACK")
            await recording
        finally:
            other.close()
        assert (through_writer(store), records_on_callers_thread(store)) == (5, 1)
        assert committed_rows(db, "tool_use") == 6


@pytest.mark.parametrize("spelling", ["read twice", "result twice", "result of nobody"])
async def test_a_record_that_fails_in_a_turn_s_group_fails_alone(
    tmp_path: Path, spelling: str
) -> None:
    """The group is written again by the writer, which leaves that record out: the others of
    the turn are committed, and only its caller gets the error."""
    db = tmp_path / "calls.db"
    async with await SqliteToolUseStore.open(db) as store:
        for i in range(4):
            await store.record_tool_use(use(f"r{i}", i, read_only=True))
        await store.record_result("r0", done("r0").durable())
        if spelling == "read twice":
            bad = store.record_tool_use(use("r0", 9, read_only=True))
        elif spelling == "result twice":
            bad = store.record_result("r0", done("r0").durable())
        else:
            bad = store.record_result("nobody", done("nobody").durable())
        outcomes = await asyncio.gather(
            store.record_result("r1", done("r1").durable()),
            store.record_result("r2", done("r2").durable()),
            bad,
            store.record_result("r3", done("r3").durable()),
            return_exceptions=True,
        )
        assert [outcomes[i] for i in (0, 1, 3)] == [None, None, None], outcomes
        assert isinstance(outcomes[2], StoreError), outcomes
        assert committed_rows(db, "tool_result") == 4
        calls = await store.load("s1")
    assert [(c.execution_id, c.status) for c in calls] == [(f"r{i}", "completed") for i in range(4)]


async def test_a_lock_held_elsewhere_sends_the_record_to_the_writer_and_never_blocks_the_loop(
    tmp_path: Path,
) -> None:
    db = tmp_path / "calls.db"
    async with await SqliteToolUseStore.open(db) as store:
        other = sqlite3.connect(db, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")  # another process's write transaction
            recording = asyncio.ensure_future(store.record_tool_use(use("r1", read_only=True)))
            loop = asyncio.get_running_loop()
            started = loop.time()
            for _ in range(20):  # the loop keeps turning while the record waits for the lock
                await asyncio.sleep(0)
            # Waiting for the lock on the loop would have taken the store's busy_timeout (5 s).
            assert loop.time() - started < 2.0
            assert not recording.done()
            other.execute("ROLLBACK")
            await recording
        finally:
            other.close()
        assert (through_writer(store), on_callers_thread(store)) == (1, 0)


@pytest.mark.parametrize("spelling", ["read twice", "result twice", "result of nobody"])
async def test_a_record_that_fails_alone_fails_on_the_callers_thread_too(
    tmp_path: Path, spelling: str
) -> None:
    async with await SqliteToolUseStore.open(tmp_path / "calls.db") as store:
        await store.record_tool_use(use("r1", read_only=True))
        await store.record_result("r1", done("r1").durable())  # no call under way any more
        with pytest.raises(StoreError, match=r"already exists|no tool-use record"):
            if spelling == "read twice":
                await store.record_tool_use(use("r1", read_only=True))
            elif spelling == "result twice":
                await store.record_result("r1", done("r1").durable())
            else:
                await store.record_result("nobody", done("nobody").durable())
        assert through_writer(store) == 0
        calls = await store.load("s1")
    assert [c.execution_id for c in calls] == ["r1"]


async def test_the_wal_is_synced_and_checkpointed_by_the_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The caller's connection never syncs and never checkpoints: the writer syncs the WAL
    soon after, and checkpoints it every ``CHECKPOINT_EVERY`` commits, so it stays bounded."""
    synced = threading.Event()
    real_sync = os.fdatasync

    def watched(fd: int) -> None:
        real_sync(fd)
        synced.set()

    monkeypatch.setattr(os, "fdatasync", watched)
    db = tmp_path / "calls.db"
    async with await SqliteToolUseStore.open(db) as store:
        await store.record_tool_use(use("r0", read_only=True))
        await store.record_result("r0", done("r0").durable())
        assert await asyncio.to_thread(synced.wait, 10)
        for i in range(1, 3000):
            await store.record_tool_use(use(f"r{i}", i, read_only=True))
            await store.record_result(f"r{i}", done(f"r{i}").durable())
        # (A record meeting the checkpoint's lock went to the writer instead.)
        assert on_callers_thread(store) > 5000 and through_writer(store) < 100
        wal = os.stat(f"{db}-wal").st_size
    # Unchecked, 6,000 commits of two to four pages each would leave a WAL of about 50 MB.
    assert wal < 8_000_000, wal


async def test_switched_off_every_record_goes_to_the_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_store, "INLINE_COMMITS", False)
    async with await SqliteToolUseStore.open(tmp_path / "calls.db") as store:
        assert store._inline is None
        await store.record_tool_use(use("r1", read_only=True))
        await store.record_result("r1", done("r1").durable())
        assert through_writer(store) == 2


async def test_a_busy_loop_s_groups_are_checkpointed_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The groups committed on the loop's connection count toward its checkpoints as single
    records do: the writer checkpoints the WAL every ``CHECKPOINT_EVERY`` commits, so under load
    it stays bounded as well."""
    monkeypatch.setattr(sqlite_store._Inline, "CHECKPOINT_EVERY", 4)
    db = tmp_path / "calls.db"
    async with await SqliteToolUseStore.open(db) as store:
        for turn in range(200):
            ids = [f"r{turn}-{i}" for i in range(16)]
            await asyncio.gather(
                *(
                    store.record_tool_use(use(e, turn * 16 + i, read_only=True))
                    for i, e in enumerate(ids)
                )
            )
            await asyncio.gather(*(store.record_result(e, done(e).durable()) for e in ids))
        assert records_on_callers_thread(store) > 3200  # (others met a checkpoint: the writer)
        assert committed_rows(db, "tool_result") == 3200
        wal = os.stat(f"{db}-wal").st_size
    # Unchecked, 400 group commits of a dozen pages or more each would leave about 20 MB.
    assert wal < 4_000_000, wal
