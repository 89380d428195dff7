"""How fast a download goes through ``NetworkProxy`` compared with going direct.

Same run, same server, same client: a local HTTP server (its own process) serves ``size``
bytes; a client (its own process, as a sandboxed program is) downloads them directly, through a
``CONNECT`` tunnel, as a plain proxied ``GET``, and through a reference forwarder (a process
that only copies bytes with blocking ``splice`` in two threads: the least any relay in between
can cost), interleaved for ``rounds`` rounds. The proxy runs on this process's event loop, as it
does in a server. The result is each way's median throughput and its ratio to direct; the
forwarder's ratio tells how much of a proxy's gap is the extra hop itself on this machine (on
a machine whose cores are busy, any relay in between costs throughput).
``python -m fastgate.sandbox._throughput`` prints it; ``benchmarks/sandbox_proxy.py`` too.
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

# Forwards each connection to the server's port, copying with blocking splice (recv/sendall
# where there is none) in one thread per direction, until stdin closes.
_FORWARDER = r"""
import os, socket, sys, threading
server_port = int(sys.argv[1])
listener = socket.create_server(("127.0.0.1", 0))
print(listener.getsockname()[1], flush=True)
def pump(src, dst):
    if hasattr(os, "splice"):
        r, w = os.pipe()
        while True:
            n = os.splice(src.fileno(), w, 1 << 20)
            if not n:
                break
            while n:
                n -= os.splice(r, dst.fileno(), n)
        os.close(r)
        os.close(w)
    else:
        while chunk := src.recv(1 << 18):
            dst.sendall(chunk)
    dst.shutdown(socket.SHUT_WR)
def serve(conn):
    with conn, socket.create_connection(("127.0.0.1", server_port)) as up:
        back = threading.Thread(target=pump, args=(up, conn))
        back.start()
        pump(conn, up)
        back.join()
def accept():
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()
threading.Thread(target=accept, daemon=True).start()
sys.stdin.read()
"""

# argv: server_port size mode via_port; mode: direct | forward (through the forwarder at
# via_port) | connect | plain (through the proxy at via_port). Prints "bytes seconds".
_CLIENT = r"""
import socket, sys, time
port, size, mode, via = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
buffer = bytearray(1 << 20)
start = time.perf_counter()
sock = socket.create_connection(("127.0.0.1", port if mode == "direct" else via))
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
print(total, time.perf_counter() - start)
"""


@dataclass(frozen=True, slots=True)
class Throughput:
    """Median bytes per second of each way; ``*_ratio`` is a way's ratio to direct."""

    size: int
    rounds: int
    relay: str
    direct: float
    tunnel: float
    plain: float
    forwarder: float

    @property
    def tunnel_ratio(self) -> float:
        return self.tunnel / self.direct

    @property
    def plain_ratio(self) -> float:
        return self.plain / self.direct

    @property
    def forwarder_ratio(self) -> float:
        return self.forwarder / self.direct

    def report(self) -> str:
        mib = 1 << 20
        return (
            f"{self.size // mib} MiB x {self.rounds} rounds, relay {self.relay}: "
            f"direct {self.direct / mib:.0f} MiB/s; "
            f"CONNECT {self.tunnel / mib:.0f} MiB/s ({self.tunnel_ratio:.2f}x); "
            f"plain GET {self.plain / mib:.0f} MiB/s ({self.plain_ratio:.2f}x); "
            f"reference forwarder {self.forwarder / mib:.0f} MiB/s "
            f"({self.forwarder_ratio:.2f}x)"
        )


async def measure(
    size: int = 64 << 20, rounds: int = 5, *, splice: bool | None = None
) -> Throughput:
    """Download ``size`` bytes ``rounds`` times each way (see the module's docstring)."""
    server, port = await _start(_SERVER, size)
    forwarder = None
    try:
        forwarder, forwarder_port = await _start(_FORWARDER, port)
        policy = NetworkPolicy(allow=("127.0.0.1",), allow_private=True)
        proxy = NetworkProxy(policy)
        proxy._splice = splice
        async with proxy:
            assert proxy.address is not None
            via = {"direct": 0, "connect": proxy.address[1], "plain": proxy.address[1]}
            via["forward"] = forwarder_port
            samples: dict[str, list[float]] = {mode: [] for mode in via}
            for _ in range(rounds):
                for mode, values in samples.items():
                    values.append(await _download(port, size, mode, via[mode]))
            await proxy.wait_idle()
    finally:
        for process in (forwarder, server):
            if process is not None:
                await _stop(process)
    median = {mode: statistics.median(values) for mode, values in samples.items()}
    relay = "splice" if splice is not False and hasattr(os, "splice") else "copy"
    return Throughput(
        size,
        rounds,
        relay,
        median["direct"],
        median["connect"],
        median["plain"],
        median["forward"],
    )


async def _start(script: str, argument: int) -> tuple[asyncio.subprocess.Process, int]:
    """A helper process running ``script`` until its stdin closes, and the port it printed."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, str(argument), stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert process.stdout is not None
    line = await process.stdout.readline()
    if not line.strip().isdigit():
        await _stop(process)
        raise RuntimeError("throughput helper process did not start")
    return process, int(line)


async def _stop(process: asyncio.subprocess.Process) -> None:
    if process.stdin is not None:
        process.stdin.close()
    try:
        await asyncio.wait_for(process.wait(), 5.0)
    except TimeoutError:
        process.kill()
        await process.wait()


async def _download(port: int, size: int, mode: str, via: int) -> float:
    client = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _CLIENT,
        str(port),
        str(size),
        mode,
        str(via),
        stdout=subprocess.PIPE,
    )
    out, _ = await client.communicate()
    if client.returncode != 0:
        raise RuntimeError(f"throughput client ({mode}) failed with status {client.returncode}")
    received, seconds = out.split()
    if int(received) < size:
        raise RuntimeError(f"throughput client ({mode}) got {int(received)} of {size} bytes")
    return size / float(seconds)


def main(argv: list[str] | None = None) -> None:
    """``[size_mib] [rounds]``: print the measure with each relay (on uvloop when installed)."""
    from fastgate import run

    args = sys.argv[1:] if argv is None else argv
    size = int(args[0]) << 20 if args else 64 << 20
    rounds = int(args[1]) if len(args) > 1 else 5
    for splice in (None, False):
        print(run(measure(size, rounds, splice=splice)).report())


if __name__ == "__main__":
    main()
