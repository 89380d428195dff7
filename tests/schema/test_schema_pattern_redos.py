"""``pattern`` runs in time linear in the string, whatever the pattern: RE2, never a
backtracking engine. Catastrophic patterns (nested and overlapping quantifiers) answer at once,
in both builds, through ``validate``, ``is_valid``, a tool's arguments and a tool's output;
what only backtracking can match (back-references, lookaround) is refused when the schema is
compiled, so an MCP server's tool that uses it is quarantined. ECMA-262 meanings are kept."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastgate._core import _validate_py as pure_core
from fastgate._core import validate as active_core
from fastgate.mcp._config import MCPServerConfig
from fastgate.mcp._tools import build_listing
from fastgate.schema import SchemaError, from_json_schema
from fastgate.schema._compile import compile_json_schema
from fastgate.schema._pattern import compile_pattern, translate
from tests.child_kit import run_python

ROOT = Path(__file__).resolve().parents[2]

# (pattern, a string a backtracking engine takes for ever to reject)
CATASTROPHIC = [
    ("^([a-z]+)+$", "a" * 40 + "!"),
    ("^(a+)+$", "a" * 40 + "!"),
    ("^(a|a)*$", "a" * 40 + "!"),
    ("(x+x+)+y", "x" * 3000),
    ("^(\\w+\\s?)*$", "a" * 40 + "!"),
    ("^(a|aa)+$", "a" * 60 + "!"),
    ("^(.*a){12}$", "a" * 40 + "!"),
]


def _cores() -> list[ModuleType]:
    return [pure_core] if active_core is pure_core else [pure_core, active_core]


CORE_IDS = {pure_core.__name__: "pure", active_core.__name__: "active"}


# Each case in a child process with a time limit: a backtracking engine would hang this process
# (nothing interrupts a regex match), and a hang must fail the test, not stall the run.
CHILD = textwrap.dedent(
    """
    import asyncio, sys, time
    sys.path.insert(0, sys.argv[1])
    from fastgate import ExecutionContext, Output
    from fastgate._core import _validate_py as pure, validate as active
    from fastgate.schema._compile import compile_json_schema
    from tests.pipeline_kit import executor, tool

    CASES = {cases!r}

    def schema(pattern):
        return {{"type": "object", "properties": {{"q": {{"type": "string", "pattern": pattern}}}}}}

    for core in [pure] if active is pure else [pure, active]:
        for pattern, text in CASES:
            validator = compile_json_schema(schema(pattern), 50, core)
            assert [i.keyword for i in validator.validate({{"q": text}})] == ["pattern"], pattern
            assert validator.is_valid({{"q": text}}) is False, pattern

    ARGS = schema("^([a-z]+)+$")
    OUT = {{"type": "string", "pattern": "^([a-z]+)+$"}}

    async def main():
        ex = executor(
            tool("search", lambda a, c: "ok", ARGS, timeout=1.0),
            tool("emit", lambda a, c: "a" * 40 + "!", output=Output(schema=OUT), timeout=1.0),
        )
        r = await ex.execute("search", {{"q": "a" * 40 + "!"}}, ExecutionContext())
        print("args", r.error.code.value)
        r = await ex.execute("emit", {{"text": "x"}}, ExecutionContext())
        print("output", r.error.code.value)

    asyncio.run(main())
    print("done")
    """
)


def test_catastrophic_patterns_answer_at_once() -> None:
    code = CHILD.format(cases=CATASTROPHIC)
    out = run_python(
        code, str(ROOT), timeout=30, stalled="a backtracking pattern stalled validation"
    )
    assert out.split() == ["args", "INVALID_ARGS", "output", "OUTPUT_INVALID", "done"]


@pytest.mark.parametrize("core", _cores(), ids=lambda core: CORE_IDS[core.__name__])
@pytest.mark.parametrize(("pattern", "text"), CATASTROPHIC)
def test_catastrophic_patterns_still_match_what_they_should(
    core: ModuleType, pattern: str, text: str
) -> None:
    validator = compile_json_schema({"pattern": pattern}, 50, core)
    good = text[:-1] + ("y" if pattern == "(x+x+)+y" else "")
    assert validator.is_valid(good)
    assert validator.validate(good) == []


@pytest.mark.parametrize(
    "pattern",
    [
        "^(a)\\1$",  # back-reference
        "^(?<x>a)\\k<x>$",  # named back-reference
        "^(?=a)a+$",  # lookahead
        "^(?!b).*$",
        "(?<=a)b",  # lookbehind
        "(?<!a)b",
        "^(ab){1001}$",  # RE2 counts at most 1000 repetitions
        "^[\\ud800]$",  # a surrogate: no faithful translation for a string of code points
        "^\\ud83d\\ude00$",
    ],
)
def test_what_needs_backtracking_is_refused(pattern: str) -> None:
    with pytest.raises(SchemaError) as caught:
        from_json_schema({"type": "string", "pattern": pattern})
    assert caught.value.keyword == "pattern"
    assert "cannot be used" in caught.value.reason


def test_an_mcp_tool_with_a_backtracking_pattern_is_quarantined() -> None:
    async def call(name: str, args: Any, ctx: Any) -> Any:
        return "unused"

    raw = [
        {
            "name": "lookahead",
            "inputSchema": {"type": "object", "properties": {"q": {"pattern": "^(?=a)"}}},
        },
        {
            "name": "backref_out",
            "inputSchema": {"type": "object"},
            "outputSchema": {"type": "string", "pattern": "(a)\\1"},
        },
        {
            "name": "nested",  # catastrophic for a backtracking engine, linear on RE2: kept
            "inputSchema": {"type": "object", "properties": {"q": {"pattern": "^(a+)+$"}}},
        },
    ]
    listing = build_listing(MCPServerConfig("srv", command=["unused"]), raw, call, lambda n: False)
    assert set(listing.quarantined) == {"lookahead", "backref_out"}
    assert "lookahead" in listing.quarantined["lookahead"]
    assert "back-reference" in listing.quarantined["backref_out"]
    assert [d.name for d in listing.definitions] == ["mcp__srv__nested"]


def test_counts_a_scan_decides_need_no_regex() -> None:
    """``^a{5000}$`` is beyond RE2's counts but a character scan decides it, linearly."""
    for core in _cores():
        validator = compile_json_schema({"pattern": "^a{5000}$"}, 50, core)
        assert validator.is_valid("a" * 5000)
        assert not validator.is_valid("a" * 4999)


