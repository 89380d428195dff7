"""Tool progress: observation only, never part of admission (SPEC §13).

Each running execution keeps its last 256 progress reports (the oldest are dropped). A
subscriber (``executor.progress(execution_id=None)``) gets what the execution buffered so far and
then everything new, until the execution ends (or, with no id, until the executor is disposed
or the consumer stops iterating). Reports may come from worker threads.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import msgspec

QUEUE_LIMIT = 256


class ProgressEvent(msgspec.Struct, frozen=True):
    execution_id: str
    tool_name: str
    data: Any


class _Subscriber:
    __slots__ = ("closed", "execution_id", "loop", "queue", "ready")

    def __init__(self, execution_id: str | None, loop: asyncio.AbstractEventLoop) -> None:
        self.execution_id = execution_id
        self.loop = loop
        self.queue: deque[ProgressEvent] = deque(maxlen=QUEUE_LIMIT)
        self.ready = asyncio.Event()
        self.closed = False

    def push(self, event: ProgressEvent) -> None:
        self.queue.append(event)
        self.ready.set()

    def close(self) -> None:
        self.closed = True
        self.ready.set()


class ProgressHub:
    __slots__ = ("_buffers", "_closed", "_lock", "_subscribers")

    def __init__(self) -> None:
        self._buffers: dict[str, deque[ProgressEvent]] = {}
        self._subscribers: list[_Subscriber] = []
        self._lock = threading.Lock()
        self._closed = False

    def start(self, execution_id: str) -> None:
        with self._lock:
            self._buffers[execution_id] = deque(maxlen=QUEUE_LIMIT)

    def report(self, execution_id: str, tool_name: str, data: Any) -> None:
        event = ProgressEvent(execution_id, tool_name, data)
        with self._lock:
            buffer = self._buffers.get(execution_id)
            if buffer is None:
                return  # the execution already ended
            buffer.append(event)
            targets = [s for s in self._subscribers if s.execution_id in (None, execution_id)]
        for subscriber in targets:
            _call_on(subscriber.loop, subscriber.push, event)

    def finish(self, execution_id: str) -> None:
        with self._lock:
            self._buffers.pop(execution_id, None)
            targets = [s for s in self._subscribers if s.execution_id == execution_id]
        for subscriber in targets:
            _call_on(subscriber.loop, subscriber.close)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            targets = list(self._subscribers)
        for subscriber in targets:
            _call_on(subscriber.loop, subscriber.close)

    async def subscribe(self, execution_id: str | None) -> AsyncIterator[ProgressEvent]:
        subscriber = _Subscriber(execution_id, asyncio.get_running_loop())
        with self._lock:
            if execution_id is not None:
                buffered = self._buffers.get(execution_id)
                if buffered is None:
                    return  # unknown or already finished: nothing to report
                subscriber.queue.extend(buffered)
            if self._closed:
                return
            self._subscribers.append(subscriber)
        try:
            while True:
                while subscriber.queue:
                    yield subscriber.queue.popleft()
                if subscriber.closed:
                    return
                subscriber.ready.clear()
                await subscriber.ready.wait()
        finally:
            with self._lock:
                self._subscribers.remove(subscriber)


def _call_on(loop: asyncio.AbstractEventLoop, fn: Any, *args: Any) -> None:
    """Run ``fn`` on ``loop``: directly when already on it, else thread-safely."""
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        fn(*args)
    elif not loop.is_closed():
        loop.call_soon_threadsafe(fn, *args)
