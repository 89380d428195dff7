"""StreamingToolExecutor (SPEC §12): pre-launch, serial records, model order, fallback."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from fastgate import (
    ErrorCode,
    ExecutionContext,
    SqliteToolUseStore,
    StreamingToolExecutor,
    ToolCall,
    ToolResult,
    ToolResultProjector,
    schema,
)
from fastgate.durable.store import ToolUseRecord
from tests.pipeline_kit import assert_idle, executor, tool

LABEL = schema.Object({"label": schema.String()}, required=("label",))


class Tools:
    """read (concurrency safe), grep (safe only for some args), write (not safe)."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.gates: dict[str, asyncio.Event] = {}

    def body(self) -> Any:
        async def run(args: Any, ctx: Any) -> str:
            label = str(args["label"])
            self.started.append(label)
            gate = self.gates.get(label)
            if gate is not None:
                await gate.wait()
            return label

        return run

    def executor(self, **options: Any) -> Any:
        return executor(
            tool("read", self.body(), LABEL, parallelism="shared", is_concurrency_safe=True),
            tool(
                "grep",
                self.body(),
                LABEL,
                parallelism="shared",
                is_concurrency_safe=lambda a: a["label"].startswith("safe"),
            ),
            tool("write", self.body(), LABEL),
            **options,
        )


def call(name: str, label: str) -> ToolCall:
    return ToolCall(id=f"id-{label}", name=name, args={"label": label})


async def _settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


async def _collect(stream: StreamingToolExecutor) -> list[ToolResult]:
    return [r async for r in stream.results()]


async def test_only_allow_listed_concurrency_safe_calls_prelaunch() -> None:
    tools = Tools()
    stream = StreamingToolExecutor(tools.executor(), ExecutionContext(), prelaunch=("read", "grep"))
    stream.add_tool(call("read", "r1"))
    stream.add_tool(call("grep", "safe-g2"))
    await _settle()
    assert tools.started == ["r1", "safe-g2"]
    stream.add_tool(call("grep", "unsafe-g3"))  # classifier says no: held back
    stream.add_tool(call("read", "r4"))  # safe, but after a held-back call: waits too
    await _settle()
    assert tools.started == ["r1", "safe-g2"]
    stream.finish()
    results = await _collect(stream)
    assert [r.content for r in results] == ["r1", "safe-g2", "unsafe-g3", "r4"]
    await stream.aclose()


async def test_a_call_outside_the_allow_list_is_held_back_even_if_safe() -> None:
    tools = Tools()
    stream = StreamingToolExecutor(tools.executor(), prelaunch=("grep",))
    stream.add_tool(call("read", "r1"))
    await _settle()
    assert tools.started == []
    stream.finish()
    assert [r.content for r in await _collect(stream)] == ["r1"]
    await stream.aclose()


async def test_results_come_in_model_order_and_barriers_apply_after_finish() -> None:
    tools = Tools()
    tools.gates["r1"] = asyncio.Event()
    stream = StreamingToolExecutor(tools.executor(), prelaunch=("read",))
    for c in (call("read", "r1"), call("write", "w2"), call("read", "r3")):
        stream.add_tool(c)
    stream.finish()
    await _settle()
    assert tools.started == ["r1"]  # w2 is a barrier: waits for r1; r3 waits for w2
    tools.gates["r1"].set()
    results = await _collect(stream)
    assert [r.content for r in results] == ["r1", "w2", "r3"]
    assert tools.started == ["r1", "w2", "r3"]
    await stream.aclose()


async def test_fallback_discards_every_old_result_and_starts_nothing_old() -> None:
    tools = Tools()
    tools.gates["old-r1"] = asyncio.Event()
    ex = tools.executor()
    stream = StreamingToolExecutor(ex, prelaunch=("read",))
    stream.add_tool(call("read", "old-r1"))  # running
    stream.add_tool(call("write", "old-w2"))  # held back, never starts
    await _settle()
    delivered: list[Any] = []

    async def consume() -> None:
        delivered.extend([r.content async for r in stream.results()])

    consumer = asyncio.create_task(consume())
    await _settle()
    stream.fallback()
    stream.add_tool(call("read", "new-r1"))
    stream.finish()
    tools.gates["old-r1"].set()  # finishes later than the fallback
    await consumer
    await stream.aclose()
    assert delivered == ["new-r1"]
    assert "old-w2" not in tools.started
    codes = {r.meta.call_id: r.error.code for r in ex.history() if r.error is not None}
    assert codes["id-old-w2"] is ErrorCode.ABORTED_BEFORE_DISPATCH
    assert codes["id-old-r1"] is ErrorCode.ABORTED
    assert_idle(ex)


