"""Hypothesis state machines for the sans-I/O cores, against a plain-list model.

Each machine drives the pure core and, when built, the compiled core in lockstep with the same
operations, and checks after every step that (1) both cores granted exactly the waiters the model
granted, in the same order (differential test), (2) no limit is ever exceeded, (3) no queued
waiter could have been admitted (work-conserving, so the fast path never overtakes anyone), and
(4) nothing leaks once everything is released.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    precondition,
    rule,
)

from tests.core_impls import implementations

READY = object()
SESSIONS = ("a", "b", "c", "d")
NKINDS = 3
FINISHED = 2  # a waiter's state once it is neither queued nor holding a granted slot


def _nothing(*args: object) -> None:
    raise AssertionError("the sans-I/O core must not call the façade here")


# ------------------------------------------------------------------------------------------------
# Scheduler

POOLS = (None, "p1", "p2", "p3", "free")  # "free" never has a limit; "p3" gets one mid-run


class SchedModel:
    """Reference round-robin scheduler on plain lists; independent of the core's linked lists.

    A request's pool is the name of a pool that had a limit when the request was made, or None.
    At a full queue a request takes the place of the newest waiter of the session with the most
    waiters (of those, the one whose count changed last) when its own session, counting it,
    would still have fewer; otherwise it is refused.
    """

    def __init__(
        self,
        global_limit: int,
        session_limit: int,
        kind_limits: list[int],
        pool_limits: dict[str, int],
        max_queue: int,
    ) -> None:
        self.global_limit = global_limit
        self.session_limit = session_limit
        self.kind_limits = kind_limits
        self.pool_limits = dict(pool_limits)
        self.max_queue = max_queue
        self.rejected = 0
        self.displaced = 0
        self.changes = 0
        self.changed_at: dict[Hashable, int] = {}  # session -> when its count last changed
        self.in_flight = 0
        self.by_kind = [0] * NKINDS
        self.by_session: dict[Hashable, int] = {}
        self.by_pool: dict[str, int] = dict.fromkeys(pool_limits, 0)
        # session -> [(seq, kind, pool)]
        self.queues: dict[Hashable, list[tuple[int, int, str | None]]] = {}
        self.ring: list[Hashable] = []  # sessions with waiters; ring[0] is served next

    def effective_pool(self, pool: str | None) -> str | None:
        return pool if pool in self.pool_limits else None

    def room(self, session: Hashable, kind: int, pool: str | None) -> bool:
        return (
            self.in_flight < self.global_limit
            and self.by_kind[kind] < self.kind_limits[kind]
            and self.by_session.get(session, 0) < self.session_limit
            and (pool is None or self.by_pool[pool] < self.pool_limits[pool])
        )

    def take(self, session: Hashable, kind: int, pool: str | None) -> None:
        self.in_flight += 1
        self.by_kind[kind] += 1
        self.by_session[session] = self.by_session.get(session, 0) + 1
        if pool is not None:
            self.by_pool[pool] += 1

    def _count_changed(self, session: Hashable) -> None:
        self.changes += 1
        self.changed_at[session] = self.changes

    def enqueue(self, session: Hashable, kind: int, pool: str | None, seq: int) -> None:
        if session not in self.queues:
            self.queues[session] = []
            self.ring.append(session)  # end of the current round
        self.queues[session].append((seq, kind, pool))
        self._count_changed(session)

    def queue_or_displace(
        self, session: Hashable, kind: int, pool: str | None, seq: int
    ) -> tuple[bool, int | None]:
        """(queued, the seq of the waiter that gave its place or None)."""
        if sum(len(q) for q in self.queues.values()) < self.max_queue:
            self.enqueue(session, kind, pool, seq)
            return True, None
        self.rejected += 1
        mine = len(self.queues.get(session, []))
        most = max(
            self.queues, key=lambda s: (len(self.queues[s]), self.changed_at[s]), default=None
        )
        if most is None or mine + 1 >= len(self.queues[most]):
            return False, None
        newest = max(w[0] for w in self.queues[most])
        self.drop(most, newest)
        self.displaced += 1
        self.enqueue(session, kind, pool, seq)
        return True, newest

    def drop(self, session: Hashable, seq: int) -> None:
        self.queues[session] = [w for w in self.queues[session] if w[0] != seq]
        self._count_changed(session)
        if not self.queues[session]:
            del self.queues[session]
            self.ring.remove(session)

    def release(self, session: Hashable, kind: int, pool: str | None) -> list[int]:
        self.in_flight -= 1
        self.by_kind[kind] -= 1
        self.by_session[session] -= 1
        if not self.by_session[session]:
            del self.by_session[session]
        if pool is not None:
            self.by_pool[pool] -= 1
        return self.grant()

    def set_pool_limit(self, pool: str, limit: int) -> list[int]:
        self.by_pool.setdefault(pool, 0)
        self.pool_limits[pool] = limit
        return self.grant()

    def admissible(self, session: Hashable) -> tuple[int, int, str | None] | None:
        if self.by_session.get(session, 0) >= self.session_limit:
            return None
        fits = [w for w in self.queues[session] if self.room(session, w[1], w[2])]
        return min(fits) if fits else None

    def next_grant(self) -> tuple[int, Hashable, tuple[int, int, str | None]] | None:
        """(ring position, session, waiter) of the next admission, or None."""
        if self.in_flight >= self.global_limit:
            return None
        for position, session in enumerate(self.ring):
            waiter = self.admissible(session)
            if waiter is not None:
                return position, session, waiter
        return None

    def grant(self) -> list[int]:
        granted = []
        while (found := self.next_grant()) is not None:
            position, session, (seq, kind, pool) = found
            # rotate so the session after the served one leads the next round
            self.ring = self.ring[position + 1 :] + self.ring[: position + 1]
            self.drop(session, seq)
            self.take(session, kind, pool)
            granted.append(seq)
        return granted


# seq -> (session, kind, pool the model counts it in, per-core waiters or None for a fast-path
# holder, per-core pool numbers)
Request = tuple[Hashable, int, "str | None", "list[Any] | None", list[int]]


class SchedulerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.cores: list[Any] = []
        self.model: SchedModel | None = None
        self.seq = 0
        self.holding: dict[int, Request] = {}
        self.queued: dict[int, Request] = {}
        self.closed = False

    @precondition(lambda self: self.model is None)
    @rule(
        global_limit=st.integers(1, 5),
        session_limit=st.integers(1, 4),
        kind_limits=st.lists(st.integers(1, 4), min_size=3, max_size=3),
        pool_limits=st.dictionaries(st.sampled_from(["p1", "p2"]), st.integers(1, 3)),
        max_queue=st.sampled_from([0, 1, 2, 3, 4, 5, 7, 10_000]),
    )
    def setup(
        self,
        global_limit: int,
        session_limit: int,
        kind_limits: list[int],
        pool_limits: dict[str, int],
        max_queue: int,
    ) -> None:
        self.model = SchedModel(global_limit, session_limit, kind_limits, pool_limits, max_queue)
        self.cores = [
            impl.SchedulerCore(
                READY,
                _nothing,
                _nothing,
                _nothing,
                _nothing,
                global_limit,
                session_limit,
                kind_limits,
                list(pool_limits.items()),
                max_queue,
                0.0,
            )
            for impl in implementations("_sched")
        ]

    def _apply_grants(self, results: list[Any], expected: list[int]) -> None:
        for granted in results:
            got = [w.owner[0] for w in (granted or [])]
            assert got == expected, (got, expected)
        for seq in expected:
            self.holding[seq] = self.queued.pop(seq)

    @precondition(lambda self: self.model is not None)
    @rule(session=st.sampled_from(SESSIONS), kind=st.integers(0, 2), pool=st.sampled_from(POOLS))
    def acquire(self, session: str, kind: int, pool: str | None) -> None:
        assert self.model is not None
        seq = self.seq
        self.seq += 1
        counted = self.model.effective_pool(pool)
        numbers = [0 if pool is None else core.pool_number(pool) for core in self.cores]
        assert all((n == 0) == (counted is None) for n in numbers)
        fast = self.model.room(session, kind, counted) and not self.closed
        results = [
            core.try_acquire_in_pool(session, kind, n) if n else core.try_acquire(session, kind)
            for core, n in zip(self.cores, numbers, strict=True)
        ]
        assert results == [fast] * len(self.cores)
        if fast:
            self.model.take(session, kind, counted)
            self.holding[seq] = (session, kind, counted, None, numbers)
            return
        if self.closed:
            return  # the façade raises SchedulerClosed instead of queueing
        results = [
            core.enqueue(session, kind, (seq, session), n)
            for core, n in zip(self.cores, numbers, strict=True)
        ]
        queued, displaced = self.model.queue_or_displace(session, kind, counted, seq)
        for waiter, gave_way in results:
            assert (waiter is not None) == queued
            assert (None if gave_way is None else gave_way.owner[0]) == displaced
        if displaced is not None:
            gave_way_waiters = self.queued.pop(displaced)[3]
            assert gave_way_waiters is not None
            assert [w for _, w in results] == gave_way_waiters
            assert all(w.state == FINISHED for w in gave_way_waiters)  # withdrawn, not granted
        if queued:
            waiters = [waiter for waiter, _ in results]
            self.queued[seq] = (session, kind, counted, waiters, numbers)

    @precondition(lambda self: self.model is not None)
    @rule(
        session=st.sampled_from(SESSIONS),
        calls=st.integers(2, 6),
        kind=st.integers(0, 2),
        pool=st.sampled_from(POOLS),
    )
    def flood(self, session: str, calls: int, kind: int, pool: str | None) -> None:
        """One session's calls in a row: what fills the queue and makes it give way to others."""
        for _ in range(calls):
            self.acquire(session, kind, pool)

    @precondition(lambda self: self.holding)
    @rule(pick=st.integers(0, 10_000))
    def release(self, pick: int) -> None:
        assert self.model is not None
        seq = sorted(self.holding)[pick % len(self.holding)]
        session, kind, counted, waiters, numbers = self.holding.pop(seq)
        if waiters is None:
            results = [
                core.release_in_pool(session, kind, n) if n else core.release(session, kind)
                for core, n in zip(self.cores, numbers, strict=True)
            ]
        else:
            results = [core.finish(w) for core, w in zip(self.cores, waiters, strict=True)]
        self._apply_grants(results, self.model.release(session, kind, counted))

    @precondition(lambda self: self.queued or self.holding)
    @rule(pick=st.integers(0, 10_000))
    def withdraw(self, pick: int) -> None:
        """A waiter's task was cancelled: it leaves the queue, or gives back a fresh grant."""
        assert self.model is not None
        candidates = sorted(self.queued) + sorted(
            s for s, request in self.holding.items() if request[3] is not None
        )
        if not candidates:
            return
        seq = candidates[pick % len(candidates)]
        if seq in self.queued:
            session, _, _, waiters, _ = self.queued.pop(seq)
            assert waiters is not None
            results = [core.withdraw(w) for core, w in zip(self.cores, waiters, strict=True)]
            assert all(not r for r in results)  # leaving the queue never admits anyone
            self.model.drop(session, seq)
        else:
            session, kind, counted, granted_waiters, _ = self.holding.pop(seq)
            assert granted_waiters is not None
            results = [
                core.withdraw(w) for core, w in zip(self.cores, granted_waiters, strict=True)
            ]
            self._apply_grants(results, self.model.release(session, kind, counted))

    @precondition(lambda self: self.queued)
    @rule(session=st.sampled_from(SESSIONS))
    def cancel_owner(self, session: str) -> None:
        assert self.model is not None
        victims = sorted(s for s, request in self.queued.items() if request[0] == session)
        for seq in victims:
            waiters = self.queued.pop(seq)[3]
            assert waiters is not None
            for core, w in zip(self.cores, waiters, strict=True):
                assert core.cancel_owner(w.owner) == [w]
            self.model.drop(session, seq)

    @precondition(lambda self: self.model is not None)
    @rule(pool=st.sampled_from(["p1", "p2", "p3"]), limit=st.integers(1, 4))
    def set_pool_limit(self, pool: str, limit: int) -> None:
        """A new pool, or a pool's limit raised (admitting at once) or lowered."""
        assert self.model is not None
        results = [core.set_pool_limit(pool, limit) for core in self.cores]
        self._apply_grants(results, self.model.set_pool_limit(pool, limit))

    @precondition(lambda self: self.model is not None and not self.closed)
    @rule()
    def close(self) -> None:
        """Every queued waiter is dropped; holders keep their slots until they release."""
        assert self.model is not None
        for core in self.cores:
            dropped = core.close()
            assert sorted(w.owner[0] for w in dropped) == sorted(self.queued)
        for seq, request in sorted(self.queued.items()):
            self.model.drop(request[0], seq)
        self.queued.clear()
        self.closed = True
        self.model.global_limit = 0  # as the core does: no room ever again

    @invariant()
    def limits_hold_and_nobody_admissible_waits(self) -> None:
        model = self.model
        if model is None:
            return
        queued_by_pool = dict.fromkeys(model.pool_limits, 0)
        for queue in model.queues.values():
            for _, _, pool in queue:
                if pool is not None:
                    queued_by_pool[pool] += 1
        for core in self.cores:
            assert core.in_flight == model.in_flight
            assert self.closed or core.in_flight <= model.global_limit
            by_kind, _ = core.kind_counts()
            assert by_kind == model.by_kind
            assert all(n <= lim for n, lim in zip(by_kind, model.kind_limits, strict=True))
            by_session, queued_session = core.session_counts()
            assert by_session == model.by_session
            assert all(n <= model.session_limit for n in by_session.values())
            assert queued_session == {s: len(q) for s, q in model.queues.items()}
            assert core.queued == len(self.queued) <= model.max_queue
            assert core.rejected == model.rejected
            assert core.shares.displaced == model.displaced
            by_pool, queued_pool = core.pool_counts()
            assert by_pool == model.by_pool and queued_pool == queued_by_pool
        for session in model.queues:
            assert model.in_flight >= model.global_limit or model.admissible(session) is None

    def teardown(self) -> None:
        """Release everything: the cores must end empty (no leaked slot, session or queue)."""
        if self.model is None:
            return
        while self.holding or self.queued:
            if self.holding:
                self.release(0)
            else:
                self.withdraw(0)
        for core in self.cores:
            assert core.in_flight == 0 and core.queued == 0
            assert core.session_in_flight == {} and core.queues == {} and core.cursor is None
            by_pool, queued_pool = core.pool_counts()
            assert set(by_pool.values()) <= {0} and set(queued_pool.values()) <= {0}


