"""The launcher: the parent of one command, and the reaper of every process it starts (Linux).

Run as ``python -I -S -B _launcher.py [--plan FD] GRACE_MS CONTROL_FD REPORT_FD EXECUTABLE
ARG0 [ARG...]`` (standard library only: it never imports fastgate), or as its compiled twin
``fastgate-launcher`` (``_launcher.c``, the same program, started in about a millisecond).

It makes itself a child subreaper and not dumpable (no process of its user may ptrace it or
read its ``/proc`` files), then forks the command (in a session of its own, killed
should the launcher die) and execs it with the launcher's own environment. Every process the
command starts stays a descendant of the launcher however it detaches (``setsid``, a double
fork, ``nohup ... &``): an orphan is re-parented to the nearest subreaper, this one, never to
init. When the command exits, or the parent asks, every descendant gets SIGTERM (and SIGCONT,
so a stopped one sees it), then SIGKILL after the grace, searched again until none is left
(a process forked meanwhile is re-parented here when its parent dies), and each is reaped
before the launcher exits. Descendants are found through each process's parent in
``/proc/<pid>/stat``.

Protocol. REPORT_FD (written by the launcher, one line each)::

    P <pid>            the command's first process was made (the id of its process group)
    S <pid>            the command runs (its exec succeeded)
    E <errno>          it could not be started; the launcher exits
    F <step> <errno>   a step of the plan failed (its index); nothing was started
    X <status>         the command ended: its exit code, or minus the signal that killed it
    Z 0                every process of the command has ended (the launcher cleans up, exits)
    B <bound>          a bound of the plan was reached (processes, tmp): everything is ended
    L <count>          that many processes could not be ended (the launcher may not signal them)

CONTROL_FD (read by the launcher): a line ``T <grace_ms>`` asks it to end everything with
that grace; the end of the pipe (the parent let go of it, or died) asks the same with
GRACE_MS. SIGTERM, SIGINT, SIGHUP and SIGQUIT sent to the launcher do too. Neither descriptor
is passed on to the command.

The plan (``--plan FD``: ``_plan.py`` encodes it) is a list of system calls that confine the
command; they are made in order. The launcher makes steps 1-9 itself: it takes shared locks on
directories where placeholders are made (empty, mode 0, covering protected paths that do not
exist yet; each is removed at the end by the last launcher holding its directory), notes trees
to remove at the end and bounds to watch. With ``NAMESPACES``, the command gets an init: the
first process of new user, mount, pid (and ipc, net) namespaces. It maps its user to itself,
makes the steps 10-29 (the command's file system: every mount read-only, the roots writable,
a private ``/tmp``, protected paths read-only, hidden ones covered; a fresh ``/proc``; the
loopback and the proxy's listener), then forks the command, reaps every orphan of the
namespace, and ends them all once the command exits (or a bound is reached); when it dies, the
kernel kills whatever is left. The command makes steps 30-39 before its exec (directory,
limits, Landlock, capabilities, seccomp) and tells the launcher it is about to exec on a
socket whose credentials carry its pid as the launcher sees it.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import select
import socket
import struct
import sys
import time

_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_CAPBSET_DROP = 24
_PR_SET_SECCOMP = 22
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_NO_NEW_PRIVS = 38
_PR_CAP_AMBIENT = 47
_GIVE_UP = 2.0  # after the first SIGKILL: how long the killed may take to die
_RESCAN_MS = 10  # while killing: how often to look for processes forked meanwhile
_WATCH_MS = 100  # how often the bounds (processes, temporary bytes) are read
_signal = __import__("_signal")  # not ``signal``: its enums cost as much as the rest of the start
_STOPS = (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP, _signal.SIGQUIT)

# System calls newer than ctypes knows; the same numbers on every architecture.
_NR_OPEN_TREE = 428
_NR_MOVE_MOUNT = 429
_NR_MOUNT_SETATTR = 442
_NR_LANDLOCK_CREATE_RULESET = 444
_NR_LANDLOCK_ADD_RULE = 445
_NR_LANDLOCK_RESTRICT_SELF = 446
_NR_CAPSET = {"x86_64": 126, "aarch64": 91}
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWPID = 0x20000000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_BIND, _MS_REC, _MS_PRIVATE = 2, 4, 8, 4096, 16384, 1 << 18
_AT_FDCWD, _AT_EMPTY_PATH, _AT_RECURSIVE = -100, 0x1000, 0x8000
_ATTR_RDONLY, _ATTR_NOSUID, _ATTR_NODEV = 1, 2, 4
_OPEN_TREE_CLONE, _MOVE_MOUNT_F_EMPTY_PATH = 1, 4
_BIND_RECURSIVE, _BIND_READONLY, _BIND_OPTIONAL, _BIND_DEVICES = 1, 2, 4, 8
# Rights that apply to a file in a Landlock path rule: EXECUTE, WRITE_FILE, READ_FILE,
# TRUNCATE, IOCTL_DEV.
_LANDLOCK_FILE_RIGHTS = (1 << 0) | (1 << 1) | (1 << 2) | (1 << 14) | (1 << 15)
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 1
# The guard of the launcher and its parent (see ``_guard_supervisors``): per architecture, its
# seccomp value and the numbers of kill, tkill, tgkill, rt_sigqueueinfo, rt_tgsigqueueinfo and
# pidfd_open.
_GUARDED_CALLS = {
    "x86_64": (0xC000003E, (62, 200, 234, 129, 297, 434)),
    "aarch64": (0xC00000B7, (129, 130, 131, 138, 240, 434)),
}
_launcher_parent = 0  # who started this launcher: the resident, or the server


def _report(fd: int, kind: str, value: object) -> None:
    try:
        os.write(fd, f"{kind} {value}\n".encode())
    except OSError:
        pass  # the parent is gone: ending everything goes on


def _parent_of(name: str) -> int | None:
    """The parent of ``/proc/<name>``: after the last ``)`` of its stat line (the name before
    it may hold spaces and parentheses), the state, then the parent's pid."""
    try:
        with open(f"/proc/{name}/stat", "rb") as file:
            line = file.read(512)
        return int(line[line.rindex(b")") + 2 :].split(b" ", 2)[1])
    except (OSError, ValueError, IndexError):
        return None  # gone meanwhile


