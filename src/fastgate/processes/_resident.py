"""The resident launcher: one compiled launcher per server process that forks the launcher of
each command, so a command costs one program start (its own), not two.

``fastgate-launcher --serve FD`` runs beside the server from the first command on, with an
empty environment, not dumpable, in a session of its own. Each request is one message on a
``SOCK_SEQPACKET`` pair: a header saying which descriptors follow, and the descriptors (a
memfd holding the spec: grace, executable, arguments, environment, the numbers the passed
descriptors had here; the launcher's control and report pipes; stdin, stdout, stderr; the
working directory; the plan). The resident keeps one launcher forked ahead (a spare, named
``fastgate-spare``) that takes the next request off the socket itself, so a command waits for
no fork; the resident then forks the next spare (or, when it cannot, forks a launcher per
request itself). The launcher (the same code as one started on its own, with the same
reports) replies with its pid and a pidfd, the only safe handle on a process that is not this
one's child, before anything of the command starts: no reply means nothing started. The
resident reaps its children and exits when the server closes its end (or dies); an idle spare
dies with the resident. It is a child subreaper too: a launcher killed before its command's
processes ended (a command may kill its own launcher) leaves them to the resident, which ends
every child it did not fork itself.
"""

from __future__ import annotations

import array
import atexit
import errno
import os
import socket
import struct
import subprocess
import threading
from collections.abc import Iterable, Mapping, Sequence

_HEADER = struct.Struct("=c3xI")
_REPLY = struct.Struct("=ii")
_GONE = frozenset({errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN})
# A fork takes a millisecond; a resident silent this long is stopped or starved, and every
# command of the server would wait behind it.
_ANSWER_WITHIN = 5.0


class ResidentGone(OSError):
    """The resident ended before it took the request: a new one may be asked."""


