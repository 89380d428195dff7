"""``NetworkProxy``: the only way out of a sandbox that has a ``NetworkPolicy``.

One proxy serves one call. Where only the call's program can reach its listener, every
connection is the call's; where anyone on the host can (a loopback port), the proxy has a
``credential`` and a connection is the call's only once its request carries it: before that it
is answered 407, leaves no event and takes none of the call's ``max_connections``. It runs on
the caller's event loop.

Per connection (a task of its own): the request head is read within ``header_timeout`` and
``max_header_bytes``; its host is canonicalised and judged (deny, then allow); the name is
resolved once and every address it resolves to must be public unless ``allow_private``; the
connection goes to those addresses only (the name is never resolved again, so a second DNS
answer cannot move it: no rebinding); the connection must then fit the descriptor budget all
proxies of the process share (``_DescriptorBudget``: else ``server_busy``) before its upstream is
opened; then the bytes go both ways until either side ends. Every
decision is one ``NetworkEvent``, recorded and passed to ``on_event`` before the program sees
the answer. A fault anywhere in that path closes the connection (a ``proxy_error`` event);
a proxy that is closed or broken has no listener, so the program's connections are refused:
the network fails closed.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import errno
import functools
import hmac
import logging
import os
import socket
import stat
import threading
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

from fastgate.processes import OUT_OF_DESCRIPTORS, soft_limit
from fastgate.sandbox._framing import exchange
from fastgate.sandbox._hosts import IPAddress, canonical_host, is_public
from fastgate.sandbox._http import (
    REFUSAL_HEADER,
    TUNNEL_OPEN,
    ProxyRequest,
    Refused,
    parse_request,
    refusal,
)
from fastgate.sandbox._network import NetworkEvent, NetworkPolicy
from fastgate.sandbox._relay import relay

log = logging.getLogger("fastgate.sandbox")

#: ``(host, port) -> addresses``: how the proxy resolves a name (the system's resolver by
#: default). Called once per connection; what it returns is all the connection may reach.
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]

_READ_SIZE: Final = 1 << 16
#: What a refusal reads and discards of a request already sent before it closes: unread data
#: at close makes the kernel reset the connection, and the program may lose the answer.
_DRAIN_LIMIT: Final = 1 << 20
_LINGER: Final = 1.0
# Out of descriptors at accept: wait for a connection to free some, or this long (doubling up
# to the maximum: descriptors freed elsewhere in the server are not seen).
_ACCEPT_BACKOFF: Final = 0.05
_ACCEPT_BACKOFF_MAX: Final = 1.0
#: Names one proxy resolves at once (``getaddrinfo`` blocks a thread for as long as the name
#: servers take, their timeouts included).
RESOLVER_THREADS: Final = 4


#: Descriptors a connection may hold at once: the program's socket, the upstream's, and the
#: two pipes ``splice`` moves the bytes through.
DESCRIPTORS_PER_CONNECTION: Final = 6
SERVER_BUSY: Final = "server_busy"


class _DescriptorBudget:
    """The descriptors every proxy of this process holds together, bounded by a share of the
    process's ``RLIMIT_NOFILE`` soft limit as it is at each admission: a quarter of it (the
    server keeps three quarters, whatever its calls' programs do). A connection takes one
    descriptor when accepted and ``DESCRIPTORS_PER_CONNECTION`` once its request is judged
    and its upstream is about to be opened; it gives them back when it ends (its call's end
    ends it). Upstreams may fill the share but an eighth of it: that eighth is left for
    requests still being read, so one over the budget can still be read, refused and
    attributed to its call."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held = 0
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    @property
    def held(self) -> int:
        return self._held

    @staticmethod
    def share() -> tuple[int, int] | None:
        """``(share, upstream_share)`` now; ``None`` without a limit."""
        limit = soft_limit()
        if limit is None:
            return None
        share = limit // 4
        return share, share - share // 8

    def take(self, count: int, *, upstream: bool) -> bool:
        """Take ``count`` descriptors if the share (or the part upstreams may fill) has room."""
        bounds = self.share()
        with self._lock:
            ceiling = None if bounds is None else bounds[1] if upstream else bounds[0]
            if ceiling is not None and self._held + count > ceiling:
                return False
            self._held += count
            return True

    def give(self, count: int) -> None:
        with self._lock:
            self._held -= count
            waiters, self._waiters = self._waiters, []
        for loop, waiter in waiters:
            with contextlib.suppress(RuntimeError):  # its loop has closed meanwhile
                loop.call_soon_threadsafe(_wake, waiter)

    def freed(self) -> asyncio.Future[None]:
        """Done once a connection of any proxy gives its descriptors back."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        with self._lock:
            self._waiters = [(lp, w) for lp, w in self._waiters if not w.done()]
            self._waiters.append((loop, waiter))
        return waiter


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


_BUDGET: Final = _DescriptorBudget()


def connection_budget() -> int | None:
    """How many connections every proxy of this process may have open together now, each
    counted at ``DESCRIPTORS_PER_CONNECTION`` (``None`` without a limit on descriptors):
    seven eighths of a quarter of the ``RLIMIT_NOFILE`` soft limit, in connections."""
    bounds = _BUDGET.share()
    return None if bounds is None else bounds[1] // DESCRIPTORS_PER_CONNECTION


def _refusal(reason: str) -> bytes:
    if reason != SERVER_BUSY:
        return refusal(reason)
    body = f"fastgate network proxy refused: {reason}\n".encode("ascii")
    return (
        f"HTTP/1.1 503 Service Unavailable\r\n{REFUSAL_HEADER}: {reason}\r\n"
        f"Content-Type: text/plain\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode("ascii") + body


async def system_resolver(host: str, port: int) -> Sequence[str]:
    """The addresses ``getaddrinfo`` gives for ``host`` (TCP), in its order (on the loop's
    resolver; a proxy resolves in threads of its own, see ``_SystemResolver``)."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return _addresses(infos)


