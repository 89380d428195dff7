"""PostgresToolUseStore when its connections are terminated (``pg_terminate_backend``, as an
operator or a failover does) while the server stays up: one idle in the pool, one in the middle
of a transaction, all of them at once and again as soon as they are replaced. The next
operations succeed at once, an operation whose connection died under it fails with
``StoreError`` having written nothing, and nothing committed before is lost."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import pytest

from fastgate.cli.bench.postgres_server import PostgresServer
from fastgate.durable.postgres import PostgresToolUseStore
from fastgate.durable.store import StoreError, args_digest, session_key
from tests.durable.conftest import new_namespace
from tests.durable.test_postgres_store import done, use

# Servers and processes of their own, the same in both builds: run once, in the compiled build.
pytestmark = pytest.mark.slow

T = TypeVar("T")

# Far below the store's timeout (5 s): replacing dead connections takes milliseconds, while the
# pool's own check slept 1 s, then 2 s, 4 s, ... after each dead connection it handed out.
RECOVERY = 3.0
DIGEST = args_digest({})
BACKENDS = "SELECT pid FROM pg_stat_activity WHERE application_name = %s"


class Admin:
    """A connection of its own to the server, that sees and terminates the store's backends
    (the store's connections carry the namespace as their ``application_name``)."""

    def __init__(self, conn: Any, name: str) -> None:
        self.conn = conn
        self.name = name

    async def backends(self, where: str = "") -> set[int]:
        rows = await (await self.conn.execute(BACKENDS + where, (self.name,))).fetchall()
        return {row[0] for row in rows}

    async def until(self, what: str, ready: Callable[[], Awaitable[bool]]) -> None:
        deadline = time.monotonic() + 30
        while not await ready():
            assert time.monotonic() < deadline, f"{what}: not within 30 s"
            await asyncio.sleep(0.01)  # polling the server's view, with a deadline

    async def terminate(self, where: str = "") -> set[int]:
        """Terminates the store's backends (those matching ``where``); returns once they are
        gone, so that the store's connections are surely dead, not dying."""
        pids = await self.backends(where)
        for pid in pids:
            await self.conn.execute("SELECT pg_terminate_backend(%s)", (pid,))

        async def gone() -> bool:
            return not pids & await self.backends()

        await self.until("the terminated backends exit", gone)
        return pids


@asynccontextmanager
async def store_and_admin(
    server: PostgresServer, **options: Any
) -> AsyncIterator[tuple[PostgresToolUseStore, Admin]]:
    import psycopg

    ns = new_namespace()
    store = PostgresToolUseStore(f"{server.dsn} application_name={ns}", namespace=ns, **options)
    async with (
        await psycopg.AsyncConnection.connect(server.dsn, autocommit=True) as conn,
        store,
    ):
        yield store, Admin(conn, ns)


async def promptly(operation: Awaitable[T]) -> T:
    """The operation's value, and it came within ``RECOVERY`` (without cancelling it: its own
    timeout ends it)."""
    start = time.monotonic()
    value = await operation
    took = time.monotonic() - start
    assert took < RECOVERY, f"took {took:.1f} s"
    return value


async def write_some(store: PostgresToolUseStore, tag: str) -> None:
    """A call recorded with its result, and a keyed call claimed and completed."""
    await store.record_tool_use(use(f"{tag}-plain", session="s"))
    await store.record_result(f"{tag}-plain", done(f"{tag}-plain"))
    entry = await store.claim(
        use(f"{tag}-keyed", session="s"), f"{tag}-key", DIGEST, take_over=False
    )
    assert entry.status == "claimed"
    await store.record_result(f"{tag}-keyed", done(f"{tag}-keyed", f"did {tag}"))


async def all_there(store: PostgresToolUseStore, tags: list[str], *also: str) -> None:
    """Every call written (``write_some``'s for each tag, and ``also``) is there, completed, and
    a repeat of each key replays its result."""
    calls = {c.execution_id: c.status for c in await store.load("s")}
    expected = [f"{t}-{kind}" for t in tags for kind in ("plain", "keyed")]
    assert calls == dict.fromkeys([*expected, *also], "completed")
    for tag in tags:
        again = await store.claim(
            use(f"{tag}-again", session="s"), f"{tag}-key", DIGEST, take_over=False
        )
        assert again.status == "completed" and again.execution_id == f"{tag}-keyed"
        assert again.result is not None and again.result.content == f"did {tag}"


async def test_a_connection_terminated_idle_in_the_pool_is_replaced(
    postgres_server: PostgresServer,
) -> None:
    async with store_and_admin(postgres_server, max_size=1) as (store, admin):
        await write_some(store, "before")
        assert len(await admin.terminate()) == 1  # the pool's one connection
        await promptly(write_some(store, "after"))
        await all_there(store, ["before", "after"])


async def test_every_connection_terminated_again_and_again_the_store_serves_at_once(
    postgres_server: PostgresServer,
) -> None:
    async with store_and_admin(postgres_server, min_size=4, max_size=8) as (store, admin):
        await write_some(store, "before")

        async def filled() -> bool:
            return len(await admin.backends()) >= 4

        await admin.until("the pool opens its 4 connections", filled)
        # A burst: every connection terminated, then every replacement the next operation made.
        for n in range(4):
            assert await admin.terminate()
            await promptly(write_some(store, f"round{n}"))
        await all_there(store, ["before", *(f"round{r}" for r in range(4))])


async def test_a_connection_terminated_mid_transaction_fails_its_operation_alone(
    postgres_server: PostgresServer,
) -> None:
    """A claim and a group commit each blocked on a row another transaction is inserting: their
    backends terminated, each fails with StoreError having written nothing; the store serves
    at once, and both go through once re-sent."""
    import psycopg

    async with (
        store_and_admin(postgres_server, max_size=4) as (store, admin),
        await psycopg.AsyncConnection.connect(postgres_server.dsn) as locker,
    ):
        await write_some(store, "before")
        ns = store.namespace
        # The locker inserts, in one open transaction, the rows the two operations will insert.
        await locker.execute(
            f'INSERT INTO "{ns}".journal (session_key, key, digest, execution_id, owner, '
            "lease_expires) VALUES (%s, 'fresh-key', '', 'other', 'other', now())",
            (session_key("s"),),
        )
        await locker.execute(
            f'INSERT INTO "{ns}".tool_use (execution_id, epoch, seq, tool_name, args) '
            "VALUES ('blocked', 0, 0, 't', '')"
        )
        claim = asyncio.ensure_future(
            store.claim(use("fresh", session="s"), "fresh-key", DIGEST, take_over=False)
        )
        write = asyncio.ensure_future(store.record_tool_use(use("blocked", session="s")))
        locked = " AND wait_event_type = 'Lock'"

        async def both_waiting() -> bool:
            return len(await admin.backends(locked)) == 2

        await admin.until("both operations wait on the locker", both_waiting)
        assert len(await admin.terminate(locked)) == 2
        with pytest.raises(StoreError, match=r"the claim failed: .*terminat"):
            await claim
        with pytest.raises(StoreError, match=r"the write failed: .*terminat"):
            await write
        await promptly(write_some(store, "after"))  # on a connection left, or a new one
        await locker.rollback()
        # Nothing of the failed two was written: both go through now, as first writes.
        fresh = await promptly(
            store.claim(use("fresh", session="s"), "fresh-key", DIGEST, take_over=False)
        )
        assert fresh.status == "claimed" and fresh.execution_id == "fresh"
        await promptly(store.record_tool_use(use("blocked", session="s")))
        await store.record_result("fresh", done("fresh", "did fresh"))
        await store.record_result("blocked", done("blocked", "did blocked"))
        await all_there(store, ["before", "after"], "fresh", "blocked")
