"""``MCPServerConfig``, ``load_mcp_config`` and tool names: bad config is a clear error naming
the server and the field, never half-applied."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from fastgate import ToolRegistry
from fastgate.mcp import (
    MCPBridge,
    MCPConfigError,
    MCPServerConfig,
    MCPStartupError,
    load_mcp_config,
    tool_name,
)
from fastgate.mcp._tools import build_listing
from tests.mcp.servers import running


def write(tmp_path: Path, document: Any) -> Path:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps(document))
    return path


def test_the_files_mcp_clients_use_load(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        {
            "mcpServers": {
                "fs": {
                    "command": "node",
                    "args": ["server.js", "${HOME_DIR}/ws"],
                    "env": {"TOKEN": "${TOKEN:-none}"},
                    "cwd": "servers",
                },
                "api": {
                    "type": "http",
                    "url": "http://127.0.0.1:8931/mcp",
                    "headers": {"Authorization": "Bearer ${KEY}"},
                    "max_concurrency": 2,
                    "trust_annotations": True,
                },
                "off": {"command": "never-run", "disabled": True},
            },
            "otherClientSetting": {"ignored": True},
        },
    )
    fs, api = load_mcp_config(path, environ={"HOME_DIR": "/home/u", "KEY": "k1"})
    assert fs == MCPServerConfig(
        "fs",
        command=("node", "server.js", "/home/u/ws"),
        env={"TOKEN": "none"},
        cwd=str(tmp_path / "servers"),
    )
    assert fs.transport == "stdio" and api.transport == "http"
    assert api.url == "http://127.0.0.1:8931/mcp" and dict(api.headers) == {
        "Authorization": "Bearer k1"
    }
    assert api.max_concurrency == 2 and api.trust_annotations is True
    assert (api.startup_timeout, api.call_timeout, api.idle_timeout) == (30.0, 300.0, 60.0)


@pytest.mark.parametrize(
    ("entry", "field", "fragment"),
    [
        ({"command": 3}, "command", "program to run"),
        ({"command": "node", "args": "server.js"}, "args", "list of strings"),
        ({"type": "http"}, "url", "needs a url"),
        ({"type": "http", "url": "ftp://x"}, "url", "http:// or https://"),
        ({"type": "sse", "url": "http://x"}, "type", "not supported"),
        ({"command": "node", "timeout": 5}, "timeout", "unknown field"),
        ({"command": "node", "idle_timeout": 0}, "idle_timeout", "positive number"),
        ({"command": "node", "call_timeout": "slow"}, "call_timeout", "positive number"),
        ({"command": "node", "max_concurrency": 0}, "max_concurrency", "integer >= 1"),
        ({"command": "node", "trust_annotations": "yes"}, "trust_annotations", "true or false"),
        ({"command": "node", "env": {"A": 1}}, "env.A", "must be a string"),
        ({"command": "node", "args": ["${UNSET_VAR}"]}, "args[0]", "UNSET_VAR} is not set"),
        ({"type": "http", "url": "http://x", "cwd": "/"}, "cwd", "unknown field"),
        ({}, "type", "give a command"),
        ("node", "entry", "must be an object"),
    ],
)
def test_a_bad_entry_names_the_server_and_the_field_and_nothing_loads(
    tmp_path: Path, entry: Any, field: str, fragment: str
) -> None:
    path = write(tmp_path, {"mcpServers": {"good": {"command": "node"}, "broken": entry}})
    with pytest.raises(MCPConfigError) as caught:
        load_mcp_config(path, environ={})
    error = caught.value
    assert (error.server, error.field) == ("broken", field), str(error)
    assert fragment in str(error) and str(path) in str(error)
    assert isinstance(error, ValueError)


@pytest.mark.parametrize(
    ("document", "fragment"),
    [("{not json", "not valid JSON"), ("[]", "mcpServers"), ('{"servers": {}}', "mcpServers")],
)
def test_a_bad_file_is_a_clear_error(tmp_path: Path, document: str, fragment: str) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(document)
    with pytest.raises(MCPConfigError, match=fragment):
        load_mcp_config(path)
    with pytest.raises(MCPConfigError, match="cannot be read"):
        load_mcp_config(tmp_path / "missing.json")


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"name": "my__server", "command": ["x"]}, "name"),
        ({"name": "_x", "command": ["x"]}, "name"),
        ({"name": "github.com", "command": ["x"]}, "name"),
        ({"name": "s" * 41, "command": ["x"]}, "name"),
        ({"name": "s"}, "command"),
        ({"name": "s", "command": ["x"], "url": "http://h"}, "command"),
        ({"name": "s", "command": "node server.js"}, "command"),
        ({"name": "s", "command": []}, "command"),
        ({"name": "s", "command": ["x"], "headers": {"A": "b"}}, "headers"),
        ({"name": "s", "command": ["x"], "startup_timeout": float("inf")}, "startup_timeout"),
        ({"name": "s", "command": ["x"], "required": 1}, "required"),
    ],
)
def test_config_fields_are_checked_when_made(options: dict[str, Any], field: str) -> None:
    with pytest.raises(MCPConfigError) as caught:
        MCPServerConfig(**options)
    assert caught.value.field == field


def test_names_within_64_characters_keep_their_spelling() -> None:
    assert tool_name("fs", "read_file") == "mcp__fs__read_file"
    assert tool_name("a-b", "x-y_z") == "mcp__a-b__x-y_z"


@given(st.text(min_size=1, max_size=120))
def test_mangled_names_are_valid_and_hashed_from_the_original(remote: str) -> None:
    name = tool_name("srv", remote)
    assert re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name)
    assert name.startswith("mcp__srv__")
    full = f"mcp__srv__{remote}"
    if name != full:
        digest = hashlib.sha256(full.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        assert name.endswith("_" + digest)


@given(st.lists(st.text(min_size=1, max_size=90), min_size=2, max_size=30, unique=True))
def test_distinct_tools_never_share_a_name(remotes: list[str]) -> None:
    config = MCPServerConfig("srv", command=["x"])
    raw = [{"name": r, "inputSchema": {"type": "object"}} for r in remotes]

    async def call(remote: str, args: Any, ctx: Any) -> Any:
        return None

    listing = build_listing(config, raw, call, lambda name: False)
    names = [d.name for d in listing.definitions]
    assert len(names) == len(set(names))
    # Every tool is registered or quarantined with its reason: none is silently lost.
    assert len(names) + len(listing.quarantined) == len(remotes)
    assert all("already used" in why for why in listing.quarantined.values())


def test_a_listing_quarantines_what_it_cannot_use() -> None:
    config = MCPServerConfig("srv", command=["x"])
    raw: list[Any] = [
        {"name": "ok", "inputSchema": {"type": "object"}},
        {"name": "ok", "inputSchema": {"type": "object"}},  # a duplicate
        {"name": "no_schema"},
        {"name": "not_object", "inputSchema": {"type": "string"}},
        {"name": "bad_output", "inputSchema": {"type": "object"}, "outputSchema": {"if": {}}},
        {"name": "mine", "inputSchema": {"type": "object"}},
        {"inputSchema": {"type": "object"}},
        "garbage",
    ]

    async def call(remote: str, args: Any, ctx: Any) -> Any:
        return None

    listing = build_listing(config, raw, call, lambda name: name == "mcp__srv__mine")
    assert [d.name for d in listing.definitions] == ["mcp__srv__ok"]
    why = listing.quarantined
    assert set(why) == {"ok", "no_schema", "not_object", "bad_output", "mine", "#6", "#7"}
    assert "already used" in why["ok"] and "inputSchema" in why["no_schema"]
    assert "JSON object" in why["not_object"] and "'if'" in why["bad_output"]
    assert "already registered" in why["mine"]


async def test_a_required_server_that_cannot_start_fails_the_bridge(tmp_path: Path) -> None:
    registry = ToolRegistry()
    missing = MCPServerConfig("gone", command=[str(tmp_path / "no-such-server")], required=True)
    with pytest.raises(MCPStartupError) as caught:
        async with MCPBridge(registry, [missing]):
            raise AssertionError("must not start")
    assert caught.value.server == "gone" and "no-such-server" in str(caught.value)
    # Not required: the bridge starts, says why, and keeps trying.
    optional = MCPServerConfig("gone", command=[str(tmp_path / "no-such-server")])
    async with running(registry, optional, spawns=False) as bridge:
        status = bridge.status()["gone"]
        assert status["state"] == "restarting" and "no-such-server" in status["last_error"]


async def test_a_scope_that_does_not_exist_is_refused(tmp_path: Path) -> None:
    bridge = MCPBridge(ToolRegistry(), [MCPServerConfig("s", command=["x"], scope="agent-7")])
    with pytest.raises(ValueError, match="scope 'agent-7' does not exist"):
        await bridge.start()
    await bridge.aclose()


def test_servers_need_distinct_names() -> None:
    config = MCPServerConfig("s", command=["x"])
    with pytest.raises(ValueError, match="used twice"):
        MCPBridge(ToolRegistry(), [config, config])


def test_without_the_extra_the_import_error_names_it() -> None:
    code = "import sys; sys.modules['mcp'] = None; import fastgate.mcp"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode != 0 and "'mcp' extra" in run.stderr
    # The core never imports the bridge.
    code = "import sys, fastgate; assert not {'mcp', 'fastgate.mcp'} & set(sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
