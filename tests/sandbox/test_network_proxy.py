"""``NetworkProxy`` end to end on loopback (SPEC §22 *Network*, issue acceptance 1 and *Bad
input and faults*): what it lets through, what it refuses and how, and that every decision is
an event of the proxy (the call) it was made in.

Loopback is private, so the positive paths map test names to 127.0.0.1 through the resolver
seam and set ``allow_private=True``; the refusal of private addresses is tested with
``allow_private=False`` on its own. Each case runs on both relays (``splice`` and the portable
copy loop) where bytes flow."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import stat
from pathlib import Path
from typing import cast

import pytest

from fastgate.sandbox import NetworkEvent, NetworkPolicy, NetworkProxy
from tests.sandbox.proxy_kit import (
    TLS_NAME,
    FakeResolver,
    close,
    connect,
    make_test_ca,
    open_tunnel,
    parse_response,
    response_head,
    running,
    send_request,
    upstream,
)

ALLOWED = "allowed.test"
LOCAL = FakeResolver({ALLOWED: ["127.0.0.1"], "api.allowed.test": ["127.0.0.1"]})
RELAYS = [pytest.param(None, id="splice"), pytest.param(False, id="copy")]


def local_resolver(*names: str) -> FakeResolver:
    return FakeResolver({name: ["127.0.0.1"] for name in names})


def open_policy(*allow: str, **options: object) -> NetworkPolicy:
    return NetworkPolicy(allow=allow or (ALLOWED,), allow_private=True, **options)  # type: ignore[arg-type]


# -- what goes through ----------------------------------------------------------------------


@pytest.mark.parametrize("splice", RELAYS)
async def test_a_plain_get_to_an_allowed_name_goes_through(splice: bool | None) -> None:
    resolver = local_resolver(ALLOWED)
    async with upstream() as server, running(open_policy(), resolver, splice=splice) as proxy:
        request = (
            f"GET http://{ALLOWED}:{server.port}/page?q=1 HTTP/1.1\r\n"
            "Host: attacker.example\r\nProxy-Authorization: Basic c2VjcmV0\r\n"
            "Proxy-Connection: keep-alive\r\nAccept: */*\r\n\r\n"
        )
        status, _, body = await send_request(proxy, request.encode())
        assert (status, body) == (200, server.body)
        await proxy.wait_idle()
    event = NetworkEvent(ALLOWED, server.port, True, "allowed")
    assert proxy.events == (event,) and proxy.recorder.events == [event]  # type: ignore[attr-defined]
    assert resolver.calls == [(ALLOWED, server.port)]
    (head,) = server.heads
    lines = head.decode().split("\r\n")
    # Origin form; Host is the URL's (what was judged); proxy credentials never leave.
    assert lines[0] == "GET /page?q=1 HTTP/1.1"
    assert f"Host: {ALLOWED}:{server.port}" in lines and "Host: attacker.example" not in lines
    assert "Accept: */*" in lines and "Connection: close" in lines
    assert not any(line.lower().startswith("proxy-") for line in lines)


@pytest.mark.parametrize("splice", RELAYS)
async def test_a_connect_tunnel_carries_bytes_both_ways(splice: bool | None) -> None:
    payload = os.urandom(3 << 20)
    async with upstream() as server, running(open_policy(), LOCAL, splice=splice) as proxy:
        status, _, reader, writer = await open_tunnel(proxy, f"{ALLOWED}:{server.port}")
        assert status == 200
        writer.write(b"POST /echo HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % len(payload) + payload)
        writer.write_eof()  # half-closed: the answer still comes back
        await writer.drain()
        answer = await reader.read(-1)
        await close(writer)
        await proxy.wait_idle()
    assert answer.endswith(b"\r\n\r\n" + payload)
    assert proxy.events == (NetworkEvent(ALLOWED, server.port, True, "allowed"),)


@pytest.mark.parametrize("splice", RELAYS)
async def test_bytes_sent_with_the_request_head_are_carried(splice: bool | None) -> None:
    """A client may send its first bytes (a body, a TLS hello) before the proxy answered."""
    payload = os.urandom(200_000)
    post = b"POST /echo HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % len(payload) + payload
    async with upstream() as server, running(open_policy(), LOCAL, splice=splice) as proxy:
        target = f"{ALLOWED}:{server.port}".encode()
        tunnel = await send_request(proxy, b"CONNECT " + target + b" HTTP/1.1\r\n\r\n" + post)
        plain = await send_request(proxy, post.replace(b"/echo", b"http://" + target + b"/echo"))
        await proxy.wait_idle()
    # The tunnel's answer is the proxy's 200, then the upstream's response.
    assert tunnel[0] == 200 and tunnel[2].endswith(b"\r\n\r\n" + payload)
    assert plain[0] == 200 and plain[2] == payload
    assert [e.reason for e in proxy.events] == ["allowed", "allowed"]


@pytest.mark.parametrize("splice", RELAYS)
async def test_https_through_connect_to_a_tls_server_with_a_test_ca(
    splice: bool | None, tmp_path: Path
) -> None:
    ca = make_test_ca(tmp_path)
    resolver = local_resolver(TLS_NAME)
    async with (
        upstream(tls=ca.server_context()) as server,
        running(open_policy(TLS_NAME), resolver, splice=splice) as proxy,
    ):
        status, _, reader, writer = await open_tunnel(proxy, f"{TLS_NAME}:{server.port}")
        assert status == 200
        await writer.start_tls(ca.client_context(), server_hostname=TLS_NAME)
        writer.write(f"GET / HTTP/1.1\r\nHost: {TLS_NAME}\r\n\r\n".encode())
        answer = await reader.read(-1)
        await close(writer)
        await proxy.wait_idle()
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(server.body)
    assert proxy.events == (NetworkEvent(TLS_NAME, server.port, True, "allowed"),)


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
async def test_curl_with_the_proxy_environment_reaches_https_and_is_refused_elsewhere(
    tmp_path: Path,
) -> None:
    """What a sandboxed program does: the proxy's variables in its environment, nothing else."""
    ca = make_test_ca(tmp_path)
    async with (
        upstream(tls=ca.server_context()) as server,
        running(open_policy(TLS_NAME), local_resolver(TLS_NAME)) as proxy,
    ):
        env = {"PATH": os.environ["PATH"], **proxy.environment()}
        outputs = []
        for url in (f"https://{TLS_NAME}:{server.port}/", f"https://pypi.org:{server.port}/"):
            curl = await asyncio.create_subprocess_exec(
                "curl", "-sS", "--max-time", "20", "--cacert", str(ca.ca), url, env=env,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            out, err = await curl.communicate()
            outputs.append((curl.returncode, out, err))
            with pytest.raises(ProcessLookupError):
                os.kill(curl.pid, 0)
        await proxy.wait_idle()
    assert outputs[0][:2] == (0, server.body)
    assert outputs[1][0] != 0 and b"403" in outputs[1][2]
    assert proxy.events == (
        NetworkEvent(TLS_NAME, server.port, True, "allowed"),
        NetworkEvent("pypi.org", server.port, False, "not_in_allow_list"),
    )
    assert proxy.environment()["NO_PROXY"] == ""


@pytest.mark.parametrize(
    "spelling",
    [
        "allowed.test",
        "ALLOWED.Test",
        "allowed.test.",
        "ALLOWED.TEST.",
        "\uff41llowed.test",  # fullwidth a
        "allowed\u3002test",
    ],
)
async def test_case_idna_and_trailing_dot_variants_of_an_allowed_name_are_allowed(
    spelling: str,
) -> None:
    resolver = local_resolver(ALLOWED)
    async with upstream() as server, running(open_policy(), resolver) as proxy:
        status, _, _, writer = await open_tunnel(proxy, f"{spelling}:{server.port}")
        await close(writer)
        await proxy.wait_idle()
    assert status == 200
    assert resolver.calls == [(ALLOWED, server.port)]  # the canonical name, resolved once
    assert proxy.events == (NetworkEvent(ALLOWED, server.port, True, "allowed"),)


async def test_an_international_name_is_matched_and_resolved_in_its_ascii_form() -> None:
    resolver = local_resolver("xn--bcher-kva.test")
    policy = open_policy("bücher.test")
    async with upstream() as server, running(policy, resolver) as proxy:
        for target in ("bücher.test", "BÜCHER.test.", "xn--bcher-kva.test", "XN--BCHER-KVA.TEST"):
            status, _, _, writer = await open_tunnel(proxy, f"{target}:{server.port}")
            await close(writer)
            assert status == 200, target
        await proxy.wait_idle()
    assert resolver.calls == [("xn--bcher-kva.test", server.port)] * 4
    assert {e.host for e in proxy.events} == {"xn--bcher-kva.test"}


# -- what is refused --------------------------------------------------------------------------


async def refused_tunnel(proxy: NetworkProxy, target: str | bytes) -> tuple[int, dict[str, str]]:
    line = target if isinstance(target, bytes) else target.encode()
    status, headers, _ = await send_request(proxy, b"CONNECT " + line + b" HTTP/1.1\r\n\r\n")
    return status, headers


async def test_a_name_not_allowed_is_refused_with_403_naming_the_reason() -> None:
    resolver = local_resolver(ALLOWED, "other.test")
    async with upstream() as server, running(open_policy(), resolver) as proxy:
        status, headers = await refused_tunnel(proxy, f"other.test:{server.port}")
        plain, plain_headers, body = await send_request(
            proxy, f"GET http://other.test:{server.port}/ HTTP/1.1\r\n\r\n".encode()
        )
        await proxy.wait_idle()
    assert status == plain == 403
    assert headers["x-fastgate-refusal"] == plain_headers["x-fastgate-refusal"]
    assert headers["x-fastgate-refusal"] == "not_in_allow_list"
    assert b"not_in_allow_list" in body
    assert (
        proxy.events == (NetworkEvent("other.test", server.port, False, "not_in_allow_list"),) * 2
    )
    assert resolver.calls == [] and server.accepted == 0


CONTROL_TARGETS = [
    (b"attacker.example\x00.allowed.test", "attacker.example\\x00.allowed.test"),
    (b"attacker.example%00.allowed.test", "attacker.example%00.allowed.test"),
    (b"attacker.example\t.allowed.test", "attacker.example\\t.allowed.test"),
    (b"attacker.example\n.allowed.test", "attacker.example\\n.allowed.test"),
    (b"attacker.example\r.allowed.test", "attacker.example\\r.allowed.test"),
    (b"attacker.example\x7f.allowed.test", "attacker.example\\x7f.allowed.test"),
    (b"allowed.test\x00", "allowed.test\\x00"),
    ("attacker.example\u200b.allowed.test".encode(), "attacker.example\\u200b.allowed.test"),
    ("allo\u00adwed.test".encode(), "allo\\xadwed.test"),
    (b"attacker.example\xff.allowed.test", "attacker.example\\udcff.allowed.test"),
    (b"user@allowed.test", "user@allowed.test"),
    (b"attacker.example/.allowed.test", "attacker.example/.allowed.test"),
    (b"attacker.example\\.allowed.test", "attacker.example\\\\.allowed.test"),
]


@pytest.mark.parametrize(("raw", "shown"), CONTROL_TARGETS)
async def test_a_nul_or_control_character_in_the_host_is_refused(raw: bytes, shown: str) -> None:
    """Matching and resolving see one canonical text, so a host that has none is refused
    before either: the resolver is never asked, the server never reached."""
    resolver = FakeResolver({ALLOWED: ["127.0.0.1"], "attacker.example": ["127.0.0.1"]})
    policy = open_policy(ALLOWED, "*.allowed.test")
    # In a URL a "/" ends the host (http://attacker.example/.allowed.test is attacker.example's):
    # only the CONNECT form can carry that one inside a host.
    forms = 1 if b"/" in raw else 2
    async with upstream() as server, running(policy, resolver) as proxy:
        port = str(server.port).encode()
        tunnel, headers = await refused_tunnel(proxy, raw + b":" + port)
        plain = 403
        if forms == 2:
            plain, _, _ = await send_request(
                proxy, b"GET http://" + raw + b":" + port + b"/ HTTP/1.1\r\n\r\n"
            )
        await proxy.wait_idle()
    assert tunnel == plain == 403 and headers["x-fastgate-refusal"] == "invalid_host"
    assert proxy.events == (NetworkEvent(shown, server.port, False, "invalid_host"),) * forms
    assert resolver.calls == [] and server.accepted == 0


IP_LITERALS = [
    ("127.0.0.1", "127.0.0.1"),
    ("127.1", "127.0.0.1"),
    ("0x7f.1", "127.0.0.1"),
    ("0x7f000001", "127.0.0.1"),
    ("2130706433", "127.0.0.1"),
    ("0177.0.0.1", "127.0.0.1"),
    ("[::1]", "::1"),
    ("[::ffff:127.0.0.1]", "::ffff:7f00:1"),
    ("[0:0:0:0:0:ffff:7f00:1]", "::ffff:7f00:1"),
]


@pytest.mark.parametrize(("literal", "canonical"), IP_LITERALS)
async def test_an_ip_literal_is_refused_in_every_spelling(literal: str, canonical: str) -> None:
    async with upstream() as server, running(open_policy()) as proxy:
        status, headers = await refused_tunnel(proxy, f"{literal}:{server.port}")
        await proxy.wait_idle()
    assert status == 403 and headers["x-fastgate-refusal"] == "ip_literal"
    assert proxy.events == (NetworkEvent(canonical, server.port, False, "ip_literal"),)
    assert server.accepted == 0


@pytest.mark.parametrize("target", ["[fe80::1%eth0]", "[fe80::1%25eth0]", "[::1%lo]"])
async def test_an_ipv6_zone_id_is_refused(target: str) -> None:
    async with running(open_policy("::1", "fe80::1")) as proxy:
        status, headers = await refused_tunnel(proxy, f"{target}:80")
        await proxy.wait_idle()
    assert status == 403 and headers["x-fastgate-refusal"] == "ip_literal"
    assert [(e.allowed, e.reason) for e in proxy.events] == [(False, "ip_literal")]


@pytest.mark.parametrize("spelling", ["127.1", "0x7f.1", "2130706433", "127.0.0.1"])
async def test_an_ip_literal_listed_in_allow_is_allowed_in_any_spelling(spelling: str) -> None:
    async with upstream() as server, running(open_policy("127.0.0.1")) as proxy:
        status, _, _, writer = await open_tunnel(proxy, f"{spelling}:{server.port}")
        await close(writer)
        await proxy.wait_idle()
    assert status == 200
    assert proxy.events == (NetworkEvent("127.0.0.1", server.port, True, "allowed"),)


PRIVATE_ANSWERS = [
    ["127.0.0.1"],
    ["10.0.0.1"],
    ["172.16.5.4"],
    ["192.168.1.1"],
    ["169.254.169.254"],
    ["100.64.0.1"],
    ["0.0.0.0"],
    ["224.0.0.1"],
    ["::1"],
    ["fc00::1"],
    ["fd00:ec2::254"],
    ["fe80::1"],
    ["::ffff:10.0.0.1"],
    ["::ffff:169.254.169.254"],
    ["64:ff9b::a9fe:a9fe"],
    ["93.184.215.14", "127.0.0.1"],  # one inside is enough: the name is refused
]


@pytest.mark.parametrize("answer", PRIVATE_ANSWERS, ids=lambda a: ",".join(a))
async def test_a_name_resolving_to_a_private_address_is_refused(answer: list[str]) -> None:
    resolver = FakeResolver({ALLOWED: answer})
    policy = NetworkPolicy(allow=(ALLOWED,))
    async with running(policy, resolver) as proxy:
        tunnel, headers = await refused_tunnel(proxy, f"{ALLOWED}:443")
        plain, _, _ = await send_request(proxy, f"GET http://{ALLOWED}/ HTTP/1.1\r\n\r\n".encode())
        await proxy.wait_idle()
    assert tunnel == plain == 403 and headers["x-fastgate-refusal"] == "private_address"
    assert proxy.events == (
        NetworkEvent(ALLOWED, 443, False, "private_address"),
        NetworkEvent(ALLOWED, 80, False, "private_address"),
    )


async def test_an_allowed_ip_literal_of_a_private_address_needs_allow_private() -> None:
    async with running(NetworkPolicy(allow=("127.0.0.1", "169.254.169.254"))) as proxy:
        for target in ("127.0.0.1:80", "169.254.169.254:80"):
            _, headers = await refused_tunnel(proxy, target)
            assert headers["x-fastgate-refusal"] == "private_address", target
        await proxy.wait_idle()
    assert [e.reason for e in proxy.events] == ["private_address"] * 2


async def test_the_name_is_resolved_once_and_the_connection_pinned_to_that_answer() -> None:
    """A rebinding resolver (a public answer, then a private one) gets one question per
    connection; the connection goes to the first answer's address, whatever comes later."""

    class Rebinding(FakeResolver):
        async def __call__(self, host: str, port: int) -> list[str]:
            self.calls.append((host, port))
            return ["127.0.0.1"] if len(self.calls) % 2 else ["10.9.9.9"]

    resolver = Rebinding()
    async with upstream() as server, running(open_policy(), resolver) as proxy:
        status, _, body = await send_request(
            proxy, f"GET http://{ALLOWED}:{server.port}/ HTTP/1.1\r\n\r\n".encode()
        )
        await proxy.wait_idle()
    assert (status, body) == (200, server.body)
    assert resolver.calls == [(ALLOWED, server.port)]
    assert server.accepted == 1


async def test_deny_wins_over_allow_and_a_wildcard_is_subdomains_only() -> None:
    names = ("api.allowed.test", "secret.allowed.test", "allowed.test", "x.api.allowed.test")
    resolver = local_resolver(*names)
    policy = open_policy("*.allowed.test", deny=("secret.allowed.test",))
    async with upstream() as server, running(policy, resolver) as proxy:
        statuses = []
        for name in names:
            status, _, _, writer = await open_tunnel(proxy, f"{name}:{server.port}")
            await close(writer)
            statuses.append(status)
        await proxy.wait_idle()
    assert statuses == [200, 403, 403, 200]
    assert [(e.host, e.reason) for e in proxy.events] == [
        ("api.allowed.test", "allowed"),
        ("secret.allowed.test", "denied"),
        ("allowed.test", "not_in_allow_list"),
        ("x.api.allowed.test", "allowed"),
    ]
    assert [c[0] for c in resolver.calls] == ["api.allowed.test", "x.api.allowed.test"]


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n", 400),  # origin form: not for a proxy
        (b"GET https://allowed.test/ HTTP/1.1\r\n\r\n", 400),
        (b"GET ftp://allowed.test/ HTTP/1.1\r\n\r\n", 400),
        (b"CONNECT allowed.test HTTP/1.1\r\n\r\n", 400),  # no port
        (b"CONNECT allowed.test:0 HTTP/1.1\r\n\r\n", 400),
        (b"CONNECT allowed.test:65536 HTTP/1.1\r\n\r\n", 400),
        (b"CONNECT allowed.test:+443 HTTP/1.1\r\n\r\n", 400),
        (b"CONNECT allowed.test:443 HTTP/2.0\r\n\r\n", 400),
        (b"CONNECT  allowed.test:443 HTTP/1.1\r\n\r\n", 400),
        (b"CONNECT allowed.test:443 HTTP/1.1\r\nBad Header: x\r\n\r\n", 400),
        (b"CONNECT allowed.test:443 HTTP/1.1\r\nX: a\nHost: evil\r\n\r\n", 400),
        (b"CONNECT allowed.test:443 HTTP/1.1\r\nX: a\r\n folded\r\n\r\n", 400),
        (b"CONNECT allowed.test:443 HTTP/1.1\r\nX: a\x00b\r\n\r\n", 400),
        (b"GET http://allowed.test/a\x00b HTTP/1.1\r\n\r\n", 400),
        (b"CONNECT ::1:443 HTTP/1.1\r\n\r\n", 403),  # IPv6 outside brackets
        (b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03\r\n\r\n", 400),  # TLS, not HTTP
    ],
)
async def test_malformed_requests_are_refused(request_bytes: bytes, status: int) -> None:
    resolver = local_resolver(ALLOWED)
    async with running(open_policy(), resolver) as proxy:
        answer, headers, _ = await send_request(proxy, request_bytes)
        await proxy.wait_idle()
    assert answer == status
    assert [e.allowed for e in proxy.events] == [False]
    assert headers["x-fastgate-refusal"] == proxy.events[0].reason
    assert resolver.calls == []


