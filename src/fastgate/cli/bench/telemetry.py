"""The "telemetry" scenario: what ``fastgate.telemetry.instrument`` adds to the no-op call.

One executor, one no-op tool (the pipeline scenario's ``concat``), timed in alternating rounds
with and without instrumentation, in the same run:

- ``a tracer that does nothing``: the executor's tracer hook alone (``set_tracer``), what any
  instrumentation pays before it does anything;
- ``API only``: ``opentelemetry-api`` with no SDK configured (its no-op tracer and meter): what a
  server that installs the extra but exports nothing pays;
- ``SDK``: the OpenTelemetry SDK recording every span (a ``BatchSpanProcessor`` to an exporter
  that drops the batches, so export I/O is not counted) and every metric (an in-memory reader,
  aggregated on each call): what a traced server pays per call before export.

Needs the ``otel`` extra (the SDK row also ``opentelemetry-sdk``); without it the scenario is
skipped.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry import metrics, trace

from fastgate import (
    ConcurrencyScheduler,
    ExecutionContext,
    FileLockManager,
    SchedulerLimits,
    ToolExecutor,
    ToolKind,
    ToolRegistry,
    define_tool,
    schema,
)
from fastgate.cli.bench.model import BenchConfig, Measurement
from fastgate.cli.bench.pipeline import run_concat
from fastgate.runtime import loop_factory
from fastgate.telemetry import instrument

ARGS = {"a": "hello", "b": "world"}


def _executor() -> ToolExecutor:
    registry = ToolRegistry()
    registry.register(
        define_tool(
            "concat",
            "Join two strings.",
            schema.Object({"a": schema.String(), "b": schema.String()}, required=("a", "b")),
            run_concat,
            kind=ToolKind.READ_ONLY,
            parallelism="shared",
            is_concurrency_safe=True,
        )
    )
    return ToolExecutor(
        registry,
        scheduler=ConcurrencyScheduler(SchedulerLimits()),
        locks=FileLockManager(),
    )


class _NullTracer:
    def call_started(self, name: str, ctx: ExecutionContext) -> None:
        return None

    def call_ended(self, token: Any, result: Any, trace: Any) -> None:
        return None


def _providers() -> list[tuple[str, Any, Any, Callable[[], None]]]:
    """(label, tracer provider, meter provider, shutdown) for each instrumented row."""
    rows: list[tuple[str, Any, Any, Callable[[], None]]] = [
        ("API only", trace.NoOpTracerProvider(), metrics.NoOpMeterProvider(), lambda: None)
    ]
    try:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            SpanExporter,
            SpanExportResult,
        )
    except ImportError:
        return rows

    class Dropping(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(Dropping()))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])

    def shutdown() -> None:
        tracer_provider.shutdown()
        meter_provider.shutdown()

    rows.append(("SDK", tracer_provider, meter_provider, shutdown))
    return rows


async def _serial(executor: ToolExecutor, ctx: ExecutionContext, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        await executor.execute("concat", ARGS, ctx)
    return time.perf_counter() - start


def run_telemetry(config: BenchConfig, loop: str) -> list[Measurement]:
    with asyncio.Runner(loop_factory=loop_factory(loop)) as runner:
        return runner.run(_measure(config))


async def _measure(config: BenchConfig) -> list[Measurement]:
    executor = _executor()
    ctx = ExecutionContext(session_id="s1")
    n = max(500, config.ops // 25)
    out: list[Measurement] = []

    def null_tracer() -> None:
        executor.set_tracer(_NullTracer())

    rows: list[tuple[str, Callable[[], None]]] = [("a tracer that does nothing", null_tracer)]
    shutdowns: list[Callable[[], None]] = []
    for label, tracer_provider, meter_provider, shutdown in _providers():
        rows.append((label, _instrumenting(executor, tracer_provider, meter_provider)))
        shutdowns.append(shutdown)
    for label, install in rows:
        plain_us: list[float] = []
        traced_us: list[float] = []
        ratios: list[float] = []
        await _serial(executor, ctx, n // 5)  # warm up, both ways
        install()
        await _serial(executor, ctx, n // 5)
        executor.set_tracer(None)
        for _ in range(config.rounds):
            plain = await _serial(executor, ctx, n)
            install()
            traced = await _serial(executor, ctx, n)
            executor.set_tracer(None)
            plain_us.append(plain / n * 1e6)
            traced_us.append(traced / n * 1e6)
            ratios.append(traced / plain)
        bad = [r for r in executor.history()[-50:] if not r.ok]
        if bad:
            raise RuntimeError(f"benchmark calls failed: {bad[0].error}")
        what = label if label.startswith("a tracer") else f"instrumented ({label})"
        out.append(
            Measurement(
                "telemetry",
                f"no-op, {what} / not instrumented",
                statistics.median(ratios),
                reference="the same executor, not instrumented",
                detail=f"{statistics.median(traced_us):.1f} us vs "
                f"{statistics.median(plain_us):.1f} us per call",
            )
        )
    for shutdown in shutdowns:
        shutdown()
    executor.dispose()
    return out


def _instrumenting(executor: ToolExecutor, tracer_provider: Any, meter_provider: Any) -> Any:
    def install() -> None:
        instrument(executor, tracer_provider=tracer_provider, meter_provider=meter_provider)

    return install
