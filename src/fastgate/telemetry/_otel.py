"""The tracer that turns each call of an executor into an OpenTelemetry span and metrics."""

from __future__ import annotations

from typing import Any, Final

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from fastgate import __version__
from fastgate.model import ExecutionContext, ToolResult
from fastgate.pipeline import CallTrace, ToolExecutor

SCOPE: Final = "fastgate"
OPERATION: Final = "execute_tool"  # the GenAI semantic conventions' name for a tool call
MAX_NAME: Final = 64  # a registered tool name's longest
MAX_TEXT: Final = 256  # the longest id (session, the model's call id) a span keeps
UNKNOWN: Final = "unknown"  # the tool name of spans and metrics for names no tool answers to

#: Span attributes, by name: what each says. Arguments and content are never recorded.
ATTRIBUTES: Final = {
    "gen_ai.operation.name": 'always "execute_tool"',
    "gen_ai.tool.name": "the tool's name, as the model called it (cut at 64 characters)",
    "gen_ai.tool.call.id": "the model's id for the call, when it gave one (cut at 256 characters)",
    "fastgate.session.id": "the call's session (cut at 256 characters)",
    "fastgate.execution.id": "the result's meta.execution_id (joins history and the store)",
    "fastgate.model.decision": "allow, ask (approval needed, none given) or deny; absent when the "
    "call was refused before a decision (unknown tool, invalid arguments, worktree)",
    "fastgate.model.decision.source": "rule, mode, session, sensitive, hook, guard or user",
    "fastgate.admission.wait_ms": "time waiting for the scheduler slot and file locks",
    "fastgate.run.duration_ms": "time the body ran, retries included",
    "fastgate.outcome": '"ok" or the ErrorCode',
    "error.type": "the ErrorCode of a call that did not succeed (the span's status is ERROR)",
    "fastgate.attempts": "attempts of the body (0 when it never ran)",
}

#: Metric instruments, by name: (unit, what it counts or measures).
METRICS: Final = {
    "fastgate.tool.calls": ("{call}", "calls, by gen_ai.tool.name and fastgate.outcome"),
    "fastgate.tool.errors": ("{call}", "calls that did not succeed, by tool and error.type"),
    "fastgate.tool.admission_wait": ("s", "time waiting for admission, by tool"),
    "fastgate.tool.run_time": ("s", "time the body ran, by tool and fastgate.outcome"),
}

# Seconds, from 100 us to 10 min: tool calls span that range (the SDK's default boundaries are
# meant for milliseconds).
_BUCKETS: Final = (
    0.0001,
    0.0005,
    0.001,
    0.005,
    0.01,
    0.05,
    0.1,
    0.5,
    1.0,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
)


