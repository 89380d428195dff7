"""``ConcurrencyScheduler``: process-wide, per-session, per-kind and per-pool admission (SPEC §8.2).

The fair round-robin state machine is ``fastgate._core.sched`` (compiled when available); this
façade owns futures, queue timeouts, cancellation, closing and statistics.

Cancellation: a task cancelled while queued is withdrawn, and no other waiter's order changes. A
task whose slot was granted in the same loop iteration as its cancellation gives the slot back at
once, so the grant passes to the next waiter instead of being lost.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Protocol, final

import msgspec

from fastgate import _core
from fastgate.admission.protocol import AsyncHold
from fastgate.errors import OwnerCancelled, ResourceExhausted, SchedulerClosed
from fastgate.model.kinds import ToolKind

_DEFAULT_KIND_LIMITS = MappingProxyType(
    {ToolKind.READ_ONLY: 32, ToolKind.WRITE: 8, ToolKind.EXECUTE: 16}
)


def _positive_int(name: str, value: object, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name}: expected an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name}: must be at least {minimum}, got {value!r}")
    return value


def _pool_name(name: object, where: str) -> str:
    if type(name) is not str or not name:
        raise ValueError(f"{where}: a pool name is a non-empty string, got {name!r}")
    return name


@dataclass(frozen=True, slots=True)
class SchedulerLimits:
    """Capacity of a ``ConcurrencyScheduler``. Invalid values raise ``ValueError`` naming the field.

    ``kind_limits`` may name a subset of kinds; a kind left out is capped by ``global_limit`` only.
    ``pool_limits`` caps the slots of each named pool (a slot names at most one, e.g. every call
    to one MCP server); a pool with no entry adds no limit.
    ``max_queue`` bounds the requests queued in the whole scheduler (0: never queue), shared
    fairly among the sessions waiting: at a full queue, a request takes the place of the newest
    waiter of the session with the most waiters when its own session, this request included,
    would still have fewer than that session has (the displaced waiter fails with
    ``ResourceExhausted``, reason ``"queue_full"``); otherwise it is refused.
    ``queue_timeout`` (seconds, or None for no limit) bounds how long one request may queue.
    """

    global_limit: int = 32
    session_limit: int = 10
    kind_limits: Mapping[ToolKind, int] = field(default_factory=lambda: _DEFAULT_KIND_LIMITS)
    pool_limits: Mapping[str, int] = field(default_factory=dict)
    max_queue: int = 1024
    queue_timeout: float | None = 30.0

    def __post_init__(self) -> None:
        _positive_int("global_limit", self.global_limit)
        _positive_int("session_limit", self.session_limit)
        _positive_int("max_queue", self.max_queue, minimum=0)
        if not isinstance(self.kind_limits, Mapping):
            raise ValueError(f"kind_limits: expected a mapping, got {self.kind_limits!r}")
        parsed: dict[ToolKind, int] = {}
        for key, limit in self.kind_limits.items():
            kind = ToolKind.parse(key, field="kind_limits")
            parsed[kind] = _positive_int(f"kind_limits[{kind.name}]", limit)
        object.__setattr__(self, "kind_limits", MappingProxyType(parsed))
        if not isinstance(self.pool_limits, Mapping):
            raise ValueError(f"pool_limits: expected a mapping, got {self.pool_limits!r}")
        pools: dict[str, int] = {}
        for pool, pool_limit in self.pool_limits.items():
            name = _pool_name(pool, "pool_limits")
            pools[name] = _positive_int(f"pool_limits[{name!r}]", pool_limit)
        object.__setattr__(self, "pool_limits", MappingProxyType(pools))
        timeout = self.queue_timeout
        if timeout is not None:
            if isinstance(timeout, bool) or not isinstance(timeout, int | float):
                raise ValueError(f"queue_timeout: expected seconds or None, got {timeout!r}")
            if not timeout > 0:  # also refuses NaN
                raise ValueError(f"queue_timeout: must be positive, got {timeout!r}")

    def limit_for(self, kind: ToolKind) -> int:
        return self.kind_limits.get(kind, self.global_limit)


class ClusterStats(msgspec.Struct, frozen=True):
    """The cluster view of a scheduler made with ``cluster=`` (``SchedulerStats.cluster``).

    ``allotment_*``: this worker's current share of each limit (its lease, or the fallback when
    ``degraded``). ``lease_age_s``/``lease_remaining_s``: since the lease was asked for and until
    this worker stops admitting on it (None without a lease). ``redis_round_trips``: refreshes
    sent to Redis (each one script call), ``refresh_failures`` the ones that failed. Sessions
    and pools are keyed by their id when it is short printable text, else by an escaped, cut
    form that stays distinct (``fastgate.cluster._names.shown``).
    """

    namespace: str
    worker_id: str
    workers: int
    degraded: bool
    degraded_reason: str | None
    grace: bool
    lease_age_s: float | None
    lease_remaining_s: float | None
    allotment_global: int
    allotment_by_kind: dict[str, int]
    allotment_by_pool: dict[str, int]
    allotment_by_session: dict[str, int]
    redis_round_trips: int
    refresh_failures: int


class SchedulerCluster(Protocol):
    """What ``ConcurrencyScheduler(cluster=...)`` takes (``fastgate.cluster.RedisCluster``)."""

    def attach(self, scheduler: ConcurrencyScheduler, core: object) -> Callable[..., AsyncHold]:
        """Start sharing the scheduler's limits; returns the ``slot`` the scheduler exposes."""
        ...

    def limits_changed(self) -> None: ...

    async def detach(self) -> None: ...

    def stats(self) -> ClusterStats: ...


