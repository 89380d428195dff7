"""What stands in front of ``/mcp``: who is calling, how fast, and how slowly it sends.

Authentication is ``Authenticate``: a bearer token from the gateway's token table (or, without
tokens, a loopback connection as ``local``) makes the request's user the SDK's
``AuthenticatedUser``, as the SDK's ``BearerAuthBackend`` under Starlette's
``AuthenticationMiddleware`` would; the SDK's ``RequireAuthMiddleware`` answers 401. Then a
per-principal request rate (429 beyond it). The SDK's session manager sets the body size limit
(413) and answers everything MCP.

In front of every route, ``AllowedHosts`` checks the ``Host`` and ``Origin`` headers
(DNS-rebinding protection) as the SDK checks ``/mcp``'s: a page a browser loaded from another
site, under a name that resolves to this machine, reads nothing (``/healthz``, which answers
only "ok", stays open to load balancers' probes). Without tokens, ``LoopbackOnly`` refuses
other machines (403) on every route but ``/healthz``, the console's included; and
``BodyDeadline`` gives every request body, the console's forms included, the same deadline
(408 for a client that sends too slowly).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any, Final

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from starlette.authentication import AuthCredentials, UnauthenticatedUser
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fastgate.serve._callers import LOCAL_CALLER, Caller, TokenTable

CALLER_KEY: Final = "fastgate.caller"  # the scope key holding the request's Caller
_RATE_TABLE_LIMIT: Final = 100_000  # principals whose buckets are kept (the idle go first)


OPEN_PATHS: Final = frozenset({"/healthz"})  # answered whatever the Host: they return no data


class AllowedHosts:
    """Every HTTP request but ``open_paths`` must name an allowed ``Host`` (421 otherwise) and,
    when it carries an ``Origin``, an allowed origin (403): the same rules as the SDK's
    ``TransportSecurityMiddleware`` (exact values, or ``host:*`` for any port). ``hosts`` None
    checks nothing; the allowed origins are ``http://`` and ``https://`` of each host."""

    def __init__(
        self,
        app: ASGIApp,
        hosts: Iterable[str] | None,
        open_paths: Iterable[str] = OPEN_PATHS,
    ) -> None:
        self.app = app
        self._hosts = None if hosts is None else _Allowed(hosts)
        self._origins = (
            None
            if hosts is None
            else _Allowed(f"{scheme}://{host}" for scheme in ("http", "https") for host in hosts)
        )
        self._open = frozenset(open_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            self._hosts is None
            or self._origins is None
            or scope["type"] not in ("http", "websocket")
            or scope.get("path") in self._open
        ):
            await self.app(scope, receive, send)
            return
        host = origin = None
        for name, value in scope["headers"]:
            if name == b"host" and host is None:
                host = value.decode("latin-1")
            elif name == b"origin" and origin is None:
                origin = value.decode("latin-1")
        if not host or not self._hosts.admits(host):
            await _plain(send, 421, "Invalid Host header")
            return
        if origin and not self._origins.admits(origin):
            await _plain(send, 403, "Invalid Origin header")
            return
        await self.app(scope, receive, send)


class _Allowed:
    __slots__ = ("exact", "prefixes")

    def __init__(self, values: Iterable[str]) -> None:
        listed = list(values)
        self.exact = frozenset(listed)
        self.prefixes = tuple(v[:-1] for v in listed if v.endswith(":*"))  # "host:" any port

    def admits(self, value: str) -> bool:
        return value in self.exact or (bool(self.prefixes) and value.startswith(self.prefixes))


async def _plain(send: Send, status: int, text: str) -> None:
    body = text.encode()
    headers = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def caller_of(scope: Scope) -> Caller | None:
    user = scope.get("user")
    if isinstance(user, AuthenticatedUser):
        caller = (user.access_token.claims or {}).get(CALLER_KEY)
        if isinstance(caller, Caller):
            return caller
    return None


def _access(caller: Caller) -> AccessToken:
    # client_id is the principal: the SDK binds a session to the credential that opened it,
    # by these components, so one principal never uses another's session.
    return AccessToken(token="", client_id=caller.principal, scopes=[], claims={CALLER_KEY: caller})


_Authenticated = tuple[AuthCredentials, AuthenticatedUser]


def _authenticated(caller: Caller) -> _Authenticated:
    access = _access(caller)
    return AuthCredentials(access.scopes), AuthenticatedUser(access)


