"""Sans-I/O state machine of the process-wide fair scheduler (SPEC §8.2).

A slot needs room in every dimension it names: the global limit, its session's limit, its kind's
limit and, when it names a pool that has a limit, that pool's limit. Waiters queue per session in
lanes, one FIFO per (kind, pool) pair: a session's first three lanes are its three kinds without a
pool, and a lane for a kind in a pool is added the first time the session queues there. Whenever
room appears, sessions are served round-robin (a cursor walks a ring of sessions that have
waiters; a newly waiting session joins at the end of the current round) and, inside a session,
the earliest-arrived lane head whose kind and pool have room goes first. So one flooding session
cannot starve the others, and a waiter blocked only by its kind's or its pool's limit never holds
back waiters of other kinds or pools.

``max_queue`` is shared max-min fairly among the sessions waiting, so that a flood cannot keep
the others out at the door either: a request arriving at a full queue takes the place of the
newest waiter of the session with the most waiters, provided that its own session, counting
the new request, would still have fewer waiters than that session had (``mine + 1 < most``);
otherwise it is refused. Displacing then never makes the two sessions trade places, and a full
queue contended by several sessions ends with their counts at most one apart. Of several
sessions with the most waiters, the one that reached that count last gives way. Sessions are
kept in buckets by their number of waiters (``QueueShares``), so finding that session is O(1).

Pools are numbered: 0 (``NO_POOL``, false) is "no pool" (a slot that names no pool, or one without
a limit), the pools with a limit are 1, 2, ... in the order they were configured. A pool's number
never changes, so a queued waiter keeps it when another pool is added.

Invariant after every operation: no queued waiter could be admitted. That is what lets the
uncontended path (``try_acquire``) skip the queues without ever overtaking an admissible waiter.

No asyncio in here: futures come from the injected ``get_loop`` and the queue timeout is enforced
by one lazily armed timer that the façade runs (``arm_expiry``), not by a timer per waiter.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable
from typing import TYPE_CHECKING, Any

from fastgate.errors import ResourceExhausted, SchedulerClosed

if TYPE_CHECKING:
    from fastgate._core import _cython_shim as cython
else:
    try:
        import cython
    except ImportError:  # the pure build without Cython installed: the decorators do nothing
        from fastgate._core import _cython_shim as cython


NKINDS = 3
NO_POOL = 0
KIND_INDEX: dict[object, int] = {0: 0, 1: 1, 2: 2}
# Waiter states.
QUEUED = 0
GRANTED = 1
FINISHED = 2
WAIT_SAMPLES = 4096  # queued waits kept for the percentiles of stats()
# Slot states.
NEW = 0
HELD = 1
DONE = 2


def kind_index(kind: object) -> int:
    """The kind as an exact int (ToolKind members, an IntEnum, are slow list indexes when
    interpreted); ValueError for anything that is not a kind."""
    try:
        return KIND_INDEX[kind]
    except (KeyError, TypeError):
        raise ValueError(f"unknown tool kind {kind!r}") from None


@cython.freelist(64)
@cython.cclass
class SlotWaiter:
    """One request, and once queued: its session's queue, its lane and place in it, the future
    its task awaits and when it was queued. (A ``Slot`` is its own waiter: one object per
    request.)"""

    __slots__ = (
        "enqueued_at",
        "future",
        "kind",
        "lane",
        "next",
        "owner",
        "pool",
        "prev",
        "queue",
        "seq",
        "session_id",
        "state",
    )
    session_id: Hashable
    kind: int
    pool: int
    lane: int
    owner: object
    queue: SessionQueue | None
    seq: int
    state: int
    prev: SlotWaiter | None
    next: SlotWaiter | None
    future: Any
    enqueued_at: float

    def __init__(self, session_id: Hashable, kind: int, owner: object, pool: int) -> None:
        # The queue fields are set when (if ever) the request is queued: see ``_link``.
        self.session_id = session_id
        self.kind = kind
        self.pool = pool
        self.owner = owner
        self.queue = None


@cython.freelist(64)
@cython.cclass
class SessionQueue:
    """The waiters of one session, one FIFO per lane, plus this session's place in the ring.

    Lanes 0-2 are the kinds without a pool; lane ``NKINDS + i`` holds the waiters of
    ``pool_lanes[i]`` (``pool * NKINDS + kind``). A lane, once added, stays as long as the queue.
    """

    def __init__(self, session_id: Hashable) -> None:
        self.session_id = session_id
        self.heads: list[SlotWaiter | None] = [None, None, None]
        self.tails: list[SlotWaiter | None] = [None, None, None]
        self.pool_lanes: list[int] | None = None  # made when the session first queues in a pool
        self.queued = 0
        # Neighbours in the ring while the session has waiters; None otherwise, so that a queue
        # dropped from the ring is freed by reference counting, not by the cyclic collector.
        self.ring_prev: SessionQueue | None = None
        self.ring_next: SessionQueue | None = None
        # Neighbours among the sessions with as many waiters (``QueueShares``); None when idle.
        self.bucket_prev: SessionQueue | None = None
        self.bucket_next: SessionQueue | None = None


class PoolTable:
    """The pools with a limit, by number: name, limit, slots held and waiters. Number 0 (no
    pool) is a placeholder, so that a number indexes every list directly."""

    def __init__(self) -> None:
        self.numbers: dict[str, int] = {}
        self.names: list[str | None] = [None]
        self.limits: list[int] = [0]
        self.in_flight: list[int] = [0]
        self.queued: list[int] = [0, 0, 0]  # per (pool, kind), at ``pool * NKINDS + kind``
        self.kind_queued = [0, 0, 0]  # per kind, the waiters in any pool

    def add(self, name: str, limit: int) -> None:
        self.numbers[name] = len(self.names)
        self.names.append(name)
        self.limits.append(limit)
        self.in_flight.append(0)
        self.queued.extend((0, 0, 0))

    def has_room(self, pool: int) -> bool:
        return not pool or self.in_flight[pool] < self.limits[pool]

    def counts(self) -> tuple[dict[str, int], dict[str, int]]:
        """(in flight per pool, queued per pool), for every pool."""
        in_flight: dict[str, int] = {}
        queued: dict[str, int] = {}
        for pool in range(1, len(self.names)):
            name = self.names[pool]
            assert name is not None
            in_flight[name] = self.in_flight[pool]
            base = pool * NKINDS
            queued[name] = self.queued[base] + self.queued[base + 1] + self.queued[base + 2]
        return in_flight, queued


class QueueShares:
    """The sessions with waiters, bucketed by how many: ``buckets[n]`` heads a linked list of the
    sessions with exactly ``n`` waiters, the last to arrive at ``n`` first; ``top`` is the largest
    ``n`` with a session in it (0 when nobody waits). A session's count changes by one at a
    time, so every update is O(1)."""

    def __init__(self) -> None:
        self.buckets: list[SessionQueue | None] = [None]  # [0] stays empty: idle sessions
        self.top = 0
        self.displaced = 0  # waiters that gave their place to a session with fewer

    def grew(self, queue: SessionQueue) -> None:
        """``queue.queued`` just went up by one: to the head of the next bucket."""
        count = queue.queued
        buckets = self.buckets
        if count > 1:  # leave bucket count - 1 (inlined: this runs on every queued request)
            prev = queue.bucket_prev
            nxt = queue.bucket_next
            if prev is None:
                buckets[count - 1] = nxt
            else:
                prev.bucket_next = nxt
            if nxt is not None:
                nxt.bucket_prev = prev
        if count == len(buckets):
            buckets.append(None)
        head = buckets[count]
        queue.bucket_prev = None
        queue.bucket_next = head
        if head is not None:
            head.bucket_prev = queue
        buckets[count] = queue
        if count > self.top:
            self.top = count

    def shrank(self, queue: SessionQueue) -> None:
        """``queue.queued`` just went down by one: to the head of the bucket below (none at 0)."""
        count = queue.queued
        buckets = self.buckets
        prev = queue.bucket_prev
        nxt = queue.bucket_next
        if prev is None:
            buckets[count + 1] = nxt
        else:
            prev.bucket_next = nxt
        if nxt is not None:
            nxt.bucket_prev = prev
        if count:
            head = buckets[count]
            queue.bucket_prev = None
            queue.bucket_next = head
            if head is not None:
                head.bucket_prev = queue
            buckets[count] = queue
        else:
            queue.bucket_prev = None
            queue.bucket_next = None
        # Only this session left the top bucket, for the one just below it (or for none).
        if buckets[self.top] is None:
            self.top -= 1

    def most_queued(self) -> SessionQueue | None:
        """The session with the most waiters (the last to get there), None when nobody waits."""
        return self.buckets[self.top]


@cython.freelist(64)
@cython.cclass
class SchedulerCore:
    def __init__(
        self,
        ready: Awaitable[None],
        wait_type: Callable[..., Awaitable[None]],
        get_loop: Callable[[], Any],
        clock: Callable[[], float],
        arm_expiry: Callable[[float], None],
        global_limit: int,
        session_limit: int,
        kind_limits: list[int],
        pool_limits: list[tuple[str, int]],
        max_queue: int,
        queue_timeout: float,
    ) -> None:
        self.ready = ready
        self.wait_type = wait_type
        self.get_loop = get_loop
        self.clock = clock
        self.arm_expiry = arm_expiry  # (deadline) -> None: run the façade's expiry at deadline
        self.global_limit = global_limit
        self.session_limit = session_limit
        self.kind_limits = [kind_limits[0], kind_limits[1], kind_limits[2]]
        self.max_queue = max_queue
        self.queue_timeout = queue_timeout  # seconds; 0 means no limit
        self.expiry_due = 0.0  # deadline the expiry timer is armed for; 0 when not armed
        self.in_flight = 0
        self.kind_in_flight = [0, 0, 0]
        self.kind_queued = [0, 0, 0]
        # One attribute for the pools: an interpreted instance with more than 30 attributes
        # loses CPython's shared-key layout, and every attribute read gets slower.
        self.pools = PoolTable()
        self.shares = QueueShares()
        self.session_in_flight: dict[Hashable, int] = {}
        self.queues: dict[Hashable, SessionQueue] = {}
        self.cursor: SessionQueue | None = None
        self.queued = 0
        self.seq = 0
        self.admitted = 0
        self.rejected = 0
        self.closed = False
        self.waits: list[float] = []  # recent queued waits (seconds), a ring for stats
        self.wait_index = 0
        self.admitted_after_wait = 0
        # Cluster mode only (None otherwise): each session's share of its limit leased to this
        # worker (absent: none), and the local clock time the lease ends at.
        self.session_caps: dict[Hashable, int] | None = None
        self.lease_until = 0.0
        for name, limit in pool_limits:
            self.set_pool_limit(name, limit)

    # -- admission ------------------------------------------------------------------------------

    def slot(
        self, session_id: Hashable, kind: int, owner: object = None, pool: object = None
    ) -> Slot:
        """A new ``Slot``: what ``scheduler.slot(...)`` returns, and the only way one is made.
        Its fields are set here, without ``__init__``'s argument parsing: this is every call's
        first step (measured: the pure build's uncontended slot 1.39-1.42x a Semaphore this way,
        1.44-1.46x through a constructor)."""
        slot = Slot.__new__(Slot)
        slot.session_id = session_id  # the fields SlotWaiter.__init__ sets
        try:  # kind_index, inlined: the uncontended slot is short enough for a call to show
            slot.kind = KIND_INDEX[kind]
        except (KeyError, TypeError):
            raise ValueError(f"unknown tool kind {kind!r}") from None
        slot.pool = NO_POOL if pool is None else self.pool_number(pool)
        slot.owner = owner
        slot.queue = None
        slot.core = self
        slot.phase = NEW
        return slot

    def pool_number(self, pool: object) -> int:
        """The number of a pool name: 0 for a pool without a limit (it adds no dimension)."""
        if type(pool) is not str:
            raise TypeError(f"a scheduler pool is a string or None, got {pool!r}")
        return self.pools.numbers.get(pool, NO_POOL)

    def set_pool_limit(self, name: str, limit: int) -> list[SlotWaiter] | None:
        """Give pool ``name`` a limit (a new pool, or a new limit for a known one); returns the
        waiters a raised limit admits. Slots taken before the pool had a limit are not counted
        in it. A lowered limit admits nothing new until the pool is below it."""
        pools = self.pools
        number = pools.numbers.get(name, NO_POOL)
        if number == NO_POOL:
            pools.add(name, limit)
            return None  # nobody queued in it yet
        pools.limits[number] = limit
        if self.queued:
            return self._grant()
        return None

    def try_acquire(self, session_id: Hashable, kind: int) -> bool:
        """Take a slot in no pool now if all three dimensions have room; False means the caller
        must queue."""
        if self.in_flight >= self.global_limit:
            return False
        kind_in_flight = self.kind_in_flight
        if kind_in_flight[kind] >= self.kind_limits[kind]:
            return False
        sessions = self.session_in_flight
        held = sessions.get(session_id, 0)
        if held >= self.session_limit:
            return False
        if self.session_caps is not None and not self._leased_room(session_id, held):
            return False
        sessions[session_id] = held + 1
        self.in_flight += 1
        kind_in_flight[kind] += 1
        self.admitted += 1
        return True

    def try_acquire_in_pool(self, session_id: Hashable, kind: int, pool: int) -> bool:
        """``try_acquire`` for a slot in pool number ``pool`` (not 0): its pool needs room too.
        (Separate, so that a slot in no pool pays nothing for the pools.)"""
        pools = self.pools
        if pools.in_flight[pool] >= pools.limits[pool]:
            return False
        if not self.try_acquire(session_id, kind):
            return False
        pools.in_flight[pool] += 1
        return True

    def _leased_room(self, session_id: Hashable, held: int) -> bool:
        """Cluster mode: the lease is current and the session holds less than its share."""
        caps = self.session_caps
        assert caps is not None
        return held < caps.get(session_id, 0) and self.clock() < self.lease_until

    def set_limits(
        self,
        global_limit: int,
        kind_limits: list[int],
        pool_limits: list[tuple[str, int]],
        session_caps: dict[Hashable, int] | None,
        lease_until: float,
    ) -> list[SlotWaiter] | None:
        """Replace the limits (cluster mode: this worker's leased allotment, or its fallback);
        returns the waiters that now fit. ``session_caps`` None: every session has
        ``session_limit``, with no lease. Slots in flight stay valid under lowered limits. A
        closed core keeps refusing."""
        if self.closed:
            return None
        self.global_limit = global_limit
        self.kind_limits = [kind_limits[0], kind_limits[1], kind_limits[2]]
        pools = self.pools
        for name, limit in pool_limits:
            number = pools.numbers.get(name, NO_POOL)
            if number == NO_POOL:
                pools.add(name, limit)
            else:
                pools.limits[number] = limit
        self.session_caps = session_caps
        self.lease_until = lease_until
        if self.queued:
            return self._grant()
        return None

    def enqueue(
        self, session_id: Hashable, kind: int, owner: object, pool: int = NO_POOL
    ) -> tuple[SlotWaiter | None, SlotWaiter | None]:
        """Queue a request that could not be admitted: (its waiter, or None when the queue is
        full for its session; the waiter that gave it its place, withdrawn, or None)."""
        displaced: SlotWaiter | None = None
        if self.queued >= self.max_queue:
            displaced = self._displace(session_id)
            if displaced is None:
                return None, None
        waiter = SlotWaiter(session_id, kind, owner, pool)
        self._link(waiter)
        return waiter, displaced

    def _displace(self, session_id: Hashable) -> SlotWaiter | None:
        """The queue is full: withdraw and return the newest waiter of the session with the most
        waiters if a request of ``session_id`` is to take its place (see the module docstring),
        else None (the request is refused). Either way one request is rejected."""
        self.rejected += 1
        shares = self.shares
        most = shares.most_queued()
        queue = self.queues.get(session_id)
        mine = 0 if queue is None else queue.queued
        if most is None or mine + 1 >= most.queued:
            return None
        newest: SlotWaiter | None = None
        tails = most.tails
        for lane in range(len(tails)):
            tail = tails[lane]
            if tail is not None and (newest is None or tail.seq > newest.seq):
                newest = tail
        assert newest is not None
        self.remove(newest)
        shares.displaced += 1
        return newest

    def _link(self, waiter: SlotWaiter) -> None:
        """Put a new request at the end of its session's FIFO (the caller made room)."""
        session_id = waiter.session_id
        kind = waiter.kind
        pool = waiter.pool
        queue = self.queues.get(session_id)
        if queue is None:
            queue = SessionQueue(session_id)
            self.queues[session_id] = queue
        if queue.queued == 0:
            self._ring_insert(queue)
        if not pool:
            lane = kind
        else:
            lane = self._pool_lane(queue, pool * NKINDS + kind)
            self.pools.queued[pool * NKINDS + kind] += 1
            self.pools.kind_queued[kind] += 1
        waiter.queue = queue
        waiter.lane = lane
        waiter.seq = self.seq
        waiter.state = QUEUED
        waiter.prev = waiter.next = None
        waiter.future = None
        waiter.enqueued_at = 0.0
        self.seq += 1
        tail = queue.tails[lane]
        if tail is None:
            queue.heads[lane] = waiter
        else:
            tail.next = waiter
            waiter.prev = tail
        queue.tails[lane] = waiter
        queue.queued += 1
        self.shares.grew(queue)
        self.kind_queued[kind] += 1
        self.queued += 1

    def _pool_lane(self, queue: SessionQueue, key: int) -> int:
        """The session's lane for ``key`` (``pool * NKINDS + kind``), added when missing."""
        lanes = queue.pool_lanes
        if lanes is None:
            lanes = queue.pool_lanes = []
        for i in range(len(lanes)):
            if lanes[i] == key:
                return NKINDS + i
        lanes.append(key)
        queue.heads.append(None)
        queue.tails.append(None)
        return NKINDS + len(lanes) - 1

    def release(self, session_id: Hashable, kind: int) -> list[SlotWaiter] | None:
        """Give a slot in no pool back; returns the waiters granted in its place (None when
        nobody waits)."""
        sessions = self.session_in_flight
        held = sessions.get(session_id, 0)
        kind_in_flight = self.kind_in_flight
        if held <= 0 or kind_in_flight[kind] <= 0:
            raise RuntimeError("scheduler slot released twice")
        if held == 1:
            del sessions[session_id]
            if self.queues:
                self._forget_if_idle(session_id)
        else:
            sessions[session_id] = held - 1
        self.in_flight -= 1
        kind_in_flight[kind] -= 1
        if self.queued:
            return self._grant()
        return None

    def release_in_pool(
        self, session_id: Hashable, kind: int, pool: int
    ) -> list[SlotWaiter] | None:
        """``release`` for a slot in pool number ``pool`` (not 0)."""
        pools = self.pools
        if pools.in_flight[pool] <= 0:
            raise RuntimeError("scheduler slot released twice")
        pools.in_flight[pool] -= 1  # first: the waiters granted in its place may need it
        return self.release(session_id, kind)

    def finish(self, waiter: SlotWaiter) -> list[SlotWaiter] | None:
        """A granted waiter gives its slot back (after use, or unused when it was cancelled)."""
        if waiter.state != GRANTED:
            raise RuntimeError("scheduler slot released twice")
        waiter.state = FINISHED
        if waiter.pool:
            return self.release_in_pool(waiter.session_id, waiter.kind, waiter.pool)
        return self.release(waiter.session_id, waiter.kind)

    def remove(self, waiter: SlotWaiter) -> bool:
        """Withdraw a queued waiter; False when it was no longer queued (granted or dropped).

        Removing never makes another waiter admissible: waiters behind it in its lane face the
        same limits it faced, and other lanes were never held back by it.
        """
        if waiter.state != QUEUED:
            return False
        self._unlink(waiter)
        waiter.state = FINISHED
        self._forget_if_idle(waiter.session_id)
        return True

    def withdraw(self, waiter: SlotWaiter) -> list[SlotWaiter] | None:
        """The waiter's task gave up: leave the queue, or hand back a slot granted meanwhile."""
        if waiter.state == GRANTED:
            return self.finish(waiter)
        self.remove(waiter)
        return None

    def queue(self, slot: Slot) -> Awaitable[None]:
        """The slot could not be taken now: queue it and return what its task awaits."""
        if self.closed:
            raise SchedulerClosed("the scheduler is closed")
        # The future first: with no running loop this raises before anything is queued.
        future = self.get_loop().create_future()
        displaced: SlotWaiter | None = None
        if self.queued >= self.max_queue:
            displaced = self._displace(slot.session_id)
            if displaced is None:
                raise ResourceExhausted(
                    f"the tool queue is full ({self.max_queue} calls waiting) and this session "
                    "has its share of it; retry next turn",
                    reason="queue_full",
                )
        self._link(slot)
        slot.future = future
        now = self.clock()
        slot.enqueued_at = now
        if self.queue_timeout > 0.0:
            due = self.expiry_due
            # Not armed, or armed in a loop that died before its timer fired.
            if due == 0.0 or now > due + self.queue_timeout:
                self.expiry_due = now + self.queue_timeout
                self.arm_expiry(self.expiry_due)
        if displaced is not None:
            self._fail_displaced(displaced)
        return self.wait_type(slot, future)

    def _fail_displaced(self, waiter: SlotWaiter) -> None:
        """Fail the future of a waiter that gave its place in a full queue (one whose task was
        cancelled meanwhile has nothing to fail: it finds itself no longer queued)."""
        future = waiter.future
        if future is not None and not future.done():
            future.set_exception(
                ResourceExhausted(
                    f"the tool queue is full ({self.max_queue} calls waiting) and this call gave "
                    "its place to a session with fewer waiting; retry next turn",
                    reason="queue_full",
                )
            )

    def wake(self, granted: list[SlotWaiter] | None) -> None:
        """Resolve granted waiters' futures; one already cancelled passes its slot on."""
        if not granted:
            return
        now = self.clock()
        i = 0
        while i < len(granted):
            waiter = granted[i]
            i += 1
            if waiter.future.done():
                passed_on = self.finish(waiter)
                if passed_on:
                    granted.extend(passed_on)
                continue
            waiter.future.set_result(None)
            self.admitted_after_wait += 1
            if len(self.waits) < WAIT_SAMPLES:
                self.waits.append(now - waiter.enqueued_at)
            else:
                self.waits[self.wait_index] = now - waiter.enqueued_at
                self.wait_index = (self.wait_index + 1) % WAIT_SAMPLES

    def expire(self, now: float) -> list[SlotWaiter]:
        """Withdraw and return the waiters queued for ``queue_timeout`` or longer."""
        limit = now - self.queue_timeout
        expired = [w for w in self._queued_waiters() if w.enqueued_at <= limit]
        for waiter in expired:
            self.remove(waiter)
        self.rejected += len(expired)
        return expired

    def oldest_enqueued_at(self) -> float:
        """When the longest-waiting queued request was queued; 0.0 when nobody waits."""
        oldest = 0.0
        for waiter in self._queued_waiters():
            if oldest == 0.0 or waiter.enqueued_at < oldest:
                oldest = waiter.enqueued_at
        return oldest

    # -- internals ------------------------------------------------------------------------------

    def _ring_insert(self, queue: SessionQueue) -> None:
        """Join the ring just before the cursor: the end of the current round."""
        cursor = self.cursor
        if cursor is None:
            queue.ring_prev = queue
            queue.ring_next = queue
            self.cursor = queue
            return
        last = cursor.ring_prev
        assert last is not None
        last.ring_next = queue
        queue.ring_prev = last
        queue.ring_next = cursor
        cursor.ring_prev = queue

    def _ring_remove(self, queue: SessionQueue) -> None:
        nxt = queue.ring_next
        prev = queue.ring_prev
        if nxt is queue or nxt is None or prev is None:
            self.cursor = None
        else:
            prev.ring_next = nxt
            nxt.ring_prev = prev
            if self.cursor is queue:
                self.cursor = nxt
        queue.ring_prev = None
        queue.ring_next = None

    def _forget_if_idle(self, session_id: Hashable) -> None:
        """Drop a session's queue once it has neither waiters nor slots.

        A session that still holds slots keeps its (empty) queue: it is likely to queue again
        soon, and rebuilding the queue each time would cost more than keeping it.
        """
        queue = self.queues.get(session_id)
        if queue is not None and queue.queued == 0 and session_id not in self.session_in_flight:
            del self.queues[session_id]

    def _unlink(self, waiter: SlotWaiter) -> None:
        queue = waiter.queue
        assert queue is not None
        lane = waiter.lane
        prev = waiter.prev
        nxt = waiter.next
        if prev is None:
            queue.heads[lane] = nxt
        else:
            prev.next = nxt
        if nxt is None:
            queue.tails[lane] = prev
        else:
            nxt.prev = prev
        waiter.prev = None
        waiter.next = None
        queue.queued -= 1
        self.shares.shrank(queue)
        kind = waiter.kind
        self.kind_queued[kind] -= 1
        pool = waiter.pool
        if pool:
            self.pools.queued[pool * NKINDS + kind] -= 1
            self.pools.kind_queued[kind] -= 1
        self.queued -= 1
        if queue.queued == 0:
            self._ring_remove(queue)

    def _any_lane_open(self) -> bool:
        """Whether some waiter's kind and pool have room (its session's limit aside)."""
        pools = self.pools
        for kind in range(NKINDS):
            queued = self.kind_queued[kind]
            if queued and self.kind_in_flight[kind] < self.kind_limits[kind]:
                if queued > pools.kind_queued[kind]:
                    return True  # a waiter of this kind in no pool
                for pool in range(1, len(pools.limits)):
                    if pools.queued[pool * NKINDS + kind] and pools.has_room(pool):
                        return True
        return False

    def _first_admissible(self, queue: SessionQueue) -> SlotWaiter | None:
        """The earliest-arrived lane head of this session whose kind and pool have room."""
        best: SlotWaiter | None = None
        heads = queue.heads
        for lane in range(len(heads)):
            head = heads[lane]
            if (
                head is not None
                and self.kind_in_flight[head.kind] < self.kind_limits[head.kind]
                and self.pools.has_room(head.pool)
            ):
                if best is None or head.seq < best.seq:
                    best = head
        return best

    def _grant(self) -> list[SlotWaiter]:
        """Admit waiters round-robin across sessions while room remains."""
        granted: list[SlotWaiter] = []
        while self.queued and self.in_flight < self.global_limit and self._any_lane_open():
            start = self.cursor
            queue = start
            waiter: SlotWaiter | None = None
            while queue is not None:
                held = self.session_in_flight.get(queue.session_id, 0)
                if held < self.session_limit and (
                    self.session_caps is None or self._leased_room(queue.session_id, held)
                ):
                    waiter = self._first_admissible(queue)
                    if waiter is not None:
                        break
                queue = queue.ring_next
                if queue is start:
                    break
            if waiter is None or queue is None:
                break
            # The next round starts after the session just served.
            self.cursor = queue.ring_next
            session_id = waiter.session_id
            self.session_in_flight[session_id] = self.session_in_flight.get(session_id, 0) + 1
            self._unlink(waiter)
            self.in_flight += 1
            self.kind_in_flight[waiter.kind] += 1
            if waiter.pool:
                self.pools.in_flight[waiter.pool] += 1
            self.admitted += 1
            waiter.state = GRANTED
            granted.append(waiter)
        return granted

    # -- owners, closing, stats -----------------------------------------------------------------

    def _queued_waiters(self) -> list[SlotWaiter]:
        found: list[SlotWaiter] = []
        for queue in list(self.queues.values()):
            for lane in range(len(queue.heads)):
                waiter = queue.heads[lane]
                while waiter is not None:
                    found.append(waiter)
                    waiter = waiter.next
        return found

    def cancel_owner(self, owner: object) -> list[SlotWaiter]:
        """Withdraw every queued waiter of ``owner``; the façade fails their futures."""
        dropped = [w for w in self._queued_waiters() if w.owner is owner or w.owner == owner]
        for waiter in dropped:
            self.remove(waiter)
        return dropped

    def close(self) -> list[SlotWaiter]:
        """Refuse new requests; withdraw and return every queued waiter."""
        self.closed = True
        # No room at all from now on: the fast path refuses without a separate closed check.
        self.global_limit = 0
        dropped = self._queued_waiters()
        for waiter in dropped:
            self.remove(waiter)
        return dropped

    def kind_counts(self) -> tuple[list[int], list[int]]:
        """(in flight per kind, queued per kind), indexed by kind."""
        return (
            [self.kind_in_flight[0], self.kind_in_flight[1], self.kind_in_flight[2]],
            [self.kind_queued[0], self.kind_queued[1], self.kind_queued[2]],
        )

    def pool_counts(self) -> tuple[dict[str, int], dict[str, int]]:
        """(in flight per pool, queued per pool), for every pool with a limit."""
        return self.pools.counts()

    def session_counts(self) -> tuple[dict[Hashable, int], dict[Hashable, int]]:
        """(in flight per session, queued per session); sessions with neither are absent."""
        queued = {sid: queue.queued for sid, queue in self.queues.items() if queue.queued}
        return dict(self.session_in_flight), queued


class Slot(SlotWaiter):
    """``async with`` context for one slot, and its own queue entry when it has to wait; not
    reusable.

    ``phase`` goes NEW -> HELD -> DONE, or NEW -> DONE when queueing fails or is cancelled.
    """

    __slots__ = ("core", "phase")
    core: SchedulerCore
    phase: int

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise TypeError("slots are made by SchedulerCore.slot (scheduler.slot(...))")

    def __aenter__(self) -> Awaitable[None]:
        core = self.core
        if self.phase != NEW:
            raise RuntimeError("a scheduler slot can be entered only once")
        if self.pool:
            admitted = core.try_acquire_in_pool(self.session_id, self.kind, self.pool)
        else:
            # core.try_acquire, written out: a slot in no pool is every call's first step, and
            # interpreted, a call costs as much as the check (the state machine tests hold both
            # routes to the same model).
            admitted = False
            kind = self.kind
            if (
                core.in_flight < core.global_limit
                and core.kind_in_flight[kind] < core.kind_limits[kind]
            ):
                sessions = core.session_in_flight
                session_id = self.session_id
                held = sessions.get(session_id, 0)
                if held < core.session_limit and (
                    core.session_caps is None or core._leased_room(session_id, held)
                ):
                    sessions[session_id] = held + 1
                    core.in_flight += 1
                    core.kind_in_flight[kind] += 1
                    core.admitted += 1
                    admitted = True
        if admitted:
            self.phase = HELD
            return core.ready
        self.phase = DONE
        return core.queue(self)

    def __aexit__(self, exc_type: object, exc: object, tb: object) -> Awaitable[None]:
        if self.phase != HELD:
            raise RuntimeError("scheduler slot released without being held")
        self.phase = DONE
        core = self.core
        if self.queue is not None:  # admitted after a wait
            granted = core.finish(self)
        elif self.pool:
            granted = core.release_in_pool(self.session_id, self.kind, self.pool)
        else:
            # core.release, written out for the same reason as in __aenter__.
            sessions = core.session_in_flight
            session_id = self.session_id
            kind = self.kind
            held = sessions.get(session_id, 0)
            if held <= 0 or core.kind_in_flight[kind] <= 0:
                raise RuntimeError("scheduler slot released twice")
            if held == 1:
                del sessions[session_id]
                if core.queues:
                    core._forget_if_idle(session_id)
            else:
                sessions[session_id] = held - 1
            core.in_flight -= 1
            core.kind_in_flight[kind] -= 1
            if not core.queued:
                return core.ready
            granted = core._grant()
        if granted:
            core.wake(granted)
        return core.ready

    # The Wait protocol (see _wait_py).
    def granted(self) -> None:
        self.phase = HELD

    def abandon(self) -> None:
        if self.queue is not None:
            self.core.wake(self.core.withdraw(self))
