"""One MCP server connection: its owner task, its tools, its calls (SPEC §14 supervision).

The owner task enters and leaves the SDK client (anyio scopes must be exited by the task that
entered them), lists the tools, refreshes them on ``tools/list_changed``, and restarts a server
that died, with backoff. Calls come from the executor's tasks and use the session the owner
holds; while there is none, they fail at once with ``server_unavailable``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import itertools
import logging
import random
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final, cast

import anyio
import mcp_types
import msgspec
from mcp.shared.exceptions import MCPError
from mcp_types.methods import SERVER_RESULTS, validate_server_result
from mcp_types.version import KNOWN_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from pydantic import TypeAdapter, ValidationError

from fastgate import ErrorCode, Failure, RunContext, ToolDefinition, ToolFault
from fastgate.mcp._auth import HttpAuth, is_mcp_request, make_provider
from fastgate.mcp._config import MCPServerConfig
from fastgate.mcp._elicitation import CallInputs, Router, complete_call
from fastgate.mcp._http import MAX_BODY_BYTES, UNREADABLE_EVENT
from fastgate.mcp._names import tool_name
from fastgate.mcp._stdio import StderrTail, StdioTransport, Unreadable
from fastgate.mcp._text import shown
from fastgate.mcp._tools import Listing, build_listing, said_by, value_of
from mcp import Client

log = logging.getLogger("fastgate.mcp")

STARTING: Final = "starting"
READY: Final = "ready"
RESTARTING: Final = "restarting"
CLOSED: Final = "closed"

BACKOFF_FIRST = 0.25  # seconds before the first restart; doubled each time, up to the cap
BACKOFF_CAP = 30.0
STABLE_AFTER = 30.0  # a connection that lasted this long starts the backoff afresh
CANCEL_SETTLE = 5.0  # how long a cancelled call waits for its cancellation to be sent
POST_GRACE = 2.0  # seconds an HTTP POST's answer may take past call_timeout (startup_timeout)
# How long a call whose clock ran out waits for its request to wind down before it answers
# TIMEOUT; the request goes on winding down (sending its cancellation) in the background.
EXPIRED_SETTLE = 1.0
REFRESH_MIN_INTERVAL = 0.25  # seconds between two refreshes of a server's tools, at least
REFRESH_SPACING = 10.0  # and ten times what the last one took (parsing, compiling)
PROGRESS_MESSAGE_CHARS = 1_000  # of a progress notification's message, passed on
MAX_LIST_PAGES = 100  # pages of one tools/list; a server paging past it is refused
MAX_LISTED_TOOLS = 10_000  # tools in one listing, all pages together
# Bytes of one listing (its tools as JSON), all pages together: what the server's tools cost to
# hold and compile (a schema compiles to about 20 times its size, on the event loop) is bounded
# by it, not only by what one message may take.
MAX_LISTING_BYTES = 16 * 1024 * 1024
_UNAVAILABLE: Final = "server_unavailable"


class ConnectionLost(Exception):
    pass


class ProtocolFailure(ValueError):
    """The server refused a request of the bridge's own (the handshake, ``tools/list``) or
    answered it with something unusable; the message says which and how."""


class ServerLink:
    """Everything about one configured server. ``install`` puts a generation's definitions
    into the registry (the bridge's part); ``call`` is the body of every tool of this server."""

    def __init__(
        self,
        config: MCPServerConfig,
        install: Callable[[ServerLink, Listing], None],
        taken: Callable[[ServerLink, str], bool],
    ) -> None:
        self.config = config
        self._install = install
        self._taken = taken
        self.state = STARTING
        self.generation = 0
        self.tools: dict[str, ToolDefinition] = {}
        self.quarantined: dict[str, str] = {}
        self.last_error: str | None = None
        self.stderr = StderrTail()
        self.pid: int | None = None  # the server process now (stdio)
        self.pids: list[int] = []  # every server process started, in order
        self.protocol_version: str | None = None
        self.restarts = 0
        self._mode = "auto"  # "legacy" once the server proved to speak the handshake era
        # How the url is spoken; "auto" becomes "http" or "sse" at the first connection.
        self.transport = config.transport or "stdio"
        self._client: Client | None = None
        self._wake = asyncio.Event()
        self._closing = False
        self._serving = False
        self._lost: str | None = None
        self._refresh_wanted = False
        self._refresh_at = 0.0  # time.monotonic() before which no refresh starts
        self._fingerprint = b""
        self._listing: Listing | None = None  # the last one installed (a tool unchanged in
        # the next keeps its definition)
        self.first_attempt = asyncio.Event()
        self._change = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stdio: StdioTransport | None = None  # the stdio connection now, if any
        self._requests: set[asyncio.Task[Any]] = set()
        # OAuth: the provider (tokens in memory) lives as long as the link; each connection
        # gets its own HttpAuth (the nonce of its unauthorized answers, a failed sign-in).
        self._auth_provider = (
            make_provider(config.name, config.url, config.auth)
            if config.auth is not None and config.url is not None
            else None
        )
        self._http_auth: HttpAuth | None = None
        # Calls' elicitations of the older era arrive through one callback per connection.
        self._router = Router(config.name)
        self._request_ids = itertools.count(1)

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._own(), name=f"fastgate-mcp:{self.config.name}")

    async def close(self) -> None:
        self._closing = True
        self._wake.set()
        task = self._task
        if task is None:
            return
        if not self._serving and not task.done():
            task.cancel()  # still connecting (or waiting to): nothing to wind down gracefully
        await asyncio.wait({task})
        if self._requests:
            await asyncio.gather(*self._requests, return_exceptions=True)
        self.state = CLOSED

    async def changed(self) -> None:
        """Wait for the next change of state or generation."""
        await self._change.wait()

    def _changed(self) -> None:
        self._change.set()
        self._change = asyncio.Event()

    def closing(self) -> bool:
        return self._closing

    def lost_reason(self) -> str | None:
        """Why the connection of a link that says ``ready`` is in fact gone, or None while it
        holds. The owner task learns of a server's exit only when the event loop reads it;
        this asks now (the server process itself, over stdio)."""
        if self.state != READY:
            return None
        if self._lost is not None:
            return self._lost
        stdio = self._stdio
        if stdio is not None and not stdio.alive():
            return "the server process has exited"
        return None

    def current_state(self) -> str:
        """``state`` as it is now: a ready link whose server is gone is restarting, the owner
        task just has not run yet."""
        return RESTARTING if self.lost_reason() is not None else self.state

    async def _own(self) -> None:
        failures = 0
        try:
            while not self._closing:
                began = time.monotonic()
                try:
                    await self._connect_and_serve()
                except Exception as exc:  # a server that fails is retried; the reason is kept
                    if not self._closing:
                        self._failed(_describe(exc, self.stderr.text(), self._noise()))
                finally:
                    self._client = None
                    self._serving = False
                    self.first_attempt.set()
                if self.closing():  # (a method: it changes while we await)
                    break
                failures = 1 if time.monotonic() - began > STABLE_AFTER else failures + 1
                self.state = RESTARTING
                self._changed()
                delay = min(BACKOFF_CAP, BACKOFF_FIRST * 2 ** (failures - 1))
                await self._sleep(delay * random.uniform(0.8, 1.2))
                self.restarts += 1
        finally:
            self.state = CLOSED
            self._changed()

    async def _sleep(self, seconds: float) -> None:
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                while not self._closing:
                    await self._wake.wait()
                    self._wake.clear()

    async def _connect_and_serve(self) -> None:
        config = self.config
        self._lost = None
        self._stdio = None
        async with contextlib.AsyncExitStack() as stack:
            # asyncio's timeout, not anyio's: the client's own scopes, entered in here, stay
            # open past it (anyio requires its scopes to be exited in order).
            async with asyncio.timeout(config.startup_timeout):
                client = await self._connect(stack)
                self.protocol_version = client.protocol_version
                modern = client.protocol_version in MODERN_PROTOCOL_VERSIONS
                if not modern:
                    self._mode = "legacy"  # no discover probe on the next connect
                began = time.monotonic()
                await self._refresh(client)
                self._paced_after(began)
            self._client = client
            self._serving = True
            self.state = READY
            self.last_error = None
            self.first_attempt.set()
            self._changed()
            async with anyio.create_task_group() as group:
                if modern:
                    group.start_soon(self._listen, client)
                await self._serve(client)
                group.cancel_scope.cancel()

    async def _connect(self, stack: contextlib.AsyncExitStack) -> Client:
        """The client after its handshake, its transport's contexts in ``stack``."""
        config = self.config
        if config.command is not None:
            stdio = StdioTransport(tuple(config.command), config.env, config.cwd, self.stderr)
            stdio.on_lost = self._connection_lost
            stdio.on_spawn = self._spawned
            self._stdio = stdio
            return await self._handshake(stack, stdio)
        self._http_auth = http_auth = self._new_http_auth()
        if self.transport == "sse":
            return await self._handshake(stack, _sse_transport(config, http_auth))
        statuses = _FirstPostStatus()
        attempt = contextlib.AsyncExitStack()
        try:
            client = await self._handshake(
                attempt, await _http_transport(attempt, config, statuses.record, http_auth)
            )
        except BaseException as exc:
            await attempt.aclose()
            if not isinstance(exc, Exception) or statuses.legacy is None:
                raise
            if self.transport == "http":
                raise ProtocolFailure(
                    f"the server answered the first POST with HTTP {statuses.legacy}; an older "
                    'HTTP+SSE server needs "type": "sse" (transport="sse")'
                ) from exc
            # "auto": MCP's backwards compatibility, the older HTTP+SSE transport at the same URL.
            try:
                client = await self._handshake(stack, _sse_transport(config, http_auth))
            except Exception as sse_exc:
                raise ProtocolFailure(
                    f"streamable HTTP was refused (HTTP {statuses.legacy} to the first POST: "
                    f"{_describe(exc, '')}), and so was SSE at the same URL "
                    f"({_describe(sse_exc, '')})"
                ) from sse_exc
            self.transport = "sse"  # and so on every reconnect
            return client
        await stack.enter_async_context(attempt)
        if self.transport == "auto":
            self.transport = "http"  # and so on every reconnect
        return client

    def _new_http_auth(self) -> HttpAuth:
        oauth = self.config.auth
        hidden = (oauth.client_secret or "", oauth.private_key_pem or "") if oauth else ()
        config = self.config
        # No POST of the bridge's outlives its call or the server's start (and a grace).
        post_seconds = max(config.call_timeout, config.startup_timeout) + POST_GRACE
        return HttpAuth(self._auth_provider, hidden, post_seconds)

    def _unauthorized(self, exc: BaseException) -> str | None:
        """What the server's 401/403 (or a failed sign-in) said, if ``exc`` is one."""
        http_auth = self._http_auth
        return None if http_auth is None else http_auth.reason(exc)

    def _unauthorized_failure(self, exc: BaseException) -> ProtocolFailure | None:
        reason = self._unauthorized(exc)
        return None if reason is None else ProtocolFailure(f"unauthorized: {reason}")

    async def _handshake(self, stack: contextlib.AsyncExitStack, transport: Any) -> Client:
        client = Client(
            transport,
            mode=self._mode,
            message_handler=self._on_message,
            elicitation_callback=self._router.on_elicit,
            cache=None,
            client_info=mcp_types.Implementation(name="fastgate", version=_version()),
        )
        try:
            await stack.enter_async_context(client)
        except Exception as exc:  # the SDK's task group may wrap the server's error
            refused = self._unauthorized_failure(exc) or _refused(
                "the handshake", exc, self._over_http()
            )
            if refused is None:
                raise
            raise refused from None
        return client

    async def _serve(self, client: Client) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._closing:
                return
            if self._lost is not None:
                raise ConnectionLost(self._lost)
            if self._refresh_wanted:
                await self._pace_refresh()
                if self.closing():  # (methods: they change while we await)
                    return
                lost = self._lost_reason()
                if lost is not None:
                    raise ConnectionLost(lost)
                self._refresh_wanted = False
                began = time.monotonic()
                try:
                    with anyio.fail_after(self.config.startup_timeout):
                        await self._refresh(client)
                except (MCPError, TimeoutError, ValidationError, ValueError) as exc:
                    self._failed(f"refreshing the tool list failed: {exc}")
                    self._changed()
                finally:
                    self._paced_after(began)

    def _lost_reason(self) -> str | None:
        return self._lost

    def _paced_after(self, began: float) -> None:
        """The earliest the next refresh may start: a listing is parsed and compiled on the
        event loop, so a server that says its tools changed again and again (each time with a
        new listing) gets at most about a tenth of the loop's time, never all of it."""
        now = time.monotonic()
        self._refresh_at = now + max(REFRESH_MIN_INTERVAL, REFRESH_SPACING * (now - began))

    async def _pace_refresh(self) -> None:
        """Wait until a refresh may start (or the link closes, or the connection is lost)."""
        delay = self._refresh_at - time.monotonic()
        if delay <= 0:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):
                while not self._closing and self._lost is None:
                    await self._wake.wait()
                    self._wake.clear()

    def _failed(self, reason: str) -> None:
        """Keep ``reason`` as ``last_error`` and log it. It quotes the server (its messages,
        its stderr): its control characters are escaped, so none reaches a terminal or splits
        the log line."""
        self.last_error = shown(reason)
        log.warning("MCP server %s: %s", self.config.name, self.last_error)

    async def _listen(self, client: Client) -> None:
        """``tools/list_changed`` on the 2026 protocol comes through a subscription."""
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                self._want_refresh()  # a change between the first listing and the ack
                async for _ in subscription:
                    self._want_refresh()
        except Exception as exc:
            log.info(
                "MCP server %s: no list_changed subscription (%s)",
                self.config.name,
                shown(str(exc)),
            )

    def _noise(self) -> str:
        """What a connection that failed before it was ready read that was not JSON-RPC."""
        stdio = self._stdio
        if self._serving or stdio is None or not stdio.noise_lines:
            return ""
        return (
            f"its stdout had {stdio.noise_lines} line(s) that are not JSON-RPC, the last: "
            f"{stdio.last_noise!r}"
        )

    def _spawned(self, pid: int) -> None:
        self.pid = pid
        self.pids.append(pid)

    def _want_refresh(self) -> None:
        self._refresh_wanted = True
        self._wake.set()

    def _connection_lost(self, reason: str) -> None:
        if self._lost is None:
            self._lost = reason
        self._wake.set()

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            self._want_refresh()
        elif isinstance(message, Exception):
            log.debug("MCP server %s: stream: %s", self.config.name, shown(str(message)))

    # -- tools ---------------------------------------------------------------------------------

    async def _refresh(self, client: Client) -> None:
        raw_tools = await self._list_raw(client)
        # Every connection's session learns the header annotations afresh (a reconnect with an
        # unchanged listing too): its calls mirror them into Mcp-Param-* headers.
        dropped = _header_annotations(client, raw_tools)
        fingerprint = msgspec.json.encode(raw_tools)
        if fingerprint == self._fingerprint:
            return  # the same tools: keep the definitions (and every cache keyed by them)
        kept = [t for t in raw_tools if not (isinstance(t, dict) and t.get("name") in dropped)]
        listing = build_listing(self.config, kept, self.call, self._name_taken, self._listing)
        if dropped:
            listing = dataclasses.replace(listing, quarantined={**dropped, **listing.quarantined})
        self._install(self, listing)
        self._listing = listing
        self._fingerprint = fingerprint
        self.generation += 1
        self._changed()

    def _name_taken(self, name: str) -> bool:
        return self._taken(self, name)

    async def _list_raw(self, client: Client) -> list[Any]:
        """Every page of ``tools/list``, unparsed: the SDK refuses a whole listing for one
        malformed tool, and one bad tool must only quarantine itself."""
        tools: list[Any] = []
        cursor: str | None = None
        seen: set[str] = set()
        size = 0
        for _ in range(MAX_LIST_PAGES):
            params = {"cursor": cursor} if cursor else None
            try:
                page = await _raw_request(client, "tools/list", params)
            except MCPError as exc:
                refused = self._unauthorized_failure(exc) or _refused(
                    "tools/list", exc, self._over_http()
                )
                if refused is None:
                    raise
                raise refused from None
            listed = page.get("tools")
            if not isinstance(listed, list):
                raise ProtocolFailure("the tools/list reply has no list of tools")
            tools.extend(listed)
            if len(tools) > MAX_LISTED_TOOLS:
                raise ProtocolFailure(f"the tools/list reply has over {MAX_LISTED_TOOLS} tools")
            size += len(msgspec.json.encode(listed))
            if size > MAX_LISTING_BYTES:
                raise ProtocolFailure(
                    f"the tools/list reply is over {MAX_LISTING_BYTES} bytes of tools"
                )
            cursor = page.get("nextCursor")
            if not isinstance(cursor, str) or not cursor:
                return tools
            if cursor in seen:
                raise ProtocolFailure(
                    f"the tools/list reply repeats the cursor {cursor[:80]!r}: its pages loop"
                )
            seen.add(cursor)
        raise ProtocolFailure(f"the tools/list reply did not end within {MAX_LIST_PAGES} pages")

    # -- calls ---------------------------------------------------------------------------------

    async def call(self, remote: str, args: Any, ctx: RunContext) -> Any:
        client = self._client
        gone = self._lost or self.lost_reason()
        if client is None or gone is not None:
            raise self._unavailable("is not connected", sent=False, reason=gone)
        # The params as a CallToolRequest would carry them (the same dump), without the request.
        params = mcp_types.CallToolRequestParams(name=remote, arguments=args).model_dump(
            by_alias=True, mode="json", exclude_none=True
        )
        loop = asyncio.get_running_loop()
        watch = _Watch(loop, self.config, ctx)
        name = ctx.tool_name or tool_name(self.config.name, remote)
        inputs = CallInputs(self.config.name, remote, name, ctx, watch.hold)

        async def send(params: dict[str, Any]) -> Any:
            return await self._send(client, params, watch.progress, inputs)

        task = loop.create_task(
            complete_call(send, params, inputs),
            name=f"fastgate-mcp:{self.config.name}:{remote}",
        )
        self._requests.add(task)
        task.add_done_callback(self._request_done)
        watch.arm(task)
        try:
            reply = await self._reply(task, watch, inputs, remote)
        finally:
            await inputs.aclose()  # a question still open is cancelled with the call
        if isinstance(reply, Failure):
            return reply
        if inputs.refusal is not None:  # older era: a question went unanswered
            return inputs.failure(inputs.refusal, said=said_by(reply))
        return value_of(reply, self.config.name, remote)

    async def _send(
        self, client: Client, params: dict[str, Any], progress: Any, inputs: CallInputs
    ) -> Any:
        """One ``tools/call`` request. Its id, a new one each time, is also its progress token,
        which names the call to an ``elicitation/create`` of the server's (older era)."""
        token = f"fastgate-{next(self._request_ids)}"
        self._router.open(token, inputs)
        try:
            return await _call_tool(client, params, progress, token)
        finally:
            self._router.close(token)

    async def _reply(
        self, task: asyncio.Task[Any], watch: _Watch, inputs: CallInputs, remote: str
    ) -> Any:
        """The call's final reply (or a ``Failure`` for its unanswered input), the faults of
        the request turned into the call's."""
        try:
            # (``wait`` never cancels what it waits for: a cancellation of ours ends the wait)
            await asyncio.wait((task, watch.fired), return_when=asyncio.FIRST_COMPLETED)
            if not task.done():
                # Its clock ran out and the request is being cancelled: it gets a moment to
                # wind down (to send its notifications/cancelled), and goes on doing so in the
                # background; the caller has its TIMEOUT on time, whatever the server reads.
                await asyncio.wait((task,), timeout=EXPIRED_SETTLE)
                if not task.done():
                    assert watch.expired is not None
                    raise self._timeout(remote, watch.expired)
            return task.result()
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if watch.expired is None or (current is not None and current.cancelling()):
                # We were cancelled (the caller, the executor): cancel the request once, so
                # exactly one notifications/cancelled goes out, and let it be sent.
                if not task.done():
                    task.cancel()
                await _settle(task)
                raise
            raise self._timeout(remote, watch.expired) from None
        except MCPError as exc:
            unreadable = _unreadable(exc, self._over_http())
            if unreadable is not None:
                raise ToolFault(
                    f"MCP server {self.config.name} answered the call of {remote} with a reply "
                    f"that is {unreadable}. The call may or may not have run on the server; it "
                    "is not repeated automatically.",
                    details={"reason": "protocol_error", "server": self.config.name},
                ) from None
            if _connection_closed(exc, self._over_http()):
                raise self._unavailable(
                    "closed the connection during the call", sent=True
                ) from None
            if inputs.refusal is not None:  # the server gave up after an unanswered question
                return inputs.failure(inputs.refusal, said=exc.error.message)
            unauthorized = self._unauthorized(exc)
            if unauthorized is not None:
                raise ToolFault(
                    f"MCP server {self.config.name} refused the call of {remote}: "
                    f"unauthorized ({unauthorized})",
                    details={"reason": "unauthorized", "server": self.config.name},
                ) from None
            limited = self._http_auth.rate_limited(exc) if self._http_auth else None
            if limited is not None:
                raise self._rate_limited(remote, limited.retry_after) from None
            raise ToolFault(
                f"MCP server {self.config.name} refused the call of {remote}: {exc.error.message} "
                f"(JSON-RPC error {exc.code})",
                details={
                    "reason": "server_error",
                    "server": self.config.name,
                    "mcp_code": exc.code,
                },
            ) from None
        except ValidationError as exc:
            raise ToolFault(
                f"MCP server {self.config.name} answered the call of {remote} with a reply that "
                f"is not a valid tools/call result: {exc.error_count()} problem(s)",
                details={"reason": "protocol_error", "server": self.config.name},
            ) from None
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            self._connection_lost(f"transport failure: {exc}")
            raise self._unavailable(f"could not be reached ({exc})", sent=True) from None
        except Exception as exc:
            if _is_transport_error(exc):
                self._connection_lost(f"transport failure: {exc}")
                raise self._unavailable(f"could not be reached ({exc})", sent=True) from None
            raise
        finally:
            watch.disarm()

    def _over_http(self) -> bool:
        return self.config.command is None

    def _request_done(self, task: asyncio.Task[Any]) -> None:
        self._requests.discard(task)
        if not task.cancelled():
            task.exception()  # seen: the call that awaited it reported it, or was cancelled

    def _unavailable(self, what: str, *, sent: bool, reason: str | None = None) -> ToolFault:
        name = self.config.name
        outcome = (
            "The call may or may not have run on the server; it is not repeated automatically."
            if sent
            else "The call was not sent."
        )
        detail = self.last_error or self._lost or reason
        why = f" ({detail})" if detail and not sent else ""
        return ToolFault(
            f"MCP server {name} {what}{why}. {outcome} Try again later.",
            retryable=True,
            details={
                "reason": _UNAVAILABLE,
                "server": name,
                "state": self.current_state(),
                "sent": sent,
            },
        )

    def _rate_limited(self, remote: str, retry_after: float | None) -> ToolFault:
        """The server answered the call with HTTP 429: it did not run it, and says when to try
        again (``Retry-After``), which the result carries."""
        when = f" It asks to wait {retry_after:g}s." if retry_after is not None else ""
        return ToolFault(
            f"MCP server {self.config.name} is rate limiting calls and did not run {remote} "
            f"(HTTP 429).{when} Try again later.",
            code=ErrorCode.RESOURCE_EXHAUSTED,
            retryable=True,
            retry_after=retry_after,
            details={"reason": "upstream_rate_limited", "server": self.config.name},
        )

    def _timeout(self, remote: str, which: str) -> ToolFault:
        config = self.config
        if which == "idle_timeout":
            message = (
                f"{remote} on MCP server {config.name} sent no progress for "
                f"{config.idle_timeout:g}s (idle_timeout) and was cancelled."
            )
            limit = config.idle_timeout
        else:
            message = (
                f"{remote} on MCP server {config.name} did not finish within "
                f"{config.call_timeout:g}s (call_timeout) and was cancelled."
            )
            limit = config.call_timeout
        return ToolFault(
            message,
            code=ErrorCode.TIMEOUT,
            details={"reason": which, "server": config.name, "limit": limit},
        )