# -- bounds -----------------------------------------------------------------------------------


@pytest.mark.parametrize("splice", RELAYS)
async def test_max_connections_bounds_open_connections_and_reports_the_refusal(
    splice: bool | None,
) -> None:
    async with (
        upstream() as server,
        running(open_policy(max_connections=2), LOCAL, splice=splice) as proxy,
    ):
        tunnels = [await open_tunnel(proxy, f"{ALLOWED}:{server.port}") for _ in range(2)]
        assert [t[0] for t in tunnels] == [200, 200] and proxy.open_connections == 2
        status, headers = await refused_tunnel(proxy, f"{ALLOWED}:{server.port}")
        assert status in (0, 503)  # the answer, or a reset that overtook it
        assert headers.get("x-fastgate-refusal", "too_many_connections") == "too_many_connections"
        assert proxy.events[-1] == NetworkEvent("", 0, False, "too_many_connections")
        for _, _, _, writer in tunnels:
            await close(writer)
        await proxy.wait_idle()
        await server.closed.wait()
        # The slots are free again.
        status, _, _, writer = await open_tunnel(proxy, f"{ALLOWED}:{server.port}")
        await close(writer)
        assert status == 200
        await proxy.wait_idle()
    assert [e.reason for e in proxy.events] == ["allowed"] * 2 + ["too_many_connections", "allowed"]


