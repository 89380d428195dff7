"""Claude Code hooks written for ``Edit`` and ``MultiEdit`` see what the built-in ``apply_patch``
changes in a file it updates: ``old_string``/``new_string`` and ``edits``, under every matcher
that names those tools; one file's deny denies the whole patch."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from fastgate import ErrorCode, PermissionMode, ToolExecutor, ToolResult
from fastgate.hooks import Hooks, PreToolUseEvent
from tests.builtin_kit import builtin_executor, call
from tests.pipeline_kit import assert_idle

PYTHON = shlex.quote(sys.executable)

# Logs what it was shown, and denies a file under protected/ or a change that writes SECRET,
# looking only where a hook written for Claude Code's ``argv[1]`` tool looks.
GUARD = """import json, sys
event = json.load(sys.stdin)
shown = dict(event["tool_input"])
shown.pop("patch", None)
with open(sys.argv[2], "a") as log:
    log.write(json.dumps({"tool_name": event["tool_name"], "tool_input": shown}) + "\\n")
tool_input = event["tool_input"]
looks_at = {
    "Edit": [tool_input.get("new_string") or ""],
    "MultiEdit": [edit["new_string"] for edit in tool_input.get("edits", [])],
    "Write": [tool_input.get("content") or ""],
}[sys.argv[1]]
if "/protected/" in tool_input["file_path"] or any("SECRET" in text for text in looks_at):
    print(json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse",
        "permissionDecision": "deny", "permissionDecisionReason": "guarded " + sys.argv[1]}}))
