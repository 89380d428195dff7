"""``mcp__<server>`` rules (no tool part) govern every tool of that server (SPEC §5): the bridge's
definitions declare it in their ``rule_names``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fastgate import ApprovalStore, Decision, PermissionConfig, PermissionMode, PermissionResolver
from fastgate.mcp import MCPServerConfig
from fastgate.mcp._tools import build_listing
from fastgate.model.context import ExecutionContext
from fastgate.permissions import settings_path
from fastgate.tools import ToolDefinition

READ_ONLY_HINT = {"readOnlyHint": True}


def server_tools(server: str, *names: str) -> dict[str, ToolDefinition]:
    """The definitions the bridge makes for these tools (trusted: readers are READ_ONLY)."""
    config = MCPServerConfig(server, command=["unused"], trust_annotations=True)
    raw = [
        {
            "name": name,
            "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}},
            "annotations": READ_ONLY_HINT if name.startswith("read") else {},
        }
        for name in names
    ]

    async def call(remote: str, args: Any, ctx: Any) -> Any:
        return None

    listing = build_listing(config, raw, call, lambda name: False)
    return {listing.remote_names[d.name]: d for d in listing.definitions}


FS = server_tools("fs", "read_file", "write_file", "café_au_lait")
OTHER = server_tools("fsx", "read_file")["read_file"]  # another server, same prefix
READ, WRITE, MANGLED = FS["read_file"], FS["write_file"], FS["café_au_lait"]


def decide(
    tool: ToolDefinition,
    root: Path,
    mode: PermissionMode = PermissionMode.DEFAULT,
    **config: Any,
) -> Decision:
    resolver = PermissionResolver(PermissionConfig(**config), mode, ApprovalStore())
    ctx = ExecutionContext(session_id="s", workspace_root=str(root))
    return resolver.decide(tool, {"path": "/x"}, ctx).decision


def test_the_bridge_declares_the_server_rule_name() -> None:
    assert READ.rule_names == WRITE.rule_names == MANGLED.rule_names == ("mcp__fs",)
    assert MANGLED.name != "mcp__fs__café_au_lait" and MANGLED.name.startswith("mcp__fs__")


def test_a_server_deny_rule_covers_every_tool_of_that_server_only(tmp_path: Path) -> None:
    for tool in (READ, WRITE, MANGLED):
        assert decide(tool, tmp_path, deny=["mcp__fs"]) is Decision.DENY
    assert decide(OTHER, tmp_path, deny=["mcp__fs"]) is Decision.ALLOW


def test_server_rules_and_tool_rules_combine_by_precedence(tmp_path: Path) -> None:
    # DENY > ASK > ALLOW, whichever of the two names the rule is written against.
    assert decide(READ, tmp_path, ask=["mcp__fs"], allow=["mcp__fs__read_file"]) is Decision.ASK
    assert decide(WRITE, tmp_path, allow=["mcp__fs"], deny=["mcp__fs__write_file"]) is Decision.DENY
    assert decide(WRITE, tmp_path, allow=["mcp__fs"]) is Decision.ALLOW
    assert decide(WRITE, tmp_path) is Decision.ASK  # the mode default without any rule


def test_a_server_ask_rule_asks_even_for_trusted_read_only_tools(tmp_path: Path) -> None:
    assert decide(READ, tmp_path) is Decision.ALLOW
    assert decide(READ, tmp_path, ask=["mcp__fs"]) is Decision.ASK
    # YOLO lets ASK rules allow, as for any tool.
    assert decide(READ, tmp_path, PermissionMode.YOLO, ask=["mcp__fs"]) is Decision.ALLOW


def test_server_rules_in_the_project_settings_file_count_too(tmp_path: Path) -> None:
    path = Path(settings_path(str(tmp_path)))
    path.parent.mkdir()
    path.write_text(json.dumps({"permissions": {"deny": ["mcp__fs"]}}))
    assert decide(READ, tmp_path) is Decision.DENY
    assert decide(WRITE, tmp_path, allow=["mcp__fs__write_file"]) is Decision.DENY
    assert decide(OTHER, tmp_path) is Decision.ALLOW


def test_claude_codes_server_wildcard_spelling_is_the_server_rule(tmp_path: Path) -> None:
    # Claude Code writes a rule for every tool of a server as mcp__<server>__* too.
    for tool in (READ, WRITE, MANGLED):
        assert decide(tool, tmp_path, PermissionMode.YOLO, deny=("mcp__fs__*",)) is Decision.DENY
    assert decide(OTHER, tmp_path, PermissionMode.YOLO, deny=("mcp__fs__*",)) is Decision.ALLOW
    assert decide(WRITE, tmp_path, allow=("mcp__fs__*(*)",)) is Decision.ALLOW
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"permissions": {"ask": ["mcp__fs__*"]}}))
    loaded = PermissionConfig.load(settings)
    assert loaded.ask == ("mcp__fs__*",) and loaded.source_of("mcp__fs__*") == str(settings)
    resolver = PermissionResolver(loaded, PermissionMode.DEFAULT, ApprovalStore())
    ctx = ExecutionContext(session_id="s", workspace_root=str(tmp_path))
    assert resolver.decide(READ, {"path": "/x"}, ctx).decision is Decision.ASK
    assert resolver.decide(OTHER, {"path": "/x"}, ctx).decision is not Decision.ASK


def test_a_wildcard_anywhere_else_in_a_tool_name_is_refused() -> None:
    for rule, reason in (
        ("mcp__fs__get_*", "invalid tool name"),
        ("mcp____*", "invalid tool name"),
        ("Bash*", "invalid tool name"),
        ("mcp__fs__*(/etc/**)", "takes no specifier"),
    ):
        with pytest.raises(ValueError, match=reason):
            PermissionConfig(deny=(rule,))
