"""The journal of keyed calls (SPEC §24) through the executor, on SQLite and on PostgreSQL.

Every rule in one process; tests/durable/test_journal_processes.py holds the ones that need
other processes (a running owner elsewhere, an owner killed, the load of three processes).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from fastgate import (
    ApprovalResponse,
    CancelToken,
    ExecutionContext,
    Hooks,
    PreToolUseResult,
    SchedulerLimits,
    StreamingToolExecutor,
    ToolCall,
    ToolKind,
    ToolResult,
    schema,
)
from fastgate.admission.scheduler import ConcurrencyScheduler
from fastgate.durable.store import JournalStore, StoreError, ToolUseStore
from fastgate.model.results import DurableResult, ErrorCode, ResultMeta
from tests.durable.conftest import Backend
from tests.pipeline_kit import assert_idle, executor, tool

ANY = schema.Object({}, additional=True)


def keyed(key: str, session: str | None = "s", **fields: Any) -> ExecutionContext:
    return ExecutionContext(session_id=session, idempotency_key=key, **fields)


class Counter:
    """A tool body that counts its runs and can be held until released."""

    def __init__(self, *, held: bool = False) -> None:
        self.runs: list[Any] = []
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        if not held:
            self.release.set()

    async def __call__(self, args: Any, ctx: Any) -> str:
        self.runs.append(dict(args))
        self.started.set()
        await self.release.wait()
        return f"run {len(self.runs)}"


def code_of(result: ToolResult) -> ErrorCode | None:
    return result.error.code if result.error is not None else None


async def test_a_completed_key_is_answered_from_the_journal(backend: Backend) -> None:
    body = Counter()
    async with backend.open() as store:
        ex = executor(tool("t", body, ANY), store=store)
        first = await ex.execute("t", {"n": 1}, keyed("k"))
        again = await ex.execute("t", {"n": 1}, keyed("k"), call_id="retry")
        third = await ex.execute("t", {"n": 1}, keyed("k"))
        calls = await store.load("s")
    assert first.ok and not first.meta.replayed
    assert (again.meta.call_id, third.meta.call_id) == ("retry", None)  # each its own call's
    for repeat in (again, third):
        assert repeat.ok and repeat.content == first.content == "run 1"
        assert repeat.meta.replayed is True
        assert repeat.meta.execution_id == first.meta.execution_id
        assert repeat.value is None  # the canonical value never leaves the first call
    assert len(body.runs) == 1
    assert [(c.execution_id, c.status) for c in calls] == [(first.meta.execution_id, "completed")]
    assert calls[0].result is not None and calls[0].result.meta.replayed is False
    assert ex.history()[-1].meta.replayed  # a replay is a result like any other
    assert_idle(ex)


async def test_a_failed_or_refused_call_is_its_keys_answer_too(backend: Backend) -> None:
    async def broken(args: Any, ctx: Any) -> str:
        raise RuntimeError("boom")

    asked: list[Any] = []

    async def reject(request: Any) -> ApprovalResponse:
        asked.append(request)
        return ApprovalResponse(False, feedback="not now")

    async with backend.open() as store:
        ex = executor(
            tool("broken", broken, ANY),
            tool("deploy", Counter(), ANY, kind=ToolKind.EXECUTE),
            store=store,
        )
        failed = await ex.execute("broken", {}, keyed("a"))
        failed_again = await ex.execute("broken", {}, keyed("a"))
        rejected = await ex.execute("deploy", {}, keyed("b", approver=reject))
        rejected_again = await ex.execute("deploy", {}, keyed("b", approver=reject))
    assert code_of(failed) is code_of(failed_again) is ErrorCode.TOOL_ERROR
    assert failed_again.meta.replayed and failed_again.content == failed.content
    assert code_of(rejected) is code_of(rejected_again) is ErrorCode.USER_REJECTED
    assert rejected_again.meta.replayed and len(asked) == 1


async def test_a_replay_asks_no_hook_and_no_approver(backend: Backend) -> None:
    hooks_seen: list[Any] = []
    approvals: list[Any] = []

    def hook(event: Any) -> PreToolUseResult:
        hooks_seen.append(event)
        return PreToolUseResult()

    async def approve(request: Any) -> ApprovalResponse:
        approvals.append(request)
        return ApprovalResponse(True)

    hooks = Hooks()
    hooks.add_pre_tool_use(hook)
    body = Counter()
    async with backend.open() as store:
        ex = executor(tool("deploy", body, ANY, kind=ToolKind.EXECUTE), store=store, hooks=hooks)
        first = await ex.execute("deploy", {"x": 1}, keyed("k", approver=approve))
        repeats = [await ex.execute("deploy", {"x": 1}, keyed("k", approver=approve)) for _ in "ab"]
    assert first.ok and all(r.meta.replayed and r.content == first.content for r in repeats)
    assert len(hooks_seen) == 1 and len(approvals) == 1 and len(body.runs) == 1


async def test_a_running_key_is_waited_for_in_this_process(backend: Backend) -> None:
    body = Counter(held=True)
    async with backend.open() as store:
        ex = executor(tool("t", body, ANY), store=store)
        first = asyncio.create_task(ex.execute("t", {"n": 1}, keyed("k")))
        await body.started.wait()
        repeat = asyncio.create_task(ex.execute("t", {"n": 1}, keyed("k")))
        for _ in range(20):  # the repeat found the call running and waits for it
            await asyncio.sleep(0)
        assert not repeat.done()
        body.release.set()
        original, waited = await first, await repeat
    assert original.ok and waited.ok and waited.content == original.content
    assert waited.meta.replayed and waited.meta.execution_id == original.meta.execution_id
    assert len(body.runs) == 1
    assert_idle(ex)


async def test_a_repeat_waits_no_longer_than_its_own_timeout(backend: Backend) -> None:
    body = Counter(held=True)
    async with backend.open() as store:
        ex = executor(tool("t", body, ANY), store=store)
        impatient = executor(tool("t", Counter(), ANY, timeout=0.3), store=store)
        first = asyncio.create_task(ex.execute("t", {"n": 1}, keyed("k")))
        await body.started.wait()
        repeat = await impatient.execute("t", {"n": 1}, keyed("k"))
        body.release.set()
        original = await first
    assert repeat.error is not None and repeat.error.code is ErrorCode.RESOURCE_EXHAUSTED
    assert repeat.error.retryable is True
    assert repeat.error.details["reason"] == "in_progress"
    assert repeat.error.details["execution_id"] == original.meta.execution_id
    assert len(body.runs) == 1


async def test_a_cancelled_wait_runs_nothing(backend: Backend) -> None:
    body = Counter(held=True)
    token = CancelToken()
    async with backend.open() as store:
        ex = executor(tool("t", body, ANY), store=store)
        first = asyncio.create_task(ex.execute("t", {"n": 1}, keyed("k")))
        await body.started.wait()
        repeat = asyncio.create_task(ex.execute("t", {"n": 1}, keyed("k", cancel=token)))
        for _ in range(20):
            await asyncio.sleep(0)
        token.cancel()
        refused = await repeat
        body.release.set()
        await first
    assert code_of(refused) is ErrorCode.ABORTED_BEFORE_DISPATCH
    assert refused.meta.aborted_before_launch and len(body.runs) == 1


async def test_a_lease_is_renewed_while_the_call_runs(backend: Backend) -> None:
    """Past several lease lifetimes, a store of another owner still finds the call running."""
    body = Counter(held=True)
    async with backend.open(lease_ttl=0.3) as store, backend.open(lease_ttl=0.3) as other:
        ex = executor(tool("t", body, ANY), store=store)
        elsewhere = executor(tool("t", Counter(), ANY, timeout=1.5), store=other)
        first = asyncio.create_task(ex.execute("t", {"n": 1}, keyed("k")))
        await body.started.wait()
        repeat = await elsewhere.execute("t", {"n": 1}, keyed("k"))  # waits 1.5 s: 5 leases
        body.release.set()
        await first
        replay = await elsewhere.execute("t", {"n": 1}, keyed("k"))
    assert code_of(repeat) is ErrorCode.RESOURCE_EXHAUSTED, repeat.error
    assert repeat.error is not None and repeat.error.details["reason"] == "in_progress"
    assert replay.meta.replayed and replay.content == "run 1" and len(body.runs) == 1


async def test_the_same_key_with_other_arguments_is_refused(backend: Backend) -> None:
    body = Counter()
    async with backend.open() as store:
        ex = executor(tool("t", body, ANY), store=store)
        first = await ex.execute("t", {"a": 1, "b": [1, 2, {"c": "x"}]}, keyed("k"))
        reordered = await ex.execute("t", {"b": [1, 2.0, {"c": "x"}], "a": 1.0}, keyed("k"))
        for other in ({"a": 2, "b": [1, 2, {"c": "x"}]}, {"a": 1}, {"a": 1, "b": [2, 1]}, {}):
            refused = await ex.execute("t", other, keyed("k"))
            assert refused.error is not None and refused.error.code is ErrorCode.INVALID_ARGS
            assert refused.error.details["reason"] == "idempotency_key_reused"
            assert refused.error.details["execution_id"] == first.meta.execution_id
            assert not refused.meta.replayed
        other_tool = executor(tool("u", body, ANY), store=store)
        refused = await other_tool.execute("u", {"a": 1, "b": [1, 2, {"c": "x"}]}, keyed("k"))
    # Equal frozen JSON values are the same arguments: key order, 2 and 2.0 alike.
    assert reordered.meta.replayed and reordered.content == first.content
    # The key names one call: the same arguments for another tool are not that call.
    assert refused.error is not None and refused.error.details["reason"] == "idempotency_key_reused"
    assert len(body.runs) == 1


async def test_keys_are_per_session(backend: Backend) -> None:
    body = Counter()
    async with backend.open() as store:
        ex = executor(tool("t", body, ANY), store=store)
        sessions = ("s", "other", "", None)
        results = [await ex.execute("t", {}, keyed("k", s)) for s in sessions]
        again = [await ex.execute("t", {}, keyed("k", s)) for s in sessions]
        # Another session may use the key with other arguments: it is not that session's key.
        different = await ex.execute("t", {"n": 2}, keyed("k", "third"))
    assert [r.meta.replayed for r in results] == [False] * 4
    assert len({r.meta.execution_id for r in results}) == 4
    assert all(a.meta.replayed for a in again)
    assert [a.meta.execution_id for a in again] == [r.meta.execution_id for r in results]
    assert different.ok and len(body.runs) == 5


async def test_a_scope_shares_its_keys_across_sessions(backend: Backend) -> None:
    """``idempotency_scope`` names whose keys they are: the same key from another session of the
    scope is the same call; another scope's key is another call."""
    body = Counter()
    async with backend.open() as store:
        ex = executor(tool("t", body, ANY), store=store)
        first = await ex.execute("t", {"n": 1}, keyed("k", "alice/a", idempotency_scope="alice"))
        repeats = [
            await ex.execute("t", {"n": 1}, keyed("k", session, idempotency_scope="alice"))
            for session in ("alice/b", "alice", None)
        ]
        reused = await ex.execute("t", {"n": 2}, keyed("k", "alice/c", idempotency_scope="alice"))
        # A session named like the scope, without the scope, is not the scope: its keys are
        # its own (else a session could be named so as to read a scope's results).
        unscoped = await ex.execute("t", {"n": 1}, keyed("k", "alice"))
        other = await ex.execute("t", {"n": 1}, keyed("k", "alice/a", idempotency_scope="bob"))
        calls = await store.load("alice/a")
    assert first.ok and not first.meta.replayed
    for repeat in repeats:
        assert repeat.meta.replayed and repeat.meta.execution_id == first.meta.execution_id
    assert reused.error is not None and reused.error.details["reason"] == "idempotency_key_reused"
    assert unscoped.ok and not unscoped.meta.replayed
    assert other.ok and not other.meta.replayed
    assert len(body.runs) == 3
    # The records stay in the session that made them.
    assert [c.execution_id for c in calls] == [first.meta.execution_id, other.meta.execution_id]