class Authenticate:
    """Sets ``scope["auth"]`` and ``scope["user"]`` of every HTTP and WebSocket request, as
    Starlette's ``AuthenticationMiddleware`` does with the SDK's ``BearerAuthBackend``: the
    caller of the first ``Authorization: Bearer`` header's token (``tokens``), or with no tokens
    ``local`` for a connection from this machine; anyone else is Starlette's unauthenticated
    user. Each caller's credentials and user are made once, and the header is read straight
    from the request: a known caller's request costs the token's digest and no new objects."""

    def __init__(self, app: ASGIApp, tokens: TokenTable | None) -> None:
        self.app = app
        self._tokens = tokens
        callers = tokens.callers() if tokens is not None else [LOCAL_CALLER]
        self._known = {caller: _authenticated(caller) for caller in callers}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            known = self._authenticate(scope)
            if known is None:
                scope["auth"], scope["user"] = AuthCredentials(), UnauthenticatedUser()
            else:
                scope["auth"], scope["user"] = known
        await self.app(scope, receive, send)

    def _authenticate(self, scope: Scope) -> _Authenticated | None:
        tokens = self._tokens
        if tokens is None:
            return self._known[LOCAL_CALLER] if is_loopback(scope) else None
        for name, value in scope["headers"]:
            if name == b"authorization":  # ASGI names are lower case; the first one counts
                header = value.decode("latin-1")
                if not header.lower().startswith("bearer "):
                    return None
                caller = tokens.verify(header[7:])
                return None if caller is None else self._known[caller]
        return None


def is_loopback(scope: Scope) -> bool:
    client = scope.get("client")
    if not client:
        return False
    try:
        address = ipaddress.ip_address(client[0])
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return bool((mapped or address).is_loopback)


async def send_json(send: Send, status: int, body: dict[str, Any], **headers: str) -> None:
    payload = json.dumps(body).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    raw += [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": payload})


class LoopbackOnly:
    """Without tokens, a request from another machine is refused (403), not asked for a token
    it could never have; ``open_paths`` are answered all the same."""

    def __init__(
        self, app: ASGIApp, on_reject: Callable[[int], None], open_paths: Iterable[str] = ()
    ) -> None:
        self.app = app
        self._on_reject = on_reject
        self._open = frozenset(open_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope.get("path") not in self._open
            and not is_loopback(scope)
        ):
            self._on_reject(403)
            await send_json(
                send,
                403,
                {
                    "error": "forbidden",
                    "error_description": "this gateway serves only this machine; start it with "
                    "--tokens to serve others",
                },
            )
            return
        await self.app(scope, receive, send)


class _Bucket:
    __slots__ = ("stamp", "tokens")

    def __init__(self, tokens: float, stamp: float) -> None:
        self.tokens = tokens
        self.stamp = stamp


class RateLimit:
    """Per principal, at most ``rate`` requests a second on average with bursts of ``burst``
    (a token bucket); a request beyond it gets 429 with ``Retry-After``."""

    def __init__(
        self, app: ASGIApp, rate: float, burst: int, on_reject: Callable[[int], None]
    ) -> None:
        if not (rate > 0 and math.isfinite(rate)) or burst < 1:
            raise ValueError("rate limit: expected a rate > 0 per second and a burst >= 1")
        self.app = app
        self.rate = float(rate)
        self.burst = float(burst)
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()
        self._on_reject = on_reject

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        caller = caller_of(scope)
        if caller is not None and scope["type"] == "http" and not self._take(caller.principal):
            self._on_reject(429)
            wait = max(1, math.ceil(1.0 / self.rate))
            await send_json(
                send,
                429,
                {
                    "error": "rate_limited",
                    "error_description": f"more than {self.rate:g} requests a second from "
                    f"{caller.principal}; retry after {wait} s",
                },
                retry_after=str(wait),
            )
            return
        await self.app(scope, receive, send)

    def _take(self, principal: str) -> bool:
        now = time.monotonic()
        buckets = self._buckets
        bucket = buckets.get(principal)
        if bucket is None:
            if len(buckets) >= _RATE_TABLE_LIMIT:
                buckets.popitem(last=False)
            bucket = buckets[principal] = _Bucket(self.burst, now)
        else:
            buckets.move_to_end(principal)
            bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.stamp) * self.rate)
            bucket.stamp = now
        if bucket.tokens < 1.0:
            return False
        bucket.tokens -= 1.0
        return True


class _TooSlow(Exception):
    pass


class BodyDeadline:
    """A request body must arrive within ``timeout`` seconds of the request (408 otherwise):
    a client trickling bytes cannot hold a request open, whichever route reads the body.
    Requests by GET and HEAD carry no body (what a GET stream receives is its end) and are
    left alone."""

    def __init__(self, app: ASGIApp, timeout: float, on_reject: Callable[[int], None]) -> None:
        if not timeout > 0:
            raise ValueError(f"read timeout: expected seconds > 0, got {timeout!r}")
        self.app = app
        self.timeout = float(timeout)
        self._on_reject = on_reject

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") in ("GET", "HEAD"):
            await self.app(scope, receive, send)
            return
        deadline = asyncio.get_running_loop().time() + self.timeout
        complete = False
        started = False

        async def timed_receive() -> Message:
            nonlocal complete
            if complete:
                return await receive()
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                raise _TooSlow from None
            if message["type"] != "http.request" or not message.get("more_body", False):
                complete = True
            return message

        async def watched_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, timed_receive, watched_send)
        except _TooSlow:
            self._on_reject(408)
            if not started:
                await send_json(
                    send,
                    408,
                    {
                        "error": "request_timeout",
                        "error_description": f"the request body did not arrive within "
                        f"{self.timeout:g} s",
                    },
                    connection="close",
                )