class RecordingStore:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.records: list[ToolUseRecord] = []
        self.results: list[str] = []
        self.writing = 0
        self.overlap = False

    async def record_tool_use(self, record: ToolUseRecord) -> None:
        self.writing += 1
        self.overlap |= self.writing > 1
        await asyncio.sleep(0)
        self.writing -= 1
        if self.fail:
            raise OSError(28, "No space left on device")
        self.records.append(record)

    async def record_result(self, execution_id: str, result: Any) -> None:
        self.results.append(execution_id)

    async def load(self, session_id: str) -> list[Any]:
        return []

    async def close(self) -> None:
        return None


async def test_records_are_written_serially_in_model_order_before_invocation() -> None:
    tools = Tools()
    store = RecordingStore()
    stream = StreamingToolExecutor(tools.executor(), store=store, prelaunch=("read",))
    labels = [f"r{i}" for i in range(6)]
    for label in labels:
        stream.add_tool(call("read", label))
    stream.finish()
    results = await _collect(stream)
    await stream.aclose()
    assert [r.content for r in results] == labels
    assert [r.call_id for r in store.records] == [f"id-{label}" for label in labels]
    seqs = [r.seq for r in store.records]
    assert seqs == sorted(set(seqs))  # positions increase in model order
    assert not store.overlap
    assert len(store.results) == 6


async def test_required_persistence_failure_means_the_tool_never_runs() -> None:
    tools = Tools()
    stream = StreamingToolExecutor(
        tools.executor(),
        store=RecordingStore(fail=True),
        require_persistence=True,
        prelaunch=("read",),
    )
    stream.add_tool(call("read", "r1"))
    stream.add_tool(call("write", "w2"))
    stream.finish()
    results = await _collect(stream)
    await stream.aclose()
    assert [r.error.code for r in results if r.error] == [ErrorCode.PERSISTENCE_FAILED] * 2
    assert tools.started == []


async def test_sqlite_records_recover_in_order(tmp_path: Path) -> None:
    tools = Tools()
    store = await SqliteToolUseStore.open(str(tmp_path / "calls.db"))
    ctx = ExecutionContext(session_id="s1", turn_id="t1")
    stream = StreamingToolExecutor(tools.executor(), ctx, store=store, prelaunch=("read",))
    for c in (call("read", "a"), call("write", "b"), call("read", "c")):
        stream.add_tool(c)
    stream.finish()
    await _collect(stream)
    await stream.aclose()
    recovered = await ToolResultProjector(store).recover("s1")
    await store.close()
    assert [(c.call_id, c.status) for c in recovered] == [
        ("id-a", "completed"),
        ("id-b", "completed"),
        ("id-c", "completed"),
    ]
    assert all(c.result is not None and c.result.content == c.args["label"] for c in recovered)


async def test_misuse_is_refused() -> None:
    tools = Tools()
    stream = StreamingToolExecutor(tools.executor())
    stream.finish()
    with pytest.raises(RuntimeError, match="finished"):
        stream.add_tool(call("read", "x"))
    with pytest.raises(TypeError):
        stream.add_tool({"name": "read"})  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        StreamingToolExecutor(tools.executor(), prelaunch="read")
    await stream.aclose()


async def test_an_old_result_that_completes_during_the_fallback_is_not_delivered() -> None:
    tools = Tools()
    tools.gates["old"] = asyncio.Event()
    ex = tools.executor()
    stream = StreamingToolExecutor(ex, prelaunch=("read",))
    stream.add_tool(call("read", "old"))
    await _settle()
    delivered: list[Any] = []

    async def consume() -> None:
        delivered.extend([r.content async for r in stream.results()])

    consumer = asyncio.create_task(consume())
    await _settle()
    tools.gates["old"].set()  # the old call completes...
    stream.fallback()  # ...in the same step as the switch
    await _settle()
    stream.add_tool(call("read", "new"))
    stream.finish()
    await consumer
    await stream.aclose()
    assert delivered == ["new"]