"""


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path.resolve() / "project"
    (root / ".claude" / "hooks").mkdir(parents=True)
    (root / ".claude" / "hooks" / "guard.py").write_text(GUARD)
    return root


def guarded(ws: Path, matcher: str, reads: str = "Edit") -> tuple[ToolExecutor, Path]:
    """An executor whose settings file runs the guard under ``matcher``, reading the fields of
    Claude Code's ``reads`` tool; the guard's log."""
    log = ws / "seen.log"
    command = (
        f'{PYTHON} "$CLAUDE_PROJECT_DIR"/.claude/hooks/guard.py {reads} {shlex.quote(str(log))}'
    )
    group = {"matcher": matcher, "hooks": [{"type": "command", "command": command}]}
    path = ws / ".claude" / "settings.json"
    path.write_text(json.dumps({"hooks": {"PreToolUse": [group]}}))
    hooks = Hooks.load(path, workspace=ws)
    return builtin_executor(ws, hooks=hooks, mode=PermissionMode.YOLO), log


def seen(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def patch(*hunks: str) -> dict[str, str]:
    return {"patch": "*** Begin Patch\n" + "".join(hunks) + "*** End Patch\n"}


def denied(result: ToolResult, reason: str) -> None:
    assert result.error is not None, result.content
    assert result.error.code == ErrorCode.PERMISSION_DENIED, result.error
    assert reason in result.error.message, result.error.message


def edit(old: str, new: str) -> dict[str, Any]:
    return {"old_string": old, "new_string": new, "replace_all": False}


# Matchers a Claude Code project guards its edits with: names and regular expressions.
EDIT_MATCHERS = [
    "MultiEdit",
    "Edit",
    "Edit|MultiEdit",
    "Edit|MultiEdit|Write",
    "Edit, MultiEdit",
    ".*",
    "*",
    "^MultiEdit$",
    "Multi.*",
    "(Multi)?Edit",
]


@pytest.mark.parametrize("matcher", EDIT_MATCHERS)
async def test_an_update_is_shown_as_claude_codes_edit_and_multiedit(
    ws: Path, matcher: str
) -> None:
    (ws / "a.txt").write_text("one\ntwo\nthree\n")
    ex, log = guarded(ws, matcher)
    result = await call(ex, "apply_patch", patch("*** Update File: a.txt\n@@\n one\n-two\n+2\n"))
    assert result.ok, result.content
    assert (ws / "a.txt").read_text() == "one\n2\nthree\n"
    assert seen(log) == [
        {
            "tool_name": "Edit",
            "tool_input": {
                "file_path": str(ws / "a.txt"),
                "old_string": "one\ntwo",
                "new_string": "one\n2",
                "replace_all": False,
                "edits": [edit("one\ntwo", "one\n2")],
            },
        }
    ]
    assert_idle(ex)


SEVERAL_HUNKS = patch(
    "*** Update File: a.txt\n",
    "@@\n-l1\n+L1\n l2\n",
    "@@ l4\n l5\n-l6\n+L6\n",
    "@@\n l8\n+l8b\n",
)


@pytest.mark.parametrize("matcher", ["MultiEdit", "Edit", ".*"])
async def test_every_hunk_of_an_update_is_an_edit_in_order(ws: Path, matcher: str) -> None:
    (ws / "a.txt").write_text("".join(f"l{n}\n" for n in range(1, 10)))
    ex, log = guarded(ws, matcher)
    result = await call(ex, "apply_patch", SEVERAL_HUNKS)
    assert result.ok, result.content
    [shown] = [entry["tool_input"] for entry in seen(log)]
    assert shown["edits"] == [
        edit("l1\nl2", "L1\nl2"),
        edit("l5\nl6", "l5\nL6"),
        edit("l8", "l8\nl8b"),
    ]
    # Edit's two strings hold every hunk, in order: a hook reading only them misses nothing.
    assert shown["old_string"] == "l1\nl2\nl5\nl6\nl8"
    assert shown["new_string"] == "L1\nl2\nl5\nL6\nl8\nl8b"
    assert shown["replace_all"] is False


# A secret written by the last hunk, by a second update of the file, or after an add of it.
SECRET_WRITES = [
    patch("*** Update File: a.txt\n@@\n-l1\n+L1\n@@\n l8\n-l9\n+SECRET\n"),
    patch("*** Update File: a.txt\n@@\n-l1\n+L1\n*** Update File: a.txt\n@@\n-l9\n+SECRET\n"),
    patch("*** Update File: a.txt\n@@\n-l1\n+L1\n*** Update File: b.txt\n@@\n-b\n+SECRET\n"),
]


@pytest.mark.parametrize("reads", ["Edit", "MultiEdit"])
@pytest.mark.parametrize("args", SECRET_WRITES, ids=range(len(SECRET_WRITES)))
async def test_a_hook_reading_new_strings_sees_every_line_written(
    ws: Path, reads: str, args: dict[str, str]
) -> None:
    before = "".join(f"l{n}\n" for n in range(1, 10))
    (ws / "a.txt").write_text(before)
    (ws / "b.txt").write_text("b\n")
    ex, _log = guarded(ws, reads, reads=reads)
    denied(await call(ex, "apply_patch", args), f"guarded {reads}")
    assert (ws / "a.txt").read_text() == before and (ws / "b.txt").read_text() == "b\n"
    assert_idle(ex)


@pytest.mark.parametrize("matcher", ["MultiEdit", "Edit|MultiEdit", "Multi.*"])
async def test_one_denied_file_denies_the_whole_patch(ws: Path, matcher: str) -> None:
    (ws / "protected").mkdir()
    (ws / "a.txt").write_text("a\n")
    (ws / "protected" / "p.txt").write_text("p\n")
    (ws / "z.txt").write_text("z\n")
    ex, log = guarded(ws, matcher, reads="MultiEdit")
    mixed = patch(
        "*** Update File: a.txt\n@@\n-a\n+A\n",
        "*** Update File: protected/p.txt\n@@\n-p\n+P\n",
        "*** Add File: new.txt\n+n\n",
        "*** Update File: z.txt\n@@\n-z\n+Z\n",
    )
    denied(await call(ex, "apply_patch", mixed), "guarded MultiEdit")
    assert (ws / "a.txt").read_text() == "a\n" and (ws / "z.txt").read_text() == "z\n"
    assert (ws / "protected" / "p.txt").read_text() == "p\n" and not (ws / "new.txt").exists()
    # The files are shown in path order (as they are locked); the deny ends the hook's run.
    shown = [entry["tool_input"] for entry in seen(log)]
    assert [entry["file_path"] for entry in shown] == [
        str(ws / "a.txt"),
        str(ws / "protected" / "p.txt"),
    ]
    assert shown[1]["edits"] == [edit("p", "P")]
    assert_idle(ex)


@pytest.mark.parametrize("matcher", ["Write", "Edit|Write", "MultiEdit|Write"])
async def test_a_write_hook_reads_every_text_a_patch_writes_to_a_file_it_adds(
    ws: Path, matcher: str
) -> None:
    # The file is added, then updated, by one patch: its content shows both texts.
    (ws / "b.txt").write_text("b\n")
    ex, log = guarded(ws, matcher, reads="Write")
    sneaky = patch(
        "*** Add File: a.txt\n+fine\n",
        "*** Update File: a.txt\n@@\n-fine\n+SECRET\n",
        "*** Update File: b.txt\n@@\n-b\n+B\n",
    )
    denied(await call(ex, "apply_patch", sneaky), "guarded Write")
    assert not (ws / "a.txt").exists() and (ws / "b.txt").read_text() == "b\n"
    [shown] = [entry["tool_input"] for entry in seen(log)]  # b.txt is only updated: no write
    assert shown["file_path"] == str(ws / "a.txt")
    assert shown["content"] == "fine\n\nSECRET"
    assert shown["edits"] == [edit("", "fine\n"), edit("fine", "SECRET")]
    assert_idle(ex)


async def test_a_python_hook_matching_multiedit_fires_for_a_patch(ws: Path) -> None:
    fired: list[str] = []

    def hook(event: PreToolUseEvent) -> None:
        fired.append(event.tool_name)

    hooks = Hooks()
    hooks.add_pre_tool_use(hook, matcher="MultiEdit")
    ex = builtin_executor(ws, hooks=hooks, mode=PermissionMode.YOLO)
    (ws / "a.txt").write_text("a\n")
    assert (await call(ex, "apply_patch", patch("*** Update File: a.txt\n@@\n-a\n+b\n"))).ok
    assert (await call(ex, "read", {"file_path": "a.txt"})).ok
    changed = await call(ex, "edit", {"file_path": "a.txt", "old_string": "b", "new_string": "c"})
    assert changed.ok, changed.content
    assert fired == ["apply_patch"]  # Claude Code's Edit is no MultiEdit


async def test_updated_input_may_echo_the_edits_but_not_change_them(ws: Path) -> None:
    (ws / "a.txt").write_text("a\n")
    one = patch("*** Update File: a.txt\n@@\n-a\n+b\n")
    shown = {
        "file_path": str(ws / "a.txt"),
        "old_string": "a",
        "new_string": "b",
        "replace_all": False,
        "edits": [edit("a", "b")],
    }

    def replying(update: dict[str, Any]) -> ToolExecutor:
        reply = json.dumps({"hookSpecificOutput": {"updatedInput": update}})
        command = f"cat > /dev/null; printf '%s' {shlex.quote(reply)}"
        group = {"matcher": "MultiEdit", "hooks": [{"type": "command", "command": command}]}
        path = ws / ".claude" / "settings.json"
        path.write_text(json.dumps({"hooks": {"PreToolUse": [group]}}))
        return builtin_executor(ws, hooks=Hooks.load(path, workspace=ws), mode=PermissionMode.YOLO)

    other = patch("*** Update File: a.txt\n@@\n-a\n+c\n")
    result = await call(replying({**other, **shown}), "apply_patch", one)
    assert result.ok, result.content
    assert (ws / "a.txt").read_text() == "c\n"

    (ws / "a.txt").write_text("a\n")
    for key, value in [
        ("new_string", "z"),
        ("old_string", "q"),
        ("replace_all", True),
        ("edits", [edit("a", "z")]),
    ]:
        refused = await call(replying({**one, **shown, key: value}), "apply_patch", one)
        denied(refused, f"updatedInput changes {key}")
        assert (ws / "a.txt").read_text() == "a\n"
