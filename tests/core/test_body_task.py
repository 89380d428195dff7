"""The body's eager task (``fastgate._core`` ``start_body``): a task whose first step runs inside
the call that makes it.

The oracle is CPython's own Python task (``asyncio.tasks._PyTask``) with its first step run at
creation, as ``Task(eager_start=True)`` does from Python 3.12 on: random body programs and
random outside events (cancels with messages, futures resolved, failed or cancelled) must leave
the same trace and end the same way in both, in the pure and the compiled module.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import importlib
from collections.abc import Callable, Coroutine
from types import ModuleType
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastgate import _core
from fastgate._core import _task_py


def _implementations() -> list[ModuleType]:
    found = [_task_py]
    try:
        compiled = importlib.import_module("fastgate._core._task_c")
    except ImportError:
        if _core.REQUIRE_EXTENSIONS:
            raise
    else:
        found.append(compiled)
    return found


IMPLEMENTATIONS = pytest.mark.parametrize(
    "impl", _implementations(), ids=lambda m: m.__name__.rpartition(".")[2]
)


class _ReferenceEagerTask(asyncio.tasks._PyTask):  # type: ignore[misc,name-defined]
    """CPython's Python task, its first step run at once in the maker's call."""

    def __init__(self, coro: Coroutine[Any, Any, Any], loop: asyncio.AbstractEventLoop) -> None:
        asyncio.futures._PyFuture.__init__(self, loop=loop)  # type: ignore[attr-defined]
        self._name = "fastgate:reference"
        self._num_cancels_requested = 0
        self._must_cancel = False
        self._fut_waiter = None
        self._coro = coro
        self._context = contextvars.copy_context()
        asyncio.tasks._register_task(self)
        caller = asyncio.current_task(loop)
        if caller is not None:
            asyncio.tasks._leave_task(loop, caller)
        try:
            self._context.run(self._Task__step)
        finally:
            if caller is not None:
                asyncio.tasks._enter_task(loop, caller)


def _reference(coro: Coroutine[Any, Any, Any], loop: asyncio.AbstractEventLoop) -> Any:
    return _ReferenceEagerTask(coro, loop)


def _ours(impl: ModuleType) -> Callable[[Coroutine[Any, Any, Any], Any], Any]:
    return lambda coro, loop: impl.start_body(coro, loop, "fastgate:reference")


# -- random programs ----------------------------------------------------------------------------

FUTURES = 3
_wait = st.tuples(
    st.just("wait"),
    st.sampled_from(["sleep0", *range(FUTURES)]),
    st.booleans(),  # swallow what the wait raised
    st.booleans(),  # and uncancel the task when that was a cancellation
)
_op = st.one_of(
    _wait,
    st.tuples(st.just("self_cancel"), st.sampled_from([None, "mine"])),
    st.tuples(st.just("return"), st.integers(0, 9)),
    st.tuples(st.just("raise"), st.sampled_from(["a", "b"])),
)
PROGRAMS = st.lists(_op, max_size=8)
_event = st.one_of(
    st.tuples(st.just("cancel"), st.sampled_from([None, "outside"])),
    st.tuples(
        st.just("resolve"),
        st.integers(0, FUTURES - 1),
        st.sampled_from(["value", "error", "cancel"]),
    ),
)
SCHEDULES = st.lists(st.lists(_event, max_size=2), max_size=8)


def _seen(error: BaseException) -> tuple[Any, ...]:
    return (type(error).__name__, error.args)


async def _body(program: list[tuple[Any, ...]], futures: list[Any], trace: list[Any]) -> Any:
    me = asyncio.current_task()
    assert me is not None
    for op in program:
        trace.append(("step", asyncio.current_task() is me, me.cancelling()))
        if op[0] == "wait":
            _, source, swallow, uncancel = op
            try:
                if source == "sleep0":
                    await asyncio.sleep(0)
                    trace.append(("slept",))
                else:
                    trace.append(("got", await futures[source]))
            except BaseException as error:
                trace.append(("raised", *_seen(error), me.cancelling()))
                if not swallow:
                    raise
                if uncancel and isinstance(error, asyncio.CancelledError):
                    trace.append(("uncancel", me.uncancel()))
        elif op[0] == "self_cancel":
            trace.append(("self_cancel", me.cancel(op[1])))
        elif op[0] == "return":
            return op[1]
        else:
            raise ValueError(op[1])
    return "end"


async def _drive(
    make: Callable[[Coroutine[Any, Any, Any], Any], Any],
    program: list[tuple[Any, ...]],
    schedule: list[list[tuple[Any, ...]]],
) -> list[Any]:
    loop = asyncio.get_running_loop()
    futures = [loop.create_future() for _ in range(FUTURES)]
    trace: list[Any] = []
    caller = asyncio.current_task()
    task = make(_body(program, futures, trace), loop)
    trace.append(("made", task.done(), asyncio.current_task() is caller))
    for events in schedule:
        for event in events:
            if event[0] == "cancel":
                trace.append(("cancel", task.cancel(event[1]), task.cancelling()))
                continue
            future = futures[event[1]]
            if future.done():
                continue
            if event[2] == "value":
                future.set_result(event[1])
            elif event[2] == "error":
                future.set_exception(KeyError(event[1]))
            else:
                future.cancel("resolved by cancel")
        await asyncio.sleep(0)
        trace.append(("turn", task.done()))
    for future in futures:
        if not future.done():
            future.set_result("late")
        elif not future.cancelled():
            future.exception()  # seen: no "never retrieved" log
    turns = 0
    while not task.done():
        turns += 1
        assert turns < 100, "the body never ended"
        await asyncio.sleep(0)
    if task.cancelled():
        try:
            task.result()
        except asyncio.CancelledError as error:
            trace.append(("ended cancelled", error.args))
    elif task.exception() is not None:
        trace.append(("ended raising", *_seen(task.exception())))
    else:
        trace.append(("ended returning", task.result()))
    trace.append(("cancelling at the end", task.cancelling()))
    return trace


@IMPLEMENTATIONS
@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(program=PROGRAMS, schedule=SCHEDULES)
def test_steps_and_cancellation_match_the_reference_task(
    runner: asyncio.Runner, impl: ModuleType, program: list[Any], schedule: list[Any]
) -> None:
    expected = runner.run(_drive(_reference, program, schedule))
    assert runner.run(_drive(_ours(impl), program, schedule)) == expected


# -- what code inside a body relies on ----------------------------------------------------------


@IMPLEMENTATIONS
async def test_the_body_runs_as_its_own_named_task_before_and_after_it_waits(
    impl: ModuleType,
) -> None:
    loop = asyncio.get_running_loop()
    caller = asyncio.current_task()
    seen: list[Any] = []

    async def body() -> str:
        seen.append(asyncio.current_task())
        await asyncio.sleep(0)
        seen.append(asyncio.current_task())
        return "ok"

    task = impl.start_body(body(), loop, "fastgate:named")
    assert asyncio.current_task() is caller  # the maker is current again
    assert seen == [task] and not task.done()
    assert task in asyncio.all_tasks()  # it waits: anyone can see it, and cancel it
    assert await task == "ok"
    assert seen == [task, task]
    assert task.get_name() == "fastgate:named" and "fastgate:named" in repr(task)


@IMPLEMENTATIONS
async def test_a_body_that_never_waits_is_done_when_made_and_never_listed(
    impl: ModuleType,
) -> None:
    loop = asyncio.get_running_loop()

    async def body() -> str:
        return "at once"

    task = impl.start_body(body(), loop, "fastgate:quick")
    assert task.done() and task.result() == "at once"
    assert task not in asyncio.all_tasks()


@IMPLEMENTATIONS
async def test_the_body_has_its_own_copy_of_the_callers_context(impl: ModuleType) -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    var.set("caller's")
    loop = asyncio.get_running_loop()
    seen: list[str] = []

    async def body() -> None:
        seen.append(var.get())
        var.set("body's")
        await asyncio.sleep(0)
        seen.append(var.get())

    await impl.start_body(body(), loop, "fastgate:ctx")
    assert seen == ["caller's", "body's"]
    assert var.get() == "caller's"


@IMPLEMENTATIONS
async def test_a_timeout_entered_in_the_first_step_stops_only_the_body(impl: ModuleType) -> None:
    loop = asyncio.get_running_loop()
    never: asyncio.Future[None] = loop.create_future()

    async def body() -> str:
        try:
            async with asyncio.timeout(0.01):
                await never
        except TimeoutError:
            return "timed out"
        return "not reached"

    task = impl.start_body(body(), loop, "fastgate:timeout")
    assert await task == "timed out"
    assert task.cancelling() == 0
    me = asyncio.current_task()
    assert me is not None and me.cancelling() == 0  # the caller was never cancelled


@IMPLEMENTATIONS
async def test_a_task_group_and_an_anyio_scope_in_the_body_work_across_waits(
    impl: ModuleType,
) -> None:
    loop = asyncio.get_running_loop()

    async def failing() -> None:
        await asyncio.sleep(0)
        raise KeyError("child")

    async def body() -> list[str]:
        seen = []
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(failing())
                await asyncio.sleep(10)
        except ExceptionGroup as group_error:
            seen.append(repr(group_error.exceptions[0]))
        with anyio.move_on_after(0.01) as scope:
            await anyio.sleep(10)
        seen.append(f"moved on: {scope.cancelled_caught}")
        with anyio.CancelScope() as outer:
            outer.cancel()
            await anyio.lowlevel.checkpoint()
        seen.append(f"scope cancelled: {outer.cancelled_caught}")
        return seen

    task = impl.start_body(body(), loop, "fastgate:groups")
    assert await task == ["KeyError('child')", "moved on: True", "scope cancelled: True"]


@IMPLEMENTATIONS
async def test_a_raised_error_keeps_the_tools_frames_and_leaves_no_cycle(impl: ModuleType) -> None:
    loop = asyncio.get_running_loop()

    async def body(wait: bool) -> None:
        if wait:
            await asyncio.sleep(0)
        raise ValueError("the tool's")

    for wait in (False, True):
        gc.collect()
        gc.disable()
        try:
            task = impl.start_body(body(wait), loop, "fastgate:raises")
            with pytest.raises(ValueError, match="the tool's") as caught:
                await task
            tb = caught.value.__traceback__
            names = []
            while tb is not None:
                names.append(tb.tb_frame.f_code.co_name)
                tb = tb.tb_next
            assert "body" in names
            assert not {"_step", "_advance", "_wake"} & set(names)
            del task, caught, tb
            assert gc.collect() == 0
        finally:
            gc.enable()


@IMPLEMENTATIONS
async def test_a_loop_stopper_in_the_first_step_reaches_the_maker_with_its_task_restored(
    impl: ModuleType,
) -> None:
    loop = asyncio.get_running_loop()
    caller = asyncio.current_task()

    async def body() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        impl.start_body(body(), loop, "fastgate:stop")
    assert asyncio.current_task() is caller


@IMPLEMENTATIONS
async def test_a_body_started_inside_a_body_runs_as_its_own_task(impl: ModuleType) -> None:
    loop = asyncio.get_running_loop()
    seen: list[str] = []

    async def inner() -> str:
        task = asyncio.current_task()
        assert task is not None
        seen.append(task.get_name())
        await asyncio.sleep(0)
        return "inner"

    async def outer() -> str:
        nested = impl.start_body(inner(), loop, "fastgate:inner")
        task = asyncio.current_task()
        assert task is not None
        seen.append(task.get_name())
        return str(await nested)

    assert await impl.start_body(outer(), loop, "fastgate:outer") == "inner"
    assert seen == ["fastgate:inner", "fastgate:outer"]


@IMPLEMENTATIONS
async def test_a_bad_yield_fails_the_body_with_a_clear_error(impl: ModuleType) -> None:
    loop = asyncio.get_running_loop()

    class Odd:
        def __await__(self) -> Any:
            yield "not a future"

    async def body() -> None:
        await Odd()

    with pytest.raises(RuntimeError, match="bad yield"):
        await impl.start_body(body(), loop, "fastgate:odd")


@IMPLEMENTATIONS
async def test_only_the_coroutine_settles_the_task(impl: ModuleType) -> None:
    loop = asyncio.get_running_loop()

    async def body() -> None:
        await asyncio.sleep(0)

    task = impl.start_body(body(), loop, "fastgate:settle")
    with pytest.raises(RuntimeError):
        task.set_result(1)
    with pytest.raises(RuntimeError):
        task.set_exception(ValueError())
    await task
