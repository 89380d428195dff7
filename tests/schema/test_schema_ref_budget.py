"""Shared subschemas reached through edges that move into the value (``$ref`` under
``properties``/``items`` inside ``allOf``/``oneOf``/...) can check the parts of a small value a
number of times exponential in its depth; the compile-time count of one place does not see it.
Every ``validate``/``is_valid`` call has a budget of checks in proportion to the value's size (with
a generous floor): past it, validation stops with one ``budget`` issue at the root (``is_valid``:
False), quickly, the same in both builds, so a tool's call is refused with INVALID_ARGS (its output
with OUTPUT_INVALID) and the event loop goes on. Ordinary recursive schemas, however deep or large
the value, never meet the budget."""

from __future__ import annotations

import functools
import re
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from fastgate._core import _validate_py as pure_core
from fastgate._core import validate as active_core
from fastgate.schema._compile import compile_json_schema
from tests.child_kit import run_python

ROOT = Path(__file__).resolve().parents[2]


def _cores() -> list[ModuleType]:
    return [pure_core] if active_core is pure_core else [pure_core, active_core]


def _core_id(core: ModuleType) -> str:
    return "pure" if core is pure_core else "compiled"


def _chain(levels: int) -> dict[str, Any]:
    """No cycle at all: ``levels`` definitions, each applying the one below twice, one level
    down in the value (so no place is checked more than twice: the compiler accepts it)."""
    defs: dict[str, Any] = {"d0": {}}
    for level in range(1, levels + 1):
        below = {"properties": {"x": {"$ref": f"#/$defs/d{level - 1}"}}}
        defs[f"d{level}"] = {"allOf": [below, below]}
    return {"$defs": defs, "$ref": f"#/$defs/d{levels}"}


# (schema, shape of the value, depths): every one compiles, and its checks double per level.
BLOWUPS: dict[str, tuple[Any, str, tuple[int, ...]]] = {
    "allOf twice -> properties.x -> #": (
        {"allOf": [{"properties": {"x": {"$ref": "#"}}}, {"properties": {"x": {"$ref": "#"}}}]},
        "dict",
        (24, 40, 1000),
    ),
    "oneOf of overlapping items -> #": (
        {
            "oneOf": [
                {"items": {"$ref": "#"}},
                {"items": {"$ref": "#"}, "minItems": 1},
                {"type": "string"},
            ]
        },
        "list",
        (24, 40, 1000),
    ),
    "if/then -> properties.x -> #": (
        {
            "if": {"properties": {"x": {"$ref": "#"}}},
            "then": {"properties": {"x": {"$ref": "#"}}},
        },
        "dict",
        (40,),
    ),
    "additionalProperties twice -> #": (
        {
            "allOf": [
                {"additionalProperties": {"$ref": "#"}},
                {"additionalProperties": {"$ref": "#"}},
            ]
        },
        "dict",
        (40,),
    ),
    "anyOf that fails at the bottom": (
        {
            "anyOf": [{"items": {"$ref": "#"}, "minItems": 1}, {"items": {"$ref": "#"}}],
            "not": {"const": "leaf"},
        },
        "list",
        (40,),
    ),
    "acyclic chain of 40 definitions": (_chain(40), "dict", (40,)),
}

# Each case in a child process with a time limit: without the budget these run for hours, and a
# hang must fail the test, not stall the run.
CHILD = textwrap.dedent(
    """
    import json, sys, time
    sys.path.insert(0, sys.argv[1])
    from fastgate._core import _validate_py as pure, validate as active
    from fastgate.schema._compile import compile_json_schema

    def deep(shape, depth):
        value = "leaf" if shape == "list" else 1
        for _ in range(depth):
            value = [value] if shape == "list" else {"x": value}
        return value

    cases = json.loads(sys.argv[2])
    for name, (schema, shape, depths) in cases.items():
        for depth in depths:
            value = deep(shape, depth)
            seen = []
            for core in [pure] if active is pure else [pure, active]:
                validator = compile_json_schema(schema, 50, core)
                started = time.monotonic()
                issues = validator.validate(value)
                valid = validator.is_valid(value)
                took = time.monotonic() - started
                seen.append([(i.path, i.keyword, i.message) for i in issues])
                assert [(i.path, i.keyword) for i in issues] == [((), "budget")], (name, issues)
                assert "validation stopped after" in issues[0].message, issues[0].message
                assert valid is False, name
                print(f"{name} depth={depth} {core.__name__} {took:.2f}s", file=sys.stderr)
            assert all(s == seen[0] for s in seen), (name, seen)  # same words in both builds
    print("done")
    """
)


