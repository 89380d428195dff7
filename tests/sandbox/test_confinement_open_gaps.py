"""Escapes found from outside whose fix lies in the planner or the seccomp filter
(``_planner.py``, ``_launch.py``, ``_kernel.py``): each test states the violation and is an
expected failure (strict) until that fix lands; then it passes, and its mark goes.

- A Unix *datagram* socket outside the sandbox is reachable by path (and by abstract name where
  Landlock does not scope those, ABI < 6): ``socket(AF_UNIX)`` is refused, but
  ``socketpair(AF_UNIX, SOCK_DGRAM)`` (or ``SOCK_RAW``, a datagram pair too) is not, and a
  datagram socket sends to any address given to ``sendto``, ``sendmsg`` or ``connect``. The
  fix: ``socketpair`` of the Unix family only of ``SOCK_STREAM`` and ``SOCK_SEQPACKET`` in the
  command's filter (connected pairs of those types cannot be re-addressed).
- A writable root that holds another root (``additional_dirs`` or ``writable`` naming the
  workspace's parent) protects only what exists below the outer one: the workspace's absent
  ``.claude/``, ``.fastgate/`` and ``.mcp.json`` can be created. The fix: the literal protected
  paths (and their placeholders) at every root asked, not only at the outermost.
- Without namespaces, another sandboxed call reads a call's private ``TMPDIR`` (Landlock grants
  reads on the whole file system). The fix: the temporary directories under one parent that
  Landlock does not grant, each call granted its own.
- The search for hidden and protected paths skips what it cannot list: a call that takes the
  read permission off the directories holding a secret (``chmod 300 certs .``; a server that
  is not root then cannot list them) has the next call hide nothing there, and that call gives
  the permission back and reads the secret. The fix: a directory inside a root that the search
  cannot list is hidden as a whole (and a root it cannot list fails the call).
- An absent ``read_only`` path inside a writable root can be created (a protected one cannot).
  The fix: an absent ``read_only`` path gets a placeholder as an absent protected one does.
- Without namespaces, a command reads the user's terminals (``/dev/pts/N``: what is typed into
  the server's terminal) and the POSIX shared memory of the user's processes (``/dev/shm``);
  with namespaces ``/dev`` is ``nodev`` and ``/dev/shm`` private. The fix: no read grant on
  ``/dev`` but listing it and the usable devices (as ``_read_grants`` does for hidden paths).
"""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fastgate.sandbox import SandboxedShell, SandboxPolicy, _kernel, _support
from tests.sandbox.confinement_kit import (
    PYTHON,
    mechanism_fixture,  # noqa: F401  (the fixture "mechanism")
    no_process_outlives_the_test,  # noqa: F401  (autouse)
    outside_fixture,  # noqa: F401  (the fixture "outside")
    unique,
)

OPEN = pytest.mark.xfail(strict=True, reason="open: the fix is the planner's or the filter's")

# -- Unix datagram sockets ---------------------------------------------------------------------

