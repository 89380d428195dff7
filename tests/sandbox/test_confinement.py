"""What a sandboxed ``bash`` call cannot do (SPEC §22), tried from inside the call through the
executor with the built-ins, several spellings each; every refusal has its control: the same
command through ``LocalShell`` succeeds. Properties that hold without user namespaces too run
under both mechanisms."""

from __future__ import annotations

import asyncio
import ctypes
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from fastgate.sandbox import SandboxPolicy, _policy
from tests.sandbox.confinement_kit import (
    PYTHON,
    bash,
    mechanism_fixture,  # noqa: F401  (the fixture "mechanism")
    names,
    no_process_outlives_the_test,  # noqa: F401  (autouse)
    output,
    outside_fixture,  # noqa: F401  (the fixture "outside")
    sandboxed,
    unconfined,
    unique,
)

# The processes and the kernel it exercises are the same under both builds and both loops:
# run once, in the compiled build, on uvloop.
pytestmark = pytest.mark.slow

SECRET = "s3cr3t-" + "x" * 8

# -- files --------------------------------------------------------------------------------------

WRITES = {
    "redirect": "echo x > {dir}/a",
    "append": "echo x >> {dir}/b",
    "touch": "touch {dir}/c",
    "cp": "cp /etc/hostname {dir}/d",
    "mkdir": "mkdir {dir}/e",
    "symlink": "ln -s /etc/hostname {dir}/f",
    "python": f"{PYTHON} -c \"open('{{dir}}/g', 'w').write('x')\"",
}


