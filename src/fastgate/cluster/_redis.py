"""``RedisCluster``: this worker's lease on a share of the namespace's limits.

A refresher task reports the worker's demand and asks the script (``_script``) for its allotment,
every ``refresh_interval`` and sooner when a session it has no share for shows up or demand grows
past what Redis last saw. The allotment is applied to the local scheduler core as its limits, so
admission itself never waits on Redis; the core also checks the lease's end on every admission,
on the worker's own monotonic clock, so a worker that was frozen admits nothing on a stale lease.

Sessions and pools are named in Redis by ``_names.redis_name``, never by what the caller chose:
every report then decodes in the script, whatever the ids hold.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import math
import os
import secrets
import socket
import sys
import time
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError, ResponseError

from fastgate.admission import AsyncHold, ClusterStats
from fastgate.cluster._names import redis_name, shown
from fastgate.cluster._script import REFRESH_LUA
from fastgate.model import ToolKind

if TYPE_CHECKING:
    from fastgate.admission import ConcurrencyScheduler

log = logging.getLogger("fastgate.cluster")

#: A worker stops admitting on a lease at this fraction of ``lease_ttl`` after it asked for it,
#: measured on its own clock from before the request: before Redis can give the share away.
LEASE_SAFETY = 0.9
MAX_IDLE_REPORTED = 256  # idle sessions (seen since the last report) a report names, newest first
KINDS = tuple(ToolKind)
#: The local limit of a pool no worker of the namespace limits: the core still counts its slots,
#: so that what runs there is known the moment some worker declares a limit for it.
UNLIMITED = sys.maxsize


def _seconds(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name}: expected seconds, got {value!r}")
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name}: must be a positive number of seconds, got {value!r}")
    return float(value)


class _Lease:
    """An allotment Redis granted, and when (local clock) it was asked for and runs out."""

    __slots__ = ("asked_at", "epoch", "global_", "kinds", "pools", "sessions", "shown", "until")

    def __init__(
        self,
        global_: int,
        kinds: list[int],
        pools: dict[str, int],
        sessions: dict[str, int],
        asked_at: float,
        until: float,
        epoch: str,
    ) -> None:
        self.global_ = global_
        self.kinds = kinds
        self.pools = pools
        self.sessions = sessions
        self.asked_at = asked_at
        self.until = until
        self.epoch = epoch
        self.shown: dict[str, int] = {}  # the session shares by readable name, for stats()


class _Limits:
    """The limits in force over the namespace: the smallest any live worker declared (pools by
    their name in Redis), as Redis last computed them."""

    __slots__ = ("global_", "kinds", "pools", "session")

    def __init__(self, global_: int, session: int, kinds: list[int], pools: dict[str, int]) -> None:
        self.global_ = global_
        self.session = session
        self.kinds = kinds
        self.pools = pools


class RedisCluster:
    """Shares a ``ConcurrencyScheduler``'s limits with every worker of ``namespace`` on ``url``.

    ``lease_ttl``: how long an allotment lasts without a refresh (a dead or frozen worker's share
    returns to the others after it). ``refresh_interval``: how often a worker reports its demand.
    ``fallback_share``: what a worker may admit per kind when Redis cannot be reached and its
    lease has run out (0: nothing). One ``RedisCluster`` serves one scheduler.
    """

    def __init__(
        self,
        url: str,
        namespace: str = "fastgate",
        lease_ttl: float = 15.0,
        refresh_interval: float = 1.0,
        fallback_share: int = 1,
    ) -> None:
        if type(url) is not str or not url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(f"url: expected a redis:// rediss:// or unix:// URL, got {url!r}")
        if type(namespace) is not str or not namespace:
            raise ValueError(f"namespace: expected a non-empty string, got {namespace!r}")
        try:
            namespace.encode("utf-8")  # its keys and channel are sent as UTF-8
        except UnicodeEncodeError:
            raise ValueError(f"namespace: not valid UTF-8 text: {namespace!r}") from None
        self.url = url
        self.namespace = namespace
        self.lease_ttl = _seconds("lease_ttl", lease_ttl)
        self.refresh_interval = _seconds("refresh_interval", refresh_interval)
        if self.lease_ttl < 2 * self.refresh_interval:
            raise ValueError(
                f"lease_ttl ({lease_ttl!r}) must be at least twice refresh_interval "
                f"({refresh_interval!r}): one late refresh must not end a lease"
            )
        if isinstance(fallback_share, bool) or not isinstance(fallback_share, int):
            raise ValueError(f"fallback_share: expected an integer, got {fallback_share!r}")
        if fallback_share < 0:
            raise ValueError(f"fallback_share: must be 0 or more, got {fallback_share!r}")
        self.fallback_share = fallback_share
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self._keys = [f"{namespace}:workers", f"{namespace}:leases", f"{namespace}:epoch"]
        self._channel = f"{namespace}:rebalance"
        self._listener: asyncio.Task[None] | None = None
        self._confirm = False  # an allotment shrank: tell Redis at once that it is in force
        self._closing = False
        self._epoch: str | None = None  # the namespace state this worker last had a lease of
        self._scheduler: ConcurrencyScheduler | None = None
        self._core: Any = None
        self._client: Any = None
        self._script: Any = None
        self._task: asyncio.Task[None] | None = None
        self._drainer: asyncio.Task[None] | None = None  # after close(), while calls still run
        self._wake: asyncio.Event | None = None
        self._lease: _Lease | None = None
        self._caps: dict[Hashable, int] = {}  # the lease's session shares, by local session id
        self._seen: dict[Hashable, None] = {}  # sessions that asked for a slot since the report
        self._reported: dict[Hashable, int] = {}  # session demand in the last report
        self._pools: dict[str, str] = {}  # every pool used or limited here -> its name in Redis
        self._cluster_limits: _Limits | None = None  # from the last grant
        self._reported_pools: set[str] | None = None  # the pools the last report enforced
        self._workers = 0
        self._grace = False
        self._short = False
        self._degraded_reason: str | None = None
        self._fallback = False
        self._round_trips = 0
        self._failures = 0
        self._last_refresh = 0.0

    # -- the scheduler's side (SchedulerCluster) -------------------------------------------------

    def attach(self, scheduler: ConcurrencyScheduler, core: object) -> Callable[..., AsyncHold]:
        if self._scheduler is not None:
            raise RuntimeError("a RedisCluster serves one scheduler; make one per scheduler")
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError(
                "ConcurrencyScheduler(cluster=...) must be made inside a running event loop"
            ) from None
        self._scheduler = scheduler
        self._core = core
        timeout = max(0.25, min(self.refresh_interval, self.lease_ttl / 4))
        self._client = aioredis.Redis.from_url(
            self.url,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0),  # the refresher retries on its own schedule
            health_check_interval=0,
        )
        self._script = self._client.register_script(REFRESH_LUA)
        self._wake = asyncio.Event()
        for name in scheduler.limits.pool_limits:
            self._pools[name] = redis_name(name)
        # Nothing is admitted before the first allotment (or the fallback, if Redis is away).
        self._apply_zero()
        self._task = loop.create_task(self._run(), name=f"fastgate-cluster-{self.namespace}")
        self._listener = loop.create_task(
            self._listen(), name=f"fastgate-rebalance-{self.namespace}"
        )
        core_slot = self._core.slot
        caps = self._caps
        seen = self._seen
        wake = self._wake
        pools = self._pools
        track_pool = self._track_pool

        def slot(
            session_id: Hashable, kind: object, owner: object = None, pool: object = None
        ) -> AsyncHold:
            seen[session_id] = None
            if type(pool) is str and pool not in pools:
                track_pool(pool)
            if session_id not in caps and not self._fallback:
                wake.set()  # a session this worker has no share for: ask now
            hold: AsyncHold = core_slot(session_id, kind, owner, pool)
            return hold

        return slot

    def limits_changed(self) -> None:
        for name in self._limits().pool_limits:
            self._pools.setdefault(name, redis_name(name))
        if self._wake is not None:
            self._wake.set()

    def _track_pool(self, name: str) -> None:
        """Count the slots of a pool from its first call here, with whatever limit some worker
        of the namespace gave it (none: ``UNLIMITED``)."""
        self._pools[name] = redis_name(name)
        self._core.set_pool_limit(name, self._local_pools()[name])

    async def detach(self) -> None:
        """Stop admitting and give the allotment back: at once when nothing runs here, else what
        the running calls hold as each ends (a lease also lapses, should this process die)."""
        self._closing = True
        if self._wake is not None:
            self._wake.set()
        for task in (self._task, self._listener):
            # The client library may swallow a cancellation that lands inside one of its
            # calls; the loop then ends by itself on ``_closing``.
            while task is not None and not task.done():
                task.cancel()
                await asyncio.wait([task], timeout=0.1)
        self._task = self._listener = None
        if self._client is None or self._drainer is not None:
            return
        # The core is closed: it admits nothing more, and only what runs is held from now on.
        self._lease = None
        self._fallback = False
        if self._core.in_flight:
            self._drainer = asyncio.get_running_loop().create_task(
                self._drain(), name=f"fastgate-cluster-drain-{self.namespace}"
            )
            return
        await self._leave()

    async def wait_closed(self) -> None:
        """After ``close()``: wait until this worker has left Redis, which is once the calls it
        was running have released their slots."""
        if self._drainer is not None:
            await asyncio.shield(self._drainer)

    async def _drain(self) -> None:
        """Hold in Redis what the calls still running hold, less as each ends, then leave."""
        # The core tells nobody when a slot is released, so it is polled, at the rate of early
        # refreshes and only while a closed worker still runs calls.
        poll = min(0.05, self.refresh_interval / 20)
        core = self._core
        reported, reported_at = -1, 0.0
        try:
            while core.in_flight:
                now = time.monotonic()
                if core.in_flight != reported or now - reported_at >= self.refresh_interval:
                    reported, reported_at = core.in_flight, now
                    await self._report_draining(now)
                await asyncio.sleep(poll)
        finally:
            await self._leave()

    async def _report_draining(self, now: float) -> None:
        body, _ = self._report(now)  # no allotment in it: the closed core admits nothing
        self._round_trips += 1
        try:
            await self._script(
                keys=self._keys,
                args=[self.worker_id, int(self.lease_ttl * 1000), body, "drain", self._channel],
            )
        except (TimeoutError, RedisError, OSError) as exc:
            # Redis sees a worker that stopped refreshing: its record lapses with its lease.
            self._failures += 1
            self._degraded_reason = f"redis unreachable: {type(exc).__name__}: {exc}"

    async def _leave(self) -> None:
        client = self._client
        if client is None:
            return
        self._client = None
        with contextlib.suppress(RedisError, OSError, asyncio.TimeoutError):
            await self._script(
                keys=self._keys, args=[self.worker_id, 0, "{}", "leave", self._channel]
            )
            self._round_trips += 1
        await client.aclose()

    def stats(self) -> ClusterStats:
        lease = self._lease
        now = time.monotonic()
        core = self._core
        kinds: list[int]
        if lease is not None and now < lease.until:
            allot_global, kinds, sessions = lease.global_, lease.kinds, lease.shown
            pools = self._limited_pools()
        elif self._fallback:
            allot_global, kinds = self._fallback_caps()
            pools, sessions = self._limited_pools(), {}
        else:
            allot_global, kinds, pools, sessions = 0, [0, 0, 0], {}, {}
        return ClusterStats(
            namespace=self.namespace,
            worker_id=self.worker_id,
            workers=self._workers,
            degraded=self._degraded_reason is not None,
            degraded_reason=self._degraded_reason,
            grace=self._grace,
            lease_age_s=None if lease is None else now - lease.asked_at,
            lease_remaining_s=None if lease is None else max(0.0, lease.until - now),
            allotment_global=allot_global if core is not None else 0,
            allotment_by_kind={kind.name: kinds[kind] for kind in KINDS},
            allotment_by_pool={shown(name): share for name, share in pools.items()},
            allotment_by_session=dict(sessions),
            redis_round_trips=self._round_trips,
            refresh_failures=self._failures,
        )

    # -- the refresher ----------------------------------------------------------------------------

    async def _run(self) -> None:
        assert self._wake is not None
        wake = self._wake
        # Early refreshes (a new session, growing demand) come at most this often.
        min_gap = min(0.05, self.refresh_interval / 20)
        while not self._closing:
            wake.clear()
            try:
                await self._refresh()
            except Exception as exc:  # never let the refresher die: a lease would just lapse
                log.exception("fastgate.cluster %s: refresh failed", self.namespace)
                self._failed(f"refresh failed: {type(exc).__name__}: {exc}")
            while not self._closing:
                now = time.monotonic()
                since = now - self._last_refresh
                due_in = (
                    self.refresh_interval / 4 if self._short else self.refresh_interval
                ) - since
                lease = self._lease
                if lease is not None and not self._fallback and self._degraded_reason:
                    due_in = min(due_in, lease.until - now)  # to switch to the fallback on time
                if due_in <= 0 or self._confirm:
                    break
                if wake.is_set() or self._demand_grew():
                    if since >= min_gap:
                        break
                    await asyncio.sleep(min_gap - since)  # early refreshes are rate limited
                    continue
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(min(due_in, self.refresh_interval / 8)):
                        await wake.wait()
                self._check_lapsed()

    async def _listen(self) -> None:
        """Refresh early when another worker is short of its share or gave some back."""
        # A connection of its own, without a read timeout: it waits for messages.
        client = aioredis.Redis.from_url(
            self.url, socket_connect_timeout=self.refresh_interval, retry=Retry(NoBackoff(), 0)
        )
        assert self._wake is not None
        try:
            while not self._closing:
                pubsub = client.pubsub(ignore_subscribe_messages=True)
                try:
                    await pubsub.subscribe(self._channel)
                    async for message in pubsub.listen():
                        if message.get("data") != self.worker_id.encode():
                            self._wake.set()
                except (TimeoutError, RedisError, OSError):
                    pass  # Redis is away: the refresher says so; try again later
                finally:
                    with contextlib.suppress(RedisError, OSError, asyncio.TimeoutError):
                        await pubsub.aclose()  # type: ignore[no-untyped-call, unused-ignore]
                await asyncio.sleep(self.refresh_interval)
        finally:
            await client.aclose()

    def _demand_grew(self) -> bool:
        """Some session waits here with more demand than Redis last heard of."""
        core = self._core
        if not core.queued:
            return False
        in_flight, queued = core.session_counts()
        limit = self._session_limit()
        reported = self._reported
        for sid, waiting in queued.items():
            if min(waiting + in_flight.get(sid, 0), limit) > reported.get(sid, 0):
                return True
        return False

    def _limits(self) -> Any:
        assert self._scheduler is not None
        return self._scheduler.limits

    def _session_limit(self) -> int:
        """The session limit in force: this worker's, or a smaller one another worker declared."""
        own: int = self._limits().session_limit
        known = self._cluster_limits
        return own if known is None else min(own, known.session)

    def _kind_limit(self, kind: ToolKind) -> int:
        own: int = self._limits().limit_for(kind)
        known = self._cluster_limits
        return own if known is None else min(own, known.kinds[kind])

    def _pool_limits(self) -> dict[str, int]:
        """Every pool limit in force here, by the pool's name in Redis: this worker's, and the
        ones other workers declared (the smallest of each)."""
        known = self._cluster_limits
        limits = dict(known.pools) if known is not None else {}
        for name, limit in self._limits().pool_limits.items():
            rname = redis_name(name)
            limits[rname] = min(limit, limits.get(rname, limit))
        return limits

    def _report(self, now: float) -> tuple[str, dict[str, Hashable]]:
        """The report as sent (JSON), and the local session of each session name in it."""
        core = self._core
        lim = self._limits()
        session_limit = self._session_limit()
        in_flight, queued = core.session_counts()
        kind_in, kind_queued = core.kind_counts()
        pool_in, pool_queued = core.pool_counts()
        names: dict[str, Hashable] = {}
        demand: dict[str, int] = {}
        use: dict[str, int] = {}
        reported: dict[Hashable, int] = {}
        # Sessions with calls running or waiting, then the most recent of those seen since the
        # last report and idle now (their share is kept for their next call), up to a bound: a
        # flood of one-off session ids must not make the script's run long for every worker.
        active = {**dict.fromkeys(in_flight), **dict.fromkeys(queued)}
        idle = itertools.islice(
            (sid for sid in reversed(self._seen) if sid not in active), MAX_IDLE_REPORTED
        )
        for sid in (*active, *idle):
            name = redis_name(sid)
            names[name] = sid
            running = in_flight.get(sid, 0)
            demand[name] = reported[sid] = min(running + queued.get(sid, 0), session_limit)
            if running:
                use[name] = running
        self._seen.clear()
        self._reported = reported
        report: dict[str, Any] = {
            "lim": {
                "g": lim.global_limit,
                "s": lim.session_limit,
                "k": [lim.limit_for(kind) for kind in KINDS],
                "p": _pool_names(lim.pool_limits),
            },
            "dem": {
                "s": demand,
                "k": [kind_in[i] + kind_queued[i] for i in range(3)],
                "p": {redis_name(name): pool_in[name] + pool_queued[name] for name in pool_in},
            },
            "use": {
                "g": int(core.in_flight),
                "s": use,
                "k": list(kind_in),
                "p": _pool_names(pool_in),
            },
        }
        lease = self._lease
        report["ri"] = int(self.refresh_interval * 1000)
        if self._epoch is not None:
            report["ep"] = self._epoch
        if lease is not None and now < lease.until:
            report["app"] = {
                "g": lease.global_,
                "s": lease.sessions,
                "k": lease.kinds,
                "p": lease.pools,
            }
            report["left"] = int((lease.until - now) * 1000)
        elif self._fallback:
            # What the fallback may admit until the next report counts as held, like a lease.
            global_, kinds = self._fallback_caps()
            per_session = min(global_, session_limit)
            report["app"] = {
                "g": global_,
                "s": dict.fromkeys(demand, per_session),
                "k": kinds,
                "p": self._pool_caps(),
            }
        app = report.get("app")
        self._reported_pools = None if app is None else set(app["p"])
        return json.dumps(report, separators=(",", ":")), names

    async def _refresh(self) -> None:
        asked_at = time.monotonic()
        self._last_refresh = asked_at
        body, names = self._report(asked_at)
        ttl_ms = int(self.lease_ttl * 1000)
        self._round_trips += 1
        try:
            raw = await self._script(
                keys=self._keys, args=[self.worker_id, ttl_ms, body, "refresh", self._channel]
            )
        except ResponseError as exc:  # it answered, with an error: not a connection problem
            self._failed(f"redis refused the refresh: {exc}")
            return
        except (TimeoutError, RedisError, OSError) as exc:
            self._failed(f"redis unreachable: {type(exc).__name__}: {exc}")
            return
        try:
            reply = json.loads(raw)
            refused = _refusal(self.namespace, reply)
        except (ValueError, TypeError, AttributeError) as exc:
            self._failed(f"redis answered the refresh with no allotment: {exc}")
            return
        if refused is not None:
            self._failed(refused)
            return
        until = asked_at + self.lease_ttl * LEASE_SAFETY
        if time.monotonic() >= until:
            self._failed("the refresh took longer than the lease")
            return
        self._cluster_limits = _cluster_limits(reply)
        self._workers = int(reply["workers"])
        self._grace = bool(reply["grace"])
        self._short = bool(reply["short"])
        pools = reply["p"] if isinstance(reply["p"], dict) else {}
        sessions = reply["s"] if isinstance(reply["s"], dict) else {}
        lease = _Lease(
            int(reply["g"]),
            [int(v) for v in reply["k"]],
            {str(k): int(v) for k, v in pools.items()},
            {str(k): int(v) for k, v in sessions.items()},
            asked_at,
            until,
            str(reply["epoch"]),
        )
        had_lease = self._lease is not None and asked_at < self._lease.until
        self._epoch = lease.epoch
        if self._grace and not had_lease:
            # Redis lost its records and old leases still run: no share to be had until they
            # lapse. Admit as if Redis were away (and show it), the fallback counted in ``use``.
            self._lease = None
            self._enter_fallback("redis lost its state; waiting for the old leases to lapse")
            return
        if self._degraded_reason is not None:
            log.warning("fastgate.cluster %s: redis is back, leases again", self.namespace)
        self._degraded_reason = None
        self._fallback = False
        # Tell Redis at once that a smaller share is in force, or a limit on a pool new here:
        # until then the others are granted as if it were not.
        enforced = self._reported_pools
        new_pools = enforced is not None and not lease.pools.keys() <= enforced
        self._confirm = new_pools or (self._lease is not None and _shrank(self._lease, lease))
        self._lease = lease
        self._apply_lease(lease, names)

    def _failed(self, reason: str) -> None:
        self._failures += 1
        # Logged once per cause, not per attempt: the refresher retries several times a second.
        previous = self._degraded_reason
        if previous is None or _cause(previous) != _cause(reason):
            log.warning(
                "fastgate.cluster %s: %s; admitting on the current lease, then at most %d per kind",
                self.namespace,
                reason,
                self.fallback_share,
            )
        self._degraded_reason = reason
        self._short = True
        self._check_lapsed()

    def _check_lapsed(self) -> None:
        """A lease that ran out while Redis is away gives way to the fallback."""
        lease = self._lease
        if self._degraded_reason is None or self._fallback:
            return
        if lease is None or time.monotonic() >= lease.until:
            self._lease = None
            self._enter_fallback(self._degraded_reason)

    def _enter_fallback(self, reason: str) -> None:
        self._degraded_reason = reason
        self._fallback = True
        global_, kinds = self._fallback_caps()
        self._caps.clear()
        self._set(global_, kinds, None, 0.0)

    def _fallback_caps(self) -> tuple[int, list[int]]:
        """(global, per kind) the fallback admits, within the smallest limits known."""
        share = self.fallback_share
        kinds = [min(self._kind_limit(kind), share) for kind in KINDS]
        global_: int = self._limits().global_limit
        known = self._cluster_limits
        if known is not None:
            global_ = min(global_, known.global_)
        return min(global_, sum(kinds)), kinds

    def _pool_caps(self) -> dict[str, int]:
        """What this worker may run now in each pool that has a limit, by its name in Redis."""
        if self._fallback:
            share = self.fallback_share
            return {rname: min(limit, share) for rname, limit in self._pool_limits().items()}
        caps = dict.fromkeys(self._pool_limits(), 0)  # no share yet
        if self._lease is not None:
            caps.update(self._lease.pools)
        return caps

    def _local_pools(self) -> dict[str, int]:
        """The local limit of every pool used or limited here (``UNLIMITED``: no worker limits
        it)."""
        caps = self._pool_caps()
        return {name: caps.get(rname, UNLIMITED) for name, rname in self._pools.items()}

    def _limited_pools(self) -> dict[str, int]:
        return {name: cap for name, cap in self._local_pools().items() if cap != UNLIMITED}

    def _apply_zero(self) -> None:
        self._set(0, [0, 0, 0], self._caps, 0.0)

    def _apply_lease(self, lease: _Lease, names: dict[str, Hashable]) -> None:
        """Apply the shares Redis granted, each session's to the local session of that name
        (the script grants shares only to sessions of this worker's report)."""
        caps = self._caps
        caps.clear()
        for name, share in lease.sessions.items():
            if name in names:
                sid = names[name]
                caps[sid] = share
                lease.shown[shown(sid)] = share
        self._set(lease.global_, lease.kinds, caps, lease.until)

    def _set(
        self, global_: int, kinds: list[int], caps: dict[Hashable, int] | None, until: float
    ) -> None:
        core = self._core
        if core.closed:
            return
        core.session_limit = self._session_limit()
        pools = list(self._local_pools().items())
        core.wake(core.set_limits(global_, kinds, pools, caps, until))