async def test_many_connections_at_once_stay_bounded() -> None:
    async with running(open_policy(max_connections=4), LOCAL) as proxy:
        held = [await connect(proxy) for _ in range(4)]  # silent: each holds a slot
        assert proxy.open_connections == 4
        results = await asyncio.gather(*(refused_tunnel(proxy, f"{ALLOWED}:80") for _ in range(40)))
        assert proxy.open_connections == 4
        for _, writer in held:
            await close(writer)
        await proxy.wait_idle()
    assert all(status in (0, 503) for status, _ in results)
    assert [e.reason for e in proxy.events] == ["too_many_connections"] * 40


async def test_a_slow_header_is_cut_at_the_header_timeout() -> None:
    async with running(open_policy(), LOCAL, header_timeout=0.2) as proxy:
        reader, writer = await connect(proxy)
        writer.write(b"CONNECT allowed.test:443 HTTP/1.1\r\nX-Slow: ")
        await writer.drain()
        answer = await reader.read(-1)  # the proxy answers at the deadline and closes
        await close(writer)
        await proxy.wait_idle()
    assert answer.startswith(b"HTTP/1.1 408") and b"X-Fastgate-Refusal: header_timeout" in answer
    assert proxy.events == (NetworkEvent("", 0, False, "header_timeout"),)


