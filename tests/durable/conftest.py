"""A real PostgreSQL for the durability tests, and the two journal stores side by side.

``postgres_server``: one private server for the whole session (``initdb`` into a temporary
directory, a Unix socket only, started and stopped here); each test gets a namespace of its own
in it. ``own_postgres``: a server of the test's own, for the tests that SIGKILL it. Where
PostgreSQL or psycopg cannot be had, those tests skip saying so; under CI (``CI`` set, where
scripts/setup-postgres installs it) their absence is a failure. Every server's pid is checked
gone when it stops.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fastgate.cli.bench.postgres_server import PostgresServer, postgres_bindir
from fastgate.cli.bench.redis_server import pid_alive
from fastgate.durable.postgres import PostgresToolUseStore
from fastgate.durable.sqlite import SqliteToolUseStore

KINDS = ("sqlite", "postgres")


def need_postgres() -> None:
    reason = None
    if postgres_bindir() is None:
        reason = "PostgreSQL is not installed (scripts/setup-postgres installs Debian's package)"
    else:
        try:
            import psycopg  # noqa: F401
            import psycopg_pool  # noqa: F401
        except ImportError:
            reason = "psycopg is not installed (the 'postgres' extra)"
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)


def _stop(server: PostgresServer) -> None:
    pid = server.process.pid if server.process is not None else None
    server.close()
    assert pid is None or not pid_alive(pid), f"postgres {pid} outlived its test"


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    need_postgres()
    server = PostgresServer()
    try:
        server.start()
        yield server
    finally:
        _stop(server)


@pytest.fixture
def own_postgres() -> Iterator[PostgresServer]:
    """A server this test may kill and restart."""
    need_postgres()
    server = PostgresServer()
    try:
        server.start()
        yield server
    finally:
        _stop(server)


@dataclasses.dataclass(frozen=True)
class Backend:
    """Where a test's journal lives: stores opened from it share one journal, in this process
    or in a child (``argv``)."""

    kind: str
    location: str  # the SQLite file, or the server's dsn
    namespace: str

    def open(self, **options: Any) -> SqliteToolUseStore | PostgresToolUseStore:
        if self.kind == "sqlite":
            return SqliteToolUseStore(self.location, **options)
        return PostgresToolUseStore(self.location, namespace=self.namespace, **options)

    def argv(self) -> list[str]:
        return [self.kind, self.location, self.namespace]


def new_namespace() -> str:
    return f"t_{uuid.uuid4().hex[:16]}"


@pytest.fixture(params=KINDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "sqlite":
        return Backend("sqlite", str(tmp_path / "journal.db"), "")
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return Backend("postgres", server.dsn, new_namespace())


def child_env() -> dict[str, str]:
    """A child's environment: it imports fastgate and the tests as this process does."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env
