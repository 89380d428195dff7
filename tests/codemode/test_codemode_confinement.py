"""Confinement, each tested from inside a program: no file but its scratch directory, no network,
no secret of the server's environment, no reach into the parent, no way to raise its limits,
nothing of the server's shared state (System V IPC, scheduling, signals through a descriptor's
owner) on every Landlock ABI. The suite runs as root (as CI does): every check holds for root
too, and the shared-state checks run against a server started without any capability."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fastgate import ErrorCode
from fastgate.codemode import CodeMode, SandboxUnavailable, _sandbox
from fastgate.processes import supervision
from tests.codemode_kit import (
    Env,
    env_fixture,  # noqa: F401  (the fixture "env")
    noop_tool,
    run,
)


async def test_no_workspace_file_or_system_file_can_be_read_or_written(env: Env) -> None:
    secret = env.workspace / "secret.txt"
    secret.write_text("the secret")
    executor = env.make(noop_tool())
    code = f"""
import os
for path, mode in (({str(secret)!r}, "r"), ({str(secret)!r}, "a"),
                   ("/etc/hostname", "r"), ("/etc/hostname", "a"),
                   ({str(env.workspace / "new.txt")!r}, "w"), ("/tmp/fastgate-escape.txt", "w")):
    try:
        with open(path, mode) as f:
            print("OPENED", path, mode, f.read() if mode == "r" else "")
    except OSError as e:
        print("refused", path, mode, type(e).__name__)
for path in ({str(env.workspace)!r}, "/", "/etc", "/proc/self"):
    try:
        print("LISTED", path, os.listdir(path)[:3])
    except OSError as e:
        print("refused", path, "list", type(e).__name__)
with open("scratch.txt", "w") as f:
    f.write("mine")
print("scratch", open("scratch.txt").read(), os.getcwd() != {str(env.workspace)!r})
"""
    result = await run(executor, code)
    assert result.ok, result.content
    out = result.value["stdout"]
    assert "OPENED" not in out and "LISTED" not in out, out
    assert out.count("refused") == 10
    assert "scratch mine True" in out
    assert secret.read_text() == "the secret"
    assert not (env.workspace / "new.txt").exists()
    assert "fastgate-escape.txt" not in os.listdir("/tmp")


async def test_no_tcp_connection_reaches_a_listener(env: Env) -> None:
    accepted: list[object] = []

    async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer.get_extra_info("peername"))
        writer.close()

    server = await asyncio.start_server(on_client, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        executor = env.make(noop_tool())
        code = f"""
import socket
attempts = {{
    "tcp": lambda: socket.create_connection(("127.0.0.1", {port}), timeout=2),
    "tcp6": lambda: socket.create_connection(("::1", {port}), timeout=2),
    "udp": lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("127.0.0.1", {port})),
    "unix": lambda: socket.socket(socket.AF_UNIX).connect("/run/anything.sock"),
    "raw": lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW),
    "dns": lambda: socket.getaddrinfo("example.com", 80),
}}
for name, attempt in attempts.items():
    try:
        attempt()
        print("CONNECTED", name)
    except OSError as e:
        print("refused", name, type(e).__name__)
"""  # noqa: E501
        result = await run(executor, code)
    finally:
        server.close()
        await server.wait_closed()
    assert result.ok, result.content
    out = result.value["stdout"]
    assert "CONNECTED" not in out, out
    assert out.count("refused") == 6
    assert accepted == []


async def test_no_datagram_reaches_a_unix_socket_outside(env: Env, tmp_path: Path) -> None:
    # A datagram socketpair sends to whatever path sendto or connect names; only stream and
    # seqpacket pairs (connected for good) are made.
    import socket

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = str(tmp_path / "listener.sock")
    listener.bind(path)
    listener.setblocking(False)
    try:
        code = f"""
import socket
S = socket
def pair(kind):
    return socket.socketpair(S.AF_UNIX, kind)[0]
