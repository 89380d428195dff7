"""A Unix datagram socket outside the sandbox stays unreachable, by path and by abstract name.

``socket(AF_UNIX)`` is refused by the command's filter; a datagram pair from ``socketpair``
(``SOCK_DGRAM``, or ``SOCK_RAW``, which the Unix family makes a datagram pair too) would send to
any address ``sendto``, ``sendmsg`` or ``connect`` names, so the filter allows ``socketpair`` of
the Unix family only of stream and seqpacket sockets (connected for good), with or without
``SOCK_NONBLOCK`` and ``SOCK_CLOEXEC``.
"""

from __future__ import annotations

import errno
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from fastgate.sandbox import SandboxedShell, _kernel, _support
from tests.sandbox.confinement_kit import (
    PYTHON,
    mechanism_fixture,  # noqa: F401  (the fixture "mechanism")
    no_process_outlives_the_test,  # noqa: F401  (autouse)
    outside_fixture,  # noqa: F401  (the fixture "outside")
    unique,
)

# Kernel and process mechanisms, the same in both builds: run once, in the compiled build.
pytestmark = pytest.mark.slow

# How the pair is made (0o4000: SOCK_NONBLOCK), and how it sends to ``address``.
PAIRS = {
    "dgram": "socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)",
    "dgram, cloexec": "socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)",
    "dgram, nonblock": "socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM | 0o4000)",
    "dgram, PF_UNIX": "socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM, 1)",
    "raw": "socket.socketpair(socket.AF_UNIX, socket.SOCK_RAW)",
    "raw, cloexec": "socket.socketpair(socket.AF_UNIX, socket.SOCK_RAW | socket.SOCK_CLOEXEC)",
}
SENDS = {
    "sendto": "a.sendto(b'out', address)",
    "sendmsg": "a.sendmsg([b'out'], [], 0, address)",
    "connect": "a.connect(address); a.send(b'out')",
}
SPELLINGS = sorted(
    [(pair, send) for pair in PAIRS for send in SENDS if pair in ("dgram", "raw")]
    + [(pair, "sendto") for pair in PAIRS if pair not in ("dgram", "raw")]
    + [("dgram, cloexec", "connect")]
)
SEND = """
import socket, sys
address = sys.argv[1].replace("@", "\\0", 1)
try:
    a, b = {pair}
    {send}
    print("sent")
except OSError as exc:
    print("refused", exc.errno)
"""


@pytest.fixture(name="datagrams")
def datagrams_fixture(outside: Path) -> Iterator[tuple[socket.socket, socket.socket, str, str]]:
    """A Unix datagram socket of the server's by path (outside every root) and one by abstract
    name; with the path and the name (``@`` for the NUL) to send to."""
    by_path = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    by_name = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path, name = str(outside / "server.dgram"), unique("fastgate-dgram")
    by_path.bind(path)
    os.chmod(path, 0o777)
    by_name.bind("\0" + name)
    for sock in (by_path, by_name):
        sock.setblocking(False)
    try:
        yield by_path, by_name, path, "@" + name
    finally:
        by_path.close()
        by_name.close()


def received(sock: socket.socket) -> list[bytes]:
    got = []
    while True:
        try:
            got.append(sock.recv(100))
        except BlockingIOError:
            return got


def script(tmp_path: Path, pair: str, send: str) -> Path:
    path = tmp_path / "send.py"
    path.write_text(SEND.format(pair=PAIRS[pair], send=SENDS[send]))
    return path


async def send_from_sandbox(tmp_path: Path, pair: str, send: str, address: str) -> str:
    script(tmp_path, pair, send)
    result = await SandboxedShell().run(
        f"{PYTHON} send.py '{address}'", cwd=str(tmp_path), timeout=60
    )
    assert result.sandboxed, result
    return result.output


