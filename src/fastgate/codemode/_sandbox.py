"""Confinement of a code-mode worker on Linux, applied by the worker to itself before it reads
a program: hard rlimits, ``no_new_privs``, every capability dropped, Landlock (file system, TCP,
abstract sockets and signals) and a seccomp filter (no new process, no socket, no exec, no
ptrace, no signal to another process, no raised limit, nothing the server shares with it:
System V IPC and POSIX message queues, the scheduling, priority, affinity and I/O priority of
another process, a descriptor's owner for SIGIO; no file metadata, which Landlock does not
check: mode, owner, times, extended attributes, flags, file handles, leases, and no watch on a
directory: inotify, fanotify, dnotify). The filter does not depend on the Landlock
ABI: what an older Landlock does not scope (signals before ABI 6), seccomp refuses.

Standard library only (``ctypes``): the worker runs ``python -I -S`` and loads this file by its
path, never the fastgate package, and this file loads the command sandbox's kernel pieces
(``fastgate/sandbox/_kernel.py``: syscall tables, BPF encoding, the Landlock and seccomp probes)
the same way. The parent imports it too, to probe what the host offers.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import resource
import stat
import struct
import sys
from collections.abc import Iterable
from typing import Any

# -- the kernel's pieces, shared with the command sandbox (fastgate/sandbox/_kernel.py) --------


def _load_kernel() -> Any:
    """fastgate.sandbox._kernel; in the worker (no fastgate on its path), the same file loaded
    by its path, beside this package."""
    try:
        from fastgate.sandbox import _kernel

        return _kernel
    except ImportError:
        import importlib.util

        here = os.path.dirname(os.path.abspath(__file__))
        path = os.path.join(os.path.dirname(here), "sandbox", "_kernel.py")
        spec = importlib.util.spec_from_file_location("_fastgate_kernel", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module


_kernel = _load_kernel()
_SYS_LANDLOCK_CREATE_RULESET = _kernel.SYS_LANDLOCK_CREATE_RULESET
_SYS_LANDLOCK_ADD_RULE = 445
_SYS_LANDLOCK_RESTRICT_SELF = 446
_LANDLOCK_RULE_PATH_BENEATH = 1
FS_EXECUTE = _kernel.FS_EXECUTE
FS_WRITE_FILE = _kernel.FS_WRITE_FILE
FS_READ_FILE = _kernel.FS_READ_FILE
FS_READ_DIR = _kernel.FS_READ_DIR
_FS_ABI1 = (1 << 13) - 1  # EXECUTE .. MAKE_SYM
_FS_REFER = _kernel.FS_REFER
_FS_TRUNCATE = _kernel.FS_TRUNCATE
_FS_IOCTL_DEV = _kernel.FS_IOCTL_DEV
_NET_TCP = _kernel.NET_BIND_TCP | _kernel.NET_CONNECT_TCP
_SCOPE_ALL = _kernel.SCOPE_ABSTRACT_UNIX_SOCKET | _kernel.SCOPE_SIGNAL
# Rights that apply to a file (not a directory) in a path-beneath rule.
_FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV

_PR_SET_NO_NEW_PRIVS = 38
_PR_CAPBSET_DROP = 24
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_CAPABILITY_VERSION_3 = 0x20080522

_RET_KILL_PROCESS = _kernel.RET_KILL_PROCESS
_RET_ERRNO = _kernel.RET_ERRNO
_RET_ALLOW = _kernel.RET_ALLOW
_LD_ABS_W = _kernel.LD_ABS_W
_JEQ = _kernel.JEQ
_JGE = _kernel.JGE
_JSET = _kernel.JSET
_RET = _kernel.RET
_CLONE_THREAD = 0x00010000
# Threads are the one kind of task a program may start, and each takes a process id of the
# machine's (a thread can be started with a stack of a few bytes, by ctypes: tens of thousands
# a second, past any pid_max). seccomp cannot count: a new thread is sent to the server as a
# user notification (a listener the worker hands over, then closes), which counts the
# program's threads and lets it start only below ``MAX_THREADS`` (EAGAIN otherwise).
MAX_THREADS = 64
_RET_USER_NOTIF = 0x7FC00000
_SECCOMP_SET_MODE_FILTER = 1
_SECCOMP_FILTER_FLAG_NEW_LISTENER = 1 << 3
_SYS_SECCOMP = {"x86_64": 317, "aarch64": 277}
_PR_SET_SECCOMP_OPTION = 22
_PRCTL = {"x86_64": 157, "aarch64": 167}
_NR, _ARCH = _kernel.NR, _kernel.ARCH
_arg_lo = _kernel.arg_lo
_arg_hi = _kernel.arg_hi
_ARCHES: dict[str, tuple[int, dict[str, int]]] = _kernel.ARCHES

# Refused outright (EPERM): new processes and programs, sockets (a stream or seqpacket
# socketpair stays allowed: it reaches nothing; a datagram one is refused below), other
# processes' memory and pages, namespaces, mounts, kernel keys, io_uring (its operations would
# bypass this filter), raised limits, state shared with the server:
# System V IPC (no architecture here has the ``ipc`` multiplexer; another ABI's calls are
# refused above), POSIX message queues (named in the IPC namespace, not the file system Landlock
# sees), kcmp (it compares the server's descriptors and memory with the program's).
_DENIED = """
    fork vfork execve execveat socket connect bind listen accept accept4 ptrace process_vm_readv
    process_vm_writev pidfd_open pidfd_getfd pidfd_send_signal unshare setns mount umount2
    pivot_root chroot bpf perf_event_open userfaultfd add_key request_key keyctl io_uring_setup
    io_uring_enter io_uring_register setrlimit
    shmget shmat shmctl shmdt semget semop semtimedop semctl msgget msgsnd msgrcv msgctl
    mq_open mq_unlink mq_timedsend mq_timedreceive mq_notify mq_getsetattr
    kcmp migrate_pages move_pages process_madvise