SENDS = {
    "sendto": "a.sendto(b'out', address)",
    "sendmsg": "a.sendmsg([b'out'], [], 0, address)",
    "connect": "a.connect(address); a.send(b'out')",
    # A SOCK_RAW pair of the Unix family is a datagram pair.
    "sendto, raw": "a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_RAW); "
    "a.sendto(b'out', address)",
}
SEND = """
import socket, sys
address = sys.argv[1].replace("@", "\\0", 1)
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
try:
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


async def send_from_sandbox(tmp_path: Path, send: str, address: str) -> str:
    (tmp_path / "send.py").write_text(SEND.format(send=send))
    result = await SandboxedShell().run(
        f"{PYTHON} send.py '{address}'", cwd=str(tmp_path), timeout=60
    )
    assert result.sandboxed, result
    return result.output


@OPEN
@pytest.mark.parametrize("send", sorted(SENDS))
async def test_no_datagram_reaches_a_unix_socket_by_path(
    tmp_path: Path,
    mechanism: str,
    datagrams: tuple[socket.socket, socket.socket, str, str],
    send: str,
) -> None:
    by_path, _, path, _ = datagrams
    output = await send_from_sandbox(tmp_path, SENDS[send], path)
    assert received(by_path) == [] and "sent" not in output, output


@OPEN
@pytest.mark.parametrize("send", sorted(SENDS))
async def test_no_datagram_reaches_an_abstract_unix_socket_without_landlock_scopes(
    tmp_path: Path,
    mechanism: str,
    datagrams: tuple[socket.socket, socket.socket, str, str],
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
        output = await send_from_sandbox(tmp_path, SENDS[send], name)
        assert received(by_name) == [] and "sent" not in output, output
    finally:
        _support.forget_support()


# -- a root inside another root -----------------------------------------------------------------

WRITES = {
    ".claude/settings.json": "mkdir -p .claude && echo '{}' > .claude/settings.json",
    ".fastgate/settings.json": "mkdir -p .fastgate && echo '{}' > .fastgate/settings.json",
    ".mcp.json": "echo '{}' > .mcp.json",
    ".git/hooks/pre-commit": "mkdir -p .git/hooks && echo 'exit 0' > .git/hooks/pre-commit",
}


@OPEN
@pytest.mark.parametrize("how", ["roots", "writable"])
@pytest.mark.parametrize("write", sorted(WRITES))
async def test_a_roots_absent_protected_paths_stay_protected_inside_a_wider_root(
    tmp_path: Path, write: str, how: str
) -> None:
    # Namespaces only: without them, protected paths inside a writable root are a stated gap.
    if not _support.sandbox_support().namespaces:
        pytest.skip("user namespaces are not usable here")
    workspace = tmp_path / "project"
    workspace.mkdir()
    if how == "roots":  # the bash built-in's roots: the workspace and additional_dirs
        shell, roots = SandboxedShell(), [str(workspace), str(tmp_path)]
    else:
        shell, roots = SandboxedShell(SandboxPolicy(writable=(str(tmp_path),))), None
    result = await shell.run(WRITES[write], cwd=str(workspace), timeout=60, roots=roots)
    assert result.sandboxed, result
    assert not (workspace / write).exists(), result


# -- the private temporary directory -------------------------------------------------------------


async def test_another_call_cannot_read_a_calls_temporary_directory(
    tmp_path: Path, mechanism: str, request: pytest.FixtureRequest
) -> None:
    if mechanism == "landlock":  # with namespaces, each call has a /tmp of its own
        request.applymarker(OPEN)
    secret = unique("fastgate-tmp-secret")
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    fifo, told = first / "go", first / "where"
    os.mkfifo(fifo)
    os.mkfifo(told)
    writer = SandboxedShell().run(
        f'echo {secret} > "$TMPDIR/secret"; echo "$TMPDIR" > where; read < go',
        cwd=str(first),
        timeout=60,
    )
    running = asyncio.ensure_future(writer)
    try:
        async with asyncio.timeout(60):
            where = (await asyncio.to_thread(told.read_text)).strip()
        reader = await SandboxedShell().run(
            f"cat {where}/secret /tmp/fastgate-sandbox-*/secret 2>/dev/null",
            cwd=str(second),
            timeout=60,
        )
        assert secret not in reader.output
    finally:
        await asyncio.to_thread(subprocess.run, ["sh", "-c", f"echo > {fifo}"], timeout=60)
        await running


# -- the user's terminals and shared memory ------------------------------------------------------


@pytest.fixture(name="terminal")
def terminal_fixture() -> Iterator[tuple[int, str]]:
    """A terminal of the server's: its master end, and the path of the end a user types into."""
    master, slave = os.openpty()
    try:
        yield master, os.ttyname(slave)
    finally:
        os.close(master)
        os.close(slave)


async def test_a_command_cannot_read_what_is_typed_into_the_users_terminal(
    tmp_path: Path, mechanism: str, terminal: tuple[int, str], request: pytest.FixtureRequest
) -> None:
    if mechanism == "landlock":  # with namespaces, /dev is nodev
        request.applymarker(OPEN)
    master, path = terminal
    typed = unique("typed-password")
    os.write(master, f"{typed}\n".encode())
    result = await SandboxedShell().run(
        f"timeout 5 head -n 1 {path}", cwd=str(tmp_path), timeout=60
    )
    assert result.sandboxed, result
    assert typed not in result.output


