"""``NetworkProxy`` with a credential (its listener is on the host's loopback, where anyone can
connect): a connection that has not shown the call's secret is not the call's, so it leaves no
event and takes none of the call's connections. Also: IPv4-mapped IPv6 literals match IPv4
patterns and the reverse, and a refusal reaches a program that already sent its request."""

from __future__ import annotations

import asyncio
import base64
import socket

import pytest

from fastgate.sandbox import NetworkEvent, NetworkPolicy, NetworkProxy
from fastgate.sandbox._hosts import canonical_host
from tests.sandbox.proxy_kit import (
    FakeResolver,
    close,
    connect,
    parse_response,
    running,
    send_request,
    upstream,
)

ALLOWED = "allowed.test"
SECRET = "s3cretToken"
AUTH = "Proxy-Authorization: Basic " + base64.b64encode(f"fastgate:{SECRET}".encode()).decode()
LOCAL = FakeResolver({ALLOWED: ["127.0.0.1"]})


def policy(max_connections: int = 64) -> NetworkPolicy:
    return NetworkPolicy(allow=(ALLOWED,), allow_private=True, max_connections=max_connections)


async def authed_tunnel(
    proxy: NetworkProxy, port: int
) -> tuple[int, asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await connect(proxy)
    writer.write(f"CONNECT {ALLOWED}:{port} HTTP/1.1\r\n{AUTH}\r\n\r\n".encode())
    await writer.drain()
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        head = b""
    return parse_response(head)[0], reader, writer


# -- no secret: no event ------------------------------------------------------------------------

FILLER = b"X-Filler: " + b"a" * 1000 + b"\r\n"
UNAUTHENTICATED = {
    "garbage": b"\x00\x01 not http at all\r\n\r\n",
    "bad_target": b"CONNECT allowed.test:99999 HTTP/1.1\r\n\r\n",
    "origin_form": b"GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
    "bad_header_line": b"CONNECT allowed.test:443 HTTP/1.1\r\nBad Header\r\n\r\n",
    "oversized": b"CONNECT allowed.test:443 HTTP/1.1\r\n" + FILLER * 17 + b"\r\n",
    "oversized_unterminated": b"CONNECT allowed.test:443 HTTP/1.1\r\n" + FILLER * 17,
    "wrong_secret": b"CONNECT allowed.test:443 HTTP/1.1\r\n"
    + b"Proxy-Authorization: Basic "
    + base64.b64encode(b"fastgate:wrong")
    + b"\r\n\r\n",
    "malformed_with_wrong_secret": b"CONNECT allowed.test:99999 HTTP/1.1\r\n"
    + b"Proxy-Authorization: Basic "
    + base64.b64encode(b"fastgate:wrong")
    + b"\r\n\r\n",
    "valid_without_secret": b"CONNECT allowed.test:443 HTTP/1.1\r\n\r\n",
}


@pytest.mark.parametrize("request_bytes", UNAUTHENTICATED.values(), ids=UNAUTHENTICATED.keys())
async def test_a_head_without_the_secret_gets_407_and_leaves_no_event(
    request_bytes: bytes,
) -> None:
    resolver = FakeResolver({ALLOWED: ["127.0.0.1"]})
    async with running(policy(), resolver, credential=SECRET) as proxy:
        status, headers, _ = await send_request(proxy, request_bytes)
        await proxy.wait_idle()
    assert status in (0, 407)
    assert headers.get("x-fastgate-refusal", "proxy_authentication") == "proxy_authentication"
    assert proxy.events == () and proxy.recorder.events == []  # type: ignore[attr-defined]
    assert resolver.calls == []


async def test_a_slow_head_without_the_secret_times_out_without_an_event() -> None:
    async with running(policy(), LOCAL, credential=SECRET, header_timeout=0.2) as proxy:
        reader, writer = await connect(proxy)
        writer.write(b"CONNECT allowed.test:443 HTTP/1.1\r\nX-Slow: ")
        await writer.drain()
        answer = await reader.read(-1)  # answered at the deadline, then closed
        await close(writer)
        await proxy.wait_idle()
    assert answer.startswith(b"HTTP/1.1 407")
    assert proxy.events == ()


@pytest.mark.parametrize(
    "request_bytes",
    [
        f"CONNECT allowed.test:99999 HTTP/1.1\r\n{AUTH}\r\n\r\n".encode(),
        f"GET / HTTP/1.1\r\n{AUTH}\r\n\r\n".encode(),
        f"CONNECT allowed.test:443 HTTP/1.1\nproxy-authorization:basic "
        f"{AUTH.rpartition(' ')[2]}\r\nBad Header\r\n\r\n".encode(),
    ],
    ids=["bad_target", "origin_form", "bad_header_line"],
)
async def test_a_malformed_head_with_the_secret_is_the_calls_event(request_bytes: bytes) -> None:
    async with running(policy(), LOCAL, credential=SECRET) as proxy:
        status, _, _ = await send_request(proxy, request_bytes)
        await proxy.wait_idle()
    assert status in (0, 400)
    assert [(e.allowed, e.reason) for e in proxy.events] == [(False, "bad_request")]


# -- no secret: no slot ------------------------------------------------------------------------


async def test_connections_without_the_secret_do_not_take_the_calls_slots() -> None:
    async with upstream() as server, running(policy(2), LOCAL, credential=SECRET) as proxy:
        # Others hold silent connections, more than the call may open.
        held = [await connect(proxy) for _ in range(6)]
        tunnels = [await authed_tunnel(proxy, server.port) for _ in range(2)]
        assert [status for status, _, _ in tunnels] == [200, 200]
        for _, reader, writer in tunnels:
            writer.write(b"GET / HTTP/1.1\r\n\r\n")
            assert (await reader.read(-1)).endswith(server.body)
        # The waiting ones are bounded: the oldest were closed to admit the newer.
        evicted = 0
        for reader, _ in held[:4]:
            assert await reader.read(-1) == b""
            evicted += 1
        assert proxy.open_connections <= 2 + 2
        for _, writer in held:
            await close(writer)
        for _, _, writer in tunnels:
            await close(writer)
        await proxy.wait_idle()
    assert evicted == 4
    assert proxy.events == (NetworkEvent(ALLOWED, server.port, True, "allowed"),) * 2


async def test_the_calls_own_connections_still_count_against_its_limit() -> None:
    async with upstream() as server, running(policy(2), LOCAL, credential=SECRET) as proxy:
        tunnels = [await authed_tunnel(proxy, server.port) for _ in range(2)]
        third, _, third_writer = await authed_tunnel(proxy, server.port)
        await close(third_writer)
        for _, _, writer in tunnels:
            await close(writer)
        await proxy.wait_idle()
        again, _, writer = await authed_tunnel(proxy, server.port)  # the slots are free again
        await close(writer)
        await proxy.wait_idle()
    assert [t[0] for t in tunnels] == [200, 200] and third in (0, 503) and again == 200
    assert [e.reason for e in proxy.events] == [
        "allowed",
        "allowed",
        "too_many_connections",
        "allowed",
    ]


# -- IPv4-mapped IPv6 ----------------------------------------------------------------------------

MAPPED = ["[::ffff:127.0.0.1]", "[::FFFF:7f00:1]", "[0:0:0:0:0:ffff:127.0.0.1]"]


@pytest.mark.parametrize("mapped", MAPPED)
def test_a_mapped_literal_matches_an_ipv4_pattern_and_the_reverse(mapped: str) -> None:
    v4 = canonical_host("127.0.0.1")
    v6 = canonical_host(mapped)
    assert NetworkPolicy(allow=("127.0.0.1",)).judge(v6) == "allowed"
    assert NetworkPolicy(allow=(mapped.strip("[]"),)).judge(v4) == "allowed"
    # Deny wins in either spelling too.
    both = ("127.0.0.1", mapped.strip("[]"))
    assert NetworkPolicy(allow=both, deny=("127.0.0.1",)).judge(v6) == "denied"
    assert NetworkPolicy(allow=both, deny=(mapped.strip("[]"),)).judge(v4) == "denied"
    # Another address stays another address.
    assert NetworkPolicy(allow=("127.0.0.2",)).judge(v6) == "ip_literal"


# -- a refusal after a request already sent ---------------------------------------------------


def raw_post(host: str, length: int, *, auth: bool) -> bytes:
    extra = f"{AUTH}\r\n" if auth else ""
    head = f"POST http://{host}/up HTTP/1.1\r\nContent-Length: {length}\r\n{extra}\r\n"
    return head.encode() + b"x" * length


async def blocking_send_then_read(proxy: NetworkProxy, data: bytes) -> int:
    """Send ``data`` whole before the proxy (on this loop) reads a byte, then read its answer
    to the end: the proxy decides with the request's body still unread in its socket."""
    assert proxy.address is not None
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
        sock.connect(proxy.address)
        sock.sendall(data)  # blocking: the loop, and so the proxy, waits for it
        sock.setblocking(False)
        loop = asyncio.get_running_loop()
        answer = b""
        try:
            while chunk := await loop.sock_recv(sock, 1 << 16):
                answer += chunk
        except ConnectionError:
            return 0  # a reset: a program reading to the end loses the answer
        return parse_response(answer)[0]
    finally:
        sock.close()


@pytest.mark.parametrize(
    ("host", "credential", "auth", "expected"),
    [
        ("denied.test", None, False, 403),
        ("denied.test", SECRET, True, 403),
        (ALLOWED, SECRET, False, 407),
    ],
    ids=["denied", "denied_with_secret", "no_secret"],
)
async def test_a_refusal_reaches_a_program_whose_body_is_unread(
    host: str, credential: str | None, auth: bool, expected: int
) -> None:
    async with running(policy(), LOCAL, credential=credential) as proxy:
        status = await blocking_send_then_read(proxy, raw_post(host, 150_000, auth=auth))
        await proxy.wait_idle()
    assert status == expected


def chunked_client(address: tuple[str, int], data: bytes) -> int:
    """A program that writes its request in pieces, then reads the answer to the end."""
    with socket.create_connection(address, timeout=10) as sock:
        try:
            for start in range(0, len(data), 20_000):
                sock.sendall(data[start : start + 20_000])
        except OSError:
            return -1  # the proxy's reset cut the upload
        answer = b""
        try:
            while chunk := sock.recv(1 << 16):
                answer += chunk
        except ConnectionError:
            return 0
        return parse_response(answer)[0]


@pytest.mark.parametrize("credential", [None, SECRET])
async def test_a_refusal_ends_cleanly_for_a_program_writing_in_pieces(
    credential: str | None,
) -> None:
    request = raw_post("denied.test", 100_000, auth=credential is not None)
    async with running(policy(), LOCAL, credential=credential) as proxy:
        assert proxy.address is not None
        statuses = await asyncio.gather(
            *(asyncio.to_thread(chunked_client, proxy.address, request) for _ in range(5))
        )
        await proxy.wait_idle()
    assert statuses == [403] * 5
