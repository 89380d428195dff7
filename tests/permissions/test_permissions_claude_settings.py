"""Claude Code settings carry over: the path grammar, wildcard command rules, settings files
loaded and merged with their sources, and warnings for rules that can never match (SPEC §5)."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import os
import warnings as std_warnings
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fastgate.permissions.matching as compiled_matching
from fastgate import (
    ApprovalStore,
    Decision,
    DecisionSource,
    FastgateConfigWarning,
    PermissionConfig,
    PermissionMode,
    PermissionResolver,
    ToolKind,
    ToolRegistry,
    define_tool,
)
from fastgate.model.context import ExecutionContext
from fastgate.permissions.commands import analyze_command
from fastgate.permissions.rules import parse_rule
from tests.permissions.test_permissions_commands import ESCAPES, RIDERS

READ = define_tool(
    "Read",
    "read",
    {"type": "object", "properties": {"file_path": {"type": "string"}}},
    lambda args: None,
    kind=ToolKind.READ_ONLY,
)
EDIT = define_tool(
    "Edit",
    "edit",
    {"type": "object", "properties": {"file_path": {"type": "string"}}},
    lambda args: None,
    kind=ToolKind.WRITE,
)
BASH = define_tool(
    "Bash",
    "run",
    {"type": "object", "properties": {"command": {"type": "string"}}},
    lambda args: None,
    kind=ToolKind.EXECUTE,
)


def decide(
    tool: Any,
    args: dict[str, Any],
    workspace: Path,
    config: PermissionConfig,
    mode: PermissionMode = PermissionMode.DEFAULT,
) -> Decision:
    resolver = PermissionResolver(config, mode, ApprovalStore())
    ctx = ExecutionContext(session_id="s", workspace_root=str(workspace))
    return resolver.decide(tool, args, ctx).decision


def _config(kind: str, rule: str) -> PermissionConfig:
    return PermissionConfig(
        allow=[rule] if kind == "allow" else [],
        ask=[rule] if kind == "ask" else [],
        deny=[rule] if kind == "deny" else [],
    )


def write_settings(path: Path, permissions: dict[str, Any], **other: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**other, "permissions": permissions}))
    return path


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "secrets").mkdir(parents=True)
    (ws / "secrets" / "key.txt").write_text("k")
    (ws / "src").mkdir()
    (ws / "src" / "a.py").write_text("a")
    (ws / "link").symlink_to(ws / "secrets" / "key.txt")
    return ws


# -- the path grammar -------------------------------------------------------------------------


@pytest.mark.parametrize("spelling", ["secrets/key.txt", "src/../secrets/key.txt", "link"])
@pytest.mark.parametrize("kind", ["deny", "ask"])
def test_slash_is_the_project_not_the_file_system_root(
    spelling: str, kind: str, workspace: Path
) -> None:
    config = _config(kind, "Read(/secrets/**)")
    expected = Decision.DENY if kind == "deny" else Decision.ASK
    assert decide(READ, {"file_path": spelling}, workspace, config) is expected
    # the absolute /secrets is another directory
    other = decide(READ, {"file_path": "/secrets/key.txt"}, workspace, config)
    assert other is Decision.ALLOW


def test_allow_with_slash_is_the_project_on_the_canonical_path(workspace: Path) -> None:
    config = PermissionConfig(allow=["Edit(/src/**)"])
    assert decide(EDIT, {"file_path": "src/a.py"}, workspace, config) is Decision.ALLOW
    assert decide(EDIT, {"file_path": "secrets/../src/a.py"}, workspace, config) is Decision.ALLOW
    (workspace / "src" / "out").symlink_to(workspace / "secrets")
    # a symlink inside the allowed directory pointing elsewhere is not allowed
    assert decide(EDIT, {"file_path": "src/out/key.txt"}, workspace, config) is Decision.ASK


def test_double_slash_is_absolute(workspace: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    config = PermissionConfig(deny=[f"Read(/{outside}/**)"])
    assert decide(READ, {"file_path": str(outside / "x")}, workspace, config) is Decision.DENY
    assert decide(READ, {"file_path": "src/a.py"}, workspace, config) is Decision.ALLOW


def test_tilde_is_the_home_directory(workspace: Path) -> None:
    home = os.path.expanduser("~")
    config = PermissionConfig(deny=["Read(~/.config/**)"])
    target = os.path.join(home, ".config", "tool.ini")
    assert decide(READ, {"file_path": target}, workspace, config) is Decision.DENY


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        ("./secrets/**", "secrets/key.txt", True),
        ("secrets/**", "secrets/key.txt", True),
        ("key.txt", "secrets/key.txt", True),  # no slash: a name at any depth
        ("key.txt", "src/../link", True),  # through the symlink
        ("src/key.txt", "secrets/key.txt", False),
    ],
)
def test_dot_slash_and_bare_patterns_are_the_workspace(
    pattern: str, path: str, matches: bool, workspace: Path
) -> None:
    config = PermissionConfig(deny=[f"Read({pattern})"])
    decided = decide(READ, {"file_path": path}, workspace, config)
    assert (decided is Decision.DENY) is matches


@pytest.mark.parametrize("folder", [".claude", ".fastgate"])
def test_a_projects_settings_file_anchors_slash_at_the_project(
    folder: str, workspace: Path
) -> None:
    path = write_settings(
        workspace / folder / "settings.json",
        {"deny": ["Read(/secrets/**)"], "allow": ["Edit(/src/**)"], "ask": ["Read(/src/**)"]},
    )
    config = PermissionConfig.load(path)
    assert decide(READ, {"file_path": "secrets/key.txt"}, workspace, config) is Decision.DENY
    assert decide(READ, {"file_path": "link"}, workspace, config) is Decision.DENY
    assert decide(EDIT, {"file_path": "src/a.py"}, workspace, config) is Decision.ALLOW
    assert decide(READ, {"file_path": "src/a.py"}, workspace, config) is Decision.ASK


def test_another_settings_file_anchors_slash_at_its_own_directory(
    workspace: Path, tmp_path: Path
) -> None:
    shared = tmp_path / "shared-config"
    (shared / "secrets").mkdir(parents=True)
    path = write_settings(shared / "policy.json", {"deny": ["Read(/secrets/**)"]})
    config = PermissionConfig.load(path)
    denied = decide(READ, {"file_path": str(shared / "secrets" / "x")}, workspace, config)
    assert denied is Decision.DENY
    # not the workspace's secrets: the file stands for its own directory
    assert decide(READ, {"file_path": "secrets/key.txt"}, workspace, config) is Decision.ALLOW


def test_a_copy_of_a_loaded_config_keeps_each_rules_project_and_file(
    workspace: Path, tmp_path: Path
) -> None:
    shared = tmp_path / "shared-config"
    (shared / "secrets").mkdir(parents=True)
    path = write_settings(shared / "policy.json", {"deny": ["Read(/secrets/**)"]})
    loaded = PermissionConfig.load(path)
    outside = {"file_path": str(shared / "secrets" / "x")}
    inside = {"file_path": "secrets/key.txt"}
    copies = (
        dataclasses.replace(loaded, additional_dirs=(str(tmp_path),)),
        PermissionConfig(deny=loaded.deny, allow=("Read",)),
    )
    for copy in copies:
        assert copy.deny == ("Read(/secrets/**)",)
        assert copy.source_of("Read(/secrets/**)") == str(path)
        assert decide(READ, outside, workspace, copy) is Decision.DENY
        assert decide(READ, inside, workspace, copy) is Decision.ALLOW
    # Written out as text, the rule is read as code's: /x is the workspace's.
    retyped = PermissionConfig(deny=list(loaded.deny))
    assert retyped.source_of("Read(/secrets/**)") is None
    assert decide(READ, inside, workspace, retyped) is Decision.DENY


def test_the_same_rule_in_two_lists_names_each_lists_file(tmp_path: Path) -> None:
    first = write_settings(tmp_path / "a" / "settings.json", {"allow": ["Bash(curl:*)"]})
    second = write_settings(tmp_path / "b" / "settings.json", {"deny": ["Bash(curl:*)"]})
    config = PermissionConfig.load(first, second)
    assert config.source_of("Bash(curl:*)") == str(second)  # the deny rule is what decides
    assert config.allow.sources == {"Bash(curl:*)": str(first)}  # type: ignore[attr-defined]


def test_a_rule_whose_meaning_changed_is_warned_about(tmp_path: Path) -> None:
    existing = tmp_path / "data"
    existing.mkdir()
    path = write_settings(
        tmp_path / "ws" / ".claude" / "settings.json",
        {"deny": [f"Read({existing}/**)", "Read(/no-such-directory-anywhere/**)"]},
    )
    with pytest.warns(FastgateConfigWarning) as issued:
        warnings = PermissionConfig.load(path).warnings()
    named = [w for w in warnings if str(existing) in w]
    assert len(named) == 1 and str(path) in named[0] and f"//{str(existing)[1:]}" in named[0]
    assert not any("no-such-directory-anywhere" in w for w in warnings)
    assert [str(w.message) for w in issued] == warnings  # the loader issued each one


# -- wildcard command rules -------------------------------------------------------------------

COMMANDS = [
    "npm run build",
    "npm run",
    "npm run test -- --watch",
    "npm running",
    "npm test",
    "npm run build; rm x",
    "npm run build && whoami",
    "npm run $(whoami)",
]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_trailing_star_is_the_colon_star_prefix(command: str, tmp_path: Path) -> None:
    for kind in ("allow", "deny", "ask"):
        star = decide(BASH, {"command": command}, tmp_path, _config(kind, "Bash(npm run *)"))
        colon = decide(BASH, {"command": command}, tmp_path, _config(kind, "Bash(npm run:*)"))
        assert star is colon, (kind, command)


@pytest.mark.parametrize(
    ("command", "allowed"),
    [
        ("git log main", True),
        ("git push origin main", True),
        ("git branch -d main", True),
        ("git push origin main2", False),
        ("git checkout main --force", False),
        ("git checkout main; rm x", False),
        ("git checkout main && rm x", False),
        ("git checkout main | rm x", False),
        ("git checkout main\nrm x", False),
        ("git $(rm x) main", False),
        ("git `rm x` main", False),
        ("git checkout main > out", False),
        ("sudo git checkout main", False),
    ],
)
def test_a_star_inside_matches_within_one_simple_command(
    command: str, allowed: bool, tmp_path: Path
) -> None:
    config = PermissionConfig(allow=["Bash(git * main)"])
    decided = decide(BASH, {"command": command}, tmp_path, config)
    assert (decided is Decision.ALLOW) is allowed, decided


@pytest.mark.parametrize(
    ("command", "denied"),
    [
        ("git push origin --force", True),
        ("git push --force", True),
        ("/usr/bin/git push -u origin --force", True),
        ("sudo git push origin --force", True),
        ("git -C /repo push origin --force", True),
        ("ls; git push x --force", True),
        ("git push $REMOTE", True),  # a word known only at run time may be the rest
        ("git push origin", False),
        ("git status --force-with-lease", False),
    ],
)
def test_a_star_deny_rule_sees_every_spelling(command: str, denied: bool, tmp_path: Path) -> None:
    config = PermissionConfig(deny=["Bash(git * --force)"])
    decided = decide(BASH, {"command": command}, tmp_path, config, PermissionMode.YOLO)
    assert (decided is Decision.DENY) is denied, decided


def test_stars_inside_words_match_runs_of_characters(tmp_path: Path) -> None:
    config = PermissionConfig(deny=["Bash(curl *evil.example*)"])
    yolo = PermissionMode.YOLO
    for command in ("curl https://evil.example/x", "curl -H 'a: b' http://evil.example"):
        assert decide(BASH, {"command": command}, tmp_path, config, yolo) is Decision.DENY
    assert decide(BASH, {"command": "curl https://ok.example"}, tmp_path, config, yolo) is (
        Decision.ALLOW
    )
    leading = PermissionConfig(allow=["Bash(* --version)"])
    assert decide(BASH, {"command": "node --version"}, tmp_path, leading) is Decision.ALLOW
    assert decide(BASH, {"command": "node --version; id"}, tmp_path, leading) is Decision.ASK


# The command tests' allow rules, written with wildcards, plus wildcards inside.
WILDCARD_ALLOWS = (
    "Bash(npm test *)",
    "Bash(ls)",
    "Bash(git status)",
    "Bash(echo *)",
    "Bash(cat *)",
    "Bash(npm * --ci)",
    "Bash(git * status)",
)


@pytest.mark.parametrize("command", RIDERS)
def test_nothing_rides_on_a_wildcard(command: str, tmp_path: Path) -> None:
    config = PermissionConfig(allow=WILDCARD_ALLOWS)
    assert decide(BASH, {"command": command}, tmp_path, config) is not Decision.ALLOW


@pytest.mark.parametrize("command", ESCAPES)
def test_a_wildcard_deny_is_not_escaped(command: str, tmp_path: Path) -> None:
    config = PermissionConfig(deny=["Bash(rm *)", "Bash(git push *)", "Bash(curl * *)"])
    assert decide(BASH, {"command": command}, tmp_path, config) is Decision.DENY


def _interpreted(module: ModuleType) -> ModuleType:
    source = str(module.__file__)
    if source.endswith(".py"):
        pytest.skip("the pure build: nothing compiled to compare with")
    name = module.__name__.rpartition(".")[2]
    spec = importlib.util.spec_from_file_location(
        f"{module.__name__}_source", Path(source).parent / f"{name}.py"
    )
    assert spec is not None and spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


WORDS = ["git", "push", "main", "-f", "x", "*", "m*", "*n", "a b"]
RULE_WORDS = st.lists(st.sampled_from(WORDS), min_size=1, max_size=4)
COMMAND_WORDS = st.lists(st.sampled_from([*WORDS[:5], "$X", "mmm", "ain", "'*'"]), max_size=5)


@settings(max_examples=300)
@given(
    rule_words=RULE_WORDS,
    command_words=COMMAND_WORDS,
    joiner=st.sampled_from([" ", "; git ", " | ", " && "]),
)
def test_compiled_and_interpreted_matching_agree(
    rule_words: list[str], command_words: list[str], joiner: str
) -> None:
    interpreted = _interpreted(compiled_matching)
    spec = " ".join(f"'{w}'" if " " in w else w for w in rule_words)
    try:
        rules = [parse_rule(f"Bash({spec})", kind) for kind in ("allow", "deny")]
    except ValueError:
        return
    text = "git " + joiner.join([" ".join(command_words), "main"])
    analysis = analyze_command(text)
    assert compiled_matching.command_allowed_by([rules[0]], analysis) == (
        interpreted.command_allowed_by([rules[0]], analysis)
    )
    assert compiled_matching.command_matches(rules[1], analysis) == (
        interpreted.command_matches(rules[1], analysis)
    )


# -- PermissionConfig.load ----------------------------------------------------------------------


def test_files_merge_in_order_and_remember_their_sources(tmp_path: Path) -> None:
    user = write_settings(
        tmp_path / "home" / ".claude" / "settings.json",
        {"allow": ["Bash(npm test:*)"], "deny": ["Bash(curl:*)"], "defaultMode": "plan"},
    )
    project = write_settings(
        tmp_path / "ws" / ".claude" / "settings.json",
        {"allow": ["Bash(make:*)"], "ask": ["Bash(git push:*)"], "defaultMode": "acceptEdits"},
    )
    config = PermissionConfig.load(user, project)
    assert config.allow == ("Bash(npm test:*)", "Bash(make:*)")
    assert config.ask == ("Bash(git push:*)",) and config.deny == ("Bash(curl:*)",)
    assert config.source_of("Bash(npm test:*)") == str(user)
    assert config.source_of("Bash(git push:*)") == str(project)
    assert config.source_of("Bash(nothing)") is None
    assert config.default_mode is PermissionMode.ACCEPT_EDITS  # the later file wins
    assert PermissionConfig.load(project, user).default_mode is PermissionMode.PLAN
    assert PermissionConfig(allow=["Bash"]).source_of("Bash") is None  # given in code


def test_relative_additional_directories_are_relative_to_the_project(tmp_path: Path) -> None:
    path = write_settings(
        tmp_path / "ws" / ".claude" / "settings.json",
        {"additionalDirectories": ["../shared", "//data", "~/notes", "/abs/dir"]},
    )
    config = PermissionConfig.load(path)
    project = os.path.realpath(tmp_path / "ws")
    assert config.additional_dirs == (
        os.path.normpath(os.path.join(project, "../shared")),
        "/data",
        os.path.expanduser("~/notes"),
        "/abs/dir",
    )
    other = write_settings(tmp_path / "cfg" / "team.json", {"additionalDirectories": ["lib"]})
    assert PermissionConfig.load(other).additional_dirs == (
        os.path.join(os.path.realpath(tmp_path / "cfg"), "lib"),
    )


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("{not json", "invalid permission settings"),
        ('{"permissions": {"allow": ["Bash(npm"]}}', "unbalanced"),
        ('{"permissions": {"alow": []}}', "unknown key(s) in 'permissions': alow"),
        ('{"permissions": {"allow": "Bash"}}', "must be a list"),
        ('{"permissions": {"defaultMode": "sometimes"}}', "defaultMode"),
        ('{"permissions": {"additionalDirectories": [3]}}', "additionalDirectories"),
        ("[]", "top level"),
    ],
)
def test_bad_settings_name_the_file(content: str, fragment: str, tmp_path: Path) -> None:
    good = write_settings(tmp_path / "good.json", {"allow": ["Bash(ls)"]})
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    with pytest.raises(ValueError) as caught:
        PermissionConfig.load(good, bad)
    assert str(bad) in str(caught.value) and fragment in str(caught.value)


def test_a_missing_file_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"nowhere\.json"):
        PermissionConfig.load(tmp_path / "nowhere.json")


def test_a_real_claude_code_settings_file_loads(tmp_path: Path) -> None:
    path = tmp_path / "ws" / ".claude" / "settings.json"
    path.parent.mkdir(parents=True)
    path.write_text(
        json.dumps(
            {
                "$schema": "https://json.schemastore.org/claude-code-settings.json",
                "model": "claude-sonnet-4-5",
                "env": {"NODE_ENV": "development", "DISABLE_TELEMETRY": "1"},
                "includeCoAuthoredBy": False,
                "cleanupPeriodDays": 20,
                "hooks": {
                    "PreToolUse": [
                        {
                            "matcher": "Bash",
                            "hooks": [{"type": "command", "command": "./scripts/check.sh"}],
                        }
                    ]
                },
                "permissions": {
                    "allow": ["Bash(npm run lint)", "Bash(npm run test:*)", "Read(~/.zshrc)"],
                    "deny": ["Bash(curl:*)", "Read(./.env)", "Read(./secrets/**)"],
                    "ask": ["Bash(git push *)"],
                    "additionalDirectories": ["../docs/"],
                    "defaultMode": "acceptEdits",
                    "disableBypassPermissionsMode": "disable",
                    "disableAutoMode": "disable",
                },
            }
        )
    )
    with pytest.warns(FastgateConfigWarning, match="disableAutoMode"):
        config = PermissionConfig.load(path)
    assert config.default_mode is PermissionMode.ACCEPT_EDITS
    assert len(tuple(config.allow)) == 3 and len(tuple(config.deny)) == 3
    assert len(tuple(config.ask)) == 1
    assert config.bypass_disabled
    assert any("disableAutoMode" in w for w in config.warnings())
    # A copy keeps what the files said that has no effect.
    copy = dataclasses.replace(config, case_insensitive=True)
    assert any("disableAutoMode" in w for w in copy.warnings()) and copy.bypass_disabled
    ws = tmp_path / "ws"
    assert decide(READ, {"file_path": ".env"}, ws, config) is Decision.DENY
    assert decide(BASH, {"command": "git push origin"}, ws, config) is Decision.ASK


def test_bypass_permissions_is_yolo() -> None:
    assert PermissionMode.parse("bypassPermissions") is PermissionMode.YOLO


# -- warnings -------------------------------------------------------------------------------


@contextlib.contextmanager
def warnings_allowed() -> Iterator[None]:
    with std_warnings.catch_warnings():
        std_warnings.simplefilter("ignore", FastgateConfigWarning)
        yield


def test_the_loader_issues_each_warning_it_lists(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    path = write_settings(
        ws / ".claude" / "settings.json",
        {
            "allow": ['Bash("")'],
            "defaultMode": "bypassPermissions",
            "additionalDirectories": [str(tmp_path)],
        },
    )
    with std_warnings.catch_warnings(record=True) as issued:
        std_warnings.simplefilter("always")
        config = PermissionConfig.load(path, workspace=ws)
    listed = config.warnings()
    assert len(listed) == 3, listed
    assert [str(w.message) for w in issued] == listed
    assert all(w.category is FastgateConfigWarning for w in issued)
    assert all(str(path) in message for message in listed)


def test_a_clean_settings_file_issues_nothing(tmp_path: Path) -> None:
    path = write_settings(tmp_path / "settings.json", {"allow": ["Bash(npm run lint)"]})
    with std_warnings.catch_warnings(record=True) as issued:
        std_warnings.simplefilter("always")
        PermissionConfig.load(path)
    assert issued == []


def _registry() -> ToolRegistry:
    registry = ToolRegistry()
    noop = define_tool("noop", "nothing", {"type": "object"}, lambda args: None)
    read = define_tool(
        "read",
        "read",
        {"type": "object", "properties": {"file_path": {"type": "string"}}},
        lambda args: None,
        kind=ToolKind.READ_ONLY,
        rule_names=("Read",),
    )
    bash = define_tool(
        "bash",
        "run",
        {"type": "object", "properties": {"command": {"type": "string"}}},
        lambda args: None,
        rule_names=("Bash",),
    )
    fetch = define_tool(
        "fetch",
        "fetch",
        {"type": "object", "properties": {"url": {"type": "string"}}},
        lambda args: None,
        permission_key=lambda args: str(args["url"]),
    )
    for definition in (noop, read, bash, fetch):
        registry.register(definition)
    return registry


@pytest.mark.parametrize(
    ("rule", "fragment"),
    [
        ("Raed(./src/**)", "no registered tool answers to the name Raed"),
        ("Bash(./src/**)", "a path specifier"),
        ("Read(npm run:*)", "a command specifier"),
        ("Read(git * main)", "a command specifier"),
        ("noop(anything)", "take no specifier"),
        ("Bash('')", "empty"),
    ],
)
def test_every_dead_rule_is_named_with_its_file(rule: str, fragment: str, tmp_path: Path) -> None:
    path = write_settings(tmp_path / "settings.json", {"deny": [rule]})
    with warnings_allowed():  # a pattern problem is issued at load; a tool problem is not
        loaded = PermissionConfig.load(path)
    warnings = loaded.warnings(_registry())
    hits = [w for w in warnings if rule in w]
    assert len(hits) == 1 and fragment in hits[0] and str(path) in hits[0], warnings


@pytest.mark.parametrize(
    "rule",
    [
        "Read(./src/**)",
        "Read(*.py)",
        "Bash(npm run:*)",
        "Bash(git * main)",
        "Bash(./scripts/deploy.sh:*)",
        "fetch(https://x:*)",
        "noop",
        "read",
    ],
)
def test_live_rules_are_not_warned_about(rule: str) -> None:
    assert PermissionConfig(allow=[rule]).warnings(_registry()) == []


def test_without_a_registry_only_what_the_rules_say_is_checked() -> None:
    config = PermissionConfig(deny=["Raed(x)", "Bash('')"])
    warnings = config.warnings()
    assert len(warnings) == 1 and "empty" in warnings[0]


def test_a_session_approval_still_joins_rules_from_files(tmp_path: Path) -> None:
    path = write_settings(tmp_path / "s.json", {"allow": ["Bash(ls)"]})
    config = PermissionConfig.load(path)
    decided = PermissionResolver(config, PermissionMode.DEFAULT, ApprovalStore()).decide(
        BASH, {"command": "ls"}, ExecutionContext(session_id="s", workspace_root=str(tmp_path))
    )
    assert decided.decision is Decision.ALLOW and decided.source is DecisionSource.RULE
