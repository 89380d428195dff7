"""Batches (SPEC §11): ``execute_all``, ``execute_parallel`` with barriers and ordered commits."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from fastgate import ToolCall, ToolExecutor, ToolResult
from tests.pipeline_kit import assert_idle, executor, tool


class Tracker:
    """Counts how many calls run at once and in which order they start and end."""

    def __init__(self) -> None:
        self.running = 0
        self.peak = 0
        self.events: list[str] = []
        self.release: dict[str, asyncio.Event] = {}

    def body(self, name: str) -> Any:
        async def run(args: Any, ctx: Any) -> str:
            label = str(args.get("label", name))
            self.running += 1
            self.peak = max(self.peak, self.running)
            self.events.append(f"start {label}")
            event = self.release.get(label)
            if event is not None:
                await event.wait()
            else:
                await asyncio.sleep(0)
            self.running -= 1
            self.events.append(f"end {label}")
            return label

        return run


def _calls(spec: str) -> list[ToolCall]:
    """'s1 s2 x3' -> shared/exclusive calls labelled by position."""
    out = []
    for i, token in enumerate(spec.split()):
        name = "shared" if token[0] == "s" else "exclusive"
        out.append(ToolCall(id=f"c{i}", name=name, args={"label": token}))
    return out


def _ex(tracker: Tracker) -> ToolExecutor:
    from fastgate import schema

    params = schema.Object({"label": schema.String()})
    return executor(
        tool("shared", tracker.body("shared"), params, parallelism="shared"),
        tool("exclusive", tracker.body("exclusive"), params),
    )


async def test_execute_all_runs_one_after_another_in_order() -> None:
    tracker = Tracker()
    ex = _ex(tracker)
    results = await ex.execute_all(_calls("s1 s2 x3 s4"))
    assert [r.content for r in results] == ["s1", "s2", "x3", "s4"]
    assert tracker.peak == 1


async def test_shared_calls_overlap_up_to_max_parallel() -> None:
    tracker = Tracker()
    ex = _ex(tracker)
    results = await ex.execute_parallel(
        _calls(" ".join(f"s{i}" for i in range(12))), max_parallel=4
    )
    assert [r.content for r in results] == [f"s{i}" for i in range(12)]
    assert tracker.peak == 4
    assert_idle(ex)


async def test_exclusive_call_is_a_barrier() -> None:
    tracker = Tracker()
    ex = _ex(tracker)
    await ex.execute_parallel(_calls("s1 s2 x3 s4 s5"), max_parallel=10)
    events = tracker.events
    assert events.index("start x3") > max(events.index("end s1"), events.index("end s2"))
    assert events.index("end x3") < min(events.index("start s4"), events.index("start s5"))


async def test_commits_follow_model_order_even_when_later_calls_finish_first() -> None:
    tracker = Tracker()
    tracker.release["s0"] = asyncio.Event()
    ex = _ex(tracker)
    committed: list[str] = []

    def on_commit(result: ToolResult) -> None:
        committed.append(result.content)
        if result.content == "s0":
            assert tracker.events.count("end s1") == 1  # s1 finished first, committed after

    task = asyncio.create_task(ex.execute_parallel(_calls("s0 s1 s2"), on_commit=on_commit))
    for _ in range(20):
        await asyncio.sleep(0)
    assert committed == []  # s1 and s2 are done, but s0 is not: nothing may be committed
    tracker.release["s0"].set()
    await task
    assert committed == ["s0", "s1", "s2"]


async def test_classification_happens_when_the_call_reaches_the_front() -> None:
    tracker = Tracker()
    flips: list[str] = []
    from fastgate import schema

    params = schema.Object({"label": schema.String()})

    def classify(args: Any) -> str:
        flips.append(args["label"])
        return "exclusive" if tracker.events.count("end s0") else "shared"

    ex = executor(tool("shared", tracker.body("shared"), params, parallelism=classify))
    await ex.execute_parallel(_calls("s0 s1"), max_parallel=10)
    assert "s1" in flips  # s1 was classified after s0 had started, not at batch start


async def test_a_scheduler_failure_stops_dispatch_drains_and_raises(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tracker = Tracker()
    ex = _ex(tracker)
    tracker.release["s0"] = held = asyncio.Event()
    slot = ex.scheduler.slot
    admitted: list[str] = []

    def breaking_slot(*args: Any) -> Any:
        if admitted:  # the second call to reach admission (s1) finds the scheduler broken
            asyncio.get_running_loop().call_soon(held.set)  # s0 ends only after the failure
            raise RuntimeError("scheduler broke")
        admitted.append("s0")
        return slot(*args)

    monkeypatch.setattr(ex.scheduler, "slot", breaking_slot)
    with pytest.raises(RuntimeError, match="scheduler broke"):
        await ex.execute_parallel(_calls("s0 s1 x2 s3"), max_parallel=10)
    assert tracker.events == ["start s0", "end s0"]  # s0 was drained before the error came out
    assert len(ex.history()) == 1  # x2 and s3 were never dispatched
    assert_idle(ex)


async def test_bad_batch_arguments_are_clear_errors() -> None:
    ex = _ex(Tracker())
    with pytest.raises(ValueError, match="max_parallel"):
        await ex.execute_parallel(_calls("s1"), max_parallel=0)
    with pytest.raises(TypeError, match="ToolCall"):
        await ex.execute_parallel([{"name": "shared"}])  # type: ignore[list-item]


async def test_empty_batch() -> None:
    ex = _ex(Tracker())
    assert await ex.execute_parallel([]) == []
    assert await ex.execute_all([]) == []


async def test_a_subclass_override_is_honoured_by_the_executor_itself() -> None:
    """``execute_all`` calls ``self.execute``: a subclass's override runs, in both builds."""
    seen: list[str] = []

    class Recording(ToolExecutor):
        async def execute(
            self,
            name: str,
            args: Any,
            ctx: Any = None,
            *,
            call_id: str | None = None,
            execution_id: str | None = None,
        ) -> ToolResult:
            seen.append(args["label"])
            return await super().execute(
                name, args, ctx, call_id=call_id, execution_id=execution_id
            )

    plain = _ex(Tracker())
    ex = Recording(plain.registry, scheduler=plain.scheduler, locks=plain.locks)
    results = await ex.execute_all(_calls("s0 x1"))
    assert seen == ["s0", "x1"]
    assert [r.value for r in results] == ["s0", "x1"]