def test_exponential_checks_stop_at_the_budget() -> None:
    import json

    stalled = "a schema whose checks double with the value's depth stalled validation"
    out = run_python(CHILD, str(ROOT), json.dumps(BLOWUPS), timeout=100, stalled=stalled)
    assert out.split() == ["done"]


@pytest.mark.parametrize("core", _cores(), ids=_core_id)
def test_the_budget_issue_fits_in_max_issues(core: ModuleType) -> None:
    # Depth 22: about 4 million checks without the budget, a few seconds: no child needed.
    schema, _, _ = BLOWUPS["allOf twice -> properties.x -> #"]
    value: Any = 1
    for _ in range(22):
        value = {"x": value}
    issues = compile_json_schema(schema, 1, core).validate(value)
    assert [(i.path, i.keyword) for i in issues] == [((), "budget")]
    assert re.match(
        r"the arguments: validation stopped after 1,00\d,\d\d\d checks: ", issues[0].message
    )


# Through the executor: a tool whose input schema is the blowup refuses the call with
# INVALID_ARGS at once; one whose output schema is (an MCP server's outputSchema, returning such
# a value itself) gets OUTPUT_INVALID; a heartbeat on the loop goes on.
EXECUTOR_CHILD = textwrap.dedent(
    """
    import asyncio, sys, time
    sys.path.insert(0, sys.argv[1])
    from fastgate import ExecutionContext, Output
    from tests.pipeline_kit import executor, tool

    SCHEMA = {"allOf": [{"properties": {"x": {"$ref": "#"}}}, {"properties": {"x": {"$ref": "#"}}}]}
    ARGS = {"type": "object", **SCHEMA}  # tool arguments are an object, at every level too

    def deep(depth):
        value = {}
        for _ in range(depth):
            value = {"x": value}
        return value

    async def main():
        ex = executor(
            tool("nested", lambda a, c: "ran", ARGS, timeout=1.0),
            tool("emit", lambda a, c: deep(40), output=Output(schema=SCHEMA), timeout=1.0),
        )
        beats = 0

        async def heartbeat():
            nonlocal beats
            while True:
                beats += 1
                await asyncio.sleep(0.01)

        task = asyncio.create_task(heartbeat())
        await asyncio.sleep(0.05)
        started = time.monotonic()
        r = await ex.execute("nested", {"x": deep(40)}, ExecutionContext())
        took = time.monotonic() - started
        print("args", r.error.code.value, [i["keyword"] for i in r.error.details["issues"]])
        print("message", "validation stopped after" in r.error.message)
        print(f"args took {took:.2f}s", file=sys.stderr)
        assert took < 30, took
        started = time.monotonic()
        r = await ex.execute("emit", {"text": "x"}, ExecutionContext())
        took = time.monotonic() - started
        print("output", r.error.code.value, "validation stopped after" in r.error.message)
        print(f"output took {took:.2f}s", file=sys.stderr)
        assert took < 30, took
        before = beats
        await asyncio.sleep(0.2)
        print("loop", beats > before)
        task.cancel()

    asyncio.run(main())
    print("done")
    """
)


def test_a_tool_with_such_a_schema_refuses_the_call_and_the_loop_goes_on() -> None:
    stalled = "a tool's recursive schema froze the event loop"
    out = run_python(EXECUTOR_CHILD, str(ROOT), timeout=90, stalled=stalled)
    assert out.splitlines() == [
        "args INVALID_ARGS ['budget']",
        "message True",
        "output OUTPUT_INVALID True",
        "loop True",
        "done",
    ]


# -- ordinary recursive schemas never meet the budget ---------------------------------------------
# Each beside its "doubled twin" (the same schema applied twice at every level, as the audit's
# allOf): at depth 1000 the schema validates correctly, while the twin is refused at depth 20.

NODE = {
    "type": "object",
    "properties": {
        "value": {"type": "number"},
        "children": {"type": "array", "items": {"$ref": "#/$defs/node"}},
    },
    "required": ["value"],
    "additionalProperties": False,
}
TREE = {"$defs": {"node": NODE}, "$ref": "#/$defs/node"}
LINKED_LIST = {
    "type": "object",
    "properties": {"value": {"type": "integer"}, "next": {"$ref": "#"}},
    "required": ["value"],
}
# JSON-Schema-Test-Suite draft2020-12, ref.json, "root pointer ref".
ROOT_POINTER = {"properties": {"foo": {"$ref": "#"}}, "additionalProperties": False}


