"""What the kernel offers a sandbox, and the seccomp filter of a sandboxed command.

Standard library only: code mode's worker (``python -I -S``, no fastgate on its path) loads this
file by its path for the same pieces (Landlock's probe, the syscall tables, the BPF encoding).
"""

from __future__ import annotations

import ctypes
import errno
import functools
import platform
import struct
import sys
from collections.abc import Iterable, Sequence

# -- Landlock (linux/landlock.h) ---------------------------------------------------------------

SYS_LANDLOCK_CREATE_RULESET = 444  # the same number on every architecture
LANDLOCK_CREATE_RULESET_VERSION = 1

FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3
FS_IOCTL_DEV = 1 << 15  # ABI 5
NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1
FS_READ = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR


def fs_handled(abi: int) -> int:
    """Every file system right Landlock ``abi`` knows."""
    handled = (1 << 13) - 1
    if abi >= 2:
        handled |= FS_REFER
    if abi >= 3:
        handled |= FS_TRUNCATE
    if abi >= 5:
        handled |= FS_IOCTL_DEV
    return handled


def fs_writable(abi: int) -> int:
    """What a writable root grants: everything but making device files."""
    return fs_handled(abi) & ~(FS_MAKE_CHAR | FS_MAKE_BLOCK)


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    libc.prctl.restype = ctypes.c_int
    return libc


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 when Landlock is not available."""
    if sys.platform != "linux":
        return 0
    try:
        libc = _libc()
    except OSError:
        return 0
    version = libc.syscall(
        ctypes.c_long(SYS_LANDLOCK_CREATE_RULESET),
        None,
        ctypes.c_size_t(0),
        ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION),
    )
    return int(version) if version > 0 else 0


# -- seccomp ---------------------------------------------------------------------------------

_PR_GET_SECCOMP = 21

RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000
LD_ABS_W = 0x20  # BPF_LD | BPF_W | BPF_ABS
JEQ = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
JGE = 0x35  # BPF_JMP | BPF_JGE | BPF_K
JSET = 0x45  # BPF_JMP | BPF_JSET | BPF_K
AND = 0x54  # BPF_ALU | BPF_AND | BPF_K
RET = 0x06  # BPF_RET | BPF_K
NR, ARCH = 0, 4  # offsets in seccomp_data (then instruction_pointer, then args)


def arg_lo(index: int) -> int:
    return 16 + 8 * index


def arg_hi(index: int) -> int:
    return 20 + 8 * index


# Syscall numbers per architecture: x86_64 from asm/unistd_64.h; aarch64 from the generic table
# (asm-generic/unistd.h; it has no fork, vfork, iopl or ioperm). From 424 on, numbers are the
# same everywhere.
_COMMON = """
    pidfd_send_signal 424 io_uring_setup 425 io_uring_enter 426 io_uring_register 427
    open_tree 428 move_mount 429 fsopen 430 fsconfig 431 fsmount 432 fspick 433 pidfd_open 434
    clone3 435 pidfd_getfd 438 process_madvise 440 mount_setattr 442 quotactl_fd 443
"""
_X86_64 = """
    ioctl 16 shmget 29 shmat 30 shmctl 31 socket 41 connect 42 accept 43 bind 49 listen 50
    socketpair 53 clone 56 fork 57 vfork 58 execve 59 kill 62 semget 64 semop 65 semctl 66
    shmdt 67 msgget 68 msgsnd 69 msgrcv 70 msgctl 71 fcntl 72 ptrace 101 syslog 103
    rt_sigqueueinfo 129 setpriority 141 sched_setparam 142 sched_setscheduler 144 vhangup 153
    pivot_root 155 setrlimit 160 chroot 161 acct 163 mount 165 umount2 166 swapon 167
    swapoff 168 reboot 169 iopl 172 ioperm 173 init_module 175 delete_module 176 quotactl 179
    tkill 200 sched_setaffinity 203 semtimedop 220 tgkill 234 mq_open 240 mq_unlink 241
    mq_timedsend 242 mq_timedreceive 243 mq_notify 244 mq_getsetattr 245 kexec_load 246
    add_key 248 request_key 249 keyctl 250 ioprio_set 251 migrate_pages 256 unshare 272
    move_pages 279 accept4 288 rt_tgsigqueueinfo 297 perf_event_open 298 prlimit64 302
    name_to_handle_at 303 open_by_handle_at 304 setns 308 process_vm_readv 310
    process_vm_writev 311 kcmp 312 finit_module 313 sched_setattr 314 kexec_file_load 320
    bpf 321 execveat 322 userfaultfd 323
