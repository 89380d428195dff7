"""Guards (SPEC §6.3): deny-only, order-free, fail closed."""

from __future__ import annotations

from typing import Any

import pytest

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


def test_no_guards_and_passing_guards_allow() -> None:
    assert run_guards((), VIEW) is None
    assert run_guards([fine, fine], VIEW) is None


@pytest.mark.parametrize("order", [[no_rm, fine], [fine, no_rm]])
def test_any_reason_denies_in_any_order(order: list[Guard]) -> None:
    assert run_guards(order, VIEW) == "rm is not allowed"


def test_first_reason_wins() -> None:
    assert run_guards([lambda v: "first", lambda v: "second"], VIEW) == "first"


def test_a_guard_that_raises_denies_naming_itself() -> None:
    reason = run_guards([fine, broken], VIEW)
    assert reason is not None and "broken" in reason and "RuntimeError" in reason


@pytest.mark.parametrize("returned", [False, True, 0, ["no"], {"deny": True}])
def test_a_guard_returning_garbage_denies(returned: Any) -> None:
    def sloppy(view: ToolCallView) -> Any:
        return returned

    reason = run_guards([sloppy], VIEW)
    assert reason is not None and "sloppy" in reason


def test_an_empty_reason_still_denies() -> None:
    def terse(view: ToolCallView) -> str:
        return ""

    reason = run_guards([terse], VIEW)
    assert reason is not None and "terse" in reason


def test_an_async_guard_denies_and_is_not_left_unawaited() -> None:
    async def async_guard(view: ToolCallView) -> None:
        return None

    reason = run_guards([async_guard], VIEW)  # type: ignore[list-item]
    assert reason is not None and "sync" in reason


def test_the_view_is_frozen() -> None:
    with pytest.raises(AttributeError):
        VIEW.tool_name = "Read"  # type: ignore[misc]
    with pytest.raises(TypeError):
        VIEW.args["command"] = "ls"
