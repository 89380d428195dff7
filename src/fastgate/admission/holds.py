"""What one call holds (gate passage, scheduler slot, file locks) and how it is let go.

Our admission contexts do all their work synchronously in ``__aexit__`` (it returns an awaitable
that is already complete), so a hold can also be released from a done-callback: that is how a
body that ignored cancellation keeps its slot and locks until it really ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Final

from fastgate import _core
from fastgate.admission.protocol import AsyncHold

# What an admission context's __aenter__ returns when it entered at once. Final: compiled, a C
# static rather than two lookups (module, attribute) on every enter.
_READY: Final = _core.READY


class Aborted(Exception):
    """The caller's cancel token fired while the call was waiting (before its body started)."""


class Holds:
    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held: list[AsyncHold] = []

    def enter(self, hold: AsyncHold, cancel: Any) -> Awaitable[None]:
        """``await holds.enter(hold, cancel)``: enter ``hold``. Entered at once, the awaitable is
        already complete (no coroutine made); a wait is abandoned, and ``Aborted`` raised, if
        ``cancel`` fires."""
        waiting = hold.__aenter__()
        if waiting is _READY:
            self._held.append(hold)
            return waiting
        return self._wait(hold, waiting, cancel)

    async def _wait(self, hold: AsyncHold, waiting: Awaitable[None], cancel: Any) -> None:
        if cancel is not None:
            await until_cancelled(waiting, cancel, undo=lambda _: _exit(hold))
        else:
            await waiting
        self._held.append(hold)

    def add(self, hold: AsyncHold) -> None:
        """Record a hold entered elsewhere (``RunContext.lock_paths``)."""
        self._held.append(hold)

    def leave(self, hold: AsyncHold) -> None:
        """Release ``hold`` alone, keeping the others."""
        self._held.remove(hold)
        _exit(hold)

    def release(self) -> None:
        """Release everything, last entered first."""
        held, self._held = self._held, []
        for hold in reversed(held):
            hold.__aexit__(None, None, None)  # done at once, see the module docstring

    def release_when_done(self, body: asyncio.Future[Any]) -> None:
        """Keep everything until ``body`` (a task that ignored cancellation) really ends."""
        held, self._held = self._held, []

        def release(_: object) -> None:
            for hold in reversed(held):
                _exit(hold)

        body.add_done_callback(release)

    def __len__(self) -> int:
        return len(self._held)


def _exit(hold: AsyncHold) -> None:
    # Completed synchronously; the returned awaitable is already done (see module docstring).
    hold.__aexit__(None, None, None)


async def _await(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


async def until_cancelled(
    awaitable: Awaitable[Any], cancel: Any, *, undo: Callable[[Any], None] | None = None
) -> Any:
    """Await ``awaitable`` unless the token ``cancel`` fires first; then raise ``Aborted``.

    If the awaitable completed anyway while being cancelled (it caught the cancellation),
    ``undo(result)`` gives back what it got. If the awaiting task itself is cancelled, the
    wait is cancelled too and ``CancelledError`` propagates.
    """
    if cancel.cancelled:
        _close(awaitable)
        raise Aborted
    task = asyncio.current_task()
    if task is None:  # driven by hand, outside any task: wait for it in one of its own
        return await _until_cancelled_apart(awaitable, cancel, undo)
    # The token fires by cancelling this task where it waits: what the awaitable got meanwhile
    # it gives back itself, as when its caller is cancelled (a scheduler's or a lock's wait
    # does). No second task and no asyncio.wait: a call queued behind a cap with a token (every
    # call from a program, every call of the gateway) waits at the price of one without.
    loop = asyncio.get_running_loop()
    interruption = _Interruption(task)
    link = cancel.add_callback(lambda _: loop.call_soon_threadsafe(interruption.fire))
    try:
        result = await awaitable
    except asyncio.CancelledError:
        if interruption.fired and task.uncancel() == 0:
            raise Aborted from None
        raise
    except BaseException:
        if interruption.fired:  # it turned the cancellation into an error of its own
            task.uncancel()
            raise Aborted from None
        raise
    finally:
        interruption.over = True
        link.remove()
    if interruption.fired:  # it caught the cancellation and went on to an end of its own
        task.uncancel()
        if undo is not None:
            undo(result)
        raise Aborted
    return result


class _Interruption:
    __slots__ = ("fired", "over", "task")

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.task = task
        self.fired = False
        self.over = False  # the wait has ended: the task has moved on, never cancel it

    def fire(self) -> None:
        if not self.over and not self.fired:
            self.fired = True
            self.task.cancel()


async def _until_cancelled_apart(
    awaitable: Awaitable[Any], cancel: Any, undo: Callable[[Any], None] | None
) -> Any:
    loop = asyncio.get_running_loop()
    inner = asyncio.ensure_future(_await(awaitable))
    fired: asyncio.Future[None] = loop.create_future()
    link = cancel.add_callback(lambda _: loop.call_soon_threadsafe(_resolve, fired))
    try:
        await asyncio.wait((inner, fired), return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        if not inner.done():
            inner.cancel()
        elif not inner.cancelled() and inner.exception() is None and undo is not None:
            undo(inner.result())  # it got what it waited for just as its caller went away
        raise
    finally:
        link.remove()
        fired.cancel()
    if inner.done():
        return inner.result()
    inner.cancel()
    await asyncio.wait((inner,))
    if not inner.cancelled() and inner.exception() is None and undo is not None:
        undo(inner.result())
    raise Aborted


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _close(awaitable: Awaitable[Any]) -> None:
    close = getattr(awaitable, "close", None)
    if close is not None:
        close()
