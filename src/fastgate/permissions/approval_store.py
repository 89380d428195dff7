"""``ApprovalStore``: session approvals and the per-session prompt locks (SPEC §7)."""

from __future__ import annotations

import asyncio
import threading
import weakref
from typing import Any, final


@final
class ApprovalStore:
    """Session approvals, keyed by ``(session_id, signature)``, and each session's prompt lock.

    One store may serve many sessions (one executor for a whole server): an approval given in one
    session never covers another, and one session's open prompt never holds back another
    session's. Share a store between the executors of one session so an approval given to one
    agent holds for its sub-agents too. A session approval only stands for an ASK of the mode's
    default: never a DENY, an ASK rule, a sensitive or protected path, or a hook's ask (those
    are asked every time).
    """

    __slots__ = ("__weakref__", "_approved", "_guard", "_prompt_locks")

    def __init__(self) -> None:
        self._approved: set[tuple[str | None, str]] = set()
        self._guard = threading.Lock()
        # Only sessions with a prompt open or waiting have a lock: the dict stays small.
        self._prompt_locks: dict[str | None, _PromptLock] = {}

    def is_approved(self, session_id: str | None, signature: str) -> bool:
        return (session_id, signature) in self._approved

    def approve(self, session_id: str | None, signature: str, definition: object = None) -> bool:
        """Approve ``signature`` for the session. ``definition``: the tool definition the person
        was shown; the approval goes when it is withdrawn (``withdraw_approvals``), and none is
        kept for one already withdrawn (False: nothing was kept)."""
        if definition is not None:
            with _TIES_GUARD:
                if definition in _WITHDRAWN:
                    return False
                ties = _TIES.get(definition)
                if ties is None:
                    ties = _TIES[definition] = set()
                ties.add((weakref.ref(self), session_id, signature))
        with self._guard:
            self._approved.add((session_id, signature))
        return True

    def revoke(self, session_id: str | None, signature: str) -> None:
        with self._guard:
            self._approved.discard((session_id, signature))

    def clear(self) -> None:
        """Forget every session's approvals."""
        with self._guard:
            self._approved.clear()

    def clear_session(self, session_id: str | None) -> None:
        """Forget one session's approvals (when it ends, say)."""
        with self._guard:
            self._approved = {key for key in self._approved if key[0] != session_id}

    def __len__(self) -> int:
        return len(self._approved)

    def prompt_lock(self, session_id: str | None) -> _PromptLock:
        """The lock held while one of this session's prompts is open: ``async with`` it. Prompts
        are serialized per session; sessions never wait for each other."""
        lock = self._prompt_locks.get(session_id)
        if lock is None:
            lock = self._prompt_locks[session_id] = _PromptLock(self, session_id)
        return lock

    def _forget_lock(self, lock: _PromptLock) -> None:
        if self._prompt_locks.get(lock.session_id) is lock:
            del self._prompt_locks[lock.session_id]


# The session approvals given for each tool definition, in every store (weakly: a definition
# no longer registered anywhere, or a store dropped, takes its entries with it), and the
# definitions withdrawn.
_TIES: weakref.WeakKeyDictionary[Any, set[tuple[weakref.ref[ApprovalStore], str | None, str]]] = (
    weakref.WeakKeyDictionary()
)
_WITHDRAWN: weakref.WeakSet[Any] = weakref.WeakSet()
_TIES_GUARD = threading.Lock()


def withdraw_approvals(definition: object) -> None:
    """Revoke the session approvals given for ``definition`` (a ``ToolDefinition``), in every
    ``ApprovalStore`` and session, and keep none given for it from now on (a call that resolved
    it before may still be asking). For a tool whose definition was replaced or removed (an MCP
    server changed it): an approval never covers a definition the person was not shown."""
    with _TIES_GUARD:
        _WITHDRAWN.add(definition)
        ties = _TIES.pop(definition, set())
    for store_ref, session_id, signature in ties:
        store = store_ref()
        if store is not None:
            store.revoke(session_id, signature)


@final
class _PromptLock:
    """An ``asyncio.Lock`` that leaves its store once nobody holds or waits for it."""

    __slots__ = ("_lock", "_store", "_users", "session_id")

    def __init__(self, store: ApprovalStore, session_id: str | None) -> None:
        self._store = store
        self.session_id = session_id
        self._lock = asyncio.Lock()
        self._users = 0  # holding or waiting

    async def acquire(self) -> None:
        self._users += 1
        try:
            await self._lock.acquire()
        except BaseException:
            self._left()
            raise

    def release(self) -> None:
        self._lock.release()
        self._left()

    def locked(self) -> bool:
        return self._lock.locked()

    def _left(self) -> None:
        self._users -= 1
        if self._users == 0:
            self._store._forget_lock(self)

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc_info: Any) -> None:
        self.release()
