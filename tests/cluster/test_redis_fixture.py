"""The test Redis is real: a redis-server process answering on its socket, gone after stop()."""

from __future__ import annotations

from pathlib import Path

import redis.asyncio as aioredis

from fastgate.cli.bench.redis_server import RedisServer, pid_alive
from tests.cluster.conftest import need_redis_server


async def test_fixture_server_answers(redis_server: RedisServer) -> None:
    client = aioredis.from_url(redis_server.url)
    try:
        assert await client.ping()
        info = await client.info("server")
        assert str(info["redis_version"]).startswith(("6.", "7.", "8."))
        assert int(info["process_id"]) == redis_server.pid
    finally:
        await client.aclose()


def test_stop_reaps_the_server_and_restart_reuses_the_socket(tmp_path: Path) -> None:
    need_redis_server()
    server = RedisServer(tmp_path / "r")
    server.start()
    first = server.pid
    server.stop()
    assert not pid_alive(first)
    server.start()
    try:
        assert server.pid != first and pid_alive(server.pid)
        assert server.socket.exists()
    finally:
        server.stop()
    assert not pid_alive(server.pid)
