"""The one glob translator (``fastgate.paths.globs``): permission rules' path patterns and the
``glob`` and ``grep`` built-ins read every pattern alike. It agrees with git's wildmatch (as
implemented by ``pathspec``), with one deliberate difference in rules: ``x/**`` also matches
``x`` itself, so a sensitive directory copied whole (``cp -r ~/.ssh``) is caught. A class never
matches ``/``, not even through a range that spans it (``[+-0]`` is 0x2B-0x30)."""

from __future__ import annotations

import re
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastgate.paths import GlobError, compile_glob, compile_path_pattern, plain_globs
from fastgate.paths.globs import MAX_ALTERNATIVES

pathspec = pytest.importorskip("pathspec")

PATTERN_SEGMENTS = ["a", "b", "*", "?", "**", "[ab]", "[!a]", "a*", ".x", "*b", "[a-b]", "\\*"]
PATH_SEGMENTS = ["a", "b", "ab", ".x", "ba", "bb", "*", "a b"]


def rule(pattern: str, path: str, fold: bool = False) -> bool:
    """A rule's pattern on ``path`` relative to the workspace root, ``/`` (a root of its own
    name could match a pattern itself, and then everything below it)."""
    regex = compile_path_pattern(pattern).regex("/")
    flags = re.DOTALL | re.IGNORECASE if fold else re.DOTALL
    return re.fullmatch(regex, f"/{path}", flags) is not None


def grep_filter(pattern: str, path: str, fold: bool = False) -> bool:
    """``grep``'s ``glob`` filter on ``path`` relative to the search root."""
    return compile_glob(pattern, names_anywhere=True, fold=fold).matches(path)


def glob_tool(pattern: str, path: str) -> bool:
    """The ``glob`` tool's pattern, anchored at the search root."""
    return compile_glob(pattern).matches(path)


def git(pattern: str, path: str) -> bool:
    # "gitwildmatch": a pattern matching a directory matches everything below it, like rules
    # (pathspec 1.x deprecates the name in favour of styles that match files only).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        spec = pathspec.PathSpec.from_lines("gitwildmatch", [pattern])
    return bool(spec.match_file(path))


@settings(max_examples=800, deadline=None)
@given(
    st.lists(st.sampled_from(PATTERN_SEGMENTS), min_size=1, max_size=4).map("/".join),
    st.lists(st.sampled_from(PATH_SEGMENTS), min_size=1, max_size=4).map("/".join),
)
def test_rule_patterns_agree_with_git_wildmatch(pattern: str, path: str) -> None:
    expected = git(pattern, path)
    if not expected and pattern.endswith("/**") and git(pattern, path + "/z"):
        expected = True  # the deliberate difference: ``x/**`` matches ``x``
    assert rule(pattern, path) is expected


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        ("**/.ssh/**", "home/u/.ssh", True),
        ("**/.ssh/**", "home/u/.ssh/id_rsa", True),
        ("**/.ssh/**", "home/u/.sshx", False),
        ("*/x", "x", False),
        ("*/x", "a/x", True),
        ("a/**/**", "a/b/c", True),
    ],
)
def test_rule_examples(pattern: str, path: str, matches: bool) -> None:
    assert rule(pattern, path) is matches


# (pattern, path, matches): the same answer from a rule and from grep's filter; from the glob
# tool too when the pattern holds a "/" (anchored in all three).
SHARED = [
    # a class never matches "/": a range spanning it, a negated class, either negation
    ("a[+-0]b", "a/b", False),
    ("a[+-0]b", "x/a/b", False),
    ("a[+-0]b", "a+b", True),
    ("a[+-0]b", "a,b", True),
    ("a[+-0]b", "a0b", True),
    ("a[+-0]b", "x/a.b", True),
    ("a[*-0]b", "a/b", False),
    ("a[%-/]b", "a/b", False),
    ("a[%-/]b", "a.b", False),  # as POSIX: a class cannot hold "/", so "[" is literal here
    ("a[%-/]b", "a[%-/]b", True),
    ("a[!x]b", "a/b", False),
    ("a[!x]b", "ayb", True),
    ("a[^x]b", "a/b", False),
    ("a[^x]b", "axb", False),
    ("a[\\/]b", "a/b", False),
    ("x/a[+-0]b", "x/a/b", False),
    ("x/a[+-0]b", "x/a-b", True),
    ("x/a[!c]b", "x/a/b", False),
    # the rest of the grammar
    ("a?b", "a/b", False),
    ("a*b", "a/b", False),
    ("a*b", "azzb", True),
    ("*.py", "src/deep/a.py", True),
    ("src/*.py", "src/deep/a.py", False),
    ("src/*.py", "src/a.py", True),
    ("src/**/*.py", "src/a.py", True),
    ("src/**/*.py", "src/x/y/a.py", True),
    ("src/**/*.py", "lib/src/a.py", False),
    ("**/*.py", "a.py", True),
    ("[a-c]x.py", "bx.py", True),
    ("[a-c]x.py", "dx.py", False),
    ("[]]x", "]x", True),
    ("[!]]x", "ax", True),
    ("[!]]x", "]x", False),
    ("a[-]b", "a-b", True),
    ("a[b-]c", "a-c", True),
    ("a[\\]]b", "a]b", True),
    ("\\*.py", "*.py", True),
    ("\\*.py", "a.py", False),
    ("a[b", "a[b", True),  # a class never closed is a literal "["
    ("./src/a.py", "src/a.py", True),
    ("src//a.py", "src/a.py", True),
    ("src/./a.py", "src/a.py", True),
    ("src/a.py", "x/src/a.py", False),
]


