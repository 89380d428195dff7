"""The bounded history ring and the per-tool statistics (SPEC §13), against a plain model."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from fastgate.model.results import ErrorCode, ResultMeta, ToolError, ToolResult
from fastgate.pipeline.history import _LATENCY_SAMPLES, History

TOOLS = ("read", "write")
CODES = (None, ErrorCode.TIMEOUT, ErrorCode.TOOL_ERROR)


def _result(n: int, tool: str, code: ErrorCode | None, duration_ms: float) -> ToolResult:
    meta = ResultMeta(f"run-{n}", None, tool, None, 0.0, 0.0, duration_ms)
    if code is None:
        return ToolResult(True, "ok", None, meta)
    return ToolResult(False, "failed", ToolError(code, "failed"), meta)


calls = st.lists(
    st.tuples(st.sampled_from(TOOLS), st.sampled_from(CODES), st.integers(0, 10_000)),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(limit=st.integers(0, 8), made=calls)
def test_history_keeps_the_last_results_in_completion_order(
    limit: int, made: list[tuple[str, ErrorCode | None, int]]
) -> None:
    history = History(limit)
    added = []
    for n, (tool, code, duration) in enumerate(made):
        result = _result(n, tool, code, float(duration))
        history.add(result, tool, code, float(duration))
        added.append(result)
    expected = added[-limit:] if limit else []
    assert history.results() == expected
    assert history.results() is not history.results()  # a copy each time

    stats = history.stats()
    assert set(stats) == {tool for tool, _, _ in made}
    for tool, stat in stats.items():
        mine = [(code, duration) for t, code, duration in made if t == tool]
        assert stat.calls == len(mine)
        assert stat.ok == sum(code is None for code, _ in mine)
        assert stat.errors == dict(Counter(code for code, _ in mine if code is not None))


def test_latency_percentiles_come_from_the_latest_samples_only() -> None:
    history = History(0)
    # Slow calls first, then a full window of fast ones: the slow ones must have rolled out.
    for n in range(_LATENCY_SAMPLES):
        history.add(_result(n, "read", None, 1000.0), "read", None, 1000.0)
    for n in range(_LATENCY_SAMPLES):
        history.add(_result(n, "read", None, float(n % 10)), "read", None, float(n % 10))
    stats = history.stats()["read"]
    assert stats.calls == 2 * _LATENCY_SAMPLES
    assert stats.latency_p99_ms == 9.0
    assert stats.latency_p50_ms in (4.0, 5.0)
