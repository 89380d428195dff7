"""Confinement beyond Landlock's paths, each tested from inside a program: no Python package of
the base interpreter is readable (its standard library is); no file's metadata can be changed or
its extended attributes read (a channel between runs), anywhere, the scratch directory
included; no watch on a directory (inotify, fanotify, dnotify); and no line of the tool channel
is decoded past the per-line limit."""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

import pytest

from fastgate import ErrorCode
from fastgate.codemode import CodeMode, _pool, _sandbox
from tests.codemode_kit import (
    Env,
    env_fixture,  # noqa: F401  (the fixture "env")
    noop_tool,
    run,
    value_tool,
)

pytestmark = pytest.mark.skipif(
    bool(_sandbox.missing()), reason="the worker's confinement needs Landlock and seccomp"
)

# A program's attempts, each printed as "<what> ok" or "<what> refused <errno name>".
ATTEMPT = """
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
def attempt(what, call):
    try:
        call()
        print(what, "ok")
    except OSError as e:
        print(what, "refused", errno.errorcode.get(e.errno, e.errno))
def raw(what, number, *args):
    def call():
        if libc.syscall(ctypes.c_long(number), *args) < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
    attempt(what, call)
"""


def outcomes(out: str) -> dict[str, str]:
    lines = [line.split(" ", 1) for line in out.splitlines() if " " in line]
    return {what: rest for what, rest in lines}


def base_site_packages() -> str | None:
    """The base interpreter's site-packages (the worker's interpreter), when it holds any."""
    paths = sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_prefix})
    purelib = paths["purelib"]
    try:
        entries = [e for e in os.listdir(purelib) if e.endswith(".py") or "." not in e]
    except OSError:
        return None
    return purelib if entries else None


def a_package(site: str) -> str:
    return sorted(e for e in os.listdir(site) if os.path.isdir(os.path.join(site, e)))[0]


async def test_the_base_interpreters_packages_are_not_readable(env: Env) -> None:
    site = base_site_packages()
    if site is None:
        pytest.skip("the base interpreter has no site-packages to hide")
    package = a_package(site)
    executor = env.make(noop_tool())
    code = (
        ATTEMPT
        + f"""
import importlib, json, sys, sysconfig
site = {site!r}
attempt("listdir", lambda: os.listdir(site))
attempt("scandir", lambda: list(os.scandir(site)))
attempt("listdir-package", lambda: os.listdir(os.path.join(site, {package!r})))
attempt("listdir-parent", lambda: os.listdir(os.path.dirname(os.path.dirname(site))))
attempt("open-fd", lambda: os.close(os.open(site, os.O_RDONLY)))
sys.path.append(site)
try:
    importlib.import_module({package!r})
    print("import ok")
except ImportError as e:
    print("import refused", type(e).__name__)
print("stdlib", json.dumps([1]), len(open(os.__file__).read()) > 0,
      sysconfig.get_paths()["purelib"] == site)
"""
    )
    result = await run(executor, code)
    assert result.ok, result.content
    out = result.value["stdout"]
    seen = outcomes(out)
    for what in ("listdir", "scandir", "listdir-package", "listdir-parent", "open-fd"):
        assert seen[what] == "refused EACCES", out
    assert seen["import"].startswith("refused"), out
    assert "stdlib [1] True True" in out, out


def test_no_library_grant_holds_python_packages() -> None:
    """What the worker may read, computed here: no directory holding packages is granted."""
    site = base_site_packages()
    for path in _sandbox.interpreter_paths():
        name = os.path.basename(path)
        assert name not in ("site-packages", "dist-packages"), path
        if os.path.isdir(path):
            for entry in os.listdir(path):
                assert entry not in ("site-packages", "dist-packages"), path
        if site is not None:
            assert not site.startswith(path.rstrip("/") + "/"), path


