"""The sealed ``requestState`` of an approval asked through ``input_required`` (2026 era).

The MCP SDK's ``RequestStateBoundary`` seals every ``requestState`` the gateway hands out and
verifies every one that comes back (expiry, method, tool, a digest of the arguments, the
principal); this module gives it the codec, HMAC-SHA-256 under the gateway's key, and the
gateway's own claims inside: principal, tool, the SHA-256 of the canonical arguments, the policy
generation, a single-use nonce, and where the journal keys the call (its session and idempotency
key), checked again when the answer comes back.

One state approves one run of one call. The retry must come in the session and under the
idempotency key of the call that asked; a process takes each nonce once, or again only for that
same journal entry (the journal then answers the repeat, nothing runs twice); and a retry whose
asking call had no key is journaled under a key derived from the nonce, so replicas sharing the
journal run it once too.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Final

import msgspec
from mcp.server.request_state import InvalidRequestState

from fastgate.durable import JournalStore

STATE_TTL: Final = 600.0  # ten minutes to answer
_PREFIX: Final = "fg1."
_MIN_KEY: Final = 32
_USED_LIMIT: Final = 100_000  # nonces remembered (each for STATE_TTL at most)


def _b64u(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _b64u_decode(text: str) -> bytes:
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if _b64u(raw) != text:  # only the canonical spelling: no second token for one payload
        raise ValueError("non-canonical base64url")
    return raw


class HmacStateCodec:
    """A ``RequestStateCodec``: the payload, then its HMAC-SHA-256 tag under ``keys[0]``;
    every key of ``keys`` verifies (rotation). Tags are compared in constant time."""

    def __init__(self, keys: Sequence[bytes]) -> None:
        if not keys:
            raise ValueError("the request-state codec needs at least one key")
        for key in keys:
            if not isinstance(key, bytes) or len(key) < _MIN_KEY:
                raise ValueError(f"a request-state key must be at least {_MIN_KEY} random bytes")
        self._keys = [bytes(k) for k in keys]

    def seal(self, payload: bytes) -> str:
        body = _PREFIX + _b64u(payload)
        return body + "." + _b64u(self._tag(self._keys[0], body))

    def unseal(self, token: str) -> bytes:
        if not isinstance(token, str) or not token.startswith(_PREFIX) or token.count(".") != 2:
            raise InvalidRequestState("malformed")
        body, _, tag_text = token.rpartition(".")
        try:
            tag = _b64u_decode(tag_text)
            payload = _b64u_decode(body[len(_PREFIX) :])
        except ValueError:
            raise InvalidRequestState("malformed") from None
        matched = False
        for key in self._keys:
            matched |= hmac.compare_digest(self._tag(key, body), tag)
        if not matched:
            raise InvalidRequestState("seal")
        return payload

    @staticmethod
    def _tag(key: bytes, body: str) -> bytes:
        return hmac.new(key, body.encode("ascii"), hashlib.sha256).digest()


def state_key(text: str | bytes | None) -> bytes:
    """The gateway's sealing key: given (a file's contents: hex, or raw bytes), or a fresh random
    one (then only this process can verify its states: replicas need one key)."""
    if text is None:
        return os.urandom(32)
    raw = text.strip() if isinstance(text, bytes) else text.strip().encode()
    try:
        key = bytes.fromhex(raw.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        key = raw
    if len(key) < _MIN_KEY:
        raise ValueError(f"the request-state key must be at least {_MIN_KEY} bytes (64 hex digits)")
    return key


class ApprovalClaims(msgspec.Struct, frozen=True):
    """What the gateway puts in the state it hands out (and checks when it comes back)."""

    principal: str
    tool: str
    arguments: str  # SHA-256 hex of the canonical arguments
    generation: str  # the policy the question was asked under
    nonce: str
    expires: float
    session: str  # the session of the call that asked ("<principal>/<client session>")
    key: str | None  # its idempotency key (the gateway's spelling), None without one


_ENCODER: Final = msgspec.json.Encoder(order="sorted")
_CLAIMS: Final = msgspec.json.Decoder(ApprovalClaims)


def canonical_arguments(arguments: Any) -> bytes:
    """The arguments as canonical JSON (sorted keys, no spaces, UTF-8): what is digested."""
    return _ENCODER.encode(arguments)


def digest_of(canonical: bytes) -> str:
    """SHA-256 hex of canonical arguments: equal JSON values, one digest; a different byte,
    another."""
    return hashlib.sha256(canonical).hexdigest()


def arguments_digest(arguments: Any) -> str:
    """SHA-256 hex of the arguments as canonical JSON (sorted keys)."""
    return digest_of(canonical_arguments(arguments))


def mint(
    principal: str,
    tool: str,
    arguments: str,
    generation: str,
    ttl: float = STATE_TTL,
    *,
    session: str,
    key: str | None,
) -> str:
    """The claims of a new state, for the call ``(session, key)`` that asked."""
    claims = ApprovalClaims(
        principal,
        tool,
        arguments,
        generation,
        secrets.token_urlsafe(16),
        time.time() + ttl,
        session,
        key,
    )
    return _ENCODER.encode(claims).decode()


def approval_key(claims: ApprovalClaims) -> str:
    """The journal key of the approved run of a call that asked without an idempotency key:
    every retry carrying the state is one journal entry, on every replica sharing the journal."""
    return "state:" + claims.nonce


def keeps_journal(store: Any) -> bool:
    """Whether an executor's store answers keyed repeats (a ``JournalStore``)."""
    return store is not None and isinstance(store, JournalStore)


