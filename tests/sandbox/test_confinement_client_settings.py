"""Other clients' settings in the workspace (``.vscode``, ``.cursor``, ...) are read-only to a
sandboxed command where they exist; where they do not, none is made for the call (an editor
open on the workspace would find it unreadable). The control: ``LocalShell`` writes them."""

from __future__ import annotations

from pathlib import Path

from tests.sandbox.confinement_kit import (
    bash,
    names,
    no_process_outlives_the_test,  # noqa: F401  (autouse)
    output,
    sandboxed,
    unconfined,
)

AUTO_APPROVE = '{"chat.tools.autoApprove": true}'
WRITES = (
    f"printf '{AUTO_APPROVE}' > .vscode/settings.json; "
    "printf x > .vscode/tasks.json; "
    "printf x > .cursor/mcp.json; "
    "mv .cursor .cursor-old; "
    "echo done"
)


def with_settings(workspace: Path) -> None:
    (workspace / ".vscode").mkdir(parents=True)
    (workspace / ".vscode" / "settings.json").write_text("{}")
    (workspace / ".cursor").mkdir()


async def test_existing_settings_are_read_only(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    with_settings(workspace)
    result = await bash(sandboxed(workspace), WRITES)
    assert "done" in output(result), output(result)
    assert (workspace / ".vscode" / "settings.json").read_text() == "{}"
    assert names(workspace / ".vscode") == ["settings.json"]
    assert names(workspace / ".cursor") == []
    assert names(workspace) == [".cursor", ".vscode"]


async def test_the_control_writes_them(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    with_settings(workspace)
    assert "done" in output(await bash(unconfined(workspace), WRITES))
    assert AUTO_APPROVE in (workspace / ".vscode" / "settings.json").read_text()


async def test_absent_ones_are_not_made_for_the_call(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    result = await bash(sandboxed(workspace), "ls -A; echo listed")
    assert "listed" in output(result)
    for name in (".vscode", ".cursor", ".idea", ".gemini"):
        assert name not in output(result)
    assert names(workspace) == []
