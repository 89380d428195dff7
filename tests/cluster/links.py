"""Unix-socket servers standing between a worker and Redis, in the test's own event loop.

``SilentServer`` accepts connections and reads what comes, and never answers (a Redis that hung).
``DelayedLink`` forwards to a real Redis and holds each reply for ``delay`` seconds once
``delay`` is set (a slow Redis or a slow network): the commands reach Redis at once, only
their answers are late. Both count the connections still open, so a test sees what leaked.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path


class _Server:
    def __init__(self, socket: Path) -> None:
        self.socket = socket
        self.accepted = 0
        self._open: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    @property
    def open_connections(self) -> int:
        return len(self._open)

    async def start(self) -> None:
        self.socket.unlink(missing_ok=True)
        self._server = await asyncio.start_unix_server(self._accept, str(self.socket))

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self._open.add(writer)
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._serve(reader, writer)
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            self._open.discard(writer)
            self._tasks.discard(task)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        """Stop listening and drop every connection still open."""
        if self._server is not None:
            self._server.close()
        for writer in list(self._open):
            writer.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        self.socket.unlink(missing_ok=True)


class SilentServer(_Server):
    """Accepts, reads, never replies."""

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await reader.read(65536):
            pass


class DelayedLink(_Server):
    """Forwards to ``upstream`` (a unix socket), each reply held ``delay`` seconds."""

    def __init__(self, socket: Path, upstream: Path) -> None:
        super().__init__(socket)
        self.upstream = upstream
        self.delay = 0.0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_unix_connection(str(self.upstream))
        replies: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def upstream_to_queue() -> None:
            while data := await up_reader.read(65536):
                replies.put_nowait((time.monotonic() + self.delay, data))
            replies.put_nowait((0.0, b""))

        async def queue_to_client() -> None:
            while True:
                due, data = await replies.get()
                if not data:
                    return
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                writer.write(data)
                await writer.drain()

        pumps = [
            asyncio.create_task(upstream_to_queue()),
            asyncio.create_task(queue_to_client()),
        ]
        try:
            while data := await reader.read(65536):
                up_writer.write(data)
                await up_writer.drain()
        finally:
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            up_writer.close()
            with contextlib.suppress(OSError):
                await up_writer.wait_closed()
