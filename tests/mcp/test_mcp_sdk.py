"""What the bridge relies on in the installed ``mcp`` SDK, checked against it (the SDK moves
fast: a change here fails this test, not a user's call)."""

from __future__ import annotations

import inspect

import mcp_types
from mcp.client.session import ClientSession
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from mcp import Client


def test_the_installed_sdk_is_2x() -> None:
    from importlib.metadata import version

    assert version("mcp").split(".")[0] == "2"


def test_the_signatures_the_bridge_calls() -> None:
    client = inspect.signature(Client)
    for name in ("server", "mode", "message_handler", "cache", "client_info"):
        assert name in client.parameters
    send = inspect.signature(ClientSession.send_request)
    assert list(send.parameters)[:3] == ["self", "request", "result_type"]
    assert "progress_callback" in send.parameters
    raw = inspect.signature(JSONRPCDispatcher.send_raw_request)
    assert list(raw.parameters)[:4] == ["self", "method", "params", "opts"]
    listen = inspect.signature(Client.listen)
    assert "tools_list_changed" in listen.parameters
    # The raw tools/list request stamps itself as send_request does.
    assert callable(ClientSession.__init__)
    source = inspect.getsource(ClientSession.send_request)
    assert "self._stamp(data, opts)" in source and "self._dispatcher.send_raw_request" in source


def test_the_protocol_names_the_bridge_uses() -> None:
    assert "2025-11-25" in HANDSHAKE_PROTOCOL_VERSIONS and MODERN_PROTOCOL_VERSIONS
    assert mcp_types.CONNECTION_CLOSED < 0
    notification = mcp_types.ToolListChangedNotification()
    assert notification.method == "notifications/tools/list_changed"
    request = mcp_types.CallToolRequest(
        params=mcp_types.CallToolRequestParams(name="t", arguments={"a": [1, {"b": None}]})
    )
    dumped = request.model_dump(by_alias=True, mode="json", exclude_none=True)
    assert dumped["params"]["arguments"] == {"a": [1, {"b": None}]}