"""
_AARCH64 = """
    fcntl 25 ioctl 29 ioprio_set 30 umount2 39 mount 40 pivot_root 41 chroot 51 vhangup 58
    quotactl 60 acct 89 unshare 97 kexec_load 104 init_module 105 delete_module 106 syslog 116
    ptrace 117 sched_setparam 118 sched_setscheduler 119 sched_setaffinity 122 kill 129
    tkill 130 tgkill 131 rt_sigqueueinfo 138 setpriority 140 reboot 142 setrlimit 164
    mq_open 180 mq_unlink 181 mq_timedsend 182 mq_timedreceive 183 mq_notify 184
    mq_getsetattr 185 msgget 186 msgctl 187 msgrcv 188 msgsnd 189 semget 190 semctl 191
    semtimedop 192 semop 193 shmget 194 shmctl 195 shmat 196 shmdt 197 socket 198 socketpair 199
    bind 200 listen 201 accept 202 connect 203 add_key 217 request_key 218 keyctl 219 clone 220
    execve 221 swapon 224 swapoff 225 migrate_pages 238 move_pages 239 rt_tgsigqueueinfo 240
    perf_event_open 241 accept4 242 prlimit64 261 name_to_handle_at 264 open_by_handle_at 265
    setns 268 process_vm_readv 270 process_vm_writev 271 kcmp 272 finit_module 273
    sched_setattr 274 bpf 280 execveat 281 userfaultfd 282 kexec_file_load 294
"""


def _table(text: str) -> dict[str, int]:
    words = text.split()
    return {name: int(number) for name, number in zip(words[::2], words[1::2], strict=True)}


ARCHES: dict[str, tuple[int, dict[str, int]]] = {
    "x86_64": (0xC000003E, {**_table(_X86_64), **_table(_COMMON)}),
    "aarch64": (0xC00000B7, {**_table(_AARCH64), **_table(_COMMON)}),
}


def seccomp_arch() -> str | None:
    """The architecture the seccomp filters are written for, when this host is one of them and
    seccomp filters are enabled; else ``None``."""
    machine = platform.machine()
    if sys.platform != "linux" or machine not in ARCHES:
        return None
    try:
        libc = _libc()
    except OSError:
        return None
    if libc.prctl(_PR_GET_SECCOMP, 0, 0, 0, 0) != 0:  # -1: no seccomp; 2: filtered already
        return None
    return machine


Insn = tuple[int, int, int, int]


def encode_filter(program: Iterable[Insn]) -> bytes:
    """``struct sock_filter[]`` of ``program``."""
    return b"".join(struct.pack("=HBBI", *insn) for insn in program)


def header(arch: str) -> list[Insn]:
    """Another architecture's calls (their numbers would mean other calls) kill the process;
    then the syscall number is loaded. On x86_64, the x32 ABI's calls (the same architecture
    value, numbers from 0x40000000) are refused."""
    audit_arch, _ = ARCHES[arch]
    prog: list[Insn] = [
        (LD_ABS_W, 0, 0, ARCH),
        (JEQ, 1, 0, audit_arch),
        (RET, 0, 0, RET_KILL_PROCESS),
        (LD_ABS_W, 0, 0, NR),
    ]
    if arch == "x86_64":
        prog += [(JGE, 0, 1, 0x40000000), (RET, 0, 0, RET_ERRNO | errno.EPERM)]
    return prog


def when(number: int, body: Sequence[Insn]) -> list[Insn]:
    """``body`` for syscall ``number`` (the number is in the accumulator; ``body`` ends in a
    return, or falls through with the number reloaded)."""
    return [(JEQ, 0, len(body), number), *body]


def refuse(code: int = errno.EPERM) -> Insn:
    return (RET, 0, 0, RET_ERRNO | code)


ALLOW: Insn = (RET, 0, 0, RET_ALLOW)


def refused_values(number: int, arg: int, values: Sequence[int]) -> list[Insn]:
    """Syscall ``number`` refused when the low 32 bits of argument ``arg`` are one of
    ``values``; allowed otherwise."""
    tests = [(JEQ, len(values) - index, 0, value) for index, value in enumerate(values)]
    return when(number, [(LD_ABS_W, 0, 0, arg_lo(arg)), *tests, ALLOW, refuse()])


def allowed_values(number: int, arg: int, values: Sequence[int]) -> list[Insn]:
    """Syscall ``number`` allowed only when the low 32 bits of argument ``arg`` are one of
    ``values``."""
    tests = [(JEQ, len(values) - index, 0, value) for index, value in enumerate(values)]
    return when(number, [(LD_ABS_W, 0, 0, arg_lo(arg)), *tests, refuse(), ALLOW])


# -- the filter of a sandboxed command -------------------------------------------------------

# Refused outright (EPERM): other processes' memory and descriptors, kernel keys (the user's
# keyrings are the server's), io_uring (its operations would bypass this filter, sockets
# included), BPF and perf, mounts and namespaces, modules, the kernel log, swap, reboot.
_DENIED = """
    ptrace process_vm_readv process_vm_writev kcmp pidfd_getfd process_madvise migrate_pages
    move_pages add_key request_key keyctl io_uring_setup io_uring_enter io_uring_register bpf
    perf_event_open userfaultfd mount umount2 pivot_root chroot unshare setns open_tree
    move_mount fsopen fsconfig fsmount fspick mount_setattr swapon swapoff reboot kexec_load
    kexec_file_load init_module finit_module delete_module acct quotactl quotactl_fd iopl
    ioperm syslog vhangup name_to_handle_at open_by_handle_at
