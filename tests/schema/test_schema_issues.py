"""Issue quality (SPEC §2.2) and bad schemas (SPEC §2.3, §21)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from fastgate import schema as s
from fastgate.schema import SchemaError, ValidationIssue, from_json_schema

DEPLOY_ITEM = {
    "oneOf": [
        {
            "type": "object",
            "properties": {"kind": {"const": "zone"}, "zone": {"type": "string", "minLength": 1}},
            "required": ["kind", "zone"],
            "additionalProperties": False,
        },
        {
            "type": "object",
            "properties": {
                "kind": {"const": "capacity"},
                "min_mem_gb": {"type": "integer", "minimum": 1},
            },
            "required": ["kind", "min_mem_gb"],
            "additionalProperties": False,
        },
    ]
}


def test_issue_has_path_keyword_and_actionable_message() -> None:
    validator = from_json_schema(
        {"type": "object", "properties": {"timeout_ms": {"type": "integer"}}}
    )
    (issue,) = validator.validate({"timeout_ms": "120000"})
    assert isinstance(issue, ValidationIssue)
    assert issue.path == ("timeout_ms",)
    assert issue.keyword == "type"
    assert "timeout_ms" in issue.message
    assert "integer" in issue.message
    assert '"120000"' in issue.message and "string" in issue.message


def test_every_issue_is_reported() -> None:
    validator = from_json_schema(
        {
            "type": "object",
            "properties": {
                "a": {"type": "string"},
                "b": {"type": "integer", "maximum": 3},
                "c": {"type": "array", "items": {"type": "boolean"}},
            },
            "required": ["a", "b", "d"],
            "additionalProperties": False,
        }
    )
    issues = validator.validate({"a": 1, "b": 9, "c": [True, 0, 1], "e": None})
    found = {(i.path, i.keyword) for i in issues}
    assert found == {
        (("a",), "type"),
        (("b",), "maximum"),
        (("c", 1), "type"),
        (("c", 2), "type"),
        (("e",), "additionalProperties"),
        ((), "required"),
    }
    missing = next(i for i in issues if i.keyword == "required")
    assert '"d"' in missing.message
    extra = next(i for i in issues if i.keyword == "additionalProperties")
    assert "a, b, c" in extra.message


def test_issue_cap_is_respected_and_documented_default() -> None:
    schema = {"type": "array", "items": {"type": "string"}}
    assert len(from_json_schema(schema).validate(list(range(500)))) == s.DEFAULT_MAX_ISSUES
    assert len(from_json_schema(schema, max_issues=3).validate(list(range(500)))) == 3
    with pytest.raises(ValueError):
        from_json_schema(schema, max_issues=0)


def test_const_discriminated_one_of_reports_the_leaf_of_the_selected_branch() -> None:
    validator = from_json_schema({"type": "array", "items": DEPLOY_ITEM})
    (issue,) = validator.validate(
        [{"kind": "zone", "zone": "a"}, {"kind": "capacity", "min_mem_gb": 0}]
    )
    assert issue.path == (1, "min_mem_gb")
    assert issue.keyword == "minimum"
    assert "min_mem_gb" in issue.message and ">= 1" in issue.message


def test_discriminator_with_unknown_or_missing_tag() -> None:
    validator = from_json_schema(DEPLOY_ITEM)
    (issue,) = validator.validate({"kind": "rack"})
    assert issue.path == () and issue.keyword == "oneOf"  # no branch selected: at itself
    assert '"zone"' in issue.message and '"capacity"' in issue.message and '"rack"' in issue.message
    assert '"kind"' in issue.message  # the property that selects the variant is named
    (issue,) = validator.validate({"kind": 3})
    assert issue.path == () and '"kind"' in issue.message
    nested = from_json_schema({"type": "array", "items": DEPLOY_ITEM})
    (issue,) = nested.validate([{"kind": "zone", "zone": "a"}, {"kind": "rack"}])
    assert issue.path == (1,) and issue.keyword == "oneOf"
    (issue,) = validator.validate({"zone": "a"})
    assert issue.path == () and "kind" in issue.message
    (issue,) = validator.validate("text")
    assert issue.keyword == "oneOf"


def test_one_of_without_discriminator_reports_at_itself() -> None:
    validator = from_json_schema({"oneOf": [{"type": "integer"}, {"minimum": 2}]})
    assert validator.validate(1) == []
    (issue,) = validator.validate(3)
    assert issue.keyword == "oneOf" and issue.path == ()


def test_validation_never_mutates_or_coerces() -> None:
    value = {"a": ["1", {"b": 2.0}], "c": None}
    before = copy.deepcopy(value)
    validator = from_json_schema(
        {"type": "object", "properties": {"a": {"type": "array", "uniqueItems": True}}}
    )
    validator.validate(value)
    assert value == before and type(value["a"][1]["b"]) is float  # type: ignore[index]


@pytest.mark.parametrize(
    ("schema", "value", "valid"),
    [
        ({"type": "integer"}, True, False),
        ({"type": "integer"}, 1.0, True),
        ({"type": "integer"}, 1.5, False),
        ({"type": "number"}, float("nan"), False),
        ({"type": "number"}, float("inf"), False),
        ({"type": "boolean"}, 0, False),
        ({"enum": [1]}, 1.0, True),
        ({"enum": [1]}, True, False),
        ({"const": [1, {"a": 1.0}]}, [1.0, {"a": 1}], True),
        ({"const": False}, 0, False),
        ({"uniqueItems": True}, [1, 1.0], False),
        ({"uniqueItems": True}, [1, True], True),
        ({"multipleOf": 0.01}, 0.07, True),
        ({"pattern": "^a.c$"}, "a\nc", False),
        ({"pattern": "^abc$"}, "abc\n", False),
        ({"pattern": "\\d"}, "\u0663", False),
    ],
)
def test_json_semantics(schema: dict[str, Any], value: Any, valid: bool) -> None:
    assert (from_json_schema(schema).validate(value) == []) is valid


@pytest.mark.parametrize(
    ("schema", "keyword", "pointer"),
    [
        ({"required": "a"}, "required", "#"),
        ({"type": "strin"}, "type", "#"),
        ({"properties": {"x": {"pattern": "(unclosed"}}}, "pattern", "#/properties/x"),
        ({"properties": {"x": {"pattern": "\\p{L}"}}}, "pattern", "#/properties/x"),
        ({"minLength": -1}, "minLength", "#"),
        ({"maximum": "3"}, "maximum", "#"),
        ({"items": {"contains": {}}}, "contains", "#/items"),
        ({"properties": []}, "properties", "#"),
        ({"allOf": []}, "allOf", "#"),
        ({"$ref": "#/$defs/missing"}, "$ref", "#"),
        ({"$ref": "other.json"}, "$ref", "#"),
        ({"properties": {"a": {"$id": "x"}}}, "$id", "#/properties/a"),
        ({"frobnicate": 1}, "frobnicate", "#"),
        ({"multipleOf": 0}, "multipleOf", "#"),
        ({"uniqueItems": "yes"}, "uniqueItems", "#"),
    ],
)
def test_malformed_schema_is_a_schema_error_with_pointer(
    schema: dict[str, Any], keyword: str, pointer: str
) -> None:
    with pytest.raises(SchemaError) as info:
        from_json_schema(schema)
    assert info.value.keyword == keyword
    assert info.value.pointer == pointer
    assert pointer in str(info.value) and keyword in str(info.value)


@pytest.mark.parametrize(
    ("schema", "reason"),
    [
        ({"frobnicate": 1}, "unknown keyword 'frobnicate': "),
        ({"properties": {"a": {"sparkle": True}}}, "unknown keyword 'sparkle': "),
        ({"patternProperties": {}}, "unsupported keyword 'patternProperties': "),
        ({"items": {"contains": {}}}, "unsupported keyword 'contains': "),
        (
            {"properties": {"a": {"x-ok": 1, "unevaluatedProperties": False}}},
            "unsupported keyword 'unevaluatedProperties': ",
        ),
    ],
)
def test_an_unenforceable_keyword_is_named_once(schema: dict[str, Any], reason: str) -> None:
    with pytest.raises(SchemaError) as info:
        from_json_schema(schema)
    assert info.value.reason.startswith(reason) and str(info.value).startswith(reason)
    assert "keyword keyword" not in str(info.value)


@pytest.mark.parametrize("schema", [None, 1, "x", [], {"properties": {"a": 3}}])
def test_non_schema_values_are_schema_errors(schema: Any) -> None:
    with pytest.raises(SchemaError):
        from_json_schema(schema)


def test_dsl_round_trips_through_json_schema() -> None:
    node = s.Object(
        {
            "name": s.String(min_length=1, max_length=5, pattern="^[a-z]+$").required(),
            "n": s.Integer(minimum=0, maximum=10),
            "ratio": s.Number(exclusive_minimum=0),
            "tags": s.Array(s.Enum(["a", "b"]), max_items=2, unique_items=True),
            "mode": s.Nullable(s.Const("fast")),
            "shape": s.OneOf(
                s.Object({"kind": s.Const("dot").required()}),
                s.Object({"kind": s.Const("box").required(), "w": s.Number().required()}),
            ),
            "flag": s.AnyOf(s.Boolean(), s.Null()),
        },
        required=("n",),
        description="args",
    )
    schema = node.to_json_schema()
    assert list(schema["properties"]) == ["name", "n", "ratio", "tags", "mode", "shape", "flag"]
    assert schema["required"] == ["name", "n"]
    assert json.loads(json.dumps(schema)) == schema
    direct, raw = s.compile(node), from_json_schema(schema)
    samples = [
        {"name": "ab", "n": 1},
        {"name": "AB", "n": 11, "tags": ["a", "a", "c"], "mode": "slow"},
        {"n": 1, "shape": {"kind": "box"}, "flag": 1, "x": 1},
        {"name": "abc", "n": 2, "ratio": 0, "shape": {"kind": "dot"}, "mode": None},
    ]
    for sample in samples:
        assert direct.validate(sample) == raw.validate(sample)
    assert direct.validate(samples[0]) == []
    assert len(direct.validate(samples[1])) == 6  # pattern, maximum, maxItems, unique, enum, mode


def test_optional_overrides_required_and_compile_accepts_validators() -> None:
    node = s.Object({"a": s.String().optional()}, required=("a",))
    assert "required" not in node.to_json_schema()
    validator = s.compile({"type": "object"})
    assert s.compile(validator) is validator
    with pytest.raises(SchemaError):
        s.compile(object())


def test_bench_schemas_have_precise_issues() -> None:
    path = Path(__file__).resolve().parents[3] / "shared" / "data" / "bench_schemas.json"
    if not path.is_file():
        pytest.skip("bench_schemas.json not found beside the repo")
    data = json.loads(path.read_text())
    expected = {
        "bash": (("timeout_ms",), "type"),
        "edit": (("edits", 2), "required"),
        "deploy": (("spec", "target", "placement", "constraints", 2, "min_mem_gb"), "minimum"),
    }
    for name, (where, keyword) in expected.items():
        validator = from_json_schema(data[name]["schema"])
        assert validator.validate(data[name]["valid"]) == []
        (issue,) = validator.validate(data[name]["invalid"])
        assert (issue.path, issue.keyword) == (where, keyword)