# -- ECMA-262 meanings, kept on RE2 -------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "text", "matches"),
    [
        ("\\B", "a\ufeffA", False),  # RE2 alone would find \B between the bytes of U+FEFF
        ("a*\\B", "a\ufeffA", False),
        ("\\B", "é", True),
        ("^\\B$", "", True),
        ("^a{,2}$", "a{,2}", True),  # no quantifier in ECMA: literal text
        ("^a{,2}$", "aa", False),
        ("^.$", "\u2028", False),  # "." excludes every line terminator
        ("^.$", "\u0085", True),
        ("^a$", "a\n", False),  # "$" only at the very end
        ("^\\s$", "\ufeff", True),
        ("^\\d$", "\u0663", False),  # ASCII digits only
        ("^\\w$", "é", False),
        ("^[]$", "", False),
        ("^[^]$", "\n", True),
        ("^[[:a]+$", "[:a", True),  # no POSIX classes in ECMA
        ("^\\x41\\u0042\\u{43}$", "ABC", True),
        ("^\\cJ$", "\n", True),
        ("^\\-\\/$", "-/", True),
        ("^\\ $", " ", True),
        ("^(?<year>\\d{4})-(?:\\d\\d)$", "2024-01", True),
        ("^.$", "\ud800", True),  # a lone surrogate is one character (matched as U+FFFD)
        ("^[^a]$", "\ud800", True),
    ],
)
def test_ecma_meanings(pattern: str, text: str, matches: bool) -> None:
    assert (compile_pattern(pattern).search(text) is not None) is matches
    for core in _cores():
        validator = compile_json_schema({"pattern": pattern}, 50, core)
        assert validator.is_valid(text) is matches, (core.__name__, pattern, text)
        assert (validator.validate(text) == []) is matches


def test_the_translation_is_re2_syntax() -> None:
    assert translate("^a.b$") == "^a[^\\n\\r\\x{2028}\\x{2029}]b\\z"
    assert translate("[]") == "[^\\x00-\\x{10ffff}]"


# Against Python's ``re`` on the ECMA source, where both mean the same (ASCII atoms and text
# without the line terminators and spaces on which they differ); small, bounded inputs.
ATOMS = ["a", "b", "ab", "[ab]", "[^a]", "\\d", "\\w", "\\W", "(a|b)", "(?:ab|a)", "."]
QUANTIFIERS = ["", "", "*", "+", "?", "{2}", "{1,2}", "*?", "+?"]
ecma_patterns = st.builds(
    lambda head, body, tail: head + "".join(body) + tail,
    st.sampled_from(["^", ""]),
    st.lists(
        st.one_of(
            st.tuples(st.sampled_from(ATOMS), st.sampled_from(QUANTIFIERS)).map("".join),
            st.just("\\b"),  # an assertion takes no quantifier
        ),
        min_size=1,
        max_size=4,
    ),
    st.sampled_from(["$", ""]),
)


@settings(max_examples=300, deadline=None)
@given(pattern=ecma_patterns, samples=st.lists(st.text(alphabet="ab1_ -!", max_size=6), max_size=6))
def test_re2_agrees_with_a_faithful_backtracker(pattern: str, samples: list[str]) -> None:
    reference = re.compile(pattern.replace("$", "\\Z"), re.ASCII)
    compiled = compile_pattern(pattern)
    for text in samples:
        assert (compiled.search(text) is not None) is (reference.search(text) is not None), (
            pattern,
            text,
        )