""".split()
# Refused where no namespace separates the command from the server: System V IPC and POSIX
# message queues are then shared with it.
_DENIED_SHARED = """
    shmget shmat shmctl shmdt semget semop semtimedop semctl msgget msgsnd msgrcv msgctl
    mq_open mq_unlink mq_timedsend mq_timedreceive mq_notify mq_getsetattr
""".split()
_CLONE_NAMESPACES = (
    0x00000080  # CLONE_NEWTIME
    | 0x00020000  # CLONE_NEWNS
    | 0x02000000  # CLONE_NEWCGROUP
    | 0x04000000  # CLONE_NEWUTS
    | 0x08000000  # CLONE_NEWIPC
    | 0x10000000  # CLONE_NEWUSER
    | 0x20000000  # CLONE_NEWPID
    | 0x40000000  # CLONE_NEWNET
)
AF_UNIX, AF_INET, AF_INET6, AF_NETLINK = 1, 2, 10, 16
_SOCK_STREAM, _SOCK_SEQPACKET, _IPPROTO_TCP, _NETLINK_ROUTE = 1, 5, 6, 0
_TIOCSTI, _TIOCLINUX = 0x5412, 0x541C
_F_SETOWN, _F_SETSIG, _F_SETOWN_EX = 8, 10, 15
_FIOSETOWN, _SIOCSPGRP = 0x8901, 0x8902
_PRIO_PROCESS, _PRIO_USER = 0, 2
_IOPRIO_WHO_PROCESS, _IOPRIO_WHO_USER = 1, 3


@functools.lru_cache(maxsize=64)
def command_filter(
    arch: str,
    *,
    tcp: bool,
    namespaced: bool,
    protect_pids: tuple[int, ...] = (),
) -> bytes:
    """The seccomp filter of a sandboxed command on ``arch`` (made once per set of arguments).

    Always: the calls of ``_DENIED``; a new namespace (``clone`` with a ``CLONE_NEW*`` flag;
    ``clone3``, whose flags hide behind a pointer, is ENOSYS so the C library falls back to
    ``clone``); every socket but a netlink route socket (no Unix socket: the server's, by path
    or abstract name, stay unreachable), and with ``tcp`` a TCP socket (where it may connect is
    the namespace's or Landlock's to say); every ``socketpair`` but one of Unix stream or
    seqpacket sockets (a datagram pair sends to any address it is given); typing into a
    terminal (``TIOCSTI``, ``TIOCLINUX``); the priority of every process of a user.

    Without ``namespaced`` (nothing separates the command from the server's processes): with
    ``tcp``, ``listen`` (a listener would take connections from the host's network); System
    V IPC and POSIX message queues; the scheduling, priority and limits of any process but its
    own (pid 0); a descriptor's signal owner; and signals to ``protect_pids`` (the server and
    its process group), to every process (-1), or by thread id, unless Landlock scopes signals
    (pass no ``protect_pids`` then).
    """
    _, numbers = ARCHES[arch]
    prog = header(arch)
    for name in _DENIED + ([] if namespaced else _DENIED_SHARED):
        if name in numbers:
            prog += [(JEQ, 0, 1, numbers[name]), refuse()]
    prog += [(JEQ, 0, 1, numbers["clone3"]), refuse(errno.ENOSYS)]
    prog += when(
        numbers["clone"],
        [(LD_ABS_W, 0, 0, arg_lo(0)), (JSET, 0, 1, _CLONE_NAMESPACES), refuse(), ALLOW],
    )
    prog += _socket_rule(numbers["socket"], tcp)
    prog += socketpair_rule(numbers["socketpair"])
    if tcp and not namespaced:
        # Landlock checks bind(2) but not the port listen(2) picks for an unbound socket: a
        # command sharing the host's network would accept connections bypassing the proxy.
        prog += [(JEQ, 0, 1, numbers["listen"]), refuse()]
    ioctls = [_TIOCSTI, _TIOCLINUX] + ([] if namespaced else [_FIOSETOWN, _SIOCSPGRP])
    prog += refused_values(numbers["ioctl"], 1, ioctls)
    if namespaced:
        prog += refused_values(numbers["setpriority"], 0, [_PRIO_USER])
        prog += refused_values(numbers["ioprio_set"], 0, [_IOPRIO_WHO_USER])
        prog.append(ALLOW)
        return encode_filter(prog)
    prog += _own_only(numbers["setpriority"], 1, (0, _PRIO_PROCESS))
    prog += _own_only(numbers["ioprio_set"], 1, (0, _IOPRIO_WHO_PROCESS))
    for name in ("sched_setaffinity", "sched_setscheduler", "sched_setparam", "sched_setattr"):
        prog += _own_only(numbers[name], 0, None)
    prog += _own_only(numbers["prlimit64"], 0, None)
    prog += refused_values(numbers["fcntl"], 1, [_F_SETOWN, _F_SETSIG, _F_SETOWN_EX])
    if protect_pids:
        targets = sorted({-1 & 0xFFFFFFFF, *(p & 0xFFFFFFFF for p in protect_pids)})
        prog += [(JEQ, 0, 1, numbers["tkill"]), refuse()]
        prog += [(JEQ, 0, 1, numbers["pidfd_send_signal"]), refuse()]
        for name in ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"):
            prog += refused_values(numbers[name], 0, targets)
    prog.append(ALLOW)
    return encode_filter(prog)


def _socket_rule(number: int, tcp: bool) -> list[Insn]:
    netlink = [
        (LD_ABS_W, 0, 0, arg_lo(2)),
        (JEQ, 0, 1, _NETLINK_ROUTE),
        ALLOW,
        refuse(),
    ]
    if not tcp:
        body = [(LD_ABS_W, 0, 0, arg_lo(0)), (JEQ, 0, len(netlink), AF_NETLINK), *netlink]
        return when(number, [*body, refuse()])
    stream = [
        (LD_ABS_W, 0, 0, arg_lo(1)),
        (AND, 0, 0, 0xF),  # the type without SOCK_NONBLOCK and SOCK_CLOEXEC
        (JEQ, 0, 4, _SOCK_STREAM),
        (LD_ABS_W, 0, 0, arg_lo(2)),
        (JEQ, 1, 0, 0),
        (JEQ, 0, 1, _IPPROTO_TCP),
        ALLOW,
        refuse(),
    ]
    body = [
        (LD_ABS_W, 0, 0, arg_lo(0)),
        (JEQ, len(netlink) + 3, 0, AF_INET),
        (JEQ, len(netlink) + 2, 0, AF_INET6),
        (JEQ, 0, len(netlink), AF_NETLINK),
        *netlink,
        refuse(),
        *stream,
    ]
    return when(number, body)


def socketpair_rule(number: int) -> list[Insn]:
    """``socketpair`` of the Unix family only, of stream or seqpacket sockets (whatever the
    ``SOCK_NONBLOCK`` and ``SOCK_CLOEXEC`` flags): a pair of those is connected for good, while
    a datagram pair (``SOCK_DGRAM``, or ``SOCK_RAW``, which the Unix family makes a datagram
    pair too) sends to any address ``sendto``, ``sendmsg`` or ``connect`` names, the server's
    sockets by path or abstract name included. Anything else is refused (EPERM) as ``socket``
    refuses."""
    body = [
        (LD_ABS_W, 0, 0, arg_lo(0)),
        (JEQ, 0, 4, AF_UNIX),
        (LD_ABS_W, 0, 0, arg_lo(1)),
        (AND, 0, 0, 0xF),  # the type without SOCK_NONBLOCK and SOCK_CLOEXEC
        (JEQ, 2, 0, _SOCK_STREAM),
        (JEQ, 1, 0, _SOCK_SEQPACKET),
        refuse(),
        ALLOW,
    ]
    return when(number, body)


def _own_only(number: int, pid_arg: int, which: tuple[int, int] | None) -> list[Insn]:
    """Syscall ``number`` allowed when its argument ``pid_arg`` is 0 (the caller itself; with
    ``which = (arg, value)``, also that argument must be ``value``); refused otherwise."""
    check: list[Insn] = [(LD_ABS_W, 0, 0, arg_lo(which[0])), (JEQ, 0, 2, which[1])] if which else []
    body = [*check, (LD_ABS_W, 0, 0, arg_lo(pid_arg)), (JEQ, 1, 0, 0), refuse(), ALLOW]
    return when(number, body)
