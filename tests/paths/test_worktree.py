"""Worktree isolation: every path argument resolves inside the allowed roots."""

from __future__ import annotations

import errno
import os
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fastgate import ToolKind, define_tool
from fastgate.paths import beneath
from fastgate.paths.beneath import WorktreeEscape, open_beneath
from fastgate.paths.worktree import PATH_MAX, WorktreeViolation, check_worktree, is_within

TOOL = define_tool(
    "Write",
    "w",
    {"type": "object", "properties": {"file_path": {"type": "string"}}},
    lambda args: None,
    kind=ToolKind.WRITE,
)
COPY = define_tool(
    "Copy",
    "c",
    {"type": "object", "properties": {"src": {"type": "string"}, "dst": {"type": "string"}}},
    lambda args: None,
    kind=ToolKind.WRITE,
    path_args=("src", "dst"),
)


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    ws = tmp_path / "ws"
    outside = tmp_path / "outside"
    (ws / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret").write_text("x")
    (ws / "file").write_text("x")
    return ws, outside


def check(path: Any, ws: Path, extra: tuple[str, ...] = ()) -> WorktreeViolation | None:
    return check_worktree(TOOL, {"file_path": path}, str(ws), extra)


@pytest.mark.parametrize("path", ["file", "sub", "sub/new.txt", "./sub/../file", "new/dir/f", "."])
def test_inside_is_accepted(layout: tuple[Path, Path], path: str) -> None:
    ws, _ = layout
    assert check(path, ws) is None
    assert check(str(ws / path), ws) is None


def test_dotdot_and_absolute_escapes(layout: tuple[Path, Path]) -> None:
    ws, outside = layout
    for path in ("../outside/secret", "sub/../../outside/x", "/etc/passwd", str(outside), "/"):
        violation = check(path, ws)
        assert violation is not None, path
        assert violation.argument == "file_path"
        assert "outside the workspace" in violation.message
        assert os.path.realpath(ws) in violation.message


def test_string_prefix_is_not_containment(layout: tuple[Path, Path]) -> None:
    ws, _ = layout
    sibling = ws.parent / (ws.name + "2")
    sibling.mkdir()
    violation = check(str(sibling / "f"), ws)
    assert violation is not None
    assert not is_within("/a/bc", "/a/b") and is_within("/a/b/c", "/a/b")
    assert is_within("/a/b", "/a/b") and is_within("/x", "/")


_parts = st.lists(st.sampled_from(["a", "b", "ab", "a.b", "b-"]), max_size=4)


@given(path=_parts, root=_parts, trailing=st.booleans())
def test_is_within_is_component_containment(
    path: list[str], root: list[str], trailing: bool
) -> None:
    given_path, given_root = "/" + "/".join(path), "/" + "/".join(root)
    expected = PurePosixPath(given_path).is_relative_to(given_root)
    assert is_within(given_path, given_root + ("/" if trailing and root else "")) is expected


def test_file_and_directory_symlinks_pointing_outside(layout: tuple[Path, Path]) -> None:
    ws, outside = layout
    (ws / "flink").symlink_to(outside / "secret")
    (ws / "dlink").symlink_to(outside)
    (ws / "relative").symlink_to(Path("..") / "outside")
    for path in ("flink", "dlink", "dlink/secret", "dlink/new", "relative/x"):
        violation = check(path, ws)
        assert violation is not None, path
        assert violation.resolved is not None and violation.resolved.startswith(str(outside))


def test_symlinks_inside_are_fine(layout: tuple[Path, Path]) -> None:
    ws, _ = layout
    (ws / "alias").symlink_to(ws / "sub")
    assert check("alias/x", ws) is None


def test_dangling_symlink_whose_target_is_outside(layout: tuple[Path, Path]) -> None:
    ws, outside = layout
    (ws / "dangling").symlink_to(outside / "will-be-created")
    violation = check("dangling", ws)
    assert violation is not None
    assert violation.resolved == str(outside / "will-be-created")
    (ws / "dangling-in").symlink_to(ws / "not-yet")
    assert check("dangling-in", ws) is None


def test_symlink_chains(layout: tuple[Path, Path]) -> None:
    ws, outside = layout
    (ws / "c3").symlink_to(outside)
    (ws / "c2").symlink_to(ws / "c3")
    (ws / "c1").symlink_to("c2")
    assert check("c1/f", ws) is not None
    (ws / "ok3").symlink_to(ws / "sub")
    (ws / "ok2").symlink_to("ok3")
    assert check("ok2/f", ws) is None


def test_symlink_loops_do_not_hang(layout: tuple[Path, Path]) -> None:
    ws, _ = layout
    (ws / "loop").symlink_to("loop")
    (ws / "a").symlink_to("b")
    (ws / "b").symlink_to("a")
    for path in ("loop", "a", "a/x", "loop/x"):
        violation = check(path, ws)
        assert violation is not None, path
        assert "loop" in violation.reason


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("a\x00b", "NUL"),
        ("", "empty"),
        (3, "string"),
        (["a"], "string"),
        (b"file", "string"),
    ],
)
def test_unusable_values(layout: tuple[Path, Path], value: Any, fragment: str) -> None:
    ws, _ = layout
    violation = check(value, ws)
    assert violation is not None and fragment in violation.reason


