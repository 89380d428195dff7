"""A call's tool-use record says whether its tool reads only, on every route that writes one:
``execute`` with and without an idempotency key, and the streaming executor. A store may leave
such a record unsynced before the call runs (tests/durable/test_store_sync.py); a record of any
other tool must say it has a side effect behind it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fastgate import (
    ExecutionContext,
    PermissionConfig,
    SqliteToolUseStore,
    StreamingToolExecutor,
    ToolCall,
    ToolKind,
    schema,
)
from fastgate.durable.store import JournalEntry, ToolUseRecord
from tests.pipeline_kit import assert_idle, executor, tool

ANY = schema.Object({}, additional=True)
KINDS = {"look": ToolKind.READ_ONLY, "change": ToolKind.WRITE, "run": ToolKind.EXECUTE}


class RecordingStore(SqliteToolUseStore):
    """The SQLite store, keeping every record it was asked to write."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.records: list[ToolUseRecord] = []

    async def record_tool_use(self, record: ToolUseRecord) -> None:
        self.records.append(record)
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
        self.records.append(record)
        return await super().claim(record, key, digest, take_over=take_over, scope=scope)


def tools() -> list[Any]:
    return [
        tool(name, lambda args, ctx: "done", ANY, kind=kind, parallelism="shared")
        for name, kind in KINDS.items()
    ]


def read_only_by_tool(records: list[ToolUseRecord]) -> dict[str, bool]:
    assert len(records) == len(KINDS)
    return {record.tool_name: record.read_only for record in records}


@pytest.mark.parametrize("key", [None, "k"], ids=["unkeyed", "keyed"])
async def test_execute_marks_the_records_of_reads_only(tmp_path: Path, key: str | None) -> None:
    store = await RecordingStore.open(tmp_path / "calls.db")
    ex = executor(*tools(), store=store, permissions=PermissionConfig(allow=list(KINDS)))
    try:
        for name in KINDS:
            context = ExecutionContext(session_id="s", idempotency_key=key and f"{key}-{name}")
            result = await ex.execute(name, {}, context)
            assert result.ok, result.error
        assert read_only_by_tool(store.records) == {"look": True, "change": False, "run": False}
        assert_idle(ex)
    finally:
        ex.dispose()
        await store.close()


async def test_the_streaming_executor_marks_the_records_of_reads_only(tmp_path: Path) -> None:
    store = await RecordingStore.open(tmp_path / "calls.db")
    ex = executor(*tools(), permissions=PermissionConfig(allow=list(KINDS)))
    try:
        stream = StreamingToolExecutor(ex, ExecutionContext(session_id="s"), store=store)
        for i, name in enumerate(KINDS):
            stream.add_tool(ToolCall(f"c{i}", name, {}))
        stream.add_tool(ToolCall("c9", "missing", {}))  # no tool: nothing says it reads only
        stream.finish()
        results = [result async for result in stream.results()]
        await stream.aclose()
        assert [r.ok for r in results] == [True, True, True, False]
        missing = store.records.pop()
        assert missing.tool_name == "missing" and not missing.read_only
        assert read_only_by_tool(store.records) == {"look": True, "change": False, "run": False}
    finally:
        ex.dispose()
        await store.close()
