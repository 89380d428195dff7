"""The strict form says the same as the tool's schema: every valid call, written the strict way
(absent optional fields as null), is valid under the strict schema and reads back unchanged; and
what the strict schema accepts, read back, the tool's own validator accepts. The strict schema
is checked with ``format`` enforced, as strict mode enforces it (jsonschema checks ``email``,
``ipv4``, ``date`` and ``uuid`` without optional packages)."""

from __future__ import annotations

import re
from typing import Any

import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fastgate import ToolRegistry, define_tool
from fastgate.adapters import openai as fg_openai
from fastgate.adapters._portable import portable_pattern
from fastgate.adapters._strict import strict_form
from fastgate.schema import from_json_schema

FORMATS = jsonschema.Draft202012Validator.FORMAT_CHECKER
SKU = r"^[A-Z]{2}-\d+$"  # \d: ECMA's ASCII digits, spelled [0-9] in the strict form
ITEM = {
    "type": "object",
    "properties": {
        "sku": {"type": "string", "pattern": SKU},
        "qty": {"type": "integer", "minimum": 1, "multipleOf": 1},
    },
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
        # Annotations to fastgate: the tool takes any string.
        "contact": {"type": "string", "format": "email"},
        "host": {"type": "string", "format": "ipv4"},
        "day": {"type": "string", "format": "date"},
        "ref": {"type": "string", "format": "uuid"},
    },
    "required": ["customer", "items"],
    "additionalProperties": False,
}

text = st.text(max_size=5)
sku = st.from_regex(r"[A-Z]{2}-[0-9]{1,4}", fullmatch=True)
item = st.fixed_dictionaries({"sku": sku}, optional={"qty": st.integers(1, 9)})
address = st.fixed_dictionaries({"city": text}, optional={"zip": text})
order = st.fixed_dictionaries(
    {"customer": text, "items": st.lists(item, max_size=5)},
    optional={
        "note": text,
        "rush": st.booleans(),
        "address": address,
        "coupon": st.none() | text,
        "tier": st.sampled_from(["gold", "silver"]),
        "contact": text,
        "host": text,
        "day": text,
        "ref": text,
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
    jsonschema.Draft202012Validator(FORM.schema, format_checker=FORMATS).validate(written)
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
            st.fixed_dictionaries({"sku": sku, "qty": st.none() | st.integers(1, 9)}), max_size=5
        ),
        "address": st.none() | st.fixed_dictionaries({"city": text, "zip": st.none() | text}),
        "coupon": st.none() | text,
        "tier": st.none() | st.sampled_from(["gold", "silver"]),
        "contact": st.none() | text,
        "host": st.none() | text,
        "day": st.none() | text,
        "ref": st.none() | text,
    }
)


@given(strict_values)
def test_what_the_strict_schema_accepts_the_tool_accepts(value: dict[str, Any]) -> None:
    assert FORM is not None
    jsonschema.Draft202012Validator(FORM.schema, format_checker=FORMATS).validate(value)
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


def test_a_format_the_tool_ignores_does_not_narrow_the_strict_form() -> None:
    parameters = {
        "type": "object",
        "properties": {"to": {"type": "string", "format": "email", "description": "Who."}},
        "required": ["to"],
        "additionalProperties": False,
    }
    reg = ToolRegistry()
    reg.register(define_tool("send", "Send it.", parameters, lambda args, ctx: "sent"))
    (tool,) = fg_openai.tools(reg, strict=True)
    function: Any = tool["function"]
    assert function["strict"] is True
    assert function["parameters"]["properties"]["to"] == {"type": "string", "description": "Who."}
    # fastgate takes "ops-team" for an email; so must what strict mode lets the model send.
    assert from_json_schema(parameters).validate({"to": "ops-team"}) == []
    strict = jsonschema.Draft202012Validator(function["parameters"], format_checker=FORMATS)
    assert strict.is_valid({"to": "ops-team"})


# Patterns whose meaning every dialect shares once written out (anchored, ECMA's \d and \w).
PORTABLE = [
    "^[a-z0-9_-]+$",
    "ops",
    "^https?://",
    r"^\d{4}-\d{2}-\d{2}$",
    r"^[\w.]+@(ex|example)\.com$",
    r"v[0-9]+(\.[0-9]+){0,2}$",
    r"^\$[0-9]*\\$",
]
ODD_TEXT = st.text(alphabet="ab09-_.:/$@\\ \n\u0663xyzhtpsvcomex", max_size=14)


@pytest.mark.parametrize("pattern", PORTABLE)
@given(data=st.data())
def test_a_portable_pattern_matches_what_fastgate_matches(pattern: str, data: Any) -> None:
    portable = portable_pattern(pattern)
    assert portable is not None and portable.startswith("^") and portable.endswith("$")
    # Python's re reads \d as every Unicode digit and "$" as "before a last newline": the
    # written-out form must still agree with fastgate's ECMA reading.
    value = data.draw(st.from_regex(pattern) | ODD_TEXT)
    expected = from_json_schema({"type": "string", "pattern": pattern}).is_valid(value)
    assert (re.fullmatch(portable, value) is not None) is expected


@pytest.mark.parametrize(
    "keywords",
    [
        {"pattern": ".+"},  # "." excludes different line terminators per dialect
        {"pattern": r"^\s*$"},  # \s: different space sets
        {"pattern": "^[^a]$"},  # a negated set: code units or code points
        {"pattern": "^a|b$"},  # anchors bound to one branch each
        {"pattern": "^(?<n>a)$"},  # named groups: spelled differently per dialect
        {"pattern": "^a*?$"},
        {"pattern": "^\u00e9$"},
        {"pattern": "a{,2}"},  # text in ECMA, a count elsewhere
        {"pattern": "^[a&&b]$"},  # a set intersection to some dialects
        {"type": "number", "multipleOf": 0.0001},  # exact in fastgate, float elsewhere
    ],
    ids=["dot", "space", "negated", "alternation", "named", "lazy", "non-ascii", "count", "and",
         "fractional-multipleOf"],
)  # fmt: skip
def test_what_dialects_may_read_differently_stays_non_strict(keywords: dict[str, Any]) -> None:
    prop = {"type": "string", **keywords}
    parameters = {
        "type": "object",
        "properties": {"a": prop},
        "required": ["a"],
        "additionalProperties": False,
    }
    from_json_schema(parameters)  # a schema fastgate takes
    assert strict_form(parameters) is None


def test_portable_patterns_and_whole_multiples_are_kept() -> None:
    parameters = {
        "type": "object",
        "properties": {
            "id": {"type": "string", "pattern": r"^[\w-]{3,8}$"},
            "path": {"type": "string", "pattern": "^/"},
            "count": {"type": "integer", "multipleOf": 5},
        },
        "required": ["id", "path", "count"],
        "additionalProperties": False,
    }
    form = strict_form(parameters)
    assert form is not None
    props = form.schema["properties"]
    assert props["id"]["pattern"] == "^[A-Za-z0-9_-]{3,8}$"
    assert props["path"]["pattern"] == "^/[\\s\\S]*$"
    assert props["count"]["multipleOf"] == 5