async def test_a_command_cannot_read_the_users_shared_memory(
    tmp_path: Path, mechanism: str, request: pytest.FixtureRequest
) -> None:
    if mechanism == "landlock":  # with namespaces, /dev/shm is the sandbox's own
        request.applymarker(OPEN)
    secret = unique("shared-secret")
    segment = Path("/dev/shm") / unique("fastgate-shm")
    segment.write_text(secret)
    try:
        result = await SandboxedShell().run(f"cat {segment}", cwd=str(tmp_path), timeout=60)
    finally:
        segment.unlink()
    assert result.sandboxed, result
    assert secret not in result.output


# -- a directory the search cannot read -----------------------------------------------------------


@pytest.fixture(name="server_not_root")
def server_not_root_fixture(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The search sees what a server that is not root sees: a directory without its owner's
    read permission cannot be listed (root lists it all the same)."""
    real = os.scandir

    def scandir(path: Any = ".") -> Any:
        if isinstance(path, str) and path.startswith(str(tmp_path)):
            if not os.stat(path).st_mode & stat.S_IRUSR:
                raise PermissionError(13, "Permission denied", path)
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)


@OPEN
@pytest.mark.parametrize("where", [".env", "certs/server.key"])
async def test_a_secret_cannot_be_taken_out_of_the_searchs_sight_by_a_mode(
    tmp_path: Path, server_not_root: None, where: str
) -> None:
    # Namespaces only: without them, hidden files inside the roots are a stated gap. One call
    # takes the read permission off the directories holding a secret (the search of the next
    # call cannot list them, so it hides nothing there), the next one gives it back.
    if not _support.sandbox_support().namespaces:
        pytest.skip("user namespaces are not usable here")
    (tmp_path / "certs").mkdir()
    for name in (".claude", ".fastgate", ".git/hooks"):
        (tmp_path / name).mkdir(parents=True)
    (tmp_path / ".mcp.json").write_text("{}")
    (tmp_path / ".git" / "config").write_text("[core]\n")
    secret = unique("secret")
    (tmp_path / where).write_text(secret)
    shell = SandboxedShell()
    try:
        first = await shell.run("chmod 300 certs .; touch certs/t t", cwd=str(tmp_path), timeout=60)
        assert first.exit_code == 0, first
        second = await shell.run(f"chmod 755 certs .; cat {where}", cwd=str(tmp_path), timeout=60)
        assert second.sandboxed, second
        assert secret not in second.output
    finally:
        for directory in (tmp_path, tmp_path / "certs"):
            directory.chmod(0o755)


@OPEN
async def test_a_protected_file_cannot_be_taken_out_of_the_searchs_sight_by_a_mode(
    tmp_path: Path, server_not_root: None
) -> None:
    if not _support.sandbox_support().namespaces:
        pytest.skip("user namespaces are not usable here")
    settings = tmp_path / "sub" / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text("{}")
    shell = SandboxedShell()
    try:
        first = await shell.run("chmod 300 sub; touch sub/t", cwd=str(tmp_path), timeout=60)
        assert first.exit_code == 0, first
        second = await shell.run(
            "chmod 755 sub; echo planted > sub/.claude/settings.json",
            cwd=str(tmp_path),
            timeout=60,
        )
        assert second.sandboxed, second
    finally:
        (tmp_path / "sub").chmod(0o755)
    assert settings.read_text() == "{}"


# -- an absent read-only path ---------------------------------------------------------------------

CREATES = {
    "a file": "echo made > {path}",
    "a directory": "mkdir {path} && touch {path}/inside",
    "a symbolic link": "ln -s /etc/hostname {path}",
}


@OPEN
@pytest.mark.parametrize("create", sorted(CREATES))
async def test_an_absent_read_only_path_cannot_be_created(tmp_path: Path, create: str) -> None:
    # As protected paths: "read_only paths stay read-only the same way" (docs/sandbox.md), an
    # absent one included. Namespaces only: without them, read-only paths inside a writable
    # root are a stated gap.
    if not _support.sandbox_support().namespaces:
        pytest.skip("user namespaces are not usable here")
    target = tmp_path / "dist"
    shell = SandboxedShell(SandboxPolicy(read_only=(str(target),)))
    result = await shell.run(CREATES[create].format(path="dist"), cwd=str(tmp_path), timeout=60)
    assert result.sandboxed, result
    assert not (target.exists() or target.is_symlink()), result
