"""The class decorators the compiled build takes from ``cython``, as no-ops for the pure build.

Cython honours ``freelist`` and ``no_gc`` only as decorators in the ``.py`` source (written in
a ``.pxd`` they are silently dropped), so the core's modules import ``cython`` and fall back to
this module where Cython is not installed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

_T = TypeVar("_T")


def cclass(cls: _T) -> _T:
    """A compiled extension type in the compiled build; a plain class here."""
    return cls


def no_gc(cls: _T) -> _T:
    """No cycle-collector support (the type can never be part of a cycle)."""
    return cls


def freelist(size: int) -> Callable[[_T], _T]:
    """Keep up to ``size`` freed instances for reuse (allocation without the allocator)."""

    def keep(cls: _T) -> _T:
        return cls

    return keep