@pytest.mark.parametrize("terminated", [True, False])
async def test_an_oversized_header_is_refused(terminated: bool) -> None:
    filler = b"X-Filler: " + b"a" * 1000 + b"\r\n"
    request = b"CONNECT allowed.test:443 HTTP/1.1\r\n" + filler * 17
    if terminated:
        request += b"\r\n"
    async with running(open_policy(), LOCAL) as proxy:
        status, _, _ = await send_request(proxy, request)
        await proxy.wait_idle()
    assert status in (0, 431)
    assert proxy.events == (NetworkEvent("", 0, False, "header_too_large"),)


# -- ends, faults, leaks ------------------------------------------------------------------------


@pytest.mark.parametrize("splice", RELAYS)
async def test_a_client_closing_mid_tunnel_leaves_nothing_open(splice: bool | None) -> None:
    async with (
        upstream(stream_size=256 << 20) as server,
        running(open_policy(), LOCAL, splice=splice) as proxy,
    ):
        status, _, reader, writer = await open_tunnel(proxy, f"{ALLOWED}:{server.port}")
        writer.write(b"GET /stream HTTP/1.1\r\n\r\n")
        await reader.readexactly(1 << 20)  # the download is under way
        writer.transport.abort()  # mid-stream, without a goodbye
        await proxy.wait_idle()
        await server.closed.wait()  # the upstream side was closed too
    assert status == 200 and proxy.open_connections == 0
    assert proxy.events == (NetworkEvent(ALLOWED, server.port, True, "allowed"),)


