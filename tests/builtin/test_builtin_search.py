"""glob and grep on both routes: ripgrep on the disk, and the same search over the seam (the
disk without ripgrep, and an in-memory file system). Results a read rule or the sensitive list
covers are withheld and counted (SPEC §16)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
from pathlib import Path
from typing import Any

import pytest

from fastgate import ErrorCode, PermissionConfig, PermissionMode
from fastgate.builtin import LocalFileSystem, find_ripgrep
from tests.builtin_kit import (
    SEARCH_ROUTES,
    MemoryFileSystem,
    builtin_executor,
    call,
    failure_code,
    search_fs,
    text,
)

TREE: dict[str, bytes] = {
    "src/app.py": b"import os\ndef handler():\n    return 'needle'\n",
    "src/util.py": b"# needle in a comment\nx = 1\n",
    "src/deep/mod.py": b"NEEDLE = 2\nneedle()\n",
    "docs/readme.md": b"the needle is here\n",
    "secrets/key.txt": b"needle secret\n",
    ".env": b"TOKEN=needle\n",
    "build/out.log": b"needle in a build log\n",
    ".gitignore": b"build/\n*.tmp\n",
    "scratch.tmp": b"needle tmp\n",
    "bin/blob": b"needle\x00\x01binary",
    ".hidden/conf.py": b"needle = 'hidden file'\n",
}


def make(tmp_path: Path, route: str, tree: dict[str, bytes] = TREE, **options: Any) -> Any:
    """An executor whose file system holds ``tree`` under ``tmp_path``, on the given route."""
    root = str(tmp_path)
    fs = search_fs(tmp_path, route, tree)
    # Distinct mtimes, oldest first in tree order: "newest first" is then checkable.
    for i, rel in enumerate(tree):
        stamp = 1_700_000_000_000_000_000 + i * 1_000_000_000
        if isinstance(fs, MemoryFileSystem):
            fs.mtimes[f"{root}/{rel}"] = stamp
        else:
            os.utime(tmp_path / rel, ns=(stamp, stamp))
    options.setdefault("permissions", PermissionConfig(deny=("Read(./secrets/**)",)))
    return builtin_executor(tmp_path, fs=fs, **options)


def lines(result: Any) -> list[str]:
    assert result.ok, result.content
    return text(result).split("\n")


async def test_glob_lists_newest_first_and_withholds(tmp_path: Path, route: str) -> None:
    ex = make(tmp_path, route)
    out = lines(await call(ex, "glob", {"pattern": "**/*.py"}))
    assert out == [".hidden/conf.py", "src/deep/mod.py", "src/util.py", "src/app.py"]
    everything = lines(await call(ex, "glob", {"pattern": "**/*"}))
    assert "build/out.log" not in everything and "scratch.tmp" not in everything  # gitignored
    assert ".env" not in everything and "secrets/key.txt" not in everything
    assert (
        everything[-1] == "(2 files were withheld: a deny rule or the sensitive-file list "
        "covers reading them.)"
    )
    top = lines(await call(ex, "glob", {"pattern": "*.md", "path": "docs"}))
    assert top == ["docs/readme.md"]  # relative to the workspace, pattern to the path
    assert lines(await call(ex, "glob", {"pattern": "*.py"}))[0].startswith("No files match")


async def test_glob_caps_at_100_and_says_so(tmp_path: Path, route: str) -> None:
    tree = {f"f{i:03}.txt": b"x" for i in range(130)}
    out = lines(await call(make(tmp_path, route, tree), "glob", {"pattern": "*.txt"}))
    assert len(out) == 101 and out[0] == "f129.txt" and out[99] == "f030.txt"
    assert "Showing the 100 newest of 130" in out[100]


async def test_grep_files_content_and_count(tmp_path: Path, route: str) -> None:
    ex = make(tmp_path, route)
    files = lines(await call(ex, "grep", {"pattern": "needle"}))
    assert files[0] == "Found 5 files"
    assert files[1:6] == [
        ".hidden/conf.py",
        "docs/readme.md",
        "src/deep/mod.py",
        "src/util.py",
        "src/app.py",
    ]
    assert "2 files were withheld" in files[6]
    content = lines(
        await call(ex, "grep", {"pattern": "needle", "output_mode": "content", "path": "src"})
    )
    assert content == [
        "src/app.py:3:    return 'needle'",
        "--",
        "src/deep/mod.py:2:needle()",
        "--",
        "src/util.py:1:# needle in a comment",
    ]
    context = lines(
        await call(
            ex,
            "grep",
            {"pattern": "handler", "output_mode": "content", "context": 1, "path": "src"},
        )
    )
    assert context == [
        "src/app.py-1-import os",
        "src/app.py:2:def handler():",
        "src/app.py-3-    return 'needle'",
    ]
    counted = lines(
        await call(
            ex,
            "grep",
            {"pattern": "NEEDLE", "case_insensitive": True, "output_mode": "count", "glob": "*.py"},
        )
    )
    assert counted == [
        "Found 5 matching lines in 4 files",
        ".hidden/conf.py:1",
        "src/app.py:1",
        "src/deep/mod.py:2",
        "src/util.py:1",
    ]


async def test_grep_clips_long_lines_and_bounds_output(tmp_path: Path, route: str) -> None:
    tree = {"min.js": b"var a=1;" * 5000 + b"needle" + b"\n", "many.txt": b"needle\n" * 3000}
    ex = make(tmp_path, route, tree)
    clipped = lines(
        await call(ex, "grep", {"pattern": "needle", "output_mode": "content", "path": "min.js"})
    )
    assert len(clipped[0]) < 700 and "more characters]" in clipped[0]
    many = lines(
        await call(ex, "grep", {"pattern": "needle", "output_mode": "content", "path": "many.txt"})
    )
    assert len(many) == 101 and "2,900 more lines not shown" in many[-1]
    unlimited = text(
        await call(
            ex,
            "grep",
            {"pattern": "needle", "output_mode": "content", "path": "many.txt", "head_limit": 0},
        )
    )
    assert len(unlimited) <= 41_000 and "not shown" in unlimited


async def test_read_deny_rules_deny_searching_there(tmp_path: Path, route: str) -> None:
    ex = make(tmp_path, route)
    for name, args in (
        ("grep", {"pattern": "needle", "path": "secrets"}),
        ("glob", {"pattern": "*", "path": "secrets"}),
        ("read", {"file_path": "secrets/key.txt"}),
    ):
        result = await call(ex, name, args)
        assert result.error is not None and result.error.code == ErrorCode.PERMISSION_DENIED, name


async def test_searches_never_follow_symlinks_out(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "leak.txt").write_text("needle outside\n")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "in.txt").write_text("needle inside\n")
    os.symlink(outside, ws / "door")
    os.symlink(outside / "leak.txt", ws / "leak.txt")
    for rg in (find_ripgrep(), None):
        ex = builtin_executor(ws, fs=LocalFileSystem(str(ws), ripgrep=rg))
        assert lines(await call(ex, "grep", {"pattern": "needle"})) == ["Found 1 file", "in.txt"]
        assert lines(await call(ex, "glob", {"pattern": "**/*"})) == ["in.txt"]


async def test_a_bad_regex_is_a_precise_failure(tmp_path: Path, route: str) -> None:
    result = await call(make(tmp_path, route), "grep", {"pattern": "a(b"})
    assert failure_code(result) == "invalid_pattern" and "regex parse error" in text(result)


async def test_a_catastrophic_pattern_returns(tmp_path: Path, route: str) -> None:
    # (a+)+b backtracks exponentially in Python's re; ripgrep and RE2 are linear.
    tree = {"a.txt": b"a" * 5000 + b"\n"}
    result = await call(make(tmp_path, route, tree), "grep", {"pattern": "(a+)+b"})
    assert result.ok and text(result) == "No matches for '(a+)+b'."


async def test_yolo_withholds_sensitive_files_still(tmp_path: Path, route: str) -> None:
    ex = make(tmp_path, route, mode=PermissionMode.YOLO, permissions=PermissionConfig())
    out = lines(await call(ex, "grep", {"pattern": "TOKEN"}))
    assert out == [
        "No matches for 'TOKEN'.",
        "(1 file was withheld: a deny rule or the sensitive-file list covers reading them.)",
    ]


def test_routes_cover_both_searches() -> None:
    """The fallback is the same search: no route is skipped here when ripgrep is present."""
    assert set(SEARCH_ROUTES) == {"ripgrep", "seam-disk", "seam-memory"}
    if os.environ.get("CI"):
        assert find_ripgrep() is not None, "CI installs the ripgrep wheel (the test extra)"


class _ReadSpy(LocalFileSystem):
    """The disk, recording every path the seam route reads."""

    def __init__(self, root: str, ripgrep: str | None) -> None:
        super().__init__(root, ripgrep=ripgrep)
        self.read: list[str] = []

    async def read_bytes(self, path: str) -> bytes:
        self.read.append(path)
        return await super().read_bytes(path)


@pytest.mark.parametrize("disk_route", ["ripgrep", "seam-disk"])
async def test_fifos_and_sockets_in_a_searched_tree_are_skipped_unopened(
    tmp_path: Path, disk_route: str
) -> None:
    rg = find_ripgrep() if disk_route == "ripgrep" else None
    if disk_route == "ripgrep" and rg is None:
        pytest.skip("ripgrep is not installed (the 'builtin' extra brings it)")
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.txt").write_text("needle\n")
    (tmp_path / "sub" / "b.txt").write_text("a needle\n")
    # A FIFO with a writer (this test) and bytes waiting: a reader would get them, then wait for
    # more forever. One without a writer: a blocking open of it never returns.
    os.mkfifo(tmp_path / "pipe")
    held = os.open(tmp_path / "pipe", os.O_RDWR | os.O_NONBLOCK)
    os.mkfifo(tmp_path / "sub" / "idle")
    listening = socket.socket(socket.AF_UNIX)
    try:
        waiting = b"needle in a pipe\n"
        os.write(held, waiting)
        listening.bind(str(tmp_path / "sock"))
        listening.listen()
        fs = _ReadSpy(str(tmp_path), rg)
        ex = builtin_executor(tmp_path, fs=fs)
        searches: list[tuple[str, dict[str, Any], list[str]]] = [
            ("grep", {"pattern": "needle"}, ["Found 2 files", "a.txt", "sub/b.txt"]),
            ("grep", {"pattern": "needle", "glob": "*"}, ["Found 2 files", "a.txt", "sub/b.txt"]),
            (
                "grep",
                {"pattern": "needle", "output_mode": "content"},
                ["--", "a.txt:1:needle", "sub/b.txt:1:a needle"],
            ),
            (
                "grep",
                {"pattern": "needle", "output_mode": "count"},
                ["Found 2 matching lines in 2 files", "a.txt:1", "sub/b.txt:1"],
            ),
            ("glob", {"pattern": "**/*"}, ["a.txt", "sub/b.txt"]),
            ("glob", {"pattern": "*", "path": "sub"}, ["sub/b.txt"]),
        ]
        for name, args, expected in searches:
            # A generous bound: a search that opened a FIFO would never return.
            result = await asyncio.wait_for(call(ex, name, args), 60)
            assert sorted(lines(result)) == sorted(expected), (name, args)
        assert all(os.path.basename(p) in ("a.txt", "b.txt") for p in fs.read), fs.read
        assert os.read(held, 1024) == waiting  # nothing read from the FIFO
    finally:
        os.close(held)
        listening.close()


FORGED = {
    "ok.py": b"print('needle')\n",
    "x\nsrc/app.py:1:needle = 'forged'": b"needle\n",
    "tab\there.py": b"needle\n",
    "cr\rhere.py": b"needle\n",
}


@pytest.mark.parametrize("mode", ["files_with_matches", "content", "count"])
async def test_a_name_holding_control_characters_cannot_forge_rows(
    tmp_path: Path, route: str, mode: str
) -> None:
    ex = make(tmp_path, route, FORGED)
    out = lines(await call(ex, "grep", {"pattern": "needle", "output_mode": mode}))
    assert not any(line.startswith("src/app.py") for line in out), out
    for name in FORGED:
        if name != "ok.py":
            assert any(line.startswith(json.dumps(name)) for line in out), (name, out)
    listed = lines(await call(ex, "glob", {"pattern": "**/*"}))
    assert not any(line.startswith("src/app.py") for line in listed), listed
    assert json.dumps("x\nsrc/app.py:1:needle = 'forged'") in listed


@pytest.mark.parametrize("pattern", ["needle\nthread", "a\n", "\n"])
async def test_a_pattern_holding_a_line_break_is_invalid_on_every_route(
    tmp_path: Path, route: str, pattern: str
) -> None:
    result = await call(make(tmp_path, route), "grep", {"pattern": pattern})
    assert failure_code(result) == "invalid_pattern", result.content


@pytest.mark.parametrize("offset", [9_000, 30_000])
async def test_a_nul_past_the_first_block_makes_a_file_binary_on_every_route(
    tmp_path: Path, route: str, offset: int
) -> None:
    late = b"needle here\n" + b"x" * offset + b"\x00 needle again\n"
    ex = make(tmp_path, route, {"text.txt": b"needle\n", "late.bin": late})
    out = lines(await call(ex, "grep", {"pattern": "needle"}))
    assert out == ["Found 1 file", "text.txt"], out
