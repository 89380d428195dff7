"""The search routes every search test runs on: ripgrep, and the seam's walk over the disk and
over a file system in memory."""

from __future__ import annotations

import pytest

from fastgate.builtin import find_ripgrep
from tests.builtin_kit import SEARCH_ROUTES


@pytest.fixture(params=SEARCH_ROUTES)
def route(request: pytest.FixtureRequest) -> str:
    if request.param == "ripgrep" and find_ripgrep() is None:
        pytest.skip("ripgrep is not installed (the 'builtin' extra brings it)")
    return str(request.param)
