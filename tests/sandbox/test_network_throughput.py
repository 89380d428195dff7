"""The throughput measure of the proxy runs, and every byte arrives each way (the ratio itself
is the benchmark's to report: ``benchmarks/sandbox_proxy.py``)."""

from __future__ import annotations

import os

import pytest

from fastgate.sandbox._throughput import measure

pytestmark = pytest.mark.slow  # run once in CI, on the compiled build


@pytest.mark.parametrize("splice", [None, False], ids=["splice", "copy"])
async def test_the_throughput_measure_downloads_every_byte_each_way(splice: bool | None) -> None:
    result = await measure(4 << 20, 1, splice=splice)
    assert min(result.direct, result.tunnel, result.plain, result.forwarder) > 0
    assert result.relay == ("splice" if splice is None and hasattr(os, "splice") else "copy")
    assert "reference forwarder" in result.report()
