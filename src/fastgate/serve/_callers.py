"""Who is calling: the tokens file, the principal behind a bearer token, and session ids.

A tokens file maps the SHA-256 hex digest of each bearer token to its caller::

    {"<sha256 hex of a token>": {"principal": "alice", "mode": "default", "scope": null}}

The gateway never holds the tokens themselves, only their digests. A presented token is hashed
and compared with every digest in constant time (``hmac.compare_digest``), so neither the
position of a differing byte nor which entry matched shows in the time taken.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fastgate.model import PermissionMode

LOCAL = "local"  # the principal of a loopback connection (no tokens) and of stdio
_DIGEST = re.compile(r"[0-9a-f]{64}")
# A principal names a caller in session ids ("<principal>/<client session>"), logs and metrics:
# no "/" (it would blur that boundary), no spaces or control characters.
_PRINCIPAL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@:+-]{0,63}")
_MAX_CLIENT_SESSION = 128


class TokensError(ValueError):
    """A tokens file the gateway cannot use; the message names the file and the entry."""


@dataclass(frozen=True, slots=True)
class Caller:
    """One caller of the gateway.

    ``mode``: the permission mode its calls are decided in (None: the gateway's). ``scope``: the
    registry scope its tools come from (None: every tool; a tuple: tool-name patterns, made into
    a scope of its own by the gateway)."""

    principal: str
    mode: PermissionMode | None = None
    scope: str | tuple[str, ...] | None = None


LOCAL_CALLER = Caller(LOCAL)


def token_digest(token: str) -> str:
    """The SHA-256 hex digest a tokens file lists for ``token``."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


class TokenTable:
    """The callers of a tokens file, by token digest."""

    def __init__(self, entries: Mapping[str, Caller]) -> None:
        self._entries = [(bytes.fromhex(digest), caller) for digest, caller in entries.items()]
        if not self._entries:
            raise TokensError("a tokens file must list at least one token")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> TokenTable:
        where = os.fspath(path)
        try:
            with open(where, encoding="utf-8") as f:
                raw = json.load(f)
        except OSError as exc:
            raise TokensError(f"{where}: cannot be read: {exc.strerror or exc}") from None
        except (ValueError, RecursionError) as exc:
            raise TokensError(f"{where}: not JSON: {exc}") from None
        return cls.from_mapping(raw, where)

    @classmethod
    def from_mapping(cls, raw: Any, where: str = "tokens") -> TokenTable:
        if not isinstance(raw, dict):
            raise TokensError(f"{where}: expected an object of token digests")
        return cls({digest: _caller(where, digest, entry) for digest, entry in raw.items()})

    def callers(self) -> list[Caller]:
        return [caller for _, caller in self._entries]

    def verify(self, token: str) -> Caller | None:
        """The caller of ``token``, or None. Every digest is compared, in constant time."""
        presented = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        found: Caller | None = None
        for digest, caller in self._entries:
            if hmac.compare_digest(digest, presented):
                found = caller
        return found


def _caller(where: str, digest: object, entry: object) -> Caller:
    if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
        shown = repr(digest)[:24]
        raise TokensError(
            f"{where}: key {shown}: expected the SHA-256 hex digest of a token (64 lowercase "
            "hex digits; `printf %s TOKEN | sha256sum`), never the token itself"
        )
    label = f"{where}: {digest[:12]}…"
    if not isinstance(entry, dict):
        raise TokensError(f"{label}: expected an object with a principal")
    unknown = set(entry) - {"principal", "mode", "scope"}
    if unknown:
        raise TokensError(f"{label}: unknown field(s) {', '.join(sorted(unknown))}")
    principal = entry.get("principal")
    if not isinstance(principal, str) or not _PRINCIPAL.fullmatch(principal):
        raise TokensError(
            f"{label}: principal: expected 1-64 characters of letters, digits and _.@:+- "
            f"(no '/'), got {principal!r}"
        )
    mode = entry.get("mode")
    try:
        parsed_mode = None if mode is None else PermissionMode.parse(mode)
    except ValueError as exc:
        raise TokensError(f"{label}: mode: {exc}") from None
    return Caller(principal, parsed_mode, _scope(label, entry.get("scope")))


def _scope(label: str, scope: object) -> str | tuple[str, ...] | None:
    if scope is None or (isinstance(scope, str) and scope):
        return scope
    if isinstance(scope, list) and scope and all(isinstance(p, str) and p for p in scope):
        return tuple(scope)
    raise TokensError(
        f"{label}: scope: expected null, a registry scope's name, or a list of tool names "
        f"(fnmatch patterns), got {scope!r}"
    )


def session_id(principal: str, client_session: str | None) -> str:
    """The session of a call: ``<principal>/<client session>``, or the principal alone. Two
    principals never share one (a principal has no "/")."""
    return principal if not client_session else f"{principal}/{client_session}"


def clean_client_session(value: object) -> str | None:
    """A client's own session name when it is usable (printable, at most 128 characters)."""
    if not isinstance(value, str) or not value or len(value) > _MAX_CLIENT_SESSION:
        return None
    if not value.isprintable():
        return None
    return value


def principals(callers: Iterable[Caller]) -> set[str]:
    return {caller.principal for caller in callers}
