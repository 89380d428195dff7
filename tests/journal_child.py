"""Child process for tests/durable/test_journal_processes.py: keyed calls from another process.

Usage: ``python journal_child.py MODE KIND LOCATION NAMESPACE LEASE_TTL WORKDIR [...]``, where
KIND is ``sqlite`` or ``postgres`` (LOCATION a file or a dsn). The child reports on stdout, one
JSON line per event, flushed at once, and waits on its stdin where the parent steers it: the
parent never sleeps to synchronise. Modes:

- ``hold RETRY_SAFE``: a keyed call of ``effect`` (key ``k``, session ``s``) whose body says
  ``started``, waits for a line, leaves a marker file in WORKDIR and returns; then ``result``.
  The parent may SIGKILL the child while the body waits.
- ``load CALLS KEYS``: says ``ready``, waits for a line, then makes CALLS keyed calls over KEYS
  keys at once (its own order of keys); each body leaves a marker file named after its key and
  yields a few times; then ``results`` with what every call returned.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import uuid
from typing import Any

from fastgate import (
    ConcurrencyScheduler,
    ExecutionContext,
    FileLockManager,
    SchedulerLimits,
    ToolExecutor,
    ToolKind,
    ToolRegistry,
    define_tool,
    schema,
)
from fastgate.durable import PostgresToolUseStore, SqliteToolUseStore
from fastgate.durable.store import JournalStore

ARGS = schema.Object({"n": schema.Integer()}, required=("n",))


def say(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


async def wait_for_parent() -> str:
    return await asyncio.to_thread(sys.stdin.readline)


def leave_marker(workdir: str, name: str) -> None:
    path = os.path.join(workdir, f"{name}.{os.getpid()}.{uuid.uuid4().hex}")
    with open(path, "x") as fh:
        fh.flush()
        os.fsync(fh.fileno())


def open_store(kind: str, location: str, namespace: str, lease_ttl: float) -> JournalStore:
    if kind == "sqlite":
        return SqliteToolUseStore(location, lease_ttl=lease_ttl)
    return PostgresToolUseStore(location, namespace=namespace, lease_ttl=lease_ttl)


def make_executor(store: JournalStore, body: Any, retry_safe: bool) -> ToolExecutor:
    registry = ToolRegistry()
    effect = define_tool(
        "effect", "A side effect.", ARGS, body, kind=ToolKind.READ_ONLY, retry_safe=retry_safe
    )
    registry.register(effect)
    return ToolExecutor(
        registry,
        store=store,
        scheduler=ConcurrencyScheduler(SchedulerLimits(global_limit=100, session_limit=100)),
        locks=FileLockManager(),
    )


async def hold(store: JournalStore, workdir: str, retry_safe: bool) -> None:
    async def body(args: Any, ctx: Any) -> str:
        say("started", execution_id=ctx.execution_id)
        await wait_for_parent()
        leave_marker(workdir, "effect")
        return f"done by {os.getpid()}"

    executor = make_executor(store, body, retry_safe)
    ctx = ExecutionContext(session_id="s", idempotency_key="k")
    result = await executor.execute("effect", {"n": 1}, ctx)
    say(
        "result",
        ok=result.ok,
        content=result.content,
        execution_id=result.meta.execution_id,
        replayed=result.meta.replayed,
    )


async def load(store: JournalStore, workdir: str, calls: int, keys: int) -> None:
    async def body(args: Any, ctx: Any) -> str:
        key = f"k{args['n']}"
        leave_marker(workdir, key)
        for _ in range(20):  # stay running a while, so that repeats find it running
            await asyncio.sleep(0)
        return f"{key} by {os.getpid()}"

    executor = make_executor(store, body, False)
    order = [i % keys for i in range(calls)]
    random.Random(os.getpid()).shuffle(order)
    say("ready")
    await wait_for_parent()

    async def one(n: int) -> dict[str, Any]:
        ctx = ExecutionContext(session_id="s", idempotency_key=f"k{n}")
        result = await executor.execute("effect", {"n": n}, ctx)
        code = result.error.code if result.error is not None else None
        return {
            "key": f"k{n}",
            "ok": result.ok,
            "content": result.content,
            "code": code,
            "replayed": result.meta.replayed,
        }

    results = await asyncio.gather(*(one(n) for n in order))
    say("results", results=results)


async def main() -> None:
    mode, kind, location, namespace, lease_ttl, workdir = sys.argv[1:7]
    store = open_store(kind, location, namespace, float(lease_ttl))
    try:
        if mode == "hold":
            await hold(store, workdir, sys.argv[7] == "1")
        elif mode == "load":
            await load(store, workdir, int(sys.argv[7]), int(sys.argv[8]))
        else:
            raise SystemExit(f"unknown mode {mode!r}")
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(main())