async def test_no_file_metadata_can_be_changed_or_read(env: Env, tmp_path: Path) -> None:
    target = env.workspace / "target.txt"
    target.write_text("data")
    os.chmod(target, 0o600)
    os.utime(target, (1_000_000, 1_000_000))
    other = tmp_path / "fastgate-code-other"  # as another run's scratch directory
    other.mkdir(mode=0o700)
    before = [
        (os.stat(p).st_mode, os.stat(p).st_mtime_ns, os.stat(p).st_uid) for p in (target, other)
    ]
    executor = env.make(noop_tool())
    code = (
        ATTEMPT
        + f"""
import fcntl, struct
for where, path in (("out", {str(target)!r}), ("dir", {str(other)!r}), ("own", "mine.txt")):
    if where == "own":
        open(path, "w").write("x")
    p = path.encode()
    attempt(where + "-chmod", lambda: os.chmod(path, 0o777))
    attempt(where + "-lchmod", lambda: os.chmod(path, 0o777, follow_symlinks=False))
    attempt(where + "-chown", lambda: os.chown(path, 0, 0))
    attempt(where + "-lchown", lambda: os.lchown(path, 0, 0))
    attempt(where + "-utime", lambda: os.utime(path, (0, 0)))
    attempt(where + "-lutime", lambda: os.utime(path, (0, 0), follow_symlinks=False))
    attempt(where + "-setxattr", lambda: os.setxattr(path, "user.note", b"run 1"))
    attempt(where + "-getxattr", lambda: os.getxattr(path, "user.note"))
    attempt(where + "-listxattr", lambda: os.listxattr(path))
    attempt(where + "-removexattr", lambda: os.removexattr(path, "user.note"))
    raw(where + "-fchmodat2", 452, -100, p, 0o777, 0)
    raw(where + "-setxattrat", 463, -100, p, 0, b"user.note", None, 0)
    raw(where + "-getxattrat", 464, -100, p, 0, b"user.note", None, 0)
    raw(where + "-listxattrat", 465, -100, p, 0, None, 0)
    raw(where + "-removexattrat", 466, -100, p, 0, b"user.note")
    raw(where + "-file_getattr", 468, -100, p, None, 0, 0)
    raw(where + "-file_setattr", 469, -100, p, None, 0, 0)
fd = os.open("mine.txt", os.O_RDWR)
attempt("fd-fchmod", lambda: os.chmod(fd, 0o777))
attempt("fd-fchown", lambda: os.chown(fd, 0, 0))
attempt("fd-futimens", lambda: os.utime(fd, (0, 0)))
attempt("fd-fsetxattr", lambda: os.setxattr(fd, "user.note", b"run 1"))
attempt("fd-fgetxattr", lambda: os.getxattr(fd, "user.note"))
attempt("fd-flistxattr", lambda: os.listxattr(fd))
attempt("fd-fremovexattr", lambda: os.removexattr(fd, "user.note"))
flags = bytearray(8)
attempt("fd-getflags", lambda: fcntl.ioctl(fd, 0x80086601, flags))
attempt("fd-setflags", lambda: fcntl.ioctl(fd, 0x40086602, bytes(8)))
attempt("fd-fsgetxattr", lambda: fcntl.ioctl(fd, 0x801C581F, bytearray(28)))
attempt("fd-lease", lambda: fcntl.fcntl(fd, 1024, fcntl.F_RDLCK))
raw("fd-name_to_handle_at", {_name_to_handle_at()}, -100, b"mine.txt", None, None, 0)
print("scratch", oct(os.stat(".").st_mode & 0o777), os.stat("mine.txt").st_size)
"""
    )
    result = await run(executor, code)
    assert result.ok, result.content
    out = result.value["stdout"]
    seen = outcomes(out)
    attempts = {what: rest for what, rest in seen.items() if what != "scratch"}
    assert len(attempts) == 3 * 17 + 12, out
    assert all(rest == "refused EPERM" for rest in attempts.values()), out
    assert "scratch 0o700 1" in out, out  # private to its run; it still writes its files
    after = [
        (os.stat(p).st_mode, os.stat(p).st_mtime_ns, os.stat(p).st_uid) for p in (target, other)
    ]
    assert after == before
    assert os.listxattr(target) == [] and os.listxattr(other) == []


def _name_to_handle_at() -> int:
    return {"x86_64": 303, "aarch64": 264}[os.uname().machine]


async def test_no_data_passes_between_runs_through_attributes(env: Env, tmp_path: Path) -> None:
    """Two workers of one pool: what the first leaves on a file the second cannot find. (Only
    files of this test are aimed at: without the filter, these calls would succeed.)"""
    target = env.workspace / "stash.txt"
    target.write_text("data")
    folder = tmp_path / "shared"
    folder.mkdir()
    executor = env.make(noop_tool(), code_mode=CodeMode(pool_size=2))
    first = (
        ATTEMPT
        + f"""
for where, path in (("file", {str(target)!r}), ("dir", {str(folder)!r})):
    attempt(where + "-set", lambda: os.setxattr(path, "user.stash", b"API_KEY=abc"))
    attempt(where + "-chmod", lambda: os.chmod(path, 0o640))
    attempt(where + "-utime", lambda: os.utime(path, (7, 7)))
"""
    )
    second = (
        ATTEMPT
        + f"""
for where, path in (("file", {str(target)!r}), ("dir", {str(folder)!r})):
    attempt(where + "-get", lambda: os.getxattr(path, "user.stash"))
    attempt(where + "-list", lambda: os.listxattr(path))
"""
    )
    before = [os.stat(p) for p in (target, folder)]
    for code in (first, second):
        result = await run(executor, code)
        assert result.ok, result.content
        seen = outcomes(result.value["stdout"])
        assert seen and all(rest == "refused EPERM" for rest in seen.values()), seen
    assert os.listxattr(target) == [] and os.listxattr(folder) == []
    after = [os.stat(p) for p in (target, folder)]
    assert [(st.st_mode, st.st_mtime_ns) for st in after] == [
        (st.st_mode, st.st_mtime_ns) for st in before
    ]