class StateProblem(Exception):
    """Why a returned state does not let the call go on (``reason`` for ``details``)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class UsedNonces:
    """The nonces already answered: one approval state approves one run of one call.

    ``take`` binds a nonce to the journal entry its first use is keyed under, ``(session,
    key)``; the state passes again only for that same entry (a re-sent retry, which the journal
    answers with the recorded result), never for another session or key, and never when the
    first use had no entry (``scope`` None: no key, or no journal to answer)."""

    def __init__(self) -> None:
        self._used: OrderedDict[str, tuple[float, tuple[str, str] | None]] = OrderedDict()

    def take(self, nonce: str, expires: float, scope: tuple[str, str] | None) -> bool:
        now = time.time()
        used = self._used
        while used and (next(iter(used.values()))[0] < now or len(used) >= _USED_LIMIT):
            used.popitem(last=False)
        known = used.get(nonce)
        if known is not None:
            return scope is not None and known[1] == scope
        used[nonce] = (expires, scope)
        return True


def check(
    plaintext: str,
    *,
    principal: str,
    tool: str,
    arguments: str,
    generation: str,
    session: str,
    key: str | None,
) -> ApprovalClaims:
    """The claims of a verified state, checked against this call (``StateProblem`` if not):
    the same principal, tool and arguments, in the session and under the idempotency key of
    the call that asked, not expired, under the same policy."""
    try:
        claims = _CLAIMS.decode(plaintext)
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise StateProblem("invalid_request_state", "the approval state is malformed") from None
    if not hmac.compare_digest(claims.principal, principal):
        raise StateProblem("invalid_request_state", "the approval state is another caller's")
    if claims.tool != tool or not hmac.compare_digest(claims.arguments, arguments):
        raise StateProblem("invalid_request_state", "the approval state was given for another call")
    if claims.session != session or claims.key != key:
        raise StateProblem(
            "invalid_request_state",
            "the approval state was given for a call in another session or under another "
            "idempotency key (retry the call as it was sent)",
        )
    if claims.expires <= time.time():
        raise StateProblem("invalid_request_state", "the approval state has expired")
    if claims.generation != generation:
        raise StateProblem(
            "policy_changed", "the policy changed since the approval was asked; ask again"
        )
    return claims
