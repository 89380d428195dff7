"""``max_queue`` shared fairly among the sessions waiting (SPEC §8.2): a session under its share
of a full queue is still queued, the newest waiter of the session with the most giving way."""

from __future__ import annotations

import pytest

from fastgate import ConcurrencyScheduler, ResourceExhausted, SchedulerLimits, ToolKind
from tests.admission.test_scheduler import Holder, _settle

W = ToolKind.WRITE


def _one_at_a_time(max_queue: int) -> ConcurrencyScheduler:
    return ConcurrencyScheduler(
        SchedulerLimits(global_limit=1, session_limit=1, max_queue=max_queue)
    )


def _queue_full(holder: Holder) -> bool:
    """Whether the call ended refused or displaced: ResourceExhausted, reason queue_full."""
    if not holder.task.done() or holder.task.cancelled():
        return False
    exc = holder.task.exception()
    return isinstance(exc, ResourceExhausted) and exc.reason == "queue_full"


class Calls:
    """Named calls that each hold their slot until released; ``log`` is the admission order.
    A call's name is its session followed by its number among all the calls made."""

    def __init__(self, sched: ConcurrencyScheduler) -> None:
        self.sched = sched
        self.log: list[str] = []
        self.by_name: dict[str, Holder] = {}

    def call(self, session: str, kind: ToolKind = W, pool: str | None = None) -> Holder:
        name = f"{session}{len(self.by_name)}"
        holder = Holder(self.sched, self.log, name, session, kind, pool=pool)
        self.by_name[name] = holder
        return holder

    async def release_current(self) -> None:
        await self.by_name[self.log[-1]].finish()
        await _settle()

    async def drain(self) -> None:
        """Release every holder in turn until nobody holds or waits."""
        while self.sched.stats().in_flight:
            await self.release_current()
        for holder in self.by_name.values():
            assert holder.task.done()
            if not holder.task.cancelled():
                holder.task.exception()  # retrieved: a refused call is part of the test
        stats = self.sched.stats()
        assert stats.queued == 0 and stats.in_flight_by_session == {}


async def test_a_newcomer_at_a_queue_one_session_filled_is_queued_and_served_in_turn() -> None:
    """The issue's case: 40 calls of one session fill the queue; another session's first call
    is queued (the flood's newest waiter gives way) and admitted after one of the flood's."""
    calls = Calls(_one_at_a_time(max_queue=8))
    flood = [calls.call("A") for _ in range(40)]
    await _settle()
    assert calls.log == ["A0"]
    assert all(_queue_full(h) for h in flood[9:])  # beyond the queue: refused at once
    newcomer = calls.call("B")
    await _settle()
    assert not newcomer.task.done()  # queued, not refused
    assert _queue_full(flood[8])  # the flood's newest waiter gave its place
    assert not any(h.task.done() for h in flood[:8])
    stats = calls.sched.stats()
    assert stats.queued == 8 and stats.queued_by_session == {"A": 7, "B": 1}
    assert stats.rejected == 32 and stats.displaced == 1
    await calls.release_current()
    await calls.release_current()
    assert calls.log == ["A0", "A1", "B40"]  # round-robin: B's turn comes after one of A's
    await calls.drain()
    assert calls.log == ["A0", "A1", "B40", *(f"A{i}" for i in range(2, 8))]


async def test_a_session_is_served_in_turn_while_another_keeps_the_queue_full() -> None:
    """An agent making one call after another beside a flood that asks for more than its share
    after every admission: each of the agent's calls is queued, none refused, and waits for at
    most one of the flood's."""
    calls = Calls(_one_at_a_time(max_queue=8))
    for _ in range(20):
        calls.call("A")
    await _settle()
    for _ in range(6):
        for _ in range(5):
            calls.call("A")
        await _settle()
        assert calls.sched.stats().queued_by_session == {"A": 8}
        mine = calls.call("B")
        await _settle()
        assert not mine.task.done() and calls.sched.stats().queued == 8
        waited = 0
        while not calls.log[-1].startswith("B"):
            await calls.release_current()
            waited += 1
        assert waited <= 2  # the flood's call holding the slot, then one of its waiters
        await calls.release_current()  # the agent's call is done; it makes its next one
        assert mine.task.done() and mine.task.exception() is None
    stats = calls.sched.stats()
    assert stats.displaced == 6  # each of B's calls took the place of one of A's
    await calls.drain()


