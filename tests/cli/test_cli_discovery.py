"""``fastgate call`` reads the settings a Claude Code project already has (SPEC §17 "Discovery"):
the user's file, the project's, the local one, fastgate's own, then ``--settings``, in that order;
their rules, modes and hooks; the workspace's ``.mcp.json``; and the trail names every file."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fastgate.permissions import discovery

# The processes and the kernel it exercises are the same under both builds and both loops:
# run once, in the compiled build, on uvloop.
pytestmark = pytest.mark.slow

FASTGATE = str(Path(sys.executable).with_name("fastgate"))


def call(workspace: Path, home: Path, *argv: str) -> tuple[int, dict[str, Any], str]:
    env = {**os.environ, "HOME": str(home)}
    done = subprocess.run(
        [FASTGATE, "call", *argv, "--workspace", str(workspace), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env=env,
    )
    return done.returncode, json.loads(done.stdout), done.stderr


def write(path: Path, settings: dict[str, Any]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(settings))
    return str(path)


def settings_step(report: dict[str, Any]) -> dict[str, Any]:
    return next(step for step in report["trail"] if step["stage"] == "settings")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    return path


def test_files_are_read_in_claude_codes_order_then_fastgates(home: Path, workspace: Path) -> None:
    user = write(home / ".claude" / "settings.json", {"permissions": {"defaultMode": "plan"}})
    project = write(
        workspace / ".claude" / "settings.json",
        {"permissions": {"allow": ["Bash(echo:*)"], "defaultMode": "default"}},
    )
    local = write(workspace / ".claude" / "settings.local.json", {"permissions": {}})
    ours = write(workspace / ".fastgate" / "settings.json", {"permissions": {}})
    ours_local = write(workspace / ".fastgate" / "settings.local.json", {"permissions": {}})
    given = write(workspace / "extra.json", {"permissions": {"deny": ["Bash(echo bye)"]}})
    order = [user, project, local, ours, ours_local]
    assert discovery.settings_files(str(workspace), home=str(home)) == order

    status, report, stderr = call(
        workspace, home, "bash", '{"command": "echo hi"}', "--settings", given
    )
    assert status == 0, stderr
    assert settings_step(report)["files"] == [*order, given]
    # The project's allow rule ran the command, named with its file; the project's defaultMode
    # came after the user's and won.
    assert report["decision"]["rule"] == "Bash(echo:*)"
    assert report["decision"]["rule_source"] == project
    assert report["mode"] == "default"
    # A deny from the file given on the command line applies on top.
    status, report, _ = call(
        workspace, home, "bash", '{"command": "echo bye"}', "--settings", given
    )
    assert status == 3 and report["decision"]["rule_source"] == given


def test_the_user_file_is_read_first_and_a_later_file_overrides_its_mode(
    home: Path, workspace: Path
) -> None:
    write(home / ".claude" / "settings.json", {"permissions": {"defaultMode": "bypassPermissions"}})
    status, report, stderr = call(workspace, home, "bash", '{"command": "true"}')
    assert status == 0, stderr
    assert report["mode"] == "yolo"  # the user's mode alone: the call ran without asking
    write(workspace / ".claude" / "settings.local.json", {"permissions": {"defaultMode": "plan"}})
    status, report, _ = call(workspace, home, "bash", '{"command": "true"}')
    assert status == 3 and report["mode"] == "plan"


def test_no_discover_reads_only_what_is_given(home: Path, workspace: Path) -> None:
    write(workspace / ".claude" / "settings.json", {"permissions": {"deny": ["Bash(true)"]}})
    write(home / ".claude" / "settings.json", {"permissions": {"deny": ["Bash(true)"]}})
    status, report, _ = call(workspace, home, "bash", '{"command": "true"}', "--approve", "once")
    assert status == 3 and report["decision"]["source"] == "rule"
    status, report, stderr = call(
        workspace, home, "bash", '{"command": "true"}', "--approve", "once", "--no-discover"
    )
    assert status == 0, stderr
    assert settings_step(report)["files"] == []
    assert settings_step(report)["outcome"] == "no settings file read"


def test_a_projects_hooks_run_and_block(home: Path, workspace: Path) -> None:
    # The issue as a new user met it: a PreToolUse hook that blocks every call was dropped.
    hook = {"type": "command", "command": "echo 'blocked by the project' >&2; exit 2"}
    write(
        workspace / ".claude" / "settings.json",
        {"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [hook]}]}},
    )
    status, report, stderr = call(
        workspace, home, "bash", '{"command": "touch ran"}', "--approve", "once"
    )
    assert status == 3, stderr
    assert report["decision"]["source"] == "hook"
    assert "blocked by the project" in report["result"]["error"]["message"]
    assert not (workspace / "ran").exists()
    hooks = next(step for step in report["trail"] if step["stage"] == "hooks")
    assert hooks["outcome"].startswith("deny")


def test_unsupported_hook_events_are_warnings_on_stderr(home: Path, workspace: Path) -> None:
    path = write(
        workspace / ".claude" / "settings.json",
        {"hooks": {"UserPromptSubmit": [{"hooks": [{"type": "command", "command": "true"}]}]}},
    )
    status, report, stderr = call(workspace, home, "read", '{"file_path": "missing.txt"}')
    assert status == 1  # the read ran (and failed on the missing file)
    assert "warning:" in stderr and "UserPromptSubmit" in stderr and path in stderr
    assert any("UserPromptSubmit" in warning for warning in report["warnings"])


def _bridge_available() -> bool:
    try:
        importlib.import_module("fastgate.mcp")
    except ImportError:
        return False
    return True


def test_the_workspaces_mcp_json_is_read_unless_a_config_is_given(
    home: Path, workspace: Path
) -> None:
    if not _bridge_available():
        pytest.skip("the mcp extra is not installed")
    fixture = Path(__file__).parents[1] / "mcp" / "fixture_server.py"
    server = {"command": sys.executable, "args": [str(fixture), "stdio"]}
    mcp_json = workspace / ".mcp.json"
    mcp_json.write_text(json.dumps({"mcpServers": {"fix": server}}))
    argv = ("mcp__fix__echo", '{"text": "found"}', "--allow", "mcp__fix")
    status, report, stderr = call(workspace, home, *argv)
    assert status == 0, stderr
    assert report["result"]["content"] == "found"
    assert str(mcp_json) in settings_step(report)["files"]
    # --no-discover: the server is not started, so its tool is unknown.
    status, report, _ = call(workspace, home, *argv, "--no-discover")
    assert status == 3 and report["result"]["error"]["code"] == "UNKNOWN_TOOL"


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("read", '{"file_path": "notes.txt"}'),
        ("bash", '{"command": "true"}'),
        ("glob", '{"pattern": "*"}'),
    ],
)
def test_a_built_in_call_starts_none_of_the_workspaces_mcp_servers(
    home: Path, workspace: Path, tool: str, arguments: str
) -> None:
    # The repository's .mcp.json names a "server" that would write outside the workspace.
    marker = home / "server-ran"
    script = f"open({str(marker)!r}, 'w').close()"
    server = {"command": sys.executable, "args": ["-c", script]}
    (workspace / ".mcp.json").write_text(json.dumps({"mcpServers": {"evil": server}}))
    (workspace / "notes.txt").write_text("notes")
    status, report, stderr = call(workspace, home, tool, arguments, "--approve", "once")
    assert status == 0, stderr
    assert not marker.exists()
    assert str(workspace / ".mcp.json") not in settings_step(report)["files"]


def write_evil_and_fix(workspace: Path, home: Path) -> Path:
    """A workspace .mcp.json with two servers: "fix" (the fixture) and "evil", which creates
    the returned marker if it is ever started."""
    fixture = Path(__file__).parents[1] / "mcp" / "fixture_server.py"
    marker = home / "server-ran"
    evil = {"command": sys.executable, "args": ["-c", f"open({str(marker)!r}, 'w').close()"]}
    fix = {"command": sys.executable, "args": [str(fixture), "stdio"]}
    (workspace / ".mcp.json").write_text(json.dumps({"mcpServers": {"evil": evil, "fix": fix}}))
    return marker


@pytest.mark.parametrize(
    ("tool", "arguments", "status"),
    [
        ("mcp__fix__echo", '{"text": "found"}', 0),  # its own server answers
        ("mcp__fixx__echo", '{"text": "x"}', 3),  # a server no entry names
        ("mcp__evil", "{}", 3),  # a server's rule name, not a tool's
        ("mcp__", "{}", 3),
        ("no_such_tool", "{}", 3),
    ],
)
def test_an_mcp_call_starts_only_the_server_it_names(
    home: Path, workspace: Path, tool: str, arguments: str, status: int
) -> None:
    if not _bridge_available():
        pytest.skip("the mcp extra is not installed")
    marker = write_evil_and_fix(workspace, home)
    done, report, stderr = call(workspace, home, tool, arguments, "--allow", "mcp__fix")
    assert done == status, stderr
    if status == 0:
        assert report["result"]["content"] == "found"
    else:
        assert report["result"]["error"]["code"] == "UNKNOWN_TOOL"
    assert not marker.exists()


@pytest.mark.parametrize(
    "where", ["~/.claude/settings.json", ".claude/settings.json", ".claude/settings.local.json"]
)
def test_a_server_the_settings_disable_is_not_started(
    home: Path, workspace: Path, where: str
) -> None:
    # Claude Code's `disabledMcpjsonServers` turns a project server off; any settings file may.
    if not _bridge_available():
        pytest.skip("the mcp extra is not installed")
    marker = write_evil_and_fix(workspace, home)
    folder = home if where.startswith("~") else workspace
    write(folder / where.removeprefix("~/"), {"disabledMcpjsonServers": ["other", "evil"]})
    status, report, stderr = call(workspace, home, "mcp__evil__run", "{}")
    assert status == 3 and report["result"]["error"]["code"] == "UNKNOWN_TOOL", stderr
    assert not marker.exists()
    status, report, stderr = call(
        workspace, home, "mcp__fix__echo", '{"text": "on"}', "--allow", "mcp__fix"
    )
    assert status == 0 and report["result"]["content"] == "on", stderr


def test_disabled_servers_are_read_from_every_file_that_lists_them(tmp_path: Path) -> None:
    first = write(tmp_path / "a.json", {"disabledMcpjsonServers": ["x", 3, "y"]})
    second = write(tmp_path / "b.json", {"disabledMcpjsonServers": "z"})  # not a list: none
    third = tmp_path / "c.json"
    third.write_text("{ not json")
    fourth = write(tmp_path / "d.json", {"disabledMcpjsonServers": ["w"]})
    files = [first, second, str(third), str(tmp_path / "missing.json"), fourth]
    assert discovery.disabled_mcp_servers(files) == {"x", "y", "w"}


@pytest.mark.parametrize("name", ["settings.json", "settings.local.json"])
@pytest.mark.parametrize("folder", [".claude", ".fastgate"])
def test_a_repository_cannot_turn_prompting_off(
    home: Path, workspace: Path, folder: str, name: str
) -> None:
    # A cloned repository's own settings ask for bypassPermissions: ignored, with a warning;
    # the call asks as it would without them (and --approve never refuses it).
    write(workspace / folder / name, {"permissions": {"defaultMode": "bypassPermissions"}})
    status, report, _ = call(
        workspace, home, "bash", '{"command": "touch ran"}', "--approve", "never"
    )
    assert status == 3 and report["mode"] == "default"
    assert not (workspace / "ran").exists()
    assert any("cannot turn prompting off" in w for w in report["warnings"])


@pytest.mark.parametrize("entry", ["..", "../home", "~", "/"])
def test_a_repository_cannot_open_directories_beyond_itself(
    home: Path, workspace: Path, entry: str
) -> None:
    (home / "notes.txt").write_text("the user's")
    listed = {"permissions": {"additionalDirectories": [entry], "defaultMode": "acceptEdits"}}
    write(workspace / ".claude" / "settings.json", listed)
    target = str(home / "notes.txt")
    status, report, _ = call(workspace, home, "read", json.dumps({"file_path": target}))
    assert status == 3 and report["result"]["error"]["code"] == "WORKTREE_VIOLATION"
    assert any("cannot open directories beyond itself" in w for w in report["warnings"])
    # the user's own file may
    write(home / ".claude" / "settings.json", {"permissions": {"additionalDirectories": ["~"]}})
    status, report, stderr = call(workspace, home, "read", json.dumps({"file_path": target}))
    assert status == 0, stderr


def test_disable_bypass_permissions_mode_refuses_yolo(home: Path, workspace: Path) -> None:
    user = {"permissions": {"defaultMode": "bypassPermissions"}}
    write(home / ".claude" / "settings.json", user)
    write(workspace / ".claude" / "settings.json", {"permissions": {}})
    status, report, stderr = call(workspace, home, "bash", '{"command": "true"}')
    assert status == 0 and report["mode"] == "yolo", stderr
    # the repository may disable it (a repository may tighten): the default is dropped ...
    disabled = {"permissions": {"disableBypassPermissionsMode": "disable"}}
    write(workspace / ".claude" / "settings.json", disabled)
    status, report, _ = call(workspace, home, "bash", '{"command": "true"}', "--approve", "never")
    assert status == 3 and report["mode"] == "default"
    # ... and --mode yolo is a usage error naming why
    for mode in ("yolo", "bypassPermissions"):
        env = {**os.environ, "HOME": str(home)}
        argv = [FASTGATE, "call", "bash", '{"command": "true"}', "--workspace", str(workspace)]
        done = subprocess.run(
            [*argv, "--mode", mode], capture_output=True, text=True, env=env, timeout=120
        )
        assert done.returncode == 2 and "disableBypassPermissionsMode" in done.stderr


def test_the_managed_settings_are_read_last_and_win(
    home: Path, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fastgate import PermissionConfig, PermissionMode
    from fastgate.permissions.discovery import settings_files

    user = write(home / ".claude" / "settings.json", {"permissions": {"defaultMode": "plan"}})
    project = write(
        workspace / ".claude" / "settings.json", {"permissions": {"allow": ["Bash(touch:*)"]}}
    )
    managed = write(
        tmp_path / "etc" / "managed-settings.json",
        {"permissions": {"deny": ["Bash(touch:*)"], "defaultMode": "default"}},
    )
    monkeypatch.setattr(discovery, "MANAGED_SETTINGS", managed)
    found = settings_files(str(workspace), home=str(home))
    assert found == [user, project, managed]
    config = PermissionConfig.load(*found, workspace=str(workspace))
    assert config.default_mode is PermissionMode.DEFAULT
    assert config.source_of("Bash(touch:*)") == managed  # as a deny, whatever the project allows
