"""The body's own task, started eagerly: its first step runs inside the call that makes it.

Most tool bodies finish without waiting for anything (a lookup, a computed answer, a refused
argument). As an ``asyncio.Task`` such a body still costs two turns of the event loop, one to
run its step and one to wake the caller: about as much as the rest of the call. ``start_body``
runs the first step at once, *as the body's task*: during it ``asyncio.current_task()`` is the
body's own task, named after its tool, and the body runs in its own copy of the caller's
context, as it would in a scheduled task. A body that finishes there never touches the loop; one
that waits is woken by the loop from then on, like any task.

Python 3.12 offers this as ``Task(eager_start=True)``; 3.11 does not, so ``BodyTask`` is a task
of its own on asyncio's C ``Future``: the stepping (send, throw, what a yield means) and the
``Task`` API that code inside a body relies on (``cancel`` with a message, ``cancelling`` and
``uncancel`` for ``asyncio.timeout`` and task groups, ``get_name``, ``get_coro``,
``get_context``, ``get_stack``; ``_fut_waiter`` and ``_must_cancel``, which anyio reads). One
implementation on every version, so what is tested is what runs. It enters the loop's list of
tasks (``asyncio.all_tasks()``) only once it waits: a body that finished at once was never
pending where anyone else could see it.
"""

from __future__ import annotations

import asyncio
import asyncio.tasks
import contextvars
from asyncio import base_tasks
from collections.abc import Callable, Coroutine
from typing import Any, TextIO

# The C implementations asyncio's own tasks use (the loop's current task is one table). Typed
# for any task: they take ours as they take asyncio's.
_enter_task: Callable[[Any, Any], None] = asyncio.tasks._enter_task
_leave_task: Callable[[Any, Any], None] = asyncio.tasks._leave_task
_register_task: Callable[[Any], None] = asyncio.tasks._register_task
_task_get_stack: Callable[[Any, int | None], list[Any]] = base_tasks._task_get_stack
_task_print_stack: Callable[..., None] = base_tasks._task_print_stack
_task_repr: Callable[[Any], str] = base_tasks._task_repr

_Future = asyncio.Future
_CancelledError = asyncio.CancelledError
_copy_context = contextvars.copy_context
_current_task: Callable[[Any], Any]
try:  # asyncio's own, in C from Python 3.12
    from _asyncio import current_task as _current_task  # type: ignore[attr-defined,no-redef]
except ImportError:  # 3.11: asyncio.current_task is Python reading this table; read it here
    _current_task = asyncio.tasks._current_tasks.get  # type: ignore[attr-defined]
_STOPPERS = (KeyboardInterrupt, SystemExit)


