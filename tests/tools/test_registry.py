"""``ToolRegistry``: layers, scopes, inherited restrictions, atomic swaps, projection."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from fastgate import ToolDefinition, ToolRegistry, define_tool
from fastgate import schema as s


def _tool(name: str, description: str = "d", **options: Any) -> ToolDefinition:
    return define_tool(name, description, s.Object({}), lambda args, ctx: description, **options)


def _names(registry: ToolRegistry, scope: str | None = None) -> list[str]:
    return [t["name"] for t in registry.schemas(scope)]


def test_scope_sees_own_then_ancestors_then_global_and_shadows() -> None:
    reg = ToolRegistry()
    reg.register(_tool("read", "global read"))
    reg.register(_tool("bash"))
    reg.scope("lead")
    reg.scope("worker", parent="lead")
    reg.register(_tool("read", "lead read"), scope="lead")
    reg.register(_tool("report"), scope="worker")
    assert reg.resolve("read").description == "global read"  # type: ignore[union-attr]
    assert reg.resolve("read", "lead").description == "lead read"  # type: ignore[union-attr]
    assert reg.resolve("read", "worker").description == "lead read"  # type: ignore[union-attr]
    assert reg.resolve("report", "lead") is None
    assert _names(reg, "worker") == ["bash", "read", "report"]
    assert _names(reg) == ["bash", "read"]


def test_allow_and_deny_filter_only_the_inherited_surface() -> None:
    reg = ToolRegistry()
    for name in ("read", "write", "bash", "mcp__gh__issue"):
        reg.register(_tool(name))
    reg.scope("sub", allow=["read", "bash", "mcp__*", "report"], deny=["bash", "report"])
    reg.register(_tool("report"), scope="sub")  # denied by name, but it is the scope's own
    assert _names(reg, "sub") == ["mcp__gh__issue", "read", "report"]
    assert reg.resolve("bash", "sub") is None
    assert reg.resolve("write", "sub") is None
    assert reg.resolve("report", "sub") is not None


def test_restrictions_accumulate_down_the_chain() -> None:
    reg = ToolRegistry()
    for name in ("a", "b", "c"):
        reg.register(_tool(name))
    reg.scope("p", deny=["a"])
    reg.scope("q", parent="p", allow=["a", "b"])
    reg.register(_tool("c"), scope="p")
    assert _names(reg, "p") == ["b", "c"]
    assert _names(reg, "q") == ["b"]  # "a" denied above, "c" not allowed here
    assert reg.resolve("a", "q") is None and reg.resolve("c", "q") is None


def test_projection_hides_host_metadata() -> None:
    reg = ToolRegistry()
    reg.register(_tool("bash", timeout=5.0, parallelism="shared", retry_safe=True))
    (projected,) = reg.schemas()
    assert set(projected) == {"name", "description", "parameters"}
    assert projected["parameters"] == {
        "type": "object",
        "properties": {},
        "additionalProperties": False,
    }
    projected["parameters"]["type"] = "string"  # a caller's copy; the definition is untouched
    assert reg.schemas()[0]["parameters"]["type"] == "object"


async def test_swap_during_a_call_in_flight_keeps_the_resolved_definition() -> None:
    reg = ToolRegistry()
    reg.register(_tool("t", "v1"))
    started, release = asyncio.Event(), asyncio.Event()

    async def call() -> str:
        defn = reg.resolve("t")
        assert defn is not None
        started.set()
        await release.wait()
        return str(defn.execute({}, None))

    task = asyncio.create_task(call())
    await started.wait()
    reg.register(_tool("t", "v2"))
    assert reg.resolve("t").description == "v2"  # type: ignore[union-attr]
    release.set()
    assert await task == "v1"


def test_replace_layer_is_one_swap_and_unregister() -> None:
    reg = ToolRegistry()
    reg.scope("mcp")
    reg.replace_layer([_tool("a"), _tool("b")], scope="mcp")
    before = reg.visible("mcp")
    reg.replace_layer([_tool("c")], scope="mcp")
    assert set(before) == {"a", "b"}  # a snapshot taken before the swap is unaffected
    assert set(reg.visible("mcp")) == {"c"}
    assert reg.unregister("c", scope="mcp") is not None
    assert reg.unregister("c", scope="mcp") is None
    with pytest.raises(ValueError, match="duplicate"):
        reg.replace_layer([_tool("x"), _tool("x")])


def test_scope_errors() -> None:
    reg = ToolRegistry()
    reg.scope("a")
    with pytest.raises(ValueError):
        reg.scope("a")
    with pytest.raises(KeyError):
        reg.scope("b", parent="missing")
    with pytest.raises(KeyError):
        reg.register(_tool("t"), scope="missing")
    with pytest.raises(KeyError):
        reg.resolve("t", "missing")
    with pytest.raises(TypeError):
        reg.scope("c", allow="read")
    with pytest.raises(TypeError):
        reg.register({"name": "t"})  # type: ignore[arg-type]
    reg.scope("child", parent="a")
    with pytest.raises(ValueError):
        reg.drop_scope("a")
    reg.drop_scope("child")
    reg.drop_scope("a")
    assert reg.get_scope("a") is None
