"""if/then/else, dependentRequired, dependentSchemas, and the keywords validation ignores
(annotations of JSON Schema 2020-12 and ``x-`` extensions): SPEC §2.3 and §14."""

from __future__ import annotations

from typing import Any

import pytest

from fastgate import define_tool
from fastgate.schema import SchemaError, from_json_schema


def _where(schema: Any, value: Any) -> list[tuple[tuple[str | int, ...], str]]:
    validator = from_json_schema(schema)
    issues = validator.validate(value)
    assert validator.is_valid(value) is (not issues)
    return [(issue.path, issue.keyword) for issue in issues]


# -- if / then / else ---------------------------------------------------------------------------

SOURCE = {
    "type": "object",
    "properties": {"kind": {"enum": ["file", "web"]}, "path": {}, "url": {}},
    "if": {"properties": {"kind": {"const": "file"}}, "required": ["kind"]},
    "then": {"required": ["path"], "properties": {"path": {"type": "string", "minLength": 1}}},
    "else": {"properties": {"url": {"type": "string", "pattern": "^https://"}}},
}


def test_then_applies_when_if_holds_and_reports_at_its_own_keywords() -> None:
    assert _where(SOURCE, {"kind": "file", "path": "/a"}) == []
    assert _where(SOURCE, {"kind": "file"}) == [((), "required")]
    assert _where(SOURCE, {"kind": "file", "path": ""}) == [(("path",), "minLength")]
    (issue,) = from_json_schema(SOURCE).validate({"kind": "file"})
    assert '"path"' in issue.message


def test_else_applies_when_if_fails_and_the_failed_if_is_no_issue() -> None:
    assert _where(SOURCE, {"kind": "web"}) == []  # `if` failed: no issue of its own
    assert _where(SOURCE, {"kind": "web", "url": "http://x"}) == [(("url",), "pattern")]
    assert _where(SOURCE, {"url": 3}) == [(("url",), "type")]  # no kind: `if` fails too


def test_if_then_reports_exactly_as_all_of_would() -> None:
    then = {"properties": {"n": {"type": "integer", "maximum": 3}}, "required": ["m"]}
    conditional = {"if": True, "then": then}
    combined = {"allOf": [then]}
    for value in ({"n": 9}, {"n": "x", "m": 1}, {"n": 1, "m": 1}, 5):
        assert from_json_schema(conditional).validate(value) == from_json_schema(combined).validate(
            value
        )


def test_a_false_branch_reports_false_at_the_value() -> None:
    schema = {"properties": {"a": {"if": {"const": 1}, "then": False, "else": False}}}
    assert _where(schema, {"a": 1}) == [(("a",), "false")]
    assert _where(schema, {"a": 2}) == [(("a",), "false")]


@pytest.mark.parametrize(
    "schema",
    [
        {"if": {"const": 1}},
        {"then": False},
        {"else": False},
        {"allOf": [{"if": {"const": 1}}, {"then": False}, {"else": False}]},
    ],
)
def test_if_without_then_or_else_changes_nothing(schema: dict[str, Any]) -> None:
    values: list[Any] = [1, 2, "x", None, {}]
    for value in values:
        assert _where(schema, value) == []


def test_issues_under_the_if_never_surface_and_the_cap_holds() -> None:
    schema = {
        "if": {"properties": {"a": {"type": "string"}, "b": {"type": "string"}}},
        "then": {"maxProperties": 1},
        "else": {"properties": {"c": {"minimum": 5}}},
    }
    assert _where(schema, {"a": 1, "b": 2, "c": 1}) == [(("c",), "minimum")]
    many = {"if": False, "else": {"items": {"type": "string"}}}
    assert len(from_json_schema(many, max_issues=3).validate(list(range(10)))) == 3


# -- dependentRequired / dependentSchemas -------------------------------------------------------


def test_dependent_required_reports_like_required_one_issue_per_missing_name() -> None:
    schema = {"properties": {"cfg": {"dependentRequired": {"user": ["password", "host"]}}}}
    assert _where(schema, {"cfg": {"user": "u", "password": "p", "host": "h"}}) == []
    assert _where(schema, {"cfg": {"password": "p"}}) == []  # `user` absent: nothing needed
    assert _where(schema, {"cfg": {"user": "u"}}) == [
        (("cfg",), "dependentRequired"),
        (("cfg",), "dependentRequired"),
    ]
    first, second = from_json_schema(schema).validate({"cfg": {"user": "u"}})
    assert '"password"' in first.message and '"user"' in first.message
    assert '"host"' in second.message
    assert _where(schema, {"cfg": ["user"]}) == []  # applies to objects only


