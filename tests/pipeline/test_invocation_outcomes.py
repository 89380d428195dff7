"""Invocation as a state machine: bodies that return, fail, raise, block or swallow cancellation,
stopped by nothing, by the caller's token at any turn of the loop, or by a deadline, a few at
once. Every call gives exactly one result whose code agrees with what the body went through, and
once the bodies have ended nothing is held: slots, gate, locks, deadlines, tasks."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastgate import CancelToken, ErrorCode, ExecutionContext, Failure, RunContext, schema
from tests.pipeline_kit import assert_idle, executor, tool

ID = schema.Object({"id": schema.String()}, required=("id",))
OWN = {"value": None, "failure": ErrorCode.TOOL_FAILURE, "raise": ErrorCode.TOOL_ERROR}
STOPPED = {ErrorCode.ABORTED, ErrorCode.TIMEOUT, ErrorCode.ABORTED_BEFORE_DISPATCH}


@dataclass
class Script:
    behaviour: str  # value | failure | raise (after `yields` turns), block, swallow
    yields: int
    deadline: bool  # a short deadline (only stops bodies that do not end by themselves)
    cancel_at: int | None  # the loop turn at which the caller's token is cancelled
    started: bool = False
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    saw_cancel: bool = False


SCRIPTS = st.builds(
    Script,
    behaviour=st.sampled_from(["value", "failure", "raise", "block", "swallow"]),
    yields=st.integers(0, 3),
    deadline=st.booleans(),
    cancel_at=st.one_of(st.none(), st.integers(0, 6)),
)


async def _body(script: Script, release: asyncio.Event) -> Any:
    script.started = True
    try:
        if script.behaviour in ("block", "swallow"):
            while True:
                try:
                    await release.wait()
                    return "released"
                except asyncio.CancelledError:
                    script.saw_cancel = True
                    if script.behaviour == "block":
                        raise
        for _ in range(script.yields):
            try:
                await asyncio.sleep(0)
            except asyncio.CancelledError:
                script.saw_cancel = True
                raise
        if script.behaviour == "failure":
            return Failure("it did not work")
        if script.behaviour == "raise":
            raise ValueError("broken")
        return "done"
    finally:
        script.finished.set()


async def _run(scripts: list[Script]) -> None:
    loop = asyncio.get_running_loop()
    release = asyncio.Event()
    by_id: dict[str, Script] = {}

    async def scripted(args: Any, ctx: RunContext) -> Any:
        return await _body(by_id[args["id"]], release)

    # Shared: a runaway body keeps its gate passage until it ends, which must not hold back the
    # other calls of the example (an exclusive one would wait for the release below).
    shared: dict[str, Any] = {"parallelism": "shared", "is_concurrency_safe": True}
    ex = executor(
        tool("short", scripted, ID, timeout=0.005, **shared),
        tool("long", scripted, ID, timeout=30.0, **shared),
        tool("none", scripted, ID, **shared),
        cancel_grace=0.01,
    )
    calls = []
    tokens: list[tuple[CancelToken, int]] = []
    for index, script in enumerate(scripts):
        by_id[str(index)] = script
        ends_alone = script.behaviour in OWN
        # A body that never ends by itself needs something to stop it.
        if not ends_alone and script.cancel_at is None:
            script.deadline = True
        name = "short" if script.deadline and not ends_alone else "long"
        token = None
        if script.cancel_at is not None:
            token = CancelToken()
            tokens.append((token, script.cancel_at))
        elif not script.deadline:
            name = "none"
        ctx = ExecutionContext(session_id=f"s{index}", cancel=token)
        calls.append(ex.execute(name, {"id": str(index)}, ctx))

    def tick(turn: int) -> None:
        for token, at in tokens:
            if at == turn:
                token.cancel("stop")
        if turn < 6:
            loop.call_soon(tick, turn + 1)

    tick(0)
    async with asyncio.timeout(5):  # a call that never ends fails here, not by stalling
        results = await asyncio.gather(*calls)  # the callers are never cancelled: no exception
        release.set()
        for script in scripts:
            if script.started:
                await script.finished.wait()
    await asyncio.sleep(0)  # the bodies' done-callbacks release what runaways held

    for script, result in zip(scripts, results, strict=True):
        code = result.error.code if result.error is not None else None
        assert result.meta.aborted_before_launch == (code == ErrorCode.ABORTED_BEFORE_DISPATCH)
        if code == ErrorCode.ABORTED_BEFORE_DISPATCH:
            assert not script.started, script
        elif script.behaviour in OWN:
            assert script.started
            if code == OWN[script.behaviour] and not script.saw_cancel:
                continue  # it ended by itself before any stop
            assert script.cancel_at is not None and code == ErrorCode.ABORTED, (script, code)
        else:
            assert code in STOPPED - {ErrorCode.ABORTED_BEFORE_DISPATCH}, (script, code)
            # On a busy machine the 5 ms deadline can pass before the body's first step: a
            # TIMEOUT of a body that was launched but never ran (nothing for it to swallow).
            assert script.started or code == ErrorCode.TIMEOUT, (script, code)
            expected = ErrorCode.ABORTED if script.cancel_at is not None else ErrorCode.TIMEOUT
            if script.cancel_at is not None and script.deadline:
                assert code in (ErrorCode.ABORTED, ErrorCode.TIMEOUT), (script, code)
            else:
                assert code == expected, (script, code)
            still_running = bool(result.error and result.error.details.get("still_running"))
            swallowed = script.behaviour == "swallow" and script.started
            assert still_running == swallowed, (script, result.error)
    assert_idle(ex)


# The runner (one loop per test) is meant to be shared by the examples.
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(SCRIPTS, min_size=1, max_size=3))
def test_every_call_ends_once_with_the_code_its_body_earned(
    runner: asyncio.Runner, scripts: list[Script]
) -> None:
    runner.run(_run(scripts))
