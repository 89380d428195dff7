"""OAuth 2.1 for MCP servers over HTTP (SPEC §14 *Authorization*): ``OAuthClient``,
``TokenStore``, and the HTTP pieces the bridge puts on each connection.

The flows are the MCP SDK's client auth (protected-resource and authorization-server metadata
discovery, PKCE authorization code, client credentials with a secret or ``private_key_jwt``,
client ID metadata documents, dynamic registration, scope step-up, the RFC 9207 ``iss`` check,
credentials bound to their issuer). What fastgate adds around them:

- a redirect seam: without a browser the authorization URL is requested headless and the
  redirect back is captured; a callable can do it any other way;
- tokens and registrations kept in a ``TokenStore`` (a JSON file per server, mode 0600, written
  atomically), with the absolute expiry, so a restarted host refreshes instead of signing in;
- refresh *before* expiry (a margin of the token's lifetime);
- every 401/403 of the MCP server, and every authorization that failed, becomes a JSON-RPC
  error only the bridge can recognise (a per-connection nonce), so it is reported as
  ``unauthorized`` naming the server, never as a protocol error; secrets are taken out of
  every message.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import email.utils
import hashlib
import inspect
import json
import logging
import os
import re
import secrets
import stat
import threading
import time
import warnings
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Final, Literal
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx2
from mcp.client.auth import OAuthClientProvider, OAuthFlowError
from mcp.client.auth.extensions.client_credentials import (
    ClientCredentialsOAuthProvider,
    PrivateKeyJWTOAuthProvider,
    SignedJWTParameters,
)
from mcp.client.auth.extensions.identity_assertion import IdentityAssertionOAuthProvider
from mcp.client.auth.oauth2 import OAuthContext
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)
from mcp.shared.exceptions import MCPDeprecationWarning
from pydantic import AnyUrl, ValidationError

from fastgate.mcp._http import BodyTooLarge, BoundedBodies, UnreadableEvent
from fastgate.mcp._text import shown

log = logging.getLogger("fastgate.mcp")

Grant = Literal["authorization_code", "client_credentials", "identity_assertion"]
GRANTS: Final = ("authorization_code", "client_credentials", "identity_assertion")
MAX_REMEMBERED = 1024  # secrets remembered for cleaning messages
MIN_SECRET = 6  # shorter values are not taken out of messages (they would mangle them)
REFRESH_MARGIN = 60.0  # seconds before expiry a token is renewed (at most half its lifetime)
MAX_REDIRECTS = 10  # hops the headless sign-in follows before the redirect back
UNAUTHORIZED_KEY: Final = "fastgate_unauthorized"  # in the JSON-RPC error's data: the nonce
RATE_LIMITED_KEY: Final = "fastgate_rate_limited"  # the same, for a 429
_RETRY_AFTER_LIMIT = 86400.0  # seconds: a longer Retry-After is read as this
_MARK: Final = "fastgate_unauthorized"  # request extension: answer without the network
_MCP_REQUEST: Final = "fastgate_mcp_request"  # request extension: a request of the MCP transport
_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})
_FILE_VERSION = 1


def redact(text: str, secrets: list[str]) -> str:
    for value in sorted(set(secrets), key=len, reverse=True):
        text = text.replace(value, "[redacted]")
    return text


class _CleanRecords(logging.Filter):
    """On the SDK's auth loggers: the secrets of every live sign-in are taken out of a record's
    message and traceback (the SDK logs a failed sign-in's exception, whose message may quote
    what an authorization server answered)."""

    def filter(self, record: logging.LogRecord) -> bool:
        secrets = remembered()
        if not secrets:
            return True
        message = record.getMessage()
        cleaned = redact(message, secrets)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_info:
            text = logging.Formatter().formatException(record.exc_info)
            record.exc_text = redact(text, secrets)
            record.exc_info = None
        return True


# Every secret this process's sign-ins have held (newest last, bounded): a message quoting one,
# even an old token an authorization server echoes back, is cleaned before anyone sees it.
_REMEMBERED: dict[str, None] = {}
_REMEMBERED_LOCK = threading.Lock()


def remember(*values: str | None) -> None:
    with _REMEMBERED_LOCK:
        for value in values:
            if value and len(value) >= MIN_SECRET:
                _REMEMBERED.pop(value, None)
                _REMEMBERED[value] = None
        while len(_REMEMBERED) > MAX_REMEMBERED:
            del _REMEMBERED[next(iter(_REMEMBERED))]


def remembered() -> list[str]:
    with _REMEMBERED_LOCK:
        return list(_REMEMBERED)


_SDK_AUTH_LOGGERS = (
    "mcp.client.auth",
    "mcp.client.auth.oauth2",
    "mcp.client.auth.utils",
    "mcp.client.auth.extensions.client_credentials",
    "mcp.client.auth.extensions.identity_assertion",
)
for _name in _SDK_AUTH_LOGGERS:
    logging.getLogger(_name).addFilter(_CleanRecords())


def _now() -> float:
    """Wall-clock seconds (tokens expire in wall-clock time); tests replace it."""
    return time.time()


# -- the configuration ------------------------------------------------------------------------


RedirectSeam = Callable[[str], "str | Awaitable[str]"]
# (audience: the authorization server's issuer, resource: the MCP server) -> an ID-JAG
AssertionSource = Callable[[str, str], "str | Awaitable[str]"]


@dataclasses.dataclass(frozen=True)
class OAuthClient:
    """How the bridge signs in to an MCP server over HTTP (OAuth 2.1).

    - Authorization code with PKCE (the default grant): ``client_id`` (and ``client_secret``)
      of a pre-registered client, else the ``client_metadata_url`` (a client ID metadata
      document, when the authorization server supports them), else dynamic registration.
      ``redirect`` receives the authorization URL and returns the URL the browser was sent
      back to (the ``redirect_uri`` with ``code`` and ``state``), sync or async; ``None``
      requests the URL headless and follows the redirects to the ``redirect_uri`` (for
      authorization servers that approve without a person, such as test servers).
    - Client credentials (``grant="client_credentials"``, or whenever ``private_key_pem`` is
      given): ``client_id`` with ``client_secret`` (``client_secret_basic``) or with
      ``private_key_pem`` (``private_key_jwt``, an RSA, EC or Ed25519 key; the algorithm follows
      the key).

    - Enterprise-managed authorization (SEP-990, ``grant="identity_assertion"``, or whenever
      ``identity_assertion`` is given): ``identity_assertion(audience, resource)`` returns an
      identity assertion grant (ID-JAG) from the organisation's identity provider for that
      authorization server (``issuer``, required) and MCP server; it is exchanged with
      ``client_id`` and ``client_secret`` (``client_secret_basic``) for the access token.

    ``scope`` is requested when the server's challenge and metadata name none. ``issuer``, when
    given, is the only authorization server the credentials are ever sent to. Tokens and
    registrations are kept in ``token_store`` (default: ``TokenStore()``, files of mode 0600
    under ``~/.fastgate/tokens``).
    """

    client_id: str | None = None
    client_secret: str | None = dataclasses.field(default=None, repr=False)
    private_key_pem: str | None = dataclasses.field(default=None, repr=False)
    scope: str | None = None
    client_metadata_url: str | None = None
    redirect: RedirectSeam | None = dataclasses.field(default=None, repr=False)
    token_store: TokenStore | None = None
    grant: Grant | None = None
    redirect_uri: str = "http://127.0.0.1/callback"
    client_name: str = "fastgate"
    issuer: str | None = None
    identity_assertion: AssertionSource | None = dataclasses.field(default=None, repr=False)

    def __post_init__(self) -> None:
        for field in ("client_id", "client_secret", "scope", "client_name"):
            value = getattr(self, field)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ValueError(f"OAuthClient: {field} must be a non-empty string or None")
        if self.grant is not None and self.grant not in GRANTS:
            raise ValueError(f"OAuthClient: grant must be one of {', '.join(GRANTS)} or None")
        if self.client_secret is not None and self.client_id is None:
            raise ValueError("OAuthClient: a client_secret needs its client_id")
        if self.private_key_pem is not None:
            self._check_key()
        if self.effective_grant == "client_credentials":
            if self.client_id is None:
                raise ValueError("OAuthClient: client credentials need a client_id")
            if (self.client_secret is None) == (self.private_key_pem is None):
                raise ValueError(
                    "OAuthClient: client credentials need exactly one of client_secret "
                    "(client_secret_basic) and private_key_pem (private_key_jwt)"
                )
        if self.effective_grant == "identity_assertion":
            if not callable(self.identity_assertion):
                raise ValueError("OAuthClient: identity_assertion must be a callable")
            if self.client_id is None or self.client_secret is None or self.issuer is None:
                raise ValueError(
                    "OAuthClient: an identity assertion grant needs client_id, client_secret "
                    "and issuer (the authorization server it is exchanged at)"
                )
        elif self.identity_assertion is not None:
            raise ValueError(f"OAuthClient: identity_assertion is not used by grant {self.grant!r}")
        url = self.client_metadata_url
        if url is not None:
            parts = urlsplit(url) if isinstance(url, str) else None
            if parts is None or parts.scheme != "https" or parts.path in ("", "/"):
                raise ValueError(
                    "OAuthClient: client_metadata_url must be an https URL with a path "
                    "(the address of the client ID metadata document)"
                )
        if self.redirect is not None and not callable(self.redirect):
            raise ValueError("OAuthClient: redirect must be a callable (url -> callback url)")
        if self.token_store is not None and not isinstance(self.token_store, TokenStore):
            raise ValueError("OAuthClient: token_store must be a TokenStore")
        for field in ("redirect_uri", "issuer"):
            value = getattr(self, field)
            if value is not None and not _is_http_url(value):
                raise ValueError(f"OAuthClient: {field} must be an http:// or https:// URL")

    @property
    def effective_grant(self) -> Grant:
        if self.grant is not None:
            return self.grant
        if self.identity_assertion is not None:
            return "identity_assertion"
        return "client_credentials" if self.private_key_pem is not None else "authorization_code"

    def _check_key(self) -> None:
        if self.grant == "authorization_code":
            raise ValueError(
                "OAuthClient: private_key_pem (private_key_jwt) is for client credentials, "
                "not the authorization code grant"
            )
        try:
            _signing_algorithm(self.private_key_pem)
        except (TypeError, ValueError) as exc:
            # The key's text never goes into the message.
            raise ValueError(f"OAuthClient: private_key_pem: {exc}") from None


def _is_http_url(value: object) -> bool:
    if not isinstance(value, str):
        return False
    parts = urlsplit(value)
    return parts.scheme in ("http", "https") and bool(parts.netloc)


def is_loopback(url: str) -> bool:
    return (urlsplit(url).hostname or "") in _LOOPBACK


def _signing_algorithm(pem: object) -> str:
    """The JWS algorithm that goes with a private key: RS256, ES256/384/512 or EdDSA."""
    if not isinstance(pem, str) or "PRIVATE KEY" not in pem:
        raise ValueError("must be a PEM private key")
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    try:
        key = load_pem_private_key(pem.encode(), password=None)
    except (TypeError, ValueError):
        raise ValueError("is not a readable, unencrypted PEM private key") from None
    if isinstance(key, rsa.RSAPrivateKey):
        return "RS256"
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return "EdDSA"
    if isinstance(key, ec.EllipticCurvePrivateKey):
        by_curve = {"secp256r1": "ES256", "secp384r1": "ES384", "secp521r1": "ES512"}
        algorithm = by_curve.get(key.curve.name)
        if algorithm is not None:
            return algorithm
    raise ValueError("the key type is not RSA, EC (P-256, P-384, P-521) or Ed25519")


# -- the token store --------------------------------------------------------------------------


class TokenStore:
    """Where each server's OAuth tokens (with their absolute expiry) and client registration are
    kept: one JSON file per server and client in ``directory`` (default ``~/.fastgate/tokens``),
    mode 0600, replaced atomically on every change. ``TokenStore.in_memory()`` keeps them for
    the process only. A file that cannot be read is ignored (the server signs in afresh) with a
    warning that names the file, never its contents."""

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        if directory is None:
            directory = Path("~/.fastgate/tokens").expanduser()
        self.directory: Path | None = Path(directory)
        self._memory: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    @classmethod
    def in_memory(cls) -> TokenStore:
        store = cls.__new__(cls)
        store.directory = None
        store._memory = {}
        store._lock = threading.Lock()
        return store

    def __repr__(self) -> str:
        where = "memory" if self.directory is None else str(self.directory)
        return f"TokenStore({where})"

    def path_for(self, key: str) -> Path | None:
        """The file that holds ``key``'s entry (None in memory)."""
        if self.directory is None:
            return None
        return self.directory / f"{key}.json"

    async def load(self, key: str) -> dict[str, Any] | None:
        return await asyncio.to_thread(self._load, key)

    async def save(self, key: str, entry: Mapping[str, Any]) -> None:
        await asyncio.to_thread(self._save, key, dict(entry))

    def _load(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            path = self.path_for(key)
            if path is None:
                entry = self._memory.get(key)
                return json.loads(json.dumps(entry)) if entry is not None else None
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except FileNotFoundError:
                return None
            except OSError as exc:
                log.warning(
                    "OAuth token file %s cannot be opened (%s); signing in afresh", path, exc
                )
                return None
            try:
                with os.fdopen(fd, "rb") as f:
                    entry = json.loads(f.read(1 << 20))
            except (OSError, ValueError):
                log.warning("OAuth token file %s is not valid JSON; signing in afresh", path)
                return None
            if not isinstance(entry, dict) or entry.get("version") != _FILE_VERSION:
                log.warning("OAuth token file %s has an unknown layout; signing in afresh", path)
                return None
            return entry

    def _save(self, key: str, entry: dict[str, Any]) -> None:
        entry = {"version": _FILE_VERSION, **entry}
        with self._lock:
            path = self.path_for(key)
            if path is None:
                self._memory[key] = json.loads(json.dumps(entry))
                return
            directory = path.parent
            if not directory.exists():
                directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            data = json.dumps(entry, sort_keys=True).encode()
            temp = directory / f".{path.name}.{secrets.token_hex(6)}.tmp"
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(temp, flags, 0o600)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(temp, path)
            except BaseException:
                with _suppressed(OSError):
                    os.unlink(temp)
                raise
            _fsync_directory(directory)


class _suppressed:
    def __init__(self, *kinds: type[BaseException]) -> None:
        self.kinds = kinds

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> bool:
        return kind is not None and issubclass(kind, self.kinds)


def _fsync_directory(directory: Path) -> None:
    with _suppressed(OSError):
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def file_mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def store_key(server: str, url: str, oauth: OAuthClient) -> str:
    """The entry of one server and client identity: a changed URL, client or grant never
    reuses another's tokens."""
    identity = "\0".join(
        [url, oauth.effective_grant, oauth.client_id or "", oauth.client_metadata_url or ""]
    )
    return f"{server}-{hashlib.sha256(identity.encode()).hexdigest()[:16]}"


class _StoredCredentials:
    """The SDK's ``TokenStorage`` for one server, over a ``TokenStore`` entry. The absolute
    expiry is kept beside the token, taken when the token is stored (as the SDK takes it)."""

    def __init__(self, store: TokenStore, key: str, configured: tuple[str, ...] = ()) -> None:
        self._store = store
        self._key = key
        self._entry: dict[str, Any] | None = None
        self.issued_at = 0.0
        self.expires_at: float | None = None
        remember(*configured)

    def remember(self, *values: str | None) -> None:
        remember(*values)

    async def _current(self) -> dict[str, Any]:
        if self._entry is None:
            self._entry = await self._store.load(self._key) or {}
            self.issued_at = _number(self._entry.get("issued_at")) or 0.0
            self.expires_at = _number(self._entry.get("expires_at"))
        return self._entry

    async def get_tokens(self) -> OAuthToken | None:
        raw = (await self._current()).get("tokens")
        try:
            tokens = OAuthToken.model_validate(raw) if raw is not None else None
        except ValidationError:
            return None
        if tokens is not None:
            self.remember(tokens.access_token, tokens.refresh_token)
        return tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.remember(tokens.access_token, tokens.refresh_token)
        entry = dict(await self._current())
        entry["tokens"] = tokens.model_dump(mode="json", exclude_none=True)
        self.issued_at = _now()
        expires_in = tokens.expires_in
        self.expires_at = self.issued_at + int(expires_in) if expires_in is not None else None
        entry["issued_at"] = self.issued_at
        entry["expires_at"] = self.expires_at
        self._entry = entry
        await self._store.save(self._key, entry)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        raw = (await self._current()).get("client_info")
        try:
            info = OAuthClientInformationFull.model_validate(raw) if raw is not None else None
        except ValidationError:
            return None
        if info is not None:
            self.remember(info.client_secret)
        return info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.remember(client_info.client_secret)
        entry = dict(await self._current())
        entry["client_info"] = client_info.model_dump(mode="json", exclude_none=True)
        self._entry = entry
        await self._store.save(self._key, entry)


def _number(value: object) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


# -- the SDK's providers, with fastgate's expiry, pre-registration and redirect seam -----------


class _RefreshingContext(OAuthContext):
    """A token that can be renewed without a person (a refresh token, or client credentials)
    counts as expired a margin before it is (a tenth of its lifetime, at most
    ``REFRESH_MARGIN``), so it is renewed before the server would refuse it; any other token is
    used until it expires."""

    renews_silently: bool = False
    hard_expiry: float | None = None

    def update_token_expiry(self, token: OAuthToken) -> None:
        issued = _now()
        expires_at = None if token.expires_in is None else issued + int(token.expires_in)
        self.set_expiry(issued, expires_at)

    def set_expiry(self, issued: float, expires_at: float | None) -> None:
        self.hard_expiry = expires_at
        self.token_expiry_time = None if expires_at is None else _renew_at(issued, expires_at)

    def is_token_valid(self) -> bool:
        if not (self.current_tokens and self.current_tokens.access_token):
            return False
        if self.hard_expiry is None or self.token_expiry_time is None:
            return True
        renewable = self.renews_silently or self.can_refresh_token()
        return _now() < (self.token_expiry_time if renewable else self.hard_expiry)


def _renew_at(issued: float, expires_at: float) -> float:
    lifetime = max(0.0, expires_at - issued)
    return expires_at - min(REFRESH_MARGIN, lifetime / 10)


class _Fastgate:
    """What every provider of the bridge does beyond the SDK's (mixed in first)."""

    context: OAuthContext
    _initialized: bool
    _credentials: _StoredCredentials
    _fixed_client: OAuthClientInformationFull | None = None

    def _adopt(self, credentials: _StoredCredentials) -> None:
        self._credentials = credentials
        old = self.context
        self.context = _RefreshingContext(
            server_url=old.server_url,
            client_metadata=old.client_metadata,
            storage=old.storage,
            redirect_handler=old.redirect_handler,
            callback_handler=old.callback_handler,
            client_metadata_url=old.client_metadata_url,
        )

    async def _initialize(self) -> None:
        context = self.context
        context.current_tokens = await self._credentials.get_tokens()
        if context.current_tokens is not None and isinstance(context, _RefreshingContext):
            # A token read back expires when it was stored to, not "never" (the SDK's view).
            context.set_expiry(self._credentials.issued_at, self._credentials.expires_at)
        if self._fixed_client is not None:
            context.client_info = self._fixed_client
        else:
            context.client_info = await self._credentials.get_client_info()
        self._initialized = True

    def secrets(self) -> list[str]:
        """Every value that must never appear in a message."""
        tokens = self.context.current_tokens
        info = self.context.client_info
        if tokens is not None:
            remember(tokens.access_token, tokens.refresh_token)
        if info is not None:
            remember(info.client_secret)
        return remembered()


class _AuthorizationCode(_Fastgate, OAuthClientProvider):
    async def _perform_authorization(self) -> httpx2.Request:
        self._choose_secret_method()
        return await super()._perform_authorization()

    async def _refresh_token(self) -> httpx2.Request:
        self._choose_secret_method()
        return await super()._refresh_token()

    def _choose_secret_method(self) -> None:
        """A pre-registered client's secret goes the way the authorization server supports:
        HTTP Basic unless it lists only ``client_secret_post``."""
        info = self._fixed_client
        if info is None or not info.client_secret:
            return
        metadata = self.context.oauth_metadata
        supported = (metadata.token_endpoint_auth_methods_supported if metadata else None) or []
        method = (
            "client_secret_post"
            if "client_secret_post" in supported and "client_secret_basic" not in supported
            else "client_secret_basic"
        )
        if info.token_endpoint_auth_method != method:
            info = info.model_copy(update={"token_endpoint_auth_method": method})
            self._fixed_client = info
            self.context.client_info = info


class _RenewsAhead(_Fastgate):
    """Client credentials have no refresh token: a token about to expire is replaced by a new
    client-credentials grant before the request, not after the server refused it."""

    def _due(self) -> bool:
        context = self.context
        return bool(
            self._initialized
            and context.current_tokens is not None
            and context.oauth_metadata is not None
            and not context.is_token_valid()
        )

    async def _renewal(self) -> httpx2.Request:
        request: httpx2.Request = await self._exchange_token_client_credentials()  # type: ignore[attr-defined]
        return request

    async def _auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        if self._due():
            # Held across the round trip: concurrent requests wait for one renewal.
            async with self.context.lock:
                if self._due():
                    response = yield await self._renewal()
                    try:
                        await self._handle_token_response(response)  # type: ignore[attr-defined]
                    except OAuthFlowError:
                        self.context.clear_tokens()  # the 401 path below signs in afresh
        flow = super()._auth_flow(request)  # type: ignore[misc]
        try:
            outgoing = await flow.__anext__()
            while True:
                outgoing = await flow.asend((yield outgoing))
        except StopAsyncIteration:
            return
        finally:
            await flow.aclose()


class _ClientSecret(_RenewsAhead, ClientCredentialsOAuthProvider):
    pass


class _PrivateKeyJWT(_RenewsAhead, PrivateKeyJWTOAuthProvider):
    pass


class _Redirect:
    """The redirect seam of the authorization code grant: the SDK hands the authorization URL
    to ``open`` and asks ``callback`` for the code."""

    def __init__(self, seam: RedirectSeam | None, redirect_uri: str) -> None:
        self._seam = seam
        self._redirect_uri = redirect_uri
        self._callback: str | None = None

    async def open(self, authorization_url: str) -> None:
        self._callback = None
        if self._seam is None:
            self._callback = await _follow_headless(authorization_url, self._redirect_uri)
            return
        if inspect.iscoroutinefunction(self._seam):
            answer = await self._seam(authorization_url)
        else:
            answer = await asyncio.to_thread(self._seam, authorization_url)
            if inspect.isawaitable(answer):
                answer = await answer
        if not isinstance(answer, str) or not _is_http_url(answer):
            raise OAuthFlowError("the redirect callable did not return the callback URL")
        self._callback = answer

    async def callback(self) -> AuthorizationCodeResult:
        url, self._callback = self._callback, None
        if url is None:
            raise OAuthFlowError("no callback URL came back from the sign-in")
        query = {k: v[0] for k, v in parse_qs(urlsplit(url).query).items() if v}
        if "error" in query:
            described = query.get("error_description", "")
            raise OAuthFlowError(
                f"the authorization server refused the sign-in: {query['error'][:100]}"
                + (f" ({described[:200]})" if described else "")
            )
        code = query.get("code")
        if not code:
            raise OAuthFlowError("the callback URL has no authorization code")
        return AuthorizationCodeResult(code=code, state=query.get("state"), iss=query.get("iss"))


async def _follow_headless(authorization_url: str, redirect_uri: str) -> str:
    """Request the authorization URL without a browser and follow its redirects until one
    points at ``redirect_uri`` (which is never requested: nothing listens there)."""
    target = urlsplit(redirect_uri)
    url = authorization_url
    bounded = BoundedBodies(httpx2.AsyncHTTPTransport())
    async with httpx2.AsyncClient(timeout=30.0, follow_redirects=False, transport=bounded) as http:
        for _ in range(MAX_REDIRECTS):
            if not _is_http_url(url):
                raise OAuthFlowError("the sign-in redirected to a URL that is not http(s)")
            response = await http.get(url)
            await response.aclose()
            location = response.headers.get("location")
            if response.status_code not in (301, 302, 303, 307, 308) or not location:
                raise OAuthFlowError(
                    f"the authorization server answered the sign-in with HTTP "
                    f"{response.status_code} instead of redirecting back: a person has to sign "
                    "in; give OAuthClient(redirect=...) a function that opens the URL in a "
                    "browser and returns the URL it is sent back to"
                )
            url = urljoin(url, location)
            if _same_endpoint(urlsplit(url), target):
                return url
    raise OAuthFlowError(f"the sign-in did not redirect back within {MAX_REDIRECTS} hops")


def _same_endpoint(url: Any, target: Any) -> bool:
    # A loopback redirect URI matches on any port (RFC 8252 §7.3).
    return bool(
        url.scheme == target.scheme
        and url.hostname == target.hostname
        and (target.port is None or url.port == target.port)
        and (url.path or "/") == (target.path or "/")
    )


class _IdentityAssertion(IdentityAssertionOAuthProvider):
    def secrets(self) -> list[str]:
        if self._tokens is not None:
            remember(self._tokens.access_token, self._tokens.refresh_token)
        return remembered()


def _assertion_source(source: AssertionSource) -> Callable[[str, str], Awaitable[str]]:
    async def assertion(audience: str, resource: str) -> str:
        if inspect.iscoroutinefunction(source):
            answer = await source(audience, resource)
        else:
            answer = await asyncio.to_thread(source, audience, resource)
            if inspect.isawaitable(answer):
                answer = await answer
        if not isinstance(answer, str) or not answer:
            raise OAuthFlowError("identity_assertion returned no assertion")
        return answer

    return assertion


def make_provider(server: str, url: str, oauth: OAuthClient) -> _Fastgate | _IdentityAssertion:
    """The SDK provider for one server, its tokens in the configured store."""
    store = oauth.token_store if oauth.token_store is not None else TokenStore()
    configured = (oauth.client_secret or "", oauth.private_key_pem or "")
    credentials = _StoredCredentials(store, store_key(server, url, oauth), configured)
    if oauth.effective_grant == "identity_assertion":
        assert oauth.client_id and oauth.client_secret and oauth.issuer
        assert oauth.identity_assertion is not None
        return _IdentityAssertion(
            url,
            credentials,
            oauth.client_id,
            oauth.client_secret,
            oauth.issuer,
            _assertion_source(oauth.identity_assertion),
            scope=oauth.scope,
            token_endpoint_auth_method="client_secret_basic",
        )
    provider: _Fastgate
    with warnings.catch_warnings():
        # issuer=None is a documented choice here: whichever server discovery names.
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        if oauth.effective_grant == "client_credentials":
            assert oauth.client_id is not None
            if oauth.private_key_pem is not None:
                assertion = SignedJWTParameters(
                    issuer=oauth.client_id,
                    subject=oauth.client_id,
                    signing_key=oauth.private_key_pem,
                    signing_algorithm=_signing_algorithm(oauth.private_key_pem),
                ).create_assertion_provider()
                provider = _PrivateKeyJWT(
                    url,
                    credentials,
                    oauth.client_id,
                    assertion,
                    scope=oauth.scope,
                    issuer=oauth.issuer,
                )
            else:
                assert oauth.client_secret is not None
                provider = _ClientSecret(
                    url,
                    credentials,
                    oauth.client_id,
                    oauth.client_secret,
                    scope=oauth.scope,
                    issuer=oauth.issuer,
                )
        else:
            provider = _authorization_code(url, oauth, credentials)
    provider._adopt(credentials)
    if isinstance(provider, _RenewsAhead):
        provider._fixed_client = provider._fixed_client_info
        assert isinstance(provider.context, _RefreshingContext)
        provider.context.renews_silently = True
    return provider


def _authorization_code(
    url: str, oauth: OAuthClient, credentials: _StoredCredentials
) -> _AuthorizationCode:
    redirect = _Redirect(oauth.redirect, oauth.redirect_uri)
    metadata = OAuthClientMetadata(
        client_name=oauth.client_name,
        redirect_uris=[AnyUrl(oauth.redirect_uri)],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        scope=oauth.scope,
        token_endpoint_auth_method=None if oauth.client_secret else "none",
    )
    provider = _AuthorizationCode(
        url,
        metadata,
        credentials,
        redirect_handler=redirect.open,
        callback_handler=redirect.callback,
        client_metadata_url=oauth.client_metadata_url,
    )
    if oauth.client_id is not None:
        provider._fixed_client = OAuthClientInformationFull(
            client_id=oauth.client_id,
            client_secret=oauth.client_secret,
            redirect_uris=[AnyUrl(oauth.redirect_uri)],
            grant_types=["authorization_code", "refresh_token"],
            token_endpoint_auth_method="client_secret_basic" if oauth.client_secret else "none",
            scope=oauth.scope,
            issuer=oauth.issuer,
        )
    return provider


# -- on the connection: unauthorized answers the bridge recognises -----------------------------


class ConnectionAuth(httpx2.Auth):
    """The ``auth`` of one connection's HTTP client. It marks the MCP transport's own requests
    (so ``RefusalAnswers`` knows them from the sign-in's requests) and runs the provider's
    flow, if there is one. A flow that fails is remembered for this connection: its request,
    and every later one, is answered 401 without the network, with the reason."""

    def __init__(
        self, provider: _Fastgate | _IdentityAssertion | None, extra_secrets: tuple[str, ...] = ()
    ) -> None:
        self._provider = provider
        self._extra_secrets = tuple(s for s in extra_secrets if s)
        self.failure: str | None = None

    async def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        request.extensions = {**request.extensions, _MCP_REQUEST: True}
        provider = self._provider
        if provider is None:
            yield request
            return
        if self.failure is not None:
            request.extensions = {**request.extensions, _MARK: self.failure}
            yield request
            return
        flow = provider.async_auth_flow(request)  # type: ignore[union-attr]
        try:
            outgoing = await flow.__anext__()
            while True:
                response = yield outgoing
                outgoing = await flow.asend(response)
        except StopAsyncIteration:
            return
        except Exception as exc:
            # (the authorization server's words: escaped, they are logged and shown)
            self.failure = shown(self.redact(_flow_failure(exc)))
            log.warning("MCP authorization failed: %s", self.failure)
            request.headers.pop("Authorization", None)
            request.extensions = {**request.extensions, _MARK: self.failure}
        finally:
            await flow.aclose()
        yield request

    def redact(self, text: str) -> str:
        if self._provider is not None:
            self._provider.secrets()  # remembers the ones it holds now
        return redact(text, [*self._extra_secrets, *remembered()])


def _flow_failure(exc: BaseException) -> str:
    if isinstance(exc, httpx2.TransportError):
        return f"the authorization server could not be reached ({type(exc).__name__})"
    if isinstance(exc, ValidationError):
        return (
            "the authorization server sent metadata or tokens that do not parse "
            f"({exc.error_count()} problem(s))"
        )
    text = str(exc) or type(exc).__name__
    return text[:500]


class RefusalAnswers(httpx2.AsyncBaseTransport):
    """Below the auth flow: a 401 or 403 of the MCP server keeps its status and headers (the
    sign-in reads ``WWW-Authenticate``) and gets a JSON-RPC error body carrying this
    connection's nonce, which the bridge reads as ``unauthorized``. A request the flow marked
    failed is answered the same way without being sent. A 429 (too many requests) gets such a
    body too, with its ``Retry-After`` in seconds, which the bridge reads as rate limited: the
    SDK would otherwise turn it into an internal error without either."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, nonce: str, auth: ConnectionAuth):
        self._inner = inner
        self._nonce = nonce
        self._auth = auth

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        failure = request.extensions.get(_MARK)
        if failure is not None:
            return self._answer(request, 401, {}, f"the authorization failed: {failure}")
        response = await self._inner.handle_async_request(request)
        if response.status_code not in (401, 403, 429) or not request.extensions.get(_MCP_REQUEST):
            return response
        try:
            # (only its status and headers are read)
            with contextlib.suppress(BodyTooLarge, UnreadableEvent):
                await response.aread()
        finally:
            await response.aclose()
        if response.status_code == 429:
            return self._rate_limited(request, response.headers)
        return self._answer(
            request, response.status_code, response.headers, _refusal(response, self._auth)
        )

    def _rate_limited(self, request: httpx2.Request, headers: Mapping[str, str]) -> httpx2.Response:
        wait = retry_after_seconds(headers.get("retry-after", ""))
        body = {
            "jsonrpc": "2.0",
            "id": None,
            "error": {
                "code": -32000,
                "message": "the server answered HTTP 429 (too many requests)",
                "data": {RATE_LIMITED_KEY: self._nonce, "status": 429, "retry_after": wait},
            },
        }
        return httpx2.Response(
            429,
            headers={"content-type": "application/json"},
            content=json.dumps(body).encode(),
            request=request,
        )

    def _answer(
        self, request: httpx2.Request, status: int, headers: Mapping[str, str], reason: str
    ) -> httpx2.Response:
        kept = {
            k: v
            for k, v in headers.items()
            if k.lower()
            not in ("content-type", "content-length", "transfer-encoding", "content-encoding")
        }
        body = {
            "jsonrpc": "2.0",
            "id": None,
            "error": {
                "code": -32001,
                "message": reason,
                "data": {UNAUTHORIZED_KEY: self._nonce, "status": status},
            },
        }
        return httpx2.Response(
            status,
            headers={**kept, "content-type": "application/json"},
            content=json.dumps(body).encode(),
            request=request,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


def _refusal(response: httpx2.Response, auth: ConnectionAuth) -> str:
    """What a 401/403 said: its status and the ``WWW-Authenticate`` error, bounded."""
    text = f"the server answered HTTP {response.status_code}"
    challenge = response.headers.get("www-authenticate", "")
    found = dict(re.findall(r'(error|error_description|scope)="([^"]{0,200})"', challenge))
    if found.get("error"):
        text += f" ({found['error']}"
        if found.get("error_description"):
            text += f": {found['error_description']}"
        if response.status_code == 403 and found.get("scope"):
            text += f"; needs scope {found['scope']}"
        text += ")"
    if auth._provider is None:
        text += "; the server needs authorization: give MCPServerConfig(auth=OAuthClient(...))"
    return auth.redact(text)


@dataclasses.dataclass(frozen=True, slots=True)
class RateLimited:
    """A server's 429: ``retry_after`` in seconds (None: it gave no readable ``Retry-After``)."""

    retry_after: float | None


def retry_after_seconds(value: str) -> float | None:
    """A ``Retry-After`` header in seconds from now (it gives seconds or an HTTP date), at most
    a day; None when absent or unreadable."""
    value = value.strip()
    if not value:
        return None
    if value.isdigit():
        return min(float(value), _RETRY_AFTER_LIMIT)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    seconds = (when - datetime.datetime.now(datetime.UTC)).total_seconds()
    return min(max(seconds, 0.0), _RETRY_AFTER_LIMIT)


def is_mcp_request(request: httpx2.Request) -> bool:
    """A request of the MCP transport itself, not one of a sign-in (metadata, registration,
    token): only these say anything about the MCP server."""
    return bool(request.extensions.get(_MCP_REQUEST))


def is_unauthorized(data: object, nonce: str) -> bool:
    """Whether a JSON-RPC error's ``data`` is this connection's unauthorized answer (a server
    cannot forge it: it does not know the nonce)."""
    return isinstance(data, dict) and data.get(UNAUTHORIZED_KEY) == nonce


def new_nonce() -> str:
    return secrets.token_hex(16)


class HttpAuth:
    """The authorization pieces of one connection of one server: the HTTP client's ``auth`` and
    transport, and how to recognise their unauthorized answers. The provider (and so the tokens
    in memory) outlives connections; the nonce and a failed sign-in do not."""

    def __init__(
        self,
        provider: _Fastgate | _IdentityAssertion | None,
        config_secrets: tuple[str, ...],
        post_seconds: float | None = None,
    ) -> None:
        self.nonce = new_nonce()
        self.auth = ConnectionAuth(provider, config_secrets)
        self.post_seconds = post_seconds  # how long a POST's answer may take (BoundedBodies)

    def client_options(self, *, utf8_events: bool = False) -> dict[str, Any]:
        """The options of the connection's HTTP client; ``utf8_events``: its event streams
        checked to be UTF-8 (``BoundedBodies``)."""
        bounded = BoundedBodies(
            httpx2.AsyncHTTPTransport(), post_seconds=self.post_seconds, utf8_events=utf8_events
        )
        return {
            "auth": self.auth,
            # Every body the server (or its authorization server) sends is bounded as it is
            # read, the unauthorized answers' included.
            "transport": RefusalAnswers(
                bounded,
                self.nonce,
                self.auth,
            ),
        }

    def rate_limited(self, exc: BaseException) -> RateLimited | None:
        """This connection's answer to a 429, if ``exc`` is one."""
        from mcp.shared.exceptions import MCPError

        if not isinstance(exc, MCPError):
            return None
        data = exc.error.data
        if not (isinstance(data, dict) and data.get(RATE_LIMITED_KEY) == self.nonce):
            return None
        wait = data.get("retry_after")
        return RateLimited(float(wait) if isinstance(wait, (int, float)) else None)

    def reason(self, exc: BaseException) -> str | None:
        """The unauthorized answer ``exc`` carries (inside the groups the SDK may wrap it in),
        or None."""
        from mcp.shared.exceptions import MCPError

        while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
            exc = exc.exceptions[0]
        if isinstance(exc, MCPError) and is_unauthorized(exc.error.data, self.nonce):
            return self.auth.redact(exc.error.message)
        if isinstance(exc, httpx2.HTTPStatusError) and exc.response.status_code in (401, 403):
            return self.auth.redact(_refusal(exc.response, self.auth))  # the SSE stream's GET
        return None
