"""Run the no-op call N times, traced one way or another, for counting instructions per call.

Modes: ``plain`` (no tracer), ``null`` (a tracer that does nothing: the executor's hook alone),
``api`` (``fastgate.telemetry`` on the OpenTelemetry API's no-op providers), ``sdk`` (on the
SDK, recording every span and metric; the telemetry scenario's setup). Count a mode as the
difference between two runs, so start-up and warm-up cancel out::

    count() { PYTHONHASHSEED=0 FASTGATE_REQUIRE_EXTENSIONS=1 valgrind --tool=callgrind \\
        --callgrind-out-file=/dev/null .venv/bin/python benchmarks/instructions_telemetry.py \\
        "$1" "$2" 2>&1 | awk '/Collected/ {print $4}'; }
    echo $(( ($(count api 3000) - $(count api 1000)) / 2000 ))   # instructions per call
"""

from __future__ import annotations

import asyncio
import sys

from fastgate import ExecutionContext
from fastgate.cli.bench import telemetry
from fastgate.telemetry import instrument


def main(mode: str, n: int) -> None:
    executor = telemetry._executor()
    ctx = ExecutionContext(session_id="s1")
    providers = {label: rest for label, *rest in telemetry._providers()}
    shutdown = None
    if mode == "null":
        executor.set_tracer(telemetry._NullTracer())
    elif mode in ("api", "sdk"):
        label = "API only" if mode == "api" else "SDK"
        tracer_provider, meter_provider, shutdown = providers[label]
        instrument(executor, tracer_provider=tracer_provider, meter_provider=meter_provider)
    elif mode != "plain":
        raise SystemExit(f"unknown mode {mode!r}: plain, null, api or sdk")

    async def calls() -> None:
        for _ in range(200 + n):  # 200 to warm up
            await executor.execute("concat", telemetry.ARGS, ctx)

    asyncio.run(calls())
    if shutdown is not None:
        shutdown()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
