"""The two awaitables of the admission paths, with no asyncio inside.

``Ready`` is already complete: the uncontended paths return it from ``__aenter__``/``__aexit__``,
so entering a slot, gate or lock never yields to the event loop. (Interpreted,
``interpreted_ready()`` is faster: a generator-based coroutine that has already finished.)

``Wait`` is what a queued request awaits. It forwards to the future the core stored on the waiter,
then asks its context what next. The context protocol (implemented by ``Slot``, ``GateEntry`` and
``MultiLock``):

- ``granted() -> future | None``: the future completed; None means fully admitted, a new future
  means "now wait for this one too" (a multi-lock waiting for its next key);
- ``abandon()``: the waiting task was cancelled, the future failed, or ``granted`` raised; undo
  everything the request holds or was handed meanwhile. Must be idempotent.

Cancellation arrives through ``throw`` (the task throws ``CancelledError`` into the coroutine that
awaits us), and a coroutine closed while suspended here arrives through ``close``.
"""

from __future__ import annotations

import types
from collections.abc import Awaitable, Generator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastgate._core import _cython_shim as cython
else:
    try:
        import cython
    except ImportError:  # the pure build without Cython installed: the decorators do nothing
        from fastgate._core import _cython_shim as cython


@cython.freelist(64)
@cython.cclass
class Ready:
    def __await__(self) -> Ready:
        return self

    def __iter__(self) -> Ready:
        return self

    def __next__(self) -> None:
        raise StopIteration


@types.coroutine
def _finished() -> Generator[None, None, None]:
    return
    yield  # a generator: made a generator-based coroutine by types.coroutine


def interpreted_ready() -> Awaitable[None]:
    """The interpreted build's ``Ready``: a generator-based coroutine that has already finished.

    Awaiting it returns None at once, as often as it is awaited: ``await`` hands such a coroutine
    over without a call or an allocation (a class with ``__await__`` pays both on every await), and
    resuming a finished generator ends the await with None. About 50 ns less per await here.
    """
    finished = _finished()
    for _ in finished:  # run it to its end once
        pass
    return finished


@cython.freelist(64)
@cython.cclass
class Wait:
    """Awaitable for a queued request (the protocol is in the module docstring).

    It yields the request's future to the task directly, flagged the way asyncio's own
    ``Future.__await__`` flags it (``_asyncio_future_blocking``): one layer less than wrapping
    the future's iterator, and no StopIteration to catch on resume.
    """

    def __init__(self, ctx: Any, future: Any) -> None:
        self.ctx = ctx
        self.future = future

    def __await__(self) -> Wait:
        return self

    def __iter__(self) -> Wait:
        return self

    def __next__(self) -> Any:
        following = self._resume()
        if following is None:
            raise StopIteration
        return following

    def send(self, value: Any) -> Any:
        # A task resumes the coroutine awaiting us with None; nothing else is ever sent here.
        return self.__next__()

    def _resume(self) -> Any:
        """The future to wait on now, or None once the request is fully admitted."""
        future = self.future
        if not future.done():
            future._asyncio_future_blocking = True
            return future
        try:
            future.result()  # raises the failure (closed, timed out) or CancelledError
            following = self.ctx.granted()
        except BaseException:
            self.ctx.abandon()
            raise
        if following is None:
            return None
        self.future = following
        following._asyncio_future_blocking = True
        return following

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        self.ctx.abandon()
        if val is None:
            val = typ if isinstance(typ, BaseException) else typ()
        raise val

    def close(self) -> None:
        self.ctx.abandon()


class InterpretedWait:
    """Interpreted twin of ``Wait``: a generator gets ``throw``/``close`` from CPython for free."""

    __slots__ = ("ctx", "future")

    def __init__(self, ctx: Any, future: Any) -> None:
        self.ctx = ctx
        self.future = future

    def __await__(self) -> Generator[Any, None, None]:
        future = self.future
        try:
            while future is not None:
                yield from future
                future = self.ctx.granted()
        except BaseException:
            self.ctx.abandon()
            raise
