"""The core's leased limits (cluster mode), the same in the pure and the compiled build."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

from fastgate._core import READY
from tests.core_impls import implementations


def _nothing(*args: object) -> None:
    return None


def _core(impl: ModuleType, now: list[float]) -> Any:
    return impl.SchedulerCore(
        READY, _nothing, _nothing, lambda: now[0], _nothing, 8, 4, [8, 8, 8], [("p", 4)], 100, 0.0
    )


@pytest.mark.parametrize("impl", implementations("_sched"), ids=lambda m: m.__name__)
def test_a_session_admits_within_its_share_and_the_lease(impl: ModuleType) -> None:
    now = [100.0]
    core = _core(impl, now)
    caps: dict[object, int] = {"a": 2}
    assert core.set_limits(3, [3, 3, 3], [("p", 1)], caps, 110.0) is None
    assert core.try_acquire("a", 0) and core.try_acquire("a", 1)
    assert not core.try_acquire("a", 0)  # its share is 2 (its session_limit 4)
    assert not core.try_acquire("b", 0)  # no share at all
    caps["b"] = 1
    assert core.try_acquire("b", 0)
    assert not core.try_acquire_in_pool("b", 0, 1)  # global allotment 3 reached first
    core.release("b", 0)
    now[0] = 110.0  # the lease ran out on the worker's clock: nothing new
    caps["b"] = 5
    assert not core.try_acquire("b", 0)


@pytest.mark.parametrize("impl", implementations("_sched"), ids=lambda m: m.__name__)
def test_a_slot_released_after_the_lease_ran_out_admits_no_waiter(impl: ModuleType) -> None:
    # A frozen worker resumes: its calls from before finish, but nobody queued behind them may
    # take their slots on the lapsed lease.
    now = [100.0]
    core = _core(impl, now)
    core.set_limits(1, [1, 1, 1], [("p", 1)], {"a": 1}, 110.0)
    assert core.try_acquire("a", 0)
    waiter, displaced = core.enqueue("a", 0, "queued")
    assert waiter is not None and displaced is None
    now[0] = 111.0
    assert not core.release("a", 0)
    assert core.queued == 1 and core.in_flight == 0
    granted = core.set_limits(1, [1, 1, 1], [("p", 1)], {"a": 1}, 121.0)  # a new lease
    assert granted is not None and [w.owner for w in granted] == ["queued"]


@pytest.mark.parametrize("impl", implementations("_sched"), ids=lambda m: m.__name__)
def test_a_raised_allotment_admits_waiters_round_robin(impl: ModuleType) -> None:
    now = [0.0]
    core = _core(impl, now)
    core.set_limits(0, [0, 0, 0], [("p", 0)], {}, 0.0)
    waiters = [core.enqueue(s, 0, (s, i))[0] for i in range(2) for s in ("a", "b")]
    assert all(w is not None for w in waiters)
    granted = core.set_limits(3, [8, 8, 8], [("p", 4)], {"a": 1, "b": 4}, 10.0)
    assert [w.owner for w in granted] == [("a", 0), ("b", 0), ("b", 1)]
    # A fallback without a lease (caps None): the session limit alone, the lease not checked.
    granted = core.set_limits(4, [8, 8, 8], [("p", 1)], None, 0.0)
    assert [w.owner for w in granted] == [("a", 1)]
    assert core.kind_counts()[0][0] == 4


@pytest.mark.parametrize("impl", implementations("_sched"), ids=lambda m: m.__name__)
def test_a_closed_core_ignores_new_allotments(impl: ModuleType) -> None:
    core = _core(impl, [0.0])
    core.close()
    assert core.set_limits(8, [8, 8, 8], [], None, 0.0) is None
    assert not core.try_acquire("a", 0)
