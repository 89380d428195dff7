"""ConcurrencyScheduler: three-dimensional limits, round-robin fairness, races (SPEC §8.2)."""

from __future__ import annotations

import asyncio
import math

import pytest

from fastgate import (
    ConcurrencyScheduler,
    OwnerCancelled,
    ResourceExhausted,
    SchedulerClosed,
    SchedulerLimits,
    ToolKind,
    default_scheduler,
)

R, W, X = ToolKind.READ_ONLY, ToolKind.WRITE, ToolKind.EXECUTE


def limits(
    global_limit: int = 32,
    session_limit: int = 10,
    r: int = 32,
    w: int = 8,
    x: int = 16,
    **kw: object,
) -> SchedulerLimits:
    return SchedulerLimits(global_limit, session_limit, {R: r, W: w, X: x}, **kw)  # type: ignore[arg-type]


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


class Holder:
    """A task that takes a slot, logs its name, and holds the slot until released."""

    def __init__(
        self,
        sched: ConcurrencyScheduler,
        log: list[str],
        name: str,
        session: str,
        kind: ToolKind = W,
        owner: object = None,
    ) -> None:
        self.release = asyncio.Event()
        self.task = asyncio.create_task(self._run(sched, log, name, session, kind, owner))

    async def _run(
        self,
        sched: ConcurrencyScheduler,
        log: list[str],
        name: str,
        session: str,
        kind: ToolKind,
        owner: object,
    ) -> None:
        async with sched.slot(session, kind, owner):
            log.append(name)
            await self.release.wait()

    async def finish(self) -> None:
        self.release.set()
        await self.task


def test_defaults_match_the_spec() -> None:
    lim = SchedulerLimits()
    assert (lim.global_limit, lim.session_limit, lim.max_queue, lim.queue_timeout) == (
        32,
        10,
        1024,
        30.0,
    )
    assert dict(lim.kind_limits) == {R: 32, W: 8, X: 16}


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"global_limit": 0}, "global_limit"),
        ({"global_limit": -3}, "global_limit"),
        ({"session_limit": 0}, "session_limit"),
        ({"session_limit": True}, "session_limit"),
        ({"max_queue": -1}, "max_queue"),
        ({"kind_limits": {"DELETE": 3}}, "kind_limits"),
        ({"kind_limits": {W: 0}}, "kind_limits[WRITE]"),
        ({"kind_limits": {7: 1}}, "kind_limits"),
        ({"queue_timeout": 0}, "queue_timeout"),
        ({"queue_timeout": -1.0}, "queue_timeout"),
        ({"queue_timeout": math.nan}, "queue_timeout"),
        ({"queue_timeout": "30"}, "queue_timeout"),
    ],
)
def test_nonsense_limits_raise_value_error_naming_the_field(
    kwargs: dict[str, object], field: str
) -> None:
    with pytest.raises(ValueError, match=field.replace("[", r"\[").replace("]", r"\]")):
        SchedulerLimits(**kwargs)  # type: ignore[arg-type]


def test_kind_limits_accept_names_and_cap_missing_kinds_by_global() -> None:
    lim = SchedulerLimits(global_limit=5, kind_limits={"write": 2})  # type: ignore[dict-item]
    assert lim.limit_for(W) == 2 and lim.limit_for(R) == 5


async def test_unknown_kind_at_slot_is_a_value_error() -> None:
    sched = ConcurrencyScheduler()
    with pytest.raises(ValueError, match="unknown tool kind"):
        sched.slot("s", 3)
    with pytest.raises((ValueError, TypeError)):
        sched.slot("s", "WRITE")


async def test_uncontended_slot_never_yields_to_the_loop() -> None:
    sched = ConcurrencyScheduler()
    ran: list[int] = []
    asyncio.get_running_loop().call_soon(ran.append, 1)
    for kind in ToolKind:
        async with sched.slot("s1", kind):
            pass
    assert ran == []
    assert sched.stats().admitted == 3 and sched.stats().in_flight == 0


async def test_each_dimension_limits_admission() -> None:
    sched = ConcurrencyScheduler(limits(global_limit=3, session_limit=2, w=1))
    log: list[str] = []
    a = Holder(sched, log, "a-w", "A", W)
    b = Holder(sched, log, "a-r", "A", R)
    c = Holder(sched, log, "a-r2", "A", R)  # session limit 2
    d = Holder(sched, log, "b-w", "B", W)  # kind limit WRITE 1
    e = Holder(sched, log, "b-r", "B", R)  # fits: global 3
    f = Holder(sched, log, "c-r", "C", R)  # global limit 3
    await _settle()
    assert log == ["a-w", "a-r", "b-r"]
    stats = sched.stats()
    assert stats.in_flight == 3 and stats.queued == 3
    assert stats.in_flight_by_session == {"A": 2, "B": 1}
    assert stats.queued_by_kind == {"READ_ONLY": 2, "WRITE": 1, "EXECUTE": 0}
    for h in (a, b, c, d, e, f):
        await h.finish()
    assert sorted(log) == sorted(["a-w", "a-r", "b-r", "a-r2", "b-w", "c-r"])
    assert sched.stats().in_flight == 0 and sched.stats().queued == 0