""".split()
# File metadata and watches, which Landlock does not check (it checks opening, creating,
# removing, renaming, linking and truncating; not a change of a file's mode, owner, times or
# extended attributes, nor reading those attributes, nor a watch on a directory): refused
# everywhere, so a program can neither mark a file beyond its scratch directory (nor its own
# scratch directory: every file it can reach by a path), nor hand data to a later run through
# an extended attribute, nor watch /tmp for other runs' scratch directories. ``stat`` stays
# (the import system needs it). File handles (``name_to_handle_at``) name an inode outside
# every path rule. Numbers per architecture: x86_64 from asm/unistd_64.h, aarch64 from the
# generic table (no chmod, chown, lchown, utime, utimes, futimesat nor inotify_init there);
# from 424 on the same everywhere (fchmodat2 452; the *xattrat calls 463-466, Linux 6.13;
# file_getattr 468, file_setattr 469, Linux 6.17).
_METADATA = """
    chmod fchmod fchmodat fchmodat2 chown fchown lchown fchownat utime utimes futimesat
    utimensat setxattr lsetxattr fsetxattr getxattr lgetxattr fgetxattr listxattr llistxattr
    flistxattr removexattr lremovexattr fremovexattr setxattrat getxattrat listxattrat
    removexattrat file_getattr file_setattr inotify_init inotify_init1 inotify_add_watch
    inotify_rm_watch fanotify_init fanotify_mark name_to_handle_at open_by_handle_at
""".split()
_METADATA_COMMON = """
    fchmodat2 452 setxattrat 463 getxattrat 464 listxattrat 465 removexattrat 466
    file_getattr 468 file_setattr 469
