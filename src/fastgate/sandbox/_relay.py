"""Bytes both ways between two sockets, on the event loop, with backpressure.

Each direction is a ``_Pump``: it reads from its source only while nothing it read is still
waiting for the destination, so a slow reader on one side holds the writer on the other (no
buffer grows without bound). On Linux the bytes go through a pipe with ``splice(2)`` and never
enter Python (a download through the proxy then costs about what it costs direct); elsewhere,
where ``splice`` is refused, or where no descriptor is left for the pipe, through one reused
buffer with ``recv_into``/``send``.

A tunnel ends when both directions reached end of file (each passes its EOF on with
``shutdown(SHUT_WR)``, so half-closed protocols work) or at the first error on either side.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import socket
from typing import Final

_SPLICE: Final = hasattr(os, "splice")
# 256 KiB: most of what 1 MiB gives on loopback, and 64 tunnels then stay far below the
# per-user pipe budget (pipe-user-pages-soft), past which every new pipe of the user is shrunk.
_PIPE_SIZE: Final = 1 << 18
_F_SETPIPE_SZ: Final = 1031
_COPY_SIZE: Final = 1 << 18
# Reads per readiness callback before yielding to the loop: a busy tunnel must not starve the
# others (nor the header reads of new connections).
_ROUNDS: Final = 16
_NO_PIPE: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM})


class _Pump:
    """Moves bytes from ``src`` to ``dst`` until EOF or an error; ``done`` gets the error."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        src: socket.socket,
        dst: socket.socket,
        done: asyncio.Future[None],
    ) -> None:
        self._loop = loop
        self._src = src.fileno()
        self._dst = dst.fileno()
        self._dst_socket = dst
        self._done = done
        self._pending = 0
        self._reading = False
        self._writing = False
        self._eof = False

    def start(self) -> None:
        self._read_more()

    def stop(self) -> None:
        if self._reading:
            self._loop.remove_reader(self._src)
            self._reading = False
        if self._writing:
            self._loop.remove_writer(self._dst)
            self._writing = False

    def close(self) -> None:
        """Release what the pump owns (its pipe, for the splice pump)."""

    # The two primitives each kind of pump provides.
    def _fill(self) -> int:
        """Bytes read from the source into the pump (0 at EOF; ``BlockingIOError`` when none
        is ready)."""
        raise NotImplementedError

    def _drain(self) -> int:
        """Bytes of the pending ones written to the destination (``BlockingIOError`` when it
        takes none)."""
        raise NotImplementedError

    def _on_readable(self) -> None:
        try:
            for _ in range(_ROUNDS):
                try:
                    moved = self._fill()
                except BlockingIOError:
                    return
                if moved == 0:
                    self._eof = True
                    self._stop_reading()
                    self._flush()
                    return
                self._pending += moved
                if not self._flush():
                    return
        except OSError as exc:
            self._fail(exc)

    def _on_writable(self) -> None:
        try:
            self._flush()
        except OSError as exc:
            self._fail(exc)

    def _flush(self) -> bool:
        """Write what is pending; ``True`` when all of it went (reading goes on)."""
        while self._pending:
            try:
                self._pending -= self._drain()
            except BlockingIOError:
                self._stop_reading()
                if not self._writing:
                    self._loop.add_writer(self._dst, self._on_writable)
                    self._writing = True
                return False
        if self._writing:
            self._loop.remove_writer(self._dst)
            self._writing = False
        if self._eof:
            with contextlib.suppress(OSError):  # the peer may be gone already
                self._dst_socket.shutdown(socket.SHUT_WR)
            self._finish(None)
            return False
        self._read_more()
        return True

    def _read_more(self) -> None:
        if not self._reading and not self._done.done():
            self._loop.add_reader(self._src, self._on_readable)
            self._reading = True

    def _stop_reading(self) -> None:
        if self._reading:
            self._loop.remove_reader(self._src)
            self._reading = False

    def _fail(self, exc: BaseException) -> None:
        self.stop()
        self._finish(exc)

    def _finish(self, exc: BaseException | None) -> None:
        self.stop()
        if not self._done.done():
            if exc is None:
                self._done.set_result(None)
            else:
                self._done.set_exception(exc)


