"""The async generator behind ``ProgressHub.subscribe``.

A module of its own because mypyc, which compiles ``progress`` (the hub is touched twice by every
call), cannot compile async generators.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fastgate.pipeline.progress import ProgressEvent, ProgressHub


async def stream(hub: ProgressHub, execution_id: str | None) -> AsyncIterator[ProgressEvent]:
    subscriber = hub.attach(execution_id)  # on the first iteration, as a generator body runs
    if subscriber is None:
        return
    try:
        while True:
            while subscriber.queue:
                yield subscriber.queue.popleft()
            if subscriber.closed:
                return
            subscriber.ready.clear()
            await subscriber.ready.wait()
    finally:
        hub.detach(subscriber)