@pytest.mark.parametrize(("pair", "send"), SPELLINGS)
def test_each_spelling_reaches_the_socket_unconfined(
    tmp_path: Path,
    datagrams: tuple[socket.socket, socket.socket, str, str],
    pair: str,
    send: str,
) -> None:
    # The control: outside the sandbox, each spelling does send, by path and by name.
    by_path, by_name, path, name = datagrams
    for sock, address in ((by_path, path), (by_name, name)):
        done = subprocess.run(
            [PYTHON, str(script(tmp_path, pair, send)), address],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.stdout.strip() == "sent", done
        assert received(sock) == [b"out"]


@pytest.mark.parametrize(("pair", "send"), SPELLINGS)
async def test_no_datagram_reaches_a_unix_socket_by_path(
    tmp_path: Path,
    mechanism: str,
    datagrams: tuple[socket.socket, socket.socket, str, str],
    pair: str,
    send: str,
) -> None:
    by_path, _, path, _ = datagrams
    output = await send_from_sandbox(tmp_path, pair, send, path)
    assert received(by_path) == [], output
    assert output.strip() == f"refused {errno.EPERM}", output


@pytest.mark.parametrize(("pair", "send"), SPELLINGS)
async def test_no_datagram_reaches_an_abstract_unix_socket_without_landlock_scopes(
    tmp_path: Path,
    mechanism: str,
    datagrams: tuple[socket.socket, socket.socket, str, str],
    pair: str,
    send: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Landlock ABI 6 scopes abstract sockets; below it (Ubuntu 24.04's 6.8 has ABI 4), only
    # the filter stands.
    if _kernel.landlock_abi() < 5:
        pytest.skip("Landlock ABI 5 is not available here")
    monkeypatch.setattr(_kernel, "landlock_abi", lambda: 5)
    _support.forget_support()
    try:
        _, by_name, _, name = datagrams
        output = await send_from_sandbox(tmp_path, pair, send, name)
        assert received(by_name) == [], output
        assert output.strip() == f"refused {errno.EPERM}", output
    finally:
        _support.forget_support()


PAIRS_KEPT = """
import asyncio, socket
for kind in ("SOCK_STREAM", "SOCK_SEQPACKET"):
    for flags in (0, socket.SOCK_NONBLOCK, socket.SOCK_CLOEXEC):
        a, b = socket.socketpair(socket.AF_UNIX, getattr(socket, kind) | flags)
        a.setblocking(True)
        b.setblocking(True)
        a.sendall(b"ping")
        assert b.recv(4) == b"ping"
        a.close()
        b.close()


async def main():
    reader, writer = await asyncio.open_unix_connection(sock=socket.socketpair()[0])
    writer.close()
    process = await asyncio.create_subprocess_exec("true")
    return await process.wait()


assert asyncio.run(main()) == 0
print("pairs kept")
"""


async def test_stream_and_seqpacket_pairs_pipes_and_shells_still_work(
    tmp_path: Path, mechanism: str
) -> None:
    (tmp_path / "pairs.py").write_text(PAIRS_KEPT)
    result = await SandboxedShell().run(
        f"{PYTHON} pairs.py && echo piped | tr a-z A-Z | cat && x=$(echo sub) && echo $x"
        " && cat <(echo process) && sort <<< 'here'",
        cwd=str(tmp_path),
        timeout=60,
    )
    assert result.sandboxed, result
    assert result.exit_code == 0, result
    assert result.output.split() == ["pairs", "kept", "PIPED", "sub", "process", "here"]


# -- the filter itself, applied to a child of the test --------------------------------------------

APPLY = """
import ctypes, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
code = bytes.fromhex(sys.argv[1])


class Prog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


buffer = ctypes.create_string_buffer(code, len(code))
program = Prog(len(code) // 8, ctypes.addressof(buffer))
assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
assert libc.prctl(22, 2, ctypes.byref(program), 0, 0) == 0  # PR_SET_SECCOMP, filter
for family, kind in [tuple(map(int, pair.split(","))) for pair in sys.argv[2:]]:
    try:
        socket.socketpair(family, kind)
        print("allowed")
    except OSError as exc:
        print(exc.errno)
"""
NONBLOCK, CLOEXEC = socket.SOCK_NONBLOCK, socket.SOCK_CLOEXEC
ALLOWED = [
    (socket.AF_UNIX, socket.SOCK_STREAM),
    (socket.AF_UNIX, socket.SOCK_STREAM | NONBLOCK | CLOEXEC),
    (socket.AF_UNIX, socket.SOCK_SEQPACKET),
    (socket.AF_UNIX, socket.SOCK_SEQPACKET | CLOEXEC),
]
REFUSED = [
    (socket.AF_UNIX, socket.SOCK_DGRAM),
    (socket.AF_UNIX, socket.SOCK_DGRAM | CLOEXEC),
    (socket.AF_UNIX, socket.SOCK_DGRAM | NONBLOCK | CLOEXEC),
    (socket.AF_UNIX, socket.SOCK_RAW),
    (socket.AF_UNIX, socket.SOCK_RDM),
    (socket.AF_UNIX, 0x10 | socket.SOCK_DGRAM),  # a stray bit above the type
    (socket.AF_INET, socket.SOCK_STREAM),
    (socket.AF_NETLINK, socket.SOCK_RAW),
]


def test_the_table_numbers_of_socketpair() -> None:
    assert _kernel.ARCHES["x86_64"][1]["socketpair"] == 53
    assert _kernel.ARCHES["aarch64"][1]["socketpair"] == 199


@pytest.mark.parametrize("namespaced", [True, False])
@pytest.mark.parametrize("tcp", [True, False])
def test_the_filter_allows_only_unix_stream_and_seqpacket_pairs(
    tcp: bool, namespaced: bool
) -> None:
    arch = _kernel.seccomp_arch()
    if arch is None:
        pytest.skip("no seccomp filter for this host")
    code = _kernel.command_filter(arch, tcp=tcp, namespaced=namespaced)
    pairs = [f"{family},{kind}" for family, kind in ALLOWED + REFUSED]
    done = subprocess.run(
        [PYTHON, "-c", APPLY, code.hex(), *pairs],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done
    expected = ["allowed"] * len(ALLOWED) + [str(errno.EPERM)] * len(REFUSED)
    assert done.stdout.split() == expected, done
