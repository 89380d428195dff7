"""Guards: deny-only, order-free, fail closed; sync or async."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import fastgate.permissions.guards as guards_module
from fastgate.model.context import ExecutionContext
from fastgate.model.freeze import freeze
from fastgate.permissions.guards import Guard, ToolCallView, run_guards

VIEW = ToolCallView("Bash", freeze({"command": "rm -rf /"}), ExecutionContext(session_id="s1"))


def no_rm(view: ToolCallView) -> str | None:
    return "rm is not allowed" if "rm " in view.args.get("command", "") else None


def fine(view: ToolCallView) -> None:
    return None


def broken(view: ToolCallView) -> str | None:
    raise RuntimeError("guard bug")


async def test_no_guards_and_passing_guards_allow() -> None:
    assert await run_guards((), VIEW) is None
    assert await run_guards([fine, fine], VIEW) is None


@pytest.mark.parametrize("order", [[no_rm, fine], [fine, no_rm]])
async def test_any_reason_denies_in_any_order(order: list[Guard]) -> None:
    assert await run_guards(order, VIEW) == "rm is not allowed"


async def test_first_reason_wins() -> None:
    assert await run_guards([lambda v: "first", lambda v: "second"], VIEW) == "first"


async def test_a_guard_that_raises_denies_naming_itself() -> None:
    reason = await run_guards([fine, broken], VIEW)
    assert reason is not None and "broken" in reason and "RuntimeError" in reason


@pytest.mark.parametrize("returned", [False, True, 0, ["no"], {"deny": True}])
async def test_a_guard_returning_garbage_denies(returned: Any) -> None:
    def sloppy(view: ToolCallView) -> Any:
        return returned

    reason = await run_guards([sloppy], VIEW)
    assert reason is not None and "sloppy" in reason


async def test_an_empty_reason_still_denies() -> None:
    def terse(view: ToolCallView) -> str:
        return ""

    reason = await run_guards([terse], VIEW)
    assert reason is not None and "terse" in reason


async def test_an_async_guard_is_awaited() -> None:
    async def async_no_rm(view: ToolCallView) -> str | None:
        await asyncio.sleep(0)
        return no_rm(view)

    async def async_fine(view: ToolCallView) -> None:
        return None

    assert await run_guards([async_fine, fine], VIEW) is None
    assert await run_guards([fine, async_no_rm], VIEW) == "rm is not allowed"


async def test_an_async_guard_that_raises_or_returns_garbage_denies() -> None:
    async def async_broken(view: ToolCallView) -> str | None:
        raise RuntimeError("guard bug")

    async def async_sloppy(view: ToolCallView) -> Any:
        return True

    for guard in (async_broken, async_sloppy):
        reason = await run_guards([guard], VIEW)
        assert reason is not None and guard.__name__ in reason


async def test_an_async_guard_that_never_answers_denies(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(guards_module, "GUARD_TIMEOUT", 0.01)
    never = asyncio.Event()

    async def stuck(view: ToolCallView) -> None:
        await never.wait()

    reason = await run_guards([stuck], VIEW)
    assert reason is not None and "stuck" in reason and "did not answer" in reason


def test_the_view_is_frozen() -> None:
    with pytest.raises(AttributeError):
        VIEW.tool_name = "Read"  # type: ignore[misc]
    with pytest.raises(TypeError):
        VIEW.args["command"] = "ls"
