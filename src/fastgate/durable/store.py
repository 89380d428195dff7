"""Durable tool-use records (SPEC §12) and the journal of keyed calls (SPEC §24).

A tool-use record is written before the side effect; the result record after it. After a crash,
a tool-use without a result is reported as interrupted (outcome unknown) and never re-run.

A ``JournalStore`` also keeps one entry per ``(session, idempotency key)``: the arguments' digest,
the execution that holds the key, its owner and lease. ``claim`` decides atomically, in the
store, what a call with that key does (see ``JournalEntry``).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
import socket
import struct
from collections.abc import Iterator
from typing import Any, Final, Literal, Protocol, runtime_checkable

import msgspec

from fastgate.errors import FastgateError
from fastgate.model.results import DurableResult, ErrorCode, ToolResult


class StoreError(FastgateError):
    """The store could not open, write or read; the message names the store and why."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"tool-use store {path!r}: {problem}")
        self.path = path
        self.problem = problem


class ToolUseRecord(msgspec.Struct, frozen=True):
    """One tool use, recorded before it runs. ``read_only``: its tool declares no side effect
    (``ToolKind.READ_ONLY``), so a store need not sync the record to disk before the call runs
    (a read lost to a power cut may be made again; it changed nothing)."""

    execution_id: str
    call_id: str | None
    session_id: str | None
    turn_id: str | None
    epoch: int
    seq: int
    tool_name: str
    args: Any
    read_only: bool = False


# Ids the stores index (a session id, an idempotency key or scope) are at most this many bytes
# of UTF-8: PostgreSQL refuses an index entry past about 2.7 KB, so a longer one could never be
# written there; SQLite keeps the same bound so that both stores accept the same calls.
MAX_ID_BYTES: Final = 1024


def text_problem(text: object, limit: int | None = None) -> str | None:
    """Why ``text`` cannot be stored as an id (not a string, a NUL, which PostgreSQL text cannot
    hold, a lone surrogate, which UTF-8 cannot encode, or more than ``limit`` bytes), or None."""
    if not isinstance(text, str):
        return f"is not text (got {type(text).__name__})"
    if "\x00" in text:
        return "contains a NUL character"
    try:
        size = len(text.encode())
    except UnicodeEncodeError:
        return "is not valid Unicode text (it holds a lone surrogate)"
    if limit is not None and size > limit:
        return f"is {size} bytes long (at most {limit} bytes of UTF-8)"
    return None


def unrecordable(record: ToolUseRecord) -> str | None:
    """Why no store can hold ``record``'s text as given (see ``text_problem``; the session id
    is indexed, so it is bounded by ``MAX_ID_BYTES``), or None. Such a call is bad input: it is
    refused, never run unrecorded."""
    fields = (
        ("execution id", record.execution_id, None),
        ("call id", record.call_id, None),
        ("session id", record.session_id, MAX_ID_BYTES),
        ("turn id", record.turn_id, None),
        ("tool name", record.tool_name, None),
    )
    for what, text, limit in fields:
        if text is None and (what == "call id" or what == "session id" or what == "turn id"):
            continue  # these may be absent
        problem = text_problem(text, limit)
        if problem is not None:
            return f"its {what} {problem}"
    return None


def scope_problem(scope: object) -> str | None:
    """Why ``scope`` cannot name an idempotency scope (a non-empty id, as ``text_problem``
    bounded by ``MAX_ID_BYTES``), or None; None is no scope (the session's keys)."""
    if scope is None:
        return None
    if scope == "":
        return "idempotency_scope: expected a non-empty string, got ''"
    problem = text_problem(scope, MAX_ID_BYTES)
    return None if problem is None else f"idempotency_scope {problem}"


def key_problem(key: object) -> str | None:
    """Why ``key`` cannot be an idempotency key (a non-empty id, as ``text_problem`` bounded by
    ``MAX_ID_BYTES``), or None."""
    if not isinstance(key, str) or not key:
        return f"idempotency_key: expected a non-empty string, got {key!r:.80}"
    problem = text_problem(key, MAX_ID_BYTES)
    return None if problem is None else f"idempotency_key {problem}"


def check_record(record: ToolUseRecord, label: str) -> None:
    """A store's own check before anything is queued: a record it can never write fails alone
    with ``StoreError`` instead of failing the group transaction it would have joined."""
    why = unrecordable(record)
    if why is not None:
        raise StoreError(
            label, f"the record of {record.execution_id!r:.80}: {why} (nothing was written)"
        )


def check_claim(key: object, scope: object, label: str) -> None:
    """As ``check_record``, for a claim's key and scope."""
    why = key_problem(key) or scope_problem(scope)
    if why is not None:
        raise StoreError(label, f"{why} (nothing was written)")


class StoredCall(msgspec.Struct, frozen=True):
    """One recovered call: ``result`` is the durable part (content, error, meta) or None."""

    call_id: str | None
    execution_id: str
    tool_name: str
    args: Any
    status: Literal["completed", "interrupted"]
    result: DurableResult | None
    turn_id: str | None
    epoch: int
    seq: int