@pytest.mark.parametrize("splice", RELAYS)
async def test_a_reader_that_stops_holds_the_writer(splice: bool | None) -> None:
    """Backpressure: while the program reads nothing, the upstream cannot push more than the
    sockets' buffers hold; the proxy buffers nothing of its own beyond one chunk."""
    size = 96 << 20
    async with (
        upstream(stream_size=size) as server,
        running(open_policy(), LOCAL, splice=splice) as proxy,
    ):
        status, _, reader, writer = await open_tunnel(proxy, f"{ALLOWED}:{server.port}")
        writer.write(b"GET /stream HTTP/1.1\r\n\r\n")
        await reader.readexactly(1024)
        reader_transport = cast(asyncio.Transport, writer.transport)
        reader_transport.pause_reading()
        # The upstream stays open well after it could have sent everything to a proxy that
        # buffered without bound (96 MiB on loopback takes a fraction of this).
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.shield(server.closed.wait()), 1.0)
        reader_transport.resume_reading()
        rest = await reader.read(-1)
        await close(writer)
        await proxy.wait_idle()
    assert status == 200
    assert 1024 + len(rest) == len(response_head(size)) + size


async def test_closing_the_proxy_ends_its_tunnels_and_refuses_new_connections() -> None:
    async with upstream() as server:
        proxy = NetworkProxy(open_policy(), resolver=LOCAL)
        await proxy.start()
        assert proxy.address is not None
        status, _, reader, writer = await open_tunnel(proxy, f"{ALLOWED}:{server.port}")
        assert status == 200 and proxy.open_connections == 1
        await proxy.aclose()
        assert proxy.open_connections == 0
        assert await reader.read(-1) == b""  # the tunnel is closed under the client
        await close(writer)
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection(*proxy.address)
        await proxy.aclose()  # idempotent
        await server.closed.wait()


