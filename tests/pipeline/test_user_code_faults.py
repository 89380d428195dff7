"""User code that raises what it should not, or hands back what cannot be recorded, still gets
one result, one history entry and a durable record (SPEC §4, §9.3, §21):

- a ``CancelledError`` raised by a callback when nobody cancelled the caller is the callback's
  failure, never a cancellation of the call;
- a body raising a ``BaseException`` of its own (or ``GeneratorExit``) is a ``TOOL_ERROR``;
- content and details that are not JSON, or are huge, are bounded and recorded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fastgate import (
    ErrorCode,
    ExecutionContext,
    Failure,
    Output,
    PermissionMode,
    SqliteToolUseStore,
    ToolKind,
)
from tests.pipeline_kit import NOTHING, PATH, assert_idle, executor, tool


def _cancelled_future_result(*_: Any) -> Any:
    """What an observer does when it reads a future someone cancelled."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()
    future.cancel()
    return future.result()


async def test_a_result_observer_raising_cancelled_error_changes_nothing() -> None:
    ex = executor(tool("echo", lambda a, c: a["text"]))
    ex.on_result(_cancelled_future_result)
    result = await ex.execute("echo", {"text": "hi"})
    assert result.ok and result.content == "hi"
    assert [entry.ok for entry in ex.history()] == [True]
    assert_idle(ex)


async def test_a_file_change_observer_raising_cancelled_error_changes_nothing(
    tmp_path: Path,
) -> None:
    write = tool("write", lambda a, c: "written", PATH, kind=ToolKind.WRITE)
    ex = executor(write, workspace=tmp_path, mode=PermissionMode.YOLO)
    ex.on_files_changed(_cancelled_future_result)
    result = await ex.execute("write", {"file_path": "a.txt"})
    assert result.ok, result.error
    assert len(ex.history()) == 1
    assert_idle(ex)


async def test_finalize_content_raising_cancelled_error_keeps_the_content() -> None:
    ex = executor(tool("echo", lambda a, c: a["text"], finalize_content=_cancelled_future_result))
    result = await ex.execute("echo", {"text": "hi"})
    assert result.ok and result.content == "hi"
    assert len(ex.history()) == 1


async def test_a_renderer_raising_cancelled_error_is_a_render_failure() -> None:
    echo = tool("echo", lambda a, c: a["text"], output=Output(render=_cancelled_future_result))
    ex = executor(echo)
    result = await ex.execute("echo", {"text": "hi"})
    assert result.error is not None and "CancelledError" in result.error.message
    assert len(ex.history()) == 1
    assert_idle(ex)


@pytest.mark.parametrize("option", ["parallelism", "is_concurrency_safe", "paths"])
async def test_classifiers_raising_cancelled_error_fail_closed(option: str, tmp_path: Path) -> None:
    ran: list[int] = []
    seen = tool("t", lambda a, c: ran.append(1), NOTHING, **{option: _cancelled_future_result})
    ex = executor(seen, workspace=tmp_path, mode=PermissionMode.YOLO)
    result = await ex.execute("t", {})
    if option == "paths":  # the tool's paths cannot be known: it does not run
        assert result.error is not None and result.error.code is ErrorCode.INVALID_ARGS
        assert ran == []
    else:  # exclusive, not concurrency safe: it runs, alone
        assert result.ok, result.error
    assert len(ex.history()) == 1
    assert_idle(ex)


async def test_a_guard_raising_cancelled_error_denies_the_call() -> None:
    ran: list[int] = []

    async def guard(view: Any) -> str | None:
        return _cancelled_future_result()  # type: ignore[no-any-return]

    ex = executor(tool("t", lambda a, c: ran.append(1), NOTHING), guards=(guard,))
    result = await ex.execute("t", {})
    assert result.error is not None and result.error.code is ErrorCode.PERMISSION_DENIED
    assert "CancelledError" in result.error.message
    assert ran == [] and len(ex.history()) == 1
    assert_idle(ex)


