"""glob and grep on hostile input, on every route (ripgrep, and the search over the seam on disk
and in memory): glob patterns that make a backtracking matcher explode, names that hold a
newline, files too large to search, and regexes that cannot be an argument. Each gets a prompt,
precise answer, and nothing about a withheld file shows."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import pytest

from fastgate import PermissionConfig, PermissionMode
from fastgate.builtin import FileStat, LocalFileSystem, find_ripgrep
from fastgate.builtin._search import MAX_RG_LINE, MAX_SEARCH_BYTES, _Cut, _JsonLines, _rg_json
from fastgate.paths.globs import MAX_PATTERN_CHARS
from tests.builtin_kit import (
    builtin_executor,
    call,
    failure_code,
    search_fs,
    text,
)

LONG_NAME = "a" * 120  # ``*a*a*a*a*a*b`` backtracks C(120, 5) ways over it in Python's re


def make(tmp_path: Path, route: str, tree: dict[str, bytes], **options: Any) -> Any:
    fs = search_fs(tmp_path, route, tree)
    options.setdefault("mode", PermissionMode.YOLO)
    return builtin_executor(tmp_path, fs=fs, **options)


async def timed(call_: Awaitable[Any]) -> tuple[Any, float, float]:
    """The call's result, how long it took, and the longest the event loop went unserved
    meanwhile (a ticker that asks to run every 10 ms)."""
    loop = asyncio.get_running_loop()
    # From the start: a call that never yields (its body's task starts eagerly, and a search
    # through the memory seam never waits) kept the loop unserved for all of it.
    stamps: list[float] = [loop.time()]
    done = asyncio.Event()

    async def ticker() -> None:
        while not done.is_set():
            stamps.append(loop.time())
            await asyncio.sleep(0.01)

    task = asyncio.ensure_future(ticker())
    start = loop.time()
    try:
        result = await call_
    finally:
        done.set()
        await task
    stamps.append(loop.time())
    elapsed = loop.time() - start
    return result, elapsed, max(b - a for a, b in itertools.pairwise(stamps))


# -- glob patterns are matched in linear time, off the event loop --------------------------------


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("glob", {"pattern": "*a*a*a*a*a*b"}),
        ("glob", {"pattern": "**/*a*a*a*a*a*b"}),
        ("grep", {"pattern": "x", "glob": "*a*a*a*a*a*b"}),  # handed to ripgrep as well
        ("grep", {"pattern": "x", "glob": "*[a]*[a]*[a]*[a]*[a]*b"}),  # the filter alone
        ("grep", {"pattern": "x", "glob": "!*[a]*[a]*[a]*[a]*[a]*b"}),
    ],
)
async def test_a_backtracking_glob_neither_hangs_nor_stalls_the_loop(
    tmp_path: Path, route: str, tool: str, args: dict[str, Any]
) -> None:
    ex = make(tmp_path, route, {LONG_NAME: b"x\n", "sub/" + LONG_NAME: b"x\n"})
    result, elapsed, stall = await timed(call(ex, tool, args))
    assert result.ok, result.content
    assert elapsed < 3.0 and stall < 1.0, (elapsed, stall)
    if args.get("glob", "").startswith("!"):
        assert text(result).split("\n") == ["Found 2 files", "sub/" + LONG_NAME, LONG_NAME]
    else:
        assert text(result).startswith("No ")


async def test_a_pattern_of_unclosed_brackets_compiles_in_linear_time(
    tmp_path: Path, route: str
) -> None:
    ex = make(tmp_path, route, {"[[[": b"x\n", "a.txt": b"x\n"})
    pattern = "[" * MAX_PATTERN_CHARS  # each "[" scanned to the end: 8M steps before the fix
    result, elapsed, _ = await timed(call(ex, "glob", {"pattern": pattern}))
    assert result.ok and text(result).startswith("No files match") and elapsed < 3.0
    assert text(await call(ex, "glob", {"pattern": "[[["})) == "[[["
    filtered, elapsed, _ = await timed(call(ex, "grep", {"pattern": "x", "glob": pattern}))
    assert text(filtered) == "No matches for 'x'." and elapsed < 3.0
    filtered = await call(ex, "grep", {"pattern": "x", "glob": "[[[*"})
    assert text(filtered).split("\n") == ["Found 1 file", "[[["]


@pytest.mark.parametrize(
    ("tool", "key"), [("glob", "pattern"), ("grep", "glob")], ids=["glob", "grep-filter"]
)
async def test_an_overlong_glob_is_refused_with_the_reason(
    tmp_path: Path, route: str, tool: str, key: str
) -> None:
    ex = make(tmp_path, route, {"a.txt": b"x\n"})
    args = {"pattern": "x", key: "[" * (MAX_PATTERN_CHARS + 1)}
    result = await call(ex, tool, args)
    assert failure_code(result) == "invalid_pattern"
    assert f"at most {MAX_PATTERN_CHARS:,} are allowed" in text(result)
    too_wide = {"pattern": "x", key: "{a,b}" * 4 + "*[a-z]" * 200}
    result = await call(ex, tool, too_wide)
    assert failure_code(result) == "invalid_pattern" and "alternatives hold" in text(result)


# -- a name holding a newline is one name ------------------------------------------------------


# Read from the newline, "secret\n./ok.txt" (a directory "secret\n." holding ok.txt) is
# "./ok.txt": its content would show as the readable ok.txt's.
SECRETS = {
    "id_rsa\nx": b"SECRET=newline_key\n",  # on the sensitive list (id_rsa*)
    "a.pem\n": b"SECRET=pem_newline\n",  # on it too (*.pem*)
    "secret\n./ok.txt": b"SECRET=secret_dir\n",  # denied below
    "denied/x\n./ok.txt": b"SECRET=denied\n",  # denied below
    "sub/.env": b"SECRET=env\n",
    "ok.txt": b"SECRET=public\n",
    "two\nlines.txt": b"SECRET=shown\nsecond\n",
}


@pytest.mark.parametrize("mode", ["content", "count", "files_with_matches"])
async def test_names_with_newlines_are_withheld_or_shown_by_their_own_name(
    tmp_path: Path, route: str, mode: str
) -> None:
    ex = make(
        tmp_path,
        route,
        SECRETS,
        permissions=PermissionConfig(deny=("Read(./denied/**)", "Read(**/secret*)")),
    )
    out = text(await call(ex, "grep", {"pattern": "SECRET", "output_mode": mode}))
    for shown in (b"SECRET=public", b"SECRET=shown"):
        assert (shown.decode() in out) is (mode == "content")
    for hidden in ("newline_key", "pem_newline", "secret_dir", "=env", "denied"):
        assert hidden not in out, out
    withheld = (
        "(5 files were withheld: a deny rule or the sensitive-file list covers reading them.)"
    )
    two = json.dumps("two\nlines.txt")  # a name holding a newline is shown as JSON
    if mode == "content":
        assert out == "\n".join(["ok.txt:1:SECRET=public", "--", f"{two}:1:SECRET=shown", withheld])
    elif mode == "count":
        assert out == "\n".join(
            ["Found 2 matching lines in 2 files", "ok.txt:1", f"{two}:1", withheld]
        )
    else:
        assert out.split("\n")[0] == "Found 2 files" and out.endswith(withheld)
    context = await call(ex, "grep", {"pattern": "second", "output_mode": "content", "context": 1})
    assert text(context) == f"{two}-1-SECRET=shown\n{two}:2:second"


async def test_a_binary_files_warning_is_not_taken_for_a_name(tmp_path: Path) -> None:
    """ripgrep's standard output prints a warning line after a match in a file it then finds
    binary: read from the NUL to the next newline, it would make the next file's name."""
    if find_ripgrep() is None:
        pytest.skip("ripgrep is not installed")
    tree = {
        "a.bin": b"SECRET=early\n" + b"x" * 200_000 + b"\x00",
        "b/.env": b"SECRET=env\n",
        "c.txt": b"SECRET=public\n",
    }
    ex = make(tmp_path, "ripgrep", tree)
    out = text(await call(ex, "grep", {"pattern": "SECRET", "output_mode": "content"}))
    assert "SECRET=env" not in out and "WARNING" not in out
    assert out.split("\n")[-2:] == [
        "c.txt:1:SECRET=public",
        "(1 file was withheld: a deny rule or the sensitive-file list covers reading them.)",
    ]


