"""The older HTTP+SSE transport: ``"type": "sse"`` servers, and a url without a type that falls
back to SSE as MCP clients do, against the SDK's own SSE server in this process; fields other
clients add (``alwaysAllow``) never loosen a rule."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from fastgate import (
    ApprovalRequest,
    ApprovalResponse,
    ErrorCode,
    ExecutionContext,
    FastgateConfigWarning,
    PermissionConfig,
    PermissionMode,
    ToolExecutor,
    ToolRegistry,
)
from fastgate.mcp import MCPServerConfig, load_mcp_config
from tests.mcp.servers import alive, running
from tests.mcp.sse_server import serving, sse_process
from tests.pipeline_kit import assert_idle

CTX = ExecutionContext(session_id="s1")


async def test_an_sse_server_is_listed_and_called_through_the_executor() -> None:
    with serving("sse") as served:
        registry = ToolRegistry()
        config = MCPServerConfig("old", url=served.base + "/sse", transport="sse")
        async with running(registry, config) as bridge:
            status = bridge.status()["old"]
            assert (status["state"], status["transport"]) == ("ready", "sse"), status
            assert status["tool_names"] == ["mcp__old__add", "mcp__old__echo"]
            executor = ToolExecutor(registry, mode=PermissionMode.YOLO)
            added = await executor.execute("mcp__old__add", {"a": 20, "b": 22}, CTX)
            assert added.ok and added.value == {"result": 42}, added
            echoed = await executor.execute("mcp__old__echo", {"text": "over sse"}, CTX)
            assert echoed.ok and echoed.content == "over sse", echoed
            assert served.calls == ["add", "echo"]
            assert_idle(executor)
    assert served.thread is not None and not served.thread.is_alive()


class Approver:
    """Records every request; answers with the next of ``answers``."""

    def __init__(self, *answers: bool) -> None:
        self.answers = list(answers)
        self.requests: list[ApprovalRequest] = []

    async def __call__(self, request: ApprovalRequest) -> ApprovalResponse:
        self.requests.append(request)
        return ApprovalResponse(self.answers.pop(0))


def cline_settings(tmp_path: Path, url: str) -> Path:
    """A Cline settings file: a url without a type (Cline's SSE), its approval lists, its
    timeout, and a disabled server that must never start."""
    path = tmp_path / "cline_mcp_settings.json"
    entry: dict[str, Any] = {
        "url": url,
        "alwaysAllow": ["add", "echo"],
        "autoApprove": ["add"],
        "timeout": 30,
        "disabled": False,
    }
    off = {"command": str(tmp_path / "never-started"), "disabled": True}
    path.write_text(json.dumps({"mcpServers": {"notes": entry, "off": off}}))
    return path


@pytest.mark.parametrize("rules", ["mode default", "ask rule"])
async def test_always_allow_in_an_mcp_config_never_skips_the_approver(
    tmp_path: Path, rules: str
) -> None:
    with serving("sse") as served:
        path = cline_settings(tmp_path, served.base + "/sse")
        with pytest.warns(FastgateConfigWarning) as caught:
            servers = load_mcp_config(path)
        assert [s.name for s in servers] == ["notes"]  # "off" is disabled
        (notes,) = servers
        assert (notes.transport, notes.call_timeout) == ("auto", 30.0)
        warned = servers.warnings()
        assert [str(w.message) for w in caught] == warned
        assert {w.split(": ")[2] for w in warned} == {"alwaysAllow", "autoApprove"}
        assert all(w.startswith(f"{path}: MCP server 'notes': ") for w in warned)

        if rules == "ask rule":  # an ASK rule in a mode that would allow the tool
            permissions = PermissionConfig(ask=["mcp__notes__add"])
            mode = PermissionMode.ACCEPT_EDITS
        else:  # no rule: the mode's default for an MCP tool (EXECUTE) asks
            permissions, mode = PermissionConfig(), PermissionMode.DEFAULT
        registry = ToolRegistry()
        async with running(registry, *servers) as bridge:
            assert bridge.status()["notes"]["transport"] == "sse"  # fell back, as Cline reads it
            executor = ToolExecutor(registry, permissions=permissions, mode=mode)
            approver = Approver(False, True)
            ctx = ExecutionContext(session_id="s1", approver=approver)
            refused = await executor.execute("mcp__notes__add", {"a": 1, "b": 2}, ctx)
            assert refused.error is not None and refused.error.code is ErrorCode.USER_REJECTED
            assert served.calls == []  # the server never saw it
            allowed = await executor.execute("mcp__notes__add", {"a": 1, "b": 2}, ctx)
            assert allowed.ok and allowed.value == {"result": 3}
            assert [r.tool_name for r in approver.requests] == ["mcp__notes__add"] * 2
            assert served.calls == ["add"]
            assert_idle(executor)


async def test_a_url_without_a_type_speaks_streamable_http_when_the_server_does() -> None:
    with serving("http") as served:
        registry = ToolRegistry()
        config = MCPServerConfig("new", url=served.base + "/mcp", transport="auto")
        async with running(registry, config) as bridge:
            assert bridge.status()["new"]["transport"] == "http"
            executor = ToolExecutor(registry, mode=PermissionMode.YOLO)
            echoed = await executor.execute("mcp__new__echo", {"text": "hi"}, CTX)
            assert echoed.ok and echoed.content == "hi"


async def test_an_sse_server_named_http_says_to_use_sse() -> None:
    with serving("sse") as served:
        registry = ToolRegistry()
        config = MCPServerConfig("old", url=served.base + "/sse", startup_timeout=10.0)
        async with running(registry, config) as bridge:
            status = bridge.status()["old"]
            assert status["state"] == "restarting" and status["transport"] == "http"
            assert "HTTP 405" in status["last_error"] and '"type": "sse"' in status["last_error"]
            assert registry.resolve("mcp__old__echo") is None
        assert served.calls == []


async def test_an_sse_server_that_dies_is_server_unavailable() -> None:
    with sse_process() as (url, pid):
        registry = ToolRegistry()
        async with running(registry, MCPServerConfig("old", url=url, transport="sse")) as bridge:
            executor = ToolExecutor(registry, mode=PermissionMode.YOLO)
            assert (await executor.execute("mcp__old__echo", {"text": "x"}, CTX)).ok
            os.kill(pid, signal.SIGKILL)
            gone = await executor.execute("mcp__old__echo", {"text": "x"}, CTX)
            assert gone.error is not None and gone.error.code is ErrorCode.TOOL_ERROR, gone
            assert gone.error.details["reason"] == "server_unavailable" and gone.error.retryable
            assert_idle(executor)
        assert bridge.status()["old"]["state"] == "closed"
    assert not alive(pid)


async def test_a_url_neither_transport_answers_names_both_refusals() -> None:
    with serving("sse") as served:
        registry = ToolRegistry()
        config = MCPServerConfig("nowhere", url=served.base + "/missing", transport="auto")
        async with running(registry, config) as bridge:
            status = bridge.status()["nowhere"]
            assert status["state"] == "restarting" and status["transport"] == "auto"
            error = status["last_error"]
            assert "HTTP 404 to the first POST" in error and "and so was SSE" in error, error
