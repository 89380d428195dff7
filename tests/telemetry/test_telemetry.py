"""``fastgate.telemetry``: spans and metrics through the OpenTelemetry SDK's in-memory exporter and
metric reader (SPEC §20)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="needs the test extra (opentelemetry-sdk)")

from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from fastgate import (
    ApprovalResponse,
    ErrorCode,
    ExecutionContext,
    PermissionConfig,
    ToolCall,
    ToolExecutor,
    ToolKind,
)
from fastgate.telemetry import ATTRIBUTES, METRICS, Instrumentation, instrument, uninstrument
from tests.pipeline_kit import assert_idle, echo, executor, tool

NAME = "gen_ai.tool.name"


@dataclass
class Otel:
    spans: InMemorySpanExporter
    reader: InMemoryMetricReader
    tracer_provider: TracerProvider
    meter_provider: MeterProvider

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def points(self, metric: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        if data is None:
            return []
        return [
            point
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for m in scope.metrics
            if m.name == metric
            for point in m.data.data_points
        ]

    def counts(self, metric: str, key: str) -> dict[tuple[str, str], int]:
        return {
            (p.attributes["gen_ai.tool.name"], p.attributes[key]): p.value
            for p in self.points(metric)
        }


@pytest.fixture
def otel() -> Iterator[Otel]:
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    yield Otel(spans, reader, tracer_provider, meter_provider)
    tracer_provider.shutdown()
    meter_provider.shutdown()


def _instrumented(otel: Otel, **options: Any) -> ToolExecutor:
    async def body(args: Any, ctx: Any) -> str:
        # A span the tool makes itself: it must nest under the call's span.
        with trace.get_tracer("tool", tracer_provider=otel.tracer_provider).start_as_current_span(
            "tool-work"
        ):
            return "done"

    ex = executor(
        echo(),
        tool("work", body),
        tool("write_note", lambda a, c: "written", kind=ToolKind.WRITE),
        tool("fail", lambda a, c: 1 / 0),
        **options,
    )
    instrument(ex, tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider)
    return ex


def _tracer_of(ex: ToolExecutor) -> object:
    return ex.tracer  # read afresh (mypy would keep an earlier narrowing of the property)


def _approver(approved: bool) -> Any:
    asked: list[str] = []

    async def approver(request: Any) -> ApprovalResponse:
        asked.append(request.tool_name)
        return ApprovalResponse(approved, feedback=None if approved else "not now")

    approver.asked = asked  # type: ignore[attr-defined]
    return approver


async def test_one_span_per_call_with_the_attributes_refusals_included(otel: Otel) -> None:
    ex = _instrumented(otel, permissions=PermissionConfig(deny=("echo(secret)",)))
    yes, no = _approver(True), _approver(False)
    calls: list[tuple[str, Any, ExecutionContext | None]] = [
        ("echo", {"text": "hi"}, None),
        ("nope", {}, None),
        ("echo", {"text": 1}, None),
        ("write_note", {"text": "x"}, ExecutionContext(approver=yes)),
        ("write_note", {"text": "x"}, ExecutionContext(approver=no)),
        ("write_note", {"text": "x"}, None),
        ("fail", {"text": "x"}, None),
    ]
    results = [
        await ex.execute(name, args, ctx, call_id=f"call-{i}")
        for i, (name, args, ctx) in enumerate(calls)
    ]
    assert yes.asked == ["write_note"] and no.asked == ["write_note"]
    spans = otel.finished()
    assert len(spans) == len(calls)
    by_call = {span.attributes["gen_ai.tool.call.id"]: span for span in spans}  # type: ignore[index]
    expected = [
        ("ok", "allow", "mode"),
        ("UNKNOWN_TOOL", None, None),
        ("INVALID_ARGS", None, None),
        ("ok", "allow", "user"),
        ("USER_REJECTED", "deny", "user"),
        ("PERMISSION_DENIED", "ask", "mode"),
        ("TOOL_ERROR", "allow", "mode"),
    ]
    for i, ((name, _, _), result, (outcome, decision, source)) in enumerate(
        zip(calls, results, expected, strict=True)
    ):
        span = by_call[f"call-{i}"]
        attrs = dict(span.attributes or {})
        assert span.name == f"execute_tool {'unknown' if name == 'nope' else name}"
        assert attrs["gen_ai.operation.name"] == "execute_tool"
        assert attrs["gen_ai.tool.name"] == name
        assert attrs["fastgate.session.id"] == "s1"
        assert attrs["fastgate.execution.id"] == result.meta.execution_id
        assert attrs["fastgate.outcome"] == outcome
        assert attrs.get("fastgate.model.decision") == decision
        assert attrs.get("fastgate.model.decision.source") == source
        assert attrs["fastgate.attempts"] == result.meta.attempts
        ran = outcome in ("ok", "TOOL_ERROR")
        assert ("fastgate.admission.wait_ms" in attrs) is ran
        assert ("fastgate.run.duration_ms" in attrs) is ran
        if outcome == "ok":
            assert span.status.status_code is StatusCode.UNSET
            assert "error.type" not in attrs
        else:
            assert span.status.status_code is StatusCode.ERROR
            assert attrs["error.type"] == outcome
        assert set(attrs) <= set(ATTRIBUTES)
        assert "hi" not in str(attrs.values())  # arguments and content are never recorded
    assert_idle(ex)


async def test_metrics_count_calls_errors_and_time_admission_and_runs(otel: Otel) -> None:
    ex = _instrumented(otel, permissions=PermissionConfig(deny=("write_note",)))
    for _ in range(3):
        assert (await ex.execute("echo", {"text": "hi"})).ok
    await ex.execute("echo", {"text": 5})
    await ex.execute("write_note", {"text": "x"})
    await ex.execute("fail", {"text": "x"})
    calls = otel.counts("fastgate.tool.calls", "fastgate.outcome")
    assert calls == {
        ("echo", "ok"): 3,
        ("echo", "INVALID_ARGS"): 1,
        ("write_note", "PERMISSION_DENIED"): 1,
        ("fail", "TOOL_ERROR"): 1,
    }
    errors = otel.counts("fastgate.tool.errors", "error.type")
    assert errors == {
        ("echo", "INVALID_ARGS"): 1,
        ("write_note", "PERMISSION_DENIED"): 1,
        ("fail", "TOOL_ERROR"): 1,
    }
    # Only the calls admitted to run (three echoes and the failing body) were timed.
    admission = {p.attributes["gen_ai.tool.name"]: p.count for p in otel.points(
        "fastgate.tool.admission_wait")}  # fmt: skip
    assert admission == {"echo": 3, "fail": 1}
    runs = {
        (p.attributes["gen_ai.tool.name"], p.attributes["fastgate.outcome"]): p.count
        for p in otel.points("fastgate.tool.run_time")
    }
    assert runs == {("echo", "ok"): 3, ("fail", "TOOL_ERROR"): 1}
    for p in otel.points("fastgate.tool.run_time"):
        assert p.sum >= 0 and p.explicit_bounds[0] == pytest.approx(0.0001)
    assert set(METRICS) >= {"fastgate.tool.calls", "fastgate.tool.errors"}


async def test_names_no_tool_answers_to_share_one_series_and_long_names_are_cut(
    otel: Otel,
) -> None:
    ex = _instrumented(otel)
    invented = [f"tool_{i}" for i in range(50)] + ["x" * 100_000]
    for name in invented:
        result = await ex.execute(name, {})
        assert result.error is not None and result.error.code is ErrorCode.UNKNOWN_TOOL
    assert (await ex.execute("echo", {"text": "hi"})).ok
    calls = otel.counts("fastgate.tool.calls", "fastgate.outcome")
    assert calls == {("unknown", "UNKNOWN_TOOL"): 51, ("echo", "ok"): 1}
    assert otel.counts("fastgate.tool.errors", "error.type") == {("unknown", "UNKNOWN_TOOL"): 51}
    longest = max(otel.finished(), key=lambda span: len(str((span.attributes or {})[NAME])))
    assert longest.name == "execute_tool unknown"
    assert dict(longest.attributes or {})[NAME] == "x" * 64 + "…"
    assert_idle(ex)


async def test_names_refused_before_lookup_share_the_one_series(otel: Otel) -> None:
    """Refused before the registry is asked (past a turn's limit, unreadable arguments, in an
    unknown scope, after dispose), an invented name still makes no series of its own."""
    ex = _instrumented(otel)
    turn = ExecutionContext(session_id="s1", turn_id="t1")
    for _ in range(64):
        assert (await ex.execute("echo", {"text": "x"}, turn)).ok
    refused = [
        await ex.execute("invented_past_the_limit", {}, turn),
        await ex.execute("invented_unreadable", b"\xff", ExecutionContext(session_id="s2")),
        await ex.execute("echo", {"text": "x"}, ExecutionContext(agent_scope="ghost")),
    ]
    ex.dispose()
    refused.append(await ex.execute("invented_after_dispose", {}))
    assert [r.error.code for r in refused if r.error is not None] == [
        ErrorCode.RESOURCE_EXHAUSTED,
        ErrorCode.INVALID_ARGS,
        ErrorCode.UNKNOWN_TOOL,
        ErrorCode.DISPOSED,
    ]
    names = {name for name, _ in otel.counts("fastgate.tool.calls", "fastgate.outcome")}
    assert names == {"echo", "unknown"}
    assert {name for name, _ in otel.counts("fastgate.tool.errors", "error.type")} == {"unknown"}


async def test_the_call_span_is_current_while_the_tool_runs(otel: Otel) -> None:
    ex = _instrumented(otel)
    outer = trace.get_tracer("server", tracer_provider=otel.tracer_provider)
    with outer.start_as_current_span("turn") as turn:
        result = await ex.execute("work", {"text": "x"})
        assert trace.get_current_span() is turn  # the call's span is no longer current
    assert result.ok
    spans = {span.name: span for span in otel.finished()}
    assert set(spans) == {"turn", "execute_tool work", "tool-work"}
    call_span = spans["execute_tool work"]
    assert call_span.parent is not None
    assert call_span.parent.span_id == spans["turn"].context.span_id
    inner = spans["tool-work"]
    assert inner.parent is not None and inner.parent.span_id == call_span.context.span_id


async def test_a_cancelled_call_and_a_batch_end_their_spans(otel: Otel) -> None:
    started = asyncio.Event()

    async def forever(args: Any, ctx: Any) -> str:
        started.set()
        await asyncio.Event().wait()
        return "never"

    ex = _instrumented(otel)
    ex.registry.register(tool("forever", forever))
    task = asyncio.create_task(ex.execute("forever", {"text": "x"}))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    batch = [ToolCall(f"b{i}", "echo", {"text": str(i)}) for i in range(4)]
    await ex.execute_parallel(batch)
    ex.refuse("echo", ErrorCode.INVALID_ARGS, "arguments are not JSON", call_id="bad")
    outcomes = sorted(str((s.attributes or {})["fastgate.outcome"]) for s in otel.finished())
    assert outcomes == ["ABORTED", "INVALID_ARGS", "ok", "ok", "ok", "ok"]
    assert trace.get_current_span() is trace.INVALID_SPAN
    assert_idle(ex)


async def test_nothing_is_recorded_when_not_instrumented(otel: Otel) -> None:
    plain = executor(echo())
    assert (await plain.execute("echo", {"text": "hi"})).ok
    ex = _instrumented(otel)
    assert (await ex.execute("echo", {"text": "hi"})).ok
    assert len(otel.finished()) == 1
    uninstrument(ex)
    assert ex.tracer is None
    assert (await ex.execute("echo", {"text": "hi"})).ok
    assert (await plain.execute("echo", {"text": "hi"})).ok
    assert len(otel.finished()) == 1
    assert otel.counts("fastgate.tool.calls", "fastgate.outcome") == {("echo", "ok"): 1}


async def test_instrumenting_again_replaces_and_never_counts_twice(otel: Otel) -> None:
    ex = _instrumented(otel)
    again = instrument(ex, tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider)
    assert isinstance(again, Instrumentation) and _tracer_of(ex) is again
    await ex.execute("echo", {"text": "hi"})
    assert len(otel.finished()) == 1
    again.uninstrument()
    assert _tracer_of(ex) is None

    class Other:
        def call_started(self, name: str, ctx: ExecutionContext) -> None:
            return None

        def call_ended(self, token: Any, result: Any, trace: Any) -> None:
            return None

    ex.set_tracer(Other())
    with pytest.raises(ValueError, match="already has a tracer"):
        instrument(ex)
    with pytest.raises(TypeError, match="ToolExecutor"):
        instrument(object())  # type: ignore[arg-type]


async def test_with_the_api_alone_calls_run_and_nothing_is_kept() -> None:
    # No SDK provider: the API's no-op tracer and meter (what a server without OpenTelemetry
    # configured gets).
    ex = executor(echo())
    instrument(ex, tracer_provider=trace.NoOpTracerProvider())
    result = await ex.execute("echo", {"text": "hi"})
    assert result.ok and result.content == "hi"
    assert trace.get_current_span() is trace.INVALID_SPAN


async def test_invented_names_make_no_span_name_each(otel: Otel) -> None:
    """Backends index span names and derive metrics from them: a name no tool answers to is
    ``execute_tool unknown``, whatever the model sent and however the call was refused; the
    name it sent stays in ``gen_ai.tool.name``."""
    ex = _instrumented(otel)
    invented = [f"tool_{i}" for i in range(40)] + ["Echo", "echo ", "ECHO", "x" * 70]
    for name in invented:
        await ex.execute(name, {"text": "x"})
    ex.refuse("made_up", ErrorCode.INVALID_ARGS, "arguments are not JSON", call_id="bad")
    await ex.execute("echo", {"text": "x"}, ExecutionContext(agent_scope="ghost"))
    assert (await ex.execute("echo", {"text": "hi"})).ok
    spans = otel.finished()
    assert {span.name for span in spans} == {"execute_tool unknown", "execute_tool echo"}
    names = [str((span.attributes or {})[NAME]) for span in spans]
    assert names[: len(invented)] == [n if len(n) <= 64 else n[:64] + "…" for n in invented]
    assert names[-3:] == ["made_up", "echo", "echo"]
    assert [span.name for span in spans[-2:]] == ["execute_tool unknown", "execute_tool echo"]
    assert_idle(ex)


def _strings(span: ReadableSpan) -> dict[str, str]:
    out = {"<span name>": span.name}
    out.update({k: v for k, v in (span.attributes or {}).items() if isinstance(v, str)})
    return out


@pytest.mark.parametrize(
    ("session", "name", "call_id"),
    [
        pytest.param("\ud800", "echo", "call-1", id="lone surrogate session"),
        pytest.param("s\udfff\ud800", "ec\ud800ho", "call-1", id="lone surrogate tool name"),
        pytest.param("s1", "echo", "call\udc80", id="lone surrogate call id"),
        pytest.param("s" * 1_000_000, "echo", "c" * 1_000_000, id="megabyte ids"),
        pytest.param("\ud800" * 10_000, "\udbff" * 100, "\udc00" * 10_000, id="both at once"),
    ],
)
async def test_span_text_is_bounded_utf8_whatever_the_ids_hold(
    otel: Otel, session: str, name: str, call_id: str
) -> None:
    """OTLP sends UTF-8: a string it cannot encode fails the export of a whole batch of spans,
    other calls' included. Ids chosen by the caller or the model are cut and made valid text."""
    ex = _instrumented(otel)
    result = await ex.execute(
        name, {"text": "x"}, ExecutionContext(session_id=session), call_id=call_id
    )
    assert result.ok is (name == "echo")
    (span,) = otel.finished()
    for key, text in _strings(span).items():
        text.encode("utf-8")  # raises for a lone surrogate
        assert len(text) <= 6 * 257, f"{key} kept {len(text)} characters"
    attrs = dict(span.attributes or {})
    assert str(attrs["fastgate.session.id"]).startswith(
        session[:8].encode("utf-8", "backslashreplace").decode()
    )
    assert_idle(ex)