async def test_a_session_named_like_a_scope_does_not_share_its_keys(backend: Backend) -> None:
    body = Counter()
    async with backend.open() as store:
        ex = executor(tool("t", body, ANY), store=store)
        scoped = await ex.execute("t", {"q": 1}, keyed("k", "u1", idempotency_scope="T"))
        for session, scope in (("T", None), ("=T", None), ("@T", None), ("u2", "=T")):
            result = await ex.execute("t", {"q": 1}, keyed("k", session, idempotency_scope=scope))
            assert result.ok and not result.meta.replayed, (session, scope)
            assert result.content != scoped.content
    assert len(body.runs) == 5


async def test_a_scoped_lease_is_renewed_and_resolved_in_its_scope(backend: Backend) -> None:
    body = Counter(held=True)
    async with backend.open(lease_ttl=0.3) as store, backend.open(lease_ttl=0.3) as other:
        ex = executor(tool("t", body, ANY), store=store)
        elsewhere = executor(tool("t", Counter(), ANY, timeout=1.2), store=other)
        first = asyncio.create_task(ex.execute("t", {}, keyed("k", "a/1", idempotency_scope="a")))
        await body.started.wait()
        (call,) = await store.load("a/1")
        with pytest.raises(StoreError, match="still running"):
            await store.resolve(call.execution_id, _answer(call.execution_id, "too early"))
        # Past four lease lifetimes another owner still finds it running: renewed in its scope.
        repeat = await elsewhere.execute("t", {}, keyed("k", "a/2", idempotency_scope="a"))
        body.release.set()
        await first
    assert repeat.error is not None and repeat.error.details["reason"] == "in_progress"
    assert len(body.runs) == 1


