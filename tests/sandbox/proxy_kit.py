"""Shared pieces of the network proxy's tests: a local upstream server that records what
reaches it, a resolver seam that maps test names to addresses and counts its calls, raw proxy
clients (so every byte of a request is the test's), and a test CA with a server certificate
made with the ``openssl`` command."""

from __future__ import annotations

import asyncio
import os
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fastgate.sandbox import NetworkEvent, NetworkPolicy, NetworkProxy

TLS_NAME = "api.example.test"


@dataclass
class Upstream:
    """A loopback HTTP/1.1 server: answers every request with ``body`` (``/echo`` streams the
    request body back, ``/stream`` sends ``stream_size`` bytes) and records request heads."""

    body: bytes = b"hello from upstream\n"
    stream_size: int = 0
    tls: ssl.SSLContext | None = None
    heads: list[bytes] = field(default_factory=list)
    accepted: int = 0
    open: int = 0
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    port: int = 0
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def start(self) -> Upstream:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0, ssl=self.tls)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def aclose(self) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self.open += 1
        self.closed.clear()
        task = asyncio.get_running_loop().create_task(self._serve(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            self.heads.append(head)
            target = head.split(b" ", 2)[1]
            if target == b"/echo":
                length = int(_header(head, b"content-length") or b"0")
                writer.write(response_head(length))
                remaining = length
                while remaining:
                    chunk = await reader.read(min(remaining, 1 << 18))
                    if not chunk:
                        break
                    remaining -= len(chunk)
                    writer.write(chunk)
                    await writer.drain()
            elif target == b"/stream":
                writer.write(response_head(self.stream_size))
                block = bytes(range(256)) * 4096
                sent = 0
                while sent < self.stream_size:
                    piece = block[: self.stream_size - sent]
                    writer.write(piece)
                    sent += len(piece)
                    await writer.drain()
            else:
                writer.write(response_head(len(self.body)) + self.body)
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()
            try:
                await writer.wait_closed()
            except (ConnectionError, ssl.SSLError):
                pass
            self.open -= 1
            if not self.open:
                self.closed.set()


def response_head(length: int) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % length


def _header(head: bytes, name: bytes) -> bytes | None:
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name:
            return value.strip()
    return None


@dataclass
class FakeResolver:
    """Maps test names to addresses; records every call (the proxy must resolve once)."""

    answers: dict[str, Sequence[str]] = field(default_factory=dict)
    calls: list[tuple[str, int]] = field(default_factory=list)

    async def __call__(self, host: str, port: int) -> Sequence[str]:
        self.calls.append((host, port))
        if host not in self.answers:
            raise OSError(f"no such test name: {host}")
        return self.answers[host]


@dataclass
class Recorder:
    """An ``on_event`` that keeps what it got."""

    events: list[NetworkEvent] = field(default_factory=list)

    def __call__(self, event: NetworkEvent) -> None:
        self.events.append(event)


@asynccontextmanager
async def running(
    policy: NetworkPolicy,
    resolver: FakeResolver | None = None,
    *,
    splice: bool | None = None,
    **options: object,
) -> AsyncIterator[NetworkProxy]:
    """A started proxy whose events also go to a ``Recorder`` (``proxy.recorder``); at the
    end, checks the callback saw exactly what the proxy kept, and that no connection is left
    open once the proxy is closed."""
    recorder = Recorder()
    proxy = NetworkProxy(policy, on_event=recorder, resolver=resolver, **options)  # type: ignore[arg-type]
    proxy._splice = splice
    proxy.recorder = recorder  # type: ignore[attr-defined]
    async with proxy:
        yield proxy
    assert proxy.open_connections == 0
    assert list(proxy.events) == recorder.events[: len(proxy.events)]


@asynccontextmanager
async def upstream(**options: object) -> AsyncIterator[Upstream]:
    server = await Upstream(**options).start()  # type: ignore[arg-type]
    try:
        yield server
    finally:
        await server.aclose()


async def connect(proxy: NetworkProxy) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    assert proxy.address is not None
    return await asyncio.open_connection(*proxy.address)


async def send_request(proxy: NetworkProxy, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``request`` raw to the proxy; the status, headers and body of its answer (the
    body up to the proxy's or the upstream's close). A connection the proxy reset reads as
    status 0."""
    reader, writer = await connect(proxy)
    try:
        writer.write(request)
        await writer.drain()
        data = await reader.read(-1)
    except ConnectionError:
        data = b""
    finally:
        writer.close()
        try:
            await writer.wait_closed()
        except ConnectionError:
            pass
    return parse_response(data)


def parse_response(data: bytes) -> tuple[int, dict[str, str], bytes]:
    if not data:
        return 0, {}, b""
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {}
    for line in lines[1:]:
        key, _, value = line.partition(":")
        headers[key.strip().lower()] = value.strip()
    return status, headers, body


async def open_tunnel(
    proxy: NetworkProxy, target: str
) -> tuple[int, dict[str, str], asyncio.StreamReader, asyncio.StreamWriter]:
    """``CONNECT target``: the proxy's status and headers, and the open stream (closed when
    refused)."""
    reader, writer = await connect(proxy)
    writer.write(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    await writer.drain()
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        head = b""
    status, headers, _ = parse_response(head)
    return status, headers, reader, writer


async def close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    try:
        await writer.wait_closed()
    except (ConnectionError, ssl.SSLError):
        pass


@dataclass(frozen=True)
class TlsFiles:
    ca: Path
    cert: Path
    key: Path

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert, self.key)
        return context

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca))


def make_test_ca(directory: Path) -> TlsFiles:
    """A CA and a certificate for ``TLS_NAME`` signed by it, with ``openssl``."""
    openssl = shutil.which("openssl")
    if openssl is None:
        if os.environ.get("CI"):
            pytest.fail("openssl is not installed")
        pytest.skip("openssl is not installed")
    ca_key, ca, key, csr, cert = (directory / n for n in ("ca.key", "ca.pem", "k.pem", "r", "c"))
    ext = directory / "ext"
    ext.write_text(
        f"subjectAltName=DNS:{TLS_NAME}\nbasicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
        "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n"
    )
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    ca_extra = ["-days", "2", "-subj", "/CN=fastgate test CA"]
    ca_extra += ["-addext", "basicConstraints=critical,CA:TRUE"]
    ca_extra += ["-addext", "keyUsage=critical,keyCertSign,cRLSign"]
    sign = ["-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-days", "2", "-extfile", ext]
    run = [
        [openssl, "req", "-x509", *ec, "-keyout", ca_key, "-out", ca, *ca_extra],
        [openssl, "req", *ec, "-keyout", key, "-out", csr, "-subj", f"/CN={TLS_NAME}"],
        [openssl, "x509", "-req", "-in", csr, "-out", cert, *sign],
    ]
    for argv in run:
        subprocess.run([str(a) for a in argv], check=True, capture_output=True, cwd=directory)
    return TlsFiles(ca, cert, key)