def _addresses(infos: Sequence[tuple[Any, ...]]) -> list[str]:
    # A link-local IPv6 answer carries its zone ("fe80::1%eth0"): the address is what is judged.
    return [str(info[4][0]).partition("%")[0] for info in infos]


class _SystemResolver:
    """A proxy's default resolver: ``getaddrinfo`` in at most ``RESOLVER_THREADS`` threads of
    the proxy's own. Not the loop's executor: a command may ask for names whose name servers do
    not answer (any subdomain of a ``*.`` pattern), and each would hold a thread of the
    server's default executor, which the file tools and every other call share, for the name
    servers' whole timeout, long after the proxy gave up on it. Closed with the proxy (threads
    still waiting end with their ``getaddrinfo``)."""

    def __init__(self) -> None:
        self._executor: ThreadPoolExecutor | None = None
        self._closed = False

    async def __call__(self, host: str, port: int) -> Sequence[str]:
        if self._closed:
            raise OSError(errno.ESHUTDOWN, "the proxy is closed")
        if self._executor is None:
            self._executor = ThreadPoolExecutor(RESOLVER_THREADS, "fastgate-proxy-resolve")
        lookup = functools.partial(
            socket.getaddrinfo, host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
        )
        infos = await asyncio.get_running_loop().run_in_executor(self._executor, lookup)
        return _addresses(infos)

    def close(self) -> None:
        self._closed = True
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)


