"""Names whose name servers do not answer hold none of the server's shared threads (SPEC §22
*Bad input and faults*): the proxy resolves in threads of its own, at most
``RESOLVER_THREADS`` per proxy, so a command asking for many such names (any subdomain of a
``*.`` pattern) neither stalls the default executor, which the file tools and every other call
use, nor another call's proxy."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from fastgate.sandbox import NetworkPolicy, NetworkProxy
from fastgate.sandbox._proxy import RESOLVER_THREADS
from tests.sandbox.proxy_kit import close, connect

SLOW = ".slow.example"


class Unanswered:
    """The names asked of a name server that does not answer, and a way to wait for them."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.released = threading.Event()
        self._tell: Callable[[], object] = lambda: None

    def ask(self, host: str) -> None:  # in a resolving thread
        self.asked.append(host)
        self._tell()
        self.released.wait(20)

    async def until_asked(self, count: int) -> None:
        loop = asyncio.get_running_loop()
        reached = asyncio.Event()

        def tell() -> None:
            if len(self.asked) >= count:
                loop.call_soon_threadsafe(reached.set)

        self._tell = tell
        tell()
        async with asyncio.timeout(10):
            await reached.wait()


@pytest.fixture(name="unanswered")
def unanswered_fixture(monkeypatch: pytest.MonkeyPatch) -> Iterator[Unanswered]:
    """``getaddrinfo`` never answers for a name under ``slow.example`` (until the test ends)."""
    real = socket.getaddrinfo
    unanswered = Unanswered()

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(host, str) and host.endswith(SLOW):
            unanswered.ask(host)
            raise socket.gaierror(socket.EAI_AGAIN, "the name servers did not answer")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    try:
        yield unanswered
    finally:
        unanswered.released.set()


async def ask(proxy: NetworkProxy, host: str) -> bytes:
    """A CONNECT for ``host``; the first line of the answer."""
    reader, writer = await connect(proxy)
    try:
        writer.write(f"CONNECT {host}:443 HTTP/1.1\r\nHost: {host}:443\r\n\r\n".encode())
        await writer.drain()
        return await reader.readline()
    finally:
        await close(writer)


async def test_unanswered_names_leave_the_default_executor_free(unanswered: Unanswered) -> None:
    policy = NetworkPolicy(allow=("*" + SLOW,), max_connections=64)
    async with NetworkProxy(policy, connect_timeout=0.5) as proxy:
        asks = [asyncio.ensure_future(ask(proxy, f"n{i}{SLOW}")) for i in range(64)]
        await unanswered.until_asked(RESOLVER_THREADS)
        # Meanwhile, what the rest of the server runs in the default executor goes on.
        async with asyncio.timeout(5):
            assert await asyncio.to_thread(lambda: "free") == "free"
        answers = await asyncio.gather(*asks)
    assert all(line.startswith(b"HTTP/1.1 502") for line in answers), answers
    # Refused at the proxy's deadline, most never resolved at all: the names left waiting
    # were asked in the proxy's threads only.
    assert len(unanswered.asked) <= RESOLVER_THREADS * 2


async def test_one_proxys_unanswered_names_do_not_stall_another(unanswered: Unanswered) -> None:
    stalled_policy = NetworkPolicy(allow=("*" + SLOW,))
    other_policy = NetworkPolicy(allow=("localhost",), allow_private=True)
    async with (
        NetworkProxy(stalled_policy, connect_timeout=2) as stalled,
        NetworkProxy(other_policy, connect_timeout=5) as other,
    ):
        asks = [asyncio.ensure_future(ask(stalled, f"n{i}{SLOW}")) for i in range(32)]
        await unanswered.until_asked(RESOLVER_THREADS)
        # localhost resolves at once; nothing listens on its port 443 here: refused promptly,
        # while the other proxy's names still wait.
        async with asyncio.timeout(1):
            line = await ask(other, "localhost")
        assert line.startswith(b"HTTP/1.1 502"), line
        assert not any(pending.done() for pending in asks)
        answers = await asyncio.gather(*asks)
    assert all(answer.startswith(b"HTTP/1.1 502") for answer in answers), answers
