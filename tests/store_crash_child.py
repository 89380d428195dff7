"""Child process for tests/test_store_crash.py: writes to a store until the parent kills it.

Usage: ``python store_crash_child.py MODE DB_PATH [COUNTER_PATH]``. The child reports on stdout,
one JSON line per event, flushed at once; the parent reads those lines to know when to SIGKILL,
and controls blocked tools through the child's stdin. Modes:

- ``effect``: a ``ToolExecutor`` over the store runs ``echo`` to completion, then ``effect``,
  whose body says ``started``, waits for a line on stdin, bumps the counter file (fsynced),
  says ``effect-done`` and waits again (forever, until killed).
- ``flood``: 32 sessions record tool-use + result pairs concurrently and report each pair once
  its ``await`` returned (acknowledged = committed).
- ``sequential``: 20 tool-uses, one transaction each, then ``done``; then waits.
- ``checkpoint``: 10 tool-uses, then close (checkpointed into the file); reopens, 10 more in
  the WAL, then ``done``; then waits.
- ``full``: the file-size limit stops the WAL from growing; records until the store refuses.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import signal
import sys
from typing import Any

from fastgate import ExecutionContext, ToolExecutor, ToolKind, ToolRegistry, define_tool, schema
from fastgate.durable.sqlite import SqliteToolUseStore, StoreError
from fastgate.durable.store import ToolUseRecord
from fastgate.model.results import DurableResult, ResultMeta


def say(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


async def wait_for_parent() -> str:
    return await asyncio.to_thread(sys.stdin.readline)


def bump(counter_path: str) -> None:
    with open(counter_path, "a") as fh:
        fh.write("x")
        fh.flush()
        os.fsync(fh.fileno())


def record(execution_id: str, session_id: str, seq: int, args: Any = None) -> ToolUseRecord:
    return ToolUseRecord(execution_id, f"call-{seq}", session_id, "turn-1", 0, seq, "t", args)


def result(execution_id: str, session_id: str) -> DurableResult:
    meta = ResultMeta(execution_id, None, "t", session_id, 0.0, 0.0, 0.0)
    return DurableResult(True, f"done {execution_id}", None, meta)


async def effect(db: str, counter_path: str) -> None:
    async def echo(args: Any, ctx: Any) -> str:
        return str(args["text"])

    async def side_effect(args: Any, ctx: Any) -> str:
        say("started")
        await wait_for_parent()
        bump(counter_path)
        say("effect-done")
        await wait_for_parent()  # the parent kills us here
        return "unreachable"

    text = schema.Object({"text": schema.String()}, required=("text",))
    registry = ToolRegistry()
    registry.register(define_tool("echo", "Echo.", text, echo, kind=ToolKind.READ_ONLY))
    registry.register(define_tool("effect", "Count.", text, side_effect, kind=ToolKind.READ_ONLY))
    store = SqliteToolUseStore(db)
    executor = ToolExecutor(registry, store=store, require_persistence=True)
    ctx = ExecutionContext(session_id="s1", turn_id="turn-1")
    first = await executor.execute("echo", {"text": "hello"}, ctx, call_id="c1")
    say("completed", execution_id=first.meta.execution_id, ok=first.ok)
    await executor.execute("effect", {"text": "go"}, ctx, call_id="c2")


async def flood(db: str) -> None:
    store = SqliteToolUseStore(db)

    async def session(n: int) -> None:
        for seq in range(1_000_000):
            execution_id = f"s{n}-{seq}"
            await store.record_tool_use(record(execution_id, f"s{n}", seq))
            await store.record_result(execution_id, result(execution_id, f"s{n}"))
            say("acked", execution_id=execution_id, session_id=f"s{n}")

    await asyncio.gather(*(session(n) for n in range(32)))


async def sequential(db: str) -> None:
    store = SqliteToolUseStore(db)
    for seq in range(20):
        await store.record_tool_use(record(f"e{seq}", "s1", seq, {"pad": "x" * 500}))
    say("done")
    await wait_for_parent()


async def checkpoint(db: str) -> None:
    store = SqliteToolUseStore(db)
    for seq in range(10):
        await store.record_tool_use(record(f"c{seq}", "s1", seq))
    await store.close()  # the last connection checkpoints the WAL into the file
    store = SqliteToolUseStore(db)
    for seq in range(10, 20):
        await store.record_tool_use(record(f"e{seq}", "s1", seq))
    say("done")
    await wait_for_parent()


async def full(db: str) -> None:
    store = SqliteToolUseStore(db)
    await store.record_tool_use(record("before-limit", "s1", 0))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
    limit = 48 * 1024
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    acked = ["before-limit"]
    for seq in range(1, 10_000):
        try:
            await store.record_tool_use(record(f"e{seq}", "s1", seq, {"pad": "y" * 2000}))
        except StoreError as exc:
            say("refused", execution_id=f"e{seq}", message=str(exc), acked=acked)
            break
        acked.append(f"e{seq}")
    say("exit")
    os._exit(0)  # like a crash: no close, no checkpoint (which would also hit the limit)


def main() -> None:
    mode, db = sys.argv[1], sys.argv[2]
    if mode == "effect":
        coro = effect(db, sys.argv[3])
    elif mode == "flood":
        coro = flood(db)
    elif mode == "sequential":
        coro = sequential(db)
    elif mode == "checkpoint":
        coro = checkpoint(db)
    elif mode == "full":
        coro = full(db)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    asyncio.run(coro)


if __name__ == "__main__":
    main()
