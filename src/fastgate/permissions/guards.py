"""Guards (SPEC §6.3): deny-only owner policy that no rule, hook or approval can overturn.

A guard looks at the call and returns a reason to deny it, or ``None``. Guards have no allow
branch, so their order cannot matter: any reason denies.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import msgspec

from fastgate.model.context import ExecutionContext
from fastgate.model.rendering import exception_line

log = logging.getLogger("fastgate.permissions.guards")


class ToolCallView(msgspec.Struct, frozen=True):
    """What a guard sees: the tool name, the frozen (final, possibly hook-rewritten) arguments
    and the context."""

    tool_name: str
    args: Any
    context: ExecutionContext


Guard = Callable[[ToolCallView], str | Awaitable[str | None] | None]

#: How long an async guard may take before the call is denied (as a hook's default timeout).
GUARD_TIMEOUT = 30.0


def _guard_name(guard: object) -> str:
    return str(getattr(guard, "__qualname__", None) or type(guard).__qualname__)


async def run_guards(guards: Iterable[Guard], view: ToolCallView) -> str | None:
    """The first reason any guard gives to deny ``view``, else ``None``.

    A guard may be sync or async (an awaitable it returns is awaited, for at most
    ``GUARD_TIMEOUT`` seconds). Fails closed: a guard that raises, times out, or returns
    anything but ``None`` or a string (``True``/``False``, ...) denies with a reason naming it.
    An empty string is a reason too. Guards run inline, one after another; keep them quick.
    """
    for guard in guards:
        name = _guard_name(guard)
        try:
            reason: object = guard(view)
            if inspect.isawaitable(reason):
                async with asyncio.timeout(GUARD_TIMEOUT):
                    reason = await reason
        except TimeoutError:
            log.warning("guard %s timed out (tool %s)", name, view.tool_name)
            return f"guard {name} did not answer within {GUARD_TIMEOUT:g}s; the call is denied"
        except asyncio.CancelledError as exc:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the caller's cancellation (or its token's), not the guard's failure
            log.warning("guard %s raised CancelledError (tool %s)", name, view.tool_name)
            return f"guard {name} failed ({exception_line(exc)}); the call is denied"
        except Exception as exc:
            log.warning("guard %s raised %s (tool %s)", name, type(exc).__name__, view.tool_name)
            return f"guard {name} failed ({exception_line(exc)}); the call is denied"
        if reason is None:
            continue
        if isinstance(reason, str):
            return reason or f"denied by guard {name}"
        return (
            f"guard {name} returned {type(reason).__name__} instead of a reason or None; the "
            "call is denied"
        )
    return None
