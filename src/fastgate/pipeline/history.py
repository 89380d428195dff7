"""Bounded execution history and per-tool statistics (SPEC §13)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import msgspec

from fastgate.model.results import ToolResult

_LATENCY_SAMPLES = 1024


class ToolStats(msgspec.Struct, frozen=True):
    calls: int
    ok: int
    errors: dict[str, int]
    latency_p50_ms: float
    latency_p99_ms: float


class _Ring:
    """The last ``size`` items added: a list written round, cheaper per add than a deque."""

    __slots__ = ("_added", "_items", "_size")

    def __init__(self, size: int) -> None:
        self._items: list[Any] = []
        self._size = size
        self._added = 0

    def add(self, item: Any) -> None:
        if len(self._items) < self._size:
            self._items.append(item)
        elif self._size:
            self._items[self._added % self._size] = item
        self._added += 1

    def items(self) -> list[Any]:
        """Oldest first."""
        if len(self._items) < self._size or not self._items:
            return list(self._items)
        start = self._added % self._size
        return self._items[start:] + self._items[:start]


class _ToolRecord:
    __slots__ = ("calls", "errors", "latencies", "ok")

    def __init__(self) -> None:
        self.calls = 0
        self.ok = 0
        self.errors: Counter[str] = Counter()
        self.latencies = _Ring(_LATENCY_SAMPLES)


class History:
    """The last ``limit`` results, in completion order, plus counters per tool."""

    __slots__ = ("_records", "_results")

    def __init__(self, limit: int) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise ValueError(f"history_limit: expected a non-negative integer, got {limit!r}")
        self._results = _Ring(limit)
        self._records: dict[str, _ToolRecord] = {}

    def add(
        self, result: ToolResult, tool_name: str, error_code: str | None, duration_ms: float
    ) -> None:
        """Record ``result``; the caller passes what it knows of it (its tool's name, its error
        code or None, its duration), which is cheaper than reading it back from the result."""
        self._results.add(result)
        record = self._records.get(tool_name)
        if record is None:
            record = self._records[tool_name] = _ToolRecord()
        record.calls += 1
        if error_code is None:
            record.ok += 1
        else:
            record.errors[error_code] += 1
        record.latencies.add(duration_ms)

    def results(self) -> list[ToolResult]:
        return self._results.items()

    def stats(self) -> dict[str, ToolStats]:
        out = {}
        for name, record in self._records.items():
            ordered = sorted(record.latencies.items())
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
