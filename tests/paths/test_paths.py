"""canonical_path: the fast routes (openat2, /proc) must always agree with os.path.realpath."""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import MappingProxyType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastgate import _core
from fastgate.model.freeze import freeze
from fastgate.paths import canonical as paths
from fastgate.paths.canonical import canonical_path


def _make_tree(tmp_path: Path) -> Path:
    (tmp_path / "d" / "e").mkdir(parents=True)
    (tmp_path / "d" / "e" / "f.txt").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "d" / "e" / "f.txt")
    (tmp_path / "dlink").symlink_to(tmp_path / "d")
    (tmp_path / "chain").symlink_to(tmp_path / "link")
    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere" / "x")
    os.mkfifo(tmp_path / "fifo")
    return tmp_path


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return _make_tree(tmp_path)


@pytest.fixture(scope="module")
def shared_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _make_tree(tmp_path_factory.mktemp("tree"))


@pytest.mark.parametrize(
    "rel",
    [
        "d/e/f.txt",
        "link",
        "chain",
        "dlink/e/f.txt",
        "d/../d/e/./f.txt",
        "missing/new.txt",
        "dlink/e/new.txt",
        "loop1",
        "dangling",
        "fifo",
        "d/e/f.txt/",
        "d",
        "dlink/",
    ],
)
def test_agrees_with_realpath(tree: Path, rel: str) -> None:
    path = f"{tree}/{rel}"
    assert canonical_path(path) == os.path.realpath(path)


def test_relative_paths_resolve_against_cwd(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tree / "d")
    assert canonical_path("e/f.txt") == os.path.realpath(tree / "d" / "e" / "f.txt")


def test_fast_route_is_used_on_linux(tree: Path) -> None:
    if not paths._FAST:
        pytest.skip("no O_PATH or /proc on this platform")
    assert paths._via_proc(str(tree / "link")) == os.path.realpath(tree / "link")
    missing = tree / "d" / "missing.txt"
    assert paths._via_proc(str(missing)) == os.path.realpath(missing)
    assert paths._via_proc(str(tree / "dangling")) is None  # a dangling link: realpath decides


def test_consistent_paths_memoizes_within_the_block_only(tree: Path) -> None:
    link = tree / "switch"
    link.symlink_to(tree / "d")
    with paths.consistent_paths():
        first = canonical_path(str(link))
        link.unlink()
        link.symlink_to(tree / "d" / "e")
        assert canonical_path(str(link)) == first  # one answer for the whole call
    assert canonical_path(str(link)) == os.path.realpath(link)  # nothing kept afterwards


@pytest.mark.parametrize(
    ("rel", "settled"),
    [
        ("d/e/f.txt", True),  # exists: the kernel's own name for it
        ("link", True),  # a symlink to an existing file: resolved to that file
        ("d/e/new.txt", True),  # nothing there, inside an existing directory
        ("dlink/e/new.txt", True),
        ("dangling", False),  # a dangling symlink: a write would land at its target
        ("d/e/f.txt/new", False),  # "inside" a regular file
        ("missing/new.txt", False),  # inside a directory that does not exist
        ("loop1", False),
    ],
)
def test_only_what_the_kernel_resolved_is_settled(tree: Path, rel: str, settled: bool) -> None:
    if not paths._FAST:
        pytest.skip("no O_PATH or /proc on this platform")
    path = f"{tree}/{rel}"
    assert paths.resolve_path(path) == (os.path.realpath(path), settled)


def test_resolve_follows_an_unsettled_link_and_keeps_a_settled_name(tree: Path) -> None:
    """worktree.resolve takes a settled answer as it is, and still follows a dangling symlink
    (unsettled) to where a write would land."""
    from fastgate.paths.worktree import resolve

    assert resolve(f"{tree}/dangling") == f"{tree}/nowhere/x"
    assert resolve(f"{tree}/dlink/e/new.txt") == f"{tree}/d/e/new.txt"


