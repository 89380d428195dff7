"""Schemas for tool arguments: a small DSL, raw JSON Schema (2020-12 subset), compiled validators.

``compile(node_or_dict) -> Validator``; ``Validator.validate(value) -> list[ValidationIssue]``
(empty when valid). See docs/schema.md.
"""

from __future__ import annotations

from typing import Any

from fastgate._core import validate as _core
from fastgate.errors import SchemaError as SchemaError
from fastgate.schema._compile import DEFAULT_MAX_ISSUES as DEFAULT_MAX_ISSUES
from fastgate.schema._compile import compile_json_schema
from fastgate.schema._dsl import AnyOf as AnyOf
from fastgate.schema._dsl import Array as Array
from fastgate.schema._dsl import Boolean as Boolean
from fastgate.schema._dsl import Const as Const
from fastgate.schema._dsl import Enum as Enum
from fastgate.schema._dsl import Integer as Integer
from fastgate.schema._dsl import Meta as Meta
from fastgate.schema._dsl import Null as Null
from fastgate.schema._dsl import Nullable as Nullable
from fastgate.schema._dsl import Number as Number
from fastgate.schema._dsl import Object as Object
from fastgate.schema._dsl import OneOf as OneOf
from fastgate.schema._dsl import SchemaNode as SchemaNode
from fastgate.schema._dsl import String as String

ValidationIssue = _core.ValidationIssue
Validator = _core.Validator


def from_json_schema(schema: Any, *, max_issues: int = DEFAULT_MAX_ISSUES) -> Validator:
    """Compile a raw JSON Schema (SPEC §2.3 keyword set) into a ``Validator``.

    Raises ``SchemaError`` (with the keyword and its JSON pointer) for anything outside the
    supported set or malformed; never ignores a keyword it does not enforce.
    """
    return compile_json_schema(schema, max_issues)


def compile(node: Any, *, max_issues: int = DEFAULT_MAX_ISSUES) -> Validator:
    """Compile a DSL node, a raw JSON Schema dict/bool, or return an existing ``Validator``."""
    if isinstance(node, Validator):
        return node
    if isinstance(node, SchemaNode):
        return compile_json_schema(node.to_json_schema(), max_issues)
    if isinstance(node, (dict, bool)):
        return compile_json_schema(node, max_issues)
    raise SchemaError(
        f"cannot compile {type(node).__name__}: expected a schema node, a JSON Schema dict or bool"
    )


__all__ = (
    "DEFAULT_MAX_ISSUES",
    "AnyOf",
    "Array",
    "Boolean",
    "Const",
    "Enum",
    "Integer",
    "Meta",
    "Null",
    "Nullable",
    "Number",
    "Object",
    "OneOf",
    "SchemaError",
    "SchemaNode",
    "String",
    "ValidationIssue",
    "Validator",
    "compile",
    "from_json_schema",
)
