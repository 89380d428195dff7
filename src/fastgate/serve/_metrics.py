"""``/metrics``: the gateway in the Prometheus text format, through prometheus-client.

Counted as calls end: calls by tool and outcome, refusals by code, the admission wait and the
run time (histograms, from the executor's call tracer). Read at each scrape: queue depth and
calls running per scheduler pool, and the state of every upstream MCP server.

No label value is a caller's text: a series is made only for a tool name some registry of the
gateway holds (anything else a caller names is counted as ``(unknown)``), an outcome of
``ErrorCode`` and an HTTP status the gateway itself answers; pools and upstream servers are the
operator's. A caller cannot grow ``/metrics`` by naming tools.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from fastgate.model import ErrorCode, ExecutionContext, ToolResult
from fastgate.pipeline import CallTrace, CallTracer
from fastgate.tools import ToolRegistry

CONTENT_TYPE: Final = CONTENT_TYPE_LATEST
_TIME_BUCKETS: Final = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)  # fmt: skip
_UPSTREAM_STATES: Final = ("starting", "ready", "restarting", "closed")
_CACHED_LABELS: Final = 4096  # (tool, outcome) pairs whose counters are kept at hand
UNKNOWN: Final = "(unknown)"  # the label of every tool name no registry of the gateway holds
_OUTCOMES: Final = frozenset({"ok", "ABORTED", *(str(code) for code in ErrorCode)})
_STATUSES: Final = frozenset({"401", "403", "408", "413", "429"})


class GatewayMetrics:
    """The gateway's metrics, in a registry of their own (several gateways in one process
    never mix)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._calls = Counter(
            "fastgate_calls",
            "Tool calls answered by the gateway, by tool and outcome (ok or the error code).",
            ["tool", "outcome"],
            registry=self.registry,
        )
        self.refusals = Counter(
            "fastgate_refusals",
            "Calls refused or failed, by error code.",
            ["code"],
            registry=self.registry,
        )
        self._http_rejections = Counter(
            "fastgate_http_rejections",
            "HTTP requests answered before MCP: 401, 403, 408, 413, 429.",
            ["status"],
            registry=self.registry,
        )
        self.admission_wait = Histogram(
            "fastgate_admission_wait_seconds",
            "Time a call waited for its scheduler slot and file locks.",
            buckets=_TIME_BUCKETS,
            registry=self.registry,
        )
        self.run_time = Histogram(
            "fastgate_run_seconds",
            "Time a tool's body ran.",
            buckets=_TIME_BUCKETS,
            registry=self.registry,
        )
        self._counters: dict[tuple[str, str], tuple[Any, ...]] = {}
        self._registries: list[ToolRegistry] = []
        self.calls = _ToolCounter(self._calls, self.tool_label)
        self.http_rejections = _StatusCounter(self._http_rejections)
        self._live = _LiveCollector()
        self.registry.register(self._live)

    def know(self, registry: ToolRegistry) -> None:
        """Label calls of the tools ``registry`` holds by their names (see ``tool_label``)."""
        if all(known is not registry for known in self._registries):
            self._registries.append(registry)

    def tool_label(self, tool: object) -> str:
        """``tool`` when some registry of the gateway holds a tool of that name (in any layer),
        else ``UNKNOWN``: a caller's made-up names never become series."""
        if type(tool) is not str or not tool:
            return UNKNOWN
        for registry in self._registries:
            if registry.resolve(tool) is not None or any(
                defn.name == tool for defn in registry.definitions()
            ):
                return tool
        return UNKNOWN

    def watch(
        self,
        scheduler_stats: Callable[[], Any] | None = None,
        upstreams: Callable[[], dict[str, dict[str, Any]]] | None = None,
    ) -> None:
        """What to read at each scrape: ``scheduler.stats`` and ``bridge.status``."""
        self._live.scheduler_stats = scheduler_stats
        self._live.upstreams = upstreams

    def count(self, tool: str, result: ToolResult) -> None:
        error = result.error
        outcome = "ok" if error is None else str(error.code)
        counters = self._counters.get((tool, outcome))
        if counters is None:
            counters = self._counters_for(tool, outcome)
        for counter in counters:
            counter.inc()

    def _counters_for(self, tool: str, outcome: str) -> tuple[Any, ...]:
        """The labelled counters of one (tool, outcome), looked up once: a call then costs one
        dictionary lookup, not a labels() call per counter. Only known tools' pairs are kept
        (the label of an unknown name is ``UNKNOWN``, and its name is not remembered)."""
        label = self.tool_label(tool)
        found: tuple[Any, ...] = (self.calls.labels(label, outcome),)
        if outcome != "ok":
            found += (self.refusals.labels(_outcome(outcome)),)
        if label == tool and len(self._counters) < _CACHED_LABELS:
            self._counters[(tool, outcome)] = found
        return found

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def tracer(
        self, chained: CallTracer | None, registry: ToolRegistry | None = None
    ) -> CallTracer:
        """A call tracer feeding the histograms (and telling ``chained``, if any); the tools of
        ``registry`` (the executor's) are known from then on."""
        if registry is not None:
            self.know(registry)
        return _TimingTracer(self, chained)


