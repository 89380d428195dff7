"""Round 5, found from outside: a redirection through ``/dev/fd/..`` allowed as harmless, words
``xargs`` reads standing in for a denied subcommand, a workspace's settings file linked to a file
outside it, and git's own directory or ``gitdir:`` file replaced without asking. Each class has
several spellings; each spelling failed before its fix (unless marked as a control)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import warnings
from pathlib import Path
from typing import Any

import pytest

from fastgate import (
    ApprovalResponse,
    Decision,
    DecisionSource,
    ExecutionContext,
    PermissionConfig,
    PermissionMode,
)
from fastgate.builtin import LocalShell
from fastgate.permissions.discovery import settings_files
from tests.builtin_kit import builtin_executor
from tests.permissions_round3_kit import (
    ACCEPT_EDITS,
    DEFAULT,
    YOLO,
    asks_as_guarded,
    ruling,
    tool_ruling,
)

# -- redirection targets taken as harmless: exactly the devices, nothing through them -----------

ALLOW_ECHO = ("Bash(echo:*)",)

CLIMBING_TARGETS = [
    "echo x > /dev/fd/../../..{ws}/Makefile",
    "echo x >> /dev/fd/../../..{ws}/Makefile",
    "echo x >| /dev/fd/1/../../../..{ws}/Makefile",
    "echo x 2> /dev/fd/../x",
    "echo x &> /dev/fd/../x",
    "echo x > /dev/fd/",
    "echo x > /dev/fd/1x",
    "echo x > /dev/fd/1/",
    "echo x > '/dev/fd/../../..{ws}/Makefile'",
    "echo x > /dev/fd//../x",
]
# Never allowed before either: the exact set of devices had no prefix test.
OTHER_DEVICE_SPELLINGS = [
    "echo x > /dev/null/../x",
    "echo x > /dev/stdout/../../x",
    "echo x > /dev/stderr/..",
    "echo x > /dev/nullx",
    "echo x > //dev/fd/../x",
]


@pytest.mark.parametrize("command", CLIMBING_TARGETS + OTHER_DEVICE_SPELLINGS)
def test_a_redirection_through_a_device_path_is_no_harmless_target(
    command: str, tmp_path: Path
) -> None:
    decided = ruling(command.format(ws=tmp_path), tmp_path, allow=ALLOW_ECHO)
    assert decided.decision is not Decision.ALLOW, decided.reason


@pytest.mark.parametrize(
    "command",
    [
        "echo x > /dev/null",
        "echo x 2>/dev/null",
        "echo x > /dev/stderr",
        "echo x >> /dev/stdout",
        "echo x > /dev/fd/2",
        "echo x 2> /dev/fd/10",
        "echo x 2>&1",
    ],
)
def test_the_harmless_devices_spelled_exactly_stay_allowed(command: str, tmp_path: Path) -> None:
    """Control: what the rule allows still runs without a prompt."""
    assert ruling(command, tmp_path, allow=ALLOW_ECHO).decision is Decision.ALLOW


def test_an_allowed_echo_cannot_write_a_file_through_dev_fd(tmp_path: Path) -> None:
    """The whole path: the redirection is asked (and refused here), the file keeps its text."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    makefile = workspace / "Makefile"
    makefile.write_text("all:\n")
    asked: list[Any] = []

    def refuse(request: Any) -> ApprovalResponse:
        asked.append(request)
        return ApprovalResponse(approved=False, feedback="no")

    executor = builtin_executor(
        workspace, mode=DEFAULT, permissions=PermissionConfig(allow=ALLOW_ECHO)
    )
    command = f"echo PWNED > /dev/fd/../../..{workspace}/Makefile"
    result = asyncio.run(
        executor.execute(
            "bash", {"command": command}, ExecutionContext(session_id="s1", approver=refuse)
        )
    )
    assert not result.ok and len(asked) == 1
    assert makefile.read_text() == "all:\n"


# -- xargs appends the words it reads: unknown words for deny and ask rules ---------------------

DENY_TAG = ("Bash(git tag:*)",)

XARGS_SUPPLIES_SUBCOMMAND = [
    "echo tag v1 | xargs git",
    "printf 'tag\\nv1\\n' | xargs git",
    "xargs git <<< 'tag v1'",
    "xargs -a /dev/stdin git <<< 'tag v1'",
    "xargs --arg-file=words git",
    "xargs --arg-file words git",
    "xargs -awords git",
    "xargs -n 2 git < words",
    "xargs -n2 -P 4 git < words",
    "xargs -L1 git < words",
    "xargs --max-lines=1 git < words",
    "xargs -d '\\n' git < words",
    "xargs -E END git < words",
    "xargs -s 4096 git < words",
    "xargs -0 -r -t git < words",
    "find . -name tags -print0 | xargs -0 git",
    "xargs -I{} -n 2 git < words",  # a later -n cancels -I: the words are appended
    "xargs --replace -L 1 git < words",
    "xargs nice -n 5 git < words",
    "xargs timeout 5 git < words",
    "xargs env git < words",
    "sudo xargs git < words",
    "xargs -- git < words",
    "xargs /usr/bin/git < words",
]


