"""Built-in tools and the command line, found from outside: grep and glob give the same answer
on ripgrep and on the seam for an ignored path named explicitly and for binary files;
apply_patch's summary says how each path ends; ``fastgate`` usage errors go to stderr."""

from __future__ import annotations

import codecs
from pathlib import Path
from typing import Any

import pytest

from fastgate.builtin import find_ripgrep
from fastgate.cli.bench.runner import SCENARIOS
from fastgate.cli.main import main
from tests.builtin_kit import SEARCH_ROUTES, builtin_executor, call, search_fs, text


@pytest.fixture(params=SEARCH_ROUTES)
def route(request: pytest.FixtureRequest) -> str:
    if request.param == "ripgrep" and find_ripgrep() is None:
        pytest.skip("ripgrep is not installed (the 'builtin' extra brings it)")
    return str(request.param)


async def search(tmp_path: Path, route: str, tree: dict[str, bytes], tool: str, **args: Any) -> str:
    ex = builtin_executor(tmp_path, fs=search_fs(tmp_path, route, tree))
    result = await call(ex, tool, args)
    assert result.ok, result.content
    return text(result)


def listed(output: str) -> set[str]:
    """The paths of a files_with_matches or glob result (its count line left out)."""
    return {line for line in output.split("\n") if line and not line.startswith("Found ")}


# -- an ignored directory named as the search path ----------------------------------------------

IGNORED_TREE: dict[str, bytes] = {
    "build/a.txt": b"needle\n",
    "build/sub/b.txt": b"needle\n",
    "build/noise.log": b"needle\n",  # still ignored below the named path: *.log
    "src/c.txt": b"needle\n",
}

# Spellings that all ignore the directory build (and so, from the root, all under it).
BUILD_IGNORED = ["build/", "build", "/build", "/build/", "**/build", "b*ld/", "[b]uild", "bu?ld/"]


@pytest.mark.parametrize("ignore", BUILD_IGNORED)
@pytest.mark.parametrize("tool", ["grep", "glob"])
async def test_an_ignored_directory_named_as_path_is_searched_on_every_route(
    tmp_path: Path, route: str, ignore: str, tool: str
) -> None:
    tree = {**IGNORED_TREE, ".gitignore": f"{ignore}\n*.log\n".encode()}
    args: dict[str, Any] = {"pattern": "needle"} if tool == "grep" else {"pattern": "**/*"}
    from_root = listed(await search(tmp_path, route, tree, tool, **args))
    assert "build/a.txt" not in from_root and "build/sub/b.txt" not in from_root
    named = listed(await search(tmp_path, route, tree, tool, path="build", **args))
    assert named == {"build/a.txt", "build/sub/b.txt"}, named
    deeper = listed(await search(tmp_path, route, tree, tool, path="build/sub", **args))
    assert deeper == {"build/sub/b.txt"}, deeper


@pytest.mark.parametrize(
    ("ignore", "expected"),
    [
        ("sub/", {"build/sub/b.txt", "build/sub/deep/d.txt"}),  # the named dir itself ignored
        ("**/sub/", {"build/sub/b.txt", "build/sub/deep/d.txt"}),
        ("*.txt\n!b.txt", {"build/sub/b.txt"}),  # patterns on the files themselves
        ("*\n!*/\n!*.txt", {"build/sub/b.txt", "build/sub/deep/d.txt"}),  # all but dirs and .txt
        ("deep/", {"build/sub/b.txt"}),  # a directory below the named one stays ignored
    ],
)
async def test_patterns_still_apply_below_the_named_path_on_every_route(
    tmp_path: Path, route: str, ignore: str, expected: set[str]
) -> None:
    tree = {
        ".gitignore": ignore.encode() + b"\n",
        "build/sub/b.txt": b"needle\n",
        "build/sub/deep/d.txt": b"needle\n",
        "build/sub/e.md": b"no\n",
    }
    found = listed(await search(tmp_path, route, tree, "grep", pattern="needle", path="build/sub"))
    assert found == expected, found


