"""``CancelToken``: a cancellation signal that code can poll, await, or subscribe to (SPEC §9.1).

Thread-safe to read and to cancel (sync tools run in worker threads and poll ``cancelled``);
callbacks run in the thread that cancels, and ``wait()`` wakes on the loop it was awaited on.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, Final, final

# One lock for every token: the critical sections are a few list operations, and a token per
# tool call must stay cheap to create (sync tools cancel and poll from worker threads). Taken
# with acquire()/release() rather than ``with``: compiled, that is two direct calls instead of
# the context-manager protocol's lookups.
_LOCK: Final = threading.Lock()
_acquire: Final = _LOCK.acquire
_release: Final = _LOCK.release


@final
class CallbackHandle:
    """Returned by ``add_callback``; ``remove()`` unsubscribes (idempotent)."""

    __slots__ = ("_callback", "_token")

    def __init__(self, token: CancelToken, callback: Callable[[CancelToken], Any]) -> None:
        self._token: CancelToken | None = token
        self._callback = callback

    def remove(self) -> None:
        token, self._token = self._token, None
        if token is not None:
            token._remove(self)


@final
class CancelToken:
    """``cancel(reason)``, ``cancelled``, ``reason``, ``await wait()``, ``add_callback(fn)``."""

    __slots__ = ("_callbacks", "_cancelled", "_links", "_reason")

    def __init__(self) -> None:
        self._cancelled = False
        self._reason: object = None
        # A dict as an ordered set: callbacks run in the order added, and a removal costs the
        # same with one subscriber or a thousand (the calls in flight under one session's token).
        self._callbacks: dict[CallbackHandle, None] = {}
        self._links: list[CallbackHandle] = []  # subscriptions of a fused token (see any)

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    @property
    def reason(self) -> object:
        return self._reason

    def cancel(self, reason: object = None) -> bool:
        """Cancel once; later calls change nothing and return False. Callbacks run now, in order;
        one that raises does not stop the others (the first error is re-raised at the end)."""
        _acquire()
        try:
            if self._cancelled:
                return False
            self._cancelled = True
            self._reason = reason
            handles, self._callbacks = self._callbacks, {}
        finally:
            _release()
        error: BaseException | None = None
        for handle in handles:
            try:
                handle._callback(self)
            except Exception as exc:  # isolate each subscriber
                error = error or exc
        if error is not None:
            raise error
        return True

    def add_callback(self, fn: Callable[[CancelToken], Any]) -> CallbackHandle:
        """Call ``fn(token)`` on cancellation (at once if already cancelled)."""
        handle = CallbackHandle(self, fn)
        _acquire()
        try:
            if not self._cancelled:
                self._callbacks[handle] = None
                return handle
        finally:
            _release()
        fn(self)
        return handle

    def _remove(self, handle: CallbackHandle) -> None:
        _acquire()
        try:
            self._callbacks.pop(handle, None)
        finally:
            _release()

    async def wait(self) -> object:
        """Return the reason once cancelled. Cancelling the awaiting task just stops waiting."""
        if self._cancelled:
            return self._reason
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()

        def wake(_: CancelToken) -> None:
            loop.call_soon_threadsafe(_resolve, future)

        handle = self.add_callback(wake)
        try:
            await future
        finally:
            handle.remove()
        return self._reason

    @classmethod
    def any(cls, *tokens: CancelToken | None) -> CancelToken:
        """A token cancelled as soon as any of ``tokens`` is (with that token's reason).

        Call ``detach()`` on it when done, so long-lived source tokens (a session's) do not
        keep one subscription per fused token forever.
        """
        fused = cls()
        for token in tokens:
            if token is not None:
                fused._links.append(token.add_callback(fused._follow))
        return fused

    def _follow(self, source: CancelToken) -> None:
        self.cancel(source.reason)

    def detach(self) -> None:
        """Stop following the tokens this one was fused from (no-op for a plain token)."""
        links, self._links = self._links, []
        for handle in links:
            handle.remove()

    def __repr__(self) -> str:
        state = f"cancelled ({self._reason!r})" if self._cancelled else "active"
        return f"<CancelToken {state}>"


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