def descendants() -> list[int]:
    """Every live or unreaped descendant of this process."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            parent = _parent_of(name)
            if parent is not None:
                children.setdefault(parent, []).append(int(name))
    found: list[int] = []
    seen = {os.getpid()}
    todo = [os.getpid()]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in seen:  # a pid reused during the scan cannot make a loop
                seen.add(child)
                found.append(child)
                todo.append(child)
    return found


def _signal_all(sig: int, command: int, command_done: bool, plan: _Plan) -> tuple[int, int]:
    """Send ``sig`` to every descendant (and the command and its group by pid, while it is
    unreaped: reached even where /proc cannot be read); return how many were found and how
    many may not be signalled from here. With namespaces, only the command's init is: it ends
    the rest, and its death kills them."""
    if plan.namespaces:
        if command_done:
            return 0, 0
        _kill(command, sig)
        return 1, 0
    if not command_done:
        for target in (-command, command):
            _kill(target, sig)
    found = descendants()
    refused = 0
    for pid in found:
        try:
            os.kill(pid, sig)
            if sig == _signal.SIGTERM:
                os.kill(pid, _signal.SIGCONT)  # a stopped process gets it too
        except PermissionError:
            refused += 1
        except OSError:
            pass
    return len(found), refused


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except OSError:
        pass


def _environment() -> dict[bytes, bytes]:
    """The environment this process was started with, as the kernel holds it: the command gets
    exactly that (the interpreter may have added to its own, e.g. a coerced locale)."""
    with open("/proc/self/environ", "rb") as file:
        entries = file.read().split(b"\0")
    return dict(entry.split(b"=", 1) for entry in entries if b"=" in entry)


# -- the plan -------------------------------------------------------------------------------


class _StepFailed(Exception):
    def __init__(self, index: int, code: int) -> None:
        super().__init__(index, code)
        self.index = index
        self.code = code


class _Plan:
    """The plan's steps, and what they set up that outlives their step."""

    def __init__(self, steps: list[tuple[int, list[bytes]]]) -> None:
        self.steps = steps
        self.locks: list[int] = []
        self.placeholders: list[tuple[int, str, str]] = []  # (directory fd, name, kind)
        self.remove_after: list[bytes] = []
        self.holds: list[int] = []
        self.namespaces = 0
        self.watch_tasks = 0
        self.watch_tree: bytes | None = None
        self.watch_tree_bytes = 0
        self.watch_statfs: bytes | None = None
        self.ruleset = -1
        self.masks: set[str] = set()
        self.libc: ctypes.CDLL | None = None
        self.gone = -1  # the init's end of the pipe that says every process is gone

    def run(self, low: int, high: int) -> None:
        """Make the steps whose operation is in ``[low, high)``; ``_StepFailed`` names the
        first that fails."""
        for index, (op, args) in enumerate(self.steps):
            if low <= op < high:
                try:
                    _STEPS[op](self, args)
                except OSError as exc:
                    raise _StepFailed(index, exc.errno or 0) from None

    def index_of(self, op: int) -> int:
        return next((i for i, (o, _) in enumerate(self.steps) if o == op), -1)

    def channel_fds(self) -> list[int]:
        return [int(args[1]) for op, args in self.steps if op == 22]

    @property
    def c(self) -> ctypes.CDLL:
        if self.libc is None:
            self.libc = ctypes.CDLL(None, use_errno=True)
            self.libc.syscall.restype = ctypes.c_long
        return self.libc

    def call(self, result: int) -> int:
        if result < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
        return result

    def watching(self) -> bool:
        return bool(self.watch_tasks or self.watch_statfs or self.watch_tree)

    def cleanup(self) -> None:
        """Placeholders go when no other launcher holds their directory and they are still
        placeholders (empty, mode 0); trees noted for it go."""
        for fd, name, kind in self.placeholders:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if st.st_mode & 0o7777 == 0:
                    if kind == "d" and _is_dir(st.st_mode):
                        os.rmdir(name, dir_fd=fd)
                    elif kind == "f" and st.st_mode & 0o170000 == 0o100000 and not st.st_size:
                        os.unlink(name, dir_fd=fd)
                elif kind == "c" and is_commondir_placeholder(fd, name):
                    os.unlink(name, dir_fd=fd)
            except OSError:
                pass
            fcntl.flock(fd, fcntl.LOCK_SH)
        for path in self.remove_after:
            _remove_tree(path)


def _is_dir(mode: int) -> bool:
    return mode & 0o170000 == 0o040000