async def test_valid_text_is_kept_as_it_is(otel: Otel) -> None:
    ex = _instrumented(otel)
    session, call_id = "sess-\U0001f600-é-\u65e5\u672c", "call-\U0001f680"
    assert (await ex.execute("echo", {"text": "x"}, ExecutionContext(session_id=session),
                             call_id=call_id)).ok  # fmt: skip
    (span,) = otel.finished()
    attrs = dict(span.attributes or {})
    assert attrs["fastgate.session.id"] == session and attrs["gen_ai.tool.call.id"] == call_id
    assert span.name == "execute_tool echo"


async def test_a_model_name_with_a_lone_surrogate_through_the_openai_adapter(otel: Otel) -> None:
    from fastgate.adapters import openai as fg_openai

    ex = _instrumented(otel)
    # What the SDK's JSON parser makes of a name the model wrote as "ec\\ud800ho".
    call = {"id": "c1", "type": "function", "function": {"name": "ec\ud800ho", "arguments": "{}"}}
    (message,) = await fg_openai.execute_tool_calls(ex, [call], ExecutionContext(session_id="s"))
    assert str(message["content"]).startswith("Error (UNKNOWN_TOOL)")
    (span,) = otel.finished()
    assert span.name == "execute_tool unknown"
    for text in _strings(span).values():
        text.encode("utf-8")
    assert_idle(ex)
