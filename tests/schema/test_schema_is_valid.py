"""``is_valid`` looks declared properties up instead of walking an object's keys: it must agree
with ``validate`` on every kind of object a caller can pass, in both builds."""

from __future__ import annotations

from collections import OrderedDict
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
