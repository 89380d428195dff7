"""What a file tool reads or removes is what stage 5 checked (SPEC §16 "Files", §21;
RELIABILITY "Paths"): ``read`` reads the checked path and follows no symlink swapped in after the
check (an approval never covers more than the user saw); apply_patch's ``Delete File`` and a
move's source remove no symlink (the checks judged what it leads to); a path spelt as a directory
(``a.txt/``) is not a file; a huge ``limit`` is taken, not raised on; a socket is not a file."""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fastgate import ApprovalResponse, ErrorCode, ExecutionContext, PermissionConfig
from fastgate import PermissionMode as Mode
from fastgate.builtin import LocalFileSystem
from fastgate.builtin._common import read_file
from fastgate.builtin._fs import PathChanged
from tests.builtin_kit import builtin_executor, call, failure_code, text

SECRET = "OPENAI_API_KEY=sk-live-SECRET\n"
NOTES = "harmless notes\n"


def patch(*body: str) -> str:
    return "\n".join(("*** Begin Patch", *body, "*** End Patch"))


# -- read reads what was checked -----------------------------------------------------------


def _read_workspace(tmp_path: Path) -> tuple[Path, Path]:
    """ws/docs/notes.txt (harmless, reading it asks), and the secrets a swap could lead a read
    to: ws/.env, ws/private/notes.txt (both denied), outside/notes.txt."""
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    for directory in (ws / "docs", ws / "private", outside):
        directory.mkdir(parents=True)
    (ws / "docs" / "notes.txt").write_text(NOTES)
    (ws / ".env").write_text(SECRET)
    (ws / "private" / "notes.txt").write_text(SECRET)
    (outside / "notes.txt").write_text(SECRET)
    return ws, outside


def _relink(link: Path, target: str) -> None:
    if link.is_dir() and not link.is_symlink():
        shutil.rmtree(link)
    else:
        link.unlink()
    os.symlink(target, link)


READ_SWAPS: dict[str, tuple[Callable[[Path, Path], None], str]] = {
    "file to .env": (lambda ws, out: _relink(ws / "docs" / "notes.txt", "../.env"), "path_changed"),
    "file to outside": (
        lambda ws, out: _relink(ws / "docs" / "notes.txt", str(out / "notes.txt")),
        "outside_workspace",
    ),
    "directory inside": (lambda ws, out: _relink(ws / "docs", "private"), "path_changed"),
    "directory to outside": (lambda ws, out: _relink(ws / "docs", str(out)), "outside_workspace"),
}


@pytest.mark.parametrize("swap", list(READ_SWAPS))
async def test_an_approved_read_does_not_follow_a_link_swapped_in_while_the_user_decides(
    tmp_path: Path, swap: str
) -> None:
    ws, outside = _read_workspace(tmp_path)
    permissions = PermissionConfig(
        ask=("Read(./docs/**)",), deny=("Read(./.env)", "Read(./private/**)")
    )
    ex = builtin_executor(ws, mode=Mode.DEFAULT, permissions=permissions)
    do_swap, expected = READ_SWAPS[swap]
    asked: list[str] = []

    async def approver(request: Any) -> ApprovalResponse:
        asked.append(request.tool_name)
        do_swap(ws, outside)  # while the user decides
        return ApprovalResponse(True)

    result = await ex.execute(
        "read",
        {"file_path": "docs/notes.txt"},
        ExecutionContext(session_id="s1", approver=approver),
    )
    assert asked == ["read"]
    assert result.error is not None and result.error.code is ErrorCode.TOOL_FAILURE
    assert failure_code(result) == expected, text(result)
    assert "sk-live" not in text(result)


