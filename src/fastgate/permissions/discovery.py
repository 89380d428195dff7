"""Which settings files and MCP config a workspace already has (SPEC §17 "Discovery").

The command line (``fastgate call``, ``fastgate serve``) reads what Claude Code would read for the
workspace, in Claude Code's order (user, project, local), then fastgate's own files; later files
add rules and hooks, and a later ``defaultMode`` wins. Only files that exist are returned, so the
caller can name every file it read.
"""

from __future__ import annotations

import json
import os

#: Claude Code's managed (organisation) settings on Linux: read last, so its ``defaultMode``
#: wins and its deny rules hold whatever the other files allow.
MANAGED_SETTINGS = "/etc/claude-code/managed-settings.json"


def settings_files(workspace: str, home: str | None = None) -> list[str]:
    """The settings files to load for ``workspace``, in order, those that exist: the user's,
    the workspace's, then the managed ones.

    ``home`` defaults to ``$HOME`` (a server without one reads no user-level file)."""
    if home is None:
        home = os.environ.get("HOME") or None
    candidates = []
    if home:
        candidates.append(os.path.join(home, ".claude", "settings.json"))
    for folder in (".claude", ".fastgate"):
        candidates.append(os.path.join(workspace, folder, "settings.json"))
        candidates.append(os.path.join(workspace, folder, "settings.local.json"))
    candidates.append(MANAGED_SETTINGS)
    found: list[str] = []
    for path in candidates:
        # The user's file may also be the workspace's (a workspace at $HOME): read it once.
        if os.path.isfile(path) and os.path.realpath(path) not in map(os.path.realpath, found):
            found.append(path)
    return found


def mcp_config_file(workspace: str) -> str | None:
    """The workspace's ``.mcp.json`` (Claude Code's project-scoped MCP servers), if any."""
    path = os.path.join(workspace, ".mcp.json")
    return path if os.path.isfile(path) else None


def disabled_mcp_servers(settings_files: list[str]) -> frozenset[str]:
    """The workspace's ``.mcp.json`` servers the settings turn off: every name listed under
    ``disabledMcpjsonServers`` in any of ``settings_files`` (turning a server off only
    tightens, so every file may). A file that cannot be read names none here: loading the
    settings reports it."""
    names: set[str] = set()
    for path in settings_files:
        try:
            with open(path, "rb") as file:
                document = json.load(file)
        except (OSError, ValueError):
            continue
        listed = document.get("disabledMcpjsonServers") if isinstance(document, dict) else None
        if isinstance(listed, list):
            names.update(name for name in listed if isinstance(name, str))
    return frozenset(names)
