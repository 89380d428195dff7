"""Claude Code hooks: stdout that is JSON but no object, which file writes a ``Write`` matcher
sees, and the session id a hook reads."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from fastgate import (
    ErrorCode,
    ExecutionContext,
    PermissionConfig,
    PermissionMode,
    PreToolUseResult,
    ToolExecutor,
    ToolRegistry,
    ToolResult,
    define_tool,
    schema,
)
from fastgate.builtin import register_builtins
from fastgate.hooks import CommandHook, Hooks, PreToolUseEvent
from tests.builtin_kit import builtin_executor, call
from tests.pipeline_kit import assert_idle

PYTHON = shlex.quote(sys.executable)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path.resolve() / "project"
    (root / ".claude" / "hooks").mkdir(parents=True)
    return root


def settings(ws: Path, hooks: dict[str, Any]) -> Path:
    path = ws / ".claude" / "settings.json"
    path.write_text(json.dumps({"hooks": hooks}))
    return path


def group(matcher: str, *commands: str) -> dict[str, Any]:
    return {"matcher": matcher, "hooks": [{"type": "command", "command": c} for c in commands]}


def script(ws: Path, name: str, body: str) -> str:
    """A Python hook under .claude/hooks, and the command a settings file runs it by."""
    (ws / ".claude" / "hooks" / name).write_text(body)
    return f'{PYTHON} "$CLAUDE_PROJECT_DIR"/.claude/hooks/{name}'


def executor(ws: Path, hooks: Hooks) -> ToolExecutor:
    return builtin_executor(ws, hooks=hooks, mode=PermissionMode.YOLO)


def printing(ws: Path, text: str) -> CommandHook:
    """A Claude Code hook that reads its event and prints ``text`` exactly, exit 0."""
    reply = ws / "reply.txt"
    reply.write_text(text)
    code = "import sys; sys.stdin.read(); sys.stdout.write(open(sys.argv[1]).read())"
    return CommandHook([sys.executable, "-c", code, str(reply)], protocol="claude", timeout=30)


def denied(result: ToolResult, *fragments: str) -> None:
    assert result.error is not None, result.content
    assert result.error.code == ErrorCode.PERMISSION_DENIED, result.error
    for fragment in fragments:
        assert fragment in result.error.message, result.error.message


# -- stdout that is valid JSON but not an object ------------------------------------------------

NOT_AN_OBJECT = [
    '[{"hookSpecificOutput": {"permissionDecision": "deny"}}]',
    '[{"decision": "block", "reason": "no"}]',
    "[]",
    '["deny"]',
    "[1" + "0" * 5000 + "]",  # an integer longer than Python parses by default is still JSON
    "[true, null]",
    '\u00a0\ufeff ["deny"]\n',  # behind what Claude Code trims
    "[" * 100_000 + "]" * 100_000,  # nested past the parser's depth
]


@pytest.mark.parametrize("stdout", NOT_AN_OBJECT, ids=range(len(NOT_AN_OBJECT)))
async def test_json_that_is_not_an_object_denies_before_the_call(ws: Path, stdout: str) -> None:
    hooks = Hooks()
    hooks.add_pre_tool_use(printing(ws, stdout), matcher="Write")
    ex = executor(ws, hooks)
    result = await call(ex, "write", {"file_path": "a.txt", "content": "a"})
    denied(result, "not a JSON object")
    assert not (ws / "a.txt").exists()
    assert_idle(ex)


@pytest.mark.parametrize("stdout", ['["ok"]', "[0]", "[]", ' [{"decision": "approve"}]'])
async def test_json_that_is_not_an_object_blocks_after_the_call(ws: Path, stdout: str) -> None:
    hooks = Hooks()
    hooks.add_post_tool_use(printing(ws, stdout), matcher="Bash")
    ex = executor(ws, hooks)
    result = await call(ex, "bash", {"command": "echo secret-output"})
    assert result.error is not None and result.error.code == ErrorCode.BLOCKED_BY_HOOK
    assert "secret-output" not in str(result.content)
    assert "not a JSON object" in str(result.content)
    assert_idle(ex)


@pytest.mark.parametrize(
    "stdout",
    [
        "",
        "  \n",
        "checked 3 files",
        "[INFO] all good",
        "NaN",
        "1 2",
        "true story",
        "2",
        "0",
        '"deny"',
        "true",
        "null",
        "-1.5e3",
        "[1, 2",
    ],
)
async def test_plain_text_is_still_no_opinion(ws: Path, stdout: str) -> None:
    hooks = Hooks()
    hooks.add_pre_tool_use(printing(ws, stdout), matcher="Write")
    ex = executor(ws, hooks)
    result = await call(ex, "write", {"file_path": "a.txt", "content": "a"})
    assert result.ok, result.content
    assert result.meta.additional_context == ()
    assert (ws / "a.txt").read_text() == "a"


async def test_a_failure_hook_printing_a_json_array_adds_nothing(ws: Path) -> None:
    # After a failed call the hook can only add context: a reply in the wrong shape adds none.
    hooks = Hooks()
    hooks.add_post_tool_use_failure(printing(ws, '["context?"]'), matcher="Read")
    ex = executor(ws, hooks)
    result = await call(ex, "read", {"file_path": "missing.txt"})
    assert result.error is not None and result.meta.additional_context == ()


# -- apply_patch under Claude Code's Write and Edit matchers --------------------------------------

GUARD = """import json, sys
event = json.load(sys.stdin)
tool_input = event["tool_input"]
with open(sys.argv[2], "a") as log:
    log.write(sys.argv[1] + " " + event["tool_name"] + " " + tool_input["file_path"] + "\\n")
