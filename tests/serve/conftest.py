"""Servers the gateway's replica tests share: a private redis-server and a private PostgreSQL
(each started here, on Unix sockets, and checked gone at the end). Where one cannot be had, the
tests that need it skip saying so; under CI its absence is a failure."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fastgate.cli.bench.redis_server import RedisServer, pid_alive, redis_server_binary


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    if redis_server_binary() is None:
        _unavailable(
            "redis-server is not installed (scripts/setup-redis installs Debian's package)"
        )
    server = RedisServer(tmp_path / "redis")
    server.start()
    try:
        yield server
    finally:
        server.stop()
        assert not pid_alive(server.pid), f"redis-server {server.pid} outlived its test"


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A private PostgreSQL server's URL (libpq URI form, the Unix socket as host)."""
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401

        from fastgate.cli.bench.postgres_server import PostgresServer, postgres_bindir
    except ImportError as exc:
        _unavailable(f"the Postgres store or psycopg is not available: {exc}")
        raise
    if postgres_bindir() is None:
        _unavailable(
            "PostgreSQL is not installed (scripts/setup-postgres installs Debian's package)"
        )
    server: Any = PostgresServer()
    server.start()
    try:
        yield f"postgresql://postgres@/postgres?host={server.directory}&port=5432"
    finally:
        pid = server.pid
        server.close()
        assert not pid_alive(pid), f"postgres {pid} outlived its test"
