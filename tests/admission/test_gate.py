"""ToolConcurrencyGate: strict arrival order, cancellation and closing (SPEC §8.1)."""

from __future__ import annotations

import asyncio

import pytest

from fastgate import GateClosed, ToolConcurrencyGate


async def _enter(
    gate: ToolConcurrencyGate, exclusive: bool, log: list[str], name: str, release: asyncio.Event
) -> None:
    ctx = gate.exclusive() if exclusive else gate.shared()
    async with ctx:
        log.append(name)
        await release.wait()


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_uncontended_entry_never_yields_to_the_loop() -> None:
    gate = ToolConcurrencyGate()
    ran: list[int] = []
    asyncio.get_running_loop().call_soon(ran.append, 1)
    async with gate.shared():
        async with gate.shared():
            pass
    async with gate.exclusive():
        pass
    assert ran == []  # no loop iteration happened: the callback is still pending
    await asyncio.sleep(0)
    assert ran == [1]


async def test_shared_entrants_run_together_exclusive_alone() -> None:
    gate = ToolConcurrencyGate()
    go = asyncio.Event()
    log: list[str] = []
    tasks = [asyncio.create_task(_enter(gate, False, log, f"s{i}", go)) for i in range(3)]
    await _settle()
    assert sorted(log) == ["s0", "s1", "s2"]
    ex = asyncio.create_task(_enter(gate, True, log, "x", go))
    late = asyncio.create_task(_enter(gate, False, log, "late", go))
    await _settle()
    assert "x" not in log and "late" not in log  # exclusive waits; shared behind it waits too
    assert gate.statistics().queued == 2
    go.set()
    await asyncio.gather(*tasks, ex, late)
    assert log.index("x") < log.index("late")


async def test_strict_arrival_order_mixed() -> None:
    gate = ToolConcurrencyGate()
    log: list[str] = []
    hold = asyncio.Event()
    first = asyncio.create_task(_enter(gate, True, log, "x0", hold))
    await _settle()
    pattern = [("s1", False), ("s2", False), ("x3", True), ("s4", False), ("x5", True)]
    go = asyncio.Event()
    go.set()
    tasks = [asyncio.create_task(_enter(gate, ex, log, n, go)) for n, ex in pattern]
    await _settle()
    hold.set()
    await asyncio.gather(first, *tasks)
    assert log == ["x0", "s1", "s2", "x3", "s4", "x5"]


async def test_cancelled_head_waiter_wakes_those_behind_it() -> None:
    gate = ToolConcurrencyGate()
    log: list[str] = []
    hold = asyncio.Event()
    holder = asyncio.create_task(_enter(gate, False, log, "s0", hold))
    await _settle()
    ex = asyncio.create_task(_enter(gate, True, log, "x", hold))
    go = asyncio.Event()
    go.set()
    behind = asyncio.create_task(_enter(gate, False, log, "s2", go))
    await _settle()
    assert log == ["s0"]
    ex.cancel()  # the exclusive head leaves: the shared entrant behind may join the holder
    with pytest.raises(asyncio.CancelledError):
        await ex
    await behind
    assert log == ["s0", "s2"]
    hold.set()
    await holder
    assert gate.statistics().queued == 0


async def test_cancelled_after_grant_passes_the_gate_on() -> None:
    gate = ToolConcurrencyGate()
    log: list[str] = []
    go = asyncio.Event()
    go.set()
    hold = asyncio.Event()
    victim: asyncio.Task[None] | None = None

    async def holder() -> None:
        async with gate.exclusive():
            await hold.wait()
        # Same step as the exit that granted the gate to `victim`: it has not resumed yet.
        assert victim is not None
        victim.cancel()

    first = asyncio.create_task(holder())
    await _settle()
    victim = asyncio.create_task(_enter(gate, True, log, "victim", go))
    nxt = asyncio.create_task(_enter(gate, True, log, "next", go))
    await _settle()
    hold.set()
    await first
    with pytest.raises(asyncio.CancelledError):
        await victim
    await nxt
    assert log == ["next"]
    stats = gate.statistics()
    assert stats.queued == 0 and stats.shared_running == 0 and not stats.exclusive_running


async def test_release_then_immediate_reenter_does_not_jump_the_queue() -> None:
    gate = ToolConcurrencyGate()
    order: list[str] = []
    hold = asyncio.Event()
    go = asyncio.Event()
    go.set()

    async def barger() -> None:
        async with gate.exclusive():
            order.append("first")
            await hold.wait()
        async with gate.exclusive():  # immediately again: must queue behind `waiter`
            order.append("again")

    t1 = asyncio.create_task(barger())
    await _settle()
    t2 = asyncio.create_task(_enter(gate, True, order, "waiter", go))
    await _settle()
    hold.set()
    await asyncio.gather(t1, t2)
    assert order == ["first", "waiter", "again"]


async def test_close_fails_every_waiter_and_refuses_newcomers() -> None:
    gate = ToolConcurrencyGate()
    log: list[str] = []
    hold = asyncio.Event()
    holder = asyncio.create_task(_enter(gate, True, log, "x0", hold))
    await _settle()
    waiters = [asyncio.create_task(_enter(gate, i % 2 == 0, log, f"w{i}", hold)) for i in range(4)]
    await _settle()
    gate.close()
    for task in waiters:
        with pytest.raises(GateClosed):
            await task
    with pytest.raises(GateClosed):
        async with gate.shared():
            pass
    hold.set()
    await holder  # a holder finishes normally after close
    assert log == ["x0"]
    assert gate.statistics() == gate.statistics().__class__(0, False, 0, True)


async def test_entry_misuse_is_a_clear_error_and_changes_nothing() -> None:
    gate = ToolConcurrencyGate()
    entry = gate.shared()
    async with entry:
        pass
    with pytest.raises(RuntimeError, match="only once"):
        async with entry:
            pass
    with pytest.raises(RuntimeError, match="without being held"):
        await gate.exclusive().__aexit__(None, None, None)
    stats = gate.statistics()
    assert stats.shared_running == 0 and not stats.exclusive_running
    async with gate.exclusive():
        pass