@runtime_checkable
class ToolUseStore(Protocol):
    async def record_tool_use(self, record: ToolUseRecord) -> None: ...

    async def record_result(self, execution_id: str, result: DurableResult) -> None: ...

    async def load(self, session_id: str) -> list[StoredCall]: ...

    async def close(self) -> None: ...


# -- the journal -----------------------------------------------------------------------------------

JournalStatus = Literal["claimed", "completed", "running", "interrupted", "reused"]


class JournalEntry(msgspec.Struct, frozen=True):
    """What ``claim`` found for a key.

    - ``claimed``: the key is this call's; its tool-use record is written and its lease runs.
    - ``completed``: ``result`` is the recorded answer of ``execution_id``.
    - ``running``: ``execution_id``'s owner holds a live lease.
    - ``interrupted``: ``execution_id`` has no answer and its owner is gone (lease expired), or
      it was cancelled after it started: its outcome is unknown.
    - ``reused``: the key was claimed with other arguments (by ``execution_id``).
    """

    status: JournalStatus
    execution_id: str
    result: DurableResult | None = None


@runtime_checkable
class JournalStore(ToolUseStore, Protocol):
    """A ``ToolUseStore`` that also keeps the journal of keyed calls."""

    @property
    def lease_ttl(self) -> float: ...

    async def claim(
        self,
        record: ToolUseRecord,
        key: str,
        digest: bytes,
        *,
        take_over: bool,
        scope: str | None = None,
    ) -> JournalEntry:
        """Atomically: a free key of the idempotency ``scope`` (default: ``record``'s session;
        a scope and a session of one name are different owners; or, with
        ``take_over``, an interrupted one) becomes ``record``'s (its tool-use record written,
        its lease started); otherwise say why not."""
        ...

    async def renew(
        self, session_id: str | None, key: str, execution_id: str, scope: str | None = None
    ) -> bool:
        """Extend the lease of our claim ``execution_id`` of ``key`` (in ``scope`` when it was
        claimed in one, else in ``session_id``); False when the key is no longer ours."""
        ...

    async def wait_result(self, execution_id: str, within: float) -> None:
        """Return once this store recorded a result for ``execution_id``, or after ``within`` s."""
        ...

    async def resolve(self, execution_id: str, result: ToolResult | DurableResult) -> None:
        """Record what happened to an interrupted call (an operator's reconciliation)."""
        ...


# A result with one of these codes says nothing ran: the key is free again for a later call.
NOTHING_RAN: Final = frozenset(
    {
        ErrorCode.ABORTED_BEFORE_DISPATCH,
        ErrorCode.RESOURCE_EXHAUSTED,
        ErrorCode.DISPOSED,
        ErrorCode.PERSISTENCE_FAILED,
    }
)
DONE, FREE, ABORTED = "done", "free", "aborted"


def journal_state(result: DurableResult) -> str:
    """The outcome a recorded result leaves its key in: done (the key's answer), free (nothing
    ran: a later call with the key runs) or aborted (cancelled after it started: unknown)."""
    error = result.error
    if error is None:
        return DONE
    if error.code in NOTHING_RAN:
        return FREE
    if error.code == ErrorCode.ABORTED:  # cancelled after it started: outcome unknown
        return ABORTED
    return DONE


def decide(
    same_arguments: bool, has_result: bool, outcome: str | None, alive: bool, take_over: bool
) -> JournalStatus | None:
    """What an existing entry says to a claim: a ``JournalEntry`` status, or None when the claim
    takes the key (nothing ran; or, with ``take_over``, its outcome is unknown). ``outcome`` is
    its holder's result's (None in rows older than outcomes: done)."""
    if not same_arguments:
        return "reused"
    if has_result:
        outcome = outcome or DONE
        if outcome == DONE:
            return "completed"
        if outcome == FREE:
            return None
    elif alive:
        return "running"
    return None if take_over else "interrupted"


def session_key(session_id: str | None) -> str:
    """The journal's session column: keys are per session, and no session is one of its own."""
    return "" if session_id is None else "=" + session_id


def journal_owner(session_id: str | None, scope: str | None) -> str:
    """Whose keys: the idempotency scope when one is named, else the session. A scope and a
    session of one name never share keys (their column values differ in the first character)."""
    return session_key(session_id) if scope is None else "@" + scope


