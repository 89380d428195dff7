"""ConcurrencyScheduler: global, session, kind and pool limits, round-robin fairness, races
(SPEC §8.2)."""

from __future__ import annotations

import asyncio
import math
import time

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
from fastgate._core import READY

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
        pool: str | None = None,
    ) -> None:
        self.release = asyncio.Event()
        self.task = asyncio.create_task(self._run(sched, log, name, session, kind, owner, pool))

    async def _run(
        self,
        sched: ConcurrencyScheduler,
        log: list[str],
        name: str,
        session: str,
        kind: ToolKind,
        owner: object,
        pool: str | None,
    ) -> None:
        async with sched.slot(session, kind, owner, pool):
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
    assert dict(lim.pool_limits) == {}


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
        ({"pool_limits": [("mcp:fs", 2)]}, "pool_limits"),
        ({"pool_limits": {"": 2}}, "pool_limits"),
        ({"pool_limits": {3: 2}}, "pool_limits"),
        ({"pool_limits": {"mcp:fs": 0}}, "pool_limits['mcp:fs']"),
        ({"pool_limits": {"mcp:fs": True}}, "pool_limits['mcp:fs']"),
        ({"pool_limits": {"mcp:fs": 2.0}}, "pool_limits['mcp:fs']"),
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


# ------------------------------------------------------------------------------------------------
# Pools


POOL = "mcp:fs"


def test_pool_limits_are_kept_read_only() -> None:
    given = {POOL: 2}
    lim = SchedulerLimits(pool_limits=given)
    given[POOL] = 50
    assert dict(lim.pool_limits) == {POOL: 2}
    with pytest.raises(TypeError):
        lim.pool_limits[POOL] = 3  # type: ignore[index]


async def test_a_pool_limits_admission_across_sessions_and_kinds() -> None:
    sched = ConcurrencyScheduler(limits(pool_limits={POOL: 2}))
    log: list[str] = []
    a = Holder(sched, log, "a", "A", X, pool=POOL)
    b = Holder(sched, log, "b", "B", R, pool=POOL)
    c = Holder(sched, log, "c", "C", W, pool=POOL)  # the pool is full: queued
    other = Holder(sched, log, "other", "C", X, pool="mcp:api")  # a pool without a limit
    plain = Holder(sched, log, "plain", "C", X)
    await _settle()
    assert log == ["a", "b", "other", "plain"]
    stats = sched.stats()
    assert stats.in_flight_by_pool == {POOL: 2} and stats.queued_by_pool == {POOL: 1}
    assert stats.queued_by_kind == {"READ_ONLY": 0, "WRITE": 1, "EXECUTE": 0}
    await b.finish()
    await _settle()
    assert log[-1] == "c"
    for h in (a, c, other, plain):
        await h.finish()
    stats = sched.stats()
    assert stats.in_flight == 0 and stats.in_flight_by_pool == {POOL: 0}
    assert stats.queued_by_pool == {POOL: 0}


async def test_a_pool_without_a_limit_adds_none() -> None:
    sched = ConcurrencyScheduler(limits(global_limit=4, session_limit=4, x=4))
    log: list[str] = []
    holders = [Holder(sched, log, f"h{i}", "A", X, pool="mcp:free") for i in range(4)]
    await _settle()
    assert len(log) == 4  # only the kind, session and global limits apply
    assert sched.stats().in_flight_by_pool == {}
    for h in holders:
        await h.finish()


async def test_a_slot_in_a_pool_still_needs_its_kind_session_and_global_room() -> None:
    sched = ConcurrencyScheduler(
        limits(global_limit=3, session_limit=2, x=1, pool_limits={POOL: 5})
    )
    log: list[str] = []
    x1 = Holder(sched, log, "x1", "A", X, pool=POOL)
    x2 = Holder(sched, log, "x2", "B", X, pool=POOL)  # EXECUTE is full
    r1 = Holder(sched, log, "r1", "A", R, pool=POOL)
    r2 = Holder(sched, log, "r2", "A", R, pool=POOL)  # A's session limit
    r3 = Holder(sched, log, "r3", "C", R, pool=POOL)
    r4 = Holder(sched, log, "r4", "D", R, pool=POOL)  # the global limit
    await _settle()
    assert log == ["x1", "r1", "r3"]
    for h in (x1, r1, r3):
        await h.finish()
    await _settle()
    assert sorted(log[3:]) == ["r2", "r4", "x2"]
    for h in (x2, r2, r4):
        await h.finish()
    assert sched.stats().in_flight_by_pool == {POOL: 0}


