"""Values Python allows that JSON text does not carry: integers past Python's 4300-digit limit
on printing, enum members (IntEnum, StrEnum) and other subclasses of int, float and str. Both
builds answer with issues (or accept) and agree; neither raises."""

from __future__ import annotations

import asyncio
import enum
from types import ModuleType
from typing import Any

import pytest

from fastgate import ExecutionContext
from fastgate._core import _validate_py as pure_core
from fastgate._core import validate as active_core
from fastgate.schema._compile import compile_json_schema
from tests.pipeline_kit import executor, tool


class Color(enum.StrEnum):
    RED = "red"
    ZONE = "zone"


class Level(enum.IntEnum):
    LOW = 1


class Ratio(float):
    pass


class Loud(str):
    def __str__(self) -> str:  # what the checks read is the characters, not this
        return "something else entirely"


def _cores() -> list[ModuleType]:
    return [pure_core] if active_core is pure_core else [pure_core, active_core]


def _answers(schema: Any, value: Any) -> tuple[list[tuple[str, str]], bool]:
    """(keyword, message) of each issue and ``is_valid``, the same in both builds."""
    found = []
    for core in _cores():
        validator = compile_json_schema(schema, 50, core)
        issues = [(issue.keyword, issue.message) for issue in validator.validate(value)]
        found.append((issues, validator.is_valid(value)))
        assert validator.is_valid(value) is (not issues)
    assert all(answer == found[0] for answer in found), found
    return found[0]


BIG = 10**5000


def _id(value: Any) -> str | None:
    """pytest cannot print an integer past the limit either."""
    return "big" if isinstance(value, int) and abs(value) > 10**60 else None


@pytest.mark.parametrize(
    ("schema", "value", "keywords", "text"),
    [
        ({"type": "string"}, BIG, ["type"], "got the number ~10^5000 (5001 digits)"),
        ({"maximum": 5}, BIG, ["maximum"], "expected a number <= 5, got ~10^5000 (5001 digits)"),
        ({"minimum": 5}, -BIG, ["minimum"], "got -~10^5000 (5001 digits)"),
        ({"exclusiveMaximum": 5}, BIG, ["exclusiveMaximum"], "got ~10^5000"),
        ({"multipleOf": 0.5}, BIG, [], ""),
        ({"multipleOf": 3}, BIG, ["multipleOf"], "expected a multiple of 3, got ~10^5000"),
        ({"multipleOf": 0.3}, BIG + 1, ["multipleOf"], "expected a multiple of 0.3, got ~10^5000"),
        ({"enum": [[1]]}, [BIG], ["enum"], "expected one of an array, got an array of 1 item"),
        ({"const": [1]}, [BIG], ["const"], "got an array of 1 item"),
        ({"uniqueItems": True}, [[BIG], [BIG]], ["uniqueItems"], "items 0 and 1 are equal"),
        ({"uniqueItems": True}, [[BIG], [BIG + 1]], [], ""),
        ({"const": BIG}, BIG + 1, ["const"], "expected exactly ~10^5000 (5001 digits)"),
        ({"enum": [BIG, 1]}, 2, ["enum"], "expected one of ~10^5000 (5001 digits), 1, got"),
        ({"maximum": 10**59}, 10**59 + 1, ["maximum"], f"got {10**59 + 1}"),
    ],
    ids=_id,
)
def test_integers_past_the_printing_limit(
    schema: Any, value: Any, keywords: list[str], text: str
) -> None:
    issues, _ = _answers(schema, value)
    assert [keyword for keyword, _ in issues] == keywords
    assert all(len(message) < 200 for _, message in issues)
    if text:
        assert text in issues[0][1]


