"""A Claude Code hook's ``updatedInput`` is the new input, whole, as in Claude Code: a field it
leaves out is gone. What is left is validated, checked and judged like any rewrite."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from fastgate import ErrorCode, PermissionMode, ToolExecutor, define_tool, schema
from fastgate.hooks import Hooks
from tests.builtin_kit import builtin_executor, call
from tests.pipeline_kit import assert_idle


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path.resolve() / "project"
    (root / ".claude").mkdir(parents=True)
    return root


def replying(ws: Path, matcher: str, updated_input: dict[str, Any]) -> ToolExecutor:
    """An executor whose one PreToolUse hook (from the project's settings file) answers
    ``updatedInput``."""
    reply = {"hookSpecificOutput": {"hookEventName": "PreToolUse", "updatedInput": updated_input}}
    command = f"cat > /dev/null; printf '%s' {shlex.quote(json.dumps(reply))}"
    hook = {"type": "command", "command": command}
    path = ws / ".claude" / "settings.json"
    path.write_text(json.dumps({"hooks": {"PreToolUse": [{"matcher": matcher, "hooks": [hook]}]}}))
    return builtin_executor(ws, hooks=Hooks.load(path), mode=PermissionMode.YOLO)


NOTE_ARGS = schema.Object(
    {"text": schema.String(), "tag": schema.String(), "pinned": schema.Boolean()},
    required=("text",),
)


def note_tool() -> Any:
    """A tool that answers with the arguments it was given."""

    async def execute(args: Any, ctx: Any) -> Any:
        return json.dumps(dict(args), sort_keys=True)

    return define_tool("mcp__notes__save", "Save a note.", NOTE_ARGS, execute)


async def test_updated_input_replaces_the_arguments_fields_left_out_are_gone(ws: Path) -> None:
    ex = replying(ws, "mcp__notes__save", {"text": "from the hook"})
    ex.registry.register(note_tool())
    result = await call(ex, "mcp__notes__save", {"text": "model", "tag": "secret", "pinned": True})
    assert result.ok, result.content
    assert json.loads(result.content) == {"text": "from the hook"}
    assert_idle(ex)


async def test_updated_input_sent_whole_is_run_as_sent(ws: Path) -> None:
    ex = replying(ws, "Write", {"file_path": "b.txt", "content": "from the hook"})
    result = await call(ex, "write", {"file_path": "a.txt", "content": "model"})
    assert result.ok, result.content
    assert (ws / "b.txt").read_text() == "from the hook"
    assert not (ws / "a.txt").exists()
    assert_idle(ex)


async def test_updated_input_that_lacks_a_required_field_is_refused(ws: Path) -> None:
    # Claude Code's own tool would fail on it too; fastgate refuses it before anything runs,
    # naming the field, as for arguments the model sent.
    ex = replying(ws, "Write", {"content": "from the hook"})
    result = await call(ex, "write", {"file_path": "a.txt", "content": "model"})
    assert result.error is not None and result.error.code is ErrorCode.INVALID_ARGS
    assert "file_path" in result.error.message
    assert "file_path" in json.dumps(result.error.details)
    assert not (ws / "a.txt").exists()
    assert_idle(ex)


async def test_updated_input_of_a_whole_patch_may_name_the_file_it_was_shown(ws: Path) -> None:
    # A patch is shown to Edit hooks with its file as file_path; the hook may send that field
    # back (it is dropped: apply_patch takes none), but may not change it.
    other = "*** Begin Patch\n*** Add File: d.txt\n+d\n*** End Patch\n"
    one = {"patch": "*** Begin Patch\n*** Add File: e.txt\n+e\n*** End Patch\n"}
    same = replying(ws, "Edit", {"patch": other, "file_path": str(ws / "e.txt")})
    rewritten = await call(same, "apply_patch", one)
    assert rewritten.ok, rewritten.content
    assert (ws / "d.txt").exists() and not (ws / "e.txt").exists()
    moved = replying(ws, "Edit", {"patch": other, "file_path": str(ws / "f.txt")})
    refused = await call(moved, "apply_patch", one)
    assert refused.error is not None and refused.error.code is ErrorCode.PERMISSION_DENIED
    assert "updatedInput changes file_path" in refused.error.message
    assert_idle(same)
    assert_idle(moved)