@pytest.mark.parametrize("mode", [YOLO, DEFAULT])
@pytest.mark.parametrize("command", XARGS_SUPPLIES_SUBCOMMAND)
def test_words_xargs_reads_may_be_the_denied_subcommand(
    command: str, mode: PermissionMode, tmp_path: Path
) -> None:
    decided = ruling(command, tmp_path, mode=mode, deny=DENY_TAG)
    assert decided.decision is Decision.DENY, decided.reason
    assert decided.source is DecisionSource.RULE


@pytest.mark.parametrize("command", ["echo push | xargs git", "xargs -n1 git < words"])
def test_words_xargs_reads_meet_ask_rules(command: str, tmp_path: Path) -> None:
    decided = ruling(command, tmp_path, ask=("Bash(git push:*)",))
    assert decided.decision is Decision.ASK
    assert decided.source is DecisionSource.RULE


@pytest.mark.parametrize(
    "command",
    [
        "echo v1 | xargs git tag",  # control: the subcommand written out
        "echo 'git tag v1' | xargs sh -c",  # the script itself comes from the input
        "echo 'git tag v1' | xargs bash -c",
    ],
)
def test_xargs_spellings_already_refused_stay_refused(command: str, tmp_path: Path) -> None:
    assert ruling(command, tmp_path, mode=YOLO, deny=DENY_TAG).decision is Decision.DENY


@pytest.mark.parametrize(
    "command",
    [
        "echo x | xargs git status",
        "echo x | xargs git log --oneline",
        "ls | xargs",
        "ls | xargs -n1",
        "echo a | xargs echo",
        "echo a | xargs -I{} git show {}",  # placeholder past the subcommand
    ],
)
def test_xargs_with_another_subcommand_is_not_denied(command: str, tmp_path: Path) -> None:
    """Control: the unknown words come after what the command names."""
    decided = ruling(command, tmp_path, mode=YOLO, deny=DENY_TAG)
    assert decided.decision is Decision.ALLOW, decided.reason


