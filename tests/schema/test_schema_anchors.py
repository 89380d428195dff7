"""``$anchor`` and ``$ref: "#name"`` (JSON Schema 2020-12's plain-name fragments)."""

from __future__ import annotations

from typing import Any

import pytest

from fastgate.schema import SchemaError, from_json_schema

ADDRESS = {
    "$anchor": "address-v1",
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}


def test_a_reference_to_an_anchor_validates_as_its_location() -> None:
    validator = from_json_schema(
        {
            "type": "object",
            "properties": {"home": {"$ref": "#address-v1"}, "work": {"$ref": "#/$defs/a"}},
            "$defs": {"a": ADDRESS},
        }
    )
    assert validator.validate({"home": {"city": "Lyon"}, "work": {"city": "Oslo"}}) == []
    (issue,) = validator.validate({"home": {"city": 7}})
    assert issue.path == ("home", "city") and issue.keyword == "type"
    assert not validator.is_valid({"home": {}})


def test_an_anchor_declared_after_its_reference_and_a_recursive_one() -> None:
    tree = {
        "$anchor": "node",
        "type": "object",
        "properties": {"children": {"type": "array", "items": {"$ref": "#node"}}},
        "additionalProperties": False,
    }
    validator = from_json_schema({"$ref": "#node", "$defs": {"tree": tree}})
    assert validator.is_valid({"children": [{"children": []}, {}]})
    (issue,) = validator.validate({"children": [{"children": [{"leaf": 1}]}]})
    assert issue.path == ("children", 0, "children", 0, "leaf")


def test_an_anchor_alone_checks_nothing() -> None:
    # Declared and never referenced, as MCP servers send it (the conformance suite's fixture).
    validator = from_json_schema({"$defs": {"address": ADDRESS}, "type": "object"})
    assert validator.is_valid({"anything": 1})


@pytest.mark.parametrize(
    ("schema", "keyword", "reason"),
    [
        ({"$ref": "#nowhere"}, "$ref", "names no $anchor"),
        ({"$defs": {"a": {"$anchor": "x"}, "b": {"$anchor": "x"}}}, "$anchor", "declared twice"),
        ({"$anchor": "1st"}, "$anchor", "must be a name"),
        ({"$anchor": "a#b"}, "$anchor", "must be a name"),
        ({"$anchor": ""}, "$anchor", "must be a name"),
        ({"$anchor": 3}, "$anchor", "must be a name"),
        ({"$ref": "#a b"}, "$ref", "only local references"),
        ({"$ref": "other.json#x"}, "$ref", "only local references"),
    ],
)
def test_bad_anchors_and_references_are_schema_errors(
    schema: dict[str, Any], keyword: str, reason: str
) -> None:
    with pytest.raises(SchemaError) as raised:
        from_json_schema(schema)
    assert raised.value.keyword == keyword
    assert reason in str(raised.value)
