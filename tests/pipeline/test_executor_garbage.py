"""A call frees what it made as it ends: no reference cycles left for the garbage collector,
and nothing of its caller's kept when there is no reason to.

A server making thousands of calls a second would otherwise pay for frequent collections, and
hold every call's objects until the next collection (the compiled build once left ten per
guarded call).
"""

from __future__ import annotations

import asyncio
import errno
import gc
import weakref
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


# case -> (tool, arguments, called with a caller's token); "file" stands for a path in the workspace
CASES: dict[str, tuple[str, dict[str, Any], bool]] = {
    "fast path": ("echo", {"text": "hi"}, False),
    "deadline": ("echo_t", {"text": "hi"}, False),
    "caller token": ("echo", {"text": "hi"}, True),
    "failure": ("fail", {}, False),
    "tool error": ("raise", {}, False),
    "retried": ("retry", {}, True),
    "timed out": ("slow", {}, False),
    "invalid arguments": ("echo", {"text": 3}, False),
    "unknown tool": ("nope", {}, False),
    "write with a path": ("touch", {"file_path": "file"}, False),
}


def _call(workspace: Path, case: str) -> tuple[Any, Callable[[], Awaitable[Any]]]:
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
    name, args, with_token = CASES[case]
    if "file_path" in args:
        args = {"file_path": str(workspace / args["file_path"])}
    token = CancelToken() if with_token else None
    ctx = ExecutionContext(session_id="s1", workspace_root=str(workspace), cancel=token)
    return ex, lambda: ex.execute(name, args, ctx)


@pytest.mark.parametrize("case", list(CASES))
async def test_calls_leave_no_reference_cycles(case: str, tmp_path: Path) -> None:
    ex, call = _call(tmp_path, case)
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


async def test_a_context_is_not_kept_when_there_are_no_defaults_to_merge(tmp_path: Path) -> None:
    """Without ``context_defaults`` the executor has nothing to merge into a caller's context,
    so it keeps none: a server making a context per call (its own token, approver) does not
    leave a thousand of them alive in a cache."""
    ex = executor(tool("echo", _echo, TEXT), workspace=tmp_path, context_defaults={})

    async def approver(request: Any) -> Any:
        raise AssertionError("a READ_ONLY call asks no one")

    approver_ref = weakref.ref(approver)
    ctx = ExecutionContext(session_id="s1", workspace_root=str(tmp_path), approver=approver)
    result = await ex.execute("echo", {"text": "hi"}, ctx)
    assert result.ok and result.content == "hi"
    del ctx, approver
    assert approver_ref() is None, "the executor kept the caller's context"
    assert_idle(ex)
