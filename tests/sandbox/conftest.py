"""The sandbox's tests keep the searches it remembers on disk in a directory of their own,
never in the user's cache."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fastgate.sandbox import _memory


@pytest.fixture(autouse=True)
def searches_kept_apart(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    kept = tmp_path_factory.mktemp("fastgate-searches")
    monkeypatch.setattr(_memory, "_DIRECTORY", str(kept))
    yield kept
