"""A wait a cancel token may end (``until_cancelled``, ``Holds.enter``): the token ends it with
``Aborted`` and nothing is kept, whenever it fires; the task's own cancellation still reaches
it; a token firing after the wait is over changes nothing."""

from __future__ import annotations

import asyncio
import inspect
import threading
from typing import Any

import pytest

from fastgate import CancelToken, ConcurrencyScheduler, SchedulerLimits, ToolKind
from fastgate.admission.holds import Aborted, Holds, until_cancelled

W = ToolKind.WRITE


def _scheduler() -> ConcurrencyScheduler:
    return ConcurrencyScheduler(SchedulerLimits(1, 1, {W: 1}))


async def _turns(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def _queued_behind_a_holder(
    scheduler: ConcurrencyScheduler, token: CancelToken
) -> tuple[Any, asyncio.Task[None]]:
    """A slot held by one caller, and a task waiting for the next one under ``token``."""
    held = scheduler.slot("first", W)
    await held.__aenter__()
    holds = Holds()

    async def wait() -> None:
        await holds.enter(scheduler.slot("second", W), token)
        holds.release()

    waiter = asyncio.create_task(wait())
    await _turns()
    assert scheduler.stats().queued == 1
    return held, waiter


async def test_a_token_fired_while_queued_aborts_and_leaves_the_queue() -> None:
    scheduler, token = _scheduler(), CancelToken()
    held, waiter = await _queued_behind_a_holder(scheduler, token)
    token.cancel("the caller went away")
    with pytest.raises(Aborted):
        await waiter
    assert scheduler.stats().queued == 0
    await held.__aexit__(None, None, None)
    assert scheduler.stats().in_flight == 0


async def test_a_token_fired_as_the_slot_is_granted_passes_the_slot_on() -> None:
    scheduler, token = _scheduler(), CancelToken()
    held, waiter = await _queued_behind_a_holder(scheduler, token)
    token.cancel("too late")  # the token's word reaches the loop in its next turn...
    await held.__aexit__(None, None, None)  # ...in which the waiter also finds its slot
    with pytest.raises(Aborted):
        await waiter
    stats = scheduler.stats()
    assert stats.in_flight == 0 and stats.queued == 0
    async with scheduler.slot("third", W):  # the slot is free again
        pass


async def test_a_token_fired_from_another_thread_aborts_the_wait() -> None:
    scheduler, token = _scheduler(), CancelToken()
    held, waiter = await _queued_behind_a_holder(scheduler, token)
    thread = threading.Thread(target=token.cancel, args=("from a thread",))
    thread.start()
    thread.join()
    with pytest.raises(Aborted):
        await waiter
    await held.__aexit__(None, None, None)
    assert scheduler.stats().in_flight == 0


async def test_the_tasks_own_cancellation_is_not_turned_into_aborted() -> None:
    scheduler, token = _scheduler(), CancelToken()
    held, waiter = await _queued_behind_a_holder(scheduler, token)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert scheduler.stats().queued == 0
    # Both at once: the task's own cancellation wins (its caller asked for it).
    second_token = CancelToken()
    _, both = await _queued_behind_a_holder(_scheduler(), second_token)
    both.cancel()
    second_token.cancel("and the token")
    with pytest.raises(asyncio.CancelledError):
        await both
    await held.__aexit__(None, None, None)


async def test_a_token_fired_after_the_wait_does_not_cancel_what_follows() -> None:
    token = CancelToken()
    future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    after = asyncio.Event()

    async def wait_then_more() -> str:
        got = await until_cancelled(future, token)
        token.cancel("after the wait")  # the wait is over: this must not reach the task
        await _turns()
        after.set()
        return str(got)

    task = asyncio.create_task(wait_then_more())
    await _turns()
    future.set_result("value")
    assert await task == "value"
    assert after.is_set() and task.cancelling() == 0


async def test_an_awaitable_that_catches_the_cancellation_is_undone_and_aborted() -> None:
    token = CancelToken()
    undone: list[str] = []
    started = asyncio.Event()

    async def stubborn() -> str:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            pass  # goes on to an end of its own
        return "got it anyway"

    async def wait() -> None:
        await until_cancelled(stubborn(), token, undo=undone.append)

    task = asyncio.create_task(wait())
    await started.wait()
    token.cancel("stop")
    with pytest.raises(Aborted):
        await task
    assert undone == ["got it anyway"]
    assert task.cancelling() == 0


async def test_an_awaitable_that_turns_the_cancellation_into_an_error_is_aborted() -> None:
    token = CancelToken()
    started = asyncio.Event()

    async def converts() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise RuntimeError("stopped") from None

    async def wait() -> None:
        await until_cancelled(converts(), token)

    task = asyncio.create_task(wait())
    await started.wait()
    token.cancel("stop")
    with pytest.raises(Aborted):
        await task
    assert task.cancelling() == 0


async def test_a_token_already_fired_closes_the_awaitable_unstarted() -> None:
    token = CancelToken()
    token.cancel("before")
    ran: list[str] = []

    async def never() -> None:
        ran.append("ran")

    awaitable = never()
    with pytest.raises(Aborted):
        await until_cancelled(awaitable, token)
    assert ran == [] and inspect.getcoroutinestate(awaitable) == "CORO_CLOSED"
