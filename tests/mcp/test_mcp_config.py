"""``MCPServerConfig``, ``load_mcp_config`` and tool names: bad config is a clear error naming
the server and the field, never half-applied."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from fastgate import FastgateConfigWarning, ToolRegistry
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
        ({"type": 3, "url": "http://x"}, "type", "must be a string"),
        ({"type": "sse"}, "url", "needs a url"),
        ({"type": "stdio", "url": "http://x"}, "command", "program to run"),
        ({"command": "node", "idle_timeout": 0}, "idle_timeout", "positive number"),
        ({"command": "node", "call_timeout": "slow"}, "call_timeout", "positive number"),
        ({"command": "node", "max_concurrency": 0}, "max_concurrency", "integer >= 1"),
        ({"command": "node", "trust_annotations": "yes"}, "trust_annotations", "true or false"),
        ({"command": "node", "env": {"A": 1}}, "env.A", "must be a string"),
        ({"command": "node", "args": ["${UNSET_VAR}"]}, "args[0]", "UNSET_VAR} is not set"),
        ({"url": "http://x", "headers": {"A": ["b"]}}, "headers.A", "must be a string"),
        ({"command": "node", "args": ["${env:UNSET_VAR}"]}, "args[0]", "UNSET_VAR} is not set"),
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
    [
        ("{not json", "not valid JSON"),
        ("[]", "mcpServers"),
        ('{"servers": []}', "mcpServers"),
        ('{"mcpServers": {}, /* unclosed', "not valid JSON"),
        ('{"mcp": {"mcpServers": 3}}', "mcpServers"),
    ],
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
        ({"name": "s", "command": ["x"], "transport": "sse"}, "transport"),
        ({"name": "s", "url": "http://h", "transport": "stdio"}, "transport"),
        ({"name": "s", "url": "http://h", "transport": "websocket"}, "transport"),
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
        {
            "name": "bad_output",
            "inputSchema": {"type": "object"},
            "outputSchema": {"unevaluatedProperties": False},
        },
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
    assert "JSON object" in why["not_object"] and "unevaluatedProperties" in why["bad_output"]
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


# -- the files other MCP clients write ----------------------------------------------------------


def load_warned(path: Path, environ: dict[str, str] | None = None) -> tuple[Any, list[str]]:
    """The loaded file and the warnings it issued (each checked to be listed by warnings())."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        servers = load_mcp_config(path, environ=environ or {})
    issued = [str(w.message) for w in caught if issubclass(w.category, FastgateConfigWarning)]
    assert issued == servers.warnings()
    assert len(issued) == len(caught), [str(w.message) for w in caught]
    return servers, issued


def fields_warned(path: Path, issued: list[str]) -> set[tuple[str, str]]:
    """(server, field) of every warning; each names the file first."""
    found = set()
    for message in issued:
        assert message.startswith(f"{path}: MCP server '"), message
        server, rest = message[len(f"{path}: MCP server '") :].split("': ", 1)
        found.add((server, rest.split(": ", 1)[0]))
    return found


DESKTOP = "/Users/u/Desktop"


def test_claude_desktop_and_claude_code_files_load_as_written(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        {
            "mcpServers": {
                "filesystem": {
                    "command": "npx",
                    "args": ["-y", "@modelcontextprotocol/server-filesystem", DESKTOP],
                    "env": {"DEBUG": "1"},
                },
                "stdio-typed": {"type": "stdio", "command": "uvx", "args": ["mcp-server-time"]},
                "linear": {
                    "type": "sse",
                    "url": "https://mcp.linear.app/sse",
                    "headers": {"X-Key": "${KEY}"},
                },
                "sentry": {"type": "http", "url": "https://mcp.sentry.dev/mcp"},
            },
            "globalShortcut": "Ctrl+Space",  # Claude Desktop's own settings beside the servers
        },
    )
    servers, issued = load_warned(path, {"KEY": "k"})
    assert issued == []
    fs, typed, linear, sentry = servers
    assert fs.command == ("npx", "-y", "@modelcontextprotocol/server-filesystem", DESKTOP)
    assert fs.transport == typed.transport == "stdio"
    assert (linear.transport, linear.url, dict(linear.headers)) == (
        "sse",
        "https://mcp.linear.app/sse",
        {"X-Key": "k"},
    )
    assert sentry.transport == "http"


def test_cursor_files_infer_the_transport_and_expand_its_variables(tmp_path: Path) -> None:
    cursor = tmp_path / "project" / ".cursor"
    cursor.mkdir(parents=True)
    path = cursor / "mcp.json"
    path.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "remote": {"url": "https://example.com/mcp", "headers": {"A": "${env:TOKEN}"}},
                    "local": {
                        "type": "stdio",
                        "command": "${workspaceFolder}/bin/server",
                        "args": ["--home", "${userHome}"],
                        "env": {"TOKEN": "${env:TOKEN}"},
                        "envFile": "${workspaceFolder}/.env",
                    },
                }
            }
        )
    )
    servers, issued = load_warned(path, {"TOKEN": "t"})
    remote, local = servers
    assert (remote.transport, dict(remote.headers)) == ("auto", {"A": "t"})
    workspace = str(tmp_path / "project")  # the parent of .cursor
    assert local.command == (f"{workspace}/bin/server", "--home", os.path.expanduser("~"))
    assert dict(local.env) == {"TOKEN": "t"}
    assert fields_warned(path, issued) == {("local", "envFile")}


