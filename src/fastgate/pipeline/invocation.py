"""Invocation: run a tool body in its own task with a deadline, cancellation and safe retries
(SPEC §9).

The body's signal (``RunContext.signal``) is the caller's token fused with the deadline. When
either fires, the body task is cancelled and given ``cancel_grace`` seconds to settle. A body
that ignores cancellation past that is reported as still running: the caller gets its
``TIMEOUT``/``ABORTED`` result, and whatever the call holds (slot, locks, gate) is released only
when the body really ends (``Outcome.runaway``).

Sync tools run in a worker thread. Python cannot stop a thread, so they can only observe
``signal``; the caller still gets its result after the grace period.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import inspect
from collections.abc import Callable, Coroutine
from typing import Any, Final

from fastgate._core import start_body
from fastgate.admission.deadlines import Deadlines, Expiring
from fastgate.model.cancel import CancelToken
from fastgate.model.results import Failure
from fastgate.pipeline.run_context import RunContext
from fastgate.tools import ToolDefinition

RETRY_ERRNOS: Final = frozenset({errno.EBUSY, errno.EAGAIN, errno.EMFILE, errno.ENFILE})
# Seconds before the 2nd and 3rd attempt. Not Final: mypyc left a Final tuple of floats unset.
BACKOFF: tuple[float, ...] = (0.2, 0.4)


class _Deadline:
    """The reason a signal carries when the deadline fired."""

    def __repr__(self) -> str:
        return "deadline"


DEADLINE: Final = _Deadline()

_deadlines: Deadlines | None = None  # those of the loop that last ran a call with a budget
_FAILURE: Final = Failure
_running_loop: Final = asyncio.get_running_loop  # every call: a C static, not two lookups
_start_body: Final = start_body
# A body raising these stops the event loop as asyncio means them to; any other exception of
# the body (a BaseException subclass of its own, a GeneratorExit) is the tool's error.
_LOOP_STOPPERS: Final = (KeyboardInterrupt, SystemExit)

# Outcome kinds (Final: compiled, they are constants rather than lookups in the module's dict)
VALUE: Final = "value"
FAILURE: Final = "failure"
ERROR: Final = "error"
TIMEOUT: Final = "timeout"
ABORTED: Final = "aborted"


class Outcome:
    """What happened to the body. ``runaway`` is the still-running body (a task or a future) when
    it ignored cancellation; ``error`` is the exception for ``ERROR``."""

    __slots__ = ("attempts", "error", "failure", "kind", "runaway", "value")

    def __init__(
        self,
        kind: str,
        attempts: int,
        *,
        value: Any = None,
        failure: Failure | None = None,
        error: BaseException | None = None,
        runaway: asyncio.Future[Any] | None = None,
    ) -> None:
        self.kind = kind
        self.attempts = attempts
        self.value = value
        self.failure = failure
        self.error = error
        self.runaway = runaway


class _Attempts:
    """The body task: attempts with retries; never raises for a tool's own exception.

    What the body ended with is kept here (``kind`` and ``payload``; ``kind`` stays ``None``
    unless the body returned), so the caller reads it without asking the task. Given
    ``settled``, the body resolves it itself in its last step, so the awaiting call resumes on
    the next turn of the loop (a done-callback would take one turn more)."""

    __slots__ = ("attempts", "ended_before_cancel", "kind", "payload", "settled")

    def __init__(self, settled: asyncio.Future[None] | None = None) -> None:
        self.attempts = 0
        self.ended_before_cancel = False
        self.kind: str | None = None
        self.payload: Any = None
        self.settled = settled

    async def run(self, tool: ToolDefinition, args: Any, ctx: RunContext, is_async: bool) -> None:
        try:
            signal = ctx.signal
            while True:
                self.attempts += 1
                ctx.attempt = self.attempts
                try:
                    if is_async:
                        value = await tool.execute(args, ctx)
                    else:
                        value = await _in_thread(functools.partial(tool.execute, args, ctx))
                        if inspect.isawaitable(value):  # a sync function handing back a coroutine
                            value = await value
                except asyncio.CancelledError:
                    raise
                except BaseException as exc:  # any exception of the tool's own
                    if isinstance(exc, _LOOP_STOPPERS):
                        raise
                    if not self._should_retry(tool, exc, signal):
                        self.ended_before_cancel = not signal.cancelled
                        self.kind, self.payload = ERROR, exc
                        return
                    try:
                        await _backoff(BACKOFF[self.attempts - 1], signal)
                    except asyncio.CancelledError:
                        if not signal.cancelled:
                            raise
                    if signal.cancelled:  # a cancel during backoff starts no further attempt
                        self.ended_before_cancel = True
                        self.kind, self.payload = ERROR, exc
                        return
                    continue
                self.ended_before_cancel = not signal.cancelled
                self.kind, self.payload = (FAILURE if _is_failure(value) else VALUE), value
                return
        finally:
            settled = self.settled
            if settled is not None and not settled.done():
                settled.set_result(None)

    def _should_retry(self, tool: ToolDefinition, exc: BaseException, signal: CancelToken) -> bool:
        return (
            tool.retry_safe
            and self.attempts <= len(BACKOFF)
            and isinstance(exc, OSError)
            and exc.errno in RETRY_ERRNOS
            and not signal.cancelled
        )


async def _in_thread(call: functools.partial[Any]) -> Any:
    """Run ``call`` in a worker thread. A thread cannot be stopped, so a cancellation is held
    back until the thread ends (the body stays "running" meanwhile) and re-raised then."""
    thread = asyncio.get_running_loop().run_in_executor(None, call)
    interrupted = False
    while True:
        try:
            result = await asyncio.shield(thread)
            break
        except asyncio.CancelledError:
            if thread.done():
                break
            interrupted = True
    if interrupted:
        raise asyncio.CancelledError
    return result


async def _backoff(delay: float, signal: CancelToken) -> None:
    """Sleep ``delay`` seconds, or less if ``signal`` is cancelled meanwhile."""
    try:
        async with asyncio.timeout(delay):
            await signal.wait()
    except TimeoutError:
        pass


def is_async_tool(tool: ToolDefinition) -> bool:
    execute = tool.execute
    return inspect.iscoroutinefunction(execute) or inspect.iscoroutinefunction(
        getattr(execute, "__call__", None)  # noqa: B004 -- an object with an async __call__
    )


async def invoke(
    tool: ToolDefinition,
    args: Any,
    ctx: RunContext,
    *,
    task_name: str,
    is_async: bool,
    time_budget: float | None,
    cancel: CancelToken | None,
    cancel_grace: float,
    on_runaway: Callable[[asyncio.Future[Any]], None],
) -> Outcome:
    """Run the body to an ``Outcome``.

    Raises ``CancelledError`` only when the awaiting task itself is cancelled; the body is then
    cancelled too. Whenever the body may still be running as we return or raise,
    ``on_runaway(body)`` is called so the caller can keep its resources until the body ends.
    """
    loop = _running_loop()
    body: asyncio.Task[Any] | None = None
    if time_budget is None and cancel is None:
        # Nothing but our own caller can stop the body: await it directly (the fast path).
        # Cancelling us cancels the body, and we resume only once it has settled.
        runner: _Attempts | None = None
        try:
            if is_async and not tool.retry_safe:
                # One attempt, nothing to retry: the task runs the tool's own coroutine. Whether
                # its first step ran cannot be told afterwards here: it counts as started.
                ctx.attempt = 1
                body = _start(loop, tool.execute(args, ctx), task_name)
                try:
                    value = await body
                except asyncio.CancelledError:
                    raise
                except BaseException as exc:  # the tool's error (or execute() refused its args)
                    if isinstance(exc, _LOOP_STOPPERS):
                        raise
                    _drop_own_frames(exc)
                    kind, payload = ERROR, exc
                else:
                    kind, payload = (FAILURE if _is_failure(value) else VALUE), value
                attempts, fired = 1, ctx.signal_fired
                ended_before_cancel = not fired
            else:
                runner = _Attempts()
                body = _start(loop, runner.run(tool, args, ctx, is_async), task_name)
                await body
                assert runner.kind is not None  # run() sets it on every return
                kind, payload = runner.kind, runner.payload
                attempts, ended_before_cancel = runner.attempts, runner.ended_before_cancel
                fired = ctx.signal_fired
        except asyncio.CancelledError:
            _retrieve(body)
            task = asyncio.current_task(loop)
            if task is None or task.cancelling():
                raise  # our caller's cancellation, passed through the body
            # Someone else cancelled the body task (a server shutting down, say).
            return Outcome(ABORTED, runner.attempts if runner is not None else 1)
        # A cancellation of our caller reaches the body it awaits. If the body swallowed one,
        # and it was our caller's, the caller is still cancelled: honour that.
        if body is not None and body.cancelling():
            task = asyncio.current_task(loop)
            if task is not None and task.cancelling():
                raise asyncio.CancelledError
        return _settled(kind, payload, attempts, ended_before_cancel, fired, ctx)

    settled: asyncio.Future[None] = loop.create_future()
    runner = _Attempts(settled)
    body = _start(loop, runner.run(tool, args, ctx, is_async), task_name)
    signal = ctx.signal
    if not body.done():  # it waits: stop it at the deadline or the caller's cancel
        guard = _Guard(loop, body, settled, signal, cancel_grace)
        body.add_done_callback(guard.settle)  # a body cancelled before its first step never runs
        link = cancel.add_callback(guard.on_cancel) if cancel is not None else None
        deadlines: Deadlines | None = None
        if time_budget is not None:
            deadlines = _deadlines_of(loop)
            deadlines.add(time_budget, guard)
        try:
            await settled
        except asyncio.CancelledError:
            body.cancel()
            on_runaway(body)
            raise
        finally:
            if link is not None:
                link.remove()
            if deadlines is not None and time_budget is not None:
                deadlines.remove(time_budget, guard)
            if guard.grace_timer is not None:
                guard.grace_timer.cancel()
    ended_with = runner.kind
    if ended_with is None:  # the body did not return
        if not body.done():
            on_runaway(body)
            return Outcome(_stopped_kind(signal), runner.attempts, runaway=body)
        if body.cancelled():
            return Outcome(_stopped_kind(signal), runner.attempts)
        escaped = body.exception()
        assert escaped is not None  # done, not cancelled, and it did not return: it raised
        raise escaped  # not a tool error (those are kept): a BaseException such as SystemExit
    fired = ctx.signal_fired
    return _settled(
        ended_with, runner.payload, runner.attempts, runner.ended_before_cancel, fired, ctx
    )


class _Guard(Expiring):
    """Fuses the caller's token and the deadline into the body's signal, stops the body when
    either fires, then gives it ``cancel_grace`` seconds to settle.

    One object subscribed to each source, rather than a fused token subscribed to the caller's
    and a callback subscribed to it; and a class rather than closures: compiled, closures that
    call each other share one environment that refers back to them, a cycle only the garbage
    collector frees."""

    __slots__ = ("body", "cancel_grace", "grace_timer", "loop", "settled", "signal")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        body: asyncio.Task[Any],
        settled: asyncio.Future[None],
        signal: CancelToken,
        cancel_grace: float,
    ) -> None:
        self.loop = loop
        self.body = body
        self.settled = settled
        self.signal = signal
        self.cancel_grace = cancel_grace
        self.grace_timer: asyncio.TimerHandle | None = None

    def settle(self, _: object = None) -> None:
        if not self.settled.done():
            self.settled.set_result(None)

    def on_cancel(self, caller: CancelToken) -> None:
        """The caller's token fired; maybe in another thread (cancelled from a worker)."""
        try:
            self.signal.cancel(caller.reason)  # at once: a sync body polls it in its thread
        finally:
            self.loop.call_soon_threadsafe(self.stop_body)

    def expire(self) -> None:
        """The deadline passed (on the loop's thread)."""
        try:
            self.signal.cancel(DEADLINE)
        finally:
            self.stop_body()

    def stop_body(self) -> None:
        self.body.cancel()
        if not self.settled.done() and self.grace_timer is None:
            self.grace_timer = self.loop.call_later(self.cancel_grace, self.settle)