class _Watch:
    """The two clocks of one call: silence (``idle_timeout``, restarted by every progress
    notification) and the whole call (``call_timeout``). When one runs out, the request is
    cancelled, once."""

    __slots__ = (
        "_ctx",
        "_deadline",
        "_handle",
        "_held",
        "_idle",
        "_loop",
        "_task",
        "expired",
        "fired",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop, config: MCPServerConfig, ctx: RunContext):
        self._loop = loop
        self._ctx = ctx
        self._idle = config.idle_timeout
        self._deadline = loop.time() + config.call_timeout
        self._handle: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[Any] | None = None
        self._held = 0  # prompts open: the server waits for a person, not silent
        self.expired: str | None = None
        self.fired: asyncio.Future[None] = loop.create_future()  # done when a clock ran out

    def arm(self, task: asyncio.Task[Any]) -> None:
        self._task = task
        self._schedule()

    def disarm(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def hold(self, delta: int) -> None:
        """An elicitor prompt opened (+1) or closed (-1): while one is open only
        ``call_timeout`` runs; the idle clock starts afresh once none is."""
        self._held += delta
        if self.expired is None and self._handle is not None:
            self._schedule()

    def _schedule(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        idle_at = self._deadline if self._held else self._loop.time() + self._idle
        at = min(idle_at, self._deadline)
        self._handle = self._loop.call_at(at, self._expire)

    def _expire(self) -> None:
        self._handle = None
        task = self._task
        if task is None or task.done() or self.expired is not None:
            return
        self.expired = "call_timeout" if self._loop.time() >= self._deadline else "idle_timeout"
        task.cancel()
        self.fired.set_result(None)

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        if self.expired is None and self._handle is not None:
            self._schedule()
        # The executor keeps a call's last 256 reports: each message is the server's text, cut.
        if isinstance(message, str) and len(message) > PROGRESS_MESSAGE_CHARS:
            message = message[:PROGRESS_MESSAGE_CHARS] + "…"
        self._ctx.report_progress({"progress": progress, "total": total, "message": message})


async def _settle(task: asyncio.Task[Any]) -> None:
    """Wait (bounded) for a cancelled request to finish sending its cancellation. ``wait`` never
    cancels what it waits for: a second cancellation of ours ends the wait, not the request."""
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait({task}, timeout=CANCEL_SETTLE)


async def _call_tool(client: Client, params: dict[str, Any], progress: Any, request_id: str) -> Any:
    """A ``tools/call`` whose reply is checked against the negotiated era's result types, except
    that a 2026-era result may leave out ``resultType`` (absent means complete), which the SDK's
    own ``send_request`` refuses. ``pydantic.ValidationError`` for a reply that is no result."""
    reply = await _raw_request(
        client, "tools/call", dict(params), on_progress=progress, request_id=request_id
    )
    version = client.protocol_version or "2025-11-25"
    if version in MODERN_PROTOCOL_VERSIONS and isinstance(reply, dict):
        reply.setdefault("resultType", "complete")
    # (only known versions reach the cache: a server cannot grow it with versions it makes up)
    adapter = _result_adapter(version) if version in KNOWN_PROTOCOL_VERSIONS else None
    if adapter is not None:
        adapter.validate_python(reply, by_name=False)
    else:
        with contextlib.suppress(KeyError):  # a version without a tools/call row: unchecked
            validate_server_result("tools/call", version, reply)
    return reply


@functools.cache
def _result_adapter(version: str) -> TypeAdapter[Any] | None:
    """The check ``validate_server_result`` makes of a ``tools/call`` reply in a known version,
    without the dump of the validated reply it then makes and throws away; None when the
    version has no ``tools/call`` row."""
    target = SERVER_RESULTS.get(("tools/call", version))
    return None if target is None else TypeAdapter(cast(Any, target))  # a model or a union


async def _raw_request(
    client: Client, method: str, params: dict[str, Any] | None, **options: Any
) -> Any:
    """A request whose reply is returned unvalidated. The SDK's own ``send_request`` checks the
    reply against the protocol's types first; this is the same request, stamped the same way."""
    session = client.session
    data: dict[str, Any] = {"method": method}
    if params is not None:
        data["params"] = params
    opts: dict[str, Any] = dict(options)
    session._stamp(data, opts)  # type: ignore[arg-type]  # the era's _meta and headers
    return await session._dispatcher.send_raw_request(method, data.get("params"), opts)  # type: ignore[arg-type]


async def _http_transport(
    stack: contextlib.AsyncExitStack,
    config: MCPServerConfig,
    on_response: Callable[[Any], Awaitable[None]],
    http_auth: HttpAuth,
) -> Any:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    # Reads are not timed here: a call is bounded by its idle and call timeouts. An event that
    # is not UTF-8 fails the request whose stream it is in, as a JSON body that is not does.
    http = httpx2.AsyncClient(
        headers=dict(config.headers),
        timeout=httpx2.Timeout(30.0, read=None),
        event_hooks={"response": [on_response]},
        **http_auth.client_options(utf8_events=True),
    )
    await stack.enter_async_context(http)
    assert config.url is not None
    # An event of a stream is bounded like a JSON body: the SDK's default (1 MiB) failed every
    # answer over a megabyte that came as an event, which the content budget would have cut.
    return streamable_http_client(config.url, http_client=http, max_sse_event_size=MAX_BODY_BYTES)


def _sse_transport(config: MCPServerConfig, http_auth: HttpAuth) -> Any:
    """The SDK's client of the older HTTP+SSE transport: a GET stream for the server's messages,
    a POST for each of ours."""
    import httpx2
    from mcp.client.sse import sse_client

    def http_client(
        headers: dict[str, str] | None = None,
        timeout: httpx2.Timeout | None = None,
        auth: httpx2.Auth | None = None,
    ) -> httpx2.AsyncClient:
        # The stream may be silent for as long as a tool runs: calls are bounded by their idle
        # and call timeouts, not by a read timeout of the stream.
        return httpx2.AsyncClient(
            headers=headers,
            timeout=httpx2.Timeout(30.0, read=None),
            **http_auth.client_options(),
        )

    assert config.url is not None
    return sse_client(config.url, headers=dict(config.headers), httpx_client_factory=http_client)


class _FirstPostStatus:
    """Whether the server answered a POST of the handshake with a 4xx status (not 401/403):
    what MCP's backwards compatibility reads as an older HTTP+SSE server at that URL."""

    __slots__ = ("legacy",)

    def __init__(self) -> None:
        self.legacy: int | None = None

    async def record(self, response: Any) -> None:
        status = response.status_code
        if not is_mcp_request(response.request):
            return  # a sign-in's request to the authorization server
        if response.request.method == "POST" and 400 <= status < 500 and status not in (401, 403):
            self.legacy = status


def _header_annotations(client: Client, raw_tools: list[Any]) -> dict[str, str]:
    """On the 2026 protocol: give the session each tool's ``x-mcp-header`` map (the SDK's
    stamp mirrors the annotated arguments of a call into ``Mcp-Param-*`` headers), and return
    the tools whose annotations are invalid, which a client must not use, with the reason."""
    from mcp.shared.inbound import find_invalid_x_mcp_header, x_mcp_header_map

    if client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return {}
    maps: dict[str, Any] = {}
    dropped: dict[str, str] = {}
    for raw in raw_tools:
        name = raw.get("name") if isinstance(raw, dict) else None
        if not isinstance(name, str):
            continue  # the listing quarantines it
        schema = raw.get("inputSchema")
        try:
            reason = find_invalid_x_mcp_header(schema)
            if reason is None:
                maps[name] = x_mcp_header_map(schema)
        except (RecursionError, TypeError, ValueError):
            reason = "its annotations cannot be read"
        if reason is not None:
            dropped[name] = f"inputSchema: invalid x-mcp-header: {reason}"
    client.session._x_mcp_header_maps = maps
    return dropped


def _is_transport_error(exc: Exception) -> bool:
    try:
        import httpx2
    except ImportError:  # pragma: no cover - the SDK depends on it
        return False
    return isinstance(exc, httpx2.TransportError)


# What the SDK's client says, with CONNECTION_CLOSED and no data, when a connection closes
# under a request (and what the SDK's server answers the requests in flight with as it shuts
# down), and, over streamable HTTP, when a request's response stream ends unanswered.
_CLOSED_MESSAGE: Final = "Connection closed"
_HTTP_STREAM_LOST: Final = (
    "SSE stream failed: ",
    "SSE stream ended without a response",
    "SSE stream ended and reconnection attempts were exhausted",
)


# What the SDK's client says, with PARSE_ERROR and no data, when the body or the event that
# answers a request over streamable HTTP cannot be parsed (its bytes are not UTF-8, say).
_HTTP_UNPARSED: Final = ("Failed to parse JSON response: ", "Failed to parse SSE message: ")
_PARSE_FAILURE: Final = " validation error for "  # the parser's words, after those
# What the SDK's client says, with CONNECTION_CLOSED and no data, when an event stream's bytes
# are not UTF-8 (``fastgate.mcp._http.UnreadableEvent``); the reason follows.
_HTTP_UNREADABLE_EVENT: Final = "SSE stream failed: " + UNREADABLE_EVENT


def _connection_closed(exc: MCPError, over_http: bool) -> bool:
    """Whether ``exc`` is the SDK's own word that the connection (over HTTP: the request's
    response stream) is gone, not an error the server answered with. Both come with the code
    CONNECTION_CLOSED, -32000, which JSON-RPC also leaves to servers for errors of their own
    ("Server error"): the SDK's own are told apart by their fixed message and their lack of
    data. A server that answers with exactly those words (the SDK's server does, for the
    requests in flight as it shuts down) is taken at its word."""
    error = exc.error
    if error.code != mcp_types.CONNECTION_CLOSED or error.data is not None:
        return False
    message = error.message
    return message == _CLOSED_MESSAGE or (over_http and message.startswith(_HTTP_STREAM_LOST))


def _unreadable(exc: MCPError, over_http: bool) -> str | None:
    """Why the server's reply could not be read, when ``exc`` is the error the transport failed
    the request with for it: over stdio, its ``Unreadable`` data (never the server's own
    error); over HTTP, the SDK's own words, with the code PARSE_ERROR and no data, for a body
    or an event it could not parse, or with CONNECTION_CLOSED for an event stream that is not
    UTF-8 (a server answering with exactly those is taken at them)."""
    error = exc.error
    if isinstance(error.data, Unreadable):
        return error.data.reason
    if (
        over_http
        and error.code == mcp_types.CONNECTION_CLOSED
        and error.data is None
        and error.message.startswith(_HTTP_UNREADABLE_EVENT)
    ):
        return error.message[len(_HTTP_UNREADABLE_EVENT) :][:300]
    if (
        not over_http
        or error.code != mcp_types.PARSE_ERROR
        or error.data is not None
        or not error.message.startswith(_HTTP_UNPARSED)
        or _PARSE_FAILURE not in error.message  # (a body that could not be read whole, say)
    ):
        return None
    found = re.search(r"Invalid JSON: ([^\[\n]{1,200})", error.message)
    why = f" ({found.group(1).strip()})" if found else ""
    return f"not a JSON-RPC message that can be read{why}"


def _refused(request: str, exc: BaseException, over_http: bool) -> ProtocolFailure | None:
    """The JSON-RPC error the server answered ``request`` with (found inside the groups the SDK
    wraps it in) as a ``ProtocolFailure``; None for anything else, a lost connection included."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if not isinstance(exc, MCPError):
        return None
    unreadable = _unreadable(exc, over_http)  # (before a lost stream: its words begin alike)
    if unreadable is not None:
        return ProtocolFailure(f"the server's reply to {request} is {unreadable}")
    if _connection_closed(exc, over_http):
        return None
    return ProtocolFailure(
        f"the server refused {request}: JSON-RPC error {exc.code}: {exc.error.message}"
    )


def _describe(exc: BaseException, stderr: str, noise: str = "") -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        text = "did not start (connect and list its tools) within startup_timeout"
    elif isinstance(exc, ProtocolFailure):
        text = str(exc)
    else:
        text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if noise:
        text += "; " + noise
    if stderr:
        text += "; its stderr ends with: " + stderr[-800:]
    return text


def _version() -> str:
    from fastgate import __version__

    return __version__