def _outcome(value: object) -> str:
    text = str(value)
    return text if text in _OUTCOMES else "(other)"


class _ToolCounter:
    """``fastgate_calls_total`` whose ``labels(tool, outcome)`` folds a tool name the gateway
    does not hold into ``UNKNOWN`` and an outcome it does not know into ``(other)``, whoever
    calls it."""

    __slots__ = ("_counter", "_label")

    def __init__(self, counter: Counter, label: Callable[[object], str]) -> None:
        self._counter = counter
        self._label = label

    def labels(self, tool: object, outcome: object) -> Any:
        return self._counter.labels(self._label(tool), _outcome(outcome))


class _StatusCounter:
    """``fastgate_http_rejections_total``: only the statuses the gateway answers itself."""

    __slots__ = ("_counter",)

    def __init__(self, counter: Counter) -> None:
        self._counter = counter

    def labels(self, status: object) -> Any:
        text = str(status)
        return self._counter.labels(text if text in _STATUSES else "(other)")


class _TimingTracer:
    def __init__(self, metrics: GatewayMetrics, chained: CallTracer | None) -> None:
        self._wait = metrics.admission_wait.observe
        self._run = metrics.run_time.observe
        self._chained = chained

    def call_started(self, name: str, ctx: ExecutionContext) -> Any:
        chained = self._chained
        return chained.call_started(name, ctx) if chained is not None else None

    def call_ended(self, token: Any, result: ToolResult | None, trace: CallTrace) -> None:
        wait = trace.admission_wait_ms
        if wait is not None:
            self._wait(wait / 1000.0)
        run = trace.run_ms
        if run is not None:
            self._run(run / 1000.0)
        if self._chained is not None:
            self._chained.call_ended(token, result, trace)


class _LiveCollector:
    """Gauges read when scraped: nothing to keep up to date between scrapes."""

    def __init__(self) -> None:
        self.scheduler_stats: Callable[[], Any] | None = None
        self.upstreams: Callable[[], dict[str, dict[str, Any]]] | None = None

    def describe(self) -> list[Metric]:
        return []  # the families depend on what runs; nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        if self.scheduler_stats is not None:
            stats = self.scheduler_stats()
            queued = GaugeMetricFamily(
                "fastgate_queue_depth", "Calls waiting for a slot, by pool.", labels=["pool"]
            )
            running = GaugeMetricFamily(
                "fastgate_pool_in_flight", "Calls holding a slot, by pool.", labels=["pool"]
            )
            pools = set(stats.queued_by_pool) | set(stats.in_flight_by_pool)
            for pool in sorted(pools):
                queued.add_metric([pool], stats.queued_by_pool.get(pool, 0))
                running.add_metric([pool], stats.in_flight_by_pool.get(pool, 0))
            queued.add_metric(["(all)"], stats.queued)
            running.add_metric(["(all)"], stats.in_flight)
            yield queued
            yield running
        if self.upstreams is not None:
            state = GaugeMetricFamily(
                "fastgate_upstream_state",
                "Each upstream MCP server's state (1 for the state it is in).",
                labels=["server", "state"],
            )
            tools = GaugeMetricFamily(
                "fastgate_upstream_tools",
                "Tools registered per upstream server.",
                labels=["server"],
            )
            for server, status in sorted(self.upstreams().items()):
                for name in _UPSTREAM_STATES:
                    state.add_metric([server, name], 1.0 if status.get("state") == name else 0.0)
                tools.add_metric([server], float(status.get("tools", 0)))
            yield state
            yield tools
