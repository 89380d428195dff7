"""Run one pipeline case N times, for counting instructions per call with callgrind.

Wall time on a shared 2-core machine moves by 10-20% between runs; instruction counts do not.
Count a case as the difference between two runs, so start-up and warm-up cancel out::

    count() { PYTHONHASHSEED=0 FASTGATE_REQUIRE_EXTENSIONS=1 valgrind --tool=callgrind \\
        --callgrind-out-file=/dev/null .venv/bin/python benchmarks/instructions.py "$1" "$2" 2>&1 \\
        | awk '/Collected/ {print $4}'; }
    echo $(( ($(count noop 3000) - $(count noop 1000)) / 2000 ))   # instructions per call

Cases: ``direct`` (the bench's reference, ``await create_task(tool(...))``), ``noop``,
``guarded`` (the no-op with a deadline and a caller token), ``fresh-context`` (the no-op with a
new ``ExecutionContext`` per call), ``usual`` (the no-op spelled as the README teaches it: a raw
JSON Schema tool, a context naming session and workspace per call), ``write`` and ``write-new`` (the
bench's own ``execute()`` cases), and ``floor``: a sketch doing only what
no pipeline can skip (an id, a frozen copy, lookup, validation, gate, slot, the body's own task
started eagerly, a ``RunContext``, the result structs, history), to show how much of the cost is
the stages' own.

Valgrind 3.19 answers ``openat2`` with ``ENOSYS``: under it, path resolution takes the /proc route
(the compiled build's openat2 probe drops itself), so the WRITE cases count that route.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import sys
import tempfile
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from fastgate import ExecutionContext, ToolConcurrencyGate, ToolExecutor
from fastgate._core import READY, start_body
from fastgate.cli.bench import pipeline
from fastgate.model.freeze import FrozenDict
from fastgate.model.results import ResultMeta, ToolResult
from fastgate.pipeline.invocation import Outcome
from fastgate.pipeline.run_context import RunContext
from fastgate.runtime import loop_factory


def floor_case(executor: ToolExecutor) -> Callable[[int], Awaitable[Any]]:
    ctx = ExecutionContext(session_id="s1")
    args = {"a": "hello", "b": "world"}
    ids = itertools.count()
    history: deque[ToolResult] = deque(maxlen=1000)

    gate = ToolConcurrencyGate()  # the session's gate, as the executor keeps one

    async def minimal(_: int) -> ToolResult | None:
        t0, started = time.perf_counter(), time.time()
        execution_id = f"run-{next(ids)}"
        frozen = FrozenDict(args)
        tool = executor.registry.resolve("concat", ctx.agent_scope)
        assert tool is not None
        if tool.validator.validate(frozen):
            return None
        passage = gate.shared()
        assert passage.__aenter__() is READY
        slot = executor.scheduler.slot(ctx.session_id, tool.kind, executor)
        assert slot.__aenter__() is READY
        body = RunContext(execution_id=execution_id, tool_name=tool.name, context=ctx)
        task = start_body(tool.execute(frozen, body), asyncio.get_running_loop(), "floor")
        value = await task
        outcome = Outcome("value", 1, value=value)
        slot.__aexit__(None, None, None)
        passage.__aexit__(None, None, None)
        meta = ResultMeta(
            execution_id,
            None,
            tool.name,
            ctx.session_id,
            started,
            time.time(),
            (time.perf_counter() - t0) * 1000.0,
            outcome.attempts,
            False,
            "mode",
            (),
        )
        result = ToolResult(True, value, None, meta, value)
        history.append(result)
        return result

    return minimal


def main() -> None:
    case, n = sys.argv[1], int(sys.argv[2])
    workspace = tempfile.mkdtemp(prefix="fastgate-instructions-")
    os.makedirs(os.path.join(workspace, "src"))
    executor = pipeline._executor(workspace)
    cases = pipeline._cases(executor, workspace)
    chosen = {
        "direct": cases[pipeline.NOOP][1],
        "noop": cases[pipeline.NOOP][0],
        "guarded": cases[pipeline.GUARDED][0],
        "fresh-context": cases[pipeline.FRESH_CONTEXT][0],
        "usual": cases[pipeline.USUAL][0],
        "write": cases["WRITE with a path"][0],
        "write-new": cases["WRITE of a new file"][0],
        "floor": floor_case(executor),
    }[case]

    async def run() -> None:
        await pipeline._serial(chosen, 300)  # warm up: caches filled, history full
        await pipeline._serial(chosen, n)

    with asyncio.Runner(loop_factory=loop_factory("uvloop")) as runner:
        runner.run(run())


if __name__ == "__main__":
    main()