TestScheduler = SchedulerMachine.TestCase
TestScheduler.settings = settings(max_examples=150, stateful_step_count=60, deadline=None)


# ------------------------------------------------------------------------------------------------
# Gate


class GateMachine(RuleBasedStateMachine):
    holders = Bundle("holders")

    def __init__(self) -> None:
        super().__init__()
        self.cores = [impl.GateCore(READY, _nothing, _nothing) for impl in implementations("_gate")]
        self.shared = 0
        self.exclusive = False
        self.queue: list[tuple[int, bool]] = []  # (id, exclusive) in arrival order
        self.granted: set[int] = set()
        self.next_id = 0

    def _model_grant(self) -> list[int]:
        out = []
        while self.queue and not self.exclusive:
            wid, excl = self.queue[0]
            if excl and self.shared:
                break
            self.queue.pop(0)
            if excl:
                self.exclusive = True
            else:
                self.shared += 1
            out.append(wid)
            self.granted.add(wid)
            if excl:
                break
        return out

    def _check(self, results: list[Any], expected: list[int]) -> None:
        for granted in results:
            assert [w.future for w in (granted or [])] == expected

    @rule(target=holders, exclusive=st.booleans())
    def enter(self, exclusive: bool) -> Any:
        can = not self.queue and not self.exclusive and not (exclusive and self.shared)
        assert [core.try_enter(exclusive) for core in self.cores] == [can] * len(self.cores)
        wid = self.next_id
        self.next_id += 1
        if can:
            if exclusive:
                self.exclusive = True
            else:
                self.shared += 1
            return ("fast", exclusive, None, wid)
        # The core never touches the future on these paths: use it as an id.
        waiters = [core.enqueue(exclusive, wid) for core in self.cores]
        self.queue.append((wid, exclusive))
        return ("queued", exclusive, waiters, wid)

    def _leave_model(self, exclusive: bool) -> list[int]:
        if exclusive:
            self.exclusive = False
        else:
            self.shared -= 1
        return self._model_grant()

    @rule(holder=consumes(holders))
    def leave(self, holder: Any) -> None:
        how, exclusive, waiters, wid = holder
        if how == "fast":
            self._check(
                [core.leave(exclusive) for core in self.cores], self._leave_model(exclusive)
            )
        elif wid in self.granted:
            self.granted.discard(wid)
            results = [core.finish(w) for core, w in zip(self.cores, waiters, strict=True)]
            self._check(results, self._leave_model(exclusive))

    @rule(holder=consumes(holders))
    def cancel(self, holder: Any) -> None:
        how, exclusive, waiters, wid = holder
        if how == "fast":
            return
        results = [core.withdraw(w) for core, w in zip(self.cores, waiters, strict=True)]
        if wid in self.granted:
            self.granted.discard(wid)
            self._check(results, self._leave_model(exclusive))
        else:
            was_head = self.queue and self.queue[0][0] == wid
            self.queue = [q for q in self.queue if q[0] != wid]
            self._check(results, self._model_grant() if was_head else [])

    @invariant()
    def state_matches_and_order_is_strict(self) -> None:
        for core in self.cores:
            assert core.shared_running == self.shared
            assert bool(core.exclusive_running) == self.exclusive
            assert core.queued == len(self.queue)
        assert not (self.exclusive and self.shared)
        if self.queue:  # the head waits only for a real reason
            head_exclusive = self.queue[0][1]
            assert self.exclusive or (head_exclusive and self.shared)


