"""PostgreSQL SIGKILLed mid-load (server and every backend at once) under an executor that requires
persistence: every call whose record could not be written fails with ``PERSISTENCE_FAILED``
before its side effect, keyed calls even without ``require_persistence``; after a restart of
the server the same store serves again by itself."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from fastgate import (
    ConcurrencyScheduler,
    ExecutionContext,
    SchedulerLimits,
    ToolResult,
    schema,
)
from fastgate.cli.bench.postgres_server import PostgresServer
from fastgate.cli.bench.redis_server import pid_alive
from fastgate.durable.postgres import PostgresToolUseStore
from fastgate.model.results import ErrorCode
from tests.durable.conftest import new_namespace
from tests.pipeline_kit import executor, tool

ARGS = schema.Object({"n": schema.Integer()}, required=("n",))

pytestmark = [
    pytest.mark.slow,  # run once in CI, on the compiled build
    pytest.mark.skipif(sys.platform == "win32", reason="needs SIGKILL"),
    pytest.mark.timeout(300),
]


def context(n: int) -> ExecutionContext:
    """Odd calls are keyed, even ones are not."""
    return ExecutionContext(session_id="s", idempotency_key=f"k{n}" if n % 2 else None)


def leave_marker(workdir: Path, n: int) -> None:
    with open(workdir / f"m{n}", "x"):
        pass


def ran(workdir: Path, n: int) -> bool:
    return (workdir / f"m{n}").exists()


def code_of(result: ToolResult) -> ErrorCode | None:
    return result.error.code if result.error is not None else None


@pytest.mark.parametrize("require_persistence", [True, False], ids=["required", "keyed-only"])
async def test_a_killed_server_fails_calls_before_their_side_effect_then_recovers(
    own_postgres: PostgresServer, tmp_path: Path, require_persistence: bool
) -> None:
    bodies = 0
    enough = asyncio.Event()

    async def body(args: Any, ctx: Any) -> str:
        nonlocal bodies
        leave_marker(tmp_path, args["n"])
        bodies += 1
        if bodies == 30:
            enough.set()
        await asyncio.sleep(0)
        return f"did {args['n']}"

    # 2 s per operation: short enough for a quick outage, long enough for the first commits of
    # a just-restarted server on a loaded machine (0.5 s failed a call after the restart in CI).
    store = PostgresToolUseStore(own_postgres.dsn, namespace=new_namespace(), timeout=2.0)
    ex = executor(
        tool("effect", body, ARGS, parallelism="shared"),
        store=store,
        require_persistence=require_persistence,
        scheduler=ConcurrencyScheduler(SchedulerLimits(global_limit=256, session_limit=256)),
    )

    async def call(n: int) -> tuple[int, ToolResult]:
        return n, await ex.execute("effect", {"n": n}, context(n))

    try:
        # Mid-load: 200 calls in flight; the server and its backends die once 30 bodies ran.
        load = [asyncio.create_task(call(n)) for n in range(200)]
        await enough.wait()
        server_pid = own_postgres.pid
        own_postgres.kill()
        assert not pid_alive(server_pid)
        during = [await task for task in load]
        # With the server down, nothing runs that needs its record.
        down = await asyncio.gather(*(call(n) for n in range(200, 210)))
        ran_while_down = {n for n in range(210) if ran(tmp_path, n)}
        own_postgres.start()
        recovered = await _first_success(call, 301)  # keyed: it needs the store
        after = await asyncio.gather(*(call(n) for n in range(400, 420)))
        # A keyed call refused while the server was down left no entry: re-sent, it runs.
        refused_keyed = [
            n for n, r in during + down if n % 2 and code_of(r) is ErrorCode.PERSISTENCE_FAILED
        ]
        retried = [await call(n) for n in refused_keyed[:3]]
        calls = await store.load("s")
    finally:
        await store.close()

    failed = [n for n, r in during + down if code_of(r) is ErrorCode.PERSISTENCE_FAILED]
    assert failed, "the kill failed no call"
    assert not ran_while_down & set(failed)  # refused before the side effect
    for n, result in during:
        assert result.ok or code_of(result) is ErrorCode.PERSISTENCE_FAILED, result.error
        assert result.ok == (n in ran_while_down)
    for n, result in down:
        persisted = require_persistence or n % 2
        assert (code_of(result) is ErrorCode.PERSISTENCE_FAILED) == bool(persisted), n
        assert result.ok == (n in ran_while_down)
    assert recovered.ok
    assert [(n, r.error) for n, r in after if not r.ok] == []
    stored = {c.execution_id: c for c in calls}
    for _, result in [*after, (0, recovered)]:
        entry = stored[result.meta.execution_id]
        assert entry.status == "completed" and entry.result is not None
    assert retried and all(r.ok and not r.meta.replayed for _, r in retried)


async def _first_success(
    call: Callable[[int], Awaitable[tuple[int, ToolResult]]], start: int
) -> ToolResult:
    """Calls until one succeeds (the pool reconnects with backoff): the store recovered."""
    deadline = time.monotonic() + 60
    n = start
    while True:
        _, result = await call(n)
        if result.ok:
            return result
        assert code_of(result) is ErrorCode.PERSISTENCE_FAILED, result.error
        assert time.monotonic() < deadline, "the store did not recover within 60 s"
        n += 2
        await asyncio.sleep(0.2)
