"""One glob grammar for permission rules and the search tools, through the executor: a
``Read(pattern)`` rule denies exactly the files ``grep``'s ``glob=pattern`` keeps and
``glob`` lists (with ``**/`` for a pattern without ``/``), on every route (ripgrep, and the
search over the seam on disk and in memory). A class never matches ``/``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fastgate import ErrorCode, PermissionConfig
from tests.builtin_kit import builtin_executor, call, failure_code, search_fs, text

FILES = (
    "a+b",
    "a,b",
    "a0b",
    "a/b",
    "x/a/b",
    "x/a.b",
    "x/a-b",
    "ayb",
    "axb",
    "]x",
    "bx.py",
    "a.py",
    "src/a.py",
    "src/deep/c.py",
    "lib/src/a.py",
    "web/node_modules/m.js",
    "web/app.js",
)
# (pattern, the files it matches): no pattern here matches a directory holding other files,
# where a rule would also cover what is below it.
CASES = [
    ("a[+-0]b", {"a+b", "a,b", "a0b", "x/a.b", "x/a-b"}),
    ("a[*-0]b", {"a+b", "a,b", "a0b", "x/a.b", "x/a-b"}),
    ("a[!x]b", {"a+b", "a,b", "a0b", "x/a.b", "x/a-b", "ayb"}),
    ("a[^x]b", {"a+b", "a,b", "a0b", "x/a.b", "x/a-b", "ayb"}),
    ("x/a[+-0]b", {"x/a.b", "x/a-b"}),
    ("x/a[!.]b", {"x/a-b"}),
    ("a?b", {"a+b", "a,b", "a0b", "x/a.b", "x/a-b", "ayb", "axb"}),
    ("[]]x", {"]x"}),
    ("[a-c]x.py", {"bx.py"}),
    ("*.py", {"bx.py", "a.py", "src/a.py", "src/deep/c.py", "lib/src/a.py"}),
    ("src/*.py", {"src/a.py"}),
    ("src/**/*.py", {"src/a.py", "src/deep/c.py"}),
    ("/a.py", {"a.py"}),
    ("./src//a.py", {"src/a.py"}),
]


def _fs(tmp_path: Path, route: str) -> Any:
    return search_fs(tmp_path, route, dict.fromkeys(FILES, b"hi\n"))


def _listed(result: Any) -> set[str]:
    assert result.ok, result.content
    out = text(result).split("\n")
    if out[0].startswith(("No files match", "No matches")):
        return set()
    return {line for line in out if not line.startswith("Found ")}


async def test_rules_grep_and_glob_read_a_pattern_alike(tmp_path: Path, route: str) -> None:
    fs = _fs(tmp_path, route)
    searcher = builtin_executor(tmp_path, fs=fs)
    for pattern, expected in CASES:
        found = _listed(await call(searcher, "grep", {"pattern": "hi", "glob": pattern}))
        assert found == expected, ("grep", pattern)
        if not pattern.startswith("/"):  # the glob tool reads "/x" as an absolute path
            anchored = "/" in pattern.rstrip("/")
            glob_pattern = pattern if anchored else f"**/{pattern}"
            listed = _listed(await call(searcher, "glob", {"pattern": glob_pattern}))
            assert listed == expected, ("glob", pattern)
        reader = builtin_executor(
            tmp_path, fs=fs, permissions=PermissionConfig(deny=(f"Read({pattern})",))
        )
        denied = set()
        for path in FILES:
            result = await call(reader, "read", {"file_path": path})
            if result.error is not None and result.error.code == ErrorCode.PERMISSION_DENIED:
                denied.add(path)
            else:
                assert result.ok, (pattern, path, result.content)
        assert denied == expected, ("rule", pattern)


async def test_grep_excludes_with_a_leading_bang(tmp_path: Path, route: str) -> None:
    ex = builtin_executor(tmp_path, fs=_fs(tmp_path, route))
    everything = set(FILES)
    for pattern, gone in (
        ("!*.py", {"bx.py", "a.py", "src/a.py", "src/deep/c.py", "lib/src/a.py"}),
        ("!node_modules", {"web/node_modules/m.js"}),  # a directory: what is below it too
        ("!src", {"src/a.py", "src/deep/c.py", "lib/src/a.py"}),
        ("!/src", {"src/a.py", "src/deep/c.py"}),
        ("!a[+-0]b", {"a+b", "a,b", "a0b", "x/a.b", "x/a-b"}),  # "a/b" and "x/a/b" stay
    ):
        found = _listed(await call(ex, "grep", {"pattern": "hi", "glob": pattern}))
        assert found == everything - gone, pattern


@pytest.mark.parametrize("pattern", ["a[z-a]b", "!", "../x", "x/[9-0]"])
async def test_a_malformed_glob_is_an_invalid_pattern(
    tmp_path: Path, route: str, pattern: str
) -> None:
    ex = builtin_executor(tmp_path, fs=_fs(tmp_path, route))
    assert (
        failure_code(await call(ex, "grep", {"pattern": "hi", "glob": pattern}))
        == "invalid_pattern"
    )
    if pattern != "!":
        assert failure_code(await call(ex, "glob", {"pattern": pattern})) == "invalid_pattern"


async def test_a_rule_with_a_reversed_range_is_no_path_rule(tmp_path: Path) -> None:
    fs = _fs(tmp_path, "seam-disk")
    ex = builtin_executor(tmp_path, fs=fs, permissions=PermissionConfig(deny=("Read(a[z-a]b)",)))
    result = await call(ex, "read", {"file_path": "a+b"})
    assert result.ok, result.content  # decided, not crashed at matching time
