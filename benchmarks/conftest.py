"""pytest-benchmark suites: per-operation costs, compared against a saved run of the same machine.

Run: ``.venv/bin/python -m pytest benchmarks -p no:cacheprovider --benchmark-only``
(add ``--benchmark-save=NAME`` / ``--benchmark-compare``). The load scenarios with in-run
reference ratios are ``fastgate bench``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from fastgate.runtime import loop_factory


@pytest.fixture(params=["uvloop", "asyncio"])
def runner(request: pytest.FixtureRequest) -> Iterator[asyncio.Runner]:
    with asyncio.Runner(loop_factory=loop_factory(request.param)) as r:
        yield r