attempts = {{
    "dgram": lambda: pair(S.SOCK_DGRAM).sendto(b"x", {path!r}),
    "dgram-cloexec": lambda: pair(S.SOCK_DGRAM | S.SOCK_CLOEXEC).sendto(b"x", {path!r}),
    "dgram-nonblock": lambda: pair(S.SOCK_DGRAM | S.SOCK_NONBLOCK).sendto(b"x", {path!r}),
    "raw": lambda: pair(S.SOCK_RAW).sendto(b"x", {path!r}),
    "connect": lambda: (lambda s: (s.connect({path!r}), s.send(b"x")))(pair(S.SOCK_DGRAM)),
    "sendmsg": lambda: pair(S.SOCK_DGRAM).sendmsg([b"x"], [], 0, {path!r}),
}}
for name, attempt in attempts.items():
    try:
        attempt()
        print("SENT", name)
    except OSError as e:
        print("refused", name, type(e).__name__)
a, b = socket.socketpair(S.AF_UNIX, S.SOCK_STREAM | S.SOCK_CLOEXEC)
a.send(b"ok"); print("stream", b.recv(2).decode())
a, b = socket.socketpair(S.AF_UNIX, S.SOCK_SEQPACKET)
a.send(b"ok"); print("seqpacket", b.recv(2).decode())
"""
        result = await run(env.make(noop_tool()), code)
        assert result.ok, result.content
        out = result.value["stdout"]
        assert "SENT" not in out and out.count("refused") == 6, out
        assert "stream ok" in out and "seqpacket ok" in out, out
        with pytest.raises(BlockingIOError):
            listener.recv(16)  # nothing arrived
    finally:
        listener.close()


async def test_no_secret_of_the_servers_environment_is_visible(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FASTGATE_TEST_API_KEY", "sk-hunter2")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "hunter3")
    monkeypatch.setenv("PYTHONPATH", "/work")
    executor = env.make(noop_tool())  # its workers start now, with the variables set
    code = """
import os, sys
print(sorted(os.environ))
print(any("hunter" in v for v in os.environ.values()))
print([p for p in sys.path if "site-packages" in p or p == "/work"])
"""
    result = await run(executor, code)
    assert result.ok, result.content
    names, leaked, paths = result.value["stdout"].splitlines()
    assert names == "['HOME', 'LANG', 'MALLOC_ARENA_MAX', 'PATH', 'TMPDIR']"
    assert leaked == "False" and paths == "[]"


async def test_the_parent_cannot_be_reached(env: Env) -> None:
    """Neither the server nor the worker's launcher (its parent, on Linux)."""
    executor = env.make(noop_tool())
    code = """
import ctypes, gc, os, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
class IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
def probe(who, pid):
    for name in ("mem", "environ", "maps"):
        try:
            open(f"/proc/{pid}/{name}", "rb").read(1)
            print(who, "READ", name)
        except OSError as e:
            print(who, "refused", name)
    buf = ctypes.create_string_buffer(8)
    local, remote = IoVec(ctypes.addressof(buf), 8), IoVec(0x400000, 8)
    print(who, "process_vm_readv", libc.process_vm_readv(pid, ctypes.byref(local), 1,
          ctypes.byref(remote), 1, 0), ctypes.get_errno())
    print(who, "ptrace", libc.ptrace(16, pid, 0, 0), ctypes.get_errno())  # PTRACE_ATTACH
    try:
        os.kill(pid, 0)
        print(who, "SIGNALLED")
    except OSError as e:
        print(who, "refused kill", type(e).__name__)
probe("server", SERVER)
parent = os.getppid()
print("the parent is the server", parent == SERVER)
if parent != SERVER:
    probe("launcher", parent)
print("modules", [m for m in sys.modules if m.startswith("fastgate")])
try:
    import fastgate
    print("IMPORTED fastgate")
except ImportError:
    print("refused import")
print("objects", any(type(o).__name__ == "ToolExecutor" for o in gc.get_objects()))
""".replace("SERVER", str(os.getpid()))
    result = await run(executor, code)
    assert result.ok, result.content
    out = result.value["stdout"].splitlines()
    refused = [
        *(f"refused {name}" for name in ("mem", "environ", "maps")),
        "process_vm_readv -1 1",  # EPERM
        "ptrace -1 1",
        "refused kill PermissionError",
    ]
    assert out[:6] == [f"server {line}" for line in refused]
    launched = supervision() != "process group"
    assert out[6] == f"the parent is the server {not launched}"
    probed = [f"launcher {line}" for line in refused] if launched else []
    assert out[7 : 7 + len(probed)] == probed
    assert out[7 + len(probed) :] == ["modules []", "refused import", "objects False"]