def test_dependent_schemas_apply_when_the_property_is_present() -> None:
    schema = {
        "type": "object",
        "dependentSchemas": {
            "card": {"required": ["billing"], "properties": {"billing": {"type": "string"}}},
            "cash": False,
        },
    }
    assert _where(schema, {}) == []
    assert _where(schema, {"billing": 3}) == []  # `card` absent: its schema does not apply
    assert _where(schema, {"card": 1}) == [((), "required")]
    assert _where(schema, {"card": 1, "billing": 3}) == [(("billing",), "type")]
    assert _where(schema, {"cash": 1}) == [((), "false")]


def test_dependent_keywords_walk_mappings_that_are_not_dicts() -> None:
    from types import MappingProxyType

    schema = {"dependentRequired": {"a": ["b"]}, "dependentSchemas": {"a": {"minProperties": 3}}}
    assert _where(schema, MappingProxyType({"a": 1})) == [
        ((), "dependentRequired"),
        ((), "minProperties"),
    ]


# -- compile errors and cycles ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "keyword", "pointer"),
    [
        ({"dependentRequired": {"a": "b"}}, "dependentRequired", "#"),
        ({"dependentRequired": {"a": ["b", "b"]}}, "dependentRequired", "#"),
        ({"dependentRequired": {"a": [1]}}, "dependentRequired", "#"),
        ({"dependentRequired": ["a"]}, "dependentRequired", "#"),
        ({"dependentSchemas": []}, "dependentSchemas", "#"),
        ({"dependentSchemas": {"a": {"sparkle": 1}}}, "sparkle", "#/dependentSchemas/a"),
        ({"if": {"sparkle": 1}}, "sparkle", "#/if"),
        ({"then": {"type": "strin"}}, "type", "#/then"),
        ({"items": {"else": {"patternProperties": {}}}}, "patternProperties", "#/items/else"),
        ({"if": {"$ref": "#"}, "then": {}}, "$ref", "#/if"),
        ({"if": True, "else": {"$ref": "#"}}, "$ref", "#/else"),
        ({"dependentSchemas": {"a": {"$ref": "#"}}}, "$ref", "#/dependentSchemas/a"),
    ],
)
def test_malformed_or_endless_conditionals_are_schema_errors(
    schema: dict[str, Any], keyword: str, pointer: str
) -> None:
    with pytest.raises(SchemaError) as info:
        from_json_schema(schema)
    assert info.value.keyword == keyword
    # A cycle's pointer names a node on it; otherwise the location itself.
    assert info.value.pointer == pointer or keyword == "$ref"


@pytest.mark.parametrize(
    "schema", [{"dependentSchemas": {"a": 3}}, {"then": "x"}, {"if": None, "then": {}}]
)
def test_a_subschema_that_is_not_a_schema_is_a_schema_error(schema: dict[str, Any]) -> None:
    with pytest.raises(SchemaError):
        from_json_schema(schema)


def test_recursion_through_the_new_keywords_by_ref() -> None:
    # A tree whose nodes may have children only once they are declared a branch.
    schema = {
        "$defs": {
            "node": {
                "type": "object",
                "if": {"properties": {"branch": {"const": True}}, "required": ["branch"]},
                "then": {"properties": {"children": {"items": {"$ref": "#/$defs/node"}}}},
                "else": {"not": {"required": ["children"]}},
                "dependentSchemas": {"children": {"required": ["branch"]}},
            }
        },
        "$ref": "#/$defs/node",
    }
    leaf = {"branch": False}
    tree = {"branch": True, "children": [leaf, {"branch": True, "children": [leaf]}]}
    assert _where(schema, tree) == []
    bad = {"branch": True, "children": [{"branch": False, "children": []}]}
    assert [k for _, k in _where(schema, bad)] == ["not"]
    deep: Any = leaf
    for _ in range(20_000):
        deep = {"branch": True, "children": [deep]}
    assert _where(schema, deep) == []


# -- stack safety -------------------------------------------------------------------------------


def _nest(levels: int, wrap: Any, bottom: Any) -> Any:
    schema = bottom
    for _ in range(levels):
        schema = wrap(schema)
    return schema


@pytest.mark.parametrize(
    ("wrap", "failures"),
    [
        (lambda s: {"if": True, "then": s}, 1),
        (lambda s: {"if": False, "else": s}, 1),
        (lambda s: {"if": s, "then": True, "else": True}, 0),  # the `if` decides nothing
        (lambda s: {"dependentSchemas": {"a": s}}, 1),
    ],
    ids=["then", "else", "if", "dependentSchemas"],
)
def test_ten_thousand_levels_at_one_location(wrap: Any, failures: int) -> None:
    validator = from_json_schema(_nest(10_000, wrap, {"required": ["b"]}))
    assert validator.validate({"a": 1, "b": 2}) == []
    assert len(validator.validate({"a": 1})) == failures


