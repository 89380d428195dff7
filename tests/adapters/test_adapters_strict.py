"""The strict form says the same as the tool's schema: every valid call, written the strict way
(absent optional fields as null), is valid under the strict schema and reads back unchanged; and
what the strict schema accepts, read back, the tool's own validator accepts."""

from __future__ import annotations

from typing import Any

import jsonschema
from hypothesis import given
from hypothesis import strategies as st

from fastgate.adapters._strict import strict_form
from fastgate.schema import from_json_schema

ITEM = {
    "type": "object",
    "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "minimum": 1}},
    "required": ["sku"],
    "additionalProperties": False,
}
ORDER = {
    "type": "object",
    "properties": {
        "customer": {"type": "string"},
        "note": {"type": "string", "description": "optional, never null"},
        "rush": {"type": "boolean"},
        "items": {"type": "array", "items": ITEM, "maxItems": 5},
        "address": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
        "coupon": {"type": ["string", "null"], "default": None},
        "tier": {"enum": ["gold", "silver"]},
    },
    "required": ["customer", "items"],
    "additionalProperties": False,
}

text = st.text(max_size=5)
item = st.fixed_dictionaries({"sku": text}, optional={"qty": st.integers(1, 9)})
address = st.fixed_dictionaries({"city": text}, optional={"zip": text})
order = st.fixed_dictionaries(
    {"customer": text, "items": st.lists(item, max_size=5)},
    optional={
        "note": text,
        "rush": st.booleans(),
        "address": address,
        "coupon": st.none() | text,
        "tier": st.sampled_from(["gold", "silver"]),
    },
)


def _as_strict(value: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """How a strict-mode model writes ``value``: every property present, absent ones null."""
    out: dict[str, Any] = {}
    for name, prop in schema["properties"].items():
        given_value = value.get(name)
        if prop.get("type") == "object" and given_value is not None:
            given_value = _as_strict(given_value, prop)
        elif prop.get("type") == "array" and given_value is not None:
            given_value = [_as_strict(v, prop["items"]) for v in given_value]
        out[name] = given_value
    return out


FORM = strict_form(ORDER)
VALIDATOR = from_json_schema(ORDER)


@given(order)
def test_every_valid_call_round_trips_through_the_strict_form(value: dict[str, Any]) -> None:
    assert FORM is not None
    assert VALIDATOR.validate(value) == []
    written = _as_strict(value, ORDER)
    jsonschema.Draft202012Validator(FORM.schema).validate(written)
    decoded = FORM.decode(written)
    # coupon's null is its declared default: passed on as null rather than dropped.
    expected = {**value, "coupon": value.get("coupon")}
    assert decoded == expected
    assert VALIDATOR.validate(decoded) == []


strict_values = st.fixed_dictionaries(
    {
        "customer": text,
        "note": st.none() | text,
        "rush": st.none() | st.booleans(),
        "items": st.lists(
            st.fixed_dictionaries({"sku": text, "qty": st.none() | st.integers(1, 9)}), max_size=5
        ),
        "address": st.none() | st.fixed_dictionaries({"city": text, "zip": st.none() | text}),
        "coupon": st.none() | text,
        "tier": st.none() | st.sampled_from(["gold", "silver"]),
    }
)


@given(strict_values)
def test_what_the_strict_schema_accepts_the_tool_accepts(value: dict[str, Any]) -> None:
    assert FORM is not None
    jsonschema.Draft202012Validator(FORM.schema).validate(value)
    assert VALIDATOR.validate(FORM.decode(value)) == []


def test_a_chain_of_refs_that_loops_decodes_without_hanging() -> None:
    # Registration refuses such a schema; the strict form, made from any parameters, must still
    # end: each definition only names the next, back to the first.
    defs = {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/c"}, "c": {"$ref": "#/$defs/a"}}
    parameters = {
        "type": "object",
        "properties": {"x": {"$ref": "#/$defs/a"}},
        "required": ["x"],
        "additionalProperties": False,
        "$defs": defs,
    }
    form = strict_form(parameters)
    assert form is not None
    assert form.decode({"x": {"z": None}}) == {"x": {"z": None}}
