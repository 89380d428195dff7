"""One worker process of a cluster run (tests and ``fastgate bench --scenario cluster``).

``python -m fastgate.cli.bench.cluster_worker SPEC_JSON`` runs the spec's sessions, each a closed
loop of ``concurrency`` callers, through a ``ConcurrencyScheduler(cluster=RedisCluster(...))``
(``mode: fastgate``) or through a per-call Redis counting semaphore (``mode: semaphore``, the
usual way: INCR, and DECR plus a retry after ``retry_ms`` when over the cap). Every tool body
records its entry and exit in the probe Redis (INCR/DECR of the global, session and kind
counters, and the maximum each reached), so a test sees what ran at once cluster-wide.

It starts once ``go`` is pushed to the probe list ``go`` (BLPOP, one per worker), runs ``calls``
per caller, or for ``seconds``, or (``calls`` 0) until ``stop`` is pushed, and prints one JSON
line: completed calls and queue waits per session, and its scheduler's stats. With
``report_every`` it also pushes its cluster stats to the probe list ``stats`` that often (what
fault tests wait on).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from typing import Any

import msgspec
import redis.asyncio as aioredis

from fastgate import ConcurrencyScheduler, SchedulerLimits, ToolKind
from fastgate.cli.bench.children import child_environment
from fastgate.cluster import RedisCluster

#: KEYS: counter, max, counter, max, ...; ARGV: +1 or -1, the worker's pid, when the call
#: entered (wall clock), and "1" when it entered on a lease that had already run out. Also counts
#: per worker (``cur:pid:N``) and, once a test froze a worker (``FREEZE_LUA``), the highest global
#: count of the calls other than the frozen worker's old ones (``max:fresh``): what was admitted
#: meanwhile. A call of the frozen worker is old when it entered before the freeze or was granted
#: before it and entered only after it resumed (then its lease had run out on entry: nothing new
#: is admitted on such a lease, so only a grant made before the freeze enters on one).
PROBE_LUA = r"""
local delta = tonumber(ARGV[1])
for i = 1, #KEYS, 2 do
  local v = redis.call('INCRBY', KEYS[i], delta)
  if delta > 0 and v > tonumber(redis.call('GET', KEYS[i + 1]) or '0') then
    redis.call('SET', KEYS[i + 1], v)
  end
end
redis.call('INCRBY', 'cur:pid:' .. ARGV[2], delta)
if redis.call('GET', 'frozen_pid') == ARGV[2] and (ARGV[4] == '1'
    or tonumber(ARGV[3]) < tonumber(redis.call('GET', 'freeze_at') or '0')) then
  redis.call('INCRBY', 'cur:old', delta)
end
if delta > 0 then
  local old = tonumber(redis.call('GET', 'cur:old') or '0')
  local fresh = tonumber(redis.call('GET', 'cur:global')) - old
  if fresh > tonumber(redis.call('GET', 'max:fresh') or '0') then
    redis.call('SET', 'max:fresh', fresh)
  end
end
return 1
"""

#: ARGV: the frozen worker's pid, the wall clock once it stopped. In one step, so that no call of
#: it is counted twice or missed: what it runs now is old, and so is every later entry or exit of
#: a call that entered before the freeze (its +1 may still be on the way).
FREEZE_LUA = r"""
redis.call('SET', 'frozen_pid', ARGV[1])
redis.call('SET', 'freeze_at', ARGV[2])
local old = tonumber(redis.call('GET', 'cur:pid:' .. ARGV[1]) or '0')
redis.call('SET', 'cur:old', old)
redis.call('SET', 'max:fresh', tonumber(redis.call('GET', 'cur:global') or '0') - old)
return 1
"""

#: The baseline's acquisition: take a permit when the count stays within the cap.
SEMAPHORE_LUA = r"""
local v = redis.call('INCR', KEYS[1])
if v > tonumber(ARGV[1]) then
  redis.call('DECR', KEYS[1])
  return 0
