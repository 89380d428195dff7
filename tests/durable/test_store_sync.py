"""SqliteToolUseStore: when the WAL reaches the disk.

A record written before a side effect (tool-use, claim) is synced before its caller goes on; a
result is committed (visible, safe from a killed process) before its caller goes on and synced
with the next record of the first kind, or by the writer once it has been idle for
``SYNC_WITHIN``, or at close. The store's own syncs go through ``os.fdatasync`` (SQLite's are
made in C), which these tests watch.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import fastgate.durable.sqlite as sqlite_store
from fastgate.durable.sqlite import SqliteToolUseStore
from tests.durable.test_store import done, use


class Syncs:
    """The descriptors the store synced itself, and an event set at each."""

    def __init__(self) -> None:
        self.inodes: list[int] = []
        self.synced = threading.Event()


@pytest.fixture
def syncs(monkeypatch: pytest.MonkeyPatch) -> Iterator[Syncs]:
    seen = Syncs()
    real = os.fdatasync

    def watched(fd: int) -> None:
        real(fd)
        seen.inodes.append(os.fstat(fd).st_ino)
        seen.synced.set()

    monkeypatch.setattr(os, "fdatasync", watched)
    yield seen


def wal_inode(db: Path) -> int:
    return os.stat(f"{db}-wal").st_ino


def left_unsynced(store: SqliteToolUseStore) -> bool:
    """Whether the last commit left the WAL for the store to sync later (a commit made on the
    caller's thread has asked the writer to, which it may not have read yet)."""
    return store._writer.unsynced or store._writer.inline_unsynced


def committed_results(db: Path) -> int:
    with sqlite3.connect(db) as other:
        return int(other.execute("SELECT count(*) FROM tool_result").fetchone()[0])


async def test_a_result_is_committed_at_once_and_synced_once_the_writer_is_idle(
    tmp_path: Path, syncs: Syncs
) -> None:
    db = tmp_path / "calls.db"
    store = await SqliteToolUseStore.open(db)
    try:
        await store.record_tool_use(use("e1"))
        assert syncs.inodes == []  # a tool-use is synced by SQLite's own commit
        await store.record_result("e1", done("e1").durable())
        assert committed_results(db) == 1  # released after COMMIT: another reader sees it
        assert await asyncio.to_thread(syncs.synced.wait, 10)
        assert syncs.inodes == [wal_inode(db)]
    finally:
        await store.close()
    assert len(syncs.inodes) == 1  # nothing was left to sync at close


async def test_the_next_record_before_a_side_effect_syncs_the_results_before_it(
    tmp_path: Path, syncs: Syncs, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_store, "SYNC_WITHIN", 3600.0)  # the idle sync never comes
    db = tmp_path / "calls.db"
    store = await SqliteToolUseStore.open(db)
    try:
        await store.record_tool_use(use("e1"))
        await store.record_result("e1", done("e1").durable())
        await store.record_tool_use(use("e2", 1))  # its commit syncs the WAL, e1's result too
    finally:
        await store.close()
    assert syncs.inodes == []


async def test_a_result_left_unsynced_is_synced_at_close(
    tmp_path: Path, syncs: Syncs, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_store, "SYNC_WITHIN", 3600.0)
    db = tmp_path / "calls.db"
    store = await SqliteToolUseStore.open(db)
    try:
        await store.record_tool_use(use("e1"))
        await store.record_result("e1", done("e1").durable())
        assert syncs.inodes == []
        inode = wal_inode(db)
    finally:
        await store.close()
    assert syncs.inodes == [inode]


async def test_a_commit_that_wrote_nothing_does_not_count_as_a_sync(
    tmp_path: Path, syncs: Syncs, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_store, "SYNC_WITHIN", 3600.0)
    db = tmp_path / "calls.db"
    store = await SqliteToolUseStore.open(db)
    try:
        await store.record_tool_use(use("e1"))
        await store.record_result("e1", done("e1").durable())
        with pytest.raises(sqlite_store.StoreError, match="already exists"):
            await store.record_tool_use(use("e1"))  # refused: its transaction wrote nothing
    finally:
        await store.close()
    assert len(syncs.inodes) == 1  # e1's result was still unsynced at close


async def test_where_the_wal_cannot_be_opened_every_commit_syncs_itself(
    tmp_path: Path, syncs: Syncs, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_open = os.open
    refused = threading.Event()

    def no_wal(path: str, flags: int, *args: int) -> int:
        if str(path).endswith("-wal"):
            refused.set()
            raise PermissionError(13, "denied", path)
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", no_wal)
    db = tmp_path / "calls.db"
    store = await SqliteToolUseStore.open(db)
    try:
        await store.record_tool_use(use("e1"))
        await store.record_result("e1", done("e1").durable())
        assert await asyncio.to_thread(refused.wait, 10)  # the idle sync could not open it
        # The writer handles the next request after that sync: from then on it syncs itself.
        await store.record_tool_use(use("e2", 1))
        await store.record_result("e2", done("e2").durable())
        assert store._writer.synchronous == "FULL"
        assert store._writer.unsynced is False
    finally:
        await store.close()
    assert syncs.inodes == []
    assert committed_results(db) == 2


async def test_the_records_of_a_read_are_committed_at_once_and_synced_like_results(
    tmp_path: Path, syncs: Syncs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read changes nothing, so its tool-use record and its claim are not synced before it
    runs: committed (another connection sees them), then synced by the writer with the next
    record that needs a sync, or at close."""
    monkeypatch.setattr(sqlite_store, "SYNC_WITHIN", 3600.0)
    db = tmp_path / "calls.db"
    store = await SqliteToolUseStore.open(db)
    try:
        await store.record_tool_use(use("r1", read_only=True))
        claimed = await store.claim(use("r2", 1, read_only=True), "key", b"digest", take_over=False)
        assert claimed.status == "claimed"
        with sqlite3.connect(db) as other:
            assert other.execute("SELECT count(*) FROM tool_use").fetchone()[0] == 2
        assert left_unsynced(store)  # both commits left the WAL to be synced
        await store.record_tool_use(use("w1", 2))  # a record with a side effect behind it
        assert not left_unsynced(store)  # its commit synced the WAL, the reads' too
        await store.record_tool_use(use("r3", 3, read_only=True))
        inode = wal_inode(db)
    finally:
        await store.close()
    assert syncs.inodes == [inode]  # r3's commit, synced by the store at close


async def test_a_record_with_a_side_effect_behind_it_is_never_left_unsynced(
    tmp_path: Path, syncs: Syncs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever else its transaction holds: a write's tool-use or claim in a group with reads
    and results syncs the whole group."""
    monkeypatch.setattr(sqlite_store, "SYNC_WITHIN", 3600.0)
    monkeypatch.setattr(sqlite_store, "INLINE_COMMITS", False)  # the writer's group, alone
    store = await SqliteToolUseStore.open(tmp_path / "calls.db")
    try:
        await store.record_tool_use(use("r0", read_only=True))
        await asyncio.gather(  # one loop iteration: one transaction
            store.record_tool_use(use("r1", 1, read_only=True)),
            store.record_result("r0", done("r0").durable()),
            store.claim(use("w1", 2), "key", b"digest", take_over=False),
        )
        assert not left_unsynced(store)
        assert store.statistics().transactions == 2
    finally:
        await store.close()
    assert syncs.inodes == []  # nothing was left for the store to sync itself