async def test_a_call_cancelled_after_it_started_is_ambiguous(backend: Backend) -> None:
    plain, safe = Counter(held=True), Counter(held=True)
    async with backend.open() as store:
        ex = executor(
            tool("plain", plain, ANY, parallelism="shared"),
            tool("safe", safe, ANY, parallelism="shared", retry_safe=True),
            store=store,
        )
        running = [
            asyncio.create_task(ex.execute("plain", {}, keyed("p"))),
            asyncio.create_task(ex.execute("safe", {}, keyed("q"))),
        ]
        await plain.started.wait()
        await safe.started.wait()
        for task in running:
            task.cancel()
        await asyncio.wait(running)
        for call in await store.load("s"):
            await _until_recorded(store, call.execution_id)
        plain.release.set()
        safe.release.set()
        ambiguous = await ex.execute("plain", {}, keyed("p"))
        rerun = await ex.execute("safe", {}, keyed("q"))
    assert ambiguous.error is not None and ambiguous.error.code is ErrorCode.TOOL_ERROR
    assert ambiguous.error.details["reason"] == "ambiguous_outcome"
    assert len(plain.runs) == 1
    assert rerun.ok and not rerun.meta.replayed and len(safe.runs) == 2


async def test_a_result_that_says_nothing_ran_frees_the_key(backend: Backend) -> None:
    """A call refused at admission (the scheduler's queue full) ran nothing: a retry runs it."""
    body = Counter(held=True)
    scheduler = ConcurrencyScheduler(SchedulerLimits(global_limit=1, max_queue=0))
    async with backend.open() as store:
        ex = executor(tool("t", body, ANY, parallelism="shared"), store=store, scheduler=scheduler)
        blocker = asyncio.create_task(ex.execute("t", {"n": 0}, keyed("first")))
        await body.started.wait()
        busy = await ex.execute("t", {"n": 1}, keyed("k"))
        body.release.set()
        await blocker
        retried = await ex.execute("t", {"n": 1}, keyed("k"))
    assert code_of(busy) is ErrorCode.RESOURCE_EXHAUSTED
    assert retried.ok and not retried.meta.replayed and len(body.runs) == 2