end
return 1
"""


def admitted_on_lapsed_lease(scheduler: ConcurrencyScheduler) -> int | None:
    """The scheduler's count of admissions so far when the worker's lease has run out (nothing
    new is admitted on it then, so the count stands still), else None."""
    stats = scheduler.stats()
    cluster = stats.cluster
    if cluster is None or cluster.degraded or cluster.lease_remaining_s:
        return None
    return stats.admitted


def probe_keys(session: str, kind: str) -> list[str]:
    return [
        "cur:global", "max:global",
        f"cur:session:{session}", f"max:session:{session}",
        f"cur:kind:{kind}", f"max:kind:{kind}",
    ]  # fmt: skip


async def run(spec: dict[str, Any]) -> dict[str, Any]:
    probe = aioredis.Redis.from_url(spec["probe_url"])
    enter_exit = probe.register_script(PROBE_LUA)
    lim = spec["limits"]
    limits = SchedulerLimits(
        global_limit=lim["global"],
        session_limit=lim["session"],
        kind_limits={ToolKind[k]: v for k, v in lim.get("kinds", {}).items()},
        max_queue=100_000,
        queue_timeout=None,
    )
    mode = spec.get("mode", "fastgate")
    scheduler: ConcurrencyScheduler | None = None
    sem_client: Any = None
    acquire: Any = None
    if mode == "fastgate":
        scheduler = ConcurrencyScheduler(
            limits,
            cluster=RedisCluster(
                spec["cluster_url"],
                namespace=spec.get("namespace", "fastgate"),
                lease_ttl=spec.get("lease_ttl", 15.0),
                refresh_interval=spec.get("refresh_interval", 1.0),
                fallback_share=spec.get("fallback_share", 1),
            ),
        )
    else:
        sem_client = aioredis.Redis.from_url(spec["cluster_url"])
        acquire = sem_client.register_script(SEMAPHORE_LUA)
    body = spec.get("body_ms", 1.0) / 1000.0
    calls = int(spec.get("calls", 0))
    seconds = spec.get("seconds")  # a time box instead of a count of calls
    deadline: float | None = None  # set at the start: ``seconds`` after it
    retry = spec.get("retry_ms", 1.0) / 1000.0
    mark_stale = bool(spec.get("mark_stale"))  # tell the probe what entered on a lapsed lease
    stale_entries: list[int] = []  # the admission count at each such entry
    stop = asyncio.Event()
    pid = os.getpid()
    waits: dict[str, list[float]] = {}
    done: dict[str, int] = {}
    finished_at: dict[str, list[float]] = {}  # wall clock, comparable across workers
    admitted_at: dict[str, list[float]] = {}  # when each wait in ``waits`` ended (wall clock)

    def over() -> bool:
        return stop.is_set() or (deadline is not None and time.monotonic() >= deadline)

    async def semaphore_slot(session: str) -> bool:
        # The usual per-call counting semaphore: global permit, then the session's. False: the
        # run ended while this caller was still trying (a starved caller may try for long).
        while not over():
            if await acquire(keys=["sem:global"], args=[limits.global_limit]):
                if await acquire(keys=[f"sem:session:{session}"], args=[limits.session_limit]):
                    return True
                await sem_client.decr("sem:global")
            await asyncio.sleep(retry)
        return False

    async def caller(session: str, kind: str) -> None:
        keys = probe_keys(session, kind)
        n = 0
        while not over() and (calls == 0 or n < calls):
            started = time.monotonic()
            if scheduler is not None:
                async with scheduler.slot(session, ToolKind[kind]):
                    waits[session].append(time.monotonic() - started)
                    entered = time.time()
                    admitted_at[session].append(entered)
                    admitted = admitted_on_lapsed_lease(scheduler) if mark_stale else None
                    stale = admitted is not None
                    if admitted is not None:
                        stale_entries.append(admitted)
                    await enter_exit(keys=keys, args=[1, pid, entered, int(stale)])
                    await asyncio.sleep(body)
                    await enter_exit(keys=keys, args=[-1, pid, entered, int(stale)])
            else:
                if not await semaphore_slot(session):
                    break
                try:
                    waits[session].append(time.monotonic() - started)
                    entered = time.time()
                    admitted_at[session].append(entered)
                    await enter_exit(keys=keys, args=[1, pid, entered, 0])
                    await asyncio.sleep(body)
                    await enter_exit(keys=keys, args=[-1, pid, entered, 0])
                finally:
                    await sem_client.decr(f"sem:session:{session}")
                    await sem_client.decr("sem:global")
            n += 1
            done[session] += 1
            finished_at[session].append(time.time())

    async def reporter(every: float) -> None:
        assert scheduler is not None
        while not stop.is_set():
            cluster = scheduler.stats().cluster
            row = {"pid": os.getpid(), "at": time.time(), "cluster": msgspec.to_builtins(cluster)}
            await probe.rpush("stats", json.dumps(row))
            await asyncio.sleep(every)

    async def stopper() -> None:
        await probe.blpop(["stop"], timeout=0)
        await probe.rpush("stop", "stop")  # for the next worker
        stop.set()

    await probe.rpush("ready", str(os.getpid()))
    await probe.blpop(["go"], timeout=0)
    started = time.monotonic()
    deadline = None if seconds is None else started + float(seconds)
    started_at = time.time()
    tasks = []
    for s in spec["sessions"]:
        waits.setdefault(s["id"], [])
        done.setdefault(s["id"], 0)
        finished_at.setdefault(s["id"], [])
        admitted_at.setdefault(s["id"], [])
        kind = s.get("kind", "READ_ONLY")
        tasks += [asyncio.create_task(caller(s["id"], kind)) for _ in range(s["concurrency"])]
    helpers = [asyncio.create_task(stopper())]
    if scheduler is not None and spec.get("report_every"):
        helpers.append(asyncio.create_task(reporter(spec["report_every"])))
    stopped = asyncio.create_task(stop.wait())
    await asyncio.wait([*tasks, stopped], return_when=asyncio.FIRST_COMPLETED)
    if calls or deadline is not None:
        await asyncio.gather(*tasks)
    elapsed = time.monotonic() - started
    stop.set()
    if scheduler is not None:
        # Told to stop: callers still queued for a slot are withdrawn, not waited for. (The
        # semaphore's callers finish their call instead: cancelled inside a Redis call they
        # could lose a permit.)
        for task in tasks:
            task.cancel()
    await asyncio.gather(*tasks, stopped, return_exceptions=True)
    for helper in helpers:
        helper.cancel()
    await asyncio.gather(*helpers, return_exceptions=True)
    result: dict[str, Any] = {
        "pid": os.getpid(),
        "elapsed": elapsed,
        "started_at": started_at,
        "done": done,
        "finished_at": finished_at,
        "waits": waits,
        "admitted_at": admitted_at,
        "stale_entries": stale_entries,
    }
    if scheduler is not None:
        result["stats"] = msgspec.to_builtins(scheduler.stats())
        await scheduler.close()
    if sem_client is not None:
        await sem_client.aclose()
    await probe.aclose()
    return result


def main() -> None:
    import faulthandler

    from fastgate.cli.bench.children import die_with_parent

    die_with_parent()
    faulthandler.register(signal.SIGUSR1)  # a stuck worker shows where: kill -USR1 PID
    spec = json.loads(sys.argv[1])
    if spec.get("loop") == "uvloop":
        import uvloop

        uvloop.install()
    print(json.dumps(asyncio.run(run(spec))), flush=True)


if __name__ == "__main__":
    main()


class Workers:
    """Worker processes of one run, started together (each BLPOPs ``go``) and always reaped."""

    def __init__(self, probe_url: str, specs: list[dict[str, Any]], timeout: float = 120.0) -> None:
        import subprocess
        import tempfile

        import redis

        self.probe = redis.Redis.from_url(probe_url)
        self.timeout = timeout
        # Results go to files, not pipes: a worker done early never blocks on a full pipe.
        self.outputs = [tempfile.TemporaryFile("w+") for _ in specs]
        self.processes = [
            subprocess.Popen(
                [sys.executable, "-m", "fastgate.cli.bench.cluster_worker", json.dumps(spec)],
                env=child_environment(),
                stdout=out,
                text=True,
            )
            for spec, out in zip(specs, self.outputs, strict=True)
        ]

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]

    def start(self) -> None:
        """Once every worker is ready, let them all go at once."""
        for _ in self.processes:
            if self.probe.blpop(["ready"], timeout=self.timeout) is None:
                raise TimeoutError("a cluster worker did not get ready")
        for _ in self.processes:
            self.probe.rpush("go", "go")

    def stop(self) -> None:
        self.probe.rpush("stop", "stop")

    def freeze(self, pid: int) -> float:
        """SIGSTOP worker ``pid``, wait until it has stopped (a signal lands asynchronously),
        then mark it frozen in the probe (``FREEZE_LUA``); returns the wall clock it used."""
        os.kill(pid, signal.SIGSTOP)
        _, status = os.waitpid(pid, os.WUNTRACED)
        if not os.WIFSTOPPED(status):
            raise RuntimeError(f"cluster worker {pid} did not stop: status {status}")
        frozen_at = time.time()
        self.probe.eval(FREEZE_LUA, 0, pid, repr(frozen_at))
        return frozen_at

    def results(self, skip: tuple[int, ...] = ()) -> list[dict[str, Any]]:
        """Each worker's JSON line (in start order), except those at ``skip`` indexes."""
        out = []
        for i, process in enumerate(self.processes):
            process.wait(timeout=self.timeout)
            if i in skip:
                continue
            if process.returncode != 0:
                raise RuntimeError(f"cluster worker {process.pid} failed ({process.returncode})")
            self.outputs[i].seek(0)
            out.append(json.loads(self.outputs[i].read().strip().splitlines()[-1]))
        return out

    def maxima(self) -> dict[str, int]:
        """The highest concurrency each probe counter reached (``global``, ``session:X``, ...)."""
        found = {}
        for key in self.probe.scan_iter("max:*"):
            found[key.decode()[4:]] = int(self.probe.get(key) or 0)
        return found

    def close(self) -> None:
        """Kill what still runs and reap everything (also after a failed test)."""
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            process.wait()
        for output in self.outputs:
            output.close()
        self.probe.close()

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
