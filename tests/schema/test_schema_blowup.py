"""A schema that would check one value against exponentially many subschemas is refused when it
is compiled, whatever keyword shares the subschema; a large schema whose subschemas are each
reached once or a few times compiles as before. (A tool from such a schema is quarantined by
whoever compiles it: an MCP server's, a settings file's.)"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from fastgate.schema import SchemaError, from_json_schema
from fastgate.schema._compile import MAX_CHECKS_AT_ONE_PLACE


def doubling(levels: int, step: Callable[[str], Any]) -> dict[str, Any]:
    """``levels`` definitions, each applying the one below twice (through ``step``)."""
    defs: dict[str, Any] = {"d0": {"type": "object"}}
    for level in range(1, levels + 1):
        defs[f"d{level}"] = step(f"#/$defs/d{level - 1}")
    return {"$defs": defs, "$ref": f"#/$defs/d{levels}"}


SHARING = {
    "allOf": lambda ref: {"allOf": [{"$ref": ref}, {"$ref": ref}]},
    "anyOf": lambda ref: {"anyOf": [{"$ref": ref}, {"$ref": ref}, {"type": "null"}]},
    "oneOf": lambda ref: {"oneOf": [{"$ref": ref}, {"not": {"$ref": ref}}]},
    "if/then/else": lambda ref: {"if": {"$ref": ref}, "then": {"$ref": ref}, "else": True},
    "$ref beside allOf": lambda ref: {"$ref": ref, "allOf": [{"$ref": ref}]},
    "dependentSchemas": lambda ref: {"dependentSchemas": {"a": {"$ref": ref}, "b": {"$ref": ref}}},
}


@pytest.mark.parametrize("keyword", list(SHARING))
def test_an_exponential_schema_is_refused_at_compile_time(keyword: str) -> None:
    schema = doubling(40, SHARING[keyword])  # a few KB of text, 2**40 checks of one value
    started = time.monotonic()
    with pytest.raises(SchemaError, match="checked against more than"):
        from_json_schema(schema)
    assert time.monotonic() - started < 5  # refused by counting, not by trying


@pytest.mark.parametrize("keyword", list(SHARING))
def test_a_little_sharing_still_compiles_and_validates(keyword: str) -> None:
    validator = from_json_schema(doubling(6, SHARING[keyword]))  # 2**6: nothing to fear
    validator.validate({"a": 1, "b": 2})


def test_the_bound_grows_with_the_schema() -> None:
    # 3,000 distinct branches, each reached once: as many checks as the schema has parts.
    wide = {"anyOf": [{"const": n} for n in range(3_000)] * 2}
    assert from_json_schema(wide).is_valid(2_999)
    # A definition of 200 parts used by 600 branches at one place: 120,000 checks of a value,
    # past the bound (its text repeats the reference only 600 times); by 80, 16,000: fine.
    part = {"anyOf": [{"const": f"v{n}"} for n in range(200)]}
    shared = {"$defs": {"p": part}, "anyOf": [{"$ref": "#/$defs/p"}] * 600}
    assert 600 * 200 > MAX_CHECKS_AT_ONE_PLACE > 80 * 200
    with pytest.raises(SchemaError, match="checked against more than"):
        from_json_schema(shared)
    assert from_json_schema({**shared, "anyOf": [{"$ref": "#/$defs/p"}] * 80}).is_valid("v7")
