"""MCP results of the 2026 era (SPEC §14 "Both protocol eras in full"), against a hand-written
server whose results are chosen byte for byte (``tests/mcp/modern_raw_server.py``): a result
without ``resultType`` is complete; an ``input_required`` result is never an empty success."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from fastgate import ErrorCode, ExecutionContext, PermissionMode, ToolExecutor, ToolRegistry
from fastgate.mcp import MCPServerConfig
from tests.mcp.servers import assert_settled, running

MODERN_RAW = Path(__file__).with_name("modern_raw_server.py")
CTX = ExecutionContext(session_id="s1")


def modern_raw() -> MCPServerConfig:
    return MCPServerConfig("m", command=[sys.executable, str(MODERN_RAW)])


async def call_each(names: list[str]) -> dict[str, Any]:
    registry = ToolRegistry()
    async with running(registry, modern_raw()) as bridge:
        status = bridge.status()["m"]
        assert status["state"] == "ready", status
        executor = ToolExecutor(registry, mode=PermissionMode.YOLO)
        results = {name: await executor.execute(f"mcp__m__{name}", {}, CTX) for name in names}
        assert_settled(executor, bridge, calls=len(names))
    return results


async def test_a_result_without_result_type_is_complete() -> None:
    results = await call_each(
        ["untyped", "complete", "untyped_structured", "untyped_empty", "untyped_error"]
    )
    for name in ("untyped", "complete", "untyped_structured", "untyped_empty"):
        assert results[name].ok, (name, results[name].error)
    assert results["untyped"].content == "done without a resultType"
    assert results["complete"].content == "done, said complete"
    assert results["untyped_structured"].value == {"sum": 3}
    assert results["untyped_empty"].content == ""
    failed = results["untyped_error"]
    assert failed.error is not None and failed.error.code is ErrorCode.TOOL_FAILURE
    assert failed.content == "it broke"


async def test_an_input_required_result_fails_and_says_so() -> None:
    results = await call_each(["input_required", "input_required_state_only"])
    for name, result in results.items():
        assert not result.ok, name
        assert result.error is not None and result.error.code is ErrorCode.TOOL_FAILURE, name
        assert result.error.details["reason"] == "input_required", name
        assert result.error.details["server"] == "m"
        assert "input" in result.error.message
    assert "Who is asking?" in results["input_required"].content


async def test_an_unknown_result_type_is_a_protocol_error() -> None:
    results = await call_each(["mystery"])
    error = results["mystery"].error
    assert error is not None and error.code is ErrorCode.TOOL_ERROR
    assert error.details["reason"] == "protocol_error"


async def test_the_quarantine_names_the_keyword_once() -> None:
    registry = ToolRegistry()
    async with running(registry, modern_raw()) as bridge:
        quarantined = bridge.status()["m"]["quarantined"]
    assert set(quarantined) == {"odd_unknown", "odd_unsupported", "odd_nested"}
    assert quarantined["odd_unknown"].startswith("inputSchema: unknown keyword 'frobnicate': ")
    assert "unsupported keyword 'patternProperties'" in quarantined["odd_unsupported"]
    assert "unknown keyword 'sparkle'" in quarantined["odd_nested"]
    assert "#/properties/a" in quarantined["odd_nested"]
    assert not any("keyword keyword" in reason for reason in quarantined.values())
    assert registry.resolve("mcp__m__odd_unknown") is None