@pytest.mark.parametrize(
    ("schema", "value", "keywords", "text"),
    [
        ({"type": "string", "maxLength": 5}, Color.RED, [], ""),
        ({"type": "string", "pattern": "^r.d$"}, Color.RED, [], ""),  # RE2
        ({"type": "string", "pattern": "^[a-z]+$"}, Color.RED, [], ""),  # character runs
        ({"pattern": "^b"}, Color.RED, ["pattern"], 'got the string "red"'),
        ({"pattern": "^[0-9]+$"}, Color.RED, ["pattern"], 'got the string "red"'),
        ({"enum": ["red"]}, Color.RED, [], ""),
        ({"type": "integer"}, Color.RED, ["type"], 'expected an integer, got the string "red"'),
        ({"const": "blue"}, Color.RED, ["const"], 'expected exactly "blue", got the string "red"'),
        ({"uniqueItems": True}, [[Color.RED], ["red"]], ["uniqueItems"], "are equal"),
        ({"const": ["red"]}, [Color.RED], [], ""),
        ({"properties": {"c": {"minLength": 1}}}, {"c": Color.RED}, [], ""),
        (
            {"type": "object", "additionalProperties": False},
            {Color.RED: 1},
            ["additionalProperties"],
            "red: unexpected",
        ),
        ({"pattern": "^s"}, Loud("abc"), ["pattern"], 'got the string "abc"'),
        ({"maxLength": 3}, Loud("abc"), [], ""),
        ({"type": "integer", "maximum": 5}, Level.LOW, [], ""),
        ({"multipleOf": 0.5}, Level.LOW, [], ""),
        ({"multipleOf": 2}, Level.LOW, ["multipleOf"], "expected a multiple of 2, got 1"),
        ({"type": "string"}, Level.LOW, ["type"], "expected a string, got the number 1"),
        ({"const": [1]}, [Level.LOW], [], ""),
        ({"minimum": 2}, Ratio(1.5), ["minimum"], "expected a number >= 2, got 1.5"),
        ({"multipleOf": 0.5}, Ratio(1.5), [], ""),
        ({"multipleOf": 0.5}, Ratio(1.25), ["multipleOf"], "got 1.25"),
    ],
)
def test_subclasses_of_json_types(schema: Any, value: Any, keywords: list[str], text: str) -> None:
    issues, _ = _answers(schema, value)
    assert [keyword for keyword, _ in issues] == keywords
    if text:
        assert text in issues[0][1]


def test_a_str_enum_tag_selects_its_variant() -> None:
    schema = {
        "oneOf": [
            {
                "type": "object",
                "properties": {"kind": {"const": "zone"}, "zone": {"type": "string"}},
                "required": ["kind", "zone"],
            },
            {
                "type": "object",
                "properties": {"kind": {"const": "label"}, "key": {"type": "string"}},
                "required": ["kind", "key"],
            },
        ]
    }
    assert _answers(schema, {"kind": Color.ZONE, "zone": "a"}) == ([], True)
    issues, _ = _answers(schema, {"kind": Color.ZONE})
    assert [keyword for keyword, _ in issues] == ["required"]


def test_the_executor_answers_with_a_result() -> None:
    """End to end (as the audit sent them): a result, never an exception out of execute."""
    schema = {
        "type": "object",
        "properties": {
            "q": {"type": "string", "pattern": "^[a-z]+$"},
            "n": {"type": "integer", "maximum": 5},
        },
        "additionalProperties": False,
    }
    ran: list[Any] = []

    def body(args: Any, ctx: Any) -> str:
        ran.append(args)
        return "ran"

    async def main() -> list[Any]:
        ex = executor(tool("t", body, schema))
        return [
            await ex.execute("t", {"n": BIG}, ExecutionContext()),
            await ex.execute("t", {"q": Color.RED}, ExecutionContext()),
        ]

    big, enum_value = asyncio.run(main())
    assert big.error is not None and big.error.code.value == "INVALID_ARGS"
    assert "n: expected a number <= 5, got ~10^5000 (5001 digits)" in big.content
    assert enum_value.ok
    assert len(ran) == 1


@pytest.mark.parametrize("key", [None, 1.5, (1, 2)])
def test_a_key_that_is_no_string_is_named(key: Any) -> None:
    issues, _ = _answers({"type": "object", "additionalProperties": False}, {key: 1})
    assert issues == [
        ("additionalProperties", f'["{key}"]: unexpected property (allowed properties: none)')
    ]