# -- files too large to search --------------------------------------------------------------------


def _sparse(path: Path, size: int, tail: bytes = b"needle\n") -> None:
    with open(path, "wb") as f:
        f.truncate(size - len(tail))
        f.seek(size - len(tail))
        f.write(tail)


@pytest.mark.parametrize("disk_route", ["ripgrep", "seam-disk"])
async def test_a_huge_file_named_directly_is_not_read_and_the_result_says_so(
    tmp_path: Path, disk_route: str
) -> None:
    if disk_route == "ripgrep" and find_ripgrep() is None:
        pytest.skip("ripgrep is not installed")
    size = 4 * 1024**3  # sparse: reading it all takes ripgrep seconds
    _sparse(tmp_path / "big.img", size)
    ex = make(tmp_path, disk_route, {})
    for mode in ("files_with_matches", "content", "count"):
        args = {"pattern": "needle", "path": "big.img", "output_mode": mode}
        result, elapsed, _ = await timed(call(ex, "grep", args))
        assert elapsed < 3.0
        assert text(result) == (
            f"No matches for 'needle': big.img was not searched, as it is {size:,} bytes, over "
            f"the {MAX_SEARCH_BYTES >> 20} MiB grep searches in one file (bash can search it)."
        )


async def test_a_file_that_grew_after_its_size_was_checked_is_not_read(tmp_path: Path) -> None:
    """ripgrep is handed the open file; its size is checked on that descriptor too."""
    rg = find_ripgrep()
    if rg is None:
        pytest.skip("ripgrep is not installed")
    _sparse(tmp_path / "big.img", MAX_SEARCH_BYTES + 4096)

    class Understating(LocalFileSystem):
        async def stat(self, path: str) -> FileStat | None:
            st = await super().stat(path)
            return None if st is None else FileStat(1, st.mtime_ns, st.is_dir)

    ex = builtin_executor(tmp_path, fs=Understating(str(tmp_path), ripgrep=rg))
    out = text(await call(ex, "grep", {"pattern": "needle", "path": "big.img"}))
    assert "big.img was not searched" in out