async def test_resolve_answers_an_interrupted_call(backend: Backend) -> None:
    """An interrupted tool-use (no result, no lease) is ambiguous until resolved."""
    async with backend.open(lease_ttl=0.2) as store:
        body = Counter()
        ex = executor(tool("t", body, ANY), store=store)
        running = Counter(held=True)
        holder = executor(tool("t", running, ANY), store=store)
        task = asyncio.create_task(holder.execute("t", {"n": 1}, keyed("k")))
        await running.started.wait()
        (call,) = await store.load("s")
        with pytest.raises(StoreError, match="still running"):
            await store.resolve(call.execution_id, _answer(call.execution_id, "too early"))
        task.cancel()  # cancelled after it started: its outcome is unknown
        await asyncio.wait([task])
        await _until_recorded(store, call.execution_id)
        ambiguous = await ex.execute("t", {"n": 1}, keyed("k"))
        await store.resolve(call.execution_id, _answer(call.execution_id, "it did happen"))
        resolved = await ex.execute("t", {"n": 1}, keyed("k"))
        with pytest.raises(StoreError, match="already exists"):
            await store.resolve(call.execution_id, _answer(call.execution_id, "twice"))
        with pytest.raises(StoreError, match="no tool-use record"):
            await store.resolve("no-such-call", _answer("no-such-call", "x"))
        recovered = await store.load("s")
    assert ambiguous.error is not None
    assert ambiguous.error.details == {
        "reason": "ambiguous_outcome",
        "execution_id": call.execution_id,
        "idempotency_key": "k",
    }
    assert resolved.ok and resolved.content == "it did happen" and resolved.meta.replayed
    assert resolved.meta.execution_id == call.execution_id
    assert body.runs == []
    assert recovered[0].status == "completed" and recovered[0].result is not None
    assert recovered[0].result.content == "it did happen"