async def test_a_resolver_fault_refuses_the_connection() -> None:
    class Broken(FakeResolver):
        async def __call__(self, host: str, port: int) -> list[str]:
            raise RuntimeError("resolver bug")

    async with running(open_policy(), Broken()) as proxy:
        status, _ = await refused_tunnel(proxy, f"{ALLOWED}:443")
        await proxy.wait_idle()
    assert status == 0  # closed without an answer
    assert proxy.events == (NetworkEvent(ALLOWED, 443, False, "proxy_error"),)


@pytest.mark.parametrize("answer", [[], ["not-an-address"], ["999.1.1.1"]])
async def test_a_resolver_answer_that_is_no_address_refuses(answer: list[str]) -> None:
    policy = open_policy(ALLOWED, "unknown.test")
    async with running(policy, FakeResolver({ALLOWED: answer})) as proxy:
        status, _ = await refused_tunnel(proxy, f"{ALLOWED}:443")
        unknown, _ = await refused_tunnel(proxy, "unknown.test:443")
        await proxy.wait_idle()
    assert status == unknown == 502
    assert [(e.host, e.reason) for e in proxy.events] == [
        (ALLOWED, "resolve_failed"),
        ("unknown.test", "resolve_failed"),
    ]


async def test_a_refused_upstream_connection_is_reported() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()  # nothing listens there now
    async with running(open_policy(), LOCAL) as proxy:
        status, headers = await refused_tunnel(proxy, f"{ALLOWED}:{port}")
        await proxy.wait_idle()
    assert status == 502 and headers["x-fastgate-refusal"] == "connect_failed"
    assert proxy.events == (NetworkEvent(ALLOWED, port, False, "connect_failed"),)