async def test_a_full_queue_ends_shared_max_min_and_a_session_at_its_share_is_refused() -> None:
    calls = Calls(_one_at_a_time(max_queue=8))
    blocker = calls.call("Z")
    await _settle()
    a = [calls.call("A") for _ in range(4)]
    await _settle()
    b = [calls.call("B") for _ in range(5)]  # B's fifth finds the queue full at 4 and 4
    await _settle()
    assert _queue_full(b[4]) and calls.sched.stats().displaced == 0
    c = [calls.call("C") for _ in range(3)]
    await _settle()
    # C's first displaces the newest of B (4 waiters, and B got there after A); its second
    # the newest of A (now alone with 4); its third would leave C with as many as the others.
    assert _queue_full(b[3]) and _queue_full(a[3]) and _queue_full(c[2])
    assert not any(h.task.done() for h in (*a[:3], *b[:3], *c[:2]))
    stats = calls.sched.stats()
    assert stats.queued_by_session == {"A": 3, "B": 3, "C": 2}
    assert stats.displaced == 2 and stats.rejected == 4
    assert not blocker.task.done()
    await calls.drain()


async def test_a_session_with_one_less_than_the_most_is_refused_not_swapped() -> None:
    # Taking a place would only make the two sessions trade counts.
    calls = Calls(_one_at_a_time(max_queue=3))
    calls.call("Z")
    await _settle()
    a = [calls.call("A") for _ in range(2)]
    b = [calls.call("B") for _ in range(2)]
    await _settle()
    assert not any(h.task.done() for h in a) and not b[0].task.done() and _queue_full(b[1])
    assert calls.sched.stats().displaced == 0
    await calls.drain()


async def test_without_a_queue_nobody_displaces_anyone() -> None:
    calls = Calls(_one_at_a_time(max_queue=0))
    calls.call("A")
    await _settle()
    b = calls.call("B")
    await _settle()
    assert _queue_full(b) and calls.sched.stats().displaced == 0
    await calls.drain()


@pytest.mark.parametrize("cancelled", ["before", "after"])
async def test_a_displaced_waiter_cancelled_at_the_same_moment_leaks_nothing(
    cancelled: str,
) -> None:
    """The newest waiter's task is cancelled just before another session takes its place (its
    future already cancelled, its task not yet resumed) or just after (its future already
    failed): it ends cancelled, its place is taken once, and nothing leaks."""
    calls = Calls(_one_at_a_time(max_queue=2))
    calls.call("A")
    await _settle()
    first, newest = calls.call("A"), calls.call("A")
    await _settle()
    if cancelled == "before":
        newest.task.cancel()
    slot = calls.sched.slot("B", W)
    entering = slot.__aenter__()  # at the full queue, in this same step: takes newest's place
    stats = calls.sched.stats()
    assert stats.displaced == 1 and stats.queued_by_session == {"A": 1, "B": 1}
    if cancelled == "after":
        newest.task.cancel()
    await _settle()
    assert newest.task.cancelled() and not first.task.done()
    assert calls.sched.stats().queued == 2
    await calls.release_current()
    await calls.release_current()
    assert calls.log == ["A0", "A1"]
    await entering  # B's turn: nobody else waits
    assert calls.sched.stats().in_flight_by_session == {"B": 1}
    await slot.__aexit__(None, None, None)
    await calls.drain()


async def test_the_newest_waiter_of_all_its_kinds_and_pools_gives_way() -> None:
    sched = ConcurrencyScheduler(
        SchedulerLimits(global_limit=1, session_limit=1, pool_limits={"mcp": 1}, max_queue=4)
    )
    calls = Calls(sched)
    calls.call("Z")
    await _settle()
    lanes = [
        calls.call("A", ToolKind.READ_ONLY),
        calls.call("A", ToolKind.EXECUTE, pool="mcp"),
        calls.call("A", ToolKind.WRITE),
        calls.call("A", ToolKind.EXECUTE, pool="mcp"),  # the newest, in a lane with another
    ]
    await _settle()
    b = calls.call("B", ToolKind.READ_ONLY)
    await _settle()
    assert _queue_full(lanes[3]) and not any(h.task.done() for h in lanes[:3])
    assert not b.task.done()
    stats = sched.stats()
    assert stats.queued_by_pool == {"mcp": 1} and stats.queued_by_kind["EXECUTE"] == 1
    await calls.drain()
    assert sorted(calls.log) == ["A1", "A2", "A3", "B5", "Z0"]