async def test_round_robin_across_sessions_fifo_within() -> None:
    sched = ConcurrencyScheduler(limits(global_limit=1))
    log: list[str] = []

    async def quick(name: str, session: str) -> None:
        async with sched.slot(session, W):
            log.append(name)

    blocker = Holder(sched, log, "blocker", "Z")
    await _settle()
    names = [
        ("A0", "A"),
        ("A1", "A"),
        ("A2", "A"),
        ("A3", "A"),
        ("B0", "B"),
        ("B1", "B"),
        ("C0", "C"),
        ("C1", "C"),
    ]
    tasks = [asyncio.create_task(quick(n, s)) for n, s in names]
    await _settle()
    await blocker.finish()
    await asyncio.gather(*tasks)
    assert log == ["blocker", "A0", "B0", "C0", "A1", "B1", "C1", "A2", "A3"]


async def test_waiter_blocked_only_by_its_kind_does_not_hold_back_other_kinds() -> None:
    sched = ConcurrencyScheduler(limits(global_limit=4, session_limit=4, x=1))
    log: list[str] = []
    first_x = Holder(sched, log, "x1", "A", X)
    await _settle()
    blocked_x = Holder(sched, log, "x2", "A", X)  # queued: EXECUTE is full
    reader = Holder(sched, log, "r1", "A", R)  # same session, later, other kind: goes first
    await _settle()
    assert log == ["x1", "r1"]
    await first_x.finish()
    await _settle()
    assert log == ["x1", "r1", "x2"]
    await blocked_x.finish()
    await reader.finish()


async def test_cancelled_while_queued_is_removed_and_order_kept() -> None:
    sched = ConcurrencyScheduler(limits(global_limit=1))
    log: list[str] = []
    blocker = Holder(sched, log, "blocker", "Z")
    await _settle()
    w1 = Holder(sched, log, "w1", "A")
    w2 = Holder(sched, log, "w2", "A")
    w3 = Holder(sched, log, "w3", "A")
    await _settle()
    w2.task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await w2.task
    assert sched.stats().queued == 2
    await blocker.finish()
    await _settle()
    await w1.finish()
    await _settle()
    await w3.finish()
    assert log == ["blocker", "w1", "w3"]
    assert sched.stats().in_flight == 0 and sched.stats().queued == 0


async def test_cancelled_after_grant_before_resuming_passes_the_slot_on() -> None:
    sched = ConcurrencyScheduler(limits(global_limit=1))
    log: list[str] = []
    hold = asyncio.Event()
    victim: Holder | None = None

    async def holder() -> None:
        async with sched.slot("Z", W):
            await hold.wait()
        assert victim is not None
        victim.task.cancel()  # the slot was just granted to it; it has not resumed yet

    first = asyncio.create_task(holder())
    await _settle()
    victim = Holder(sched, log, "victim", "A")
    nxt = Holder(sched, log, "next", "B")
    await _settle()
    hold.set()
    await first
    with pytest.raises(asyncio.CancelledError):
        await victim.task
    await _settle()
    assert log == ["next"]
    await nxt.finish()
    stats = sched.stats()
    assert stats.in_flight == 0 and stats.queued == 0


async def test_cancelled_head_waiter_wakes_those_behind_it() -> None:
    sched = ConcurrencyScheduler(limits(global_limit=1))
    log: list[str] = []
    hold = asyncio.Event()
    head: Holder | None = None

    async def holder() -> None:
        async with sched.slot("Z", W):
            await hold.wait()
            assert head is not None
            head.task.cancel()  # the head's future is cancelled, its task has not run yet
        # leaving the slot now grants it to the cancelled head, which must pass it on

    first = asyncio.create_task(holder())
    await _settle()
    head = Holder(sched, log, "head", "A")
    behind = Holder(sched, log, "behind", "A")
    await _settle()
    hold.set()
    await first
    with pytest.raises(asyncio.CancelledError):
        await head.task
    await _settle()
    assert log == ["behind"]
    await behind.finish()
    assert sched.stats().in_flight == 0


async def test_release_then_immediate_reacquire_never_jumps_the_queue() -> None:
    sched = ConcurrencyScheduler(limits(global_limit=1))
    order: list[str] = []
    hold = asyncio.Event()

    async def barger() -> None:
        async with sched.slot("A", W):
            order.append("first")
            await hold.wait()
        async with sched.slot("A", W):
            order.append("again")

    t1 = asyncio.create_task(barger())
    await _settle()
    waiter = Holder(sched, order, "waiter", "A")
    await _settle()
    hold.set()
    await _settle()
    assert order == ["first", "waiter"]
    await waiter.finish()
    await t1
    assert order == ["first", "waiter", "again"]