async def test_files_over_the_bound_are_skipped_in_a_tree_on_every_route(
    tmp_path: Path, route: str
) -> None:
    big = b"x\n" * ((MAX_SEARCH_BYTES >> 1) + 1) + b"needle\n"  # text: no NUL ends it early
    ex = make(tmp_path, route, {"big.txt": big, "small.txt": b"needle\n"})
    assert text(await call(ex, "grep", {"pattern": "needle"})) == (
        "Found 1 file\nsmall.txt\n"
        f"(1 file was not searched, as it is over the {MAX_SEARCH_BYTES >> 20} MiB grep searches "
        "in one file (bash can search it): big.txt.)"
    )


@pytest.mark.parametrize("disk_route", ["ripgrep", "seam-disk"])
async def test_a_tree_search_names_the_files_it_skipped_for_their_size_bounded(
    tmp_path: Path, disk_route: str
) -> None:
    """Sparse files over the bound: the result says how many were skipped and names the first
    ten; one the glob filters out or a deny rule withholds is not mentioned."""
    if disk_route == "ripgrep" and find_ripgrep() is None:
        pytest.skip("ripgrep is not installed")
    ex = make(
        tmp_path,
        disk_route,
        {"small.txt": b"needle\n", ".gitignore": b"ignored/\n"},
        mode=PermissionMode.ACCEPT_EDITS,
        permissions=PermissionConfig(deny=("Read(./secrets/**)",)),
    )
    for i in range(12):
        _sparse(tmp_path / f"big{i:02}.txt", MAX_SEARCH_BYTES + 1)
    for rel in ("secrets/key.txt", "ignored/huge.txt", "data.bin"):
        (tmp_path / rel).parent.mkdir(exist_ok=True)
        _sparse(tmp_path / rel, MAX_SEARCH_BYTES + 1)
    _sparse(tmp_path / "edge.txt", MAX_SEARCH_BYTES)  # at the bound: searched (a binary file)
    bound = MAX_SEARCH_BYTES >> 20
    out, elapsed, _ = await timed(call(ex, "grep", {"pattern": "needle", "glob": "*.txt"}))
    assert elapsed < 5.0  # none of them is read
    assert text(out).split("\n") == [
        "Found 1 file",
        "small.txt",
        f"(12 files were not searched, as they are over the {bound} MiB grep searches in one "
        "file (bash can search them): big00.txt, big01.txt, big02.txt, big03.txt, big04.txt, "
        "big05.txt, big06.txt, big07.txt, big08.txt, big09.txt, and 2 more.)",
    ]
    one = text(await call(ex, "grep", {"pattern": "nothing", "glob": "*.bin"}))
    assert one == (
        "No matches for 'nothing'.\n"
        f"(1 file was not searched, as it is over the {bound} MiB grep searches in one file "
        "(bash can search it): data.bin.)"
    )


# -- a match on a huge line ----------------------------------------------------------------------


