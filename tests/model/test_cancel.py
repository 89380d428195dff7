"""CancelToken's subscriptions: run in the order added, once; removed ones never run; nothing
kept after the calls that subscribed have ended."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fastgate import (
    CancelToken,
    ErrorCode,
    ExecutionContext,
    ToolExecutor,
    ToolKind,
    ToolRegistry,
    schema,
)
from fastgate import define_tool as tool
from fastgate.model.cancel import CallbackHandle

# A program of operations on one token: ("add",), ("remove", k) removes the k-th handle made
# so far (again, if it was removed already), ("cancel",) cancels (again, if it was already).
_OPS = st.lists(
    st.one_of(
        st.just(("add",)),
        st.tuples(st.just("remove"), st.integers(0, 40)),
        st.just(("cancel",)),
    ),
    max_size=60,
)


def _recorder(calls: list[int], number: int) -> Any:
    return lambda _: calls.append(number)


@given(_OPS)
def test_callbacks_run_once_in_order_unless_removed(ops: list[tuple[Any, ...]]) -> None:
    token = CancelToken()
    calls: list[int] = []
    handles: list[CallbackHandle] = []
    removed: set[int] = set()
    expected: list[int] = []
    cancelled = False
    for op in ops:
        if op[0] == "add":
            number = len(handles)
            handles.append(token.add_callback(_recorder(calls, number)))
            if cancelled:  # added after the cancel: runs at once
                expected.append(number)
        elif op[0] == "remove" and handles:
            index = op[1] % len(handles)
            handles[index].remove()
            removed.add(index)
        elif op[0] == "cancel":
            first = token.cancel("stop")
            assert first is not cancelled
            if not cancelled:
                expected += [n for n in range(len(handles)) if n not in removed]
            cancelled = True
        assert calls == expected
    assert len(calls) == len(set(calls))  # none ran twice


def test_a_raising_callback_does_not_stop_the_others() -> None:
    token = CancelToken()
    seen: list[str] = []

    def boom(_: CancelToken) -> None:
        raise ValueError("boom")

    token.add_callback(lambda _: seen.append("first"))
    token.add_callback(boom)
    token.add_callback(lambda _: seen.append("last"))
    with pytest.raises(ValueError, match="boom"):
        token.cancel()
    assert seen == ["first", "last"]
    assert token.cancelled


def _registry() -> ToolRegistry:
    async def echo(args: dict[str, Any], ctx: Any) -> str:
        await asyncio.sleep(0)
        return str(args["x"])

    registry = ToolRegistry()
    registry.register(
        tool(
            "echo",
            "Echo.",
            schema.Object({"x": schema.Integer()}, required=("x",)),
            echo,
            kind=ToolKind.READ_ONLY,
            parallelism="shared",
            is_concurrency_safe=True,
        )
    )
    return registry


async def test_a_session_token_keeps_no_subscription_of_ended_calls() -> None:
    """Many calls in flight under one session's token (some waiting for a slot): each
    subscribes while it runs or waits, and none is left subscribed once all have ended."""
    from fastgate import ConcurrencyScheduler, SchedulerLimits

    limits = SchedulerLimits(global_limit=8, session_limit=8, max_queue=1000)
    executor = ToolExecutor(_registry(), scheduler=ConcurrencyScheduler(limits))
    token = CancelToken()
    ctx = ExecutionContext(session_id="s", cancel=token)
    try:
        results = await asyncio.gather(
            *(executor.execute("echo", {"x": i}, ctx) for i in range(300))
        )
        assert [r.content for r in results] == [str(i) for i in range(300)]
        assert len(token._callbacks) == 0
        # The token still works for the calls that come after.
        token.cancel("session over")
        late = await executor.execute("echo", {"x": 1}, ctx)
        assert late.error is not None and late.error.code is ErrorCode.ABORTED_BEFORE_DISPATCH
    finally:
        executor.dispose()
