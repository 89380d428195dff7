"""``Deadlines``: one loop timer per time budget instead of one per call, with exact expiry."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from fastgate.admission.deadlines import Deadlines, Expiring


class Call(Expiring):
    """Records its expiry; ``fails`` makes ``expire()`` raise after recording it."""

    def __init__(self, fails: bool = False) -> None:
        self.expired = 0
        self.fails = fails

    def expire(self) -> None:
        self.expired += 1
        if self.fails:
            raise RuntimeError("expire failed")


class FakeLoop:
    """A loop clock moved by hand; ``call_at`` timers run in time order as it advances."""

    def __init__(self) -> None:
        self.now = 0.0
        self._timers: list[tuple[float, int, FakeTimer]] = []
        self._order = itertools.count()
        self.armed = 0  # timers ever made
        self.errors: list[dict[str, Any]] = []

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Any, *args: Any) -> FakeTimer:
        timer = FakeTimer(when, callback, args)
        heapq.heappush(self._timers, (when, next(self._order), timer))
        self.armed += 1
        return timer

    def call_exception_handler(self, context: dict[str, Any]) -> None:
        self.errors.append(context)

    def advance(self, to: float) -> None:
        while self._timers and self._timers[0][0] <= to:
            when, _, timer = heapq.heappop(self._timers)
            if not timer.cancelled:
                self.now = max(self.now, when)
                timer.callback(*timer.args)
        self.now = max(self.now, to)

    def live_timers(self) -> int:
        return sum(not timer.cancelled for _, _, timer in self._timers)


class FakeTimer:
    def __init__(self, when: float, callback: Any, args: tuple[Any, ...]) -> None:
        self.when, self.callback, self.args = when, callback, args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


def deadlines(loop: FakeLoop) -> Deadlines:
    return Deadlines(loop)  # type: ignore[arg-type]


def test_many_calls_with_one_budget_share_one_timer() -> None:
    loop = FakeLoop()
    d = deadlines(loop)
    tokens = [Call() for _ in range(100)]
    for index, token in enumerate(tokens):
        loop.now = index * 0.01
        d.add(60.0, token)
    assert loop.armed == 1 and d.pending() == 100
    for token in tokens[:50]:
        d.remove(60.0, token)  # ended in time: never cancelled
    loop.advance(60.745)  # past the deadlines of tokens 0..74 (0..49 ended in time)
    assert not any(t.expired for t in tokens[:50])
    assert [t.expired for t in tokens[50:]] == [int(50 + i <= 74) for i in range(50)]
    loop.advance(200.0)
    assert all(t.expired == 1 for t in tokens[50:])
    assert d.pending() == 0 and loop.live_timers() == 0


def test_a_call_that_ends_early_leaves_the_timer_to_fire_once_and_rearm() -> None:
    loop = FakeLoop()
    d = deadlines(loop)
    first, second = Call(), Call()
    d.add(10.0, first)  # deadline 10
    loop.now = 4.0
    d.add(10.0, second)  # deadline 14: the timer stays armed for 10
    d.remove(10.0, first)
    loop.advance(10.0)
    assert [first.expired, second.expired, loop.armed] == [0, 0, 2]  # fired for nothing, re-armed
    loop.advance(13.999)
    assert [first.expired, second.expired] == [0, 0]
    loop.advance(14.0)
    assert [first.expired, second.expired] == [0, 1]


def test_budgets_expire_independently_and_an_idle_budget_keeps_nothing() -> None:
    loop = FakeLoop()
    d = deadlines(loop)
    short, long = Call(), Call()
    d.add(1.0, short)
    d.add(5.0, long)
    loop.advance(1.0)
    assert [short.expired, long.expired] == [1, 0]
    loop.advance(5.0)
    assert [short.expired, long.expired] == [1, 1]
    assert d._lanes == {}  # both lanes dropped once idle


def test_an_expiry_that_raises_does_not_spare_the_other_calls() -> None:
    loop = FakeLoop()
    d = deadlines(loop)
    bad, good = Call(fails=True), Call()
    d.add(1.0, bad)
    d.add(1.0, good)
    loop.advance(1.0)
    assert [bad.expired, good.expired] == [1, 1]
    assert [type(e["exception"]) for e in loop.errors] == [RuntimeError]


def test_a_timer_the_loop_runs_a_hair_early_still_expires_its_call() -> None:
    """asyncio runs a timer up to its clock resolution early: what the loop judged due is due."""
    loop = FakeLoop()
    d = deadlines(loop)
    call = Call()
    d.add(1.0, call)
    lane = d._lanes[1.0]
    loop.now = 0.9999999
    d._expire(lane)
    assert call.expired == 1


# -- the state machine against a model ----------------------------------------------------------

BUDGETS = st.sampled_from([0.5, 1.0, 2.5])
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), BUDGETS),
        st.tuples(st.just("end"), st.integers(0, 40)),
        st.tuples(st.just("wait"), st.floats(0.0, 1.5)),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(STEPS)
def test_exactly_the_calls_past_their_deadline_are_cancelled(steps: list[Any]) -> None:
    """Model: a call expires, once, iff it had not ended when its own start + budget came."""
    loop = FakeLoop()
    d = deadlines(loop)
    calls: list[tuple[Call, float, float]] = []  # call, budget, deadline
    ended: dict[int, float] = {}  # call index -> time it ended
    for step in steps:
        if step[0] == "add":
            call = Call()
            d.add(step[1], call)
            calls.append((call, step[1], loop.now + step[1]))
        elif step[0] == "end":
            index = step[1]
            if index < len(calls) and index not in ended and not calls[index][0].expired:
                call, budget, _ = calls[index]
                d.remove(budget, call)
                ended[index] = loop.now
        else:
            loop.advance(loop.now + step[1])
        for index, (call, _, deadline) in enumerate(calls):
            due = deadline <= loop.now and index not in ended
            assert call.expired == int(due), (index, deadline, loop.now)
    live = [i for i, (c, _, _) in enumerate(calls) if i not in ended and not c.expired]
    assert d.pending() == len(live)
    loop.advance(loop.now + 10.0)  # every remaining deadline passes
    assert d.pending() == 0 and loop.live_timers() == 0
    assert all(call.expired == 1 for index, (call, _, _) in enumerate(calls) if index not in ended)


async def test_on_a_real_loop_a_call_past_its_budget_expires() -> None:
    loop = asyncio.get_running_loop()
    d = Deadlines(loop)
    done = asyncio.Event()

    class Signalled(Call):
        def expire(self) -> None:
            super().expire()
            done.set()

    due, kept = Signalled(), Call()
    d.add(0.01, due)
    d.add(0.01, kept)
    d.remove(0.01, kept)
    await asyncio.wait_for(done.wait(), 5)
    assert [due.expired, kept.expired] == [1, 0] and d.pending() == 0
