"""``regular_file_links``: the compiled ``stat(2)`` and the pure ``os.stat`` give the same answer
for every kind of path a writing call can name (the permission check for hard links to
protected files asks it on every write)."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from fastgate import _core


def _implementations() -> list[tuple[str, Callable[[str], int]]]:
    found: list[tuple[str, Callable[[str], int]]] = [("pure", _core._regular_file_links)]
    try:
        compiled = importlib.import_module("fastgate._core._links")
    except ImportError:
        if _core.REQUIRE_EXTENSIONS:
            raise
    else:
        found.append(("compiled", compiled.regular_file_links))
    return found


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "alone.txt").write_text("a")
    (tmp_path / "twice.txt").write_text("b")
    os.link(tmp_path / "twice.txt", tmp_path / "other-name.txt")
    os.symlink(tmp_path / "twice.txt", tmp_path / "link-to-twice")
    os.symlink(tmp_path / "missing", tmp_path / "dangling")
    (tmp_path / "dir").mkdir()
    os.mkfifo(tmp_path / "fifo")
    return tmp_path


EXPECTED = {
    "alone.txt": 1,
    "twice.txt": 2,
    "other-name.txt": 2,
    "link-to-twice": 2,  # followed, as the write would follow it
    "dangling": 0,
    "dir": 0,
    "fifo": 0,
    "missing": 0,
}


@pytest.mark.parametrize(
    ("build", "links"), _implementations(), ids=[name for name, _ in _implementations()]
)
def test_link_counts_of_every_kind_of_path(
    build: str, links: Callable[[str], int], tree: Path
) -> None:
    assert {name: links(str(tree / name)) for name in EXPECTED} == EXPECTED
    assert links(str(tree / "alone.txt") + "\x00/twice.txt") == 0  # names nothing
    assert links(str(tree / "alone.txt") + "/below") == 0  # ENOTDIR
    assert links("") == 0
    surrogate = str(tree / "caf\udce9.txt")  # a name that is not UTF-8, as os.fsdecode gives it
    with open(os.fsencode(surrogate), "w"):
        pass
    assert links(surrogate) == 1


def test_the_core_exports_the_compiled_one_when_built() -> None:
    compiled = [f for name, f in _implementations() if name == "compiled"]
    if compiled and not _core.NO_EXTENSIONS:
        assert _core.regular_file_links is compiled[0]
    else:
        assert _core.regular_file_links is _core._regular_file_links