# -- binary files: a NUL anywhere ---------------------------------------------------------------

MODES = ["files_with_matches", "content", "count"]


@pytest.mark.parametrize("offset", [70_000, 200_000, 1_000_000])
@pytest.mark.parametrize("mode", MODES)
async def test_a_nul_past_ripgreps_first_read_makes_a_file_binary_on_every_route(
    tmp_path: Path, route: str, offset: int, mode: str
) -> None:
    late = b"needle here\n" + b"x" * offset + b"\x00 needle again\n"
    tree = {"text.txt": b"needle\n", "late.bin": late, "sub/late.dat": late}
    out = await search(tmp_path, route, tree, "grep", pattern="needle", output_mode=mode)
    assert "late" not in out, out
    assert "text.txt" in out


@pytest.mark.parametrize(
    "data",
    [
        b"\x00needle\n",
        b"needle\x00\n",
        b"needle here\n" + b"y" * 100_000 + b"\x00",
        codecs.BOM_UTF8 + b"needle\n\x00",
        codecs.BOM_UTF32_LE + "needle\n".encode("utf-32-le"),
        codecs.BOM_UTF32_BE + "needle\n".encode("utf-32-be"),
        codecs.BOM_UTF16_LE + "needle\n\x00\n".encode("utf-16-le"),
    ],
)
@pytest.mark.parametrize("mode", MODES)
async def test_a_binary_file_named_as_path_is_not_searched_and_says_so_on_every_route(
    tmp_path: Path, route: str, data: bytes, mode: str
) -> None:
    out = await search(
        tmp_path,
        route,
        {"blob.bin": data},
        "grep",
        pattern="needle",
        path="blob.bin",
        output_mode=mode,
    )
    assert out == (
        "No matches for 'needle': blob.bin was not searched, as it is a binary file (it holds a "
        "NUL byte)."
    )


@pytest.mark.parametrize("bom", ["utf-16-le", "utf-16-be"])
@pytest.mark.parametrize("named", [False, True])
async def test_utf16_with_a_bom_is_searched_as_text_on_every_route(
    tmp_path: Path, route: str, bom: str, named: bool
) -> None:
    marks = {"utf-16-le": codecs.BOM_UTF16_LE, "utf-16-be": codecs.BOM_UTF16_BE}
    data = marks[bom] + "first\nthe needle \u00e9\nlast\n".encode(bom)
    where = {"path": "wide.txt"} if named else {}
    out = await search(
        tmp_path,
        route,
        {"wide.txt": data},
        "grep",
        pattern="needle",
        output_mode="content",
        **where,
    )
    assert out == "wide.txt:2:the needle \u00e9"


@pytest.mark.parametrize(
    ("data", "binary"),
    [
        (b"", False),
        (b"plain text\n", False),
        (b"\x00", True),
        (b"a" * 5_000_000 + b"\x00", True),
        (codecs.BOM_UTF16_LE + "x\n".encode("utf-16-le"), False),
        (codecs.BOM_UTF16_BE + "x\n".encode("utf-16-be"), False),
        (codecs.BOM_UTF16_LE + "a\x00".encode("utf-16-le"), True),
        (codecs.BOM_UTF16_LE + b"\x00a\x00", False),  # zero bytes, but no zero code unit
        (codecs.BOM_UTF32_LE + "x".encode("utf-32-le"), True),
        (codecs.BOM_UTF32_BE + "x".encode("utf-32-be"), True),
        (codecs.BOM_UTF8 + b"x\x00", True),
    ],
)
def test_the_binary_rule(data: bytes, binary: bool) -> None:
    from fastgate.builtin._search import holds_nul

    assert holds_nul(data) is binary


# -- apply_patch's summary: how each path ends ------------------------------------------------


def patch(*lines: str) -> str:
    return "\n".join(["*** Begin Patch", *lines, "*** End Patch"])


def contents(directory: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in directory.iterdir()}


async def apply(tmp_path: Path, *lines: str) -> str:
    result = await call(builtin_executor(tmp_path), "apply_patch", {"patch": patch(*lines)})
    assert result.ok, result.content
    return text(result)