class Resident:
    """A running ``fastgate-launcher --serve``; ``fork`` starts one command's launcher."""

    def __init__(self, program: str) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._popen = subprocess.Popen(
                [program, "--serve", str(theirs.fileno())],
                env={},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                close_fds=True,
                start_new_session=True,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.settimeout(_ANSWER_WITHIN)
        self.pid = self._popen.pid
        self._socket = ours
        self._lock = threading.Lock()
        self.alive = True

    def fork(
        self, spec: bytes, slots: Sequence[int | None], passed: Sequence[int]
    ) -> tuple[int, int]:
        """Fork a launcher for ``spec`` with the descriptors of ``slots`` (``None``: absent)
        and ``passed``; its pid and a pidfd (the caller's to close). ``ResidentGone`` when the
        resident could not take the request (nothing was started); another ``OSError`` when
        it took it and could not fork."""
        spec_fd = memfd("fastgate-spawn", spec)
        try:
            present = 0
            fds: list[int] = []
            for index, fd in enumerate((spec_fd, *slots)):
                if fd is not None:
                    present |= 1 << index
                    fds.append(fd)
            fds.extend(passed)
            header = _HEADER.pack(b"R", present)
            rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
            with self._lock:
                try:
                    self._socket.sendmsg([header], rights, socket.MSG_NOSIGNAL)
                except OSError as exc:
                    if exc.errno not in _GONE:
                        raise  # a descriptor of the request (EBADF), not the resident
                    self._lost()
                    raise ResidentGone(exc.errno, "the resident launcher is gone") from exc
                # The resident holds its own copy now. Closed before the reply so that the
                # pidfd it carries has a free number even when this process is at its limit.
                os.close(spec_fd)
                spec_fd = -1
                try:
                    data, ancillary, flags, _ = self._socket.recvmsg(
                        _REPLY.size, socket.CMSG_SPACE(array.array("i").itemsize)
                    )
                except TimeoutError:
                    # Stopped (a process of its user may signal it) or starved: not waited for
                    # any longer. A launcher answering after this finds its control pipe closed
                    # and ends at once whatever it started.
                    self._popen.kill()
                    self._lost()
                    raise OSError(errno.ETIMEDOUT, "the resident launcher did not answer") from None
                except OSError as exc:
                    if exc.errno not in _GONE:
                        raise
                    # Ended with the request unread (a spare killed as it waited for it).
                    self._lost()
                    raise ResidentGone(exc.errno, "the resident launcher is gone") from exc
        finally:
            if spec_fd >= 0:
                os.close(spec_fd)
        pidfds = list(_received(ancillary))
        if len(data) != _REPLY.size:
            for fd in pidfds:
                os.close(fd)
            self._lost()
            # Every launcher replies before anything of its command starts: none did, and a
            # new resident may be asked.
            raise ResidentGone(errno.EIO, "the resident launcher ended before it answered")
        pid, error = _REPLY.unpack(data)
        if error or not pidfds:
            for fd in pidfds:
                os.close(fd)
            # A pidfd that could not be received (no free number here): the launcher finds
            # its control pipe closed by the caller and ends at once what it started.
            truncated = flags & socket.MSG_CTRUNC
            code = error or (errno.EMFILE if truncated else errno.EIO)
            raise OSError(code, f"the resident launcher could not start one: {os.strerror(code)}")
        return pid, pidfds[0]

    def _lost(self) -> None:
        self.close(wait=1.0)  # its end of the socket is closed: it has exited, or is exiting

    def close(self, wait: float = 0.0) -> None:
        """Let it go: it exits once it sees the end of the socket; reaped here if it has
        within ``wait`` seconds (killed after them)."""
        self.alive = False
        self._socket.close()
        try:
            self._popen.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            if wait:
                self._popen.kill()
                self._popen.wait()


def _received(ancillary: Iterable[tuple[int, int, bytes]]) -> Iterable[int]:
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds = array.array("i")
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
            yield from fds


def memfd(name: str, data: bytes) -> int:
    """``data`` in a new memory file (close-on-exec), positioned at its start."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def encode_spec(
    grace_ms: int,
    executable: str,
    argv: Sequence[str],
    environment: Mapping[str, str] | Mapping[bytes, bytes],
    passed: Sequence[int],
) -> bytes:
    """The spec the resident's child reads: NUL-terminated strings (see ``_launcher.c``).
    ``ValueError`` for a NUL inside one, or a variable name that is empty or holds ``=``."""
    names = [name if type(name) is bytes else os.fsencode(name) for name in environment]
    values = [text if type(text) is bytes else os.fsencode(text) for text in environment.values()]
    items: list[bytes] = [str(grace_ms).encode(), os.fsencode(executable), str(len(argv)).encode()]
    items.extend(os.fsencode(arg) for arg in argv)
    items.append(str(len(names)).encode())
    items += [name + b"=" + value for name, value in zip(names, values, strict=True)]
    items.extend(str(fd).encode() for fd in passed)
    # Checked on the whole, in one pass each: this runs before every command.
    if not all(names) or b"=" in b"\0".join(names):
        bad = next(name for name in names if not name or b"=" in name)
        raise ValueError(f"illegal environment variable name: {bad!r}")
    spec = b"\0".join(items) + b"\0"
    if spec.count(b"\0") != len(items):
        raise ValueError("embedded null byte")
    return spec


_residents: dict[str, Resident] = {}
_residents_lock = threading.Lock()


def resident(program: str) -> Resident:
    """This process's resident launcher for ``program`` (started on first use, and again
    should it have died)."""
    with _residents_lock:
        found = _residents.get(program)
        if found is None or not found.alive:
            found = _residents[program] = Resident(program)
        return found


def running() -> frozenset[int]:
    """The pids of this process's residents."""
    with _residents_lock:
        return frozenset(found.pid for found in _residents.values() if found.alive)


def standing() -> frozenset[int]:
    """The pids of this process's residents and of their idle spares: the processes that
    serve every command, not one."""
    residents = running()
    return residents.union(*(_spares(pid) for pid in residents))


def _spares(resident_pid: int) -> set[int]:
    """The resident's children still waiting for a request (named so until they take one)."""
    try:
        with open(f"/proc/{resident_pid}/task/{resident_pid}/children") as file:
            children = [int(pid) for pid in file.read().split()]
    except OSError:
        return set()
    spares = set()
    for pid in children:
        try:
            with open(f"/proc/{pid}/comm") as file:
                if file.read().strip() == "fastgate-spare":
                    spares.add(pid)
        except OSError:
            continue  # gone meanwhile
    return spares


_inherited: list[Resident] = []


def _forget_after_fork() -> None:
    # A forked child must not use the parent's socket (requests would interleave) nor keep
    # it open (the resident would outlive the parent); its own resident is started on its
    # first command. The parent's stays referenced: it is not this process's to reap.
    global _residents_lock
    _residents_lock = threading.Lock()
    for found in _residents.values():
        found.alive = False
        found._socket.close()
        _inherited.append(found)
    _residents.clear()


def _close_all() -> None:
    with _residents_lock:
        for found in _residents.values():
            found.close(wait=2.0)
        _residents.clear()


os.register_at_fork(after_in_child=_forget_after_fork)
atexit.register(_close_all)