async def test_close_fails_every_waiter_with_scheduler_closed() -> None:
    sched = ConcurrencyScheduler(limits(global_limit=1))
    log: list[str] = []
    blocker = Holder(sched, log, "blocker", "Z")
    await _settle()
    waiters = [Holder(sched, log, f"w{i}", f"S{i % 3}", ToolKind(i % 3)) for i in range(6)]
    await _settle()
    await sched.close()
    for w in waiters:
        with pytest.raises(SchedulerClosed):
            await w.task
    with pytest.raises(SchedulerClosed):
        async with sched.slot("new", R):
            pass
    await blocker.finish()  # a held slot is released normally after close
    assert log == ["blocker"]
    assert sched.stats().in_flight == 0 and sched.stats().queued == 0


async def test_cancel_owner_touches_only_its_owners_waiters() -> None:
    sched = ConcurrencyScheduler(limits(global_limit=1))
    log: list[str] = []
    mine, theirs = object(), object()
    blocker = Holder(sched, log, "blocker", "Z", owner=mine)
    await _settle()
    m1 = Holder(sched, log, "m1", "A", owner=mine)
    t1 = Holder(sched, log, "t1", "A", owner=theirs)
    m2 = Holder(sched, log, "m2", "B", owner=mine)
    await _settle()
    assert sched.cancel_owner(mine) == 2
    for h in (m1, m2):
        with pytest.raises(OwnerCancelled):
            await h.task
    assert not blocker.task.done()  # a held slot is not touched
    await blocker.finish()
    await _settle()
    await t1.finish()
    assert log == ["blocker", "t1"]


async def test_full_queue_is_resource_exhausted() -> None:
    sched = ConcurrencyScheduler(limits(global_limit=1, max_queue=1))
    log: list[str] = []
    blocker = Holder(sched, log, "blocker", "Z")
    await _settle()
    queued = Holder(sched, log, "queued", "A")
    await _settle()
    with pytest.raises(ResourceExhausted) as info:
        async with sched.slot("B", R):
            pass
    assert info.value.reason == "queue_full"
    assert sched.stats().rejected == 1
    await blocker.finish()
    await _settle()
    await queued.finish()


async def test_queue_timeout_is_resource_exhausted_and_leaks_nothing() -> None:
    sched = ConcurrencyScheduler(limits(global_limit=1, queue_timeout=0.02))
    log: list[str] = []
    blocker = Holder(sched, log, "blocker", "Z")
    await _settle()
    with pytest.raises(ResourceExhausted) as info:
        async with sched.slot("A", W):
            pass
    assert info.value.reason == "queue_timeout" and info.value.retry_after == 0.02
    assert sched.stats().queued == 0 and sched.stats().timed_out == 1
    await blocker.finish()
    async with sched.slot("A", W):  # capacity is intact
        assert sched.stats().in_flight == 1


async def test_releasing_twice_is_a_clear_error_without_corruption() -> None:
    sched = ConcurrencyScheduler()
    slot = sched.slot("s", W)
    async with slot:
        pass
    with pytest.raises(RuntimeError, match="without being held"):
        await slot.__aexit__(None, None, None)
    with pytest.raises(RuntimeError, match="only once"):
        async with slot:
            pass
    stats = sched.stats()
    assert stats.in_flight == 0 and stats.in_flight_by_session == {}


async def test_exception_inside_slot_releases_it() -> None:
    sched = ConcurrencyScheduler(limits(global_limit=1))
    with pytest.raises(KeyError):
        async with sched.slot("s", W):
            raise KeyError("boom")
    assert sched.stats().in_flight == 0


async def test_wait_statistics_count_queued_admissions() -> None:
    sched = ConcurrencyScheduler(limits(global_limit=1))
    log: list[str] = []
    blocker = Holder(sched, log, "b", "Z")
    await _settle()
    w = Holder(sched, log, "w", "A")
    await _settle()
    await blocker.finish()
    await _settle()
    await w.finish()
    stats = sched.stats()
    assert stats.admitted == 2 and stats.admitted_after_wait == 1
    assert stats.wait_p99_ms >= stats.wait_p50_ms >= 0.0


async def test_default_scheduler_is_shared_and_replaced_after_close() -> None:
    first = default_scheduler()
    assert default_scheduler() is first
    await first.close()
    second = default_scheduler()
    assert second is not first and not second.closed


def test_a_wait_that_cannot_start_queues_nothing() -> None:
    # Entering a full scheduler outside a running loop is a programming error; it must fail
    # before the request is queued, or a phantom waiter would later be granted a slot for good.
    sched = ConcurrencyScheduler(SchedulerLimits(global_limit=1))
    held = sched.slot("s1", ToolKind.READ_ONLY)
    held.__aenter__()  # uncontended: taken synchronously, no loop needed
    with pytest.raises(RuntimeError):
        sched.slot("s2", ToolKind.READ_ONLY).__aenter__()
    assert sched.stats().queued == 0
    held.__aexit__(None, None, None)
    assert sched.stats().in_flight == 0