async def test_an_event_sink_that_fails_closes_the_connection() -> None:
    def broken(event: NetworkEvent) -> None:
        raise RuntimeError("audit sink down")

    async with upstream() as server:
        async with NetworkProxy(open_policy(), on_event=broken, resolver=LOCAL) as proxy:
            status, _, _, writer = await open_tunnel(proxy, f"{ALLOWED}:{server.port}")
            await close(writer)
            refused, _ = await refused_tunnel(proxy, "other.test:80")
            await proxy.wait_idle()
        await server.closed.wait()
    assert status == 0 and refused == 403
    assert server.heads == []  # not one byte went through
    assert [e.reason for e in proxy.events] == ["allowed", "not_in_allow_list"]


async def test_a_crash_of_the_listener_closes_the_network() -> None:
    proxy = NetworkProxy(open_policy(), resolver=LOCAL)

    def crash(client: socket.socket) -> None:
        client.close()
        raise RuntimeError("proxy bug")

    proxy._admit = crash  # type: ignore[method-assign]
    async with proxy:
        assert proxy.address is not None
        reader, writer = await asyncio.open_connection(*proxy.address)
        assert await reader.read(-1) == b""
        await close(writer)
        # The accept loop recorded the failure and closed its listener in the step that
        # closed this connection.
        assert proxy.failure is not None
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection(*proxy.address)
    assert "RuntimeError" in proxy.failure