def test_paths_longer_than_path_max(layout: tuple[Path, Path]) -> None:
    ws, _ = layout
    long_path = "/".join(["d" * 200] * (PATH_MAX // 200 + 2))
    violation = check(long_path, ws)
    assert violation is not None and "PATH_MAX" in violation.reason
    violation = check("x" * 300, ws)
    assert violation is not None and "NAME_MAX" in violation.reason


def test_additional_dirs(layout: tuple[Path, Path]) -> None:
    ws, outside = layout
    assert check(str(outside / "secret"), ws, (str(outside),)) is None
    (ws / "dlink").symlink_to(outside)
    assert check("dlink/secret", ws, (str(outside),)) is None
    violation = check("/etc/hosts", ws, (str(outside),))
    assert violation is not None and str(outside) in violation.message


def test_every_path_argument_is_checked(layout: tuple[Path, Path]) -> None:
    ws, _ = layout
    assert check_worktree(COPY, {"src": "file", "dst": "sub/x"}, str(ws)) is None
    violation = check_worktree(COPY, {"src": "file", "dst": "../x"}, str(ws))
    assert violation is not None and violation.argument == "dst"
    assert check_worktree(COPY, {"src": "file"}, str(ws)) is None
    assert check_worktree(TOOL, {"file_path": None}, str(ws)) is None


def test_workspace_root_given_through_a_symlink(layout: tuple[Path, Path]) -> None:
    ws, _ = layout
    link = ws.parent / "ws-link"
    link.symlink_to(ws)
    assert check("file", link) is None
    assert check(str(ws / "file"), link) is None
    assert check("../outside/secret", link) is not None


def test_root_swapped_for_a_symlink_after_a_check(layout: tuple[Path, Path]) -> None:
    ws, outside = layout
    assert check("file", ws) is None  # the canonical root is now cached
    ws.rename(ws.parent / "ws-old")
    ws.symlink_to(outside)
    violation = check("secret", ws)
    assert violation is not None
    assert violation.resolved == str(outside / "secret")


def test_open_beneath_reads_and_creates_inside(layout: tuple[Path, Path]) -> None:
    ws, _ = layout
    fd = open_beneath("file", os.O_RDONLY, str(ws))
    with os.fdopen(fd) as f:
        assert f.read() == "x"
    fd = open_beneath("sub/new.txt", os.O_WRONLY | os.O_CREAT, str(ws))
    os.close(fd)
    assert (ws / "sub" / "new.txt").exists()
    (ws / "alias").symlink_to("sub")
    os.close(open_beneath("alias/../sub/./new.txt", os.O_RDONLY, str(ws)))


def test_directory_swapped_for_a_symlink_after_the_check(layout: tuple[Path, Path]) -> None:
    ws, outside = layout
    assert check("sub/planted", ws) is None  # the check passes...
    (ws / "sub").rename(ws / "sub-old")
    (ws / "sub").symlink_to(outside)  # ...then the directory becomes a symlink
    with pytest.raises(WorktreeEscape) as info:
        open_beneath("sub/planted", os.O_WRONLY | os.O_CREAT, str(ws))
    assert info.value.violation.resolved == str(outside / "planted")
    assert not (outside / "planted").exists()  # nothing was created outside


def test_open_beneath_refuses_dangling_links_and_loops(layout: tuple[Path, Path]) -> None:
    ws, outside = layout
    (ws / "dangling").symlink_to(outside / "new")
    with pytest.raises(WorktreeEscape):
        open_beneath("dangling", os.O_WRONLY | os.O_CREAT, str(ws))
    assert not (outside / "new").exists()
    (ws / "loop").symlink_to("loop")
    with pytest.raises(PermissionError):
        open_beneath("loop", os.O_RDONLY, str(ws))
    with pytest.raises(WorktreeEscape):
        open_beneath("../outside/secret", os.O_RDONLY, str(ws))


def test_last_component_is_opened_without_following(
    layout: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A symlink swapped in after the walk looked at the name is not followed (O_NOFOLLOW)."""
    ws, outside = layout
    (ws / "swapped").symlink_to(outside / "secret")
    # As if the symlink appeared after both the up-front check and the walk's look at it:
    monkeypatch.setattr(beneath, "check_path", lambda *args: None)
    monkeypatch.setattr(beneath, "_readlink_at", lambda name, dir_fd: None)
    with pytest.raises(OSError) as info:
        open_beneath("swapped", os.O_WRONLY, str(ws))
    assert info.value.errno == errno.ELOOP
    assert (outside / "secret").read_text() == "x"


def test_roots_follow_every_call_whatever_was_asked_before(layout: tuple[Path, Path]) -> None:
    """The allowed roots are remembered from call to call: alternating workspaces, and a list of
    extra directories changed in place, must still be seen."""
    ws, outside = layout
    secret, own = str(outside / "secret"), str(ws / "file")
    for _ in range(3):
        assert check(own, ws) is None and check(secret, ws) is not None
        assert check(secret, outside) is None and check(own, outside) is not None
    extra: list[str] = []
    assert check_worktree(TOOL, {"file_path": secret}, str(ws), extra) is not None
    extra.append(str(outside))
    assert check_worktree(TOOL, {"file_path": secret}, str(ws), extra) is None
    extra.clear()
    assert check_worktree(TOOL, {"file_path": secret}, str(ws), extra) is not None