if "/protected/" in tool_input["file_path"] or "SECRET" in (tool_input.get("content") or ""):
    print(json.dumps({"hookSpecificOutput": {"hookEventName": event["hook_event_name"],
        "permissionDecision": "deny", "permissionDecisionReason": "guarded by " + sys.argv[1]}}))
"""


def guarded(ws: Path, *matchers: str, event: str = "PreToolUse") -> tuple[ToolExecutor, Path]:
    """An executor with the guard above loaded from settings once per matcher; its log."""
    log = ws / "seen.log"
    command = script(ws, "guard.py", GUARD)
    hooks = {event: [group(m, f"{command} {m} {shlex.quote(str(log))}") for m in matchers]}
    return executor(ws, Hooks.load(settings(ws, hooks))), log


def patch(*hunks: str) -> dict[str, str]:
    return {"patch": "*** Begin Patch\n" + "".join(hunks) + "*** End Patch\n"}


# Every way a patch creates or removes a file: a Write guard must see each.
WRITES_TO_PROTECTED = [
    patch("*** Add File: protected/new.txt\n+x\n"),
    patch("*** Add File: ok.txt\n+x\n*** Add File: protected/new.txt\n+x\n"),
    patch("*** Delete File: protected/old.txt\n"),
    patch("*** Update File: notes.txt\n*** Move to: protected/moved.txt\n@@\n-n\n+m\n"),
    patch("*** Update File: notes.txt\n@@\n-n\n+m\n*** Add File: protected/new.txt\n+x\n"),
    patch("*** Add File: ./sub/../protected/new.txt\n+x\n"),
]


def _tree(ws: Path) -> dict[str, str]:
    return {
        str(p.relative_to(ws)): p.read_text()
        for p in sorted(ws.rglob("*"))
        if p.is_file() and ".claude" not in p.parts and p.name != "seen.log"
    }


@pytest.mark.parametrize("args", WRITES_TO_PROTECTED, ids=range(len(WRITES_TO_PROTECTED)))
async def test_a_write_guard_sees_every_file_a_patch_creates_or_deletes(
    ws: Path, args: dict[str, str]
) -> None:
    (ws / "protected").mkdir()
    (ws / "protected" / "old.txt").write_text("keep\n")
    (ws / "notes.txt").write_text("n\n")
    before = _tree(ws)
    ex, _log = guarded(ws, "Write")
    denied(await call(ex, "apply_patch", args), "guarded by Write")
    assert _tree(ws) == before
    assert_idle(ex)


async def test_a_write_guard_reads_the_content_of_an_added_file(ws: Path) -> None:
    ex, _log = guarded(ws, "Write")
    secret = await call(ex, "apply_patch", patch("*** Add File: a.txt\n+key=SECRET\n"))
    denied(secret, "guarded by Write")
    assert not (ws / "a.txt").exists()
    fine = await call(ex, "apply_patch", patch("*** Add File: a.txt\n+key=1\n"))
    assert fine.ok, fine.content
    assert (ws / "a.txt").read_text() == "key=1\n"


async def test_write_sees_what_a_patch_creates_or_deletes_edit_sees_every_file(ws: Path) -> None:
    for name in ("b.txt", "c.txt", "d.txt"):
        (ws / name).write_text("n\n")
    ex, log = guarded(ws, "Write", "Edit")
    mixed = patch(
        "*** Add File: a.txt\n+a\n",
        "*** Update File: b.txt\n@@\n-n\n+m\n",
        "*** Delete File: c.txt\n",
        "*** Update File: d.txt\n*** Move to: e.txt\n@@\n-n\n+m\n",
    )
    result = await call(ex, "apply_patch", mixed)
    assert result.ok, result.content
    seen = [line.split(" ", 1) for line in log.read_text().splitlines()]
    assert seen == [
        ["Write", f"Edit {ws}/a.txt"],
        ["Write", f"Edit {ws}/c.txt"],
        ["Write", f"Edit {ws}/e.txt"],
        ["Edit", f"Edit {ws}/a.txt"],
        ["Edit", f"Edit {ws}/b.txt"],
        ["Edit", f"Edit {ws}/c.txt"],
        ["Edit", f"Edit {ws}/d.txt"],
        ["Edit", f"Edit {ws}/e.txt"],
    ]
    # An edit that creates and deletes nothing is no write: the Write hook does not run.
    log.unlink()
    (ws / "protected").mkdir()
    (ws / "protected" / "f.txt").write_text("n\n")
    edit_only = await call(ex, "apply_patch", patch("*** Update File: b.txt\n@@\n-m\n+o\n"))
    assert edit_only.ok, edit_only.content
    assert log.read_text() == f"Edit Edit {ws}/b.txt\n"
    assert_idle(ex)


async def test_a_write_hook_after_the_call_sees_the_file_a_patch_added(ws: Path) -> None:
    log = ws / "seen.log"
    record = f"{PYTHON} -c {shlex.quote(RECORD_PATH)} {shlex.quote(str(log))}"
    hooks = Hooks.load(settings(ws, {"PostToolUse": [group("Write", record)]}))
    ex = executor(ws, hooks)
    assert (await call(ex, "apply_patch", patch("*** Add File: a.txt\n+a\n"))).ok
    (ws / "b.txt").write_text("n\n")
    assert (await call(ex, "apply_patch", patch("*** Update File: b.txt\n@@\n-n\n+m\n"))).ok
    assert log.read_text().splitlines() == [f"{ws}/a.txt"]


RECORD_PATH = (
    "import json, sys; e = json.load(sys.stdin); "
    "open(sys.argv[1], 'a').write(e['tool_response']['filePath'] + chr(10))"
)


async def test_python_hooks_matching_write_fire_for_a_patch_that_adds_a_file(ws: Path) -> None:
    fired: list[str] = []

    def hook(event: PreToolUseEvent) -> None:
        fired.append(event.tool_name)

    hooks = Hooks()
    hooks.add_pre_tool_use(hook, matcher="Write")
    ex = executor(ws, hooks)
    (ws / "b.txt").write_text("n\n")
    assert (await call(ex, "apply_patch", patch("*** Update File: b.txt\n@@\n-n\n+m\n"))).ok
    assert fired == []
    assert (await call(ex, "apply_patch", patch("*** Add File: a.txt\n+a\n"))).ok
    assert (await call(ex, "apply_patch", patch("*** Delete File: b.txt\n"))).ok
    assert fired == ["apply_patch", "apply_patch"]


async def test_a_rewrite_into_a_new_file_is_judged_by_the_write_guard(ws: Path) -> None:
    # The first hook turns an edit into the creation of a protected file: the Write guard,
    # which the edit did not concern, must judge what will run.
    (ws / "b.txt").write_text("n\n")
    other = patch("*** Add File: protected/x.txt\n+x\n")
    hooks = Hooks()

    def rewrite(event: PreToolUseEvent) -> PreToolUseResult:
        return PreToolUseResult(updated_args=other)

    hooks.add_pre_tool_use(rewrite, matcher="Edit")
    log = ws / "seen.log"
    command = f"{PYTHON} {shlex.quote(str(ws / 'guard.py'))} Write {shlex.quote(str(log))}"
    (ws / "guard.py").write_text(GUARD)
    hooks.add_pre_tool_use(CommandHook(["sh", "-c", command], protocol="claude"), "Write")
    ex = executor(ws, hooks)
    result = await call(ex, "apply_patch", patch("*** Update File: b.txt\n@@\n-n\n+m\n"))
    denied(result, "guarded by Write")
    assert not (ws / "protected").exists() and (ws / "b.txt").read_text() == "n\n"
    assert_idle(ex)


def _replying(ws: Path, reply: dict[str, Any]) -> ToolExecutor:
    command = f"cat > /dev/null; printf '%s' {shlex.quote(json.dumps(reply))}"
    return executor(ws, Hooks.load(settings(ws, {"PreToolUse": [group("Write", command)]})))


async def test_updated_input_may_echo_the_fields_shown_but_not_change_them(ws: Path) -> None:
    one = patch("*** Add File: a.txt\n+a\n")
    other = patch("*** Add File: b.txt\n+b\n")
    shown = {
        "file_path": str(ws / "a.txt"),
        "content": "a\n",
        "old_string": "",
        "new_string": "a\n",
    }
    echo = {"hookSpecificOutput": {"updatedInput": {**other, **shown}}}
    result = await call(_replying(ws, echo), "apply_patch", one)
    assert result.ok, result.content
    assert (ws / "b.txt").read_text() == "b\n" and not (ws / "a.txt").exists()

    for key, value in [("content", "z\n"), ("new_string", "z\n"), ("old_string", "a")]:
        changed = {"hookSpecificOutput": {"updatedInput": {**one, **shown, key: value}}}
        refused = await call(_replying(ws, changed), "apply_patch", one)
        denied(refused, f"updatedInput changes {key}")
        assert not (ws / "a.txt").exists()


async def test_a_write_tool_is_unchanged(ws: Path) -> None:
    # write answers to Write and Edit already; edit stays Edit only.
    ex, log = guarded(ws, "Write")
    assert (await call(ex, "write", {"file_path": "a.txt", "content": "a\n"})).ok
    edit = {"file_path": "a.txt", "old_string": "a", "new_string": "b"}
    assert (await call(ex, "edit", edit)).ok
    assert log.read_text() == "Write Write a.txt\n"


# -- session_id ---------------------------------------------------------------------------------

SESSION = (
    "import json, sys; e = json.load(sys.stdin); "
    "open(sys.argv[1], 'a').write(json.dumps(e['session_id']) + chr(10))"
)


def _session_executor(ws: Path, hooks: Hooks) -> ToolExecutor:
    """The built-ins and a tool that raises, with hooks and no default session."""

    async def boom(args: Any, ctx: Any) -> Any:
        raise RuntimeError("boom")

    registry = ToolRegistry()
    register_builtins(registry)
    registry.register(define_tool("boom", "Fails.", schema.Object({}), boom))
    return ToolExecutor(
        registry,
        permissions=PermissionConfig(),
        mode=PermissionMode.YOLO,
        context_defaults={"workspace_root": str(ws)},
        hooks=hooks,
    )


async def test_session_id_is_always_a_string(ws: Path) -> None:
    log = ws / "sessions.log"
    record = f"{PYTHON} -c {shlex.quote(SESSION)} {shlex.quote(str(log))}"
    hooks = Hooks.load(
        settings(
            ws,
            {
                "PreToolUse": [group("Bash|boom", record)],
                "PostToolUse": [group("Bash", record)],
                "PostToolUseFailure": [group("boom", record)],
            },
        )
    )
    ex = _session_executor(ws, hooks)
    assert (await ex.execute("bash", {"command": "true"}, ExecutionContext())).ok
    failed = await ex.execute("boom", {}, ExecutionContext())
    assert failed.error is not None and failed.error.code == ErrorCode.TOOL_ERROR
    assert (await ex.execute("bash", {"command": "true"}, ExecutionContext(session_id="s7"))).ok
    sessions = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(sessions) == 6, sessions
    assert all(isinstance(s, str) and s for s in sessions), sessions
    anonymous = set(sessions[:4])
    assert len(anonymous) == 1 and "s7" not in anonymous  # one stand-in for every such call
    assert sessions[4:] == ["s7", "s7"]


async def test_a_command_hook_run_directly_sends_a_string_session(ws: Path) -> None:
    seen: list[Any] = []
    code = (
        "import json, sys; e = json.load(sys.stdin); sid = json.dumps(e['session_id']); "
        "print(json.dumps({'hookSpecificOutput': {'additionalContext': sid}}))"
    )
    hook = CommandHook([sys.executable, "-c", code], protocol="claude")
    for ctx in (ExecutionContext(workspace_root=str(ws)), ExecutionContext(workspace_root=str(ws))):
        reply = await hook(PreToolUseEvent("bash", {"command": "x"}, ctx))
        assert isinstance(reply, PreToolUseResult) and reply.additional_context is not None
        seen.append(json.loads(reply.additional_context))
    assert isinstance(seen[0], str) and seen[0] and seen[0] == seen[1]
