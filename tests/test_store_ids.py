"""One id per call: a tool-use record, its result and the history entry join on it (SPEC §12)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from fastgate import (
    ExecutionContext,
    SqliteToolUseStore,
    StreamingToolExecutor,
    ToolCall,
    ToolResultProjector,
    schema,
)
from fastgate.store import ToolUseRecord
from tests.pipeline_kit import assert_idle, executor, tool

LABEL = schema.Object({"label": schema.String()}, required=("label",))


class JoiningStore:
    """Keeps every record and result by the id it was given."""

    def __init__(self) -> None:
        self.records: dict[str, ToolUseRecord] = {}
        self.results: dict[str, Any] = {}

    async def record_tool_use(self, record: ToolUseRecord) -> None:
        assert record.execution_id not in self.records, "an id was reused"
        self.records[record.execution_id] = record

    async def record_result(self, execution_id: str, result: Any) -> None:
        assert execution_id in self.records
        self.results[execution_id] = result

    async def load(self, session_id: str) -> list[Any]:
        return []

    async def close(self) -> None:
        return None


def _tools(gate: asyncio.Event | None = None) -> Any:
    async def body(args: Any, ctx: Any) -> str:
        if gate is not None and args["label"].startswith("slow"):
            await gate.wait()
        return str(args["label"])

    return (
        tool("read", body, LABEL, parallelism="shared", is_concurrency_safe=True),
        tool("write", body, LABEL),
    )


def _assert_joined(store: JoiningStore, history: list[Any]) -> None:
    by_id = {r.meta.execution_id: r for r in history}
    assert set(store.records) == set(store.results) == set(by_id)
    for execution_id, durable in store.results.items():
        assert durable.meta.execution_id == execution_id
        assert store.records[execution_id].call_id == by_id[execution_id].meta.call_id


async def test_the_plain_executor_records_under_the_results_id() -> None:
    store = JoiningStore()
    ex = executor(*_tools(), store=store)
    results = [await ex.execute("write", {"label": f"w{i}"}, call_id=f"c{i}") for i in range(3)]
    assert len({r.meta.execution_id for r in results}) == 3
    _assert_joined(store, ex.history())
    assert_idle(ex)


async def test_streaming_records_join_across_a_fallback_with_reused_call_ids() -> None:
    store = JoiningStore()
    gate = asyncio.Event()
    ex = executor(*_tools(gate))
    stream = StreamingToolExecutor(ex, store=store, prelaunch=("read",))
    # the old epoch: one call running, one never started
    stream.add_tool(ToolCall("call_1", "read", {"label": "slow-old"}))
    stream.add_tool(ToolCall("call_2", "write", {"label": "old"}))
    for _ in range(5):
        await asyncio.sleep(0)
    stream.fallback()
    # the new model reuses the same call ids
    stream.add_tool(ToolCall("call_1", "read", {"label": "new-1"}))
    stream.add_tool(ToolCall("call_2", "write", {"label": "new-2"}))
    stream.finish()
    delivered = [r async for r in stream.results()]
    gate.set()
    await stream.aclose()
    assert [r.content for r in delivered] == ["new-1", "new-2"]
    assert len(store.records) == 4  # both epochs, under four distinct ids
    _assert_joined(store, ex.history())
    for result in delivered:
        record = store.records[result.meta.execution_id]
        assert record.epoch == 1 and record.args["label"] == result.content
    assert_idle(ex)


async def test_recovery_lists_both_epochs_under_the_results_ids(tmp_path: Path) -> None:
    store = await SqliteToolUseStore.open(str(tmp_path / "calls.db"))
    gate = asyncio.Event()
    ex = executor(*_tools(gate))
    ctx = ExecutionContext(session_id="s1", turn_id="t1")
    stream = StreamingToolExecutor(ex, ctx, store=store, prelaunch=("read",))
    stream.add_tool(ToolCall("call_1", "read", {"label": "slow-old"}))
    for _ in range(5):
        await asyncio.sleep(0)
    stream.fallback()
    stream.add_tool(ToolCall("call_1", "read", {"label": "new"}))
    stream.finish()
    delivered = [r async for r in stream.results()]
    gate.set()
    await stream.aclose()
    recovered = await ToolResultProjector(store).recover("s1")
    await store.close()
    assert [(c.call_id, c.epoch, c.status) for c in recovered] == [
        ("call_1", 0, "completed"),
        ("call_1", 1, "completed"),
    ]
    history_ids = {r.meta.execution_id for r in ex.history()}
    assert {c.execution_id for c in recovered} == history_ids
    assert recovered[1].execution_id == delivered[0].meta.execution_id
    assert all(
        c.result is not None and c.result.meta.execution_id == c.execution_id for c in recovered
    )
    assert_idle(ex)