def _remove_tree(path: bytes) -> None:
    try:
        entries = list(os.scandir(path))
    except OSError:
        entries = []
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            _remove_tree(entry.path)
        else:
            try:
                os.unlink(entry.path)
            except OSError:
                pass
    try:
        os.rmdir(path)
    except OSError:
        pass


def _read_plan(fd: int) -> _Plan:
    chunks = []
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(fd)
    data = b"".join(chunks)
    if not data.startswith(b"FGP1"):
        raise OSError(22, "not a plan")
    steps: list[tuple[int, list[bytes]]] = []
    at = 4
    try:
        while at < len(data):
            op, argc = struct.unpack_from("=II", data, at)
            at += 8
            args = []
            for _ in range(argc):
                (length,) = struct.unpack_from("=I", data, at)
                at += 4
                args.append(data[at : at + length])
                at += length + 1
            steps.append((op, args))
    except struct.error:
        raise OSError(22, "a malformed plan") from None
    return _Plan(steps)


def _num(args: list[bytes], index: int) -> int:
    return int(args[index], 0) if index < len(args) else 0


def _lock(plan: _Plan, args: list[bytes]) -> None:
    fd = os.open(args[0], os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    fcntl.flock(fd, fcntl.LOCK_SH)
    plan.locks.append(fd)


#: A git directory's absent ``commondir`` is covered by one naming the directory itself (git
#: reads it as it reads none; mounted read-only, nobody can replace it).
COMMONDIR_TEXT = b".\n"
COMMONDIR_MODE = 0o444


def is_commondir_placeholder(dir_fd: int | None, name: str) -> bool:
    """Still the ``commondir`` placeholder: a regular file of that mode holding exactly its
    text."""
    try:
        fd = os.open(
            name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd
        )
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        return (
            st.st_mode & 0o170000 == 0o100000
            and st.st_mode & 0o7777 == COMMONDIR_MODE
            and st.st_size == len(COMMONDIR_TEXT)
            and os.read(fd, 16) == COMMONDIR_TEXT
        )
    except OSError:
        return False
    finally:
        os.close(fd)


def _placeholder(plan: _Plan, args: list[bytes]) -> None:
    kind, fd, name = args[0].decode(), plan.locks[_num(args, 1)], os.fsdecode(args[2])
    try:
        if kind == "d":
            os.mkdir(name, 0, dir_fd=fd)
        elif kind == "c":
            flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW
            made = os.open(name, flags, COMMONDIR_MODE, dir_fd=fd)
            try:
                os.write(made, COMMONDIR_TEXT)
                os.fchmod(made, COMMONDIR_MODE)  # whatever the umask
            finally:
                os.close(made)
        else:
            flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW
            os.close(os.open(name, flags, 0, dir_fd=fd))
    except FileExistsError:
        pass
    plan.placeholders.append((fd, name, kind))


def _remove_after(plan: _Plan, args: list[bytes]) -> None:
    plan.remove_after.append(args[0])


def _namespaces(plan: _Plan, args: list[bytes]) -> None:
    # The command's init ends every process of its pid namespace (kill(-1, ...)): without a
    # pid namespace of its own that would be every process of the user, so it is refused.
    flags = _num(args, 0)
    if not flags & _CLONE_NEWPID:
        raise OSError(22, "namespaces without a pid namespace")
    plan.namespaces = flags


def _watch_tasks(plan: _Plan, args: list[bytes]) -> None:
    plan.watch_tasks = _num(args, 0)


def _watch_tree(plan: _Plan, args: list[bytes]) -> None:
    plan.watch_tree = args[0]
    plan.watch_tree_bytes = _num(args, 1)


def _watch(plan: _Plan, args: list[bytes]) -> None:
    plan.watch_tasks = _num(args, 0)
    plan.watch_statfs = args[1] if len(args) > 1 and args[1] else None


def _mount_attr(plan: _Plan, fd: int, path: bytes, flags: int, set_: int, clear: int) -> None:
    attr = ctypes.create_string_buffer(struct.pack("=QQQQ", set_, clear, 0, 0), 32)
    plan.call(
        plan.c.syscall(
            ctypes.c_long(_NR_MOUNT_SETATTR),
            ctypes.c_int(fd),
            ctypes.c_char_p(path),
            ctypes.c_uint(flags),
            attr,
            ctypes.c_size_t(32),
        )
    )


def _mount(plan: _Plan, source: bytes | None, target: bytes, fstype: bytes | None, flags: int,
           data: bytes | None = None) -> None:  # fmt: skip
    plan.call(plan.c.mount(source, target, fstype, ctypes.c_ulong(flags), data))


def _private(plan: _Plan, args: list[bytes]) -> None:
    _mount(plan, None, b"/", None, _MS_REC | _MS_PRIVATE)


def _hold(plan: _Plan, args: list[bytes]) -> None:
    fd = plan.c.syscall(
        ctypes.c_long(_NR_OPEN_TREE),
        ctypes.c_int(_AT_FDCWD),
        ctypes.c_char_p(args[0]),
        ctypes.c_uint(_OPEN_TREE_CLONE | os.O_CLOEXEC | _AT_RECURSIVE),
    )
    if fd < 0 and ctypes.get_errno() != 2:
        plan.call(-1)
    plan.holds.append(int(fd))


def _seal(plan: _Plan, args: list[bytes]) -> None:
    _mount_attr(
        plan, _AT_FDCWD, args[0], _AT_RECURSIVE, _ATTR_RDONLY | _ATTR_NOSUID | _ATTR_NODEV, 0
    )


def _tmpfs(plan: _Plan, args: list[bytes]) -> None:
    options = f"size={_num(args, 1)},nr_inodes={_num(args, 2)},mode={_num(args, 3):o}"
    _mount(plan, b"tmpfs", args[0], b"tmpfs", _MS_NOSUID | _MS_NODEV, options.encode())


def _attach(plan: _Plan, args: list[bytes]) -> None:
    index = _num(args, 0)
    fd = plan.holds[index]
    if fd < 0:
        return  # it did not exist
    if not _num(args, 2):
        try:
            _mount_attr(plan, fd, b"", _AT_EMPTY_PATH | _AT_RECURSIVE, 0, _ATTR_RDONLY)
        except OSError:
            _mount_attr(plan, fd, b"", _AT_EMPTY_PATH, 0, _ATTR_RDONLY)
    os.makedirs(args[1], exist_ok=True)
    plan.call(
        plan.c.syscall(
            ctypes.c_long(_NR_MOVE_MOUNT),
            ctypes.c_int(fd),
            ctypes.c_char_p(b""),
            ctypes.c_int(_AT_FDCWD),
            ctypes.c_char_p(args[1]),
            ctypes.c_uint(_MOVE_MOUNT_F_EMPTY_PATH),
        )
    )
    os.close(fd)
    plan.holds[index] = -1


def _bind_mount(plan: _Plan, source: bytes, target: bytes, flags: int) -> None:
    how = _MS_BIND | (_MS_REC if flags & _BIND_RECURSIVE else 0)
    try:
        _mount(plan, source, target, None, how)
    except FileNotFoundError:
        if flags & _BIND_OPTIONAL:
            return
        raise
    set_ = _ATTR_RDONLY if flags & _BIND_READONLY else 0
    clear = _ATTR_NODEV | _ATTR_RDONLY if flags & _BIND_DEVICES else 0
    if set_ or clear:
        recursive = _AT_RECURSIVE if flags & _BIND_RECURSIVE else 0
        _mount_attr(plan, _AT_FDCWD, target, recursive, set_, clear)


def _bind(plan: _Plan, args: list[bytes]) -> None:
    _bind_mount(plan, args[0], args[1], _num(args, 2))


def _mask(plan: _Plan, args: list[bytes]) -> None:
    """An empty file or directory nobody may read (mode 0), in the private /tmp, bound over a
    hidden path: it reads as "permission denied"."""
    try:
        is_dir = _is_dir(os.stat(args[1]).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return
    kind = "dir" if is_dir else "file"
    source = f"/tmp/.fastgate-hidden-{kind}"
    if kind not in plan.masks:
        if is_dir:
            os.mkdir(source, 0)
        else:
            os.close(os.open(source, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, 0))
        plan.masks.add(kind)
    _bind_mount(plan, source.encode(), args[1], _BIND_READONLY | _BIND_OPTIONAL)


def _remove_masks(plan: _Plan) -> None:
    for kind in plan.masks:
        path = f"/tmp/.fastgate-hidden-{kind}"
        try:
            os.rmdir(path) if kind == "dir" else os.unlink(path)
        except OSError:
            pass


def _proc(plan: _Plan, args: list[bytes]) -> None:
    _mount(plan, b"proc", args[0], b"proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)


def _loopback(plan: _Plan, args: list[bytes]) -> None:
    import fcntl as ioctls

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", ioctls.ioctl(sock, _SIOCGIFFLAGS, request))[1]
        ioctls.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | _IFF_UP))


def _listen(plan: _Plan, args: list[bytes]) -> None:
    channel = socket.socket(fileno=_num(args, 1))
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", _num(args, 0)))
            listener.listen(128)
            socket.send_fds(channel, [b"L"], [listener.fileno()])
    finally:
        channel.close()


def _chdir(plan: _Plan, args: list[bytes]) -> None:
    os.chdir(args[0])


def _rlimit(plan: _Plan, args: list[bytes]) -> None:
    import resource

    which, soft, hard = _num(args, 0), _num(args, 1), _num(args, 2)
    _, current = resource.getrlimit(which)
    if current != resource.RLIM_INFINITY:
        hard = min(hard, current)
        soft = min(soft, hard)
    resource.setrlimit(which, (soft, hard))


def _tasks_of(uid: int) -> int:
    count = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as file:
                status = file.read(4096)
        except OSError:
            continue
        fields = dict(line.split(b":", 1) for line in status.splitlines() if b":" in line)
        try:
            if int(fields[b"Uid"].split()[0]) == uid:
                count += int(fields[b"Threads"])
        except (KeyError, ValueError, IndexError):
            pass
    return count


def _nproc_above(plan: _Plan, args: list[bytes]) -> None:
    import resource

    uid = os.getuid()
    if uid == 0:
        return  # the kernel does not count root's processes
    limit = _tasks_of(uid) + _num(args, 0)
    resource.setrlimit(resource.RLIMIT_NPROC, (limit, limit))


def _landlock(plan: _Plan, args: list[bytes]) -> None:
    values = (_num(args, 0), _num(args, 1), _num(args, 2))
    size = 24 if values[2] else 16 if values[1] else 8
    attr = ctypes.create_string_buffer(struct.pack("=QQQ", *values)[:size], size)
    plan.ruleset = plan.call(
        plan.c.syscall(ctypes.c_long(_NR_LANDLOCK_CREATE_RULESET), attr, ctypes.c_size_t(size), 0)
    )


def _landlock_path(plan: _Plan, args: list[bytes]) -> None:
    try:
        fd = os.open(args[1], os.O_PATH | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return  # not here: nothing to allow
    try:
        access = _num(args, 0)
        if not _is_dir(os.fstat(fd).st_mode):
            access &= _LANDLOCK_FILE_RIGHTS
        if not access:
            return
        rule = ctypes.create_string_buffer(struct.pack("=Qi", access, fd), 12)
        plan.call(plan.c.syscall(ctypes.c_long(_NR_LANDLOCK_ADD_RULE), plan.ruleset, 1, rule, 0))
    finally:
        os.close(fd)


def _landlock_port(plan: _Plan, args: list[bytes]) -> None:
    rule = ctypes.create_string_buffer(struct.pack("=QQ", _num(args, 0), _num(args, 1)), 16)
    plan.call(plan.c.syscall(ctypes.c_long(_NR_LANDLOCK_ADD_RULE), plan.ruleset, 2, rule, 0))


def _restrict(plan: _Plan, args: list[bytes]) -> None:
    plan.call(plan.c.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
    plan.call(plan.c.syscall(ctypes.c_long(_NR_LANDLOCK_RESTRICT_SELF), plan.ruleset, 0))
    os.close(plan.ruleset)
    plan.ruleset = -1


def _caps(plan: _Plan, args: list[bytes]) -> None:
    c = plan.c
    for cap in range(64):
        if c.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            code = ctypes.get_errno()
            if code == 22:  # past the last capability this kernel knows
                break
            if code != 1:
                plan.call(-1)
    c.prctl(_PR_CAP_AMBIENT, 4, 0, 0, 0)  # PR_CAP_AMBIENT_CLEAR_ALL
    header = ctypes.create_string_buffer(struct.pack("=Ii", 0x20080522, 0))
    data = ctypes.create_string_buffer(24)
    plan.call(c.capset(header, data))
    plan.call(c.capget(header, data))
    if any(data.raw):
        raise OSError(1, "capabilities remain")


def _seccomp(plan: _Plan, args: list[bytes]) -> None:
    code = args[0]
    filters = ctypes.create_string_buffer(code, len(code))

    class _Prog(ctypes.Structure):
        _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))

    program = _Prog(len(code) // 8, ctypes.addressof(filters))
    plan.call(plan.c.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
    if not plan.namespaces:
        guard = _guard_supervisors(os.getppid(), _launcher_parent)
        if guard:
            buffer = ctypes.create_string_buffer(guard, len(guard))
            guarded = _Prog(len(guard) // 8, ctypes.addressof(buffer))
            plan.call(plan.c.prctl(_PR_SET_SECCOMP, 2, ctypes.byref(guarded), 0, 0))
    plan.call(plan.c.prctl(_PR_SET_SECCOMP, 2, ctypes.byref(program), 0, 0))


def _guard_supervisors(launcher: int, parent: int) -> bytes:
    """A seccomp filter for a command that shares the launcher's pid namespace: every signal to
    its launcher and to the process that started the launcher (the resident, or the server), by
    pid or process group, and a pidfd of either, are refused (EPERM). The plan's own filter
    protects the server; these two pids only the launcher knows. A launcher killed by its
    command would leave whatever the command detached without a supervisor; a killed resident
    would let those orphans go to init rather than to it. ``b""`` on another architecture."""
    arch, calls = _GUARDED_CALLS.get(os.uname().machine, (0, ()))
    if not calls:
        return b""
    targets = [launcher, -launcher] + ([parent, -parent] if parent > 1 else [])
    allow, refuse = (0x06, 0, 0, 0x7FFF0000), (0x06, 0, 0, 0x00050000 | 1)
    prog = [(0x20, 0, 0, 4), (0x15, 1, 0, arch), allow, (0x20, 0, 0, 0)]
    prog += [(0x15, len(calls) - i, 0, nr) for i, nr in enumerate(calls)]
    prog += [allow, (0x20, 0, 0, 16)]
    prog += [(0x15, len(targets) - i, 0, t & 0xFFFFFFFF) for i, t in enumerate(targets)]
    prog += [allow, refuse]
    return b"".join(struct.pack("=HBBI", *insn) for insn in prog)


_STEPS = {
    1: _lock,
    2: _placeholder,
    3: _remove_after,
    4: _namespaces,
    5: _watch_tasks,
    6: _watch_tree,
    10: _private,
    11: _hold,
    12: _seal,
    13: _tmpfs,
    14: _attach,
    15: _bind,
    16: _mask,
    20: _proc,
    21: _loopback,
    22: _listen,
    23: _watch,
    30: _chdir,
    31: _rlimit,
    32: _nproc_above,
    33: _landlock,
    34: _landlock_path,
    35: _landlock_port,
    36: _restrict,
    37: _caps,
    38: _seccomp,
}

# -- bounds ---------------------------------------------------------------------------------


def _tasks_here() -> int:
    count = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                count += len(os.listdir(f"/proc/{name}/task"))
            except OSError:
                pass
    return count


# Each entry counts at least this much, as a private tmpfs allows one inode per 4 KiB of its
# size: a million empty files fill the directory as surely as a gigabyte does.
_ENTRY_BYTES = 4096


def _tree_bytes(path: bytes, limit: int) -> int:
    total = 0
    todo = [path]
    while todo and total <= limit:
        try:
            entries = list(os.scandir(todo.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            total += max(st.st_blocks * 512, _ENTRY_BYTES)
            if _is_dir(st.st_mode):
                todo.append(entry.path)
    return total


def _bound_reached(plan: _Plan, namespaced: bool) -> str | None:
    if plan.watch_tasks:
        if namespaced:
            if _tasks_here() >= plan.watch_tasks:
                return "processes"
        elif len(descendants()) > plan.watch_tasks:
            return "processes"
    if plan.watch_statfs:
        try:
            fs = os.statvfs(plan.watch_statfs)
        except OSError:
            pass
        else:
            if fs.f_bavail == 0 or fs.f_ffree == 0:
                return "tmp"
    if plan.watch_tree and _tree_bytes(plan.watch_tree, plan.watch_tree_bytes) > (
        plan.watch_tree_bytes
    ):
        return "tmp"
    return None


def _report_bound(plan: _Plan, namespaced: bool, report: int) -> bool:
    """Report a bound reached, if any; whether one was. Also looked at when the command has
    exited on its own: one that met a bound (a full temporary directory) may give up before the
    next look would have found it."""
    bound = _bound_reached(plan, namespaced) if plan.watching() else None
    if bound:
        _report(report, "B", bound)
    return bound is not None


# -- the start ------------------------------------------------------------------------------


def _tell(channel: socket.socket, kind: bytes, a: int = 0, b: int = 0) -> None:
    """Tell the launcher about the start: ``h`` (its credentials say the command's pid as the
    launcher sees it), ``e`` and an errno (the exec failed), ``f``, a step's index and an errno
    (a step of the plan failed)."""
    try:
        channel.send(kind if kind == b"h" else kind + struct.pack("=ii", a, b))
    except OSError:
        pass  # the launcher is gone: the death signal ends this process


def _become_command(
    libc: ctypes.CDLL,
    plan: _Plan,
    executable: str,
    argv: list[str],
    env: dict[bytes, bytes],
    channel: socket.socket,
    parent: int,
) -> None:
    """In the forked child: become the command (never returns)."""
    try:
        os.setsid()
        libc.prctl(_PR_SET_PDEATHSIG, _signal.SIGKILL, 0, 0, 0)  # should its parent be killed
        if os.getppid() != parent:
            os._exit(127)
        _signal.set_wakeup_fd(-1)
        for sig in (_signal.SIGCHLD, _signal.SIGPIPE, *_STOPS):
            _signal.signal(sig, _signal.SIG_DFL)
        try:
            plan.run(30, 40)
        except _StepFailed as failed:
            _tell(channel, b"f", failed.index, failed.code)
            os._exit(127)
        _tell(channel, b"h")
        if "/" in executable:
            os.execve(executable, argv, env)
        else:
            os.execvpe(executable, argv, env)
    except OSError as exc:
        _tell(channel, b"e", exc.errno or 0)
    finally:
        os._exit(127)


def _fresh_wake(inherited: int) -> int:
    """A signal wake-up pipe of this process's own (the inherited one is its parent's)."""
    os.close(inherited)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    old = _signal.set_wakeup_fd(wake_w)
    if old >= 0:
        os.close(old)
    return wake_r


def _map_self(libc: ctypes.CDLL, uid: int, gid: int) -> None:
    """Map this process's user and group to themselves in its new user namespace (its own
    /proc files may be written only while it is dumpable: no command runs yet)."""
    libc.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)
    try:
        try:
            _write(b"/proc/self/setgroups", b"deny")
        except FileNotFoundError:
            pass
        _write(b"/proc/self/uid_map", f"{uid} {uid} 1\n".encode())
        _write(b"/proc/self/gid_map", f"{gid} {gid} 1\n".encode())
    finally:
        libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)


def _write(path: bytes, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _enter_namespaces(
    libc: ctypes.CDLL,
    plan: _Plan,
    command: tuple[str, list[str], dict[bytes, bytes]],
    channel: socket.socket,
    report: int,
    grace_ms: int,
    wake: int,
) -> None:
    """In the forked child: enter the plan's namespaces, start the init (pid 1 of the new pid
    namespace) and stay its parent, passing a stop request on to it (never returns)."""
    code = 0
    try:
        libc.prctl(_PR_SET_PDEATHSIG, _signal.SIGKILL, 0, 0, 0)
        uid, gid = os.getuid(), os.getgid()
        if libc.unshare(plan.namespaces) != 0:
            _tell(channel, b"f", plan.index_of(4), ctypes.get_errno())
            os._exit(127)
        if plan.namespaces & _CLONE_NEWUSER:
            try:
                _map_self(libc, uid, gid)
            except OSError as exc:
                _tell(channel, b"f", plan.index_of(4), exc.errno or 0)
                os._exit(127)
        wake = _fresh_wake(wake)
        init = os.fork()
        if init == 0:
            _be_init(libc, plan, command, channel, report, grace_ms, wake)
        channel.close()
        os.close(plan.gone)  # the init's alone: its death closes it
        while True:
            for sig in _drain(wake):
                if sig != _signal.SIGCHLD:
                    _kill(init, _signal.SIGTERM)
            try:
                pid, _ = os.waitpid(init, os.WNOHANG)
            except ChildProcessError:
                break
            if pid:
                break
            select.select([wake], [], [], 1.0)
    except BaseException:
        code = 1
    finally:
        os._exit(code)


def _be_init(
    libc: ctypes.CDLL,
    plan: _Plan,
    command: tuple[str, list[str], dict[bytes, bytes]],
    channel: socket.socket,
    report: int,
    grace_ms: int,
    wake: int,
) -> None:
    """The first process of the command's namespaces: it makes the command's file system,
    starts the command, reaps every orphan, and ends them all once the command has exited
    (TERM, then KILL after the grace) or when a bound is reached (never returns)."""
    try:
        libc.prctl(_PR_SET_PDEATHSIG, _signal.SIGKILL, 0, 0, 0)
        if os.getpid() != 1:
            os._exit(127)  # kill(-1, ...) below must reach this namespace only
        wake = _fresh_wake(wake)
        try:
            plan.run(10, 30)
        except _StepFailed as failed:
            _tell(channel, b"f", failed.index, failed.code)
            os._exit(127)
        _remove_masks(plan)
        executable, argv, env = command
        child = os.fork()
        if child == 0:
            _become_command(libc, plan, executable, argv, env, channel, 1)
        channel.close()
        _quiet_stdio()  # the command's output ends when the command's processes do
        _init_loop(plan, child, report, grace_ms, wake)
    finally:
        os._exit(0)


def _init_loop(plan: _Plan, command: int, report: int, grace_ms: int, wake: int) -> None:
    ending = False
    end_at: float | None = None
    while True:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                # Every process is gone: the launcher may clean up and exit while the kernel
                # tears the namespaces down.
                if plan.gone >= 0:
                    try:
                        os.write(plan.gone, b"Z")
                    except OSError:
                        pass
                return
            if pid == 0:
                break
            if pid == command:
                if not ending:
                    _report_bound(plan, True, report)  # one it met and gave up on, too
                code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
                _report(report, "X", code)
                if not ending:
                    ending = True
                    end_at = time.monotonic() + grace_ms / 1000
                    _kill(-1, _signal.SIGTERM)
                    _kill(-1, _signal.SIGCONT)
        now = time.monotonic()
        if end_at is not None and now >= end_at:
            _kill(-1, _signal.SIGKILL)
            end_at = None
        if not ending and _report_bound(plan, True, report):
            ending = True
            _kill(-1, _signal.SIGKILL)
        if end_at is not None:
            timeout: float | None = max(end_at - now, 0)
        elif ending:
            timeout = _RESCAN_MS * 10 / 1000
        elif plan.watching():
            timeout = _WATCH_MS / 1000
        else:
            timeout = None
        select.select([wake], [], [], timeout)
        for sig in _drain(wake):
            if sig != _signal.SIGCHLD and not ending:
                ending = True  # the launcher asks: it kills this process after its grace
                _kill(-1, _signal.SIGTERM)
                _kill(-1, _signal.SIGCONT)


def _await_start(channel: socket.socket, child: int, report: int) -> int | None:
    """Read the start messages until the channel closes; the command's pid, or ``None`` after
    reporting why it did not start."""
    pid = 0
    while True:
        try:
            data, ancillary, _, _ = channel.recvmsg(9, socket.CMSG_SPACE(12))
        except InterruptedError:
            continue
        except OSError:
            break
        if not data:
            break
        if data == b"h":
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                    pid = struct.unpack("=iII", payload[:12])[0]
            pid = pid or child
        elif len(data) == 9:
            a, b = struct.unpack("=ii", data[1:])
            os.waitpid(child, 0)
            if data[:1] == b"f":
                _report(report, "F", f"{a} {b}")
            else:
                _report(report, "E", a)
            return None
    channel.close()
    return pid


def _quiet_stdio() -> None:
    """The launcher lets go of the command's stdio: its output ends when its processes do."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    if null > 2:
        os.close(null)


def main(args: list[str]) -> int:
    plan_fd = -1
    if args[:1] == ["--plan"] and len(args) > 1:
        plan_fd, args = int(args[1]), args[2:]
    if len(args) < 5:
        print(
            "usage: _launcher.py [--plan FD] GRACE_MS CONTROL_FD REPORT_FD EXECUTABLE ARG0 "
            "[ARG...]",
            file=sys.stderr,
        )
        return 125
    grace_ms, control, report = int(args[0]), int(args[1]), int(args[2])
    executable, argv = args[3], args[4:]
    global _launcher_parent
    _launcher_parent = os.getppid()
    os.set_inheritable(control, False)
    os.set_inheritable(report, False)
    _signal.signal(_signal.SIGPIPE, _signal.SIG_IGN)
    libc = ctypes.CDLL(None, use_errno=True)
    env = _environment()  # first: not dumpable, its own /proc files are root's
    # Not dumpable: a process of the same user (the command included) may not ptrace this one
    # or open its /proc files (environ, mem, fd: its pipes to the parent). The command, once
    # exec'd, is dumpable again.
    libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        _report(report, "E", ctypes.get_errno())
        return 0
    plan = _Plan([])
    if plan_fd >= 0:
        try:
            plan = _read_plan(plan_fd)
            for fd in plan.channel_fds():
                os.set_inheritable(fd, False)
            plan.run(1, 10)
        except _StepFailed as failed:
            _report(report, "F", f"{failed.index} {failed.code}")
            plan.cleanup()
            return 0
        except OSError as exc:
            _report(report, "E", exc.errno or 0)
            return 0
    try:
        _run(libc, plan, grace_ms, control, report, (executable, argv, env))
    finally:
        plan.cleanup()
    return 0


def _run(
    libc: ctypes.CDLL,
    plan: _Plan,
    grace_ms: int,
    control: int,
    report: int,
    command: tuple[str, list[str], dict[bytes, bytes]],
) -> None:
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    _signal.set_wakeup_fd(wake_w)  # each signal's number arrives as a byte
    for sig in (_signal.SIGCHLD, *_STOPS):
        _signal.signal(sig, lambda *_: None)
    started, channel = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    started.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    if os.getuid() == 0 and plan.namespaces:
        try:
            os.setgroups([])  # no supplementary group goes along
        except OSError:
            pass
    self_pid = os.getpid()
    gone_r, gone_w = os.pipe() if plan.namespaces else (-1, -1)
    try:
        child = os.fork()
    except OSError as exc:
        _report(report, "E", exc.errno or 0)
        return
    if child == 0:
        started.close()
        if plan.namespaces:
            os.close(gone_r)
            plan.gone = gone_w
            _enter_namespaces(libc, plan, command, channel, report, grace_ms, wake_r)
        executable, argv, env = command
        _become_command(libc, plan, executable, argv, env, channel, self_pid)
    # Reported before the exec is: a command killing this launcher at once still leaves the
    # parent the group to end.
    _report(report, "P", child)
    channel.close()
    if gone_w >= 0:
        os.close(gone_w)
    for fd in plan.channel_fds():
        os.close(fd)
    _quiet_stdio()
    pid = _await_start(started, child, report)
    if pid is None:
        return
    _report(report, "S", pid)
    _supervise(plan, child, grace_ms, control, report, wake_r, gone_r)


def _supervise(
    plan: _Plan, command: int, grace_ms: int, control: int, report: int, wake: int, gone: int
) -> None:
    """Until every descendant is gone: see the module's docstring. With namespaces, the init
    says so on ``gone`` before the kernel tears them down, which is not waited for."""
    poller = select.poll()
    poller.register(wake, select.POLLIN)
    poller.register(control, select.POLLIN)
    if gone >= 0:
        poller.register(gone, select.POLLIN)
    command_done = False
    phase = 0  # 0 running, 1 TERM sent, 2 KILL
    stop_grace = -1  # >= 0: a stop was asked, with this grace (ms)
    kill_at = give_up_at = 0.0
    watch_here = plan.watching() and not plan.namespaces
    watch_at = time.monotonic() + _WATCH_MS / 1000
    while True:
        left, ended = _reap(command, report, bool(plan.namespaces))
        if ended and watch_here and phase == 0:
            _report_bound(plan, False, report)  # one it met and gave up on, too
        if not left:
            _report(report, "Z", 0)  # every process of the command has ended: then cleanup
            return
        if ended:
            command_done = True
            if stop_grace < 0:
                stop_grace = grace_ms
        now = time.monotonic()
        if watch_here and phase == 0 and now >= watch_at:
            if _report_bound(plan, False, report):
                stop_grace = 0
            watch_at = now + _WATCH_MS / 1000
        if stop_grace >= 0 and phase == 0:
            phase = 1
            _signal_all(_signal.SIGTERM, command, command_done, plan)
            kill_at = now + stop_grace / 1000
        elif stop_grace >= 0 and phase == 1:
            kill_at = min(kill_at, now + stop_grace / 1000)  # asked again, maybe sooner
        if phase == 1 and now >= kill_at:
            phase = 2
            give_up_at = now + _GIVE_UP
        if phase == 2:
            found, refused = _signal_all(_signal.SIGKILL, command, command_done, plan)
            if (found and found == refused) or now >= give_up_at:
                _report(report, "L", found)
                return  # what is left cannot be ended from here
        timeout = None if phase == 0 else _RESCAN_MS if phase == 2 else (kill_at - now) * 1000
        if watch_here and phase == 0:
            timeout = max(watch_at - now, 0) * 1000
        for fd, _ in poller.poll(timeout):
            if fd == gone:
                if os.read(gone, 1) == b"Z":
                    _report(report, "Z", 0)
                    return
                poller.unregister(gone)  # the init died without a word: reaped above
            elif fd == wake:
                if any(n != _signal.SIGCHLD for n in _drain(wake)) and stop_grace < 0:
                    stop_grace = grace_ms
            elif fd == control:
                asked = _read_control(control, grace_ms)
                if asked is None:
                    poller.unregister(control)  # the parent is gone, or has let go
                    os.close(control)
                    asked = grace_ms
                if stop_grace < 0 or asked < stop_grace:
                    stop_grace = asked


def _reap(command: int, report: int, by_init: bool) -> tuple[bool, bool]:
    """Collect every exited child, reporting the command's status (unless its init does).
    Returns whether a child is left (if none is, no descendant is: every orphan below is
    re-parented here) and whether the command was among those collected."""
    ended = False
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False, ended
        if pid == 0:
            return True, ended
        if pid == command:
            ended = True
            if not by_init:
                code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
                _report(report, "X", code)


def _drain(fd: int) -> bytes:
    data = b""
    while True:
        try:
            chunk = os.read(fd, 64)
        except BlockingIOError:
            return data
        if not chunk:
            return data
        data += chunk


def _read_control(fd: int, default: int) -> int | None:
    """The grace a stop request asks for; ``None`` at the end of the pipe."""
    try:
        line = os.read(fd, 32)
    except OSError:
        return None
    if not line:
        return None
    if line.startswith(b"T"):
        try:
            return int(line[1:])
        except ValueError:
            pass
    return default


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
