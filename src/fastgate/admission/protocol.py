"""What the admission primitives hand out: an ``async with`` hold."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    pass


class AsyncHold(Protocol):
    """What ``slot()``, ``shared()``, ``exclusive()`` and ``acquire*()`` return (``async with``).

    ``__aenter__``/``__aexit__`` return plain awaitables (not coroutines): the uncontended path
    returns one that is already complete, so entering never costs a loop round-trip.
    """

    def __aenter__(self) -> Awaitable[None]: ...

    def __aexit__(self, exc_type: object, exc: object, tb: object, /) -> Awaitable[None]: ...