class BodyTask(asyncio.Future):  # type: ignore[type-arg]
    """A task whose first step ran when it was made (see the module's docstring). Made only by
    ``start_body``, which sets every field: asyncio's own ``Future.__init__`` is the whole
    constructor (a Python ``__init__`` on top cost a tenth of the start)."""

    # Three fields every task sets; the rest keep their class defaults until a body waits or
    # is cancelled, and then live in the dict every Future has: a body that finishes at once pays
    # for three stores, not eight.
    __slots__ = ("_context", "_coro", "_name")
    _coro: Coroutine[Any, Any, Any]
    _context: contextvars.Context
    _name: str
    _fut_waiter: asyncio.Future[Any] | None = None  # what the body waits for
    _must_cancel: bool = False  # a cancel to deliver at the next step
    _cancel_request: Any = None  # its message
    _num_cancels_requested: int = 0
    _registered: bool = False  # in asyncio.all_tasks()

    # -- the Task API ---------------------------------------------------------------------------

    def get_name(self) -> str:
        return self._name

    def set_name(self, value: object) -> None:
        self._name = str(value)

    def get_coro(self) -> Coroutine[Any, Any, Any]:
        return self._coro

    def get_context(self) -> contextvars.Context:
        return self._context

    def get_stack(self, *, limit: int | None = None) -> list[Any]:
        return _task_get_stack(self, limit)

    def print_stack(self, *, limit: int | None = None, file: TextIO | None = None) -> None:
        _task_print_stack(self, limit, file)

    def __repr__(self) -> str:
        return _task_repr(self)

    def cancelling(self) -> int:
        return self._num_cancels_requested

    def uncancel(self) -> int:
        if self._num_cancels_requested > 0:
            self._num_cancels_requested -= 1
        return self._num_cancels_requested

    def cancel(self, msg: Any = None) -> bool:
        if self.done():
            return False
        self._num_cancels_requested += 1
        waiter = self._fut_waiter
        if waiter is not None and waiter.cancel(msg):
            # The body wakes with CancelledError from what it awaited.
            return True
        # Running now, or about to run: the body gets CancelledError at its next step.
        self._must_cancel = True
        self._cancel_request = msg
        return True

    def set_result(self, result: Any) -> None:
        raise RuntimeError("a task's result is what its coroutine returns")

    def set_exception(self, exception: Any) -> None:
        raise RuntimeError("a task's exception is what its coroutine raises")

    # -- stepping -------------------------------------------------------------------------------

    def _step(self, thrown: BaseException | None = None) -> None:
        """Run the coroutine up to its next wait (or its end), as the loop's current task. The
        steps after the first (``start_body`` runs that one) are the loop's callbacks, which run
        outside any task."""
        if self.done():
            return  # a late wake-up of a task that was already settled
        if self._must_cancel:
            if not isinstance(thrown, _CancelledError):
                request = self._cancel_request
                thrown = _CancelledError() if request is None else _CancelledError(request)
            self._must_cancel = False
        if self._fut_waiter is not None:
            self._fut_waiter = None
        loop = self.get_loop()
        _enter_task(loop, self)
        try:
            self._advance(thrown)
        finally:
            thrown = None  # as in _advance
            _leave_task(loop, self)

    def _advance(self, thrown: BaseException | None) -> None:
        coro = self._coro
        try:
            yielded = coro.send(None) if thrown is None else coro.throw(thrown)
        except StopIteration as returned:
            if self._must_cancel:  # cancelled during the step that returned
                self._must_cancel = False
                _Future.cancel(self, self._cancel_request)
            else:
                _Future.set_result(self, returned.value)
        except _CancelledError as cancelled:  # whoever awaits the task gets its message
            _Future.cancel(self, cancelled.args[0] if cancelled.args else None)
        except _STOPPERS as stopper:
            _Future.set_exception(self, stopper)
            self._log_traceback = False  # raised on to whoever ran the step: seen
            raise
        except BaseException as raised:
            _drop_own_frames(raised)
            _Future.set_exception(self, raised)
        else:
            self._wait_for(yielded)
        finally:
            # A frame a traceback keeps must not keep the exception: a cycle only the garbage
            # collector frees.
            thrown = None

    def _wait_for(self, yielded: Any) -> None:
        """The coroutine yielded: a future to wait for (via ``await``), or ``None`` (a bare
        ``yield``: come back on the loop's next turn). Anything else is a bug in the body."""
        loop = self.get_loop()
        if not self._registered:
            self._registered = True
            _register_task(self)
        blocking = getattr(yielded, "_asyncio_future_blocking", None)
        if blocking is None:
            if yielded is None:
                loop.call_soon(self._step, context=self._context)
            else:
                self._fail_soon(RuntimeError(f"task {self._name!r} got bad yield: {yielded!r}"))
            return
        if not blocking:
            self._fail_soon(
                RuntimeError(f"yield used instead of yield from in task {self._name!r}")
            )
            return
        if yielded is self:
            self._fail_soon(RuntimeError(f"task {self._name!r} cannot await itself"))
            return
        if yielded.get_loop() is not loop:
            self._fail_soon(
                RuntimeError(f"task {self._name!r} awaits a future of a different loop")
            )
            return
        yielded._asyncio_future_blocking = False
        yielded.add_done_callback(self._wake, context=self._context)
        self._fut_waiter = yielded
        if self._must_cancel and yielded.cancel(self._cancel_request):
            self._must_cancel = False

    def _fail_soon(self, error: BaseException) -> None:
        self.get_loop().call_soon(self._step, error, context=self._context)

    def _wake(self, waited: asyncio.Future[Any]) -> None:
        # What the future ended with, read without raising it here: a traceback through this
        # frame would hold the task, and the task the exception (a cycle only the collector
        # frees). A cancellation is thrown into the body too.
        if waited.cancelled():
            make = getattr(waited, "_make_cancelled_error", None)
            self._step(make() if make is not None else _CancelledError())
        else:
            self._step(waited.exception())


_advance = BodyTask._advance


def _drop_own_frames(error: BaseException) -> None:
    """Drop this module's frames from the head of ``error``'s traceback: they refer to the
    task, which refers to the error, and say nothing about the tool."""
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_globals.get("__name__") == __name__:
        tb = tb.tb_next
    error.__traceback__ = tb


def start_body(
    coro: Coroutine[Any, Any, Any], loop: asyncio.AbstractEventLoop, name: str
) -> BodyTask:
    """The body's task, its first step already run (done if the body never waited)."""
    context = _copy_context()
    task = BodyTask(loop=loop)
    task._coro = coro
    task._context = context
    task._name = name
    # The first step, as ``_step`` runs later ones, less what a new task cannot need (a done
    # check, a cancel not yet asked for); it runs inside the maker's task, which steps aside.
    caller = _current_task(loop)
    if caller is not None:
        _leave_task(loop, caller)
    _enter_task(loop, task)
    try:
        context.run(_advance, task, None)
    finally:
        _leave_task(loop, task)
        if caller is not None:
            _enter_task(loop, caller)
    return task