async def test_no_directory_can_be_watched(env: Env) -> None:
    executor = env.make(noop_tool())
    numbers = {
        "x86_64": {
            "inotify_init": 253,
            "inotify_init1": 294,
            "inotify_add_watch": 254,
            "inotify_rm_watch": 255,
            "fanotify_init": 300,
            "fanotify_mark": 301,
        },
        "aarch64": {
            "inotify_init1": 26,
            "inotify_add_watch": 27,
            "inotify_rm_watch": 28,
            "fanotify_init": 262,
            "fanotify_mark": 263,
        },
    }[os.uname().machine]
    code = (
        ATTEMPT
        + f"""
import fcntl
numbers = {numbers!r}
if "inotify_init" in numbers:
    raw("inotify_init", numbers["inotify_init"])
raw("inotify_init1", numbers["inotify_init1"], 0)
raw("inotify_init1-nonblock", numbers["inotify_init1"], os.O_NONBLOCK)
raw("inotify_add_watch", numbers["inotify_add_watch"], 0, b"/tmp", 0x100)
raw("inotify_rm_watch", numbers["inotify_rm_watch"], 0, 1)
raw("fanotify_init", numbers["fanotify_init"], 0x200, 0)  # FAN_REPORT_FID: unprivileged
raw("fanotify_mark", numbers["fanotify_mark"], 0, 1, 0x100, -100, b"/tmp")
attempt("libc-inotify", lambda: (_ for _ in ()).throw(OSError(ctypes.get_errno(), ""))
        if libc.inotify_init1(0) < 0 else None)
import json
for where, path in (("stdlib", os.path.dirname(json.__file__)), ("scratch", ".")):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    attempt("dnotify-" + where, lambda: fcntl.fcntl(fd, fcntl.F_NOTIFY, fcntl.DN_CREATE))
"""
    )
    result = await run(executor, code)
    assert result.ok, result.content
    out = result.value["stdout"]
    seen = outcomes(out)
    assert len(seen) == len(numbers) + 4, out
    assert all(rest == "refused EPERM" for rest in seen.values()), out


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_every_refused_call_has_a_number_on_both_architectures(arch: str) -> None:
    """The filter is built for both (a name missing from a table would pass unseen)."""
    code = _sandbox.seccomp_filter(arch, 1234)
    assert len(code) % 8 == 0 and len(code) // 8 < 4096
    numbers = _sandbox._METADATA_NUMBERS[arch]
    for name in _sandbox._METADATA:
        assert name in numbers or (arch == "aarch64" and name in _sandbox._NOT_ON_AARCH64)


# -- the size of one line of the tool channel -----------------------------------------------


async def test_a_call_past_the_line_limit_is_refused_before_it_is_sent(env: Env) -> None:
    executor = env.make(value_tool())
    limit = _pool.MAX_MESSAGE_BYTES
    code = f"""
for label, size in (("small", 1 << 20), ("large", {limit}), ("huge", {limit} * 3)):
    try:
        value = await tools.value(n=1, kind="x" * size)
        print(label, "ok", value["n"])
    except ToolCallError as e:
        print(label, "refused", e.code, str(e)[:120])
print("still running", (await tools.value(n=2))["n"])
"""
    result = await run(executor, code)
    assert result.ok, result.content
    out = result.value["stdout"]
    assert "small ok 1" in out, out
    assert "large refused INVALID_ARGS" in out and "huge refused INVALID_ARGS" in out, out
    assert "a call carries at most 4 MiB" in out, out
    assert "still running 2" in out, out


@pytest.mark.parametrize(
    "how",
    ["one line", "in pieces", "after a good call", "no newline"],
)
async def test_a_line_past_the_limit_written_raw_stops_the_program(env: Env, how: str) -> None:
    """Written past the worker's check: the server refuses it before decoding any of it."""
    executor = env.make(value_tool())
    size = _pool.MAX_MESSAGE_BYTES + (1 << 20)
    code = f"""
import os, socket
how = {how!r}
big = b'{{"t":"call","id":9,"name":"value","args":{{"n":1,"kind":"' + b"x" * {size} + b'"}}}}'
channel = socket.socket(fileno=3)
if how == "one line":
    channel.sendall(big + b"\\n")
elif how == "in pieces":
    for start in range(0, len(big), 1 << 20):
        channel.sendall(big[start:start + (1 << 20)])
    channel.sendall(b"\\n")
elif how == "after a good call":
    channel.sendall(b'{{"t":"call","id":8,"name":"value","args":{{"n":1}}}}\\n' + big + b"\\n")
else:
    channel.sendall(big)
channel.recv(1 << 20)
await asyncio.sleep(30)
"""
    result = await run(executor, code)
    assert result.error is not None and result.error.code == ErrorCode.TOOL_FAILURE, how
    assert "it sent a message larger than 4 MiB" in result.content, result.content
    assert result.error.details["reason"] == "protocol"