async def test_a_resolve_saying_it_never_ran_lets_the_key_run(backend: Backend) -> None:
    async with backend.open() as store:
        body = Counter()
        ex = executor(tool("t", body, ANY), store=store)
        running = Counter(held=True)
        task = asyncio.create_task(
            executor(tool("t", running, ANY), store=store).execute("t", {}, keyed("k"))
        )
        await running.started.wait()
        task.cancel()
        await asyncio.wait([task])
        (call,) = await store.load("s")
        await _until_recorded(store, call.execution_id)
        meta = ResultMeta(call.execution_id, None, "t", "s", 0.0, 0.0, 0.0)
        error_result = ToolResult(
            False, "never ran", _error(ErrorCode.ABORTED_BEFORE_DISPATCH), meta
        )
        await store.resolve(call.execution_id, error_result)
        rerun = await ex.execute("t", {}, keyed("k"))
    assert rerun.ok and not rerun.meta.replayed and len(body.runs) == 1


async def test_a_keyed_call_needs_a_store_that_keeps_a_journal() -> None:
    class Plain:  # a ToolUseStore that keeps no journal
        async def record_tool_use(self, record: Any) -> None: ...

        async def record_result(self, execution_id: str, result: Any) -> None: ...

        async def load(self, session_id: str) -> list[Any]:
            return []

        async def close(self) -> None: ...

    assert isinstance(Plain(), ToolUseStore) and not isinstance(Plain(), JournalStore)
    body = Counter()
    for require in (True, False):
        ex = executor(tool("t", body, ANY), store=Plain(), require_persistence=require)
        result = await ex.execute("t", {}, keyed("k"))
        assert code_of(result) is ErrorCode.PERSISTENCE_FAILED
        assert (await ex.execute("t", {}, ExecutionContext(session_id="s"))).ok  # no key
    assert len(body.runs) == 2
    # An executor without a store records nothing: its keyed calls run, and run each time.
    unrecorded = executor(tool("t", body, ANY))
    results = [await unrecorded.execute("t", {}, keyed("k")) for _ in "ab"]
    assert all(r.ok and not r.meta.replayed for r in results) and len(body.runs) == 4


async def test_a_journal_that_cannot_be_written_fails_before_the_side_effect(
    backend: Backend,
) -> None:
    body = Counter()
    store = backend.open()
    ex = executor(tool("t", body, ANY), store=store, require_persistence=False)
    await store.close()
    result = await ex.execute("t", {}, keyed("k"))
    assert code_of(result) is ErrorCode.PERSISTENCE_FAILED
    assert result.error is not None and result.error.retryable
    assert body.runs == []


