"""Stack safety (SPEC §2.3): deep schemas and deep values never recurse in Python."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from fastgate import schema as s
from fastgate.schema import SchemaError, from_json_schema

RECURSIVE_LIST = {"anyOf": [{"type": "integer"}, {"type": "array", "items": {"$ref": "#"}}]}


@pytest.fixture(autouse=True)
def _recursion_limit_untouched() -> Any:
    before = sys.getrecursionlimit()
    yield
    assert sys.getrecursionlimit() == before


def _deep_schema(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string", "minLength": 2}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    return schema


def _deep_value(levels: int, leaf: Any) -> Any:
    value = leaf
    for _ in range(levels):
        value = {"a": value}
    return value


def test_ten_thousand_level_schema_compiles_and_validates() -> None:
    validator = from_json_schema(_deep_schema(10_000))
    assert validator.validate(_deep_value(10_000, "ok")) == []
    (issue,) = validator.validate(_deep_value(10_000, "x"))
    assert issue.keyword == "minLength"
    assert issue.path == ("a",) * 10_000


def test_hundred_thousand_deep_instance_against_recursive_schema() -> None:
    validator = from_json_schema(RECURSIVE_LIST)
    value: Any = 1
    for _ in range(100_000):
        value = [value]
    assert validator.validate(value) == []
    bad: Any = "leaf"
    for _ in range(100_000):
        bad = [bad]
    issues = validator.validate(bad)
    assert issues and issues[0].keyword == "anyOf"
    assert not validator.is_valid(bad)


def test_deep_values_under_enum_const_and_unique_items() -> None:
    deep: Any = []
    for _ in range(50_000):
        deep = [deep]
    assert from_json_schema({"const": deep}).validate(deep) == []
    assert from_json_schema({"enum": [1, deep]}).validate(deep) == []
    (issue,) = from_json_schema({"uniqueItems": True}).validate([deep, deep])
    assert issue.keyword == "uniqueItems"


def test_deep_dsl_renders_and_compiles() -> None:
    node: s.SchemaNode = s.Integer()
    for _ in range(10_000):
        node = s.Array(node)
    validator = s.compile(node)
    value: Any = 3
    for _ in range(10_000):
        value = [value]
    assert validator.validate(value) == []


@pytest.mark.parametrize(
    "schema",
    [
        {"$ref": "#"},
        {"allOf": [{"$ref": "#"}]},
        {"anyOf": [{"type": "integer"}, {"$ref": "#"}]},
        {"not": {"$ref": "#"}},
        {
            "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"oneOf": [{"$ref": "#/$defs/a"}]}},
            "properties": {"x": {"$ref": "#/$defs/a"}},
        },
    ],
)
def test_ref_cycle_without_progress_is_a_schema_error(schema: dict[str, Any]) -> None:
    with pytest.raises(SchemaError) as info:
        from_json_schema(schema)
    assert info.value.keyword == "$ref"
    assert "cycle" in str(info.value)


def test_ref_cycle_that_consumes_input_is_fine() -> None:
    validator = from_json_schema(
        {"type": "object", "properties": {"child": {"$ref": "#"}}, "additionalProperties": False}
    )
    value: dict[str, Any] = {}
    for _ in range(20_000):
        value = {"child": value}
    assert validator.validate(value) == []