"""
_METADATA_NUMBERS: dict[str, dict[str, int]] = {
    "x86_64": _kernel._table(
        """
        chmod 90 fchmod 91 chown 92 fchown 93 lchown 94 utime 132 setxattr 188 lsetxattr 189
        fsetxattr 190 getxattr 191 lgetxattr 192 fgetxattr 193 listxattr 194 llistxattr 195
        flistxattr 196 removexattr 197 lremovexattr 198 fremovexattr 199 utimes 235
        inotify_init 253 inotify_add_watch 254 inotify_rm_watch 255 fchownat 260
        futimesat 261 fchmodat 268 utimensat 280 inotify_init1 294 fanotify_init 300
        fanotify_mark 301 name_to_handle_at 303 open_by_handle_at 304
        """
        + _METADATA_COMMON
    ),
    "aarch64": _kernel._table(
        """
        setxattr 5 lsetxattr 6 fsetxattr 7 getxattr 8 lgetxattr 9 fgetxattr 10 listxattr 11
        llistxattr 12 flistxattr 13 removexattr 14 lremovexattr 15 fremovexattr 16
        inotify_init1 26 inotify_add_watch 27 inotify_rm_watch 28 fchmod 52 fchmodat 53
        fchownat 54 fchown 55 utimensat 88 fanotify_init 262 fanotify_mark 263
        name_to_handle_at 264 open_by_handle_at 265
        """
        + _METADATA_COMMON
    ),
}
# Memory outside the address-space limit: a memfd's pages are shared memory, charged to no
# process's RLIMIT_AS until mapped, and written with ``write`` they never are (64 descriptors of
# 64 MiB each: 4 GiB held by a program of 512 MiB). ``memfd_secret`` likewise. (System V shared
# memory is refused above; /dev/shm is beyond Landlock's reach.)
_UNACCOUNTED_MEMORY = {
    "x86_64": {"memfd_create": 319, "memfd_secret": 447},
    "aarch64": {"memfd_create": 279, "memfd_secret": 447},
}
_NOT_ON_AARCH64 = frozenset("chmod chown lchown utime utimes futimesat inotify_init".split())
# The same through a descriptor: a file's flags (chattr: FS_IOC_GETFLAGS, FS_IOC_SETFLAGS and
# their 32-bit spellings), its project attributes (FS_IOC_FSGETXATTR, FS_IOC_FSSETXATTR), its
# generation (FS_IOC_GETVERSION, FS_IOC_SETVERSION), all the same on both architectures; and
# fcntl's directory watch (F_NOTIFY, dnotify) and lease (F_SETLEASE: it would hold back another
# process opening the file).
_FS_IOCTLS = (
    0x80086601,
    0x40086602,
    0x80046601,
    0x40046602,
    0x801C581F,
    0x401C5820,
    0x80087601,
    0x40087602,
)
_F_SETLEASE, _F_NOTIFY = 1024, 1026
# Signals only to itself (its first argument is its own pid; kill(0, ...) is its own group).
_SIGNALS = ("kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo")
# Scheduling of its own process only (the pid, the first argument, is 0 or its own; a thread's
# id is refused too). ``setpriority`` and ``ioprio_set`` also name which kind of target the pid
# is: a process only (PRIO_PROCESS = 0, IOPRIO_WHO_PROCESS = 1), never a group or a user (every
# process of the server's user, the server included).
_OWN_SCHEDULING = (
    ("sched_setaffinity", 0, None),
    ("sched_setscheduler", 0, None),
    ("sched_setparam", 0, None),
    ("sched_setattr", 0, None),
    ("setpriority", 1, (0, 0)),
    ("ioprio_set", 1, (0, 1)),
)
# A descriptor's owner receives SIGIO (or the signal F_SETSIG names) when it turns ready: the
# owner cannot be set at all (fcntl F_SETOWN, F_SETSIG, F_SETOWN_EX; ioctl FIOSETOWN,
# SIOCSPGRP), so no descriptor signals the server, whatever Landlock scopes.
_F_SETOWN, _F_SETSIG, _F_SETOWN_EX = 8, 10, 15
_FIOSETOWN, _SIOCSPGRP = 0x8901, 0x8902


class SandboxError(OSError):
    """A confinement layer could not be applied."""


_libc = _kernel._libc


def _fail(what: str) -> SandboxError:
    code = ctypes.get_errno()
    return SandboxError(code, f"{what}: {os.strerror(code)}")


# -- probing (the parent asks before it starts workers) --------------------------------------


#: Probes of this host (the same functions the command sandbox uses).
landlock_abi = _kernel.landlock_abi
seccomp_arch = _kernel.seccomp_arch


def missing() -> list[str]:
    """What this host lacks to confine a program; empty when it can."""
    lacks = []
    if sys.platform != "linux":
        return [f"code mode confines programs on Linux only (this is {sys.platform})"]
    if landlock_abi() < 1:
        lacks.append(
            "Landlock is not available (Linux >= 5.13 with landlock in the kernel's LSM list)"
        )
    if seccomp_arch() is None:
        lacks.append(
            f"no seccomp filter for this host (needs seccomp filters on x86_64 or aarch64; "
            f"this is {platform.machine()})"
        )
    return lacks


# -- applying (the worker, to itself) --------------------------------------------------------


def set_limits(memory_bytes: int, cpu_seconds: int, max_files: int, max_file_bytes: int) -> None:
    """Hard limits (soft == hard): without CAP_SYS_RESOURCE, dropped below, none can be raised."""
    for which, value in (
        (resource.RLIMIT_AS, memory_bytes),
        (resource.RLIMIT_CPU, cpu_seconds),
        (resource.RLIMIT_NOFILE, max_files),
        (resource.RLIMIT_FSIZE, max_file_bytes),
        (resource.RLIMIT_CORE, 0),
    ):
        _, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(which, (value, value))


def no_new_privs(libc: ctypes.CDLL) -> None:
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise _fail("prctl(PR_SET_NO_NEW_PRIVS)")


def drop_capabilities(libc: ctypes.CDLL) -> None:
    """Empty the bounding, ambient, effective, permitted and inheritable sets (root included)."""
    for cap in range(64):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            code = ctypes.get_errno()
            if code == errno.EINVAL:  # past the last capability this kernel knows
                break
            if code != errno.EPERM:  # EPERM: we never had CAP_SETPCAP, so hold nothing to drop
                raise _fail(f"prctl(PR_CAPBSET_DROP, {cap})")
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)  # EINVAL before Linux 4.3
    header = ctypes.create_string_buffer(struct.pack("=Ii", _CAPABILITY_VERSION_3, 0))
    data = ctypes.create_string_buffer(24)  # two (effective, permitted, inheritable) u32 triples
    if libc.capset(header, data) != 0:
        raise _fail("capset")
    if libc.capget(header, data) != 0 or any(data.raw):
        raise SandboxError(errno.EPERM, "capabilities remain after capset")


def landlock(
    libc: ctypes.CDLL, abi: int, read_only: Iterable[str], read_write: Iterable[str]
) -> None:
    """Only reads beneath ``read_only`` and everything but execution beneath ``read_write``;
    no TCP bind or connect (ABI >= 4); no abstract unix socket or signal outside (ABI >= 6)."""
    handled = _FS_ABI1
    if abi >= 2:
        handled |= _FS_REFER
    if abi >= 3:
        handled |= _FS_TRUNCATE
    if abi >= 5:
        handled |= _FS_IOCTL_DEV
    if abi >= 6:
        attr = struct.pack("=QQQ", handled, _NET_TCP, _SCOPE_ALL)
    elif abi >= 4:
        attr = struct.pack("=QQ", handled, _NET_TCP)
    else:
        attr = struct.pack("=Q", handled)
    attr_buf = ctypes.create_string_buffer(attr, len(attr))
    ruleset = libc.syscall(
        ctypes.c_long(_SYS_LANDLOCK_CREATE_RULESET),
        attr_buf,
        ctypes.c_size_t(len(attr)),
        ctypes.c_uint32(0),
    )
    if ruleset < 0:
        raise _fail("landlock_create_ruleset")
    try:
        writable = handled & ~FS_EXECUTE
        for paths, access in ((read_only, FS_READ_FILE | FS_READ_DIR), (read_write, writable)):
            for path in paths:
                _add_path_rule(libc, int(ruleset), path, access)
        no_new_privs(libc)
        if libc.syscall(ctypes.c_long(_SYS_LANDLOCK_RESTRICT_SELF), ruleset, 0) != 0:
            raise _fail("landlock_restrict_self")
    finally:
        os.close(int(ruleset))


def _add_path_rule(libc: ctypes.CDLL, ruleset: int, path: str, access: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # not on this host: nothing to allow
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            access &= _FILE_RIGHTS
        rule = ctypes.create_string_buffer(struct.pack("=Qi", access, fd), 12)
        if libc.syscall(ctypes.c_long(_SYS_LANDLOCK_ADD_RULE), ruleset, 1, rule, 0) != 0:
            raise _fail(f"landlock_add_rule({path})")
    finally:
        os.close(fd)


def seccomp_filter(arch: str, own_pid: int, threads: str = "allow") -> bytes:
    """The BPF program (``struct sock_filter[]``) for ``arch``. ``threads``: what a new thread
    gets: ``"notify"`` (the listener's supervisor decides), ``"refuse"`` (EAGAIN) or
    ``"allow"``."""
    audit_arch, numbers = _ARCHES[arch]
    prog: list[tuple[int, int, int, int]] = [
        (_LD_ABS_W, 0, 0, _ARCH),
        (_JEQ, 1, 0, audit_arch),
        (_RET, 0, 0, _RET_KILL_PROCESS),  # another ABI's numbers would mean other syscalls
        (_LD_ABS_W, 0, 0, _NR),
    ]
    if arch == "x86_64":  # the x32 ABI: the same arch value, numbers from 0x40000000
        prog += [(_JGE, 0, 1, 0x40000000), (_RET, 0, 0, _RET_ERRNO | errno.EPERM)]
    deny = _RET_ERRNO | errno.EPERM
    for name in _DENIED:
        if name in numbers:
            prog += [(_JEQ, 0, 1, numbers[name]), (_RET, 0, 0, deny)]
    for number in _UNACCOUNTED_MEMORY[arch].values():
        prog += [(_JEQ, 0, 1, number), (_RET, 0, 0, deny)]
    # A stream or seqpacket pair only: a datagram pair sends to any socket path it names.
    prog += _kernel.socketpair_rule(numbers["socketpair"])
    metadata = _METADATA_NUMBERS[arch]
    for name in _METADATA:
        if name not in metadata:  # a name missing from the table would pass unseen
            if arch == "aarch64" and name in _NOT_ON_AARCH64:
                continue
            raise KeyError(f"no {arch} number for {name}")
        prog += [(_JEQ, 0, 1, metadata[name]), (_RET, 0, 0, deny)]
    # clone3 hides its flags behind a pointer: ENOSYS makes the C library fall back to clone.
    prog += [(_JEQ, 0, 1, numbers["clone3"]), (_RET, 0, 0, _RET_ERRNO | errno.ENOSYS)]
    # clone: threads only, each as ``threads`` says.
    thread = {
        "notify": _RET_USER_NOTIF,
        "refuse": _RET_ERRNO | errno.EAGAIN,
        "allow": _RET_ALLOW,
    }[threads]
    prog += [
        (_JEQ, 0, 4, numbers["clone"]),
        (_LD_ABS_W, 0, 0, _arg_lo(0)),
        (_JSET, 0, 1, _CLONE_THREAD),
        (_RET, 0, 0, thread),
        (_RET, 0, 0, deny),
    ]
    # No filter of the program's own (seccomp, prctl PR_SET_SECCOMP): one returning a user
    # notification for clone would come before this one's, and its listener, the program's,
    # would let every thread start.
    prog += [(_JEQ, 0, 1, _SYS_SECCOMP[arch]), (_RET, 0, 0, deny)]
    prog += _refused_values(_PRCTL[arch], 0, (_PR_SET_SECCOMP_OPTION,))
    # prlimit64: reading a limit only (no new limit given).
    prog += [
        (_JEQ, 0, 6, numbers["prlimit64"]),
        (_LD_ABS_W, 0, 0, _arg_lo(2)),
        (_JEQ, 0, 3, 0),
        (_LD_ABS_W, 0, 0, _arg_hi(2)),
        (_JEQ, 0, 1, 0),
        (_RET, 0, 0, _RET_ALLOW),
        (_RET, 0, 0, deny),
    ]
    for name, pid_arg, which in _OWN_SCHEDULING:
        prog += _own_process_only(numbers[name], pid_arg, which, own_pid)
    prog += _refused_values(
        numbers["fcntl"], 1, (_F_SETOWN, _F_SETSIG, _F_SETOWN_EX, _F_SETLEASE, _F_NOTIFY)
    )
    prog += _refused_values(numbers["ioctl"], 1, (_FIOSETOWN, _SIOCSPGRP, *_FS_IOCTLS))
    # Signals: to itself only (the kernel reads a pid argument's low 32 bits).
    for name in _SIGNALS:
        prog += [
            (_JEQ, 0, 5, numbers[name]),
            (_LD_ABS_W, 0, 0, _arg_lo(0)),
            (_JEQ, 2, 0, own_pid),
            (_JEQ, 1 if name == "kill" else 0, 0, 0),  # kill(0, sig): its own process group
            (_RET, 0, 0, deny),
            (_RET, 0, 0, _RET_ALLOW),
        ]
    prog.append((_RET, 0, 0, _RET_ALLOW))
    return b"".join(struct.pack("=HBBI", *insn) for insn in prog)


def _own_process_only(
    number: int, pid_arg: int, which: tuple[int, int] | None, own_pid: int
) -> list[tuple[int, int, int, int]]:
    """Syscall ``number`` allowed when its argument ``pid_arg`` is 0 or ``own_pid`` (and, with
    ``which = (arg, value)``, that argument is ``value``); refused otherwise. The kernel reads
    these int arguments' low 32 bits."""
    check = [(_LD_ABS_W, 0, 0, _arg_lo(which[0])), (_JEQ, 0, 3, which[1])] if which else []
    body = [
        *check,
        (_LD_ABS_W, 0, 0, _arg_lo(pid_arg)),
        (_JEQ, 2, 0, own_pid),
        (_JEQ, 1, 0, 0),
        (_RET, 0, 0, _RET_ERRNO | errno.EPERM),
        (_RET, 0, 0, _RET_ALLOW),
    ]
    return [(_JEQ, 0, len(body), number), *body]


def _refused_values(
    number: int, arg: int, values: tuple[int, ...]
) -> list[tuple[int, int, int, int]]:
    """Syscall ``number`` refused when its argument ``arg`` (an int command: its low 32 bits)
    is one of ``values``; allowed otherwise."""
    tests = [(_JEQ, len(values) - index, 0, value) for index, value in enumerate(values)]
    body = [
        (_LD_ABS_W, 0, 0, _arg_lo(arg)),
        *tests,
        (_RET, 0, 0, _RET_ALLOW),
        (_RET, 0, 0, _RET_ERRNO | errno.EPERM),
    ]
    return [(_JEQ, 0, len(body), number), *body]


def install_seccomp(libc: ctypes.CDLL, arch: str, supervised: bool = True) -> int | None:
    """Install the filter; the listener of its thread notifications (``None``: threads are
    refused, where the kernel has no user notification, or allowed when not ``supervised``).
    """

    class _Prog(ctypes.Structure):
        _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))

    def program(threads: str) -> tuple[_Prog, ctypes.Array[ctypes.c_char]]:
        code = seccomp_filter(arch, os.getpid(), threads)
        filters = ctypes.create_string_buffer(code, len(code))
        return _Prog(len(code) // 8, ctypes.addressof(filters)), filters

    no_new_privs(libc)
    if supervised:
        prog, _kept = program("notify")
        listener = libc.syscall(
            ctypes.c_long(_SYS_SECCOMP[arch]),
            ctypes.c_uint(_SECCOMP_SET_MODE_FILTER),
            ctypes.c_uint(_SECCOMP_FILTER_FLAG_NEW_LISTENER),
            ctypes.byref(prog),
        )
        if listener >= 0:
            return int(listener)
        if ctypes.get_errno() not in (errno.EINVAL, errno.ENOSYS):
            raise _fail("seccomp(SECCOMP_SET_MODE_FILTER, NEW_LISTENER)")
    prog, _kept = program("refuse" if supervised else "allow")
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        raise _fail("prctl(PR_SET_SECCOMP)")
    return None


def interpreter_paths() -> list[str]:
    """What the worker may read: the standard library (each entry, so site-packages stays
    out), the shared libraries it has mapped (each file) and the system's library directories
    (extension modules load theirs lazily), the loader's cache, time zones. A library
    directory that holds Python packages (``site-packages``, ``dist-packages``, a ``python*``
    directory: libpython's own directory holds the interpreter's ``lib/python3.X`` with its
    site-packages) is granted entry by entry, without those."""
    paths: set[str] = set()
    stdlib = os.path.dirname(os.__file__)
    for entry in os.listdir(stdlib):
        if not _holds_packages(os.path.join(stdlib, entry)):
            paths.add(os.path.join(stdlib, entry))
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split(None, 5)
                mapped = fields[5].strip() if len(fields) == 6 else ""
                name = os.path.basename(mapped)
                # Shared objects only (never a deleted file's or a memfd's "directory").
                if mapped.startswith("/") and (name.endswith(".so") or ".so." in name):
                    paths.add(mapped)
    except OSError:
        pass
    multiarch = getattr(sys.implementation, "_multiarch", "")
    for base in ("/lib", "/usr/lib", "/lib64", "/usr/lib64"):
        paths.update(_without_packages(os.path.join(base, multiarch) if multiarch else base))
    paths.update(_without_packages("/lib64"))
    paths.update(("/etc/ld.so.cache", "/usr/share/zoneinfo"))
    return sorted(os.path.realpath(p) for p in paths)


def _holds_packages(path: str) -> bool:
    """Whether ``path`` is, or is a ``python*`` directory that may hold, Python packages."""
    name = os.path.basename(path)
    if name in ("site-packages", "dist-packages"):
        return True
    return name.startswith("python") and os.path.isdir(path)


def _without_packages(directory: str) -> list[str]:
    """``directory`` itself, or, when it holds Python packages, each of its other entries."""
    try:
        entries = [os.path.join(directory, entry) for entry in os.listdir(directory)]
    except OSError:
        return [directory]  # not a directory, or absent: _add_path_rule decides
    if not any(_holds_packages(entry) for entry in entries):
        return [directory]
    return [entry for entry in entries if not _holds_packages(entry)]


def confine(config: dict[str, Any]) -> dict[str, Any]:
    """Apply every layer ``config`` asks for; return what holds (the worker reports it)."""
    set_limits(
        config["memory_bytes"],
        config["cpu_seconds"],
        config["max_files"],
        config["max_file_bytes"],
    )
    applied: dict[str, Any] = {"limits": True}
    errors: list[str] = []
    if sys.platform != "linux":
        return {**applied, "errors": errors}
    libc = _libc()
    try:
        no_new_privs(libc)
        applied["no_new_privs"] = True
        drop_capabilities(libc)
        applied["capabilities"] = "none"
    except OSError as exc:
        errors.append(str(exc))
    abi = int(config.get("landlock", 0))
    if abi:
        try:
            landlock(libc, abi, interpreter_paths(), [config["tmp"]])
            applied["landlock"] = abi
        except OSError as exc:
            errors.append(str(exc))
    arch = config.get("seccomp")
    if arch:
        try:
            listener = install_seccomp(libc, str(arch))
            applied["seccomp"] = arch
            # "supervised": each new thread is the server's to count (the listener goes to it
            # with the ready message: ``listener``, never the program's); 1: none but the
            # worker's own.
            applied["threads"] = "supervised" if listener is not None else 1
            if listener is not None:
                applied["listener"] = listener
        except OSError as exc:
            errors.append(str(exc))
    return {**applied, "errors": errors}