async def test_waiter_blocked_only_by_its_pool_does_not_hold_back_other_pools() -> None:
    sched = ConcurrencyScheduler(
        limits(global_limit=2, session_limit=4, pool_limits={POOL: 1, "mcp:api": 1})
    )
    log: list[str] = []
    fs = Holder(sched, log, "fs1", "A", X, pool=POOL)
    filler = Holder(sched, log, "filler", "Z", X)  # the global limit is reached
    await _settle()
    fs2 = Holder(sched, log, "fs2", "A", X, pool=POOL)  # queued: global, then its pool
    api = Holder(sched, log, "api", "A", X, pool="mcp:api")  # same session and kind, later
    plain = Holder(sched, log, "plain", "A", X)
    await _settle()
    await filler.finish()  # room globally, none in fs's pool: the next lane goes first
    await _settle()
    assert log == ["fs1", "filler", "api"]
    await api.finish()
    await _settle()
    assert log[-1] == "plain"
    await fs.finish()
    await _settle()
    assert log[-1] == "fs2"
    await fs2.finish()
    await plain.finish()
    assert sched.stats().in_flight == 0


async def test_pool_waiters_are_served_round_robin_across_sessions() -> None:
    sched = ConcurrencyScheduler(limits(pool_limits={POOL: 1}))
    log: list[str] = []

    async def quick(name: str, session: str) -> None:
        async with sched.slot(session, X, pool=POOL):
            log.append(name)

    blocker = Holder(sched, log, "blocker", "Z", X, pool=POOL)
    await _settle()
    names = [("A0", "A"), ("A1", "A"), ("A2", "A"), ("B0", "B"), ("B1", "B"), ("C0", "C")]
    tasks = [asyncio.create_task(quick(n, s)) for n, s in names]
    await _settle()
    await blocker.finish()
    await asyncio.gather(*tasks)
    assert log == ["blocker", "A0", "B0", "C0", "A1", "B1", "A2"]


async def test_cancelled_pool_waiters_leak_nothing_and_a_crossing_grant_is_passed_on() -> None:
    sched = ConcurrencyScheduler(limits(pool_limits={POOL: 1}))
    log: list[str] = []
    hold = asyncio.Event()
    victim: Holder | None = None

    async def holder() -> None:
        async with sched.slot("Z", X, pool=POOL):
            await hold.wait()
        assert victim is not None
        victim.task.cancel()  # the pool's slot was just granted to it; it has not resumed yet

    first = asyncio.create_task(holder())
    await _settle()
    queued = Holder(sched, log, "queued", "A", X, pool=POOL)
    victim = Holder(sched, log, "victim", "B", X, pool=POOL)
    nxt = Holder(sched, log, "next", "C", X, pool=POOL)
    await _settle()
    queued.task.cancel()  # a plain cancellation while queued
    with pytest.raises(asyncio.CancelledError):
        await queued.task
    assert sched.stats().queued_by_pool == {POOL: 2}
    hold.set()
    await first
    with pytest.raises(asyncio.CancelledError):
        await victim.task
    await _settle()
    assert log == ["next"]
    assert sched.stats().in_flight_by_pool == {POOL: 1}
    await nxt.finish()
    stats = sched.stats()
    assert stats.in_flight == 0 and stats.queued == 0 and stats.in_flight_by_pool == {POOL: 0}


async def test_cancel_owner_close_timeout_and_full_queue_with_pools() -> None:
    sched = ConcurrencyScheduler(limits(pool_limits={POOL: 1}, max_queue=3, queue_timeout=30.0))
    log: list[str] = []
    mine = object()
    blocker = Holder(sched, log, "blocker", "Z", X, pool=POOL)
    await _settle()
    m1 = Holder(sched, log, "m1", "A", X, owner=mine, pool=POOL)
    t1 = Holder(sched, log, "t1", "B", R, pool=POOL)
    t2 = Holder(sched, log, "t2", "C", W, pool=POOL)
    await _settle()
    with pytest.raises(ResourceExhausted) as info:  # max_queue counts pool waiters too
        async with sched.slot("D", X, pool=POOL):
            pass
    assert info.value.reason == "queue_full"
    assert sched.cancel_owner(mine) == 1
    with pytest.raises(OwnerCancelled):
        await m1.task
    assert sched.stats().queued_by_pool == {POOL: 2}
    await sched.close()
    for h in (t1, t2):
        with pytest.raises(SchedulerClosed):
            await h.task
    await blocker.finish()
    stats = sched.stats()
    assert stats.in_flight_by_pool == {POOL: 0} and stats.queued_by_pool == {POOL: 0}
    assert log == ["blocker"]