TestGate = GateMachine.TestCase
TestGate.settings = settings(max_examples=150, stateful_step_count=60, deadline=None)


# ------------------------------------------------------------------------------------------------
# Lock table


class LockMachine(RuleBasedStateMachine):
    holders = Bundle("holders")
    KEYS = ("/k1", "/k2", "/k3")

    def __init__(self) -> None:
        super().__init__()
        self.cores = [
            impl.LockTableCore(READY, _nothing, _nothing) for impl in implementations("_locks")
        ]
        self.held: set[str] = set()
        self.queues: dict[str, list[int]] = {}
        self.granted: set[int] = set()
        self.next_id = 0

    @rule(target=holders, key=st.sampled_from(KEYS))
    def lock(self, key: str) -> Any:
        free = key not in self.held
        assert [core.try_lock(key, None) for core in self.cores] == [free] * len(self.cores)
        wid = self.next_id
        self.next_id += 1
        if free:
            self.held.add(key)
            return ("fast", key, None, wid)
        waiters = [core.enqueue(key, wid, None) for core in self.cores]
        self.queues.setdefault(key, []).append(wid)
        return ("queued", key, waiters, wid)

    def _unlock_model(self, key: str) -> int | None:
        queue = self.queues.get(key)
        if queue:
            wid = queue.pop(0)
            if not queue:
                del self.queues[key]
            self.granted.add(wid)
            return wid
        self.held.discard(key)
        return None

    def _check(self, results: list[Any], expected: int | None) -> None:
        for passed in results:
            assert (None if passed is None else passed.owner) == expected

    @rule(holder=consumes(holders))
    def unlock(self, holder: Any) -> None:
        how, key, waiters, wid = holder
        if how == "fast":
            self._check([core.unlock(key) for core in self.cores], self._unlock_model(key))
        elif wid in self.granted:
            self.granted.discard(wid)
            results = [core.finish(w) for core, w in zip(self.cores, waiters, strict=True)]
            self._check(results, self._unlock_model(key))

    @rule(holder=consumes(holders))
    def cancel(self, holder: Any) -> None:
        how, key, waiters, wid = holder
        if how == "fast":
            return
        results = [core.withdraw(w) for core, w in zip(self.cores, waiters, strict=True)]
        if wid in self.granted:
            self.granted.discard(wid)
            self._check(results, self._unlock_model(key))
        else:
            self.queues[key].remove(wid)
            if not self.queues[key]:
                del self.queues[key]
            self._check(results, None)

    @invariant()
    def table_matches_model(self) -> None:
        for core in self.cores:
            assert set(core.table) == self.held  # free keys leave the table
            for key, lock in core.table.items():
                assert lock.waiting == len(self.queues.get(key, []))


TestLocks = LockMachine.TestCase
TestLocks.settings = settings(max_examples=150, stateful_step_count=60, deadline=None)