@pytest.mark.parametrize("levels", [9_999, 10_000])
def test_ten_thousand_ifs_inside_ifs_decide_in_turn(levels: int) -> None:
    # Level 1 fails exactly when `b` is present, and each level fails exactly when the one
    # inside it holds: the answer alternates with the depth, so every `if` was really decided.
    validator = from_json_schema(
        _nest(levels, lambda s: {"if": s, "then": False}, {"required": ["b"]})
    )
    fails_with_b = levels % 2 == 1
    assert validator.is_valid({"b": 1}) is not fails_with_b
    assert validator.is_valid({}) is fails_with_b
    assert [i.keyword for i in validator.validate({"b": 1} if fails_with_b else {})] == ["false"]


def test_ten_thousand_levels_through_then_into_the_value() -> None:
    schema = _nest(
        10_000,
        lambda s: {"if": {"type": "object"}, "then": {"properties": {"a": s}, "required": ["a"]}},
        {"type": "string", "minLength": 2},
    )
    validator = from_json_schema(schema)
    assert validator.validate(_nest(10_000, lambda v: {"a": v}, "ok")) == []
    (issue,) = validator.validate(_nest(10_000, lambda v: {"a": v}, "x"))
    assert (issue.path, issue.keyword) == (("a",) * 10_000, "minLength")
    assert not validator.is_valid(_nest(10_000, lambda v: {"a": v}, "x"))


# -- keywords validation ignores ----------------------------------------------------------------

ANNOTATIONS: dict[str, Any] = {
    "title": "T",
    "description": "D",
    "default": {"anything": [1]},
    "examples": [1, "x"],
    "deprecated": True,
    "readOnly": True,
    "writeOnly": False,
    "$comment": "c",
    "format": "email",
    "contentMediaType": "application/json",
    "contentEncoding": "base64",
    "contentSchema": {"type": "object", "required": ["never-enforced"]},
    "x-mcp-header": "Region",
    "x-": 1,
    "x-vendor": {"sparkle": {"not-a-schema": True}},
}


@pytest.mark.parametrize("keyword", list(ANNOTATIONS))
def test_annotation_and_extension_keywords_change_nothing(keyword: str) -> None:
    plain = {"type": "object", "properties": {"a": {"type": "string"}}}
    annotated = {
        "type": "object",
        keyword: ANNOTATIONS[keyword],
        "properties": {"a": {"type": "string", keyword: ANNOTATIONS[keyword]}},
    }
    for value in ({"a": "x"}, {"a": 1}, {}, "not json text", 3):
        assert from_json_schema(annotated).validate(value) == from_json_schema(plain).validate(
            value
        )


@pytest.mark.parametrize("keyword", ["sparkle", "x_header", "xheader", "X-Header", "mcp-header"])
def test_other_unknown_words_stay_refused(keyword: str) -> None:
    with pytest.raises(SchemaError) as info:
        from_json_schema({"properties": {"a": {keyword: 1}}})
    assert info.value.keyword == keyword
    assert info.value.pointer == "#/properties/a"


def test_an_mcp_tool_schema_with_headers_and_conditionals_is_enforced() -> None:
    input_schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "title": "deploy arguments",
        "properties": {
            "region": {
                "type": "string",
                "description": "where to deploy",
                "x-mcp-header": "Region",
                "enum": ["eu", "us"],
            },
            "tenant": {"type": "string", "x-mcp-header": "Tenant", "format": "uuid"},
            "mode": {"enum": ["dry", "live"], "default": "dry"},
            "approval_ticket": {"type": "string", "pattern": "^CHG-[0-9]+$"},
        },
        "required": ["region", "mode"],
        "additionalProperties": False,
        "if": {"properties": {"mode": {"const": "live"}}},
        "then": {"required": ["approval_ticket"]},
        "dependentRequired": {"tenant": ["region"]},
        "x-mcp-audience": "ops",
    }

    async def execute(args: Any, ctx: Any) -> Any:
        return args

    definition = define_tool("deploy", "Deploy", input_schema, execute)
    validator = definition.validator
    assert validator.validate({"region": "eu", "mode": "dry"}) == []
    assert validator.validate({"region": "eu", "mode": "live", "approval_ticket": "CHG-7"}) == []
    (issue,) = validator.validate({"region": "eu", "mode": "live"})
    assert (issue.path, issue.keyword) == ((), "required")
    (issue,) = validator.validate({"region": "mars", "mode": "dry"})
    assert (issue.path, issue.keyword) == (("region",), "enum")