def proxy_environment(url: str) -> dict[str, str]:
    """The variables that send a program's HTTP(S) through the proxy at ``url``, and nothing
    past it (``NO_PROXY`` empty)."""
    env = {name: url for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")}
    env.update({name.lower(): url for name in env})
    env["NO_PROXY"] = env["no_proxy"] = ""
    return env


class NetworkProxy:
    """fastgate's HTTP proxy (``CONNECT`` and plain HTTP) for one call under ``policy``.

    ``async with NetworkProxy(policy, on_event=...) as proxy:`` starts it; ``proxy.environment()``
    is what to add to the program's environment; every decision is in ``proxy.events`` (the
    first ``max_events``; ``events_dropped`` counts the rest) and is passed to ``on_event`` as
    it is made. It listens on ``127.0.0.1`` (``tcp``; ``address`` is ``(host, port)``) and/or
    on a Unix socket at ``unix_path`` (made private to the user, removed on close), and on any
    listener given to ``adopt`` (with neither, on those alone: a command in a network namespace
    of its own reaches the proxy through the listener it sends back, and nothing else can).
    ``credential``: a secret every request must carry (``Proxy-Authorization: Basic`` of
    ``fastgate:<credential>``; ``environment()`` puts it in the proxy URL): where the listener is
    on the host's loopback, another process, or another call tunnelling through its own proxy,
    cannot use this call's policy, fill its connections or put events in its record (a request
    without it gets 407 and no event; at most ``max_connections`` such wait at once, the oldest
    closed first). ``resolver``: a seam for tests (see ``Resolver``).
    """

    # Which relay tunnels use: splice(2) where the OS has it (None), or the portable copy loop
    # (False); a seam for the tests and the throughput measure, which run both.
    _splice: bool | None = None

    def __init__(
        self,
        policy: NetworkPolicy,
        *,
        on_event: Callable[[NetworkEvent], object] | None = None,
        tcp: bool = True,
        unix_path: str | os.PathLike[str] | None = None,
        credential: str | None = None,
        resolver: Resolver | None = None,
        header_timeout: float = 10.0,
        connect_timeout: float = 10.0,
        max_header_bytes: int = 16 * 1024,
        max_events: int = 1000,
    ) -> None:
        if not isinstance(policy, NetworkPolicy):
            raise TypeError(f"policy: expected a NetworkPolicy, got {type(policy).__name__}")
        if credential is not None and not (credential.isascii() and credential.isalnum()):
            raise ValueError("credential: expected letters and digits only")
        for name, value in (
            ("header_timeout", header_timeout),
            ("connect_timeout", connect_timeout),
        ):
            if not value > 0:
                raise ValueError(f"{name}: expected a positive number of seconds, got {value!r}")
        for name, count, least in (
            ("max_header_bytes", max_header_bytes, 1024),
            ("max_events", max_events, 0),
        ):
            if type(count) is not int or count < least:
                raise ValueError(f"{name}: expected an integer >= {least}, got {count!r}")
        self.policy = policy
        self._on_event = on_event
        self._tcp = tcp
        self._credential = (
            None if credential is None else base64.b64encode(f"fastgate:{credential}".encode())
        )
        self._credential_text = credential
        self._unix_path = None if unix_path is None else os.fspath(unix_path)
        self._unix_bound = False
        self._resolver = resolver or _SystemResolver()
        self._header_timeout = header_timeout
        self._connect_timeout = connect_timeout
        self._max_header = max_header_bytes
        self._max_events = max_events
        self._events: list[NetworkEvent] = []
        self._dropped = 0
        self._dropped_refusals = 0
        self._listeners: list[socket.socket] = []
        self._accepting: list[asyncio.Task[None]] = []
        self._connections: set[asyncio.Task[None]] = set()
        # With a credential: connections that have not yet shown it, oldest first (they may
        # be anyone's), and how many that did are open (only those are the call's).
        self._unproven: dict[asyncio.Task[None], None] = {}
        self._proven = 0
        self._descriptors: dict[asyncio.Task[None], int] = {}  # of the process-wide budget
        self._idle = asyncio.Event()
        self._idle.set()
        self._address: tuple[str, int] | None = None
        self._failure: str | None = None
        self._started = False
        self._closed = False

    # -- what the caller reads ------------------------------------------------------------

    @property
    def address(self) -> tuple[str, int] | None:
        """``(host, port)`` of the TCP listener, once started."""
        return self._address

    @property
    def unix_path(self) -> str | None:
        return self._unix_path

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``: the proxy URL for ``HTTP_PROXY`` and its kin."""
        if self._address is None:
            raise RuntimeError("NetworkProxy: no TCP listener (not started, or tcp=False)")
        host, port = self._address
        return f"http://{host}:{port}"

    def environment(self) -> dict[str, str]:
        """The variables that send a program's HTTP(S) through this proxy, and nothing past it
        (``NO_PROXY`` empty)."""
        url = self.url
        if self._credential_text is not None:
            url = url.replace("http://", f"http://fastgate:{self._credential_text}@", 1)
        return proxy_environment(url)

    @property
    def events(self) -> tuple[NetworkEvent, ...]:
        return tuple(self._events)

    @property
    def events_dropped(self) -> int:
        """Decisions made beyond ``max_events`` (passed to ``on_event``, not kept)."""
        return self._dropped

    @property
    def refusals_dropped(self) -> int:
        """Of ``events_dropped``, the refusals."""
        return self._dropped_refusals

    @property
    def open_connections(self) -> int:
        return len(self._connections)

    @property
    def failure(self) -> str | None:
        """Why the proxy stopped listening on its own (its network is then closed), or
        ``None``."""
        return self._failure

    async def wait_idle(self) -> None:
        """Until no connection is open."""
        await self._idle.wait()

    # -- life -----------------------------------------------------------------------------

    async def start(self) -> NetworkProxy:
        if self._started:
            raise RuntimeError("NetworkProxy: already started")
        self._started = True
        try:
            if self._tcp:
                self._listen(self._tcp_listener())
            if self._unix_path is not None:
                self._listen(self._unix_listener(self._unix_path))
        except BaseException:
            await self.aclose()
            raise
        return self

    def adopt(self, listener: socket.socket) -> None:
        """Accept connections on ``listener`` too, as on the proxy's own: a bound stream socket
        made elsewhere (the sandbox makes one inside the command's network namespace, the
        command's only way out), listening or not. The proxy owns it from then on and closes it
        with itself; its connections are judged, counted and reported like any other. A proxy
        not started, or closed, refuses it (``RuntimeError``) and closes it: nothing listens
        unjudged."""
        if not self._started or self._closed:
            listener.close()
            state = "closed" if self._closed else "not started"
            raise RuntimeError(f"NetworkProxy: cannot adopt a listener, the proxy is {state}")
        if listener.type != socket.SOCK_STREAM:
            listener.close()
            raise ValueError("NetworkProxy.adopt: expected a stream socket")
        self._listen(listener)

    async def aclose(self) -> None:
        """Stop listening and end every connection. Idempotent."""
        self._closed = True
        tasks = [*self._accepting, *self._connections]
        for task in tasks:
            task.cancel()
        self._accepting.clear()
        await asyncio.gather(*tasks, return_exceptions=True)
        for listener in self._listeners:
            listener.close()
        self._listeners.clear()
        if isinstance(self._resolver, _SystemResolver):
            self._resolver.close()
        if self._unix_bound and self._unix_path is not None:
            self._unix_bound = False
            with contextlib.suppress(FileNotFoundError):
                if stat.S_ISSOCK(os.lstat(self._unix_path).st_mode):
                    os.unlink(self._unix_path)

    async def __aenter__(self) -> NetworkProxy:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _tcp_listener(self) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind(("127.0.0.1", 0))
            host, port = sock.getsockname()[:2]
            self._address = (str(host), int(port))
        except BaseException:
            sock.close()
            raise
        return sock

    def _unix_listener(self, path: str) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(path)
            self._unix_bound = True
            os.chmod(path, 0o600)
        except BaseException:
            sock.close()
            raise
        return sock

    def _listen(self, sock: socket.socket) -> None:
        self._listeners.append(sock)
        sock.setblocking(False)
        sock.listen(128)
        task = asyncio.get_running_loop().create_task(self._accept_loop(sock))
        self._accepting.append(task)

    async def _accept_loop(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        delay = 0.0  # > 0 while accepting fails for want of descriptors or memory
        try:
            while True:
                try:
                    client, _ = await loop.sock_accept(listener)
                except OSError as exc:
                    if exc.errno not in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                        raise
                    if not delay:  # once per spell, not once per try
                        log.warning(
                            "network proxy: cannot accept a connection (%s); retrying as "
                            "descriptors are freed",
                            exc,
                        )
                    delay = min(delay * 2, _ACCEPT_BACKOFF_MAX) or _ACCEPT_BACKOFF
                    await _until_freed(delay)
                    continue
                if delay:
                    log.info("network proxy: accepting connections again")
                    delay = 0.0
                self._admit(client)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # The listener is gone with it: the program's connections are refused from now on.
            self._failure = f"network proxy stopped: {type(exc).__name__}: {exc}"
            log.error("%s", self._failure)
            listener.close()

    def _admit(self, client: socket.socket) -> None:
        client.setblocking(False)
        if self._closed:
            client.close()
            return
        if self._credential is None and len(self._connections) >= self.policy.max_connections:
            self._record(NetworkEvent("", 0, False, "too_many_connections"))
            _answer_and_close(client, refusal("too_many_connections"))
            return
        if not _BUDGET.take(1, upstream=False):
            # Every proxy's connections together hold their share of the server's
            # descriptors: refused at once. Without a credential every connection is the
            # call's; with one, this one has not shown it yet and could be anyone's.
            if self._credential is None:
                self._record(NetworkEvent("", 0, False, SERVER_BUSY))
            _answer_and_close(client, _refusal(SERVER_BUSY))
            return
        if self._credential is not None and len(self._unproven) >= self.policy.max_connections:
            # Anyone on the host can reach a loopback listener: a connection is the call's, and
            # counts against its limit, only once it shows the secret. Until then, at most
            # ``max_connections`` wait at once (each for ``header_timeout`` at most); the oldest
            # gives way to the newest, so holding idle connections cannot shut the call out.
            oldest = next(iter(self._unproven))
            del self._unproven[oldest]
            oldest.cancel()
        try:
            task = asyncio.get_running_loop().create_task(self._serve(client))
        except BaseException:
            _BUDGET.give(1)
            client.close()
            raise
        self._descriptors[task] = 1
        if self._credential is not None:
            self._unproven[task] = None
        self._connections.add(task)
        self._idle.clear()
        task.add_done_callback(self._forget)
        # A task cancelled before its first step (the proxy closed at once) never runs the
        # ``finally`` that closes its socket.
        task.add_done_callback(lambda _: client.close())

    def _forget(self, task: asyncio.Task[None]) -> None:
        _BUDGET.give(self._descriptors.pop(task, 0))
        self._connections.discard(task)
        self._unproven.pop(task, None)
        if not self._connections:
            self._idle.set()
        if not task.cancelled() and task.exception() is not None:  # pragma: no cover
            log.error("network proxy: connection task failed", exc_info=task.exception())

    # -- one connection -------------------------------------------------------------------

    async def _serve(self, client: socket.socket) -> None:
        upstream: socket.socket | None = None
        asked = ("", 0)  # what a proxy_error event names
        counted = False
        try:
            try:
                received = bytearray()
                try:
                    request, rest = await self._read_request(client, received)
                except Refused:
                    # A head that cannot be parsed is the call's only if it carries the secret.
                    if not self._authorized(_authorization_in(received)):
                        await self._refuse(client, refusal("proxy_authentication"))
                        return
                    raise
                if not self._authorized(request.authorization):
                    # Not this call's program: no event of this call's, nothing judged.
                    await self._refuse(client, refusal("proxy_authentication"))
                    return
                if self._credential is not None:
                    current = asyncio.current_task()
                    if current is not None:
                        self._unproven.pop(current, None)  # the call's now: not to be evicted
                    if self._proven >= self.policy.max_connections:
                        raise Refused("too_many_connections")
                    self._proven += 1
                    counted = True
                asked = (request.host.text, request.port)
                upstream = await self._open(request)
            except Refused as refused:
                self._record(NetworkEvent(refused.host, refused.port, False, refused.reason))
                await self._refuse(client, _refusal(refused.reason))
                return
            if not self._record(NetworkEvent(request.host.text, request.port, True, "allowed")):
                return
            loop = asyncio.get_running_loop()
            if request.tunnel:
                await loop.sock_sendall(client, TUNNEL_OPEN)
                if rest:
                    await loop.sock_sendall(upstream, rest)
                await relay(client, upstream, use_splice=self._splice)
            else:
                await loop.sock_sendall(upstream, request.head)
                await exchange(client, upstream, request.body, rest, use_splice=self._splice)
        except asyncio.CancelledError:
            raise
        except _ClientGone:
            pass
        except OSError:
            pass  # either side went away mid-tunnel: the tunnel is over
        except Exception:
            log.exception("network proxy: fault serving a connection; it is closed")
            self._record(NetworkEvent(*asked, False, "proxy_error"))
        finally:
            if counted:
                self._proven -= 1
            client.close()
            if upstream is not None:
                upstream.close()

    async def _refuse(self, client: socket.socket, response: bytes) -> None:
        """Answer, then read and discard what the program still sends until it closes (at most
        ``_DRAIN_LIMIT`` bytes, ``_LINGER`` seconds): closing with its request unread would reset
        the connection, and a program still writing would get an error, not the answer."""
        loop = asyncio.get_running_loop()
        with contextlib.suppress(OSError):
            client.send(response)
            client.shutdown(socket.SHUT_WR)
            drained = 0
            async with asyncio.timeout(min(_LINGER, self._header_timeout)):
                while drained < _DRAIN_LIMIT:
                    chunk = await loop.sock_recv(client, _READ_SIZE)
                    if not chunk:
                        break
                    drained += len(chunk)
        client.close()

    def _authorized(self, given: bytes | None) -> bool:
        expected = self._credential
        if expected is None:
            return True
        scheme, _, token = (given or b"").partition(b" ")
        return scheme.lower() == b"basic" and hmac.compare_digest(token.strip(), expected)

    async def _read_request(
        self, client: socket.socket, buffer: bytearray
    ) -> tuple[ProxyRequest, bytes]:
        """The request and the bytes read past its head; ``buffer`` holds what was read, for
        a caller that gets ``Refused``."""
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._header_timeout):
                while True:
                    chunk = await loop.sock_recv(client, _READ_SIZE)
                    if not chunk:
                        raise _ClientGone
                    start = max(0, len(buffer) - 3)
                    buffer += chunk
                    end = buffer.find(b"\r\n\r\n", start)
                    if end >= 0:
                        if end + 4 > self._max_header:
                            raise Refused("header_too_large")
                        head, rest = bytes(buffer[: end + 4]), bytes(buffer[end + 4 :])
                        return parse_request(head), rest
                    if len(buffer) > self._max_header:
                        raise Refused("header_too_large")
        except TimeoutError:
            raise Refused("header_timeout") from None
        except ConnectionError:
            raise _ClientGone from None

    async def _open(self, request: ProxyRequest) -> socket.socket:
        """The judged, resolved, checked and connected upstream socket, or ``Refused``."""
        host, port = request.host, request.port
        reason = self.policy.judge(host)
        if reason != "allowed":
            raise Refused(reason, host.text, port)
        addresses = [host.address] if host.address is not None else await self._resolve(request)
        if not self.policy.allow_private and not all(is_public(a) for a in addresses):
            raise Refused("private_address", host.text, port)
        self._reserve_upstream(host.text, port)
        return await self._connect(request, addresses)

    def _reserve_upstream(self, host: str, port: int) -> None:
        """The rest of the connection's descriptors, from the process-wide budget, before its
        upstream is opened; ``Refused("server_busy")`` when the budget is spent."""
        task = asyncio.current_task()
        extra = DESCRIPTORS_PER_CONNECTION - 1
        if task is None or task not in self._descriptors:  # pragma: no cover - always a task
            return
        if not _BUDGET.take(extra, upstream=True):
            raise Refused(SERVER_BUSY, host, port)
        self._descriptors[task] += extra

    async def _resolve(self, request: ProxyRequest) -> list[IPAddress]:
        host, port = request.host.text, request.port
        try:
            async with asyncio.timeout(self._connect_timeout):
                answers = await self._resolver(host, port)
            addresses = [_address(a) for a in answers]
        except (OSError, TimeoutError, ValueError):
            raise Refused("resolve_failed", host, port) from None
        if not addresses:
            raise Refused("resolve_failed", host, port)
        return addresses

    async def _connect(self, request: ProxyRequest, addresses: list[IPAddress]) -> socket.socket:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._connect_timeout):
                for address in addresses:
                    sock = await _try_connect(loop, address, request.port)
                    if sock is not None:
                        return sock
        except TimeoutError:
            pass
        except OSError as exc:  # no socket could be made at all
            if exc.errno not in OUT_OF_DESCRIPTORS:
                raise
            raise Refused(SERVER_BUSY, request.host.text, request.port) from None
        raise Refused("connect_failed", request.host.text, request.port)

    def _record(self, event: NetworkEvent) -> bool:
        """Keep ``event`` and pass it to ``on_event``; ``False`` when that raised (the
        connection it is about is then closed: no traffic goes unattributed)."""
        if len(self._events) < self._max_events:
            self._events.append(event)
        else:
            self._dropped += 1
            self._dropped_refusals += not event.allowed
        if self._on_event is None:
            return True
        try:
            self._on_event(event)
        except Exception:
            log.exception("network proxy: on_event raised; the connection is closed")
            return False
        return True


async def _until_freed(delay: float) -> None:
    """Until a proxy connection gives its descriptors back, or ``delay`` seconds."""
    freed = _BUDGET.freed()
    try:
        async with asyncio.timeout(delay):
            await freed
    except TimeoutError:
        pass
    finally:
        freed.cancel()


class _ClientGone(Exception):
    """The program closed the connection before its request was whole: nothing to decide."""


def _address(text: str) -> IPAddress:
    host = canonical_host(text)
    if host.address is None:
        raise ValueError(f"resolver returned a name, not an address: {text!r}")
    return host.address


async def _try_connect(
    loop: asyncio.AbstractEventLoop, address: IPAddress, port: int
) -> socket.socket | None:
    family = socket.AF_INET if address.version == 4 else socket.AF_INET6
    sock = socket.socket(family, socket.SOCK_STREAM)  # out of descriptors: the caller's refusal
    try:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await loop.sock_connect(sock, (str(address), port))
    except OSError:
        sock.close()
        return None
    except BaseException:
        sock.close()
        raise
    return sock


def _authorization_in(head: bytes | bytearray) -> bytes | None:
    """The ``Proxy-Authorization`` value of a head that may be malformed or cut short."""
    for line in bytes(head).split(b"\n")[1:]:
        name, colon, value = line.partition(b":")
        if colon and name.strip().lower() == b"proxy-authorization":
            return value.strip()
    return None


def _answer_and_close(client: socket.socket, response: bytes) -> None:
    """Best effort: a refusal is small enough for an empty socket buffer; a program that is not
    reading gets the connection closed all the same. What the program already sent is read
    first (up to ``_DRAIN_LIMIT``) and the close is a FIN after the answer: closing with unread
    data resets the connection, and the program could lose the answer to it."""
    with contextlib.suppress(OSError):
        drained = 0
        while drained < _DRAIN_LIMIT:
            chunk = client.recv(_READ_SIZE)
            if not chunk:
                break
            drained += len(chunk)
    with contextlib.suppress(OSError):
        client.send(response)
        client.shutdown(socket.SHUT_WR)
    client.close()