async def test_each_proxy_attributes_its_own_decisions() -> None:
    """One proxy per call: two calls at once never see each other's events."""
    resolver = local_resolver(ALLOWED, "other.test")
    async with (
        upstream() as server,
        running(open_policy(ALLOWED), resolver) as first,
        running(open_policy("other.test"), resolver) as second,
    ):
        for proxy in (first, second, first, second):
            for name in (ALLOWED, "other.test"):
                _, _, _, writer = await open_tunnel(proxy, f"{name}:{server.port}")
                await close(writer)
        await first.wait_idle()
        await second.wait_idle()
    assert [(e.host, e.allowed) for e in first.events] == [
        (ALLOWED, True),
        ("other.test", False),
    ] * 2
    assert [(e.host, e.allowed) for e in second.events] == [
        (ALLOWED, False),
        ("other.test", True),
    ] * 2


async def test_events_beyond_the_cap_are_counted_and_still_delivered() -> None:
    async with running(open_policy(), LOCAL, max_events=2) as proxy:
        for _ in range(5):
            await refused_tunnel(proxy, "other.test:80")
        await proxy.wait_idle()
        assert len(proxy.events) == 2 and proxy.events_dropped == 3
        assert len(proxy.recorder.events) == 5  # type: ignore[attr-defined]


@pytest.mark.parametrize("splice", RELAYS)
async def test_a_unix_socket_listener(tmp_path: Path, splice: bool | None) -> None:
    path = tmp_path / "proxy.sock"
    async with (
        upstream() as server,
        running(open_policy(), LOCAL, splice=splice, tcp=False, unix_path=path) as proxy,
    ):
        assert proxy.address is None and proxy.unix_path == str(path)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        reader, writer = await asyncio.open_unix_connection(str(path))
        writer.write(f"CONNECT {ALLOWED}:{server.port} HTTP/1.1\r\n\r\n".encode())
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
        writer.write(b"GET / HTTP/1.1\r\n\r\n")
        assert (await reader.read(-1)).endswith(server.body)
        await close(writer)
        await proxy.wait_idle()
    assert not path.exists()


async def test_an_adopted_listener_is_served_and_closed_with_the_proxy() -> None:
    # What the sandbox does with the listener made in a command's network namespace: a bound
    # socket made elsewhere, handed over; its connections are judged and reported the same.
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    async with upstream() as server, running(open_policy(), LOCAL) as proxy:
        proxy.adopt(listener)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"GET http://{ALLOWED}:{server.port}/ HTTP/1.1\r\n\r\n".encode())
        await writer.drain()
        assert (await reader.read(-1)).endswith(server.body)
        await close(writer)
        status, headers, _ = await send_via(port, b"CONNECT example.com:443 HTTP/1.1\r\n\r\n")
        assert status == 403 and headers["x-fastgate-refusal"] == "not_in_allow_list"
        await proxy.wait_idle()
        assert [(e.host, e.allowed) for e in proxy.events] == [
            (ALLOWED, True),
            ("example.com", False),
        ]
    assert listener.fileno() == -1  # closed with the proxy: nothing listens unjudged
    with pytest.raises(ConnectionRefusedError):
        await asyncio.open_connection("127.0.0.1", port)


async def test_a_proxy_not_started_or_closed_refuses_to_adopt_and_closes_the_socket() -> None:
    proxy = NetworkProxy(open_policy())
    for when in ("not started", "closed"):
        if when == "closed":
            await proxy.start()
            await proxy.aclose()
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        with pytest.raises(RuntimeError, match=when):
            proxy.adopt(listener)
        assert listener.fileno() == -1
    async with running(open_policy()) as started:
        datagram = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        with pytest.raises(ValueError, match="stream"):
            started.adopt(datagram)
        assert datagram.fileno() == -1


async def send_via(port: int, request: bytes) -> tuple[int, dict[str, str], bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    data = await reader.read(-1)
    await close(writer)
    return parse_response(data)


def test_the_proxy_refuses_bad_options() -> None:
    policy = open_policy()
    with pytest.raises(TypeError):
        NetworkProxy(("allowed.test",))  # type: ignore[arg-type]
    for credential in ("", "user:pass", "with space", "é"):
        with pytest.raises(ValueError, match="credential"):
            NetworkProxy(policy, credential=credential)
    with pytest.raises(ValueError, match="header_timeout"):
        NetworkProxy(policy, header_timeout=0)
    with pytest.raises(ValueError, match="max_header_bytes"):
        NetworkProxy(policy, max_header_bytes=10)
    with pytest.raises(RuntimeError):
        _ = NetworkProxy(policy).url
