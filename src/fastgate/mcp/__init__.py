"""MCP servers' tools through the full pipeline (SPEC §14): ``MCPBridge``, ``MCPServerConfig``,
``load_mcp_config``, ``OAuthClient`` and ``TokenStore`` for servers behind OAuth.

Needs the ``mcp`` extra (the official MCP SDK, 2.x): ``pip install 'fastgate[mcp]'``.
"""

from __future__ import annotations

try:
    import mcp as _sdk  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised by a subprocess test
    raise ImportError(
        "fastgate.mcp needs the 'mcp' extra (the official MCP SDK 2.x): pip install 'fastgate[mcp]'"
    ) from exc

from fastgate.mcp._auth import OAuthClient, TokenStore
from fastgate.mcp._bridge import MCPBridge, MCPStartupError
from fastgate.mcp._config import MCPConfigError, MCPConfigFile, MCPServerConfig, load_mcp_config
from fastgate.mcp._names import server_rule_name, tool_name

__all__ = (
    "MCPBridge",
    "MCPConfigError",
    "MCPConfigFile",
    "MCPServerConfig",
    "MCPStartupError",
    "OAuthClient",
    "TokenStore",
    "load_mcp_config",
    "server_rule_name",
    "tool_name",
)
