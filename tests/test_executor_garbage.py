"""A call frees what it made as it ends: no reference cycles left for the garbage collector.

A server making thousands of calls a second would otherwise pay for frequent collections, and
hold every call's objects until the next one (the compiled build once left ten per guarded call).
"""

from __future__ import annotations

import asyncio
import errno
import gc
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from fastgate import CancelToken, ExecutionContext, Failure, ToolKind
from tests.pipeline_kit import NOTHING, PATH, TEXT, assert_idle, executor, tool

CALLS = 25
SLOW = {"retried": 3}  # each retried call waits out a 0.2 s backoff


async def _echo(args: Any, ctx: Any) -> str:
    return str(args.get("text", ""))


async def _fail(args: Any, ctx: Any) -> Failure:
    return Failure("nope", code="E_NOPE")


async def _raise(args: Any, ctx: Any) -> str:
    raise ValueError("broken tool")


async def _busy_then_ok(args: Any, ctx: Any) -> str:
    if ctx.attempt == 1:
        raise OSError(errno.EBUSY, "busy")
    return "ok"


async def _sleep(args: Any, ctx: Any) -> str:
    await asyncio.sleep(10)
    return "late"


async def _touch(args: Any, ctx: Any) -> str:
    return "touched"


def _cases(workspace: Path) -> dict[str, tuple[Any, Callable[[], Awaitable[Any]]]]:
    token = CancelToken()
    ex = executor(
        tool("echo", _echo, TEXT),
        tool("echo_t", _echo, TEXT, timeout=30.0),
        tool("fail", _fail, NOTHING, timeout=30.0),
        tool("raise", _raise, NOTHING),
        tool("retry", _busy_then_ok, NOTHING, retry_safe=True, timeout=30.0),
        tool("slow", _sleep, NOTHING, timeout=0.001),
        tool("touch", _touch, PATH, kind=ToolKind.WRITE),
        workspace=workspace,
        cancel_grace=0.5,
    )
    guarded = ExecutionContext(session_id="s1", workspace_root=str(workspace), cancel=token)
    target = str(workspace / "file.txt")
    return {
        "fast path": (ex, lambda: ex.execute("echo", {"text": "hi"})),
        "deadline": (ex, lambda: ex.execute("echo_t", {"text": "hi"})),
        "caller token": (ex, lambda: ex.execute("echo", {"text": "hi"}, guarded)),
        "failure": (ex, lambda: ex.execute("fail", {})),
        "tool error": (ex, lambda: ex.execute("raise", {})),
        "retried": (ex, lambda: ex.execute("retry", {}, guarded)),
        "timed out": (ex, lambda: ex.execute("slow", {})),
        "invalid arguments": (ex, lambda: ex.execute("echo", {"text": 3})),
        "unknown tool": (ex, lambda: ex.execute("nope", {})),
        "write with a path": (ex, lambda: ex.execute("touch", {"file_path": target})),
    }


@pytest.mark.parametrize(
    "case",
    [
        "fast path",
        "deadline",
        "caller token",
        "failure",
        "tool error",
        "retried",
        "timed out",
        "invalid arguments",
        "unknown tool",
        "write with a path",
    ],
)
async def test_calls_leave_no_reference_cycles(case: str, tmp_path: Path) -> None:
    ex, call = _cases(tmp_path)[case]
    calls = SLOW.get(case, CALLS)
    for _ in range(2):  # warm up: caches, lazily built tables, the first loop timers
        await call()
    gc.collect()
    gc.disable()
    try:
        results = [await call() for _ in range(calls)]
        del results
        found = gc.collect()
    finally:
        gc.enable()
    assert found == 0, f"{found} objects in cycles after {calls} calls ({case})"
    assert_idle(ex)
