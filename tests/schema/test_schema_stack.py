"""Stack safety (SPEC §2.3): deep schemas and deep values never recurse in Python."""

from __future__ import annotations

import copy
import sys
import tracemalloc
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


# -- memory and time linear in depth ------------------------------------------------------------


def _nest(levels: int, wrap: Any) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = wrap(schema)
    return schema


_MIXED_STEPS: list[Any] = [
    lambda inner: {"properties": {"a/b~c": inner}},
    lambda inner: {"items": inner},
    lambda inner: {"allOf": [inner]},
    lambda inner: {"not": inner},
    lambda inner: {"additionalProperties": inner},
    lambda inner: {"prefixItems": [inner]},
]


def _mixed(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for level in range(levels):
        schema = _MIXED_STEPS[level % len(_MIXED_STEPS)](schema)
    return schema


SHAPES: dict[str, Any] = {
    "properties": _deep_schema,
    "items": lambda levels: _nest(levels, lambda inner: {"type": "array", "items": inner}),
    "mixed_keywords": _mixed,
}


DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _peak_compile_bytes(schema: dict[str, Any]) -> int:
    tracemalloc.start()
    try:
        from_json_schema(schema)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("shape", SHAPES)
def test_compile_memory_grows_linearly_with_depth(shape: str) -> None:
    # Pointers kept whole per level made this quadratic: 263 MB at 5,000 levels, 3.6 GB at
    # 20,000. Each level now costs a node and a short step; four times the depth, about four
    # times the memory.
    peaks = {depth: _peak_compile_bytes(SHAPES[shape](depth)) for depth in (1_000, 5_000, 20_000)}
    assert peaks[20_000] / peaks[5_000] < 6, peaks
    assert peaks[5_000] / peaks[1_000] < 8, peaks
    assert peaks[20_000] < 150 * 2**20, peaks  # well under 8 KB a level


def test_hundred_thousand_level_schema_compiles_and_validates() -> None:
    schema: dict[str, Any] = {"type": "string", "minLength": 2}
    for _ in range(100_000):  # a $schema at every level: still no pointer spelled out per level
        schema = {"$schema": DIALECT, "properties": {"a": schema}, "required": ["a"]}
    validator = from_json_schema(schema)
    assert validator.is_valid(_deep_value(100_000, "ok"))
    (issue,) = validator.validate(_deep_value(100_000, "x"))
    assert issue.keyword == "minLength" and len(issue.path) == 100_000


@pytest.mark.parametrize(
    ("bottom", "keyword"),
    [
        ({"sparkle": 1}, "sparkle"),
        ({"minLength": -1}, "minLength"),
        ({"$ref": "#/$defs/nowhere"}, "$ref"),
        ({"items": 3}, None),
        ({"$schema": "https://example.com/mine"}, "$schema"),
    ],
)
def test_a_deep_error_names_its_whole_pointer(bottom: dict[str, Any], keyword: str | None) -> None:
    steps = [("properties", "a/b"), ("items", None), ("allOf", "0"), ("$defs", "x~y")]
    schema: dict[str, Any] = bottom
    for level in range(2_000):
        key, name = steps[level % len(steps)]
        schema = {key: schema if name is None else ({name: schema} if key != "allOf" else [schema])}
    expected = "".join(
        f"/{key}" + ("" if name is None else "/" + name.replace("~", "~0").replace("/", "~1"))
        for key, name in (steps[level % len(steps)] for level in reversed(range(2_000)))
    )
    if keyword is None:
        expected += "/items"  # the location that is not a schema
    with pytest.raises(SchemaError) as info:
        from_json_schema(schema)
    assert info.value.keyword == keyword
    assert info.value.pointer == "#" + expected


def test_a_deep_ref_cycle_names_where_it_is() -> None:
    schema: dict[str, Any] = {"$ref": "#/properties/a"}
    schema = {"properties": {"a": {"allOf": [{"not": schema}]}}}
    with pytest.raises(SchemaError) as info:
        from_json_schema(schema)
    assert info.value.keyword == "$ref"
    assert info.value.pointer.startswith("#/properties/a")


def test_one_subschema_object_in_several_places_validates_as_copies_would() -> None:
    shared: dict[str, Any] = {"type": "integer", "minimum": 3}
    schema = {
        "type": "object",
        "properties": {"a": shared, "b": {"items": shared}, "c": {"$ref": "#/properties/a"}},
        "$defs": {"same": shared},
        "anyOf": [shared, {"type": "object"}],
    }
    copied = copy.deepcopy(schema)
    for value in ({"a": 1, "b": [5, 2], "c": 0}, {"a": 4, "b": [], "c": 9}, {"a": "x"}, 7, 1):
        assert from_json_schema(schema).validate(value) == from_json_schema(copied).validate(value)


def test_a_schema_object_that_contains_itself_compiles_as_recursion() -> None:
    # Not JSON (no text spells it), but a Python caller can build it: it ends, as a recursive
    # schema, instead of unrolling forever.
    tree: dict[str, Any] = {"type": "object", "additionalProperties": False}
    tree["properties"] = {"child": tree}
    validator = from_json_schema(tree)
    assert validator.validate({"child": {"child": {}}}) == []
    (issue,) = validator.validate({"child": {"child": 5}})
    assert issue.path == ("child", "child") and issue.keyword == "type"
