"""``is_valid`` has its own yes/no walk (declared properties looked up, combinators as plain
calls, a const discriminator deciding oneOf/anyOf, ``run`` past the inline depth): it must agree
with ``validate`` on every kind of object a caller can pass, in both builds."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Mapping
from types import ModuleType
from typing import Any

import pytest

from fastgate._core import _validate_py as pure_core
from fastgate._core import validate as active_core
from fastgate.model.freeze import FrozenDict
from fastgate.schema._compile import compile_json_schema

PROPERTIES = {
    "command": {"type": "string", "maxLength": 8},
    "timeout": {"type": "integer", "minimum": 1},
    "env": {"type": "object", "additionalProperties": {"type": "string"}},
}
CLOSED = {  # every key declared
    "type": "object",
    "properties": {**PROPERTIES, "cwd": {"type": "string"}},
    "required": ["command", "cwd"],
    "additionalProperties": False,
    "maxProperties": 4,
}
OPEN = {  # undeclared keys judged by a schema; one required name is not declared
    "type": "object",
    "properties": PROPERTIES,
    "required": ["command", "cwd"],
    "additionalProperties": {"type": "string"},
    "minProperties": 2,
}


class Lying(dict[Any, Any]):
    """A dict whose lookups misreport: validation reads the stored items, never ``get``."""

    def get(self, key: Any, default: Any = None) -> Any:
        return "x"

    def __getitem__(self, key: Any) -> Any:
        return "x"


VALUES: list[Any] = [
    {"command": "ls", "cwd": "/"},
    {"command": "ls", "cwd": "/", "env": {"A": "1"}},
    {"command": "ls", "cwd": "/", "env": {"A": 1}},  # an env value of the wrong type
    {"command": "ls"},  # required, undeclared, missing
    {"cwd": "/"},  # required, declared, missing
    {"command": "ls", "cwd": "/", "extra": 1},  # not declared, additionalProperties false
    {"command": "ls", "cwd": "/", 1: "x"},  # a key that is not a string
    {"command": "much too long", "cwd": "/"},
    {"command": "ls", "cwd": "/", "timeout": 0},
    {"command": "ls", "cwd": "/", "timeout": 5, "env": {}},
    {"command": "ls", "cwd": "/", "timeout": 5, "env": {}, "extra": 1},  # five properties
    {"command": "ls", "cwd": "/", "nested": {"deep": [1, {"x": None}]}},
]


def _cores() -> list[ModuleType]:
    cores = [pure_core]
    if active_core is not pure_core:  # the compiled build's own module
        cores.append(active_core)
    return cores


@pytest.mark.parametrize("core", _cores(), ids=lambda core: core.__name__.rsplit(".", 1)[-1])
@pytest.mark.parametrize("wrap", [dict, FrozenDict, OrderedDict, Lying], ids=lambda w: w.__name__)
@pytest.mark.parametrize("schema", [CLOSED, OPEN], ids=["closed", "open"])
def test_is_valid_agrees_with_validate_on_every_kind_of_object(
    core: ModuleType, wrap: type[Any], schema: dict[str, Any]
) -> None:
    validator = compile_json_schema(schema, 50, core)
    verdicts = []
    for value in VALUES:
        wrapped = wrap(value)
        expected = validator.validate(wrapped) == []
        assert validator.is_valid(wrapped) is expected, (wrap.__name__, value)
        verdicts.append(expected)
    assert True in verdicts and False in verdicts  # both answers were exercised


def test_a_nested_object_failure_is_found_under_any_of_too() -> None:
    # anyOf runs its branches in silent sinks: the lookup walk decides each branch.
    schema = {"anyOf": [CLOSED, {"type": "object", "required": ["alt"]}]}
    for core in _cores():
        validator = compile_json_schema(schema, 50, core)
        assert validator.is_valid({"command": "ls", "cwd": "/"})
        assert validator.is_valid({"alt": 1})
        assert not validator.is_valid({"command": "ls", "cwd": "/", "env": {"A": 1}})
        assert validator.validate({"command": "ls", "cwd": "/", "env": {"A": 1}}) != []


# -- the discriminator ---------------------------------------------------------------------------

_BRANCHES: list[Any] = [
    {
        "type": "object",
        "properties": {"kind": {"const": "zone"}, "zone": {"type": "string", "minLength": 1}},
        "required": ["kind", "zone"],
        "additionalProperties": False,
    },
    {
        "type": "object",
        "properties": {"kind": {"const": "label"}, "key": {"pattern": "^[a-z][a-z0-9_.-]*$"}},
        "required": ["kind", "key"],
    },
    {"$ref": "#/$defs/never"},  # a branch reached through $ref; its tag can never hold
]
_NEVER = {
    "type": "object",
    "properties": {"kind": {"const": "cap", "maxLength": 2}},
    "required": ["kind"],
}
DISCRIMINATED: list[Any] = [
    {"oneOf": _BRANCHES, "$defs": {"never": _NEVER}},
    {"anyOf": _BRANCHES, "$defs": {"never": _NEVER}},
]
TAGGED: list[tuple[Any, bool]] = [
    ({"kind": "zone", "zone": "a"}, True),
    ({"kind": "zone", "zone": ""}, False),  # the picked branch's own leaf fails
    ({"kind": "zone"}, False),
    ({"kind": "zone", "zone": "a", "key": "b"}, False),  # additionalProperties of the branch
    ({"kind": "label", "key": "team"}, True),
    ({"kind": "label", "key": "Team"}, False),
    ({"kind": "label", "key": "team", "extra": [1]}, True),  # this branch is open
    ({"kind": "cap"}, False),  # the tag picks a branch whose tag property cannot hold
    ({"kind": "rack", "zone": "a"}, False),  # a tag no branch has
    ({"kind": 1, "zone": "a"}, False),  # a tag that is no string
    ({"kind": None}, False),
    ({"zone": "a"}, False),  # no tag, and every branch requires one
    ({}, False),
    ("zone", False),  # not an object: the general path
    ([{"kind": "zone", "zone": "a"}], False),
]


@pytest.mark.parametrize("core", _cores(), ids=lambda core: core.__name__.rsplit(".", 1)[-1])
@pytest.mark.parametrize("schema", DISCRIMINATED, ids=["oneOf", "anyOf"])
def test_a_discriminator_decides_as_every_branch_would(
    core: ModuleType, schema: dict[str, Any]
) -> None:
    validator = compile_json_schema(schema, 50, core)
    assert validator.root.disc_key == "kind"  # the case under test really has a discriminator
    for value, valid in TAGGED:
        for wrapped in (value, FrozenDict(value)) if type(value) is dict else (value,):
            assert validator.is_valid(wrapped) is valid, (wrapped, valid)
            assert (validator.validate(wrapped) == []) is valid, (wrapped, valid)


@pytest.mark.parametrize("core", _cores(), ids=lambda core: core.__name__.rsplit(".", 1)[-1])
def test_an_optional_tag_or_a_repeated_one_leaves_the_choice_to_the_branches(
    core: ModuleType,
) -> None:
    optional = compile_json_schema(
        {
            "oneOf": [
                {"properties": {"kind": {"const": "a"}}},  # holds for any value without a tag
                {"properties": {"kind": {"const": "b"}}, "required": ["kind"]},
            ]
        },
        50,
        core,
    )
    assert optional.root.disc_key == "kind" and not optional.root.disc_required
    repeated = compile_json_schema(
        {
            "oneOf": [
                {"properties": {"kind": {"const": "a"}}},
                {"properties": {"kind": {"const": "a"}}},
            ]
        },
        50,
        core,
    )
    assert repeated.root.disc_key is None  # the tag tells nothing apart
    cases = [
        (optional, {}, True),
        (optional, {"x": 1}, True),
        (optional, {"kind": "a"}, True),
        (optional, {"kind": "b"}, True),
        (optional, {"kind": "c"}, False),
        (optional, 3, False),  # no object: both branches hold, not exactly one
        (repeated, {"kind": "a"}, False),  # both branches hold: not exactly one
        (repeated, {"kind": "b"}, False),
        (repeated, {}, False),
    ]
    for validator, value, valid in cases:
        assert validator.is_valid(value) is valid, (value, valid)
        assert (validator.validate(value) == []) is valid, (value, valid)


# -- depth, mappings, combinators ---------------------------------------------------------------


class Mapped(Mapping[str, Any]):
    """A mapping that is no dict: ``is_valid`` reads it as ``validate`` does."""

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


def _nested(levels: int, leaf: Any, wrap: Any = dict) -> Any:
    value = leaf
    for _ in range(levels):
        value = wrap({"a": value, "n": ["ok"]})  # only the bottom can fail
    return value


@pytest.mark.parametrize("core", _cores(), ids=lambda core: core.__name__.rsplit(".", 1)[-1])
@pytest.mark.parametrize("levels", [3, 15, 16, 17, 40])
def test_nesting_past_the_inline_depth_gives_the_same_answers(
    core: ModuleType, levels: int
) -> None:
    leaf: dict[str, Any] = {"type": "string", "minLength": 2}
    node = leaf
    for _ in range(levels):
        node = {
            "type": "object",
            "properties": {"a": node, "n": {"type": "array", "items": leaf}},
            "required": ["a"],
            "additionalProperties": False,
        }
    validator = compile_json_schema(node, 50, core)
    for bottom, valid in [("ok", True), ("x", False), (2, False)]:
        for wrap in (dict, Mapped):
            value = _nested(levels, bottom, wrap)
            assert validator.is_valid(value) is valid, (levels, bottom, wrap)
            assert (validator.validate(value) == []) is valid


COMBINED: list[tuple[dict[str, Any], list[tuple[Any, bool]]]] = [
    (
        {"oneOf": [{"type": "integer"}, {"minimum": 2}]},
        [(1, True), (3, False), (1.5, False), ("x", True)],
    ),
    ({"anyOf": [{"type": "string"}, {"maximum": 0}]}, [("x", True), (-1, True), (1, False)]),
    ({"allOf": [{"minimum": 1}, {"multipleOf": 2}]}, [(2, True), (3, False), (0, False)]),
    ({"not": {"type": "null"}}, [(0, True), (None, False)]),
    (
        {"if": {"required": ["a"]}, "then": {"required": ["b"]}, "else": {"maxProperties": 0}},
        [({"a": 1, "b": 2}, True), ({"a": 1}, False), ({}, True), ({"c": 1}, False)],
    ),
    (
        {"dependentRequired": {"a": ["b"]}, "dependentSchemas": {"b": {"maxProperties": 2}}},
        [({"a": 1, "b": 2}, True), ({"a": 1}, False), ({"a": 1, "b": 2, "c": 3}, False)],
    ),
    (
        {"prefixItems": [{"type": "integer"}], "items": False, "uniqueItems": True},
        [([1], True), ([], True), (["x"], False), ([1, 2], False)],
    ),
    (
        {"items": {"type": "integer"}, "uniqueItems": True, "minItems": 2},
        [([1, 2], True), ([1, 1.0], False), ([1], False), ([1, "x"], False)],
    ),
    (
        {"properties": {"a": {"enum": [[1], {"b": None}]}}, "additionalProperties": {"const": 1}},
        [({"a": [1]}, True), ({"a": {"b": None}, "z": 1}, True), ({"a": [2]}, False)],
    ),
    (
        {"type": "object", "additionalProperties": {"type": "string"}, "maxProperties": 2},
        [({"a": "x", 1: "y"}, True), ({"a": 1}, False), ({"a": "", "b": "", "c": ""}, False)],
    ),
]


@pytest.mark.parametrize("core", _cores(), ids=lambda core: core.__name__.rsplit(".", 1)[-1])
@pytest.mark.parametrize(("schema", "cases"), COMBINED)
def test_combinators_and_the_other_keywords_agree_with_validate(
    core: ModuleType, schema: dict[str, Any], cases: list[tuple[Any, bool]]
) -> None:
    validator = compile_json_schema(schema, 50, core)
    for value, valid in cases:
        assert validator.is_valid(value) is valid, (schema, value)
        assert (validator.validate(value) == []) is valid, (schema, value)


class Text(str):
    pass


LEAVES: list[tuple[dict[str, Any], list[tuple[Any, bool]]]] = [
    ({"type": "string"}, [("a", True), (Text("a"), True), (1, False), (None, False)]),
    ({"type": "integer"}, [(1, True), (1.0, True), (True, False), (1.5, False), ("1", False)]),
    ({"type": "number"}, [(1, True), (1.5, True), (float("nan"), False), (False, False)]),
    ({"type": ["boolean", "integer"]}, [(True, True), (0, True), (0.0, True), ("x", False)]),
    ({"type": "object"}, [({}, True), (FrozenDict(), True), (Mapped({}), True), ([], False)]),
    ({"type": ["array", "null"]}, [([], True), (None, True), ((), True), ({}, False)]),
    ({}, [("a", True), (1, True), (float("inf"), True), (object(), True)]),
]


@pytest.mark.parametrize("core", _cores(), ids=lambda core: core.__name__.rsplit(".", 1)[-1])
@pytest.mark.parametrize(("leaf", "cases"), LEAVES)
def test_leaves_judge_every_member_by_its_kind(
    core: ModuleType, leaf: dict[str, Any], cases: list[tuple[Any, bool]]
) -> None:
    # A type-only leaf accepts its plain type at once: the rest must still be judged in full.
    validator = compile_json_schema({"properties": {"x": leaf}, "items": leaf}, 50, core)
    for value, valid in cases:
        for wrapped in ({"x": value}, [value]):
            assert validator.is_valid(wrapped) is valid, (leaf, wrapped)
            assert (validator.validate(wrapped) == []) is valid, (leaf, wrapped)