async def test_queue_timeout_in_a_pool_is_resource_exhausted_and_frees_the_place() -> None:
    sched = ConcurrencyScheduler(limits(pool_limits={POOL: 1}, queue_timeout=0.02))
    log: list[str] = []
    blocker = Holder(sched, log, "blocker", "Z", X, pool=POOL)
    await _settle()
    with pytest.raises(ResourceExhausted) as info:
        async with sched.slot("A", X, pool=POOL):
            pass
    assert info.value.reason == "queue_timeout"
    assert sched.stats().queued_by_pool == {POOL: 0}
    await blocker.finish()
    async with sched.slot("A", X, pool=POOL):
        assert sched.stats().in_flight_by_pool == {POOL: 1}


async def test_set_pool_limit_adds_a_pool_and_a_raised_limit_admits_at_once() -> None:
    sched = ConcurrencyScheduler(limits())
    log: list[str] = []
    early = Holder(sched, log, "early", "A", X, pool=POOL)  # before the pool had a limit
    await _settle()
    sched.set_pool_limit(POOL, 1)
    assert dict(sched.limits.pool_limits) == {POOL: 1}
    assert sched.stats().in_flight_by_pool == {POOL: 0}  # the early slot is not counted
    first = Holder(sched, log, "first", "B", X, pool=POOL)
    second = Holder(sched, log, "second", "C", X, pool=POOL)
    third = Holder(sched, log, "third", "D", X, pool=POOL)
    await _settle()
    assert log == ["early", "first"]
    sched.set_pool_limit(POOL, 3)
    await _settle()
    assert log == ["early", "first", "second", "third"]
    sched.set_pool_limit(POOL, 1)  # lowered: those in flight finish, nothing new enters
    late = Holder(sched, log, "late", "E", X, pool=POOL)
    await _settle()
    await first.finish()
    await second.finish()
    await _settle()
    assert log[-1] == "third" and sched.stats().queued_by_pool == {POOL: 1}
    await third.finish()
    await _settle()
    assert log[-1] == "late"
    await late.finish()
    await early.finish()
    assert sched.stats().in_flight == 0
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="pool_limits"):
            sched.set_pool_limit(POOL, bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="pool name"):
        sched.set_pool_limit("", 1)
    assert dict(sched.limits.pool_limits) == {POOL: 1}


async def test_a_pool_name_that_is_not_a_string_is_refused_at_slot() -> None:
    sched = ConcurrencyScheduler(limits(pool_limits={POOL: 1}))
    with pytest.raises(TypeError, match="pool"):
        sched.slot("s", X, pool=3)
    with pytest.raises(TypeError):
        sched.slot("s", X, pool=[POOL])
    assert sched.stats().in_flight == 0 and sched.stats().queued == 0


class ServiceClock:
    """Drives calls in whole service times: every admitted call holds its slot for exactly one
    tick, and a tick ends only once every call issued has settled (queued, or holding its slot
    until the tick ends). Waits are counted in ticks, never in wall time."""

    def __init__(self, sched: ConcurrencyScheduler, pool: str) -> None:
        self.sched = sched
        self.pool = pool
        self.tick = 0
        self.issued = 0  # counted when a call is issued, before its task first runs
        self.waiting = 0  # queued, by the calls' own count
        self.finished = 0
        self.holding: list[asyncio.Event] = []
        self.changed = asyncio.Event()
        self.waits: dict[str, list[int]] = {}  # session -> each call's wait, in issue order
        self.admitted_per_tick: list[int] = []

    def spawn(self, session: str) -> asyncio.Task[None]:
        """One call, issued now."""
        self.issued += 1
        return asyncio.create_task(self._call(session, self.tick))

    def spawn_agent(self, session: str, calls: int) -> asyncio.Task[None]:
        """``calls`` calls one after another, each issued as the previous one finishes."""
        self.issued += 1

        async def agent() -> None:
            for i in range(calls):
                if i:
                    self.issued += 1
                await self._call(session, self.tick)

        return asyncio.create_task(agent())

    async def _call(self, session: str, issued_at: int) -> None:
        slot = self.sched.slot(session, X, owner=session, pool=self.pool)
        entering = slot.__aenter__()  # what ``async with`` does, seeing whether it queued
        if entering is not READY:
            self.waiting += 1
            self.changed.set()
            try:
                await entering
            finally:
                self.waiting -= 1
        try:
            self.waits.setdefault(session, []).append(self.tick - issued_at)
            done = asyncio.Event()
            self.holding.append(done)
            self.changed.set()
            await done.wait()
        finally:
            await slot.__aexit__(None, None, None)
        self.finished += 1
        self.changed.set()

    def _settled(self) -> bool:
        held = sum(not event.is_set() for event in self.holding)
        # No grant in flight either: each call the scheduler still queues is one that waits.
        return (
            self.issued == self.finished + self.waiting + held
            and self.sched.stats().queued == self.waiting
        )

    async def run(self, tasks: list[asyncio.Task[None]]) -> None:
        while not all(task.done() for task in tasks):
            while not self._settled():
                self.changed.clear()
                await self.changed.wait()
            self.admitted_per_tick.append(len(self.holding))
            ending, self.holding = self.holding, []
            self.tick += 1
            for event in ending:
                event.set()
        await asyncio.gather(*tasks)