async def test_keys_that_are_not_text_are_refused(backend: Backend) -> None:
    body = Counter()
    async with backend.open() as store:
        ex = executor(tool("t", body, ANY), store=store)
        for key in ("", 7, b"k", "k\x00", "\ud800", "x" * 1025):
            ctx = ExecutionContext(session_id="s", idempotency_key=key)
            result = await ex.execute("t", {}, ctx)
            assert code_of(result) is ErrorCode.INVALID_ARGS, key
            assert result.error is not None and result.error.details["reason"] == "idempotency_key"
        assert (await ex.execute("t", {}, keyed("é" * 512))).ok  # 1024 bytes: the most
    assert len(body.runs) == 1


async def test_a_batch_keys_each_call_by_its_own_key(backend: Backend) -> None:
    body = Counter()
    async with backend.open() as store:
        ex = executor(tool("t", body, ANY, parallelism="shared"), store=store)
        ctx = ExecutionContext(session_id="s")
        calls = [ToolCall(f"c{i}", "t", {"n": i}, idempotency_key=f"k{i}") for i in range(4)]
        first = await ex.execute_parallel(calls, ctx)
        again = await ex.execute_parallel(calls, ctx)
        one_by_one = await ex.execute_all(calls, ctx)
    assert all(r.ok and not r.meta.replayed for r in first)
    assert all(r.meta.replayed for r in again + one_by_one)
    assert (
        [r.content for r in again] == [r.content for r in first] == [r.content for r in one_by_one]
    )
    assert len(body.runs) == 4


async def test_a_stream_keys_each_call_by_its_own_key(backend: Backend) -> None:
    body = Counter()
    async with backend.open() as store:
        ex = executor(tool("t", body, ANY, parallelism="shared"), store=store)
        turns: list[list[ToolResult]] = []
        for _ in "ab":  # the same turn streamed twice: the second is a retry
            stream = StreamingToolExecutor(ex, ExecutionContext(session_id="s"))
            for i in range(3):
                stream.add_tool(ToolCall(f"c{i}", "t", {"n": i}, idempotency_key=f"k{i}"))
            stream.finish()
            turns.append([result async for result in stream.results()])
            await stream.aclose()
    first, again = turns
    assert all(r.ok and not r.meta.replayed for r in first)
    assert all(r.meta.replayed for r in again)
    assert [r.content for r in again] == [r.content for r in first]
    assert len(body.runs) == 3


async def test_a_keyed_context_default_and_an_unkeyed_call_coexist(backend: Backend) -> None:
    """An unkeyed call of a journaled executor records as before and is never replayed."""
    body = Counter()
    async with backend.open() as store:
        ex = executor(tool("t", body, ANY), store=store, require_persistence=True)
        plain = [await ex.execute("t", {}, ExecutionContext(session_id="s")) for _ in "ab"]
        calls = await store.load("s")
    assert all(r.ok and not r.meta.replayed for r in plain) and len(body.runs) == 2
    assert [c.status for c in calls] == ["completed", "completed"]


async def _until_recorded(store: JournalStore, execution_id: str) -> None:
    """Until the background write of a cancelled call's ABORTED result is committed (the store
    wakes ``wait_result`` when it records it)."""
    for _ in range(10):
        calls = await store.load("s")
        if any(c.execution_id == execution_id and c.status == "completed" for c in calls):
            return
        await store.wait_result(execution_id, 1.0)
    raise AssertionError(f"{execution_id} was never recorded")


def _error(code: ErrorCode) -> Any:
    from fastgate import ToolError

    return ToolError(code, "reconciled")


def _answer(execution_id: str, content: str) -> DurableResult:
    meta = ResultMeta("someone-else", None, "t", "s", 1.0, 2.0, 1000.0)
    return DurableResult(True, content, None, meta)


async def test_a_lease_taken_over_is_no_longer_renewed(backend: Backend) -> None:
    """Store level: the owner renews its claim until another owner takes the expired key."""
    from fastgate.durable.store import ToolUseRecord, args_digest

    digest = args_digest(("t", {}))

    def record(execution_id: str) -> ToolUseRecord:
        return ToolUseRecord(execution_id, None, "s", None, 0, 0, "t", {})

    async with backend.open(lease_ttl=0.2) as first, backend.open(lease_ttl=0.2) as second:
        claimed = await first.claim(record("e1"), "k", digest, take_over=False)
        assert await first.renew("s", "k", "e1") is True
        assert await second.renew("s", "k", "e1") is False  # not its claim
        running = await second.claim(record("e2"), "k", digest, take_over=True)
        await first.wait_result("e1", 0.5)  # no result comes: the lease runs out meanwhile
        taken = await second.claim(record("e3"), "k", digest, take_over=True)
        lost = await first.renew("s", "k", "e1")
    assert claimed.status == "claimed" and running.status == "running"
    assert running.execution_id == "e1"
    assert taken.status == "claimed" and taken.execution_id == "e3" and lost is False