class SchedulerStats(msgspec.Struct, frozen=True):
    """A snapshot of ``ConcurrencyScheduler.stats()``; wait percentiles are over queued requests.
    ``rejected`` counts every request refused a slot: refused at a full queue, displaced from it
    (``displaced``: queued, then gave its place to a session with fewer waiting) or timed out
    (``timed_out``). ``cluster``: the cluster view, for a scheduler made with ``cluster=``."""

    in_flight: int
    queued: int
    in_flight_by_session: dict[str, int]
    queued_by_session: dict[str, int]
    in_flight_by_kind: dict[str, int]
    queued_by_kind: dict[str, int]
    in_flight_by_pool: dict[str, int]
    queued_by_pool: dict[str, int]
    admitted: int
    admitted_after_wait: int
    rejected: int
    timed_out: int
    wait_p50_ms: float
    wait_p90_ms: float
    wait_p99_ms: float
    closed: bool
    cluster: ClusterStats | None = None
    displaced: int = 0


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


@final
class ConcurrencyScheduler:
    """Admits tool calls under a global, a per-session, a per-kind and a per-pool limit, fairly
    across sessions.

    ``async with scheduler.slot(session_id, kind, owner=None, pool=None):`` holds one slot.
    Waiters are admitted round-robin across sessions and FIFO within a session; a waiter blocked
    only by its kind's or its pool's limit does not hold back other kinds or pools. One scheduler
    serves one event loop at a time.
    """

    #: ``async with scheduler.slot(session_id, kind, owner=None, pool=None):`` -- one slot.
    slot: Callable[..., AsyncHold]

    def __init__(
        self, limits: SchedulerLimits | None = None, *, cluster: SchedulerCluster | None = None
    ) -> None:
        self.limits = limits if limits is not None else SchedulerLimits()
        lim = self.limits
        self._core = _core.sched.SchedulerCore(
            _core.READY,
            _core.WAIT,
            asyncio.get_running_loop,
            time.monotonic,
            self._arm_expiry,
            lim.global_limit,
            lim.session_limit,
            [lim.limit_for(kind) for kind in ToolKind],
            list(lim.pool_limits.items()),
            lim.max_queue,
            lim.queue_timeout or 0.0,
        )
        # Bound straight to the compiled core: no Python frame on the uncontended path.
        self.slot = self._core.slot
        self._timed_out = 0
        # With a cluster the limits hold over every worker of its namespace: the local core
        # admits within this worker's leased allotment (SPEC §18).
        self.cluster = cluster
        if cluster is not None:
            self.slot = cluster.attach(self, self._core)

    @property
    def closed(self) -> bool:
        return bool(self._core.closed)

    def _arm_expiry(self, deadline: float) -> None:
        asyncio.get_running_loop().call_later(deadline - time.monotonic(), self._expire)

    def _expire(self) -> None:
        """Fail the requests that queued too long; re-arm for the oldest one still waiting."""
        core = self._core
        core.expiry_due = 0.0
        timeout = self.limits.queue_timeout or 0.0
        now = time.monotonic()
        for waiter in core.expire(now):
            if not waiter.future.done():
                self._timed_out += 1
                waiter.future.set_exception(
                    ResourceExhausted(
                        f"waited {timeout:g}s for a tool slot; retry next turn",
                        reason="queue_timeout",
                        retry_after=timeout,
                    )
                )
        oldest = core.oldest_enqueued_at()
        if oldest:
            core.expiry_due = oldest + timeout
            self._arm_expiry(core.expiry_due)

    def set_pool_limit(self, pool: str, limit: int) -> None:
        """Give ``pool`` a limit from now on, or change its limit (``limits`` then shows it).

        For a component that brings its own cap, e.g. the MCP bridge and a server's
        ``max_concurrency``. A raised limit admits waiters at once; a lowered one lets the
        slots in flight finish and admits nothing new in the pool until it is below the limit.
        Slots taken before the pool had a limit do not count towards it.
        """
        name = _pool_name(pool, "set_pool_limit")
        limit = _positive_int(f"pool_limits[{name!r}]", limit)
        self.limits = replace(self.limits, pool_limits={**self.limits.pool_limits, name: limit})
        if self.cluster is not None:
            # Nothing in the pool until the cluster grants this worker a share of the new limit.
            self._core.wake(self._core.set_pool_limit(name, 0))
            self.cluster.limits_changed()
            return
        self._core.wake(self._core.set_pool_limit(name, limit))

    def cancel_owner(self, owner: object) -> int:
        """Withdraw ``owner``'s queued requests (they raise ``OwnerCancelled``); returns how many.

        Slots the owner already holds are not touched: their holders release them as usual.
        """
        dropped = self._core.cancel_owner(owner)
        for waiter in dropped:
            if not waiter.future.done():
                waiter.future.set_exception(OwnerCancelled(f"requests of {owner!r} were cancelled"))
        return len(dropped)

    async def close(self) -> None:
        """Refuse new requests and fail every queued one with ``SchedulerClosed``.

        Slots in use stay valid until released. This is a checkpoint: the failed waiters get to
        run before it returns.
        """
        for waiter in self._core.close():
            if not waiter.future.done():
                waiter.future.set_exception(SchedulerClosed("the scheduler is closed"))
        if self.cluster is not None:
            await self.cluster.detach()  # gives this worker's allotment back
        await asyncio.sleep(0)

    def stats(self) -> SchedulerStats:
        core = self._core
        kind_in_flight, kind_queued = core.kind_counts()
        session_in_flight, session_queued = core.session_counts()
        pool_in_flight, pool_queued = core.pool_counts()
        waits = sorted(core.waits)
        return SchedulerStats(
            in_flight=int(core.in_flight),
            queued=int(core.queued),
            in_flight_by_session={str(k): v for k, v in session_in_flight.items()},
            queued_by_session={str(k): v for k, v in session_queued.items()},
            in_flight_by_kind={kind.name: kind_in_flight[kind] for kind in ToolKind},
            queued_by_kind={kind.name: kind_queued[kind] for kind in ToolKind},
            in_flight_by_pool=pool_in_flight,
            queued_by_pool=pool_queued,
            admitted=int(core.admitted),
            admitted_after_wait=int(core.admitted_after_wait),
            rejected=int(core.rejected),
            timed_out=self._timed_out,
            wait_p50_ms=_percentile(waits, 0.50) * 1000.0,
            wait_p90_ms=_percentile(waits, 0.90) * 1000.0,
            wait_p99_ms=_percentile(waits, 0.99) * 1000.0,
            closed=bool(core.closed),
            cluster=None if self.cluster is None else self.cluster.stats(),
            displaced=int(core.shares.displaced),
        )


_default_lock = threading.Lock()
_default: ConcurrencyScheduler | None = None


def default_scheduler() -> ConcurrencyScheduler:
    """The process-wide scheduler every executor shares unless given its own (default limits).

    A closed default is replaced by a fresh one, so one disposal cannot poison the process.
    """
    global _default
    with _default_lock:
        if _default is None or _default.closed:
            _default = ConcurrencyScheduler()
        return _default
