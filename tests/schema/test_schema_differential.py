"""Differential property tests: fastgate vs the reference ``jsonschema`` package, and the pure
core vs the compiled core (identical issues, in the same order, with the same words)."""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Iterator
from importlib.machinery import EXTENSION_SUFFIXES
from types import ModuleType
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastgate._core import _validate_py as pure_core
from fastgate.schema._compile import compile_json_schema

NAMES = ["a", "b", "c"]
PATTERNS = ["^a", "b$", "^[ab]+$", "a|B", "^.?$", "x*", "[^a]"]
TYPES = ["null", "boolean", "integer", "number", "string", "array", "object"]

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-5, 5)
    | st.floats(-5, 5, allow_nan=False).map(lambda f: round(f, 1))
    | st.text(alphabet="abAB \n", max_size=3)
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(NAMES), inner, max_size=3)
    ),
    max_leaves=8,
)
small = st.integers(0, 3)


def _fragments(child: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        st.sampled_from(TYPES).map(lambda t: {"type": t}),
        st.lists(st.sampled_from(TYPES), min_size=1, max_size=3, unique=True).map(
            lambda ts: {"type": ts}
        ),
        st.integers(-3, 3).map(lambda n: {"minimum": n}),
        st.integers(-3, 3).map(lambda n: {"maximum": n}),
        st.floats(-3, 3, allow_nan=False).map(lambda n: {"exclusiveMinimum": round(n, 1)}),
        st.integers(-3, 3).map(lambda n: {"exclusiveMaximum": n}),
        st.sampled_from([1, 2, 3, 0.5]).map(lambda n: {"multipleOf": n}),
        small.map(lambda n: {"minLength": n}),
        small.map(lambda n: {"maxLength": n}),
        st.sampled_from(PATTERNS).map(lambda p: {"pattern": p}),
        st.lists(values, min_size=1, max_size=3).map(lambda vs: {"enum": vs}),
        values.map(lambda v: {"const": v}),
        small.map(lambda n: {"minItems": n}),
        small.map(lambda n: {"maxItems": n}),
        st.booleans().map(lambda b: {"uniqueItems": b}),
        st.lists(st.sampled_from(NAMES), max_size=2, unique=True).map(lambda r: {"required": r}),
        small.map(lambda n: {"minProperties": n}),
        small.map(lambda n: {"maxProperties": n}),
        st.dictionaries(st.sampled_from(NAMES), child, max_size=2).map(lambda p: {"properties": p}),
        child.map(lambda c: {"additionalProperties": c}),
        child.map(lambda c: {"items": c}),
        st.lists(child, min_size=1, max_size=2).map(lambda cs: {"prefixItems": cs}),
        st.lists(child, min_size=1, max_size=3).map(lambda cs: {"allOf": cs}),
        st.lists(child, min_size=1, max_size=3).map(lambda cs: {"anyOf": cs}),
        st.lists(child, min_size=1, max_size=3).map(lambda cs: {"oneOf": cs}),
        child.map(lambda c: {"not": c}),
        st.tuples(child, child, child).map(lambda t: {"if": t[0], "then": t[1], "else": t[2]}),
        st.tuples(child, child).map(lambda t: {"if": t[0], "then": t[1]}),
        st.tuples(child, child).map(lambda t: {"if": t[0], "else": t[1]}),
        st.dictionaries(
            st.sampled_from(NAMES),
            st.lists(st.sampled_from(NAMES), min_size=1, max_size=2, unique=True),
            min_size=1,
            max_size=2,
        ).map(lambda d: {"dependentRequired": d}),
        st.dictionaries(st.sampled_from(NAMES), child, min_size=1, max_size=2).map(
            lambda d: {"dependentSchemas": d}
        ),
        st.sampled_from(["x-mcp-header", "title", "format", "contentSchema"]).map(
            lambda k: {k: {"type": "sparkle"} if k != "format" else "email"}
        ),
    )


def _merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for part in parts:
        merged.update(part)
    return merged


schemas: st.SearchStrategy[Any] = st.recursive(
    st.booleans() | st.just({}),
    lambda child: st.lists(_fragments(child), min_size=1, max_size=3).map(_merge),
    max_leaves=6,
)


def _ecma_pattern(
    validator: Any, pattern: str, instance: Any, schema: Any
) -> Iterator[jsonschema.ValidationError]:
    """``pattern`` as ECMA-262 reads it, for the patterns above. jsonschema hands patterns to
    Python's ``re``, whose ``$`` also matches before a final newline; ECMA's only at the very
    end, as fastgate's (docs/decisions.md, "Patterns")."""
    python = pattern[:-1] + r"\Z" if pattern.endswith("$") else pattern
    if validator.is_type(instance, "string") and re.search(python, instance) is None:
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


ECMAValidator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator, {"pattern": _ecma_pattern}
)


def test_the_reference_reads_patterns_as_ecma_does() -> None:
    for pattern, text, valid in [("^[ab]+$", "ab", True), ("^[ab]+$", "a\n", False)]:
        assert ECMAValidator({"pattern": pattern}).is_valid(text) is valid
        assert compile_json_schema({"pattern": pattern}).is_valid(text) is valid


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=schemas, instances=st.lists(values, min_size=1, max_size=5))
def test_agrees_with_jsonschema(schema: Any, instances: list[Any]) -> None:
    ours = compile_json_schema(schema)
    reference = ECMAValidator(schema)
    for instance in instances:
        expected = reference.is_valid(instance)
        assert ours.is_valid(instance) is expected, (schema, instance)
        assert (ours.validate(instance) == []) is expected, (schema, instance)


def _compiled_core() -> ModuleType | None:
    try:
        module = importlib.import_module("fastgate._core._validate_c")
    except ImportError:
        module = None
    if module is None or not str(module.__file__).endswith(tuple(EXTENSION_SUFFIXES)):
        if os.environ.get("FASTGATE_REQUIRE_EXTENSIONS") == "1":
            raise AssertionError("compiled validator required but not built")
        return None
    return module


COMPILED = _compiled_core()


def _issues(validator: Any, value: Any) -> list[tuple[Any, str, str]]:
    return [(i.path, i.keyword, i.message) for i in validator.validate(value)]


@pytest.mark.skipif(COMPILED is None, reason="compiled validator not built")
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=schemas, instances=st.lists(values, min_size=1, max_size=5))
def test_pure_and_compiled_give_identical_issues(schema: Any, instances: list[Any]) -> None:
    pure = compile_json_schema(schema, 50, pure_core)
    compiled = compile_json_schema(schema, 50, COMPILED)
    for instance in instances:
        assert _issues(pure, instance) == _issues(compiled, instance), (schema, instance)
        assert pure.is_valid(instance) == compiled.is_valid(instance)
