"""Awaitables that are already complete: ``await`` returns None without a loop round-trip.

The uncontended admission paths return one from ``__aenter__``/``__aexit__``, so entering a slot,
gate or lock never yields to the event loop. Two spellings of the same thing, one per build:
``Ready`` is a C iterator once compiled, while interpreted code is faster with
``InterpretedReady``, whose ``__await__`` is a C function returning an empty tuple iterator (no
Python frame, no StopIteration instance).
"""

from __future__ import annotations



class Ready:
    def __await__(self) -> Ready:
        return self

    def __iter__(self) -> Ready:
        return self

    def __next__(self) -> None:
        raise StopIteration


class InterpretedReady:
    __slots__ = ()
    __await__ = ().__iter__