async def test_a_lease_is_renewed_until_the_result_is_recorded(postgres_server: Any) -> None:
    """The body is done but its result's write waits (another session locks the result table):
    the claim is still renewed, so a repeat elsewhere waits for the result instead of finding
    a lapsed lease and running a retry-safe tool a second time."""
    import psycopg

    from tests.durable.conftest import new_namespace

    backend = Backend("postgres", postgres_server.dsn, new_namespace())
    body = Counter()
    async with backend.open(lease_ttl=0.3) as store, backend.open(lease_ttl=0.3) as other:
        ex = executor(tool("t", body, ANY, retry_safe=True), store=store)
        elsewhere = executor(tool("t", body, ANY, retry_safe=True, timeout=30), store=other)
        await store.load("s")  # the journal's tables exist from the first use
        locker = await psycopg.AsyncConnection.connect(postgres_server.dsn)
        try:
            await locker.execute(f'LOCK TABLE "{backend.namespace}".tool_result IN EXCLUSIVE MODE')
            first = asyncio.create_task(ex.execute("t", {"n": 1}, keyed("k")))
            await body.started.wait()
            await asyncio.sleep(1.0)  # three lease lifetimes pass while the result waits
            repeat = asyncio.create_task(elsewhere.execute("t", {"n": 1}, keyed("k")))
            await asyncio.wait({repeat}, timeout=1.0)  # a second run would happen by now
            assert len(body.runs) == 1
        finally:
            await locker.commit()
            await locker.close()
        done, again = await first, await repeat
    assert done.ok and done.content == "run 1"
    assert again.meta.replayed and again.content == "run 1", again.error
    assert len(body.runs) == 1
    assert_idle(ex)
    assert_idle(elsewhere)


async def test_a_result_write_that_fails_is_tried_again_while_the_claim_is_held(
    tmp_path: Any,
) -> None:
    """Another process holds the database's write lock past the store's busy timeout when the
    body ends: the result's write fails, is tried again, and the key is answered from the
    journal (not an ambiguous outcome for every repeat)."""
    import sqlite3

    from fastgate.durable import SqliteToolUseStore

    path = str(tmp_path / "journal.db")
    body = Counter(held=True)
    async with SqliteToolUseStore(path, busy_timeout=0.2) as store:
        ex = executor(tool("t", body, ANY), store=store)
        first = asyncio.create_task(ex.execute("t", {"n": 1}, keyed("k")))
        await body.started.wait()
        holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        holder.execute("BEGIN IMMEDIATE")  # the write lock, as another process would take it
        loop = asyncio.get_running_loop()
        loop.call_later(0.5, holder.rollback)  # longer than one busy timeout
        body.release.set()
        done = await first
        holder.close()
        again = await ex.execute("t", {"n": 1}, keyed("k"))
    assert done.ok and done.content == "run 1"
    assert again.meta.replayed and again.content == "run 1", again.error
    assert len(body.runs) == 1
    assert_idle(ex)


async def test_a_repeat_in_one_batch_is_answered_under_its_own_call_id(backend: Backend) -> None:
    body = Counter()
    async with backend.open() as store:
        ex = executor(tool("t", body, ANY), store=store)
        calls = [
            ToolCall("first", "t", {"n": 1}, idempotency_key="k"),
            ToolCall("second", "t", {"n": 1}, idempotency_key="k"),
        ]
        for run in (ex.execute_all, ex.execute_parallel):
            results = await run(calls, ExecutionContext(session_id="s"))
            assert [r.meta.call_id for r in results] == ["first", "second"]
            assert results[1].meta.replayed
    assert len(body.runs) == 1
    assert_idle(ex)
