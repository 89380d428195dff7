"""A session's calls come back in the order they were made across restarts of the process that
records them (SPEC §12: ordered by turn, epoch and position), and equal arguments are equal for
the journal at any size (SPEC §24)."""

from __future__ import annotations

from typing import Any

import pytest

from fastgate import ExecutionContext
from fastgate.durable.store import args_digest
from tests.durable.conftest import Backend
from tests.pipeline_kit import executor, tool


async def _calls(backend: Backend, session: str, numbers: list[int], turn: str | None) -> None:
    """``numbers`` as calls of one fresh executor and store, as a process would make them."""
    store = backend.open()
    ex = executor(tool("echo", lambda a, c: a["text"]), store=store)
    try:
        for n in numbers:
            ctx = ExecutionContext(session_id=session, turn_id=turn)
            result = await ex.execute("echo", {"text": str(n)}, ctx)
            assert result.ok, result.error
    finally:
        ex.dispose()
        await store.close()


@pytest.mark.parametrize("turn", [None, "turn-1"])
async def test_calls_recorded_after_a_restart_come_after_the_earlier_ones(
    backend: Backend, turn: str | None
) -> None:
    # The first process also records another session's calls (a counter shared by sessions
    # once made the second session's positions larger than a new process's).
    await _calls(backend, "other", [10, 11, 12, 13, 14], turn)
    await _calls(backend, "s", [1, 2], turn)
    await _calls(backend, "s", [3, 4], turn)  # the restarted process
    store = backend.open()
    try:
        calls = await store.load("s")
    finally:
        await store.close()
    assert [call.args["text"] for call in calls] == ["1", "2", "3", "4"]


@pytest.mark.parametrize("number", [2**63, 2**64, 2**70, -(2**63) - 1, 10**300])
def test_an_integral_float_is_the_integer_it_equals_at_any_size(number: int) -> None:
    as_float = float(number)
    as_int = int(as_float)  # the integer the float holds (10**300 is not exactly one)
    plain: dict[str, Any] = {"n": as_int}
    assert args_digest(plain) == args_digest({"n": as_float})
    assert args_digest({"deep": [plain]}) == args_digest({"deep": [{"n": as_float}]})
    assert args_digest(plain) != args_digest({"n": as_int + 1})
