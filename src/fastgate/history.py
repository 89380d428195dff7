"""Bounded execution history and per-tool statistics (SPEC §13)."""

from __future__ import annotations

from collections import Counter, deque

import msgspec

from fastgate.results import ToolResult

_LATENCY_SAMPLES = 1024


class ToolStats(msgspec.Struct, frozen=True):
    calls: int
    ok: int
    errors: dict[str, int]
    latency_p50_ms: float
    latency_p99_ms: float


class _ToolRecord:
    __slots__ = ("calls", "errors", "latencies", "ok")

    def __init__(self) -> None:
        self.calls = 0
        self.ok = 0
        self.errors: Counter[str] = Counter()
        self.latencies: deque[float] = deque(maxlen=_LATENCY_SAMPLES)


class History:
    """The last ``limit`` results, in completion order, plus counters per tool."""

    __slots__ = ("_records", "_results")

    def __init__(self, limit: int) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise ValueError(f"history_limit: expected a non-negative integer, got {limit!r}")
        self._results: deque[ToolResult] = deque(maxlen=limit)
        self._records: dict[str, _ToolRecord] = {}

    def add(self, result: ToolResult) -> None:
        self._results.append(result)
        name = result.meta.tool_name
        record = self._records.get(name)
        if record is None:
            record = self._records[name] = _ToolRecord()
        record.calls += 1
        if result.ok:
            record.ok += 1
        elif result.error is not None:
            record.errors[result.error.code] += 1
        record.latencies.append(result.meta.duration_ms)

    def results(self) -> list[ToolResult]:
        return list(self._results)

    def stats(self) -> dict[str, ToolStats]:
        out = {}
        for name, record in self._records.items():
            ordered = sorted(record.latencies)
            out[name] = ToolStats(
                calls=record.calls,
                ok=record.ok,
                errors=dict(record.errors),
                latency_p50_ms=_nearest_rank(ordered, 0.50),
                latency_p99_ms=_nearest_rank(ordered, 0.99),
            )
        return out


def _nearest_rank(ordered: list[float], q: float) -> float:
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]