async def test_writes_outside_the_roots_are_refused(
    tmp_path: Path, outside: Path, mechanism: str
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    for target in (outside, tmp_path):  # outside /tmp, and beside the workspace in /tmp
        script = "; ".join(w.format(dir=target) for w in WRITES.values()) + "; touch inside"
        result = await bash(sandboxed(workspace), script)
        assert [name for name in names(target) if name != "ws"] == []
        assert (workspace / "inside").exists(), output(result)  # the root itself is writable
    control = "; ".join(w.format(dir=outside) for w in WRITES.values())
    assert (await bash(unconfined(workspace), control)).ok
    assert names(outside) == list("abcdefg")


def repository(root: Path) -> None:
    """A workspace with git's configuration and hooks and Claude Code's settings."""
    (root / ".git" / "hooks").mkdir(parents=True)
    (root / ".git" / "config").write_text("[core]\n")
    (root / ".git" / "hooks" / "pre-commit.sample").write_text("#!/bin/sh\n")
    (root / ".claude").mkdir()
    (root / ".claude" / "settings.json").write_text("{}")


PROTECTED_WRITES = {
    "git config": "echo '[alias] x = !evil' >> .git/config",
    "git config replaced": "echo x > scratch/cfg && mv scratch/cfg .git/config",
    "a new hook": "echo evil > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit",
    "hooks removed": "rm -rf .git/hooks",
    "hooks path moved": "mv .git/hooks .git/old-hooks && mkdir .git/hooks && echo e > .git/hooks/x",
    "git dir moved": "mv .git .git-old && mkdir -p .git/hooks && echo e > .git/hooks/post-merge",
    "claude settings": "echo '{\"hooks\": {}}' > .claude/settings.json",
    "claude dir removed": (
        "rm -rf .claude && mkdir .claude && echo '{}' > .claude/settings.local.json"
    ),
    "mcp list (absent)": "echo '{\"mcpServers\": {}}' > .mcp.json",
    "mcp list by python": f"{PYTHON} -c \"open('.mcp.json', 'w').write('x')\"",
    "mcp list by link": "ln -s /etc/hostname .mcp.json",
    "fastgate settings (absent)": "mkdir -p .fastgate && echo '{}' > .fastgate/settings.json",
    "fastgate by cp": "cp -r /etc/hostname .fastgate",
}


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path below ``root`` (outside ``scratch``), with the contents of files."""
    found: dict[str, bytes | None] = {}
    for path in sorted(root.rglob("*")):
        relative = str(path.relative_to(root))
        if relative.startswith("scratch"):
            continue
        found[relative] = path.read_bytes() if path.is_file() and not path.is_symlink() else None
    return found


@pytest.mark.parametrize("case", list(PROTECTED_WRITES))
async def test_protected_paths_stay_read_only_existing_or_not(tmp_path: Path, case: str) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    repository(workspace)
    (workspace / "scratch").mkdir()
    await bash(sandboxed(workspace), "true")  # makes the kept cover: an empty config.worktree
    before = snapshot(workspace)
    result = await bash(sandboxed(workspace), f"cd . && {PROTECTED_WRITES[case]}; touch scratch/ok")
    assert snapshot(workspace) == before, output(result)
    assert (workspace / "scratch" / "ok").exists()  # the rest of the root stays writable
    control = await bash(unconfined(workspace), PROTECTED_WRITES[case])
    assert control.ok and snapshot(workspace) != before, control.content


async def test_an_absent_git_directory_cannot_be_made(tmp_path: Path) -> None:
    # With no .git at all, its hooks and configuration are protected through the directory.
    workspace = tmp_path / "ws"
    workspace.mkdir()
    for command in ("git init -q .", "mkdir -p .git/hooks && echo x > .git/hooks/pre-commit"):
        result = await bash(sandboxed(workspace), command)
        assert not result.ok and sorted(os.listdir(workspace)) == [], output(result)
    assert (await bash(unconfined(workspace), "git init -q .")).ok
    assert (workspace / ".git" / "config").exists()


async def test_git_still_commits_under_a_protected_git_directory(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    assert (await bash(unconfined(workspace), "git init -q . && git config user.name t && "
                       "git config user.email t@t")).ok  # fmt: skip
    result = await bash(
        sandboxed(workspace), "echo a > a && git add a && git commit -qm a && git log --oneline"
    )
    assert result.ok and " a" in output(result), output(result)


@pytest.fixture(name="home")
def home_fixture(monkeypatch: pytest.MonkeyPatch, outside: Path) -> Iterator[Path]:
    """The server's home as it was at start, with the secrets every home holds."""
    home = outside / "home"
    for relative in (
        ".ssh/id_ed25519",
        ".aws/credentials",
        ".netrc",
        ".kube/config",
        ".docker/config.json",
        ".gnupg/private-keys-v1.d/key",
        ".config/gcloud/credentials.db",
    ):
        path = home / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(SECRET)
    (home / "notes.txt").write_text("public")
    monkeypatch.setattr(_policy, "HOME_AT_START", str(home))
    # HOME as the server has it now points elsewhere: what was home at start stays hidden.
    monkeypatch.setenv("HOME", str(outside))
    yield home


def secret_files(home: Path) -> list[Path]:
    return [p for p in home.rglob("*") if p.is_file() and p.name != "notes.txt"]


READS = {
    "cat": "cat {path}",
    "copy then read": "cp -r {path} $TMPDIR/c && cat -v $TMPDIR/c",
    "python": f"{PYTHON} -c \"print(open('{{path}}').read())\"",
    "recursive grep": "grep -r . {path}",
    "tar": "tar cf - {path} | tar xOf -",
    "head by link": "ln -s {path} $TMPDIR/l && head -c 100 $TMPDIR/l",
}


async def test_the_homes_secrets_are_unreadable(tmp_path: Path, home: Path, mechanism: str) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    secrets = secret_files(home)
    for spelling in READS.values():
        script = "; ".join(spelling.format(path=p) for p in secrets)
        result = await bash(
            sandboxed(workspace, SandboxPolicy()), f"{script}; cat {home}/notes.txt"
        )
        assert SECRET not in output(result), spelling
        assert "public" in output(result)  # the rest of the home stays readable
    control = await bash(unconfined(workspace), f"cat {secrets[0]}")
    assert SECRET in output(control)


async def test_secret_files_inside_the_workspace_are_unreadable(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    for relative in (".env", ".env.local", "certs/server.pem", "deploy/id_rsa", "sub/.npmrc",
                     ".ssh/config", "keys/signing.key"):  # fmt: skip
        path = workspace / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(SECRET)
    (workspace / "README").write_text("readable")
    for spelling in READS.values():
        script = "; ".join(
            spelling.format(path=p) for p in (".env", ".env.local", "certs", "deploy/id_rsa",
                                              "sub/.npmrc", ".ssh", "keys/signing.key")
        )  # fmt: skip
        result = await bash(sandboxed(workspace), f"{script}; cat README")
        assert SECRET not in output(result), spelling
        assert "readable" in output(result)
    assert SECRET in output(await bash(unconfined(workspace), "cat .env"))
    assert (workspace / ".env").read_text() == SECRET  # left as it was


# -- the server ---------------------------------------------------------------------------------

SERVER_FILES = {
    "environ": "cat /proc/{pid}/environ | tr '\\0' '\\n' | grep -c =",
    "mem": (
        f"{PYTHON} -c \"f = open('/proc/{{pid}}/maps'); s = int(f.readline().split('-')[0], 16);"
        "m = open('/proc/{pid}/mem', 'rb'); m.seek(s); print(len(m.read(16)))\""
    ),
    "environ by python": f"{PYTHON} -c \"print(open('/proc/{{pid}}/environ', 'rb').read()[:40])\"",
}


async def test_the_servers_memory_and_environment_are_unreadable(
    tmp_path: Path, mechanism: str
) -> None:
    pid = os.getpid()
    for name, command in SERVER_FILES.items():
        result = await bash(sandboxed(tmp_path), command.format(pid=pid))
        assert not result.ok, (name, output(result))
        assert (await bash(unconfined(tmp_path), command.format(pid=pid))).ok, name


async def test_the_servers_command_line_is_not_even_visible(tmp_path: Path) -> None:
    command = f"tr '\\0' ' ' < /proc/{os.getpid()}/cmdline"
    result = await bash(sandboxed(tmp_path), command)
    assert "pytest" not in output(result) and "No such file" in output(result)
    assert "pytest" in output(await bash(unconfined(tmp_path), command))


SIGNALS = {
    "kill -0": "kill -0 {pid}",
    "kill -CONT": "kill -CONT {pid}",
    "its group": "kill -0 -- -{pgid}",
    "python": f"{PYTHON} -c 'import os; os.kill({{pid}}, 0)'",
    "ptrace": (
        f"{PYTHON} -c 'import ctypes, sys; r = ctypes.CDLL(None, use_errno=True).ptrace("
        "0x4206, {pid}, 0, 0); sys.exit(0 if r == 0 else 1)'"  # PTRACE_SEIZE: never stops it
    ),
}


async def test_signals_and_ptrace_to_the_server_are_refused(tmp_path: Path, mechanism: str) -> None:
    values = {"pid": os.getpid(), "pgid": os.getpgrp()}
    for name, command in SIGNALS.items():
        result = await bash(sandboxed(tmp_path), command.format(**values))
        assert not result.ok, (name, output(result))
        assert (await bash(unconfined(tmp_path), command.format(**values))).ok, name


@pytest.fixture(name="shared_memory")
def shared_memory_fixture() -> Iterator[tuple[int, int]]:
    """A System V shared memory segment of the server's: its key and its id."""
    libc = ctypes.CDLL(None, use_errno=True)
    key = int.from_bytes(os.urandom(3), "little") + 0x10000
    segment = libc.shmget(key, 4096, 0o1600)  # IPC_CREAT | 0600
    assert segment >= 0, os.strerror(ctypes.get_errno())
    try:
        yield key, segment
    finally:
        libc.shmctl(segment, 0, None)  # IPC_RMID


async def test_system_v_ipc_with_the_server_is_refused(
    tmp_path: Path, shared_memory: tuple[int, int], mechanism: str
) -> None:
    key, segment = shared_memory
    python = (
        f"{PYTHON} -c 'import ctypes, sys; libc = ctypes.CDLL(None); "
        "libc.shmat.restype = ctypes.c_long; "
    )
    for command in (
        python + f"sys.exit(0 if libc.shmget({key}, 0, 0) >= 0 else 1)'",
        python + f"sys.exit(0 if libc.shmat({segment}, None, 0) != -1 else 1)'",
    ):
        assert not (await bash(sandboxed(tmp_path), command)).ok, command
        assert (await bash(unconfined(tmp_path), command)).ok, command


@pytest.fixture(name="unix_servers")
def unix_servers_fixture(tmp_path: Path) -> Iterator[dict[str, str]]:
    """The server listening on a Unix socket by path (inside the workspace, so a sandbox sees
    the file) and on an abstract name."""
    listeners = []
    path = tmp_path / "server.sock"
    by_path = socket.socket(socket.AF_UNIX)
    by_path.bind(str(path))
    abstract = socket.socket(socket.AF_UNIX)
    name = unique("fastgate-test")
    abstract.bind("\0" + name)
    for sock in (by_path, abstract):
        sock.listen(16)
        listeners.append(sock)
    try:
        yield {"path": str(path), "abstract": name}
    finally:
        for sock in listeners:
            sock.close()


async def test_the_servers_unix_sockets_are_unreachable(
    tmp_path: Path, unix_servers: dict[str, str], mechanism: str
) -> None:
    connects = {
        "path": (
            f'{PYTHON} -c "import socket; '
            f"socket.socket(socket.AF_UNIX).connect('{unix_servers['path']}')\""
        ),
        "abstract": (
            f'{PYTHON} -c "import socket; '
            f"socket.socket(socket.AF_UNIX).connect('\\0{unix_servers['abstract']}')\""
        ),
    }
    for name, command in connects.items():
        assert not (await bash(sandboxed(tmp_path), command)).ok, name
        assert (await bash(unconfined(tmp_path), command)).ok, name


@pytest.fixture(name="listeners")
def listeners_fixture() -> Iterator[tuple[socket.socket, socket.socket]]:
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(16)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.setblocking(False)
    try:
        yield tcp, udp
    finally:
        tcp.close()
        udp.close()


def received(udp: socket.socket) -> list[bytes]:
    got = []
    while True:
        try:
            got.append(udp.recv(100))
        except BlockingIOError:
            return got


async def test_no_tcp_and_no_udp_without_a_network_policy(
    tmp_path: Path, listeners: tuple[socket.socket, socket.socket], mechanism: str
) -> None:
    tcp, udp = listeners
    tcp_port, udp_port = tcp.getsockname()[1], udp.getsockname()[1]
    tcp_commands = [
        f"exec 3<>/dev/tcp/127.0.0.1/{tcp_port}",
        f"{PYTHON} -c \"import socket; socket.create_connection(('127.0.0.1', {tcp_port}))\"",
        f'{PYTHON} -c "import socket; '
        f"socket.create_connection(('::ffff:127.0.0.1', {tcp_port}))\"",
    ]
    udp_commands = [
        f"echo sandboxed > /dev/udp/127.0.0.1/{udp_port}",
        f'{PYTHON} -c "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM);'
        f"s.sendto(b'sandboxed', ('127.0.0.1', {udp_port}))\"",
        f'{PYTHON} -c "import socket; socket.socket(socket.AF_PACKET, socket.SOCK_RAW)"',
    ]
    for command in tcp_commands + udp_commands:
        result = await bash(sandboxed(tmp_path), command)
        assert not result.ok, (command, output(result))
    assert received(udp) == []
    assert (await bash(unconfined(tmp_path), tcp_commands[0])).ok
    assert (await bash(unconfined(tmp_path), udp_commands[0])).ok
    assert received(udp) == [b"sandboxed\n"]


async def test_concurrent_calls_share_the_placeholders_and_leave_none(tmp_path: Path) -> None:
    # Eight calls on one workspace at once, each covering the same absent protected paths:
    # every one is confined while it runs, and the placeholders go with the last one.
    ex = sandboxed(tmp_path)
    commands = [
        f"echo e > .mcp.json; mkdir -p .claude/x; touch file-{i}; sleep 0.{i}" for i in range(8)
    ]
    results = await asyncio.gather(*(bash(ex, command) for command in commands))
    assert all(result.ok for result in results), [output(r) for r in results]
    assert names(tmp_path) == [f"file-{i}" for i in range(8)]
