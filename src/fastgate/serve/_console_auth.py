"""Who may use the console: admin tokens (their SHA-256 digests, one per line of
``--console-token-file``), the session cookie a token is exchanged for, its CSRF token, and the
checks every state-changing request passes.

A caller's bearer token is never looked at here: the console knows only its own admins. The
cookie is ``HttpOnly`` (no script reads it) and ``SameSite=Strict`` (no other site's page sends
it); every POST also carries the session's CSRF token and, when the browser says where it comes
from (``Origin``, ``Sec-Fetch-Site``), must come from the console's own origin.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import os
import re
import secrets
import time
from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import urlsplit

COOKIE: Final = "fastgate_console"
SESSION_TTL: Final = 8 * 3600.0  # a sign-in lasts a working day
_SESSIONS_LIMIT: Final = 1_000  # signed-in browsers kept (the oldest go first)
_DIGEST: Final = re.compile(r"[0-9a-f]{64}")
_FAILURES_PER_MINUTE: Final = 10  # wrong tokens from one address before 429
_ADDRESSES_LIMIT: Final = 10_000


class ConsoleTokensError(ValueError):
    """An admin token file the console cannot use; the message names the file and line."""


class AdminTokens:
    """The admins' token digests. A presented token is hashed and compared with every digest in
    constant time; ``verify`` gives the admin's label (``admin-<line>``) or None."""

    def __init__(self, digests: Iterable[str]) -> None:
        self._entries: list[tuple[bytes, str]] = []
        for number, digest in enumerate(digests, 1):
            if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
                raise ConsoleTokensError(
                    f"admin token {number}: expected the SHA-256 hex digest of a token (64 "
                    "lowercase hex digits; `printf %s TOKEN | sha256sum`), never the token itself"
                )
            self._entries.append((bytes.fromhex(digest), f"admin-{number}"))
        if not self._entries:
            raise ConsoleTokensError("the console needs at least one admin token digest")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> AdminTokens:
        """One digest per line; blank lines and lines starting with ``#`` are skipped."""
        where = os.fspath(path)
        try:
            with open(where, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConsoleTokensError(f"{where}: cannot be read: {exc}") from None
        digests: list[str] = []
        for number, line in enumerate(lines, 1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            if not _DIGEST.fullmatch(text):
                raise ConsoleTokensError(
                    f"{where}:{number}: expected the SHA-256 hex digest of an admin token (64 "
                    "lowercase hex digits; `printf %s TOKEN | sha256sum`), never the token itself"
                )
            digests.append(text)
        if not digests:
            raise ConsoleTokensError(f"{where}: lists no admin token digest")
        return cls(digests)

    def verify(self, token: str) -> str | None:
        presented = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        found: str | None = None
        for digest, label in self._entries:
            if hmac.compare_digest(digest, presented):
                found = label
        return found


@dataclass(frozen=True, slots=True)
class ConsoleSession:
    """A signed-in browser: its admin, its CSRF token, when it ends (monotonic seconds);
    ``ended`` is set once it is over (signed out, expired, or pushed out by newer ones)."""

    admin: str
    csrf: str
    expires: float
    ended: asyncio.Event = field(default_factory=asyncio.Event, compare=False, repr=False)

    async def wait_ended(self) -> None:
        """Return once the session is over: at sign-out or at its expiry."""
        try:
            async with asyncio.timeout(max(0.0, self.expires - time.monotonic())):
                await self.ended.wait()
        except TimeoutError:
            self.ended.set()


class ConsoleSessions:
    """Session id (the cookie's value, 256 random bits) -> ``ConsoleSession``, in memory: a
    restart signs everyone out."""

    def __init__(self, ttl: float = SESSION_TTL) -> None:
        self.ttl = ttl
        self._sessions: OrderedDict[str, ConsoleSession] = OrderedDict()

    def open(self, admin: str) -> tuple[str, ConsoleSession]:
        while len(self._sessions) >= _SESSIONS_LIMIT:
            self._sessions.popitem(last=False)[1].ended.set()
        sid = secrets.token_urlsafe(32)
        session = ConsoleSession(admin, secrets.token_urlsafe(32), time.monotonic() + self.ttl)
        self._sessions[sid] = session
        return sid, session

    def get(self, sid: str | None) -> ConsoleSession | None:
        if not sid:
            return None
        session = self._sessions.get(sid)
        if session is None:
            return None
        if session.expires <= time.monotonic():
            del self._sessions[sid]
            session.ended.set()
            return None
        return session

    def close(self, sid: str | None) -> None:
        session = self._sessions.pop(sid, None) if sid else None
        if session is not None:
            session.ended.set()


class SignInLimit:
    """At most ``_FAILURES_PER_MINUTE`` wrong tokens a minute from one address. An attempt
    counts from the moment it is made, before its token is read: however many are sent at once,
    no more than the limit are ever judged in a minute."""

    def __init__(self) -> None:
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def attempt(self, address: str) -> float | None:
        """Count a sign-in from ``address`` as a wrong token until ``succeeded`` says otherwise:
        its stamp, or None when the address has used up its minute (answer 429)."""
        recent = self._recent(address)
        if recent is None:
            while len(self._failures) >= _ADDRESSES_LIMIT:
                self._failures.popitem(last=False)
            recent = self._failures[address] = deque()
        if len(recent) >= _FAILURES_PER_MINUTE:
            return None
        stamp = time.monotonic()
        recent.append(stamp)
        return stamp

    def succeeded(self, address: str, stamp: float) -> None:
        """The attempt of ``stamp`` brought a right token: it is not a failure."""
        recent = self._failures.get(address)
        if recent is not None:
            with contextlib.suppress(ValueError):  # (already out of the window)
                recent.remove(stamp)

    def _recent(self, address: str) -> deque[float] | None:
        recent = self._failures.get(address)
        if recent is None:
            return None
        horizon = time.monotonic() - 60.0
        while recent and recent[0] < horizon:
            recent.popleft()
        return recent


def cookie_header(sid: str, path: str, secure: bool, max_age: int) -> str:
    flags = f"{COOKIE}={sid}; Path={path}; HttpOnly; SameSite=Strict; Max-Age={max_age}"
    return flags + ("; Secure" if secure else "")


def cookie_value(headers: Mapping[str, str]) -> str | None:
    """The console's cookie in a ``Cookie`` header (the first of that name)."""
    for part in headers.get("cookie", "").split(";"):
        name, _, value = part.strip().partition("=")
        if name == COOKIE:
            return value
    return None


def same_origin(headers: Mapping[str, str]) -> bool:
    """A request a browser sent from the console's own pages. ``Origin`` names host and port
    (the scheme is not compared: a TLS proxy in front changes it); ``Sec-Fetch-Site`` must be
    ``same-origin``. A client that sends neither is no browser page (the CSRF token still
    applies)."""
    host = headers.get("host", "")
    origin = headers.get("origin")
    if origin is not None:
        if origin == "null":
            return False
        try:
            netloc = urlsplit(origin).netloc
        except ValueError:
            return False
        if not host or netloc.lower() != host.lower():
            return False
    site = headers.get("sec-fetch-site")
    return site is None or site == "same-origin"


def csrf_matches(session: ConsoleSession, presented: object) -> bool:
    return isinstance(presented, str) and hmac.compare_digest(
        session.csrf.encode(), presented.encode("utf-8", "surrogatepass")
    )