def _pool_names(by_pool: Any) -> dict[str, int]:
    """Counts per pool, keyed by the pools' names in Redis."""
    return {redis_name(name): count for name, count in by_pool.items()}


def _cluster_limits(reply: dict[str, Any]) -> _Limits | None:
    lim = reply.get("lim")
    if not isinstance(lim, dict):
        return None
    pools = lim.get("p")
    return _Limits(
        int(lim["g"]),
        int(lim["s"]),
        [int(v) for v in lim["k"]],
        {str(k): int(v) for k, v in pools.items()} if isinstance(pools, dict) else {},
    )


def _cause(reason: str) -> str:
    return reason.split(":", 1)[0]


def _refusal(namespace: str, reply: Any) -> str | None:
    """Why the script granted nothing (another client wrote into the namespace), or None."""
    if not isinstance(reply, dict):
        raise TypeError(f"expected a JSON object, got {type(reply).__name__}")
    err = reply.get("err")
    if err is None:
        for field in ("g", "k", "p", "s", "workers", "grace", "short", "epoch"):
            if field not in reply:
                raise ValueError(f"no {field!r} in the reply")
        return None
    fix = "delete it, or give fastgate a namespace of its own"
    if err == "wrong_type":
        return (
            f"namespace {namespace!r} is written by another client: key {reply.get('key')!r} "
            f"holds a {reply.get('type')}, not a {reply.get('want')}; {fix}"
        )
    if err == "bad_record":
        return (
            f"namespace {namespace!r} is written by another client: field "
            f"{reply.get('field')!r} of {reply.get('key')!r} is no worker's record; {fix}"
        )
    return f"namespace {namespace!r}: the refresh was refused ({err!r})"


def _shrank(old: _Lease, new: _Lease) -> bool:
    """Whether any share of ``new`` is below the same share of ``old``."""
    if new.global_ < old.global_ or any(n < o for n, o in zip(new.kinds, old.kinds, strict=True)):
        return True
    if any(new.pools.get(name, 0) < v for name, v in old.pools.items()):
        return True
    return any(new.sessions.get(sid, 0) < v for sid, v in old.sessions.items())
