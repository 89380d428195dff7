"""What an approval covers (SPEC §7): a session approval only stands for a mode-default ASK (an
ASK rule, a sensitive or protected path asks every time), and a ``project`` approval writes a
rule matching the approved call and nothing else, or keeps the approval for the session and
says so. Each property is checked again from another session and from a new executor that
re-reads the settings files, where the attack's second step would run."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from fastgate import (
    ApprovalResponse,
    ApprovalStore,
    DecisionSource,
    ErrorCode,
    ExecutionContext,
    Hooks,
    PermissionConfig,
    PermissionMode,
    PreToolUseResult,
    ToolKind,
    ToolResult,
    schema,
)
from fastgate.permissions import settings_path
from tests.pipeline_kit import COMMAND, PATH, assert_idle, executor, tool

Scope = str


class Approver:
    """Approves with ``scope`` and records what it was asked."""

    def __init__(self, scope: Scope = "session") -> None:
        self.scope = scope
        self.asked: list[Any] = []

    async def __call__(self, request: Any) -> ApprovalResponse:
        self.asked.append(request.args)
        return ApprovalResponse(True, scope=self.scope)  # type: ignore[arg-type]


def _tools() -> list[Any]:
    """A ``Bash`` that runs nothing (it reports what it was given), a ``Write`` that writes
    nothing, ``Deploy`` keyed by its target, ``Notify`` with an optional text, and ``Ping``,
    which takes no arguments at all."""
    return [
        tool("Bash", lambda a, c: f"ran {a['command']}", COMMAND, kind=ToolKind.EXECUTE),
        tool("Write", lambda a, c: "written", PATH, kind=ToolKind.WRITE),
        tool(
            "Deploy",
            lambda a, c: "deployed",
            schema.Object({"target": schema.String()}, required=("target",)),
            kind=ToolKind.EXECUTE,
            permission_key=lambda a: a["target"],
        ),
        tool(
            "Notify",
            lambda a, c: "sent",
            schema.Object({"text": schema.String()}),
            kind=ToolKind.EXECUTE,
        ),
        tool("Ping", lambda a, c: "pong", schema.Object({}), kind=ToolKind.EXECUTE),
    ]


def _executor(root: Path, config: PermissionConfig | None = None, **options: Any) -> Any:
    options.setdefault("mode", PermissionMode.DEFAULT)
    return executor(*_tools(), workspace=root, permissions=config, **options)


def _ctx(session: str, approver: Any = None) -> ExecutionContext:
    return ExecutionContext(session_id=session, approver=approver)


def _asked_again(result: ToolResult) -> bool:
    """Refused for want of an approver: the call was not covered, it asked."""
    return (
        result.error is not None
        and result.error.code is ErrorCode.PERMISSION_DENIED
        and result.error.details.get("reason") == "no_approver"
    )


def _project_allow(root: Path) -> list[str]:
    path = Path(settings_path(str(root)))
    if not path.exists():
        return []
    allowed: list[str] = json.loads(path.read_text()).get("permissions", {}).get("allow", [])
    return allowed


def _claude_settings(root: Path, **permissions: Any) -> Path:
    path = root / ".claude" / "settings.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({"permissions": permissions}))
    return path


# -- an ASK rule asks every time -------------------------------------------------------------

ASK_RULE_CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    # (ask rule, first call, a second call the rule also covers)
    ("Bash(git push:*)", {"command": "git push origin main"}, {"command": "git push origin main"}),
    ("Bash(git push *)", {"command": "git push"}, {"command": "git  push"}),
    ("Write(./deploy/**)", {"file_path": "deploy/prod.yml"}, {"file_path": "deploy/prod.yml"}),
    ("Deploy(prod)", {"target": "prod"}, {"target": "prod"}),
]


@pytest.mark.parametrize(("rule", "first", "second"), ASK_RULE_CASES)
@pytest.mark.parametrize("scope", ["session", "project"])
async def test_an_ask_rule_asks_every_time(
    tmp_path: Path, rule: str, first: dict[str, Any], second: dict[str, Any], scope: Scope
) -> None:
    name = rule.split("(")[0]
    settings = _claude_settings(tmp_path, ask=[rule])
    store = ApprovalStore()
    # ACCEPT_EDITS: the mode alone would allow the Write; the rule is what asks.
    ex = _executor(
        tmp_path, PermissionConfig.load(settings), approval_store=store, mode="acceptEdits"
    )
    approver = Approver(scope)
    for args in (first, second, first):
        result = await ex.execute(name, args, _ctx("s1", approver))
        assert result.ok, result.content
        assert result.meta.decision_source is DecisionSource.USER  # asked, not "session"
    assert len(approver.asked) == 3
    notes = " ".join(result.meta.additional_context)
    assert f"the rule {rule} asks every time" in notes
    # The same session, the same store, settings read again by a new executor: asked again.
    reloaded = _executor(
        tmp_path, PermissionConfig.load(settings), approval_store=store, mode="acceptEdits"
    )
    assert _asked_again(await reloaded.execute(name, second, _ctx("s1")))
    assert _asked_again(await reloaded.execute(name, second, _ctx("s2")))
    assert_idle(ex)
    assert_idle(reloaded)


async def test_queued_calls_under_an_ask_rule_are_each_asked(tmp_path: Path) -> None:
    # Two identical calls wait on one session's prompt; the first is approved for the session:
    # the second, which queued meanwhile, is still asked.
    ex = _executor(tmp_path, PermissionConfig(ask=("Bash(git push:*)",)))
    release = asyncio.Event()
    asked = 0

    async def approver(request: Any) -> ApprovalResponse:
        nonlocal asked
        asked += 1
        await release.wait()
        return ApprovalResponse(True, scope="session")

    args = {"command": "git push origin main"}
    calls = [asyncio.ensure_future(ex.execute("Bash", args, _ctx("s1", approver))) for _ in "ab"]
    for _ in range(10):
        await asyncio.sleep(0)
    release.set()
    results = await asyncio.gather(*calls)
    assert all(r.ok for r in results) and asked == 2
    assert [r.meta.decision_source for r in results] == [DecisionSource.USER] * 2
    assert_idle(ex)


async def test_a_hooks_ask_is_asked_every_time_even_where_the_mode_asks(tmp_path: Path) -> None:
    # The mode asks for Bash and a hook asks too: the hook's ask is the source, so neither a
    # session approval given earlier nor one given while a duplicate waited covers it.
    hooks = Hooks()
    hooks.add_pre_tool_use(lambda event: PreToolUseResult(decision="ask", reason="hook asks"))
    ex = _executor(tmp_path, hooks=hooks)
    release = asyncio.Event()
    sources: list[str] = []

    async def approver(request: Any) -> ApprovalResponse:
        sources.append(request.source)
        await release.wait()
        return ApprovalResponse(True, scope="session")

    args = {"command": "make lint"}
    calls = [asyncio.ensure_future(ex.execute("Bash", args, _ctx("s1", approver))) for _ in "ab"]
    for _ in range(10):
        await asyncio.sleep(0)
    release.set()
    assert all(r.ok for r in await asyncio.gather(*calls))
    assert sources == ["hook", "hook"]  # each asked, and told that the hook asked
    assert _asked_again(await ex.execute("Bash", args, _ctx("s1")))
    assert_idle(ex)


async def test_queued_calls_under_the_modes_ask_share_one_prompt(tmp_path: Path) -> None:
    ex = _executor(tmp_path)
    release = asyncio.Event()
    asked = 0

    async def approver(request: Any) -> ApprovalResponse:
        nonlocal asked
        asked += 1
        await release.wait()
        return ApprovalResponse(True, scope="session")

    args = {"command": "make lint"}
    calls = [asyncio.ensure_future(ex.execute("Bash", args, _ctx("s1", approver))) for _ in "ab"]
    for _ in range(10):
        await asyncio.sleep(0)
    release.set()
    assert all(r.ok for r in await asyncio.gather(*calls)) and asked == 1
    assert (await ex.execute("Bash", args, _ctx("s1"))).meta.decision_source is (
        DecisionSource.SESSION
    )
    assert_idle(ex)


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("Write", {"file_path": ".env"}),
        ("Write", {"file_path": "keys/server.pem"}),
        ("Write", {"file_path": ".fastgate/settings.local.json"}),
        ("Bash", {"command": "cat .env"}),
        ("Bash", {"command": "echo x > .fastgate/settings.local.json"}),
    ],
)
@pytest.mark.parametrize("scope", ["session", "project"])
async def test_sensitive_and_protected_calls_ask_every_time(
    tmp_path: Path, name: str, args: dict[str, Any], scope: Scope
) -> None:
    store = ApprovalStore()
    ex = _executor(tmp_path, PermissionConfig(allow=("Write", "Bash")), approval_store=store)
    approver = Approver(scope)
    for _ in range(2):
        result = await ex.execute(name, args, _ctx("s1", approver))
        assert result.ok and result.meta.decision_source is DecisionSource.USER
    assert len(approver.asked) == 2
    assert "asked every time" in " ".join(result.meta.additional_context)
    assert _project_allow(tmp_path) == []
    again = _executor(tmp_path, PermissionConfig(allow=("Write", "Bash")), approval_store=store)
    assert _asked_again(await again.execute(name, args, _ctx("s1")))


# -- a project approval never widens ---------------------------------------------------------

WIDER: list[tuple[str, str]] = [
    # (approved at project scope, a call a rule written from it would have let through)
    ("rm *.pyc", "rm -rf / .pyc"),
    ("rm *.pyc", "rm *.pyc extra"),
    ("ls *", "ls -la /"),
    ("rm build:*", "rm build -rf /"),
    ("rm '*'", "rm *"),
    ("rm \\*", "rm *"),
    ("rm ?.pyc", "rm a.pyc"),
    ("rm [ab].txt", "rm a.txt"),
    ("rm '{a,b}.txt'", "rm {a,b}.txt"),
    ("rm $TARGET", 'TARGET="-rf /"; rm $TARGET'),
    ("rm '$TARGET'", "rm $TARGET"),
    ("cat ~/notes", "cat ~/.ssh/id_rsa"),
    ("rm '~'", "rm ~"),
    ("cd build && rm -rf out", "rm -rf out"),
    ("make clean; make", "make clean"),
    ("ls | grep x", "grep x"),
    ("X=1 make", "make"),
    ("python3 - <<'EOF'\nprint(1)\nEOF", "python3 - <<'EOF'\nimport os\nEOF"),
    ("bash -c 'make'", "make"),
    ("echo $(date)", "date"),
]


@pytest.mark.parametrize(("approved", "attack"), WIDER)
async def test_a_project_approval_that_would_widen_is_kept_for_the_session(
    tmp_path: Path, approved: str, attack: str
) -> None:
    ex = _executor(tmp_path)
    approver = Approver("project")
    result = await ex.execute("Bash", {"command": approved}, _ctx("s1", approver))
    assert result.ok and len(approver.asked) == 1
    notes = " ".join(result.meta.additional_context)
    assert _project_allow(tmp_path) == []
    again = await ex.execute("Bash", {"command": approved}, _ctx("s1"))
    if "approved for this call only" in notes:  # a word that may name a sensitive file
        assert _asked_again(again)
    else:  # the session has it (the same call runs unasked there) ...
        assert "approved for this session only" in notes and "project rule" in notes, notes
        assert again.ok and again.meta.decision_source is DecisionSource.SESSION
    # ... the attack does not, in this session or another, nor after the settings are re-read.
    assert _asked_again(await ex.execute("Bash", {"command": attack}, _ctx("s1")))
    fresh = _executor(tmp_path)
    assert _asked_again(await fresh.execute("Bash", {"command": attack}, _ctx("s2")))
    assert _asked_again(await fresh.execute("Bash", {"command": approved}, _ctx("s2")))
    assert_idle(ex)
    assert_idle(fresh)


@pytest.mark.parametrize(
    ("approved", "rule", "other"),
    [
        ("make lint", "Bash(make lint)", "make lint; rm -rf /"),
        ("git commit -m 'fix (x)'", "Bash(git commit -m 'fix (x)')", "git commit -m other"),
        ("npm test 2>&1", "Bash(npm test)", "npm test extra"),
        ("timeout 5 make", "Bash(timeout 5 make)", "make"),
    ],
)
async def test_an_exact_command_is_saved_for_the_project(
    tmp_path: Path, approved: str, rule: str, other: str
) -> None:
    ex = _executor(tmp_path)
    result = await ex.execute("Bash", {"command": approved}, _ctx("s1", Approver("project")))
    assert result.ok and result.meta.additional_context == ()
    assert _project_allow(tmp_path) == [rule]
    fresh = _executor(tmp_path)
    covered = await fresh.execute("Bash", {"command": approved}, _ctx("s2"))
    assert covered.ok and covered.meta.decision_source is DecisionSource.RULE
    assert _asked_again(await fresh.execute("Bash", {"command": other}, _ctx("s2")))


@pytest.mark.parametrize(
    ("name", "siblings"),
    [
        ("a[b].txt", ["ab.txt"]),
        ("x*.txt", ["xevil.txt", "x.txt"]),
        ("q?.txt", ["qq.txt"]),
        ("{a,b}.txt", ["a.txt", "b.txt"]),
        ("back\\slash.txt", ["backslash.txt"]),
        ("dir*/f.txt", ["dirX/f.txt"]),
        ("**", ["deep/er.txt"]),
    ],
)
async def test_a_path_with_pattern_characters_is_saved_as_exactly_that_path(
    tmp_path: Path, name: str, siblings: list[str]
) -> None:
    for path in [name, *siblings]:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
    ex = _executor(tmp_path)
    result = await ex.execute("Write", {"file_path": name}, _ctx("s1", Approver("project")))
    assert result.ok and result.meta.additional_context == ()
    (rule,) = _project_allow(tmp_path)
    fresh = _executor(tmp_path)
    assert (await fresh.execute("Write", {"file_path": name}, _ctx("s2"))).ok
    for sibling in siblings:
        assert _asked_again(await fresh.execute("Write", {"file_path": sibling}, _ctx("s2"))), (
            rule,
            sibling,
        )


@pytest.mark.parametrize(
    ("name", "args", "attack"),
    [
        ("Deploy", {"target": "staging:*"}, {"target": "staging:prod"}),
        ("Deploy", {"target": "staging *"}, {"target": "staging prod"}),
        ("Deploy", {"target": "*"}, {"target": "prod"}),
        ("Notify", {"text": "hello"}, {"text": "rm -rf /"}),
    ],
)
async def test_keys_and_arguments_no_rule_can_name_stay_in_the_session(
    tmp_path: Path, name: str, args: dict[str, Any], attack: dict[str, Any]
) -> None:
    ex = _executor(tmp_path)
    result = await ex.execute(name, args, _ctx("s1", Approver("project")))
    assert result.ok
    assert "approved for this session only" in " ".join(result.meta.additional_context)
    assert _project_allow(tmp_path) == []
    fresh = _executor(tmp_path)
    assert _asked_again(await fresh.execute(name, attack, _ctx("s2")))


async def test_a_tool_without_arguments_is_saved_whole(tmp_path: Path) -> None:
    ex = _executor(tmp_path)
    assert (await ex.execute("Ping", {}, _ctx("s1", Approver("project")))).ok
    assert _project_allow(tmp_path) == ["Ping"]
    fresh = _executor(tmp_path)
    assert (await fresh.execute("Deploy", {"target": "prod"}, _ctx("s2"))).error is not None
    assert (await fresh.execute("Ping", {}, _ctx("s2"))).ok


async def test_a_call_leaving_out_an_optional_argument_stays_in_the_session(
    tmp_path: Path,
) -> None:
    """``Notify({})`` approved for the project must not become the bare rule ``Notify``: that
    would let any later text through unasked."""
    ex = _executor(tmp_path)
    assert (await ex.execute("Notify", {}, _ctx("s1", Approver("project")))).ok
    assert _project_allow(tmp_path) == []
    fresh = _executor(tmp_path)
    assert _asked_again(await fresh.execute("Notify", {"text": "rm -rf /"}, _ctx("s2")))