class ToolsOwnBaseException(BaseException):
    pass


def _raises(exception: BaseException) -> Callable[..., Any]:
    def body(args: Any, ctx: Any) -> Any:
        raise exception

    return body


@pytest.mark.parametrize(
    ("exception", "retry_safe"),
    [
        (ToolsOwnBaseException("x"), False),
        (ToolsOwnBaseException("x"), True),
        # (Python 3.11 re-raises a GeneratorExit that a task's awaiter caught in every
        # coroutine awaiting it, so only a body run through its attempts can report it.)
        (GeneratorExit(), True),
    ],
    ids=["own", "own-retry-safe", "generator-exit-retry-safe"],
)
async def test_a_body_raising_a_base_exception_is_a_tool_error(
    exception: BaseException, retry_safe: bool
) -> None:
    ex = executor(tool("t", _raises(exception), NOTHING, retry_safe=retry_safe))
    result = await ex.execute("t", {})
    assert result.error is not None and result.error.code is ErrorCode.TOOL_ERROR
    assert type(exception).__name__ in result.error.message
    assert [entry.meta.execution_id for entry in ex.history()] == [result.meta.execution_id]
    assert_idle(ex)


async def test_a_sync_body_raising_a_base_exception_in_its_thread_is_a_tool_error() -> None:
    def execute(args: Any, ctx: Any) -> Any:
        raise ToolsOwnBaseException("from the thread")

    from fastgate import define_tool

    ex = executor(define_tool("t", "t", NOTHING, execute, kind=ToolKind.READ_ONLY))
    result = await ex.execute("t", {})
    assert result.error is not None and result.error.code is ErrorCode.TOOL_ERROR
    assert len(ex.history()) == 1
    assert_idle(ex)


class Opaque:
    """Not JSON: no encoder knows it."""


HUGE = "x" * 3_000_000
INT_KEYS: Any = {1: "one"}


@pytest.mark.parametrize(
    ("case", "options", "body"),
    [
        ("block not JSON", {"output": Output(render=lambda v: [Opaque()])}, lambda a, c: "v"),
        (
            "block holding a value not JSON",
            {"output": Output(render=lambda v: [{"type": "text", "text": "t", "o": Opaque()}])},
            lambda a, c: "v",
        ),
        ("finalize_content not content", {"finalize_content": lambda r: Opaque()}, None),
        ("finalize_content a number", {"finalize_content": lambda r: 5}, None),
        ("finalize_content blocks not JSON", {"finalize_content": lambda r: [Opaque()]}, None),
        ("failure details not JSON", {}, lambda a, c: Failure("no", details={"x": Opaque()})),
        ("failure details huge", {}, lambda a, c: Failure("no", details={"blob": HUGE})),
        ("failure details keys not text", {}, lambda a, c: Failure("no", details=INT_KEYS)),
    ],
)
async def test_what_cannot_be_recorded_is_bounded_and_recorded(
    tmp_path: Path, case: str, options: dict[str, Any], body: Callable[..., Any] | None
) -> None:
    store = await SqliteToolUseStore.open(str(tmp_path / "journal.db"))
    try:
        ex = executor(tool("t", body or (lambda a, c: "v"), NOTHING, **options), store=store)
        result = await ex.execute("t", {}, ExecutionContext(session_id="s1"))
        content = result.content
        assert isinstance(content, str) or all(
            isinstance(block, (str, dict)) for block in content
        ), (case, content)
        durable = result.durable()  # encodes
        assert len(durable.content if isinstance(durable.content, str) else str(content)) < 200_000
        if result.error is not None:
            assert len(str(result.error.details)) < 200_000, case
        [stored] = await store.load("s1")
        assert stored.status == "completed", (case, stored)
        assert len(ex.history()) == 1
        ex.dispose()
    finally:
        await store.close()
