"""How fast a download goes through ``NetworkProxy`` compared with going direct.

Same run, same server, same client: a local HTTP server (its own process) serves ``size``
bytes; a client (its own process, as a sandboxed program is) downloads them directly, through a
``CONNECT`` tunnel, and as a plain proxied ``GET``, interleaved for ``rounds`` rounds; the
proxy runs on this process's event loop, as it does in a server. The result is each way's
median throughput and its ratio to direct. ``python -m fastgate.sandbox._throughput`` prints
it; ``benchmarks/sandbox_proxy.py`` too.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass

from fastgate.sandbox._network import NetworkPolicy
from fastgate.sandbox._proxy import NetworkProxy

# Serves GET /<n> with n zero bytes, one request per connection, until stdin closes.
_SERVER = r"""
import socket, sys, threading
payload = memoryview(bytes(int(sys.argv[1])))
listener = socket.create_server(("127.0.0.1", 0))
print(listener.getsockname()[1], flush=True)
def serve(conn):
    with conn:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = conn.recv(65536)
            if not chunk:
                return
            head += chunk
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                     % len(payload))
        conn.sendall(payload)
def accept():
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()
threading.Thread(target=accept, daemon=True).start()
sys.stdin.read()
"""

# argv: port size mode [proxy_port]; mode: direct | connect | plain. Prints "bytes seconds".
_CLIENT = r"""
import socket, sys, time
port, size, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
target = ("127.0.0.1", int(sys.argv[4]) if mode != "direct" else port)
buffer = bytearray(1 << 20)
start = time.perf_counter()
sock = socket.create_connection(target)
if mode == "connect":
    sock.sendall(b"CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % (port, port))
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    assert head.startswith(b"HTTP/1.1 200"), head
path = b"http://127.0.0.1:%d/" % port if mode == "plain" else b"/"
sock.sendall(b"GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n" % (path, port))
total = 0
while True:
    n = sock.recv_into(buffer)
    if not n:
        break
    total += n
elapsed = time.perf_counter() - start
print(total, elapsed)
"""


@dataclass(frozen=True, slots=True)
class Throughput:
    """Median bytes per second of each way, and each proxied way's ratio to direct."""

    size: int
    rounds: int
    relay: str
    direct: float
    tunnel: float
    plain: float

    @property
    def tunnel_ratio(self) -> float:
        return self.tunnel / self.direct

    @property
    def plain_ratio(self) -> float:
        return self.plain / self.direct

    def report(self) -> str:
        mib = 1 << 20
        return (
            f"{self.size // mib} MiB x {self.rounds} rounds, relay {self.relay}: "
            f"direct {self.direct / mib:.0f} MiB/s, "
            f"CONNECT {self.tunnel / mib:.0f} MiB/s ({self.tunnel_ratio:.2f}x), "
            f"plain GET {self.plain / mib:.0f} MiB/s ({self.plain_ratio:.2f}x)"
        )


async def measure(
    size: int = 64 << 20, rounds: int = 5, *, splice: bool | None = None
) -> Throughput:
    """Download ``size`` bytes ``rounds`` times each way (see the module's docstring)."""
    server = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _SERVER,
        str(size),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert server.stdout is not None
        port = int(await server.stdout.readline())
        policy = NetworkPolicy(allow=("127.0.0.1",), allow_private=True)
        proxy = NetworkProxy(policy)
        proxy._splice = splice
        async with proxy:
            assert proxy.address is not None
            proxy_port = proxy.address[1]
            samples: dict[str, list[float]] = {"direct": [], "connect": [], "plain": []}
            for _ in range(rounds):
                for mode, values in samples.items():
                    values.append(await _download(port, size, mode, proxy_port))
            await proxy.wait_idle()
    finally:
        if server.stdin is not None:
            server.stdin.close()
        await server.wait()
    relay = "splice" if splice is not False and hasattr(os, "splice") else "copy"
    return Throughput(
        size,
        rounds,
        relay,
        statistics.median(samples["direct"]),
        statistics.median(samples["connect"]),
        statistics.median(samples["plain"]),
    )


async def _download(port: int, size: int, mode: str, proxy_port: int) -> float:
    client = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _CLIENT,
        str(port),
        str(size),
        mode,
        str(proxy_port),
        stdout=subprocess.PIPE,
    )
    out, _ = await client.communicate()
    if client.returncode != 0:
        raise RuntimeError(f"throughput client ({mode}) failed with status {client.returncode}")
    received, seconds = out.split()
    if int(received) < size:
        raise RuntimeError(f"throughput client ({mode}) got {int(received)} of {size} bytes")
    return size / float(seconds)


def main() -> None:
    from fastgate.runtime import loop_factory

    with asyncio.Runner(loop_factory=loop_factory("auto")) as runner:
        for splice in (None, False):
            print(runner.run(measure(splice=splice)).report())


if __name__ == "__main__":
    main()
