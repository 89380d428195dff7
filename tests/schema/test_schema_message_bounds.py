"""Issue messages stay short whatever the value or the schema hold: a key is cut as a string
value is (60 characters), a long path is named by its head and tail, the allowed names of an
``additionalProperties`` issue are listed up to a bound. Both builds say the same. The issue's
``path`` itself stays exact."""

from __future__ import annotations

import asyncio
from types import ModuleType

import pytest

from fastgate import ExecutionContext
from fastgate._core import _validate_py as pure_core
from fastgate._core import validate as active_core
from fastgate.schema._compile import compile_json_schema
from tests.pipeline_kit import executor, tool


def _cores() -> list[ModuleType]:
    return [pure_core] if active_core is pure_core else [pure_core, active_core]


def _messages(schema: object, value: object) -> list[list[str]]:
    """The messages of each build (pure first), which must agree."""
    found = []
    for core in _cores():
        issues = compile_json_schema(schema, 50, core).validate(value)
        found.append([issue.message for issue in issues])
    assert all(messages == found[0] for messages in found)
    return found


CLOSED: dict[str, object] = {
    "type": "object",
    "properties": {"command": {"type": "string"}},
    "additionalProperties": False,
}


@pytest.mark.parametrize("key", ["k" * 1_000_000, "-" * 1_000_000, "é" * 100_000])
def test_a_long_key_is_cut(key: str) -> None:
    for messages in _messages(CLOSED, {"command": "ls", key: 1}):
        (message,) = messages
        assert len(message) < 200
        assert message.startswith('["' + key[:57] + '..."]: unexpected property')
    for core in _cores():
        (issue,) = compile_json_schema(CLOSED, 50, core).validate({key: 1, "command": "ls"})
        assert issue.path == (key,)  # the path is exact: only the message is cut


def test_a_key_of_sixty_characters_is_kept_whole() -> None:
    key = "k" * 60
    for messages in _messages(CLOSED, {key: 1, "command": "ls"}):
        assert messages == [f"{key}: unexpected property (allowed properties: command)"]


def test_many_long_keys_with_wrong_values() -> None:
    value = {f"k{i}_" + "a" * 200_000: 1 for i in range(50)}
    for messages in _messages({"additionalProperties": {"type": "string"}}, value):
        assert len(messages) == 50
        assert sum(len(m) for m in messages) < 50 * 200


def test_a_deep_path_is_named_by_its_head_and_tail() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"$ref": "#"}},
        "additionalProperties": False,
    }
    deep: dict[str, object] = {"b": 1}
    for _ in range(30_000):
        deep = {"a": deep}
    for messages in _messages(schema, deep):
        (message,) = messages
        assert message == "a.a.a.a…(29991 more)….a.a.a.a.a.b: unexpected property " + (
            "(allowed properties: a)"
        )
    (issue,) = compile_json_schema(schema, 50, active_core).validate(deep)
    assert len(issue.path) == 30_001


def test_a_path_of_eleven_keys_is_whole() -> None:
    schema: dict[str, object] = {"type": "integer"}
    value: object = "x"
    for _ in range(11):
        schema = {"properties": {"a": schema}}
        value = {"a": value}
    for messages in _messages(schema, value):
        assert messages == ['a.a.a.a.a.a.a.a.a.a.a: expected an integer, got the string "x"']


def test_an_index_heads_a_cut_path() -> None:
    schema: dict[str, object] = {"type": "integer"}
    value: object = "x"
    for _ in range(12):
        schema = {"items": schema}
        value = [value]
    for messages in _messages(schema, value):
        assert messages == [
            '[0][0][0][0]…(2 more)…[0][0][0][0][0][0]: expected an integer, got the string "x"'
        ]


def test_the_allowed_names_are_listed_up_to_a_bound() -> None:
    wide = {
        "type": "object",
        "properties": {f"option_{i}": {"type": "string"} for i in range(5000)},
        "additionalProperties": False,
    }
    value = {f"x{i}": "v" for i in range(50)}
    for messages in _messages(wide, value):
        assert len(messages) == 50
        first = ", ".join(f"option_{i}" for i in range(20))
        assert messages[0] == f"x0: unexpected property (allowed properties: {first}, … 4980 more)"
        assert sum(len(m) for m in messages) < 50 * 400


def test_long_declared_names_are_cut_in_the_list() -> None:
    name = "p" * 500
    schema = {"properties": {name: {}}, "additionalProperties": False}
    for messages in _messages(schema, {"x": 1}):
        assert messages == [f"x: unexpected property (allowed properties: {'p' * 57}...)"]


def test_a_long_pattern_is_cut_in_the_message() -> None:
    pattern = "^(" + "|".join(f"word{i}" for i in range(2000)) + ")$"
    for messages in _messages({"pattern": pattern}, "nope"):
        (message,) = messages
        assert len(message) < 300
        assert pattern[:197] + "..." in message


def test_the_model_sees_a_bounded_refusal() -> None:
    """End to end: the executor's INVALID_ARGS content for hostile keys stays small."""
    wide = {
        "type": "object",
        "properties": {f"option_{i}": {"type": "string"} for i in range(5000)},
        "additionalProperties": False,
    }

    async def main() -> list[int]:
        ex = executor(
            tool("closed", lambda a, c: "x", CLOSED), tool("wide", lambda a, c: "x", wide)
        )
        sizes = []
        for name, args in [
            ("closed", {"command": "ls", "k" * 1_000_000: 1}),
            ("wide", {f"x{i}": "v" for i in range(50)}),
        ]:
            result = await ex.execute(name, args, ExecutionContext())
            assert result.error is not None and result.error.code.value == "INVALID_ARGS"
            sizes.append(len(result.content))
        return sizes

    closed, wide_size = asyncio.run(main())
    assert closed < 300
    assert wide_size < 50 * 400
