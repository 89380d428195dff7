"""Other agents' and editors' project settings are protected as ``.claude``'s are: an agent that
writes ``.vscode/settings.json`` with ``"chat.tools.autoApprove": true`` turned an editor's agent
into one that asks for nothing, and one that writes ``.cursor/mcp.json`` adds a server that the
editor (and ``load_mcp_config``) starts later. Writing one asks in every mode, YOLO and allow
rules included, through ``bash`` and the file tools alike; each spelling was allowed before.
Reading them, and files that only share a name, stay as the mode says."""

from __future__ import annotations

from pathlib import Path

import pytest

from fastgate import Decision, PermissionMode
from fastgate.permissions import CLIENT_SETTINGS, DEFAULT_PROTECTED
from tests.permissions_round3_kit import (
    ACCEPT_EDITS,
    DEFAULT,
    YOLO,
    asks_as_guarded,
    project,
    ruling,
    tool_ruling,
)

ALLOW_ALL = tuple(
    f"Bash({program}:*)"
    for program in ("echo", "printf", "tee", "cp", "mv", "ln", "sed", "cat", "mkdir", "cd", "jq")
)

SHELL_WRITES = [
    """echo '{"chat.tools.autoApprove": true}' > .vscode/settings.json""",
    "jq '.\"chat.tools.autoApprove\"=true' .vscode/settings.json > t && mv t .vscode/settings.json",
    "sed -i 's/false/true/' .vscode/settings.json",
    """printf '{"version":"2.0.0","tasks":[{"runOptions":{"runOn":"folderOpen"}}]}' """
    "> .vscode/tasks.json",
    "mkdir -p .vscode && cp /tmp/mcp.json .vscode/mcp.json",
    "mkdir -p .cursor && echo '{\"mcpServers\":{}}' > .cursor/mcp.json",
    "cd .cursor && tee mcp.json < /tmp/m",
    "echo x > .cursor/rules/always.mdc",
    "echo x > .windsurf/rules/r.md",
    "echo '{\"hooks\":{}}' > .gemini/settings.json",
    "echo x > .codex/config.toml",
    "echo x > .amazonq/mcp.json",
    "echo x > .continue/config.yaml",
    "echo x > .roo/mcp.json",
    "echo x > .zed/settings.json",
    "echo x > .idea/runConfigurations/r.xml",
    "ln -sf /tmp/evil.json packages/app/.vscode/settings.json",
    "mv /tmp/d .vscode",
]


@pytest.mark.parametrize("mode", [YOLO, DEFAULT])
@pytest.mark.parametrize("command", SHELL_WRITES)
def test_writing_another_clients_settings_asks(
    command: str, mode: PermissionMode, tmp_path: Path
) -> None:
    decided = ruling(command, project(tmp_path / "ws"), mode=mode, allow=ALLOW_ALL)
    assert asks_as_guarded(decided), decided.reason


@pytest.mark.parametrize("mode", [YOLO, ACCEPT_EDITS])
@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("write", {"file_path": ".vscode/settings.json", "content": "{}"}),
        ("write", {"file_path": ".cursor/mcp.json", "content": "{}"}),
        ("edit", {"file_path": ".vscode/tasks.json", "old_string": "a", "new_string": "b"}),
        (
            "apply_patch",
            {"patch": "*** Begin Patch\n*** Add File: .gemini/settings.json\n+{}\n*** End Patch"},
        ),
    ],
)
def test_the_file_tools_ask_too(
    tool: str, args: dict[str, str], mode: PermissionMode, tmp_path: Path
) -> None:
    root = project(tmp_path / "ws")
    (root / ".vscode").mkdir()
    (root / ".vscode" / "tasks.json").write_text("a")
    assert asks_as_guarded(tool_ruling(tool, args, root, mode=mode))


@pytest.mark.parametrize(
    "command",
    [
        "cat .vscode/settings.json",
        "ls .cursor",
        "echo x > src/vscode/settings.json",
        "echo x > docs/.vscode.md",
        "echo x > src/cursor.json",
    ],
)
def test_reading_them_or_files_of_like_names_stay_allowed(command: str, tmp_path: Path) -> None:
    """Control."""
    decided = ruling(command, project(tmp_path / "ws"), mode=YOLO, allow=ALLOW_ALL)
    assert decided.decision is Decision.ALLOW, decided.reason


def test_they_are_on_the_default_list() -> None:
    assert set(CLIENT_SETTINGS) <= set(DEFAULT_PROTECTED)
