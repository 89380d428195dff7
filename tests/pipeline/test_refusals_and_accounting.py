"""What a call that never ran leaves behind is exact and bounded (SPEC §4, §11, §21): a token
stops a call waiting on a guard; a caller cancelled before launch is recorded as such and
observers hear of it; calls refused before ``execute`` count toward their turn; names no tool
has share one counter; a workspace root no path can have is refused where it is given."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest

from fastgate import (
    CancelToken,
    ErrorCode,
    ExecutionContext,
    PermissionMode,
    ToolKind,
    ToolResult,
)
from fastgate.pipeline import executor as executor_module
from fastgate.pipeline.executor import TURN_LIMIT
from tests.pipeline_kit import NOTHING, assert_idle, echo, executor, tool


async def test_a_cancel_token_stops_a_call_waiting_on_its_guard() -> None:
    ran: list[int] = []
    entered = asyncio.Event()

    async def slow_guard(view: Any) -> str | None:
        entered.set()
        await asyncio.Event().wait()  # never answers: only the token ends the wait
        return None

    ex = executor(tool("t", lambda a, c: ran.append(1), NOTHING), guards=(slow_guard,))
    token = CancelToken()
    call = asyncio.ensure_future(ex.execute("t", {}, ExecutionContext(cancel=token)))
    await entered.wait()
    token.cancel("stop")
    result = await asyncio.wait_for(call, 10)  # the guard's own timeout is 30 s
    assert result.error is not None
    assert result.error.code is ErrorCode.ABORTED_BEFORE_DISPATCH
    assert result.meta.aborted_before_launch
    assert ran == [] and len(ex.history()) == 1
    assert_idle(ex)


@pytest.mark.parametrize("where", ["gate", "slot"])
async def test_a_caller_cancelled_before_launch_is_recorded_and_observed(where: str) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    ran: list[str] = []

    async def hold(args: Any, ctx: Any) -> str:
        started.set()
        await release.wait()
        return "held"

    holder = tool("hold", hold, NOTHING)
    waiter = tool("wait", lambda a, c: ran.append("wait"), NOTHING)
    if where == "gate":  # the exclusive holder keeps the session's gate
        holder = tool("hold", hold, NOTHING, parallelism="exclusive")
        options: dict[str, Any] = {}
    else:  # one slot for the whole process
        from fastgate import ConcurrencyScheduler, SchedulerLimits

        holder = tool("hold", hold, NOTHING, parallelism="shared", is_concurrency_safe=True)
        waiter = tool("wait", lambda a, c: ran.append("wait"), NOTHING, parallelism="shared")
        options = {"scheduler": ConcurrencyScheduler(SchedulerLimits(global_limit=1))}
    ex = executor(holder, waiter, mode=PermissionMode.YOLO, **options)
    observed: list[ToolResult] = []
    ex.on_result(observed.append)

    first = asyncio.ensure_future(ex.execute("hold", {}))
    await started.wait()
    second = asyncio.ensure_future(ex.execute("wait", {}))
    for _ in range(20):  # let it reach the wait
        await asyncio.sleep(0)
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second
    release.set()
    assert (await first).ok

    [aborted] = [r for r in ex.history() if r.meta.tool_name == "wait"]
    assert aborted.error is not None
    assert aborted.error.code is ErrorCode.ABORTED_BEFORE_DISPATCH
    assert aborted.meta.aborted_before_launch, "nothing ran, so no side effect may have happened"
    assert aborted in observed
    assert ran == []
    assert_idle(ex)


async def test_a_caller_cancelled_while_its_body_runs_may_have_side_effects() -> None:
    started = asyncio.Event()

    async def body(args: Any, ctx: Any) -> str:
        started.set()
        await asyncio.Event().wait()
        return "never"

    ex = executor(tool("t", body, NOTHING))
    call = asyncio.ensure_future(ex.execute("t", {}))
    await started.wait()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    [aborted] = ex.history()
    assert aborted.error is not None and aborted.error.code is ErrorCode.ABORTED
    assert not aborted.meta.aborted_before_launch


def _counting(ran: list[int]) -> Callable[[Any, Any], Any]:
    def body(args: Any, ctx: Any) -> Any:
        ran.append(1)
        return args["text"]

    return body


@pytest.mark.parametrize("refused_first", [10, 1, TURN_LIMIT])
async def test_calls_refused_before_execute_count_toward_their_turn(refused_first: int) -> None:
    ran: list[int] = []
    ex = executor(tool("echo", _counting(ran)))
    ctx = ExecutionContext(turn_id="turn-1")
    for _ in range(refused_first):
        refused = ex.refuse("echo", ErrorCode.INVALID_ARGS, "unreadable JSON", ctx)
        assert refused.error is not None and refused.error.code is ErrorCode.INVALID_ARGS
    results = [await ex.execute("echo", {"text": "x"}, ctx) for _ in range(TURN_LIMIT)]
    allowed = TURN_LIMIT - refused_first
    assert len(ran) == allowed
    assert all(r.ok for r in results[:allowed])
    for late in results[allowed:]:
        assert late.error is not None and late.error.code is ErrorCode.RESOURCE_EXHAUSTED
        assert late.error.details["reason"] == "turn_limit"
    # A refusal past the limit is answered as any later call is.
    past = ex.refuse("echo", ErrorCode.INVALID_ARGS, "unreadable JSON", ctx)
    assert past.error is not None and past.error.code is ErrorCode.RESOURCE_EXHAUSTED


async def test_arguments_that_are_not_json_count_toward_their_turn() -> None:
    ran: list[int] = []
    ex = executor(tool("echo", _counting(ran)))
    ctx = ExecutionContext(turn_id="turn-1")
    for _ in range(TURN_LIMIT):
        bad = await ex.execute("echo", {"text": object()}, ctx)
        assert bad.error is not None and bad.error.code is ErrorCode.INVALID_ARGS
    late = await ex.execute("echo", {"text": "x"}, ctx)
    assert late.error is not None and late.error.code is ErrorCode.RESOURCE_EXHAUSTED
    assert ran == []


@pytest.mark.parametrize("length", [10, 64, 100_000])
async def test_names_no_tool_has_share_one_counter_and_are_cut(length: int) -> None:
    ex = executor(echo(), history_limit=10)
    for i in range(50):
        name = f"{i:03d}" + "n" * (length - 3)
        result = await ex.execute(name, {"text": "x"})
        assert result.error is not None and result.error.code is ErrorCode.UNKNOWN_TOOL
        assert len(result.meta.tool_name) <= 100
        assert len(str(result.durable())) < 10_000
    assert (await ex.execute("echo", {"text": "x"})).ok
    unknown_tools = executor_module.UNKNOWN_TOOLS
    stats = ex.stats()
    assert set(stats) == {unknown_tools, "echo"}
    assert stats[unknown_tools].calls == 50
    # A known tool refused before lookup still counts under its own name.
    await ex.execute("echo", ["not", "an", "object"])
    assert ex.stats()["echo"].calls == 2


@pytest.mark.parametrize("root", ["/tmp/a\x00b", "relative\x00dir"])
def test_a_workspace_root_holding_nul_is_refused_where_it_is_given(root: str) -> None:
    with pytest.raises(ValueError, match="NUL"):
        ExecutionContext(session_id="s", workspace_root=root)
    with pytest.raises(ValueError, match="NUL"):
        executor(echo(), context_defaults={"workspace_root": root})


# -- a caller cancelled between the body's launch and its first step ----------------------------


async def test_a_body_cancelled_before_its_first_step_counts_as_nothing_run(
    tmp_path: Path,
) -> None:
    """The caller is cancelled as the body's task is created: that task is cancelled before it
    ever runs, so the call is ``ABORTED_BEFORE_DISPATCH`` (nothing ran), and a keyed call's key
    is free for the next call, which runs."""
    from fastgate.durable.sqlite import SqliteToolUseStore

    ran: list[str] = []
    loop = asyncio.get_running_loop()
    caller: list[asyncio.Task[Any]] = []
    armed = [False]
    made: list[asyncio.Task[Any]] = []
    default_factory = loop.get_task_factory()

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        if default_factory is not None:
            task = cast("asyncio.Task[Any]", default_factory(loop, coro, **kwargs))
        else:
            task = asyncio.Task(coro, loop=loop, **kwargs)
        # (a keyed call's lease renewal starts first: not the body)
        if armed[0] and task is not caller[0] and "renew" not in repr(coro):
            armed[0] = False
            made.append(task)  # (named once made: the body's, as the test checks)
            caller[0].cancel()
        return task

    async with SqliteToolUseStore(str(tmp_path / "journal.db")) as store:
        ex = executor(
            # (retry-safe: its body runs through the attempts loop, which marks its first step;
            # a body run as the task's own coroutine counts as started, the cautious side)
            tool("w", lambda a, c: ran.append("w"), NOTHING, kind=ToolKind.WRITE, retry_safe=True),
            store=store,
            mode=PermissionMode.YOLO,
        )
        ctx = ExecutionContext("s", idempotency_key="k")
        await store.load("warm")
        loop.set_task_factory(factory)
        try:
            for spelling in ("keyed", "plain"):
                call = asyncio.ensure_future(
                    ex.execute("w", {}, ctx if spelling == "keyed" else ExecutionContext("s"))
                )
                caller[:] = [call]
                await asyncio.sleep(0)  # the call is under way: its claim and stages run
                armed[0] = True
                with pytest.raises(asyncio.CancelledError):
                    await call
                assert made[-1].get_name() == "fastgate:w", made[-1]  # the body's own task
        finally:
            loop.set_task_factory(default_factory)
        assert ran == []
        codes = [r.error.code for r in ex.history() if r.error is not None]
        assert codes == [ErrorCode.ABORTED_BEFORE_DISPATCH] * 2
        again = await ex.execute("w", {}, ctx)  # the key is free: this call runs
        assert again.ok and not again.meta.replayed and ran == ["w"]
        assert_idle(ex)