@given(
    st.sampled_from(["", "/", "/ws", "/ws/", "ws", "ws/sub/"]),
    st.text(alphabet="ab/.", max_size=8).filter(bool),
)
def test_absolute_path_is_os_path_join(root: str, path: str) -> None:
    assert paths.absolute_path(root, path) == os.path.join(root, path)


@given(
    st.dictionaries(
        st.sampled_from(["file_path", "notebook_path", "path", "text"]),
        st.one_of(st.none(), st.text(max_size=5), st.integers()),
    )
)
def test_given_paths_reads_every_kind_of_mapping_alike(arguments: dict[str, object]) -> None:
    names = ("notebook_path", "file_path", "path")
    expected = [(n, arguments[n]) for n in names if arguments.get(n) is not None]
    for shape in (arguments, freeze(arguments), MappingProxyType(arguments)):
        assert paths.given_paths(names, shape) == expected


# -- the openat2 probe (compiled build) --------------------------------------------------------


def _by_proc_route(path: str) -> tuple[str, bool]:
    """``resolve_path`` as the pure build answers it: without the openat2 probe."""
    probe = paths._probe
    paths._probe = None
    try:
        return paths.resolve_path(path)
    finally:
        paths._probe = probe


Probe = Callable[[str, bool], int]


@pytest.fixture
def probe() -> Iterator[Probe]:
    opens = _core.open_no_symlinks
    if opens is None:
        if _core.REQUIRE_EXTENSIONS and sys.platform == "linux":
            pytest.fail("the compiled build must have the openat2 probe")
        pytest.skip("the pure build has no openat2 probe")
    if opens("/", True) in (errno.ENOSYS, errno.EPERM):
        pytest.skip("this kernel or sandbox has no openat2")
    yield opens
    paths._probe = opens  # a test may have disabled it


def test_probe_opens_only_paths_without_symlinks(probe: Probe, tree: Path) -> None:
    assert probe(f"{tree}/d/e/f.txt", False) == 0
    assert probe(f"{tree}/d/e", True) == 0
    assert probe(f"{tree}/d/e/f.txt", True) == errno.ENOTDIR
    assert probe(f"{tree}/link", False) == errno.ELOOP  # the last component is a symlink
    assert probe(f"{tree}/dlink/e/f.txt", False) == errno.ELOOP  # a directory on the way is
    assert probe(f"{tree}/dangling", False) == errno.ELOOP  # a dangling one is refused too
    assert probe(f"{tree}/d/e/new.txt", False) == errno.ENOENT
    assert probe(f"{tree}/d/\x00", False) == errno.EINVAL  # not passed on, cut short at the NUL


def test_a_path_with_a_nul_byte_leaves_the_probe_on(probe: Probe, tree: Path) -> None:
    with pytest.raises(ValueError, match="null"):  # resolve_path's callers filter NULs first
        paths.resolve_path(f"{tree}/d/\x00")
    assert paths._probe is probe


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.sampled_from(
            [*"d e f.txt new.txt link dlink chain dangling loop1 missing fifo . ..".split(), ""]
        ),
        min_size=1,
        max_size=5,
    ),
    st.booleans(),
)
def test_both_routes_agree_with_realpath(
    probe: Probe, shared_tree: Path, parts: list[str], trailing_slash: bool
) -> None:
    path = f"{shared_tree}/{'/'.join(parts)}" + ("/" if trailing_slash else "")
    answer = paths.resolve_path(path)
    assert answer == _by_proc_route(path)
    assert answer[0] == os.path.realpath(path)


def test_a_kernel_without_openat2_stops_being_asked(probe: Probe, tree: Path) -> None:
    asked: list[str] = []

    def unsupported(path: str, directory: bool) -> int:
        asked.append(path)
        return errno.ENOSYS

    paths._probe = unsupported
    plain = f"{tree}/d/e/f.txt"
    assert paths.resolve_path(plain) == (plain, True)  # answered by the /proc route
    assert paths.resolve_path(plain) == (plain, True)
    assert asked == [plain]  # asked once, then dropped
    assert paths._probe is None