def _tree(depth: int, bottom: Any) -> Any:
    value: Any = {"value": bottom}
    for level in range(depth):
        value = {"value": level, "children": [{"value": 0.5}, value]}
    return value


def _linked(depth: int, bottom: Any) -> Any:
    value: Any = {"value": bottom}
    for level in range(depth):
        value = {"value": level, "next": value}
    return value


def _pointer(depth: int, bottom: Any) -> Any:
    value: Any = bottom
    for _ in range(depth):
        value = {"foo": value}
    return value


# name -> (schema, its doubled twin, a valid value of a given depth)
RECURSIVE: dict[str, tuple[Any, Any, Any]] = {
    "tree": (TREE, {"$defs": {"node": {"allOf": [NODE, NODE]}}, "$ref": "#/$defs/node"}, _tree),
    "linked list": (LINKED_LIST, {"allOf": [LINKED_LIST, LINKED_LIST]}, _linked),
    "root pointer ref": (ROOT_POINTER, {"allOf": [ROOT_POINTER, ROOT_POINTER]}, _pointer),
}
BOTTOMS = {"tree": 1, "linked list": 7, "root pointer ref": False}

DEEP = [
    # (name, value, expected (path, keyword) issues)
    ("tree", _tree(1000, 1), []),
    ("tree", _tree(1000, "one"), [((*("children", 1) * 1000, "value"), "type")]),
    ("linked list", _linked(1000, 7), []),
    ("linked list", _linked(1000, 7.5), [((*("next",) * 1000, "value"), "type")]),
    (
        "linked list",
        {"next": _linked(999, None)},
        [
            ((), "required"),
            ((*("next",) * 1000, "value"), "type"),
        ],
    ),
    ("root pointer ref", _pointer(1000, False), []),
    (
        "root pointer ref",
        _pointer(1000, {"bar": False}),
        [((*("foo",) * 1000, "bar"), "additionalProperties")],
    ),
]


@functools.cache
def _twin_refused(name: str, core: ModuleType) -> bool:
    """The doubled twin of a recursive schema, at depth 20 (about a million checks without the
    budget, a few seconds), gets the budget issue from ``validate`` and False from ``is_valid``."""
    _, twin, build = RECURSIVE[name]
    value = build(20, BOTTOMS[name])
    validator = compile_json_schema(twin, 50, core)
    issues = validator.validate(value)
    return [(i.path, i.keyword) for i in issues] == [((), "budget")] and not validator.is_valid(
        value
    )


@pytest.mark.parametrize("core", _cores(), ids=_core_id)
@pytest.mark.parametrize(("name", "value", "expected"), DEEP)
def test_ordinary_recursive_schemas_validate_at_depth(
    core: ModuleType, name: str, value: Any, expected: list[Any]
) -> None:
    validator = compile_json_schema(RECURSIVE[name][0], 50, core)
    issues = validator.validate(value)
    assert [(i.path, i.keyword) for i in issues] == expected, name
    assert validator.is_valid(value) is (not expected), name
    assert _twin_refused(name, core), f"the doubled {name} was not stopped"


def _wide_tree(levels: int) -> Any:
    """A complete 4-ary tree: 4**levels leaves, each node an object with a value and children."""
    value: Any = {"value": 0}
    for level in range(levels):
        value = {"value": level, "children": [value, value, value, value]}
    return value


@pytest.mark.parametrize("core", _cores(), ids=_core_id)
def test_a_large_value_gets_a_budget_in_proportion(
    core: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A value that needs more checks than the floor (a tree of 262,144 nodes, each checked
    once: about 1,200,000 checks) is still checked to the end: the budget grows with the
    value's size. (Its nodes are shared objects, but validation walks them as a tree.)"""
    value = _wide_tree(8)
    bad = {"value": 9, "children": [value, value, value, {"value": "x"}]}
    used: list[Any] = []
    if core is pure_core:
        made = pure_core._new_budget

        def recording(checked: Any) -> Any:
            budget = made(checked)
            used.append(budget)
            return budget

        monkeypatch.setattr(pure_core, "_new_budget", recording)
    validator = compile_json_schema(TREE, 50, core)
    wrapped = {"value": 1, "children": [value, value, value]}
    assert validator.validate(wrapped) == []
    assert validator.is_valid(wrapped)
    issues = validator.validate(bad)
    assert [(i.path, i.keyword) for i in issues] == [(("children", 3, "value"), "type")]
    assert not validator.is_valid(bad)
    if core is pure_core:
        assert used[0].used > pure_core.WORK_FLOOR
    assert _twin_refused("tree", core)  # where the doubled tree, 20 levels deep, is not
