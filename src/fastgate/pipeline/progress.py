"""Tool progress: observation only, never part of admission (SPEC §13).

Each running execution keeps its last 256 progress reports (the oldest are dropped). A
subscriber (``executor.progress(execution_id=None)``) gets what the execution buffered so far and
then everything new, until the execution ends (or, with no id, until the executor is disposed
or the consumer stops iterating). Reports may come from worker threads.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import msgspec

from fastgate.pipeline.progress_stream import stream

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
    """Buffers are made on the first report, so a call that reports nothing costs two set
    operations. Reports may come from worker threads: every structure here is changed by single
    dict/set/list operations (atomic under the GIL), and subscribers are notified on their loop."""

    __slots__ = ("_buffers", "_closed", "_running", "_subscribers")

    def __init__(self) -> None:
        self._running: set[str] = set()
        self._buffers: dict[str, deque[ProgressEvent]] = {}
        self._subscribers: list[_Subscriber] = []
        self._closed = False

    def start(self, execution_id: str) -> None:
        self._running.add(execution_id)

    def report(self, execution_id: str, tool_name: str, data: Any) -> None:
        if execution_id not in self._running:
            return  # the execution already ended
        event = ProgressEvent(execution_id, tool_name, data)
        buffer = self._buffers.get(execution_id)
        if buffer is None:
            buffer = self._buffers.setdefault(execution_id, deque(maxlen=QUEUE_LIMIT))
        buffer.append(event)
        for subscriber in tuple(self._subscribers):
            if subscriber.execution_id in (None, execution_id):
                _call_on(subscriber.loop, subscriber.push, event)

    def finish(self, execution_id: str) -> None:
        self._running.discard(execution_id)
        if self._buffers:  # only calls that reported have one
            self._buffers.pop(execution_id, None)
        if self._subscribers:
            for subscriber in tuple(self._subscribers):
                if subscriber.execution_id == execution_id:
                    _call_on(subscriber.loop, subscriber.close)

    def close(self) -> None:
        self._closed = True
        for subscriber in tuple(self._subscribers):
            _call_on(subscriber.loop, subscriber.close)

    def subscribe(self, execution_id: str | None) -> AsyncIterator[ProgressEvent]:
        """The reports of one execution (until it ends) or of all (until the hub closes)."""
        return stream(self, execution_id)

    def attach(self, execution_id: str | None) -> _Subscriber | None:
        """A subscriber fed from now on (with what the execution buffered so far); None when
        there is nothing to follow: the execution is unknown or over, or the hub is closed."""
        subscriber = _Subscriber(execution_id, asyncio.get_running_loop())
        if execution_id is not None:
            if execution_id not in self._running:
                return None
            subscriber.queue.extend(self._buffers.get(execution_id, ()))
        if self._closed:
            return None
        self._subscribers.append(subscriber)
        return subscriber

    def detach(self, subscriber: _Subscriber) -> None:
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