def test_cline_fields_are_honoured_or_warned_never_refused(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        {
            "mcpServers": {
                "github": {
                    "command": "docker",
                    "args": ["run", "-i", "ghcr.io/github/github-mcp-server"],
                    "alwaysAllow": ["get_issue", "list_issues"],
                    "autoApprove": ["get_issue"],
                    "disabled": False,
                    "timeout": 90,
                    "transportType": "stdio",
                },
                "remote": {"type": "streamableHttp", "url": "https://x.dev/mcp", "timeout": 0},
                "legacy": {"transportType": "sse", "url": "https://x.dev/sse"},
                "roo": {"type": "streamable-http", "url": "https://x.dev/mcp", "disabledTools": []},
                "both": {"command": "x", "timeout": 5, "call_timeout": 7},
                "off": {"command": "rm", "args": ["-rf", "${NOT_SET}"], "disabled": True},
                "unsure": {"command": "x", "disabled": "yes"},
            }
        },
    )
    servers, issued = load_warned(path)
    by_name = {s.name: s for s in servers}
    assert list(by_name) == ["github", "remote", "legacy", "roo", "both"]
    assert by_name["github"].call_timeout == 90.0 and by_name["github"].transport == "stdio"
    assert by_name["remote"].call_timeout == 300.0 and by_name["remote"].transport == "http"
    assert by_name["legacy"].transport == "sse" and by_name["roo"].transport == "http"
    assert by_name["both"].call_timeout == 7.0
    assert fields_warned(path, issued) == {
        ("github", "alwaysAllow"),
        ("github", "autoApprove"),
        ("remote", "timeout"),
        ("roo", "disabledTools"),
        ("both", "timeout"),
        ("unsure", "disabled"),
    }
    always = next(w for w in issued if ": alwaysAllow: " in w)
    assert "never loosened" in always and "mcp__github__get_issue" in always
    assert "skipped" in next(w for w in issued if ": disabled: " in w)


def test_vscode_files_load_with_comments_inputs_and_its_variables(tmp_path: Path) -> None:
    vscode = tmp_path / "repo" / ".vscode"
    vscode.mkdir(parents=True)
    path = vscode / "mcp.json"
    path.write_text(
        """{
  // VS Code keeps servers under "servers", with inputs it prompts for
  "inputs": [{"type": "promptString", "id": "api-key", "description": "Key", "password": true}],
  "servers": {
    "playwright": {"type": "stdio", "command": "npx", "args": ["@playwright/mcp@latest"],
                   "cwd": "${workspaceFolder}", "dev": {"watch": "src/**/*.ts"}},
    "github": {"type": "http", "url": "https://api.githubcopilot.com/mcp/",
               "headers": {"Authorization": "Bearer ${input:api-key}"}},
    "weather": {"type": "sse", "url": "http://localhost:8000/sse", /* inline */ },
    "microsoft/markitdown": {"command": "uvx", "args": ["markitdown-mcp"]},
    "socket": {"type": "ws", "url": "ws://localhost:9"},
  },
}
"""
    )
    servers, issued = load_warned(path)
    playwright, weather = servers
    assert playwright.cwd == str(tmp_path / "repo") and weather.transport == "sse"
    assert fields_warned(path, issued) == {
        ("playwright", "dev"),
        ("github", "headers.Authorization"),
        ("microsoft/markitdown", "name"),
        ("socket", "type"),
    }
    skipped = [w for w in issued if w.endswith("the server is skipped")]
    assert len(skipped) == 3
    assert "${input:api-key}" in next(w for w in skipped if "'github'" in w)

    # The same servers in VS Code's user settings, under "mcp".
    settings = tmp_path / "settings.json"
    vscode_user = {"editor.tabSize": 2, "mcp": {"servers": {"t": {"command": "x"}}}}
    settings.write_text(json.dumps(vscode_user))
    assert [s.name for s in load_warned(settings)[0]] == ["t"]


def test_fields_of_the_other_transport_are_warned_and_ignored(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        {
            "mcpServers": {
                "web": {"type": "http", "url": "http://h/mcp", "cwd": "/", "env": {"A": "b"}},
                "local": {"command": "x", "headers": {"A": "b"}, "url": "http://h", "color": 3},
            },
            "servers": {"ignored": {"command": "y"}},
        },
    )
    servers, issued = load_warned(path)
    web, local = servers
    assert web.cwd is None and not web.env and not local.headers and local.url is None
    assert fields_warned(path, issued) == {
        ("web", "cwd"),
        ("web", "env"),
        ("local", "headers"),
        ("local", "url"),
        ("local", "color"),
        ("*", "servers"),
    }


def test_warnings_follow_pythons_filters_and_stay_listed(tmp_path: Path) -> None:
    """Warnings are warnings: under ``-W error`` they raise, as Python's filters say, but
    ``warnings()`` is there for callers that filter them out."""
    path = write(tmp_path, {"mcpServers": {"a": {"command": "x", "alwaysAllow": ["t"]}}})
    with pytest.raises(FastgateConfigWarning, match="alwaysAllow"):
        load_mcp_config(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FastgateConfigWarning)
        servers = load_mcp_config(path)
    assert [s.name for s in servers] == ["a"] and len(servers.warnings()) == 1