class Instrumentation:
    """The tracer ``instrument`` installs (a ``fastgate.pipeline.tracing.CallTracer``)."""

    def __init__(
        self,
        executor: ToolExecutor,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
    ) -> None:
        self.executor = executor
        self._tracer = trace.get_tracer(SCOPE, __version__, tracer_provider)
        meter = metrics.get_meter(SCOPE, __version__, meter_provider)
        unit, text = METRICS["fastgate.tool.calls"]
        self._calls = meter.create_counter("fastgate.tool.calls", unit, text)
        unit, text = METRICS["fastgate.tool.errors"]
        self._errors = meter.create_counter("fastgate.tool.errors", unit, text)
        unit, text = METRICS["fastgate.tool.admission_wait"]
        self._admission = meter.create_histogram(
            "fastgate.tool.admission_wait", unit, text, explicit_bucket_boundaries_advisory=_BUCKETS
        )
        unit, text = METRICS["fastgate.tool.run_time"]
        self._run_time = meter.create_histogram(
            "fastgate.tool.run_time", unit, text, explicit_bucket_boundaries_advisory=_BUCKETS
        )

    def call_started(self, name: str, ctx: ExecutionContext) -> Any:
        # The name is the model's, registered or not: a long one is cut to a tool name's length.
        name = _text(name, MAX_NAME)
        scope = ctx.agent_scope
        attributes: dict[str, Any] = {"gen_ai.operation.name": OPERATION, "gen_ai.tool.name": name}
        session = ctx.session_id
        if session is not None:
            attributes["fastgate.session.id"] = _text(session, MAX_TEXT)
        # The span's name is a tool's, or "unknown": backends index span names (and derive
        # metrics from them), so a model inventing names must not make one each.
        span_name = f"{OPERATION} {name if self._registered(name, scope) else UNKNOWN}"
        span = self._tracer.start_span(span_name, kind=SpanKind.INTERNAL, attributes=attributes)
        if not span.get_span_context().is_valid:  # no SDK: nothing to be the parent of
            return span, None, name, scope
        # Current while the call runs: the body's task copies the context, so spans the tool
        # makes are children of this one.
        return span, otel_context.attach(trace.set_span_in_context(span)), name, scope

    def _registered(self, name: str, scope: str | None) -> bool:
        try:
            return self.executor.registry.resolve(name, scope) is not None
        except KeyError:  # an unknown scope: the call was refused
            return False

    def call_ended(self, token: Any, result: ToolResult | None, trace_: CallTrace) -> None:
        if token is None:  # call_started failed (logged by the executor)
            return
        span, attached, name, scope = token
        if attached is not None:
            otel_context.detach(attached)
        if result is None:  # execute raised: a caller's programming error, or a bug
            outcome = "exception"
        else:
            outcome = "ok" if result.ok or result.error is None else str(result.error.code)
        if span.is_recording():
            self._annotate(span, result, trace_, outcome)
        span.end()
        if outcome == "UNKNOWN_TOOL" or not self._registered(name, scope):
            # One series for every name no tool answers to, however the call was refused (past
            # a turn's limit, disposed, cancelled, unreadable arguments): a model inventing
            # names must not make a metric series each (crowding out the real tools' at the
            # SDK's limit).
            name = UNKNOWN
        tool = {"gen_ai.tool.name": name}
        self._calls.add(1, {"gen_ai.tool.name": name, "fastgate.outcome": outcome})
        if outcome != "ok":
            self._errors.add(1, {"gen_ai.tool.name": name, "error.type": outcome})
        wait_ms = trace_.admission_wait_ms
        if wait_ms is not None:
            self._admission.record(wait_ms / 1000.0, tool)
        run_ms = trace_.run_ms
        if run_ms is not None:
            self._run_time.record(
                run_ms / 1000.0, {"gen_ai.tool.name": name, "fastgate.outcome": outcome}
            )

    def _annotate(
        self, span: Any, result: ToolResult | None, trace_: CallTrace, outcome: str
    ) -> None:
        attributes: dict[str, Any] = {"fastgate.outcome": outcome}
        if trace_.decision is not None:
            attributes["fastgate.model.decision"] = str(trace_.decision)
        wait_ms = trace_.admission_wait_ms
        if wait_ms is not None:
            attributes["fastgate.admission.wait_ms"] = wait_ms
        run_ms = trace_.run_ms
        if run_ms is not None:
            attributes["fastgate.run.duration_ms"] = run_ms
        if result is not None:
            meta = result.meta
            attributes["fastgate.execution.id"] = meta.execution_id
            attributes["fastgate.attempts"] = meta.attempts
            if meta.call_id is not None:
                attributes["gen_ai.tool.call.id"] = _text(meta.call_id, MAX_TEXT)
            if meta.decision_source is not None:
                attributes["fastgate.model.decision.source"] = str(meta.decision_source)
        if outcome != "ok":
            attributes["error.type"] = outcome
            # The code only: error messages can quote paths and arguments.
            span.set_status(Status(StatusCode.ERROR, outcome))
        span.set_attributes(attributes)

    def uninstrument(self) -> None:
        """Stop tracing the executor's calls (calls in flight still end their spans)."""
        if self.executor.tracer is self:
            self.executor.set_tracer(None)


def _text(value: Any, limit: int) -> Any:
    """A caller's or the model's text as a span keeps it: cut at ``limit`` characters, and valid
    UTF-8 (a lone surrogate, which JSON's ``"\\ud800"`` decodes to, is written escaped): OTLP
    sends UTF-8, and one string it cannot encode fails the export of the whole batch of spans.
    Anything else than text is left to the SDK's own checks."""
    if not isinstance(value, str):
        return value
    if len(value) > limit:
        value = value[:limit] + "…"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        value = value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


def instrument(
    executor: ToolExecutor,
    *,
    tracer_provider: trace.TracerProvider | None = None,
    meter_provider: metrics.MeterProvider | None = None,
) -> Instrumentation:
    """Trace every call of ``executor`` from now on; providers default to the global ones.

    Instrumenting an executor again replaces its earlier instrumentation (calls are never
    counted twice); an executor with a tracer of another kind is a ``ValueError``.
    """
    if not isinstance(executor, ToolExecutor):
        raise TypeError(f"executor: expected a ToolExecutor, got {type(executor).__name__}")
    current = executor.tracer
    if current is not None and not isinstance(current, Instrumentation):
        raise ValueError(f"the executor already has a tracer: {current!r}")
    instrumentation = Instrumentation(executor, tracer_provider, meter_provider)
    executor.set_tracer(instrumentation)
    return instrumentation


def uninstrument(executor: ToolExecutor) -> None:
    """Stop tracing ``executor``'s calls (a no-op when it is not instrumented)."""
    if isinstance(executor.tracer, Instrumentation):
        executor.set_tracer(None)
