"""A stream's records (SPEC §12, §24). Over an executor with a store, each call is recorded with
its epoch and model-order position before it can start, one record after another in model order,
keyed calls included (their claim is their record), and an old-epoch call that never started is
recorded with its refusal. A keyed call needs the store on the executor, not on the stream."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from fastgate import (
    ApprovalResponse,
    ErrorCode,
    ExecutionContext,
    PermissionConfig,
    SqliteToolUseStore,
    StreamingToolExecutor,
    ToolCall,
    ToolKind,
    ToolResult,
    ToolResultProjector,
    schema,
)
from fastgate.durable.store import JournalEntry, StoredCall, ToolUseRecord
from tests.durable.conftest import Backend
from tests.pipeline_kit import assert_idle, executor, tool

ANY = schema.Object({}, additional=True)


class Tools:
    """``t`` runs at once; ``ask`` needs an approval, which waits until ``t`` ran twice."""

    def __init__(self) -> None:
        self.runs: list[Any] = []
        self.two_ran = asyncio.Event()

    async def body(self, args: Any, ctx: Any) -> str:
        self.runs.append(args["n"])
        if len(self.runs) >= 2:
            self.two_ran.set()
        return f"ran {args['n']}"

    async def approve_late(self, request: Any) -> ApprovalResponse:
        await self.two_ran.wait()
        return ApprovalResponse(True)

    def executor(self, **options: Any) -> Any:
        definitions = [
            tool(name, self.body, ANY, kind=ToolKind.WRITE, parallelism="shared")
            for name in ("t", "ask")
        ]
        permissions = PermissionConfig(allow=("t",), ask=("ask",))
        return executor(*definitions, permissions=permissions, **options)

    def context(self, turn: str) -> ExecutionContext:
        return ExecutionContext(session_id="s", turn_id=turn, approver=self.approve_late)


class OrderedStore(SqliteToolUseStore):
    """The SQLite store, noting each tool-use record and claim as it is written, with the calls
    that had started running by then."""

    def __init__(self, path: str, runs: list[Any]) -> None:
        super().__init__(path)
        self.runs = runs
        self.written: list[tuple[str | None, int]] = []  # (call id, calls run before it)

    async def record_tool_use(self, record: ToolUseRecord) -> None:
        self.written.append((record.call_id, len(self.runs)))
        await super().record_tool_use(record)

    async def claim(
        self,
        record: ToolUseRecord,
        key: str,
        digest: bytes,
        *,
        take_over: bool,
        scope: str | None = None,
    ) -> JournalEntry:
        self.written.append((record.call_id, len(self.runs)))
        return await super().claim(record, key, digest, take_over=take_over, scope=scope)


async def _stream(
    ex: Any, ctx: ExecutionContext, *epochs: list[ToolCall], **options: Any
) -> list[ToolResult]:
    """Stream each list of calls as one epoch (``fallback()`` between them) and finish."""
    stream = StreamingToolExecutor(ex, ctx, **options)
    for number, calls in enumerate(epochs):
        if number:
            stream.fallback()
        for call in calls:
            stream.add_tool(call)
    stream.finish()
    results = [result async for result in stream.results()]
    await stream.aclose()
    return results


def _code(call: StoredCall) -> ErrorCode | None:
    assert call.result is not None, call
    return call.result.error.code if call.result.error is not None else None


async def test_records_keep_model_order_when_an_earlier_call_waits_for_approval(
    backend: Backend,
) -> None:
    tools = Tools()
    async with backend.open() as store:
        ex = tools.executor(store=store)
        ctx = tools.context("T")
        await ex.execute("t", {"n": "before"}, ctx, call_id="before")
        tools.runs.clear()  # the approval waits for two of the stream's calls
        calls = [ToolCall("c0", "ask", {"n": 0}), ToolCall("c1", "t", {"n": 1})]
        results = await _stream(ex, ctx, [*calls, ToolCall("c2", "t", {"n": 2})])
        await ex.execute("t", {"n": "after"}, ctx, call_id="after")
        recovered = await ToolResultProjector(store).recover("s")
    assert all(r.ok for r in results)
    assert tools.runs == [1, 2, 0, "after"]  # c0 ran last of its turn: it waited for approval
    got = [(c.call_id, c.epoch, c.status) for c in recovered]
    assert got == [(name, 0, "completed") for name in ("before", "c0", "c1", "c2", "after")]
    assert_idle(ex)


async def test_keyed_and_plain_records_are_written_in_model_order_before_their_calls(
    tmp_path: Path,
) -> None:
    tools = Tools()
    store = OrderedStore(str(tmp_path / "calls.db"), tools.runs)
    try:
        ex = tools.executor(store=store)
        old = [ToolCall("c0", "t", {"n": 0})]  # an old epoch that is switched away at once
        new = [
            ToolCall("c0", "ask", {"n": 10}, idempotency_key="k0"),
            ToolCall("c1", "t", {"n": 11}),
            ToolCall("c2", "t", {"n": 12}, idempotency_key="k2"),
        ]
        results = await _stream(ex, tools.context("T"), old, new)
        recovered = await ToolResultProjector(store).recover("s")
    finally:
        await store.close()
    assert [r.ok for r in results] == [True] * 3
    assert tools.runs == [11, 12, 10]
    # serial, in model order, and each call's record written before the call ran
    assert [call_id for call_id, _ in store.written] == ["c0", "c0", "c1", "c2"]
    assert store.written[2] == ("c1", 0)
    assert [(c.call_id, c.epoch, c.args["n"]) for c in recovered] == [
        ("c0", 0, 0),
        ("c0", 1, 10),
        ("c1", 1, 11),
        ("c2", 1, 12),
    ]
    assert_idle(ex)


async def test_old_epoch_calls_are_recorded_with_their_refusal(backend: Backend) -> None:
    tools = Tools()
    async with backend.open() as store:
        ex = tools.executor(store=store)
        first = [ToolCall("d0", "t", {"n": 0}), ToolCall("e0", "t", {"n": 1}, idempotency_key="k")]
        second = [ToolCall("d0", "t", {"n": 2}), ToolCall("e0", "t", {"n": 1}, idempotency_key="k")]
        results = await _stream(ex, tools.context("T2"), first, second)
        recovered = await ToolResultProjector(store).recover("s")
    # the refusal claimed no key: the new epoch's call with it runs
    assert [(r.ok, r.meta.replayed) for r in results] == [(True, False), (True, False)]
    assert tools.runs == [2, 1]
    aborted = ErrorCode.ABORTED_BEFORE_DISPATCH
    assert [(c.call_id, c.epoch, c.args["n"], _code(c)) for c in recovered] == [
        ("d0", 0, 0, aborted),
        ("e0", 0, 1, aborted),
        ("d0", 1, 2, None),
        ("e0", 1, 1, None),
    ]
    assert_idle(ex)


async def test_a_keyed_call_needs_the_store_on_the_executor(tmp_path: Path) -> None:
    """With the store on the stream, nothing journals keys: a keyed call is refused where it is
    added, naming the fix, rather than run again when its turn is streamed again."""
    tools = Tools()
    ex = tools.executor()
    async with SqliteToolUseStore(str(tmp_path / "calls.db")) as store:
        stream = StreamingToolExecutor(ex, tools.context("T"), store=store)
        with pytest.raises(ValueError, match=r"give the store to the executor"):
            stream.add_tool(ToolCall("c0", "t", {"n": 0}, idempotency_key="k0"))
        keyed_turn = ExecutionContext(session_id="s", idempotency_key="k1")
        stream_keyed = StreamingToolExecutor(ex, keyed_turn, store=store)
        with pytest.raises(ValueError, match=r"'c1' has an idempotency key"):
            stream_keyed.add_tool(ToolCall("c1", "t", {"n": 1}))
        stream.add_tool(ToolCall("c2", "t", {"n": 2}))  # an unkeyed call is recorded as before
        stream.finish()
        results = [result async for result in stream.results()]
        await stream.aclose()
        await stream_keyed.aclose()
        recovered = await store.load("s")
    assert [r.ok for r in results] == [True]
    assert tools.runs == [2]
    assert [(c.call_id, c.status) for c in recovered] == [("c2", "completed")]
    assert_idle(ex)


class FailingStore:
    """A store that cannot write anything."""

    async def record_tool_use(self, record: ToolUseRecord) -> None:
        raise OSError(28, "No space left on device")

    async def record_result(self, execution_id: str, result: Any) -> None:
        raise OSError(28, "No space left on device")

    async def load(self, session_id: str) -> list[Any]:
        return []

    async def close(self) -> None:
        return None


@pytest.mark.parametrize("required_by", ["executor", "stream"])
async def test_persistence_required_by_either_refuses_an_unrecorded_call(required_by: str) -> None:
    tools = Tools()
    ex = tools.executor(store=FailingStore(), require_persistence=required_by == "executor")
    results = await _stream(
        ex,
        tools.context("T"),
        [ToolCall("c0", "t", {"n": 0})],
        require_persistence=required_by == "stream",
    )
    assert [r.error.code for r in results if r.error is not None] == [ErrorCode.PERSISTENCE_FAILED]
    assert tools.runs == []
    assert_idle(ex)