async def test_deleting_b_then_moving_a_onto_it_reports_b_modified(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("from a\n")
    (tmp_path / "b").write_text("old b\n")
    out = await apply(
        tmp_path,
        "*** Delete File: b",
        "*** Update File: a",
        "*** Move to: b",
        "@@",
        "-from a",
        "+moved a",
    )
    assert out == "Success. Updated the following files:\nM b"
    assert not (tmp_path / "a").exists()
    assert (tmp_path / "b").read_text() == "moved a\n"


@pytest.mark.parametrize(
    ("hunks", "summary", "after"),
    [
        (  # deleted, then added again: the file is there, with new content
            ["*** Delete File: b", "*** Add File: b", "+new b"],
            ["M b"],
            {"a": "a1\n", "b": "new b\n"},
        ),
        (  # changed, then deleted: deleted
            ["*** Update File: a", "-a1", "+a2", "*** Delete File: a"],
            ["D a"],
            {"b": "b1\n"},
        ),
        (  # moved, then the destination deleted: the source is gone, nothing stands for it
            ["*** Update File: a", "*** Move to: c", "-a1", "+a2", "*** Delete File: c"],
            ["D a"],
            {"b": "b1\n"},
        ),
        (  # moved twice: named by where it ends
            [
                "*** Update File: a",
                "*** Move to: c",
                "-a1",
                "+a2",
                "*** Update File: c",
                "*** Move to: d",
                "-a2",
                "+a3",
            ],
            ["M d"],
            {"b": "b1\n", "d": "a3\n"},
        ),
        (  # moved, then its source added again: both stand
            ["*** Update File: a", "*** Move to: c", "-a1", "+a2", "*** Add File: a", "+fresh"],
            ["M a", "M c"],
            {"a": "fresh\n", "b": "b1\n", "c": "a2\n"},
        ),
        (  # moved, then changed at its destination: one line
            [
                "*** Update File: a",
                "*** Move to: c",
                "-a1",
                "+a2",
                "*** Update File: c",
                "-a2",
                "+a3",
            ],
            ["M c"],
            {"b": "b1\n", "c": "a3\n"},
        ),
    ],
)
async def test_the_summary_says_how_each_path_ends(
    tmp_path: Path, hunks: list[str], summary: list[str], after: dict[str, str]
) -> None:
    (tmp_path / "a").write_text("a1\n")
    (tmp_path / "b").write_text("b1\n")
    out = await apply(tmp_path, *hunks)
    assert out == "Success. Updated the following files:\n" + "\n".join(summary)
    assert contents(tmp_path) == after


async def test_a_patch_that_cancels_itself_out_says_no_file_changed(tmp_path: Path) -> None:
    out = await apply(tmp_path, "*** Add File: c", "+temp", "*** Delete File: c")
    assert out == "Success. No file was changed: the patch leaves every file as it was."
    assert contents(tmp_path) == {}


# -- the command line: usage errors on stderr -------------------------------------------------


@pytest.mark.parametrize(
    "names",
    [["nosuch"], [""], ["UNCONTENDED"], ["uncontended,contended"], ["uncontended", "nosuch"]],
)
def test_bench_refuses_an_unknown_scenario_on_stderr_naming_them_all(
    capsys: pytest.CaptureFixture[str], names: list[str]
) -> None:
    argv = ["bench"]
    for name in names:
        argv += ["--scenario", name]
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "invalid choice" in err
    for valid in SCENARIOS:
        assert valid in err, valid


@pytest.mark.parametrize(
    "unit", ["x", "pure:asyncio", "pure:asyncio:nosuch", "bogus:asyncio:uncontended", "a:b:c:d"]
)
def test_a_bad_unit_is_a_usage_error_not_a_traceback(
    capsys: pytest.CaptureFixture[str], unit: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["bench", "--unit", unit])
    assert exited.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and "argument --unit" in err and "Traceback" not in err


def test_no_command_prints_the_help_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("usage: fastgate") and "bench" in err and "call" in err