def _deadlines_of(loop: asyncio.AbstractEventLoop) -> Deadlines:
    """The deadlines of ``loop``. One at a time is kept: a process runs one loop, or one per
    thread in turn, where a swap only costs a fresh ``Deadlines`` (each call keeps its own)."""
    global _deadlines
    current = _deadlines
    if current is None or current.loop is not loop:
        current = _deadlines = Deadlines(loop)
    return current


def _start(
    loop: asyncio.AbstractEventLoop, body: Coroutine[Any, Any, Any], name: str
) -> asyncio.Task[Any]:
    """The body's own task, named after its tool, its first step already run (see
    ``fastgate._core._task_py``): a body that never waits is done when this returns. A task
    factory installed on the loop makes the task instead, and it is scheduled as usual."""
    if loop.get_task_factory() is None:
        return _start_body(body, loop, name)
    return loop.create_task(body, name=name)


def _drop_own_frames(error: BaseException) -> None:
    """Drop this module's frames from the head of ``error``'s traceback: the frame that caught
    it refers back to it (a cycle only the garbage collector frees), and they say nothing about
    the tool."""
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_globals.get("__name__") == __name__:
        tb = tb.tb_next
    error.__traceback__ = tb


def _is_failure(value: object) -> bool:
    # isinstance() against a msgspec Struct goes through its metaclass's __instancecheck__, slow
    # on every call; the MRO says the same directly. Text, the usual return value, comes first.
    cls = type(value)
    return cls is not str and _FAILURE in cls.__mro__


def _retrieve(body: asyncio.Future[Any] | None) -> None:
    """Mark the exception of a body that failed as we were cancelled as seen (no log)."""
    if body is not None and body.done() and not body.cancelled():
        body.exception()


def _stopped_kind(signal: CancelToken) -> str:
    return TIMEOUT if signal.reason is DEADLINE else ABORTED


def _settled(
    kind: str, payload: Any, attempts: int, ended_before_cancel: bool, fired: bool, ctx: RunContext
) -> Outcome:
    if fired and not (kind in (ERROR, FAILURE) and ended_before_cancel):
        # Cancelled after the body started: a side effect may have happened, whatever it
        # returned. A body that had already failed keeps its own error.
        return Outcome(_stopped_kind(ctx.signal), attempts)
    if kind == VALUE:
        return Outcome(VALUE, attempts, value=payload)
    if kind == FAILURE:
        return Outcome(FAILURE, attempts, failure=payload)
    return Outcome(ERROR, attempts, error=payload)
