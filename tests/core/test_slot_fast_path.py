"""A slot in no pool takes and gives back its place without calling the core's ``try_acquire`` and
``release`` (the check is written out in ``Slot``); it must decide and count exactly as they do.

A hypothesis state machine drives two cores of each implementation in lockstep, one through
``try_acquire``/``release``, one through slots' ``__aenter__``/``__aexit__``, under changing
limits, cluster leases and a close, and compares what each admitted and what each counts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from fastgate import _core
from fastgate.errors import ResourceExhausted, SchedulerClosed
from tests.core_impls import implementations

SESSIONS = ("a", "b", "c")
NOW = 100.0


class _Loop:
    """What ``SchedulerCore.queue`` asks of a loop before it refuses (``max_queue`` is 0)."""

    def create_future(self) -> object:
        return object()


def _refuse(*args: object) -> None:
    raise AssertionError("nothing may queue: max_queue is 0")


def _core_of(impl: Any, ready: object) -> Any:
    return impl.SchedulerCore(
        ready, _refuse, _Loop, lambda: NOW, _refuse, 4, 2, [3, 2, 4], [], 0, 0.0
    )


def _counts(core: Any) -> tuple[object, ...]:
    in_flight_by_kind, _ = core.kind_counts()
    in_flight_by_session, _ = core.session_counts()
    return (core.in_flight, in_flight_by_kind, in_flight_by_session, core.admitted)


class SlotRouteMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.ready = object()
        # (core driven through the core's methods, core driven through slots) per implementation
        self.pairs = [
            (_core_of(impl, self.ready), _core_of(impl, self.ready))
            for impl in implementations("_sched")
        ]
        self.held: list[tuple[str, int, list[Any]]] = []  # (session, kind, the slot per pair)

    @rule(session=st.sampled_from(SESSIONS), kind=st.integers(0, 2))
    def enter(self, session: str, kind: int) -> None:
        slots, decisions = [], []
        for by_core, by_slot in self.pairs:
            expected = bool(by_core.try_acquire(session, kind))
            slot = by_slot.slot(session, kind)
            try:
                entered = slot.__aenter__()
            except (ResourceExhausted, SchedulerClosed):
                admitted = False
            else:
                assert entered is self.ready
                admitted = True
            assert admitted == expected, (session, kind)
            slots.append(slot)
            decisions.append(admitted)
        assert len(set(decisions)) == 1  # every implementation decided alike
        if decisions[0]:
            self.held.append((session, kind, slots))

    @precondition(lambda self: self.held)
    @rule(pick=st.integers(0, 1_000))
    def leave(self, pick: int) -> None:
        session, kind, slots = self.held.pop(pick % len(self.held))
        for (by_core, _), slot in zip(self.pairs, slots, strict=True):
            assert by_core.release(session, kind) is None  # nobody ever queues
            assert slot.__aexit__(None, None, None) is self.ready
            with pytest.raises(RuntimeError):
                slot.__aexit__(None, None, None)

    @rule(
        global_limit=st.integers(0, 5),
        kind_limits=st.lists(st.integers(0, 4), min_size=3, max_size=3),
        caps=st.none() | st.dictionaries(st.sampled_from(SESSIONS), st.integers(0, 3)),
        lease_left=st.sampled_from((-1.0, 5.0)),
    )
    def new_limits(
        self,
        global_limit: int,
        kind_limits: list[int],
        caps: dict[str, int] | None,
        lease_left: float,
    ) -> None:
        """Cluster mode's leased allotment (or its fallback): slots held stay valid."""
        for pair in self.pairs:
            for core in pair:
                core.set_limits(global_limit, kind_limits, [], caps, NOW + lease_left)

    @rule()
    def close(self) -> None:
        for pair in self.pairs:
            for core in pair:
                core.close()

    @invariant()
    def both_routes_count_alike(self) -> None:
        for by_core, by_slot in self.pairs:
            assert _counts(by_core) == _counts(by_slot)

    def teardown(self) -> None:
        while self.held:
            self.leave(0)
        for _, by_slot in self.pairs:
            assert _counts(by_slot)[:3] == (0, [0, 0, 0], {})
            assert by_slot.queues == {}


SlotRouteMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40)
test_a_slot_decides_and_counts_as_the_core_does = SlotRouteMachine.TestCase


async def test_the_ready_awaitable_completes_at_once_however_often_it_is_awaited() -> None:
    """Entering at once never yields to the loop: a task that awaits the ready awaitable many
    times runs to its end in one step, before a callback scheduled ahead of it."""
    order: list[str] = []
    ready: Awaitable[object] = _core.READY

    async def enter_often() -> None:
        for _ in range(1_000):
            assert await ready is None
        order.append("awaited")

    loop = asyncio.get_running_loop()
    task = loop.create_task(enter_often())
    loop.call_soon(order.append, "next callback")
    await task
    assert order == ["awaited", "next callback"]