FLOOD, SMALL, POOL_LIMIT = 200, 10, 2
SMALL_SESSIONS = ("s1", "s2", "s3")


async def test_fairness_small_sessions_calling_one_at_a_time_beside_a_pool_flood() -> None:
    """An agent's calls come one after another: each small call waits about one round of the
    four sessions, never behind the flood (FIFO: about 100 service times)."""
    sched = ConcurrencyScheduler(limits(pool_limits={POOL: POOL_LIMIT}, max_queue=4096))
    clock = ServiceClock(sched, POOL)
    tasks = [clock.spawn("big") for _ in range(FLOOD)]  # tasks run in creation order
    tasks += [clock.spawn_agent(s, SMALL) for s in SMALL_SESSIONS]
    await clock.run(tasks)
    small = [w for s in SMALL_SESSIONS for w in clock.waits[s]]
    assert len(small) == 3 * SMALL and len(clock.waits["big"]) == FLOOD
    assert min(small) >= 1  # every one queued behind the flood's two held slots
    assert max(small) <= 3  # a round of four sessions on two slots is two service times
    # Work-conserving: both slots busy every tick until fewer than two calls remain.
    total = FLOOD + 3 * SMALL
    assert sum(clock.admitted_per_tick) == total
    assert clock.admitted_per_tick[: total // POOL_LIMIT] == [POOL_LIMIT] * (total // POOL_LIMIT)
    stats = sched.stats()
    assert stats.in_flight_by_pool == {POOL: 0} and stats.queued == 0


async def test_fairness_small_sessions_queueing_at_once_behind_a_pool_flood() -> None:
    """Each small session queues all ten calls behind the flood's 200: round-robin admits a
    small session's k-th call within k rounds of four sessions (2k service times on two slots);
    FIFO would admit the first after about 100."""
    sched = ConcurrencyScheduler(limits(pool_limits={POOL: POOL_LIMIT}, max_queue=4096))
    clock = ServiceClock(sched, POOL)
    tasks = [clock.spawn("big") for _ in range(FLOOD)]
    tasks += [clock.spawn(s) for s in SMALL_SESSIONS for _ in range(SMALL)]
    await clock.run(tasks)
    for session in SMALL_SESSIONS:
        waits = clock.waits[session]
        assert len(waits) == SMALL
        assert all(1 <= wait <= 2 * k + 1 for k, wait in enumerate(waits, start=1)), waits
    # Meanwhile the flood is not starved either: it gets its quarter of the backlogged rounds.
    backlogged_ticks = 2 * SMALL
    big_admitted_early = sum(1 for wait in clock.waits["big"] if wait <= backlogged_ticks)
    assert big_admitted_early >= POOL_LIMIT * backlogged_ticks // 4


def test_the_pure_core_stays_within_cpythons_shared_key_layout() -> None:
    # An interpreted instance with more than 30 attributes loses the shared-key layout (CPython
    # 3.11's SHARED_KEYS_MAX_SIZE): every attribute read of the pure core gets slower (measured:
    # about 6% more instructions per uncontended slot at 32 attributes).
    from fastgate._core import WAIT, _sched_py

    def arm(deadline: float) -> None:
        pass

    core = _sched_py.SchedulerCore(
        READY,
        WAIT,
        asyncio.get_running_loop,
        time.monotonic,
        arm,
        1,
        1,
        [1, 1, 1],
        [(POOL, 1)],
        1,
        1.0,
    )
    core.expiry_due = 1.0  # every attribute the façade writes as well
    assert len(vars(core)) <= 30, sorted(vars(core))
