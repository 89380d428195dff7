"""``@tool`` / ``define_tool``: schemas from annotations and docstrings, definition-time errors."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from typing import Annotated, Any, Literal, TypedDict

import msgspec
import pytest

from fastgate import Output, ToolDefinition, ToolKind, define_tool, tool
from fastgate import schema as s
from fastgate.pipeline.run_context import RunContext
from fastgate.schema import Meta, from_json_schema


class Point(msgspec.Struct):
    x: int
    y: int = 0


@dataclasses.dataclass
class Window:
    title: str
    size: Point | None = None


class Tree(msgspec.Struct):
    children: list[Tree]


class Filters(TypedDict):
    tags: list[str]
    depth: int


def test_parameters_from_annotations_and_google_docstring() -> None:
    @tool(kind=ToolKind.READ_ONLY, parallelism="shared")
    def search(
        pattern: Annotated[str, Meta(min_length=1, description="regex")],
        mode: Literal["fast", "full"] = "fast",
        limit: Annotated[int, msgspec.Meta(ge=1, le=100)] | None = None,
        scale: float = 1.0,
        flags: dict[str, bool] | None = None,
        ctx: RunContext | None = None,
    ) -> str:
        """Search the workspace.

        Longer explanation.

        Args:
            pattern: What to look for.
            mode: How hard to look,
                continued here.
            ctx: The run context.
        """
        return pattern

    schema = search.input_schema
    assert search.name == "search"
    assert search.description == "Search the workspace.\n\nLonger explanation."
    assert set(schema["properties"]) == {"pattern", "mode", "limit", "scale", "flags"}
    assert schema["required"] == ["pattern"]
    assert schema["additionalProperties"] is False
    props = schema["properties"]
    assert props["pattern"] == {"type": "string", "minLength": 1, "description": "regex"}
    assert props["mode"] == {
        "enum": ["fast", "full"],
        "description": "How hard to look, continued here.",
    }
    assert props["limit"]["anyOf"][0] == {"type": "integer", "minimum": 1, "maximum": 100}
    assert props["flags"]["anyOf"][0]["additionalProperties"] == {"type": "boolean"}
    assert search.validator.validate({"pattern": "x", "limit": None}) == []
    assert {
        i.path for i in search.validator.validate({"pattern": "", "mode": "slow", "limit": 0})
    } == {
        ("pattern",),
        ("mode",),
        ("limit",),
    }


def test_ctx_is_injected_by_annotation_never_a_parameter() -> None:
    seen: list[Any] = []

    @tool
    def report(text: str, context: RunContext) -> str:
        seen.append(context)
        return text

    assert "context" not in report.input_schema["properties"]
    ctx = RunContext()
    assert report.execute({"text": "hi"}, ctx) == "hi"
    assert seen == [ctx]


def test_records_become_objects_and_execute_receives_instances() -> None:
    @tool
    def place(window: Window, at: Point, filters: Filters | None = None) -> Any:
        """Place a window.

        Parameters
        ----------
        window : Window
            The window to place.
        at : Point
            Where.
        """
        return window, at

    props = place.input_schema["properties"]
    assert props["window"]["description"] == "The window to place."
    assert props["window"]["required"] == ["title"]
    assert props["at"]["properties"] == {"x": {"type": "integer"}, "y": {"type": "integer"}}
    assert props["filters"]["anyOf"][0]["required"] == ["tags", "depth"]
    window, at = place.execute({"window": {"title": "w", "size": {"x": 1}}, "at": {"x": 2}}, None)
    assert window == Window("w", Point(1, 0)) and at == Point(2, 0)


def test_tool_schema_round_trips_through_to_json_schema() -> None:
    @tool
    def f(a: Annotated[str, Meta(pattern="^[a-z]+$", max_length=8)], b: list[Point]) -> None:
        """F."""

    node = f.parameters
    assert isinstance(node, s.SchemaNode)
    rendered = node.to_json_schema()
    assert rendered == f.input_schema
    again = from_json_schema(rendered)
    for sample in ({"a": "ok", "b": [{"x": 1}]}, {"a": "NO", "b": [{"y": 1}], "c": 0}):
        assert again.validate(sample) == f.validator.validate(sample)
    assert f.model_schema() == {"name": "f", "description": "F.", "parameters": rendered}


def test_async_tools_stay_async() -> None:
    @tool
    async def wait(n: int) -> int:
        await asyncio.sleep(0)
        return n

    assert inspect.iscoroutinefunction(wait.execute)
    assert asyncio.run(wait.execute({"n": 3}, None)) == 3


def _noop(args: Any, ctx: Any) -> None:
    return None


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"name": "bad name"}, ValueError, "invalid tool name"),
        ({"name": "x" * 65}, ValueError, "invalid tool name"),
        ({"name": ""}, ValueError, "invalid tool name"),
        ({"execute": 3}, TypeError, "execute must be callable"),
        ({"parallelism": "parallel"}, ValueError, "parallelism"),
        ({"timeout": -1}, ValueError, "timeout"),
        ({"timeout": float("nan")}, ValueError, "timeout"),
        ({"retry_safe": "yes"}, TypeError, "retry_safe"),
        ({"is_concurrency_safe": 1}, TypeError, "is_concurrency_safe"),
        ({"kind": "DESTROY"}, ValueError, ""),
        ({"parameters": {"type": "string"}}, TypeError, "JSON object"),
        ({"parameters": 42}, TypeError, "expected a fastgate.schema node"),
        ({"path_args": "file_path"}, TypeError, "path_args"),
        ({"output": "text"}, TypeError, "Output"),
        ({"pool": ""}, ValueError, "pool must be a non-empty name"),
        ({"pool": 3}, TypeError, "pool must be a scheduler pool name"),
        ({"pool": ["mcp:fs"]}, TypeError, "pool must be a scheduler pool name"),
        ({"bogus": 1}, TypeError, "unknown option"),
    ],
)
def test_bad_definitions_fail_at_definition_time(
    kwargs: dict[str, Any], error: type[Exception], words: str
) -> None:
    base: dict[str, Any] = {
        "name": "ok",
        "description": "d",
        "parameters": {"type": "object"},
        "execute": _noop,
    }
    base.update(kwargs)
    with pytest.raises(error) as info:
        define_tool(**base)
    assert words in str(info.value)


def test_bad_schemas_fail_at_definition_time() -> None:
    with pytest.raises(s.SchemaError):
        define_tool("t", "d", {"type": "object", "properties": {"a": {"type": "strin"}}}, _noop)


def test_bad_signatures_fail_at_definition_time() -> None:
    with pytest.raises(TypeError, match="needs a type annotation"):

        @tool
        def untyped(a) -> None:  # type: ignore[no-untyped-def]
            pass

    with pytest.raises(TypeError, match="unsupported annotation"):

        @tool
        def weird(a: set[int]) -> None:
            pass

    with pytest.raises(TypeError, match="recursive"):

        @tool
        def tree(t: Tree) -> None:
            pass

    with pytest.raises(TypeError, match="cannot resolve"):

        @tool
        def unresolved(a: NoSuchType) -> None:  # type: ignore[name-defined]  # noqa: F821
            pass

    with pytest.raises(TypeError, match="Meta does not apply"):

        @tool
        def meta(a: Annotated[bool, Meta(min_length=1)]) -> None:
            pass


def test_definitions_are_frozen_and_classifiers_fail_closed() -> None:
    def boom(args: Any) -> str:
        raise RuntimeError

    d = define_tool("t", "d", s.Object({}), _noop, parallelism=boom, is_concurrency_safe=boom)
    assert isinstance(d, ToolDefinition)
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.name = "u"  # type: ignore[misc]
    assert d.classify_parallelism({}) == "exclusive"
    assert d.concurrency_safe({}) is False
    shared = define_tool("t", "d", s.Object({}), _noop, parallelism=lambda a: "shared ")
    assert shared.classify_parallelism({}) == "exclusive"
    assert (
        define_tool("t", "d", s.Object({}), _noop, parallelism="shared").classify_parallelism({})
        == "shared"
    )
    assert (
        define_tool(
            "t", "d", s.Object({}), _noop, is_concurrency_safe=lambda a: 1
        ).concurrency_safe({})
        is False
    )
    assert isinstance(d.output, Output)


def test_pool_is_host_metadata_kept_on_the_definition_and_hidden_from_the_model() -> None:
    assert define_tool("t", "d", s.Object({}), _noop).pool is None
    pooled = define_tool("t", "d", s.Object({}), _noop, pool="mcp:fs")
    assert pooled.pool == "mcp:fs"
    assert "mcp:fs" not in str(pooled.model_schema())

    @tool(pool="mcp:api")
    def fetch(url: str) -> str:
        """Fetch a URL."""
        return url

    assert fetch.pool == "mcp:api"


def test_parameters_from_a_class() -> None:
    d = define_tool("w", "d", Window, _noop)
    assert d.input_schema["required"] == ["title"]
    assert d.validator.validate({"title": 1})[0].path == ("title",)