class _SplicePump(_Pump):
    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        src: socket.socket,
        dst: socket.socket,
        done: asyncio.Future[None],
    ) -> None:
        super().__init__(loop, src, dst, done)
        self._pipe_r, self._pipe_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            import fcntl

            self._capacity = fcntl.fcntl(self._pipe_w, _F_SETPIPE_SZ, _PIPE_SIZE)
        except OSError:  # over the user's pipe budget: the default size still works
            self._capacity = 1 << 16
        self._flags = os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK

    def close(self) -> None:
        os.close(self._pipe_r)
        os.close(self._pipe_w)

    def _fill(self) -> int:
        return os.splice(self._src, self._pipe_w, self._capacity, flags=self._flags)

    def _drain(self) -> int:
        return os.splice(self._pipe_r, self._dst, self._pending, flags=self._flags)


class _CopyPump(_Pump):
    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        src: socket.socket,
        dst: socket.socket,
        done: asyncio.Future[None],
    ) -> None:
        super().__init__(loop, src, dst, done)
        self._src_socket = src
        self._buffer = memoryview(bytearray(_COPY_SIZE))
        self._start = 0

    def _fill(self) -> int:
        self._start = 0
        return self._src_socket.recv_into(self._buffer)

    def _drain(self) -> int:
        end = self._start + self._pending
        sent = self._dst_socket.send(self._buffer[self._start : end])
        self._start += sent
        return sent


def _make_pump(
    splice: bool,
    loop: asyncio.AbstractEventLoop,
    src: socket.socket,
    dst: socket.socket,
    done: asyncio.Future[None],
) -> _Pump:
    if splice:
        try:
            return _SplicePump(loop, src, dst, done)
        except OSError as exc:
            # No descriptors (or pipe memory) left for its pipe: the copy loop needs none, and
            # a tunnel already answered must not end for want of one.
            if exc.errno not in _NO_PIPE:
                raise
    return _CopyPump(loop, src, dst, done)


async def relay(
    client: socket.socket, upstream: socket.socket, *, use_splice: bool | None = None
) -> None:
    """Copy both ways until both sides ended (or one failed); returns then, or raises the
    first ``OSError``. Cancelling it stops both pumps; the caller closes the sockets."""
    loop = asyncio.get_running_loop()
    splice = _SPLICE if use_splice is None else use_splice
    up_done: asyncio.Future[None] = loop.create_future()
    down_done: asyncio.Future[None] = loop.create_future()
    pumps: list[_Pump] = []
    try:
        pumps.append(_make_pump(splice, loop, client, upstream, up_done))
        pumps.append(_make_pump(splice, loop, upstream, client, down_done))
        for pump in pumps:
            pump.start()
        pending: set[asyncio.Future[None]] = {up_done, down_done}
        while pending:
            finished, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for future in finished:
                future.result()  # the first error ends the tunnel
    finally:
        for pump in pumps:
            pump.stop()
            pump.close()
        for future in (up_done, down_done):
            if future.done() and not future.cancelled():
                future.exception()  # retrieved: an error after the first is not news
            else:
                future.cancel()


async def pump(src: socket.socket, dst: socket.socket, *, use_splice: bool | None = None) -> None:
    """Copy one way, ``src`` to ``dst``, until ``src`` ends (or fails: raises its ``OSError``),
    the way ``relay`` copies each way. Cancelling it stops the pump; the caller closes the
    sockets."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    one = _make_pump(_SPLICE if use_splice is None else use_splice, loop, src, dst, done)
    try:
        one.start()
        await done
    finally:
        one.stop()
        one.close()
        if not done.done():
            done.cancel()