def test_xargs_denied_end_to_end(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    git = ["git", "-C", str(workspace), "-c", "user.name=a", "-c", "user.email=a@b"]
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    executor = builtin_executor(
        workspace, mode=YOLO, permissions=PermissionConfig(deny=DENY_TAG), shell=LocalShell()
    )
    result = asyncio.run(
        executor.execute(
            "bash", {"command": "echo tag v1 | xargs git"}, ExecutionContext(session_id="s1")
        )
    )
    assert not result.ok
    tags = subprocess.run([*git, "tag", "-l"], capture_output=True, text=True, check=True)
    assert tags.stdout == ""


# -- the workspace's own settings, found there or resolved there --------------------------------

REPOSITORY_OVERREACH = {
    "permissions": {"defaultMode": "bypassPermissions", "additionalDirectories": ["/"]}
}


def _load(workspace: Path, home: Path) -> tuple[list[str], PermissionConfig, list[str]]:
    files = settings_files(str(workspace), home=str(home))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = PermissionConfig.load(*files, workspace=str(workspace))
    return files, config, [str(w.message) for w in caught]


def _linked_file(workspace: Path, outside: Path, folder: str, name: str) -> None:
    (workspace / folder).mkdir(parents=True, exist_ok=True)
    target = outside / f"{folder.strip('.')}-{name}"
    target.write_text(json.dumps(REPOSITORY_OVERREACH))
    os.symlink(os.path.relpath(target, workspace / folder), workspace / folder / name)


def _linked_folder(workspace: Path, outside: Path, folder: str, name: str) -> None:
    target = outside / f"cfg{folder}"
    target.mkdir()
    (target / name).write_text(json.dumps(REPOSITORY_OVERREACH))
    os.symlink(os.path.relpath(target, workspace), workspace / folder)


SETTINGS_PLACES = [
    (link, folder, name)
    for link in (_linked_file, _linked_folder)
    for folder in (".claude", ".fastgate")
    for name in ("settings.json", "settings.local.json")
]


@pytest.mark.parametrize(("link", "folder", "name"), SETTINGS_PLACES)
def test_a_workspace_settings_file_linked_outside_is_still_the_workspaces(
    link: Any, folder: str, name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    workspace = tmp_path / "mono" / "packages" / "app"
    workspace.mkdir(parents=True)
    link(workspace, tmp_path / "mono", folder, name)
    files, config, notes = _load(workspace, home)
    assert files == [str(workspace / folder / name)]  # found where the repository put it
    assert config.default_mode is None
    assert config.additional_dirs == ()
    assert len(notes) == 2


def test_a_linked_workspace_settings_file_anchors_slash_at_the_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Read(/secrets/**)`` in ``<ws>/.claude/settings.json`` is the workspace's ``secrets/``,
    wherever the file links to (a shared file in a monorepo)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    workspace = tmp_path / "mono" / "app"
    (workspace / ".claude").mkdir(parents=True)
    (workspace / "secrets").mkdir()
    shared = tmp_path / "mono" / "shared-settings.json"
    shared.write_text(json.dumps({"permissions": {"deny": ["Read(/secrets/**)"]}}))
    os.symlink("../../shared-settings.json", workspace / ".claude" / "settings.json")
    config = PermissionConfig.load(workspace / ".claude" / "settings.json", workspace=workspace)
    from fastgate import ApprovalStore, PermissionResolver
    from tests.permissions_round3_kit import BUILTINS

    resolver = PermissionResolver(config, DEFAULT, ApprovalStore())
    ctx = ExecutionContext(session_id="s", workspace_root=str(workspace))
    read = BUILTINS["read"]
    decided = resolver.decide(read, {"file_path": str(workspace / "secrets" / "k")}, ctx)
    assert decided.decision is Decision.DENY


def test_the_users_own_settings_keep_their_mode_through_a_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Control: a user's ``~/.claude/settings.json`` linked to a dotfiles repository is still
    the user's, in a workspace elsewhere and in one at ``$HOME``."""
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    (home / "dotfiles").mkdir()
    (home / "dotfiles" / "claude.json").write_text(json.dumps(REPOSITORY_OVERREACH))
    os.symlink("../dotfiles/claude.json", home / ".claude" / "settings.json")
    monkeypatch.setenv("HOME", str(home))
    workspace = tmp_path / "ws"
    workspace.mkdir()
    for root in (workspace, home):
        _, config, _ = _load(root, home)
        assert config.default_mode is PermissionMode.YOLO
        assert config.additional_dirs == ("/",)


# -- a `.git` entry written: git reads its configuration and hooks through it -------------------

GIT_ENTRY_WRITES = [
    "echo 'gitdir: evil' > .git",
    "printf x >| sub/.git",
    "> vendor/lib/.git",
    "echo x >> ./sub/../.git",
    "tee vendor/lib/.git < f",
    "cp f vendor/lib/.git",
    "cp -f f .git",
    "install f sub/.git",
    "mv f .git",
    "ln -sf evil .git",
    "touch sub/.git",
    "dd if=f of=.git",
    "sed -i s/a/b/ .git",
    "truncate -s0 .git",
    "echo x | sudo tee sub/.git",
]


@pytest.mark.parametrize("mode", [YOLO, ACCEPT_EDITS])
@pytest.mark.parametrize("command", GIT_ENTRY_WRITES)
def test_a_command_writing_a_git_entry_asks(
    command: str, mode: PermissionMode, tmp_path: Path
) -> None:
    assert asks_as_guarded(ruling(command, tmp_path, mode=mode))


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("write", {"file_path": ".git", "content": "gitdir: evil\n"}),
        ("write", {"file_path": "vendor/lib/.git", "content": "gitdir: ../evil\n"}),
        ("write", {"file_path": "./sub/../.git", "content": "gitdir: evil\n"}),
        ("write", {"file_path": "{ws}/.git", "content": "gitdir: evil\n"}),
        ("edit", {"file_path": ".git", "old_string": "a", "new_string": "b"}),
        ("edit", {"file_path": "sub/.git", "old_string": "a", "new_string": "b"}),
        (
            "apply_patch",
            {"patch": "*** Begin Patch\n*** Add File: lib/.git\n+gitdir: x\n*** End Patch\n"},
        ),
        ("apply_patch", {"patch": "*** Begin Patch\n*** Delete File: .git\n*** End Patch\n"}),
        (
            "apply_patch",
            {
                "patch": "*** Begin Patch\n*** Update File: f\n*** Move to: .git\n"
                "@@\n-a\n+b\n*** End Patch\n"
            },
        ),
    ],
)
@pytest.mark.parametrize("mode", [YOLO, ACCEPT_EDITS])
def test_a_file_tool_writing_a_git_entry_asks(
    tool: str, args: dict[str, Any], mode: PermissionMode, tmp_path: Path
) -> None:
    args = {k: v.format(ws=tmp_path) for k, v in args.items()}
    assert asks_as_guarded(tool_ruling(tool, args, tmp_path, mode=mode))


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("write", {"file_path": ".gitignore", "content": "x\n"}),
        ("write", {"file_path": "repo.git", "content": "x\n"}),
        ("write", {"file_path": ".github/workflows/ci.yml", "content": "x\n"}),
        ("edit", {"file_path": "src/.gitkeep", "old_string": "a", "new_string": "b"}),
    ],
)
def test_files_named_like_git_are_not_protected(
    tool: str, args: dict[str, Any], tmp_path: Path
) -> None:
    """Control."""
    assert tool_ruling(tool, args, tmp_path, mode=YOLO).decision is Decision.ALLOW


def test_a_gitdir_file_rewritten_in_accept_edits_is_asked(tmp_path: Path) -> None:
    """The whole path: a worktree's ``.git`` file pointed at a git directory the model wrote
    (whose ``core.fsmonitor`` the user's next ``git status`` would run) is asked first."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / ".git").write_text("gitdir: /elsewhere\n")
    asked: list[Any] = []

    def refuse(request: Any) -> ApprovalResponse:
        asked.append(request)
        return ApprovalResponse(approved=False, feedback="no")

    executor = builtin_executor(workspace, mode=ACCEPT_EDITS)
    ctx = ExecutionContext(session_id="s1", approver=refuse)
    args = {"file_path": str(workspace / ".git"), "content": "gitdir: evil\n"}
    asyncio.run(executor.execute("read", {"file_path": str(workspace / ".git")}, ctx))
    result = asyncio.run(executor.execute("write", args, ctx))
    assert not result.ok and len(asked) == 1
    assert (workspace / ".git").read_text() == "gitdir: /elsewhere\n"


# -- a command changing a whole git directory --------------------------------------------------


def _repository(tmp_path: Path) -> Path:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    os.symlink(".git", tmp_path / "g")
    for inner in ("modules/lib", "worktrees/w"):
        (tmp_path / ".git" / inner).mkdir(parents=True)
        (tmp_path / ".git" / inner / "config").write_text("[core]\n")
    (tmp_path / "g2").mkdir()
    return tmp_path


GIT_DIRECTORY_CHANGES = [
    "rm -rf .git",
    "rm -r .git/",
    "rm -rf ./.git/.",
    "rm -rf .g?t",
    "rm -rf g/",  # a link to it
    "mv .git g2",
    "mv g2 .git",
    "mv -T g2 .git",
    "cp -a g2/. .git/",
    "cp -r g2 .git",
    "rsync -a g2/ .git/",
    "chmod -R 777 .git",
    "chown -R nobody .git",
    "find .git -delete",
    "cd sub/.. && rm -rf .git",
    "rm -rf .git/modules/lib",
    "mv .git/modules/lib elsewhere",
    "rm -rf .git/modules",
    "rm -rf .git/worktrees",
    "chmod -R 777 .git/worktrees/w",
]


@pytest.mark.parametrize("command", GIT_DIRECTORY_CHANGES)
def test_a_command_changing_a_git_directory_asks_in_yolo(command: str, tmp_path: Path) -> None:
    root = _repository(tmp_path)
    assert asks_as_guarded(ruling(command, root, mode=YOLO))


@pytest.mark.parametrize(
    "command",
    [
        "rm -rf build",
        "mv a b",
        "cp -r g2 backup",
        "rm -f .git/index.lock",
        "rm -rf .git/objects/pack",
        "git gc",
    ],
)
def test_other_trees_and_git_internals_stay_allowed(command: str, tmp_path: Path) -> None:
    """Control: a tree holding nothing git reads runs in YOLO."""
    root = _repository(tmp_path)
    assert ruling(command, root, mode=YOLO).decision is Decision.ALLOW


@pytest.mark.parametrize("command", ["rm -rf .git", "mv .git g2", "chmod -R 777 .git"])
def test_a_git_directory_change_is_refused_end_to_end(command: str, tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    executor = builtin_executor(workspace, mode=YOLO, shell=LocalShell())

    def refuse(request: Any) -> ApprovalResponse:
        return ApprovalResponse(approved=False, feedback="no")

    ctx = ExecutionContext(session_id="s1", approver=refuse)
    result = asyncio.run(executor.execute("bash", {"command": command}, ctx))
    assert not result.ok
    config = workspace / ".git" / "config"
    assert config.exists() and oct(config.stat().st_mode & 0o777) != "0o777"
