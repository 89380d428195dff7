"""Typing helpers shared by the façades."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Protocol


class AsyncHold(Protocol):
    """What ``slot()``, ``shared()``, ``exclusive()`` and ``acquire*()`` return (``async with``).

    ``__aenter__``/``__aexit__`` return plain awaitables (not coroutines): the uncontended path
    returns one that is already complete, so entering never costs a loop round-trip.
    """

    def __aenter__(self) -> Awaitable[None]: ...

    def __aexit__(self, exc_type: object, exc: object, tb: object, /) -> Awaitable[None]: ...