async def test_the_limits_cannot_be_raised(env: Env) -> None:
    executor = env.make(noop_tool(), code_mode=CodeMode(memory_mb=256, pool_size=1))
    code = """
import ctypes, os, resource, struct
print("uid", os.getuid())
for which in (resource.RLIMIT_AS, resource.RLIMIT_CPU, resource.RLIMIT_NOFILE):
    soft, hard = resource.getrlimit(which)
    try:
        resource.setrlimit(which, (hard + 1 if hard >= 0 else hard, resource.RLIM_INFINITY))
        print("RAISED", which)
    except (OSError, ValueError) as e:
        print("refused", which)
libc = ctypes.CDLL(None, use_errno=True)
new = ctypes.create_string_buffer(struct.pack("QQ", 2**63, 2**63))
print("prlimit", libc.prlimit(0, resource.RLIMIT_AS, new, None), ctypes.get_errno())
header = ctypes.create_string_buffer(struct.pack("Ii", 0x20080522, 0))
full = ctypes.create_string_buffer(b"\\xff" * 24)
print("capset", libc.capset(header, full), ctypes.get_errno())
print("as", resource.getrlimit(resource.RLIMIT_AS))
"""
    result = await run(executor, code)
    assert result.ok, result.content
    out = result.value["stdout"].splitlines()
    assert out[0] == "uid 0" or os.getuid() != 0
    assert out[1:4] == ["refused 9", "refused 0", "refused 7"]
    assert out[4] == "prlimit -1 1"
    assert out[5] == "capset -1 1"
    assert out[6] == f"as ({256 * 1024 * 1024}, {256 * 1024 * 1024})"


async def test_threads_still_work_but_no_process_can_be_made(env: Env) -> None:
    executor = env.make(noop_tool())
    code = """
import os, subprocess, threading
print("thread", await asyncio.to_thread(lambda: threading.current_thread().name != "MainThread"))
for name, attempt in (("fork", os.fork), ("spawn", lambda: subprocess.run(["/bin/true"])),
                      ("exec", lambda: os.execv("/bin/true", ["true"])),
                      ("posix_spawn", lambda: os.posix_spawn("/bin/true", ["true"], {}))):
    try:
        attempt()
        print("MADE", name)
    except OSError as e:
        print("refused", name, type(e).__name__)
"""
    result = await run(executor, code)
    assert result.ok, result.content
    assert result.value["stdout"].splitlines() == [
        "thread True",
        "refused fork PermissionError",
        "refused spawn PermissionError",
        "refused exec PermissionError",
        "refused posix_spawn PermissionError",
    ]


def test_the_sandbox_is_required_where_the_os_cannot_confine(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_sandbox, "landlock_abi", lambda: 0)
    with pytest.raises(SandboxUnavailable) as refused:
        env.make(noop_tool(), code_mode=CodeMode())
    message = str(refused.value)
    assert "cannot confine programs on this host" in message
    assert "Landlock is not available" in message
    assert "require_sandbox=False" in message
    monkeypatch.setattr(_sandbox, "seccomp_arch", lambda: None)
    with pytest.raises(SandboxUnavailable, match="no seccomp filter"):
        env.make(noop_tool(), code_mode=CodeMode())


async def test_without_the_sandbox_only_process_limits_hold(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_sandbox, "landlock_abi", lambda: 0)
    monkeypatch.setattr(_sandbox, "seccomp_arch", lambda: None)
    executor = env.make(noop_tool(), code_mode=CodeMode(require_sandbox=False, memory_mb=128))
    code = """
import os, resource
print(len(open("/etc/hostname").read()) > 0)
print(resource.getrlimit(resource.RLIMIT_AS)[0] // 2**20, os.getpgid(0) == os.getpid())
print(sorted(os.environ))
"""
    result = await run(executor, code)
    assert result.ok, result.content
    assert result.value["stdout"].splitlines() == [
        "True",  # no Landlock: the file system is open to it (the limits only)
        "128 True",
        "['HOME', 'LANG', 'MALLOC_ARENA_MAX', 'PATH', 'TMPDIR']",
    ]


