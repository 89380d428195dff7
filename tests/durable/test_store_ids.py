"""One id per call: a tool-use record, its result and the history entry join on it (SPEC §12)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fastgate import (
    ExecutionContext,
    SqliteToolUseStore,
    StreamingToolExecutor,
    ToolCall,
    ToolResultProjector,
    schema,
)
from fastgate.durable.store import ToolUseRecord
from tests.builtin_kit import gone
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


# -- unique across executors, processes and hosts (SPEC §10) ------------------------------------


async def test_two_executors_sharing_one_store_never_reuse_an_id(tmp_path: Path) -> None:
    store = await SqliteToolUseStore.open(str(tmp_path / "calls.db"))
    first, second = executor(*_tools(), store=store), executor(*_tools(), store=store)
    calls = [
        ex.execute("write", {"label": f"{name}-{n}"}, call_id=f"{name}-{n}")
        for n in range(100)
        for name, ex in (("first", first), ("second", second))
    ]
    results = await asyncio.gather(*calls)
    recovered = await ToolResultProjector(store).recover("s1")
    await store.close()
    ids = [r.meta.execution_id for r in results]
    assert len(set(ids)) == len(ids) == 200
    assert {c.execution_id for c in recovered} == set(ids)  # every record saved, none refused
    for stored in recovered:  # each record joins its own call's result
        assert stored.status == "completed" and stored.result is not None
        assert stored.result.meta.execution_id == stored.execution_id
        assert stored.result.content == stored.args["label"] == stored.call_id
    assert_idle(first)
    assert_idle(second)


def test_ids_are_128_random_bits_also_from_new_execution_id() -> None:
    first, second = executor(*_tools()), executor(*_tools())
    ids = [ex.new_execution_id() for _ in range(1000) for ex in (first, second)]
    assert len(set(ids)) == len(ids)
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)
    # random, not counted: no common prefix beyond what chance gives (a counter shares most)
    assert len({i[:4] for i in ids}) > 1000


_CHILD = """
import asyncio, sys
from fastgate import ToolExecutor, ToolRegistry, ToolKind, define_tool, schema

async def echo(args, ctx):
    return "ok"

async def main():
    registry = ToolRegistry()
    registry.register(define_tool("echo", "", schema.Object({}), echo, kind=ToolKind.READ_ONLY))
    executors = [ToolExecutor(registry), ToolExecutor(registry)]
    for ex in executors:
        for _ in range(50):
            print((await ex.execute("echo", {})).meta.execution_id)
            print(ex.new_execution_id())

asyncio.run(main())
"""


def test_processes_never_hand_out_the_same_id(tmp_path: Path) -> None:
    script = tmp_path / "ids.py"
    script.write_text(_CHILD)
    children = [
        subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outputs = [child.communicate(timeout=120)[0].split() for child in children]
    assert [child.returncode for child in children] == [0, 0]
    assert all(gone(child.pid) for child in children)
    ours = [executor(*_tools()).new_execution_id() for _ in range(200)]
    every = [*outputs[0], *outputs[1], *ours]
    assert [len(output) for output in outputs] == [200, 200]
    assert len(set(every)) == len(every) == 600


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork only")
def test_a_forked_child_does_not_repeat_its_parents_ids() -> None:
    ex = executor(*_tools())
    ex.new_execution_id()  # the parent holds ids it has not handed out yet
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its next ids, then leave without cleanup
        try:
            os.write(write, " ".join(ex.new_execution_id() for _ in range(20)).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        childs = pipe.read().split()
    os.waitpid(pid, 0)
    parents = [ex.new_execution_id() for _ in range(20)]
    assert len(childs) == 20
    assert not set(childs) & set(parents)