async def test_a_link_there_at_the_check_is_read_through(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("# agents\n")
    os.symlink("AGENTS.md", tmp_path / "CLAUDE.md")
    (tmp_path / "real-docs").mkdir()
    (tmp_path / "real-docs" / "guide.md").write_text("guide\n")
    os.symlink("real-docs", tmp_path / "docs")
    ex = builtin_executor(tmp_path)
    assert text(await call(ex, "read", {"file_path": "CLAUDE.md"})) == "     1\t# agents"
    assert text(await call(ex, "read", {"file_path": "docs/guide.md"})) == "     1\tguide"
    # read recorded the target: an edit through the link needs no second read
    edited = await call(
        ex, "edit", {"file_path": "CLAUDE.md", "old_string": "agents", "new_string": "Agents"}
    )
    assert edited.ok, edited.content
    assert (tmp_path / "AGENTS.md").read_text() == "# Agents\n"
    assert os.readlink(tmp_path / "CLAUDE.md") == "AGENTS.md"


async def test_the_file_tools_read_the_checked_path_following_no_symlink(tmp_path: Path) -> None:
    ws, _ = _read_workspace(tmp_path)
    fs = LocalFileSystem(str(ws))
    stat, data = await read_file(fs, str(ws / "docs" / "notes.txt"))
    assert data == NOTES.encode() and stat.size == len(NOTES)
    _relink(ws / "docs" / "notes.txt", "../.env")
    with pytest.raises(PathChanged):
        await read_file(fs, str(ws / "docs" / "notes.txt"))
    _relink(ws / "docs", "private")
    with pytest.raises(PathChanged):
        await read_file(fs, str(ws / "docs" / "notes.txt"))


class _SwapAfterCheck(LocalFileSystem):
    """Swaps ``link`` to ``target`` right after a writer's symlink check: the moment between
    the check and the writer's own read of the file."""

    def __init__(self, root: Path, link: Path, target: str) -> None:
        super().__init__(str(root))
        self.link, self.target = link, target
        self.armed = False

    async def refuse_symlinks(self, path: str) -> None:
        await super().refuse_symlinks(path)
        if self.armed:
            self.armed = False
            _relink(self.link, self.target)


async def test_edit_does_not_read_a_link_swapped_in_after_its_check(tmp_path: Path) -> None:
    ws, _ = _read_workspace(tmp_path)
    notes = ws / "docs" / "notes.txt"
    secret = "API_KEY=sk-live-9999\n"
    notes.write_text("API_KEY=harmless-00\n")  # the same size as the secret
    (ws / ".env").write_text(secret)
    fs = _SwapAfterCheck(ws, notes, "../.env")
    ex = builtin_executor(ws, fs=fs)
    assert (await call(ex, "read", {"file_path": "docs/notes.txt"})).ok
    mtime = notes.stat().st_mtime_ns
    os.utime(ws / ".env", ns=(mtime, mtime))  # and the same mtime: fresh by size and mtime
    fs.armed = True
    args = {"file_path": "docs/notes.txt", "old_string": "API_KEY=nothing", "new_string": "x"}
    result = await call(ex, "edit", args)
    assert failure_code(result) == "path_changed", text(result)
    assert "sk-live" not in text(result)  # the closest lines of .env are not shown
    assert (ws / ".env").read_text() == secret


# -- apply_patch removes no symlink --------------------------------------------------------


def _gone(path: Path) -> bool:
    """Nothing at ``path``, not even a dangling symlink."""
    return not os.path.lexists(path)


def _linked(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "docs").mkdir()
    (tmp_path / "src" / "main.py").write_text("print('the real code')\n")
    (tmp_path / "src" / "other.py").write_text("other\n")
    os.symlink("../src/main.py", tmp_path / "docs" / "example.py")
    return tmp_path


async def test_delete_file_of_a_symlink_and_a_move_from_one_change_nothing(
    tmp_path: Path,
) -> None:
    """The checks judged the file the link leads to, not the link: neither goes (the whole
    class, with the approvals and rules it escaped, is in test_builtin_patch_links)."""
    ws = _linked(tmp_path)
    os.symlink("../src/missing.py", ws / "docs" / "dangling.py")
    ex = builtin_executor(ws)
    move = (
        "*** Update File: docs/example.py",
        "*** Move to: docs/moved.py",
        "-print('the real code')",
        "+print('moved')",
    )
    for body in (
        ("*** Delete File: docs/example.py",),
        ("*** Delete File: docs/dangling.py",),
        move,
    ):
        result = await call(ex, "apply_patch", {"patch": patch(*body)})
        assert failure_code(result) == "symlink_not_removed", text(result)
    assert os.readlink(ws / "docs" / "example.py") == "../src/main.py"
    assert os.readlink(ws / "docs" / "dangling.py") == "../src/missing.py"
    assert _gone(ws / "docs" / "moved.py")
    assert (ws / "src" / "main.py").read_text() == "print('the real code')\n"
    assert sorted(os.listdir(ws / "src")) == ["main.py", "other.py"]


async def test_a_link_repointed_while_the_user_decides_is_not_deleted(tmp_path: Path) -> None:
    ws = _linked(tmp_path)
    ex = builtin_executor(ws, mode=Mode.DEFAULT)
    link = ws / "docs" / "example.py"

    async def approver(request: Any) -> ApprovalResponse:
        _relink(link, "../src/other.py")  # while the user decides
        return ApprovalResponse(True)

    result = await call(
        ex,
        "apply_patch",
        {"patch": patch("*** Delete File: docs/example.py")},
        approver=approver,
    )
    assert failure_code(result) == "path_changed", text(result)
    assert os.readlink(link) == "../src/other.py"
    assert sorted(os.listdir(ws / "src")) == ["main.py", "other.py"]


# -- bad arguments get a structured answer --------------------------------------------------


async def test_a_huge_limit_or_offset_is_taken_not_raised_on(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("one\ntwo\nthree\n")
    ex = builtin_executor(tmp_path)
    for limit in (10**30, 2**62, 2**63 - 1):
        result = await call(ex, "read", {"file_path": "a.txt", "limit": limit})
        assert text(result) == "     1\tone\n     2\ttwo\n     3\tthree", limit
    second = await call(ex, "read", {"file_path": "a.txt", "offset": 2, "limit": 10**30})
    assert text(second) == "     2\ttwo\n     3\tthree"
    past = await call(ex, "read", {"file_path": "a.txt", "offset": 10**30, "limit": 10**30})
    assert failure_code(past) == "offset_past_end"


TRAILING: list[tuple[str, dict[str, Any], str]] = [
    ("read", {"file_path": "a.txt/"}, "not_a_directory"),
    ("read", {"file_path": "a.txt/."}, "not_a_directory"),
    ("read", {"file_path": "missing/"}, "not_a_directory"),
    ("read", {"file_path": "d/"}, "is_a_directory"),
    ("write", {"file_path": "new/", "content": "x"}, "not_a_directory"),
    ("write", {"file_path": "a.txt/", "content": "x"}, "not_a_directory"),
    ("write", {"file_path": "d/new/.", "content": "x"}, "not_a_directory"),
    (
        "edit",
        {"file_path": "a.txt/", "old_string": "hello", "new_string": "bye"},
        "not_a_directory",
    ),
    ("apply_patch", {"patch": patch("*** Add File: new/", "+x")}, "not_a_directory"),
    ("apply_patch", {"patch": patch("*** Delete File: a.txt/")}, "not_a_directory"),
    (
        "apply_patch",
        {"patch": patch("*** Update File: a.txt/", "-hello", "+bye")},
        "not_a_directory",
    ),
]


@pytest.mark.parametrize(("tool", "args", "code"), TRAILING, ids=[str(t[1]) for t in TRAILING])
async def test_a_path_spelt_as_a_directory_is_not_a_file(
    tmp_path: Path, tool: str, args: dict[str, Any], code: str
) -> None:
    (tmp_path / "a.txt").write_text("hello\n")
    (tmp_path / "d").mkdir()
    ex = builtin_executor(tmp_path)
    assert (await call(ex, "read", {"file_path": "a.txt"})).ok  # the writers may change it
    result = await call(ex, tool, args)
    assert result.error is not None and result.error.code is ErrorCode.TOOL_FAILURE
    assert failure_code(result) == code, text(result)
    assert sorted(os.listdir(tmp_path)) == ["a.txt", "d"]
    assert os.listdir(tmp_path / "d") == []
    assert (tmp_path / "a.txt").read_text() == "hello\n"


async def test_a_socket_is_not_a_file(tmp_path: Path) -> None:
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(tmp_path / "sock"))
        ex = builtin_executor(tmp_path)
        result = await call(ex, "read", {"file_path": "sock"})
        assert failure_code(result) == "not_a_file", text(result)
        edit = {"file_path": "sock", "old_string": "a", "new_string": "b"}
        assert failure_code(await call(ex, "edit", edit)) == "not_a_file"
        fs = LocalFileSystem(str(tmp_path))
        with pytest.raises(OSError, match="not a regular file"):
            await fs.read_bytes(str(tmp_path / "sock"))
    finally:
        server.close()