@pytest.mark.parametrize(("pattern", "path", "matches"), SHARED)
def test_rules_and_the_built_ins_answer_alike(pattern: str, path: str, matches: bool) -> None:
    assert rule(pattern, path) is matches
    assert grep_filter(pattern, path) is matches
    if "/" in pattern.rstrip("/"):
        assert glob_tool(pattern, path) is matches
    else:  # the glob tool anchors every pattern: "**/" makes it match at any depth
        assert glob_tool(f"**/{pattern}", path) is matches


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [("A[+-0]B", "a/b", False), ("A[+-0]B", "a+b", True), ("A[!X]B", "a/b", False)],
)
def test_case_folding_keeps_slash_out_of_classes(pattern: str, path: str, matches: bool) -> None:
    assert rule(pattern, path, fold=True) is matches
    assert grep_filter(pattern, path, fold=True) is matches


@pytest.mark.parametrize("pattern", ["a[z-a]b", "[9-0]", "x/[b-a]/y", "a[!z-a]"])
def test_a_reversed_range_is_an_error_everywhere(pattern: str) -> None:
    with pytest.raises(GlobError, match="reversed"):
        compile_path_pattern(pattern)
    with pytest.raises(GlobError, match="reversed"):
        compile_glob(pattern)


def test_a_reversed_range_in_a_class_never_closed_is_literal() -> None:
    assert glob_tool("a[z-a", "a[z-a")


@pytest.mark.parametrize("pattern", ["../x", "a/../b", "a/..", "{x,..}/y"])
def test_dot_dot_is_an_error(pattern: str) -> None:
    with pytest.raises(GlobError):
        compile_glob(pattern)
    if "{" not in pattern:
        with pytest.raises(GlobError):
            compile_path_pattern(pattern)


def test_braces_for_the_built_ins_and_their_bound() -> None:
    regex = compile_glob("src/**/*.{ts,tsx}")
    assert regex.matches("src/a/b.tsx") and regex.matches("src/b.ts")
    assert not regex.matches("src/b.js")
    assert compile_glob("{a,{b,c}}x").matches("cx")
    assert compile_glob("a{b}c").matches("a{b}c")  # no comma: literal
    assert MAX_ALTERNATIVES == 2**8
    assert compile_glob("{a,b}" * 8).matches("abbabbab")
    with pytest.raises(GlobError, match="alternatives"):
        compile_glob("{a,b}" * 9)


def test_anchoring_in_grep_filter_follows_gitignore() -> None:
    assert grep_filter("/a.py", "a.py") and not grep_filter("/a.py", "src/a.py")
    assert grep_filter("./a.py", "a.py") and not grep_filter("./a.py", "src/a.py")
    assert grep_filter("a.py/", "src/a.py")  # only a trailing "/": still any depth
    below = compile_glob("node_modules", names_anywhere=True, below=True)
    assert below.matches("web/node_modules/x/y.js") and not below.matches("web/x.js")


@pytest.mark.parametrize(
    ("pattern", "plain"),
    [
        ("*.py", ["*.py"]),
        ("./src//**/*.{ts,tsx}", ["/src/**/*.ts", "/src/**/*.tsx"]),
        ("/a.py", ["/a.py"]),
        ("a/", ["a"]),
        ("a[+-0]b", None),
        ("\\*.py", None),
        ("{!a,b}", None),
        ("#x", None),
        ("a{b", None),
        ("a ", None),
    ],
)
def test_plain_globs_only_where_ripgrep_reads_them_alike(
    pattern: str, plain: list[str] | None
) -> None:
    assert plain_globs(pattern) == plain
