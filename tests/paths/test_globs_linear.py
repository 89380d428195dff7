"""The glob translator on hostile patterns: translating is linear in the pattern, matching is
linear in the path (RE2, not Python's backtracking ``re``), and oversized patterns are refused
with the reason. RE2 and ``re`` read every regex the translator writes alike (the sandbox's
planner still compiles them with ``re``)."""

from __future__ import annotations

import re
import time
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastgate.paths import GlobError, compile_glob, compile_path_pattern, globs
from fastgate.paths.globs import MAX_EXPANDED_CHARS, MAX_PATTERN_CHARS

pytest.importorskip("re2")


@pytest.mark.parametrize(
    ("pattern", "path"),
    [
        ("*a" * 5 + "*b", "a" * 120),  # C(120, 5) ways to fail in re: 11 s
        ("**/" + "*a" * 5 + "*b", "x/" + "a" * 120),
        ("*[a]" * 5 + "*b", "a" * 120),
        ("*[!b]" * 5 + "*b", "a" * 120),
        ("{x,*a*a*a*a*a*b}", "a" * 120),
    ],
)
def test_matching_is_linear_in_the_path(pattern: str, path: str) -> None:
    for glob in (compile_glob(pattern), compile_glob(pattern, names_anywhere=True, below=True)):
        start = time.perf_counter()
        assert not glob.matches(path)
        assert time.perf_counter() - start < 1.0


def _scanned(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The characters ``_char_class`` looks at, summed over its calls."""
    work = [0]
    scan = globs._char_class

    def counting(segment: str, start: int) -> tuple[int, str | None]:
        end, cls = scan(segment, start)
        work[0] += (end if cls is not None else len(segment)) - start
        return end, cls

    monkeypatch.setattr(globs, "_char_class", counting)
    return work


@pytest.mark.parametrize(
    "pattern",
    [
        "[" * 4000,  # every "[" unclosed: each scanned to the end before
        "[!]" + "[" * 4000,
        "[" * 4000 + "]",
        "[a" * 2000,
        "\\]" + "[" * 4000,
        "[" * 2000 + "\\]" * 1000,
        "[]" * 2000,
    ],
)
def test_translating_unclosed_classes_is_linear(
    monkeypatch: pytest.MonkeyPatch, pattern: str
) -> None:
    work = _scanned(monkeypatch)
    compile_glob(pattern)
    compile_path_pattern(pattern)
    assert work[0] <= 4 * len(pattern)


def _regex_or_error(translate: Any, segment: str) -> str:
    try:
        return str(translate(segment))
    except GlobError as exc:
        return f"error: {exc}"


@settings(max_examples=1500, deadline=None)
@given(st.text(alphabet="[]\\!^-a*", max_size=14))
def test_the_shortcut_translates_as_scanning_every_class_would(segment: str) -> None:
    shortcut = _regex_or_error(globs.segment_regex, segment)
    # without the shortcut: every "[" is scanned for its "]", as before
    with mock.patch.object(globs, "_last_unescaped_close", len):
        scanned = _regex_or_error(globs.segment_regex, segment)
    assert shortcut == scanned


PATTERN_PIECES = ["a", "b", "*", "?", "**", "[ab]", "[!a]", "[+-0]", "[*-0]", "\\*", ".", "é"]
PATH_PIECES = ["a", "b", "ab", "+", ",", "0", ".", "*", "a b", "é", "É", "\udcff", "\n"]


@settings(max_examples=800, deadline=None)
@given(
    st.lists(st.sampled_from(PATTERN_PIECES), min_size=1, max_size=5).map("".join),
    st.lists(st.sampled_from([*PATH_PIECES, "/"]), min_size=1, max_size=6).map("".join),
    st.booleans(),
    st.booleans(),
)
def test_re2_and_re_read_the_translation_alike(
    pattern: str, path: str, anywhere: bool, fold: bool
) -> None:
    try:
        glob = compile_glob(pattern, names_anywhere=anywhere, fold=fold)
    except GlobError:
        return
    flags = re.DOTALL | re.IGNORECASE if fold else re.DOTALL
    assert glob.matches(path) is (re.fullmatch(glob.pattern, path, flags) is not None)


def test_names_that_are_not_utf8_on_disk_match_as_characters() -> None:
    name = b"caf\xe9.txt".decode("utf-8", "surrogateescape")  # Latin-1 on disk
    assert compile_glob("*.txt").matches(name) and compile_glob("caf?.txt").matches(name)
    assert compile_glob("caf[!a].txt").matches(name) and not compile_glob("caf.txt").matches(name)
    assert compile_glob(name).matches(name) and compile_glob("**/*", below=True).matches(name)


def test_an_oversized_pattern_is_refused_with_the_reason() -> None:
    compile_glob("a" * MAX_PATTERN_CHARS)
    with pytest.raises(GlobError, match=f"at most {MAX_PATTERN_CHARS:,} are allowed"):
        compile_glob("a" * (MAX_PATTERN_CHARS + 1))
    # braces multiply a pattern: 16 alternatives of 1,030 characters
    with pytest.raises(GlobError, match=f"more than {MAX_EXPANDED_CHARS:,} characters"):
        compile_glob("{a,b}" * 4 + "x" * 1026)
    compile_glob("{a,b}" * 4 + "x" * 1000)