async def test_a_match_on_a_huge_single_line_is_shown_cut_on_every_route(
    tmp_path: Path, route: str
) -> None:
    """ripgrep's JSON carries a matching line whole (its ``--max-columns`` does not apply): a
    20 MB minified line is read as its head and line number, not kept, and the search goes on;
    the seam, which reads the file anyway, shows the same start and counts the rest."""
    huge = b"x" * 20_000_000 + b"needle" + b"y" * 1000
    tree = {"min.js": b"a\nb\n" + huge + b"\n", "plain.txt": b"needle\n"}
    ex = make(tmp_path, route, tree)
    out, _, _ = await timed(call(ex, "grep", {"pattern": "needle", "output_mode": "content"}))
    shown = text(out).split("\n")
    rest = (
        "[the rest of this line is not shown: it is too long]"
        if route == "ripgrep"
        else f"[{len(huge) - 500:,} more characters]"
    )
    assert shown == ["min.js:3:" + "x" * 500 + "… " + rest, "--", "plain.txt:1:needle"]


def test_ripgreps_json_lines_are_held_to_a_bound_while_read() -> None:
    """However long a line of the stream, ``_JsonLines`` keeps its first ``MAX_RG_LINE`` bytes
    and the line number it states (found across the reads' boundaries), never the rest; what
    looks like the key inside a string is not taken for it."""
    long_line = (
        b'{"type":"match","data":{"path":{"text":"./a,\\"line_number\\":9"},"lines":{"text":"'
        + b'\\",' * 8_000_000
        + b'needle\\n"},"line_number":41,"absolute_offset":0,"submatches":[]}}\n'
    )
    short = (
        b'{"type":"context","data":{"path":{"text":"./b"},"lines":{"text":"ok\\n"},'
        b'"line_number":2}}\n'
    )
    data = long_line + short
    at = long_line.index(b',"line_number":41')
    every_byte_at_the_key = [data[:at], *(data[i : i + 1] for i in range(at, at + 20))]
    for reads in (
        [data[i : i + (1 << 20)] for i in range(0, len(data), 1 << 20)],
        [data[i : i + 4099] for i in range(0, len(data), 4099)],
        [*every_byte_at_the_key, data[at + 20 :]],
    ):
        lines = _JsonLines()
        for read in reads:
            lines.feed(read)
            assert lines.kept <= MAX_RG_LINE + len(short)
        lines.finish()
        cut, kept = lines.lines
        assert isinstance(cut, _Cut) and len(cut.head) == MAX_RG_LINE and cut.number == 41
        assert kept == short.rstrip(b"\n")
        found = _rg_json(lines.lines, lambda raw: raw.decode())
        assert [(f.path, f.lines) for f in found] == [
            (
                './a,"line_number":9',
                [(41, True, '",' * 250 + "… [the rest of this line is not shown: it is too long]")],
            ),
            ("./b", [(2, False, "ok")]),
        ]


# -- a regex that cannot be an argument --------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        ("a\x00b", "NUL character"),
        ("\x00", "NUL character"),
        ("a\ud800", "lone surrogate"),
        ("\udcff", "lone surrogate"),
    ],
)
async def test_a_regex_that_cannot_be_an_argument_is_an_invalid_pattern(
    tmp_path: Path, route: str, pattern: str, reason: str
) -> None:
    ex = make(tmp_path, route, {"b.txt": b"needle\n"})
    for mode in ("files_with_matches", "content", "count"):
        result = await call(ex, "grep", {"pattern": pattern, "output_mode": mode})
        assert failure_code(result) == "invalid_pattern" and reason in text(result)
    assert text(await call(ex, "grep", {"pattern": "needle"})) == "Found 1 file\nb.txt"


@pytest.mark.parametrize(
    ("glob", "expected"),
    [
        ("{*.txt,\ud800}", ["Found 1 file", "a.txt"]),
        ("*.txt\ud800", ["No matches for 'needle'."]),
        ("!*.py\udcff", ["Found 2 files", "b.py", "a.txt"]),
        ("!{*.py,\udcff}", ["Found 1 file", "a.txt"]),
    ],
)
async def test_a_glob_filter_that_cannot_be_an_argument_still_filters(
    tmp_path: Path, route: str, glob: str, expected: list[str]
) -> None:
    ex = make(tmp_path, route, {"a.txt": b"needle\n", "b.py": b"needle\n"})
    for name, mtime in (("a.txt", 1), ("b.py", 2)):  # b.py the newer, as in memory
        if route != "seam-memory":
            os.utime(tmp_path / name, ns=(mtime * 10**18, mtime * 10**18))
    out = await call(ex, "grep", {"pattern": "needle", "glob": glob})
    assert text(out).split("\n") == expected
