"""Event-loop selection: uvloop when importable, asyncio's own loop otherwise."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def loop_factory(name: str = "auto") -> Callable[[], asyncio.AbstractEventLoop]:
    """``"uvloop"``, ``"asyncio"`` or ``"auto"`` (uvloop if importable) -> a new-loop factory."""
    if name not in ("auto", "uvloop", "asyncio"):
        raise ValueError(f"loop: unknown event loop {name!r} (expected auto, uvloop or asyncio)")
    if name != "asyncio":
        try:
            import uvloop
        except ImportError:
            if name == "uvloop":
                raise
        else:
            factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
            return factory
    return asyncio.new_event_loop


def install_uvloop() -> bool:
    """Make uvloop the default loop of this process; False when uvloop is not installed."""
    try:
        import uvloop
    except ImportError:
        return False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # loop policies are deprecated in 3.14
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return True


def run(coro: Coroutine[Any, Any, T], *, loop: str = "auto") -> T:
    """Run ``coro`` to completion on a new loop (uvloop when importable)."""
    with asyncio.Runner(loop_factory=loop_factory(loop)) as runner:
        return runner.run(coro)