def new_owner() -> str:
    """Who holds a lease: host, process and a random part (one per store)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


# A lease past this would outlive any crash it is meant to detect (it is renewed while its call
# runs), and PostgreSQL's timestamps overflow far past it.
MAX_LEASE_TTL: Final = 86_400.0


def check_lease_ttl(lease_ttl: float) -> float:
    if (
        isinstance(lease_ttl, bool)
        or not isinstance(lease_ttl, (int, float))
        or not 0 < lease_ttl <= MAX_LEASE_TTL
    ):
        raise ValueError(
            f"lease_ttl: expected seconds > 0 and at most {MAX_LEASE_TTL:,.0f} (a day), "
            f"got {lease_ttl!r}"
        )
    return float(lease_ttl)


def as_durable(
    result: ToolResult | DurableResult, execution_id: str | None = None
) -> DurableResult:
    """The durable part of ``result``; with ``execution_id``, under that id (``resolve``)."""
    if isinstance(result, ToolResult):
        result = result.durable()
    if not isinstance(result, DurableResult):
        raise TypeError(f"result: expected a ToolResult or DurableResult, got {type(result)}")
    if execution_id is not None and result.meta.execution_id != execution_id:
        meta = msgspec.structs.replace(result.meta, execution_id=execution_id)
        result = msgspec.structs.replace(result, meta=meta)
    return result


# -- the arguments' digest -------------------------------------------------------------------------

_pack_int = struct.Struct(">q").pack
_pack_len = struct.Struct(">I").pack


_sorted_msgpack = msgspec.msgpack.Encoder(order="sorted")
_PLAIN: Final = (str, int, bool, type(None))  # JSON scalars but floats


def args_digest(args: Any) -> bytes:
    """A digest of a JSON value in which equal values agree: object keys in any order, a number
    as an int or an integral float, lists and tuples alike.

    The value as sorted msgpack; one with floats is first normalized (an integral float becomes
    the int it equals), so that equal values give the same bytes. A value msgpack cannot hold
    (lone surrogates, integers past 64 bits, nesting past msgspec's depth) takes a slower,
    iterative encoding of its own, marked apart."""
    digest = hashlib.blake2b(digest_size=20)
    try:
        encoded = _sorted_msgpack.encode(args if _plain(args) else _normalized(args))
    except (UnicodeEncodeError, OverflowError, RecursionError, TypeError, ValueError):
        digest.update(b"c")
        for chunk in _canonical(args):
            digest.update(chunk)
    else:
        digest.update(b"m")
        digest.update(encoded)
    return digest.digest()


def _plain(value: Any) -> bool:
    """A scalar but a float, or a flat object or array of such (the usual arguments, and the
    journal's (tool, arguments) pair of them): nothing to normalize."""
    if type(value) in _PLAIN:
        return True
    if isinstance(value, dict):
        items: Any = value.values()
    elif isinstance(value, (list, tuple)):
        items = value
    else:
        return False
    for item in items:
        if type(item) not in _PLAIN and not (
            isinstance(item, dict) and all(type(v) in _PLAIN for v in item.values())
        ):
            return False
    return True


def _normalized(value: Any) -> Any:
    """A copy of a JSON value with every integral float as the int it equals (whatever its size:
    ``2.0**63 == 2**63``). Iterative: any depth."""
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(value, root, 0)]
    while stack:
        item, parent, slot = stack.pop()
        if isinstance(item, float) and item.is_integer():  # (inf and nan are not)
            parent[slot] = int(item)
        elif isinstance(item, dict):
            copy: dict[Any, Any] = dict(item)
            parent[slot] = copy
            stack.extend((child, copy, key) for key, child in item.items())
        elif isinstance(item, (list, tuple)):
            items = list(item)
            parent[slot] = items
            stack.extend((child, items, index) for index, child in enumerate(item))
        else:
            parent[slot] = item
    return root[0]


def _canonical(value: Any) -> Iterator[bytes]:
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if item is None:
            yield b"n"
        elif item is True:
            yield b"t"
        elif item is False:
            yield b"f"
        elif isinstance(item, str):
            text = item.encode("utf-8", "surrogatepass")
            yield b"s" + _pack_len(len(text)) + text
        elif isinstance(item, int):
            yield _number(item)
        elif isinstance(item, float):
            if item.is_integer():
                yield _number(int(item))
            else:
                yield b"d" + repr(item).encode()
        elif isinstance(item, dict):
            keys = sorted(item)
            yield b"o" + _pack_len(len(keys))
            for key in reversed(keys):
                stack.append(item[key])
                stack.append(key)
        elif isinstance(item, (list, tuple)):
            yield b"a" + _pack_len(len(item))
            stack.extend(reversed(item))
        else:
            raise TypeError(f"not a JSON value: {type(item).__name__}")


def _number(value: int) -> bytes:
    if -(2**63) <= value < 2**63:
        return b"i" + _pack_int(value)
    text = str(value).encode()
    return b"I" + _pack_len(len(text)) + text


# -- waiting for a result in this process ----------------------------------------------------------


class ResultWaiters:
    """Callers of ``wait_result`` by execution id, woken when this store records a result."""

    __slots__ = ("_waiting",)

    def __init__(self) -> None:
        self._waiting: dict[str, list[asyncio.Future[None]]] = {}

    async def wait(self, execution_id: str, within: float) -> None:
        future = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(execution_id, []).append(future)
        try:
            await asyncio.wait((future,), timeout=max(0.0, within))
        finally:
            waiting = self._waiting.get(execution_id)
            if waiting is not None:
                if future in waiting:
                    waiting.remove(future)
                if not waiting:
                    del self._waiting[execution_id]
            future.cancel()

    def wake(self, execution_id: str) -> None:
        for future in self._waiting.pop(execution_id, ()):
            try:
                future.get_loop().call_soon_threadsafe(_wake, future)
            except RuntimeError:
                pass  # that loop is closed: nobody waits any more


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
