"""Schemas for tool arguments: a small DSL, raw JSON Schema (2020-12 subset), compiled validators.

``compile(node_or_dict) -> Validator``; ``Validator.validate(value) -> list[ValidationIssue]``
(empty when valid). See docs/schema.md.
"""

from __future__ import annotations

from fastgate._core import validate as _core
from fastgate.errors import SchemaError as SchemaError
from fastgate.schema._compile import DEFAULT_MAX_ISSUES as DEFAULT_MAX_ISSUES
from fastgate.schema._compile import compile_json_schema as from_json_schema

ValidationIssue = _core.ValidationIssue
Validator = _core.Validator

__all__ = (
    "DEFAULT_MAX_ISSUES",
    "SchemaError",
    "ValidationIssue",
    "Validator",
    "from_json_schema",
)
