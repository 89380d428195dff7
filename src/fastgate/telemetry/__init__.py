"""OpenTelemetry for fastgate: one span per call and the call metrics (SPEC §20).

``instrument(executor)`` makes every call of that executor, refusals included, a span named
``execute_tool <tool>`` (current while the call runs, so the tool's own spans nest under it) and
records the call metrics. It uses ``opentelemetry-api`` only: with no SDK configured, the API's
no-op tracer and meter make it nearly free; the application configures the SDK and exporters as
usual, or passes providers explicitly. Arguments and content are never recorded.

Needs the ``otel`` extra: ``pip install 'fastgate[otel]'``.
"""

from __future__ import annotations

try:
    import opentelemetry.metrics
    import opentelemetry.trace  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise ImportError(
        "fastgate.telemetry needs the OpenTelemetry API: pip install 'fastgate[otel]'"
    ) from exc

from fastgate.telemetry._otel import ATTRIBUTES as ATTRIBUTES
from fastgate.telemetry._otel import METRICS as METRICS
from fastgate.telemetry._otel import Instrumentation as Instrumentation
from fastgate.telemetry._otel import instrument as instrument
from fastgate.telemetry._otel import uninstrument as uninstrument

__all__ = ("ATTRIBUTES", "METRICS", "Instrumentation", "instrument", "uninstrument")