async def test_a_worker_that_cannot_confine_itself_runs_nothing(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The worker is told to install a seccomp filter for an architecture there is none for: it
    # reports the layer it could not apply, and the run is refused before the program is sent.
    code_mode = CodeMode(pool_size=0)
    executor = env.make(noop_tool(), code_mode=code_mode)
    pool = code_mode._pool
    assert pool is not None
    monkeypatch.setattr(pool, "spec", pool.spec.__class__(256, 5, pool.spec.landlock_abi, "nope"))
    result = await run(executor, "print('ran')")
    assert result.error is not None and result.error.code == ErrorCode.TOOL_ERROR
    assert "ran" not in result.content


# -- the server's shared state, against a server without capabilities ---------------------------

REPO = Path(__file__).resolve().parents[2]
# Each attempt prints "<name> refused" (EPERM) or "<name> ALLOWED ...".
ATTEMPT = """
import ctypes, errno, fcntl, os, platform, signal, struct
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.shmat.restype = ctypes.c_void_p
libc.shmat.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_int)
libc.shmdt.argtypes = (ctypes.c_void_p,)
NR = {"x86_64": {"sched_setattr": 314, "ioprio_set": 251},
      "aarch64": {"sched_setattr": 274, "ioprio_set": 30}}[platform.machine()]
server = SERVER_PID
def attempt(name, call):
    try:
        value = call()
    except OSError as e:
        print(name, "refused" if e.errno == errno.EPERM else f"ALLOWED error {e.errno}")
        return None
    print(name, f"ALLOWED {value}")
    return value
def raw(name, call):
    value = call()
    if value == -1 or value == ctypes.c_void_p(-1).value:
        code = ctypes.get_errno()
        print(name, "refused" if code == errno.EPERM else f"ALLOWED error {code}")
        return None
    print(name, f"ALLOWED {value}")
    return value
"""
IPC_ATTACK = """
raw("shmget", lambda: libc.shmget(IPC_KEY, 0, 0))
address = raw("shmat", lambda: libc.shmat(SHM_ID, None, 0))
if address is not None:
    ctypes.memmove(address, b"PWNED", 5)
    libc.shmdt(address)
raw("shmctl", lambda: libc.shmctl(SHM_ID, 0, None))  # IPC_RMID
created = raw("shmget private", lambda: libc.shmget(0, 4096, 0o1000 | 0o600))
if created is not None:
    libc.shmctl(created, 0, None)
raw("semget", lambda: libc.semget(IPC_KEY, 0, 0))
take = (ctypes.c_short * 3)(0, -1, 0o4000)  # sem_num, sem_op, IPC_NOWAIT
raw("semop", lambda: libc.semop(SEM_ID, take, 1))
raw("semtimedop", lambda: libc.semtimedop(SEM_ID, take, 1, None))
raw("semctl", lambda: libc.semctl(SEM_ID, 0, 16, 0))  # SETVAL
raw("msgget", lambda: libc.msgget(IPC_KEY, 0))
message = ctypes.create_string_buffer(struct.pack("l", 1) + b"PWNED")
raw("msgsnd", lambda: libc.msgsnd(MSG_ID, message, 5, 0o4000))
raw("msgrcv", lambda: libc.msgrcv(MSG_ID, message, 5, 0, 0o4000))
name = b"/fastgate-probe"
queue = raw("mq_open", lambda: libc.mq_open(name, os.O_CREAT | os.O_RDWR, 0o600, None))
if queue is not None:
    libc.mq_unlink(name)
"""
SCHEDULING_ATTACK = """
attempt("sched_setaffinity", lambda: os.sched_setaffinity(server, {0}))
attempt("setpriority", lambda: os.setpriority(os.PRIO_PROCESS, server, 19))
attempt("setpriority group", lambda: os.setpriority(os.PRIO_PGRP, os.getpgid(server), 19))
# A user with no process at all: refused, not "no such process" (PRIO_USER would reach every
# process of the server's user, the server included).
attempt("setpriority user", lambda: os.setpriority(os.PRIO_USER, 3999999, 19))
idle = os.sched_param(0)
attempt("sched_setscheduler", lambda: os.sched_setscheduler(server, os.SCHED_IDLE, idle))
attempt("sched_setparam", lambda: os.sched_setparam(server, os.sched_param(0)))
attr = ctypes.create_string_buffer(struct.pack("IIQiIQQQ", 48, 3, 0, 10, 0, 0, 0, 0))
raw("sched_setattr", lambda: libc.syscall(NR["sched_setattr"], server, attr, 0))
raw("ioprio_set", lambda: libc.syscall(NR["ioprio_set"], 1, server, 3 << 13))
# Its own process it may still tune.
os.setpriority(os.PRIO_PROCESS, 0, 5)
os.sched_setaffinity(0, os.sched_getaffinity(0))
print("own nice", os.getpriority(os.PRIO_PROCESS, 0))
"""
SIGNAL_ATTACK = """
def asynchronous(fd):
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_ASYNC)
owned = {}
for name, owner in (
    ("F_SETOWN", lambda fd: fcntl.fcntl(fd, fcntl.F_SETOWN, server)),
    ("F_SETOWN group", lambda fd: fcntl.fcntl(fd, fcntl.F_SETOWN, -os.getpgid(server))),
    ("F_SETOWN_EX", lambda fd: fcntl.fcntl(fd, 15, struct.pack("ii", 1, server))),
    ("FIOSETOWN", lambda fd: fcntl.ioctl(fd, 0x8901, struct.pack("i", server))),
):
    r, w = os.pipe()
    attempt(name, lambda: owner(r))
    attempt(name + " F_SETSIG", lambda: fcntl.fcntl(r, 10, signal.SIGUSR1))
    asynchronous(r)
    os.write(w, b"x")  # readable: the owner would be signalled now
channel = 3
attempt("channel F_SETOWN", lambda: fcntl.fcntl(channel, fcntl.F_SETOWN, server))
attempt("channel SIOCSPGRP", lambda: fcntl.ioctl(channel, 0x8902, struct.pack("i", server)))
asynchronous(channel)
await tools.noop()  # its reply arrives on the channel: the owner would be signalled now
"""
ABIS = [None, 5, 1]  # the machine's Landlock, then as on kernels without signal scoping


def _without_capabilities() -> None:
    """In the server's child before exec: an empty bounding set, so that even as root the
    interpreter starts with no capability at all."""
    _sandbox.drop_capabilities(_sandbox._libc())


def run_server(code: str, landlock_abi: int | None) -> dict[str, Any]:
    """Run ``code`` in code mode on a server without capabilities (``tests/codemode_server``);
    its report, after checking it had none."""
    request = {"code": code, "key": 0x46470000 + os.getpid() % 0xFFFF, "landlock_abi": landlock_abi}
    done = subprocess.run(
        [sys.executable, "-m", "tests.codemode_server"],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        start_new_session=True,  # its own group: a renice of "its group" is of it alone
        preexec_fn=_without_capabilities if os.getuid() == 0 else None,
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    assert set(report["capabilities"].values()) == {"0000000000000000"}, report["capabilities"]
    return report


def refusals(report: dict[str, Any]) -> list[str]:
    """The program's attempts (every line but those about its own process)."""
    lines = report["output"].splitlines()
    assert lines and not lines[0].startswith("FAILED"), report["output"]
    return [line for line in lines if not line.startswith("own ")]


@pytest.mark.parametrize("abi", ABIS)
def test_no_system_v_ipc_or_message_queue_is_shared_with_the_server(abi: int | None) -> None:
    report = run_server(ATTEMPT + IPC_ATTACK, abi)
    attempts = refusals(report)
    assert len(attempts) == 12 and all(line.endswith(" refused") for line in attempts), attempts
    before, after = report["before"], report["after"]
    assert after["segment"] == before["segment"] and after["segment_key_alive"]
    assert after["semaphore"] == before["semaphore"] == 1
    assert after["messages"] == ["the server's message"]  # nothing taken, nothing added


@pytest.mark.parametrize("abi", ABIS)
def test_the_servers_scheduling_is_out_of_reach(abi: int | None) -> None:
    report = run_server(ATTEMPT + SCHEDULING_ATTACK, abi)
    attempts = refusals(report)
    assert len(attempts) == 8 and all(line.endswith(" refused") for line in attempts), attempts
    assert "own nice 5" in report["output"]  # its own process it may tune
    before, after = report["before"], report["after"]
    for field in ("affinity", "nice", "scheduler", "ioprio"):
        assert after[field] == before[field], field
    if (os.cpu_count() or 1) > 1:  # else the attack could not have shown
        assert len(after["affinity"]) > 1


@pytest.mark.parametrize("abi", ABIS)
def test_no_descriptor_signals_the_server(abi: int | None) -> None:
    report = run_server(ATTEMPT + SIGNAL_ATTACK, abi)
    attempts = refusals(report)
    assert len(attempts) == 10 and all(line.endswith(" refused") for line in attempts), attempts
    assert report["after"]["signals"] == {} and report["after"]["pending"] == []
