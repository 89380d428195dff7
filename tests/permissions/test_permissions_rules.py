"""Rules grammar, path rules on canonical paths, sensitive files, precedence, modes, sessions."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from fastgate import (
    DEFAULT_SENSITIVE,
    ApprovalStore,
    Decision,
    DecisionSource,
    PermissionConfig,
    PermissionMode,
    PermissionResolver,
    RuleDecision,
    ToolDefinition,
    ToolKind,
    define_tool,
)
from fastgate.model.context import ExecutionContext
from fastgate.permissions import permission_signature


def make_tool(
    name: str,
    kind: ToolKind,
    properties: tuple[str, ...],
    permission_key: Any = None,
    path_args: tuple[str, ...] = ("file_path", "notebook_path"),
) -> ToolDefinition:
    schema = {"type": "object", "properties": {p: {"type": "string"} for p in properties}}
    return define_tool(
        name,
        name,
        schema,
        lambda args: None,
        kind=kind,
        permission_key=permission_key,
        path_args=path_args,
    )


READ = make_tool("Read", ToolKind.READ_ONLY, ("file_path",))
WRITE = make_tool("Write", ToolKind.WRITE, ("file_path", "content"))
BASH = make_tool("Bash", ToolKind.EXECUTE, ("command",))
FETCH = make_tool("Fetch", ToolKind.READ_ONLY, ("url",), permission_key=lambda a: a["url"])
NOOP = make_tool("Noop", ToolKind.READ_ONLY, ("a", "b"))
EXEC_NOOP = make_tool("ExecNoop", ToolKind.EXECUTE, ("a", "b"))
COPY = make_tool("Copy", ToolKind.WRITE, ("src", "dst"), path_args=("src", "dst"))


def resolve(
    tool: ToolDefinition,
    args: Mapping[str, Any],
    root: Path,
    mode: PermissionMode = PermissionMode.DEFAULT,
    approvals: ApprovalStore | None = None,
    session_id: str = "s",
    **config: Any,
) -> RuleDecision:
    resolver = PermissionResolver(PermissionConfig(**config), mode, approvals or ApprovalStore())
    ctx = ExecutionContext(session_id=session_id, workspace_root=str(root))
    return resolver.decide(tool, args, ctx)


# -- configuration is refused at load ---------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "fragment"),
    [
        ("Bash(npm test", "unbalanced"),
        ("Bash npm test)", "unbalanced"),
        ("Bash)(", "unbalanced"),
        ("(npm test)", "empty tool name"),
        ("", "empty tool name"),
        ("Ba sh", "invalid tool name"),
        ("Bash!", "invalid tool name"),
        ("Bash()", "empty specifier"),
        ("Bash( )", "empty specifier"),
        ("Bash(:*)", "empty prefix"),
        ("Bash(npm test && rm x)", "one simple command"),
        ("Bash(npm 'test)", "unbalanced"),
        (" Bash", "whitespace"),
        ("Bash(x)y", "expected Tool or Tool(specifier)"),
        ("x" * 65, "invalid tool name"),
    ],
)
def test_malformed_rules_are_refused(rule: str, fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        PermissionConfig(allow=["Read", rule])
    assert repr(rule) in str(info.value)
    assert fragment in str(info.value)


def test_refusal_names_the_list_and_is_never_half_applied() -> None:
    with pytest.raises(ValueError, match="deny rule"):
        PermissionConfig(allow=["Read"], deny=["Bash(rm:*)", "Bash("])
    with pytest.raises(ValueError, match="a rule must be a string"):
        PermissionConfig(allow=["Read", 3])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="single string"):
        PermissionConfig(allow="Read")


def test_bad_sensitive_patterns_and_dirs_are_refused() -> None:
    with pytest.raises(ValueError, match="sensitive"):
        PermissionConfig(sensitive=["ok", ""])
    with pytest.raises(ValueError, match="sensitive"):
        PermissionConfig(sensitive=["a/../b"])
    with pytest.raises(ValueError, match="absolute"):
        PermissionConfig(additional_dirs=["relative/dir"])


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown permission mode"):
        PermissionResolver(PermissionConfig(), "reckless", ApprovalStore())  # type: ignore[arg-type]


def test_config_keeps_the_rules_as_text() -> None:
    config = PermissionConfig(allow=["Bash(npm test:*)"], deny=("Read(./.env)",))
    assert config.allow == ("Bash(npm test:*)",)
    assert config.deny == ("Read(./.env)",)
    assert config.sensitive == DEFAULT_SENSITIVE


def test_default_sensitive_list_has_the_standard_entries() -> None:
    for entry in (".env", ".env.*", "**/.ssh/**", "**/*.pem", "**/*.key", "**/id_rsa*"):
        assert entry in DEFAULT_SENSITIVE
    for entry in ("**/.aws/credentials", "**/.git/config", "**/.netrc"):
        assert entry in DEFAULT_SENSITIVE


# -- path rules -------------------------------------------------------------------------------


def test_path_rules_use_canonical_paths(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("SECRET=1")
    (tmp_path / "a").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / ".env")
    (tmp_path / "dirlink").symlink_to(tmp_path)
    deny = ["Read(./.env)"]
    for spelled in (".env", "./.env", "a/../.env", "link", "dirlink/.env", str(tmp_path / ".env")):
        result = resolve(READ, {"file_path": spelled}, tmp_path, deny=deny, sensitive=())
        assert result.decision is Decision.DENY, spelled
        assert result.matched_rule == "Read(./.env)"
    other = resolve(READ, {"file_path": "a/x"}, tmp_path, deny=deny, sensitive=())
    assert other.decision is Decision.ALLOW


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        ("*.py", "src/deep/x.py", True),
        ("*.py", "x.pyc", False),
        ("./src/*.py", "src/x.py", True),
        ("./src/*.py", "src/deep/x.py", False),
        ("./src/**/*.py", "src/deep/er/x.py", True),
        ("./src/**", "src/a/b", True),
        ("./src/", "src/a/b", True),
        ("./src/", "srcx/a", False),
        ("src/*.txt", "src/a.txt", True),
        ("src/*.txt", "lib/src/a.txt", False),
        ("**/build/**", "a/build/x", True),
        ("?.md", "a.md", True),
        ("?.md", "ab.md", False),
        ("[ab].txt", "b.txt", True),
        ("[!ab].txt", "b.txt", False),
        ("[!ab].txt", "c.txt", True),
        ("secrets", "secrets/deep/file", True),
        ("\\*.txt", "*.txt", True),
        ("./src/**", "src", True),
        ("./src/**/*.py", "src/x.py", True),
        ("./src/**/*.py", "srcx.py", False),
        ("a/**/b", "a/b", True),
        ("a/**/b", "a/x/y/b", True),
        ("a/**/b", "ab", False),
        ("\\*.txt", "a.txt", False),
    ],
)
def test_glob_patterns(tmp_path: Path, pattern: str, path: str, matches: bool) -> None:
    result = resolve(WRITE, {"file_path": path}, tmp_path, allow=[f"Write({pattern})"])
    assert (result.decision is Decision.ALLOW) is matches


def test_absolute_and_home_patterns(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    allow = [f"Write(/{outside}/**)"]  # ``//`` + the path: absolute
    result = resolve(WRITE, {"file_path": str(outside / "f")}, tmp_path / "ws", allow=allow)
    assert result.decision is Decision.ALLOW
    home = os.path.expanduser("~")
    result = resolve(
        WRITE, {"file_path": os.path.join(home, "notes.txt")}, tmp_path, allow=["Write(~/*.txt)"]
    )
    assert result.decision is Decision.ALLOW


def test_allow_rules_do_not_follow_a_lexical_spelling_through_a_symlink(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "secret.txt").write_text("x")
    (tmp_path / "src" / "alias").symlink_to(tmp_path / "secret.txt")
    result = resolve(WRITE, {"file_path": "src/alias"}, tmp_path, allow=["Write(./src/**)"])
    assert result.decision is Decision.ASK


def test_every_path_argument_must_be_allowed(tmp_path: Path) -> None:
    allow = ["Copy(./in/**)"]
    both = resolve(COPY, {"src": "in/a", "dst": "in/b"}, tmp_path, allow=allow)
    assert both.decision is Decision.ALLOW
    one = resolve(COPY, {"src": "in/a", "dst": "out/b"}, tmp_path, allow=allow)
    assert one.decision is Decision.ASK
    denied = resolve(COPY, {"src": "in/a", "dst": "out/b"}, tmp_path, deny=["Copy(./out/)"])
    assert denied.decision is Decision.DENY


def test_invalid_path_arguments_fail_closed(tmp_path: Path) -> None:
    result = resolve(READ, {"file_path": 3}, tmp_path, deny=["Read(./x)"])
    assert result.decision is Decision.DENY
    nul = resolve(WRITE, {"file_path": "a\x00b"}, tmp_path, allow=["Write(./**)"])
    assert nul.decision is Decision.ASK
    assert resolve(WRITE, {"file_path": "ab"}, tmp_path, allow=["Write(./**)"]).decision is (
        Decision.ALLOW
    )


# -- permission keys and bare rules -----------------------------------------------------------


def test_permission_key_rules(tmp_path: Path) -> None:
    allow = ["Fetch(https://docs.python.org/:*)"]
    ok = resolve(FETCH, {"url": "https://docs.python.org/3/"}, tmp_path, allow=allow)
    assert ok.decision is Decision.ALLOW
    exact = resolve(FETCH, {"url": "https://x.org"}, tmp_path, deny=["Fetch(https://x.org)"])
    assert exact.decision is Decision.DENY
    other = resolve(FETCH, {"url": "https://x.org/a"}, tmp_path, deny=["Fetch(https://x.org)"])
    assert other.decision is Decision.ALLOW


def test_failing_permission_key_fails_closed(tmp_path: Path) -> None:
    def broken(args: Any) -> str:
        raise RuntimeError("boom")

    tool = make_tool("Fetch", ToolKind.READ_ONLY, ("url",), permission_key=broken)
    result = resolve(tool, {"url": "x"}, tmp_path, deny=["Fetch(y)"])
    assert result.decision is Decision.DENY
    assert "permission_key failed" in result.reason


def test_bare_rule_matches_every_call(tmp_path: Path) -> None:
    assert resolve(NOOP, {"a": "1"}, tmp_path, deny=["Noop"]).decision is Decision.DENY
    assert resolve(BASH, {"command": "anything 'x"}, tmp_path, allow=["Bash"]).decision is (
        Decision.ALLOW
    )
    assert resolve(NOOP, {"a": "1"}, tmp_path, deny=["Other"]).decision is Decision.ALLOW


def test_a_tool_allowed_by_name_gets_one_decision_for_any_arguments(tmp_path: Path) -> None:
    # EXEC_NOOP would ask in the default mode: the rule alone allows it, whatever its arguments,
    # and what was allowed is "any call" (the approval key "*", as the mode's own allows).
    resolver = PermissionResolver(
        PermissionConfig(allow=["ExecNoop"]), PermissionMode.DEFAULT, ApprovalStore()
    )
    ctx = ExecutionContext(session_id="s", workspace_root=str(tmp_path))
    first = resolver.decide(EXEC_NOOP, {"a": "1"}, ctx)
    second = resolver.decide(EXEC_NOOP, {"a": "2", "b": "x"}, ctx)
    assert first.decision is Decision.ALLOW and first.source is DecisionSource.RULE
    assert first.matched_rule == "ExecNoop"
    assert first.signature == permission_signature("ExecNoop", "*")
    assert second == first


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"allow": ["ExecNoop"], "deny": ["ExecNoop"]}, Decision.DENY),
        ({"allow": ["ExecNoop"], "ask": ["ExecNoop"]}, Decision.ASK),
        ({"allow": ["ExecNoop"], "deny": ["ExecNoop(*)"]}, Decision.DENY),
        ({"allow": ["ExecNoop(other)"]}, Decision.ASK),  # a specifier: not "any call"
    ],
)
def test_an_allow_by_name_never_hides_a_deny_or_ask_rule(
    tmp_path: Path, config: dict[str, Any], expected: Decision
) -> None:
    assert resolve(EXEC_NOOP, {"a": "1"}, tmp_path, **config).decision is expected


def test_an_allow_by_name_still_looks_at_paths_and_commands(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("SECRET=1")
    decided = resolve(READ, {"file_path": ".env"}, tmp_path, allow=["Read"])
    assert decided.decision is Decision.ASK and decided.source is DecisionSource.SENSITIVE
    decided = resolve(BASH, {"command": "cat .env"}, tmp_path, allow=["Bash"])
    assert decided.decision is Decision.ASK and decided.source is DecisionSource.SENSITIVE
    decided = resolve(FETCH, {"url": "https://x.test"}, tmp_path, allow=["Fetch"])
    # Signed by its permission_key, not as "any call": another URL is another signature.
    assert decided.signature != permission_signature("Fetch", "*")
    other = resolve(FETCH, {"url": "https://y.test"}, tmp_path, allow=["Fetch"])
    assert other.signature != decided.signature
    again = resolve(FETCH, {"url": "https://x.test"}, tmp_path, allow=["Fetch"])
    assert again.signature == decided.signature


# -- sensitive files --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        ".env",
        ".env.local",
        "sub/.env",
        "a/../.env",
        "certs/server.pem",
        "k/tls.key",
        "home/.ssh/config",
        "id_rsa",
        "id_rsa.pub",
        "x/.aws/credentials",
        "repo/.git/config",
        ".netrc",
    ],
)
@pytest.mark.parametrize("mode", list(PermissionMode))
def test_sensitive_paths_ask_in_every_mode(tmp_path: Path, path: str, mode: PermissionMode) -> None:
    result = resolve(READ, {"file_path": path}, tmp_path, mode=mode, allow=["Read"])
    # DONT_ASK never asks: what would ask is refused
    asks = Decision.DENY if mode is PermissionMode.DONT_ASK else Decision.ASK
    assert result.decision is asks
    assert result.source is DecisionSource.SENSITIVE
    assert result.sensitive


def test_sensitive_through_a_symlink(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("x")
    (tmp_path / "innocent.txt").symlink_to(tmp_path / ".env")
    result = resolve(READ, {"file_path": "innocent.txt"}, tmp_path, mode=PermissionMode.YOLO)
    assert result.decision is Decision.ASK and result.sensitive
    assert str(tmp_path / ".env") in result.reason


def test_sensitive_words_in_commands(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("x")
    (tmp_path / "notes").symlink_to(tmp_path / ".env")
    commands = (
        "cat .env",
        "cat ./notes",
        "grep x < .env",
        "cat .e*",
        "cat ~/.ssh/id_rsa",
        "cp -r ~/.ssh /tmp/x",
        "tar czf x.tgz --directory=$HOME/.ssh .",
        "ls && echo $(cat .env)",
    )
    for command in commands:
        result = resolve(BASH, {"command": command}, tmp_path, mode=PermissionMode.YOLO)
        assert result.decision is Decision.ASK, command
        assert result.sensitive, command
    assert resolve(
        BASH, {"command": "cat README"}, tmp_path, mode=PermissionMode.YOLO
    ).decision is (Decision.ALLOW)


def test_deny_rules_beat_sensitive(tmp_path: Path) -> None:
    result = resolve(READ, {"file_path": ".env"}, tmp_path, deny=["Read(.env)"])
    assert result.decision is Decision.DENY


def test_custom_sensitive_list_replaces_the_default(tmp_path: Path) -> None:
    result = resolve(READ, {"file_path": ".env"}, tmp_path, sensitive=["./private/**"])
    assert result.decision is Decision.ALLOW
    result = resolve(READ, {"file_path": "private/x"}, tmp_path, sensitive=["./private/**"])
    assert result.decision is Decision.ASK and result.sensitive


# -- modes and precedence ---------------------------------------------------------------------

A, Q, D = Decision.ALLOW, Decision.ASK, Decision.DENY
MODE_TABLE = {
    PermissionMode.DEFAULT: (A, Q, Q),
    PermissionMode.ACCEPT_EDITS: (A, A, Q),
    PermissionMode.PLAN: (A, D, D),
    PermissionMode.YOLO: (A, A, A),
    PermissionMode.DONT_ASK: (A, D, D),
}


@pytest.mark.parametrize("mode", list(PermissionMode))
def test_mode_table(tmp_path: Path, mode: PermissionMode) -> None:
    for kind, expected in zip(ToolKind, MODE_TABLE[mode], strict=True):
        tool = make_tool("T", kind, ("a",))
        result = resolve(tool, {"a": "x"}, tmp_path, mode=mode)
        assert result.decision is expected, (mode, kind)
        assert result.source is DecisionSource.MODE
        assert mode.name in result.reason and kind.name in result.reason


def test_precedence_deny_ask_allow(tmp_path: Path) -> None:
    args = {"command": "npm test"}
    every: dict[str, Any] = {
        "allow": ["Bash(npm:*)"],
        "ask": ["Bash(npm test)"],
        "deny": ["Bash(npm test:*)"],
    }
    assert resolve(BASH, args, tmp_path, **every).decision is Decision.DENY
    del every["deny"]
    assert resolve(BASH, args, tmp_path, **every).decision is Decision.ASK
    del every["ask"]
    assert resolve(BASH, args, tmp_path, **every).decision is Decision.ALLOW
    allow_in_plan = resolve(BASH, args, tmp_path, mode=PermissionMode.PLAN, **every)
    assert allow_in_plan.decision is Decision.ALLOW and allow_in_plan.source is DecisionSource.RULE


def test_yolo_turns_ask_rules_into_allow_but_not_deny(tmp_path: Path) -> None:
    yolo = PermissionMode.YOLO
    asked = resolve(BASH, {"command": "npm test"}, tmp_path, mode=yolo, ask=["Bash(npm:*)"])
    assert asked.decision is Decision.ALLOW
    denied = resolve(BASH, {"command": "rm x"}, tmp_path, mode=yolo, deny=["Bash(rm:*)"])
    assert denied.decision is Decision.DENY


def test_ask_rule_in_default_mode(tmp_path: Path) -> None:
    result = resolve(READ, {"file_path": "a"}, tmp_path, ask=["Read(./a)"])
    assert result.decision is Decision.ASK and result.source is DecisionSource.RULE


# -- session approvals and signatures ---------------------------------------------------------


def test_session_approval_is_keyed_by_signature(tmp_path: Path) -> None:
    store = ApprovalStore()
    first = resolve(BASH, {"command": "make build"}, tmp_path, approvals=store)
    assert first.decision is Decision.ASK
    store.approve("s", first.signature)
    again = resolve(BASH, {"command": "make   build"}, tmp_path, approvals=store)
    assert again.decision is Decision.ALLOW and again.source is DecisionSource.SESSION
    other = resolve(BASH, {"command": "make clean"}, tmp_path, approvals=store)
    assert other.decision is Decision.ASK


def test_session_approval_covers_its_own_session_only(tmp_path: Path) -> None:
    store = ApprovalStore()
    first = resolve(BASH, {"command": "make build"}, tmp_path, approvals=store, session_id="s1")
    store.approve("s1", first.signature)
    mine = resolve(BASH, {"command": "make build"}, tmp_path, approvals=store, session_id="s1")
    theirs = resolve(BASH, {"command": "make build"}, tmp_path, approvals=store, session_id="s2")
    assert mine.decision is Decision.ALLOW and theirs.decision is Decision.ASK
    store.clear_session("s1")
    again = resolve(BASH, {"command": "make build"}, tmp_path, approvals=store, session_id="s1")
    assert again.decision is Decision.ASK and len(store) == 0


def test_session_approval_never_covers_deny_sensitive_or_plan(tmp_path: Path) -> None:
    store = ApprovalStore()
    denied = resolve(BASH, {"command": "rm x"}, tmp_path, approvals=store, deny=["Bash(rm:*)"])
    store.approve("s", denied.signature)
    again = resolve(BASH, {"command": "rm x"}, tmp_path, approvals=store, deny=["Bash(rm:*)"])
    assert again.decision is Decision.DENY
    secret = resolve(READ, {"file_path": ".env"}, tmp_path, approvals=store)
    store.approve("s", secret.signature)
    assert resolve(READ, {"file_path": ".env"}, tmp_path, approvals=store).decision is Decision.ASK
    write = resolve(WRITE, {"file_path": "a"}, tmp_path, approvals=store)
    store.approve("s", write.signature)
    plan = resolve(WRITE, {"file_path": "a"}, tmp_path, mode=PermissionMode.PLAN, approvals=store)
    assert plan.decision is Decision.DENY


def test_signature_uses_the_canonical_path(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    one = resolve(WRITE, {"file_path": "d/../f"}, tmp_path)
    two = resolve(WRITE, {"file_path": str(tmp_path / "f")}, tmp_path)
    assert one.signature == two.signature
    assert one.signature == permission_signature("Write", os.path.realpath(tmp_path / "f"))
    assert len(one.signature) == 16 and int(one.signature, 16) >= 0
    assert resolve(READ, {"file_path": "f"}, tmp_path).signature != one.signature


def test_signature_of_plain_tools_covers_the_arguments(tmp_path: Path) -> None:
    # An ASK is approved per signature: it must name the arguments (order-free).
    one = resolve(EXEC_NOOP, {"a": "1", "b": "2"}, tmp_path)
    two = resolve(EXEC_NOOP, {"b": "2", "a": "1"}, tmp_path)
    three = resolve(EXEC_NOOP, {"a": "1", "b": "3"}, tmp_path)
    assert one.decision is Decision.ASK
    assert one.signature == two.signature != three.signature


def test_a_mode_allow_for_any_arguments_has_one_signature(tmp_path: Path) -> None:
    # READ_ONLY in DEFAULT mode with no rule: the permission is the tool with any arguments.
    one = resolve(NOOP, {"a": "1", "b": "2"}, tmp_path)
    three = resolve(NOOP, {"a": "1", "b": "3"}, tmp_path)
    assert one.decision is Decision.ALLOW and one.signature == three.signature


def test_sensitive_match_for_search_results(tmp_path: Path) -> None:
    (tmp_path / "link").symlink_to(tmp_path / ".env")
    resolver = PermissionResolver(PermissionConfig(), PermissionMode.YOLO, ApprovalStore())
    assert resolver.sensitive_match("link", str(tmp_path)) == str(tmp_path / ".env")
    assert resolver.sensitive_match("sub/key.pem", str(tmp_path)) is not None
    assert resolver.sensitive_match("README.md", str(tmp_path)) is None


def test_declared_path_arguments_of_command_tools_are_checked(tmp_path: Path) -> None:
    tool = make_tool("Sh", ToolKind.EXECUTE, ("command", "cwd"), path_args=("cwd",))
    args = {"command": "ls", "cwd": str(tmp_path / ".ssh")}
    result = resolve(tool, args, tmp_path, mode=PermissionMode.YOLO)
    assert result.decision is Decision.ASK and result.sensitive


def test_prefix_rule_on_a_path_tool_covers_the_path_and_below(tmp_path: Path) -> None:
    deny = ["Read(./secrets:*)"]
    assert resolve(READ, {"file_path": "secrets/a"}, tmp_path, deny=deny).decision is Decision.DENY
    assert resolve(READ, {"file_path": "other"}, tmp_path, deny=deny).decision is Decision.ALLOW


def test_unreadable_command_may_be_what_an_ask_rule_names(tmp_path: Path) -> None:
    tool = make_tool("Sh", ToolKind.WRITE, ("command",))
    mode = PermissionMode.ACCEPT_EDITS
    ask = ["Sh(git push:*)"]
    assert resolve(tool, {"command": "ls"}, tmp_path, mode=mode, ask=ask).decision is (
        Decision.ALLOW
    )
    for command in ("git push 'x", "$X push", 'eval "$c"'):
        result = resolve(tool, {"command": command}, tmp_path, mode=mode, ask=ask)
        assert result.decision is Decision.ASK, command


def test_mode_allow_cache_is_per_definition_not_per_name(tmp_path: Path) -> None:
    # Two scopes may register different tools under one name: the cached mode ALLOW of the
    # READ_ONLY one must not answer for the WRITE one.
    resolver = PermissionResolver(PermissionConfig(), PermissionMode.DEFAULT, ApprovalStore())
    ctx = ExecutionContext(session_id="s1", workspace_root=str(tmp_path))
    reader = make_tool("Shared", ToolKind.READ_ONLY, ("a",))
    writer = make_tool("Shared", ToolKind.WRITE, ("a",))
    assert resolver.decide(reader, {"a": "x"}, ctx).decision is Decision.ALLOW
    assert resolver.decide(writer, {"a": "x"}, ctx).decision is Decision.ASK
    assert resolver.decide(reader, {"a": "x"}, ctx).decision is Decision.ALLOW


def test_remembered_path_decisions_follow_a_swapped_symlink(tmp_path: Path) -> None:
    # The resolver remembers what the rules say about resolved paths; the resolution itself is
    # redone per call, so a link re-pointed at a sensitive file is caught on the next call.
    resolver = PermissionResolver(
        PermissionConfig(allow=("Write",)), PermissionMode.DEFAULT, ApprovalStore()
    )
    ctx = ExecutionContext(session_id="s1", workspace_root=str(tmp_path))
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / ".env").write_text("SECRET=1")
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "notes.txt")
    args = {"file_path": str(link)}
    first = resolver.decide(WRITE, args, ctx)
    assert (first.decision, first.source) == (Decision.ALLOW, DecisionSource.RULE)
    assert resolver.decide(WRITE, args, ctx) == first  # remembered: the same answer
    link.unlink()
    link.symlink_to(tmp_path / ".env")
    swapped = resolver.decide(WRITE, args, ctx)
    assert (swapped.decision, swapped.source) == (Decision.ASK, DecisionSource.SENSITIVE)
