"""A real redis-server per test, on a Unix socket in the test's temp dir, gone when it ends.

Where redis-server cannot be had (not installed, no root to install it) the cluster tests skip
saying so; under CI (``CI`` set, where scripts/setup-redis installs it) its absence is a failure.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from fastgate.cli.bench.redis_server import RedisServer, pid_alive, redis_server_binary


def need_redis_server() -> None:
    if redis_server_binary() is None:
        reason = "redis-server is not installed (scripts/setup-redis installs Debian's package)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    need_redis_server()
    server = RedisServer(tmp_path / "redis")
    server.start()
    try:
        yield server
    finally:
        server.stop()
        assert not pid_alive(server.pid), f"redis-server {server.pid} outlived its test"


@pytest.fixture
def second_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """Another server: where the tests record what the tool bodies observed, so that restarting
    the cluster's server never loses the measurements."""
    need_redis_server()
    server = RedisServer(tmp_path / "redis-probe")
    server.start()
    try:
        yield server
    finally:
        server.stop()
        assert not pid_alive(server.pid), f"redis-server {server.pid} outlived its test"
