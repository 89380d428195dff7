"""``pattern`` by character runs: the patterns a left-to-right scan decides are checked without
``re``, and must give exactly the answers of the translated regex, in both builds."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastgate._core import _validate_py as pure_core
from fastgate._core import validate as active_core
from fastgate.schema._compile import compile_json_schema
from fastgate.schema._pattern import char_runs, compile_pattern


def _cores() -> list[ModuleType]:
    return [pure_core] if active_core is pure_core else [pure_core, active_core]


@pytest.mark.parametrize(
    "pattern",
    [
        "^[a-z][a-z0-9_.-]*$",  # the bench schema's label key
        "^CHG-[0-9]+$",
        "^\\d{4}-\\d{2}-\\d{2}$",
        "^[A-Z]{2,3}$",
        "^[^/]+$",
        "^\\w+\\.py$",
        "^a{2,}b?$",
        "^[a-z]*-[a-z]+$",  # "-" ends the first run, and the runs after it do not matter
        "^[-a]+$",
        "^[a-]$",
        "^\\$$",
        "^$",
    ],
)
def test_plain_patterns_become_runs(pattern: str) -> None:
    assert char_runs(pattern) is not None
    for core in _cores():
        validator = compile_json_schema({"pattern": pattern}, 50, core)
        assert validator.root.pattern_runs is not None


@pytest.mark.parametrize(
    "pattern",
    [
        "^a*a$",  # the scan would take the last "a" too: a match needs backtracking
        "^[a-z]+[a-c]$",
        "^a*b?a$",  # "b" may take nothing: the "a" after it could take the next character
        "^\\W*\\D$",  # both allow every non-ASCII character
        "^https://",  # no "$": a match may stop early
        "abc$",  # no "^"
        "^a|b$",
        "^(ab)+$",
        "^.+$",
        "^\\s+$",
        "^é+$",
        "^[a-z-0]$",  # a dash after a range
        "^[]$",
        "^[^]$",
        "^a*?$",
        "^a{,3}$",
        "^a{\u0663}$",  # not a quantifier for re: its digits are ASCII only
        "^a{2}{3}$",
    ],
)
def test_other_patterns_are_left_to_re(pattern: str) -> None:
    assert char_runs(pattern) is None


@pytest.mark.parametrize("core", _cores(), ids=lambda core: core.__name__.rsplit(".", 1)[-1])
def test_runs_on_the_bench_pattern(core: ModuleType) -> None:
    validator = compile_json_schema({"pattern": "^[a-z][a-z0-9_.-]*$"}, 50, core)
    for text, valid in [
        ("team", True),
        ("t", True),
        ("a.b-c_9", True),
        ("", False),
        ("Team", False),
        ("9team", False),
        ("team\n", False),
        ("teäm", False),
        ("team ", False),
    ]:
        assert validator.is_valid(text) is valid, text
        assert [i.keyword for i in validator.validate(text)] == ([] if valid else ["pattern"])
    assert validator.is_valid(3)  # not a string: pattern does not apply


ATOMS = ["a", "b", "-", "\\.", "[ab]", "[a-c]", "[^a]", "[-a]", "[0-9_.-]", "\\d", "\\w"]
ATOMS += ["\\D", "\\W", "é", ".", "(a|b)"]
QUANTIFIERS = ["", "", "*", "+", "?", "{2}", "{1,2}", "{0,}", "*?"]
patterns = st.builds(
    lambda head, body, tail: head + "".join(body) + tail,
    st.sampled_from(["^", "^", ""]),
    st.lists(
        st.tuples(st.sampled_from(ATOMS), st.sampled_from(QUANTIFIERS)).map("".join), max_size=4
    ),
    st.sampled_from(["$", "$", ""]),
)
texts = st.text(alphabet="ab-.c0_9é\n", max_size=6)


@settings(max_examples=500)
@given(pattern=patterns, samples=st.lists(texts, min_size=1, max_size=8))
def test_runs_decide_as_the_regex_does(pattern: str, samples: list[str]) -> None:
    reference = compile_pattern(pattern)
    for core in _cores():
        validator: Any = compile_json_schema({"pattern": pattern}, 50, core)
        for text in samples:
            expected = reference.search(text) is not None
            assert validator.is_valid(text) is expected, (pattern, text)
            assert (validator.validate(text) == []) is expected, (pattern, text)
