"""A settings hook runs workspace content, so it is a channel for the model: it gets the
server's environment without secrets, and it runs only while the files its command names are
what they were when the hook was loaded (a model allowed to edit files must not rewrite what the
next hook runs)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from fastgate import ErrorCode, PermissionMode
from fastgate.hooks import Hooks
from tests.builtin_kit import builtin_executor, call
from tests.pipeline_kit import assert_idle


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path.resolve() / "project"
    (root / ".claude").mkdir(parents=True)
    (root / "scripts").mkdir()
    return root


def _settings(ws: Path, command: str) -> Path:
    path = ws / ".claude" / "settings.json"
    hook = {"type": "command", "command": command, "timeout": 30}
    path.write_text(json.dumps({"hooks": {"PreToolUse": [{"matcher": "*", "hooks": [hook]}]}}))
    return path


def _script(ws: Path, body: str) -> None:
    path = ws / "scripts" / "check.sh"
    path.write_text("#!/bin/sh\ncat > /dev/null\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.mark.parametrize(
    "command",
    [
        'sh "$CLAUDE_PROJECT_DIR"/scripts/check.sh',
        "sh ${CLAUDE_PROJECT_DIR}/scripts/check.sh",
        "./scripts/check.sh",
        '"$CLAUDE_PROJECT_DIR/scripts/check.sh" --quiet',
        "cd scripts && sh check.sh",
        "bash -c 'sh scripts/check.sh'",
    ],
)
async def test_a_hook_whose_script_was_rewritten_does_not_run(ws: Path, command: str) -> None:
    _script(ws, 'echo original >> "$CLAUDE_PROJECT_DIR/ran"\n')
    ex = builtin_executor(ws, hooks=Hooks.load(_settings(ws, command)), mode=PermissionMode.YOLO)
    first = await call(ex, "bash", {"command": "true"})
    assert first.ok, first.error
    assert (ws / "ran").read_text() == "original\n"
    # what a model allowed to write files (or a sandboxed command) could do to the script
    _script(ws, 'echo rewritten >> "$CLAUDE_PROJECT_DIR/ran"\n')
    second = await call(ex, "bash", {"command": "true"})
    assert second.error is not None and second.error.code is ErrorCode.PERMISSION_DENIED
    assert "scripts/check.sh" in second.error.message
    assert "changed since the hook was loaded" in second.error.message
    assert (ws / "ran").read_text() == "original\n"  # the new version never ran
    (ws / "scripts" / "check.sh").unlink()
    third = await call(ex, "bash", {"command": "true"})
    assert third.error is not None and "it is gone" in third.error.message
    assert_idle(ex)


async def test_a_settings_hook_gets_the_environment_without_secrets(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secrets = {
        "OPENAI_API_KEY": "sk-server-1",
        "GITHUB_TOKEN": "ghp-server-2",
        "AWS_SECRET_ACCESS_KEY": "aws-server-3",
        "DB_PASSWORD": "pw-server-4",
    }
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("FASTGATE_HARMLESS_SETTING", "kept")
    _script(ws, 'env > "$CLAUDE_PROJECT_DIR/env.txt"\n')
    hooks = Hooks.load(_settings(ws, 'sh "$CLAUDE_PROJECT_DIR"/scripts/check.sh'))
    ex = builtin_executor(ws, hooks=hooks, mode=PermissionMode.YOLO)
    assert (await call(ex, "bash", {"command": "true"})).ok
    seen = (ws / "env.txt").read_text()
    for value in secrets.values():
        assert value not in seen
    assert "FASTGATE_HARMLESS_SETTING=kept" in seen
    assert f"CLAUDE_PROJECT_DIR={ws}" in seen
    assert_idle(ex)


def _named(tmp_path: Path, name: str) -> Path:
    return tmp_path.resolve() / name


def _backslashed(tmp_path: Path) -> Path:
    return tmp_path.resolve() / "back\\slash"


async def test_a_workspace_path_with_a_backslash_is_pinned_as_written(tmp_path: Path) -> None:
    ws = _backslashed(tmp_path)
    (ws / ".claude").mkdir(parents=True)
    (ws / "scripts").mkdir()
    _script(ws, 'echo original >> "$CLAUDE_PROJECT_DIR/ran"\n')
    # unquoted: the shell text of the root must keep its backslash
    hooks = Hooks.load(_settings(ws, "sh $CLAUDE_PROJECT_DIR/scripts/check.sh"))
    ex = builtin_executor(ws, hooks=hooks, mode=PermissionMode.YOLO)
    assert (await call(ex, "bash", {"command": "true"})).ok
    _script(ws, 'echo rewritten >> "$CLAUDE_PROJECT_DIR/ran"\n')
    refused = await call(ex, "bash", {"command": "true"})
    assert (
        refused.error is not None and "changed since the hook was loaded" in refused.error.message
    )
    assert (ws / "ran").read_text() == "original\n"
    assert_idle(ex)


@pytest.mark.parametrize(
    ("name", "command"),
    [
        ('dq"uote', 'sh "$CLAUDE_PROJECT_DIR"/scripts/check.sh'),
        ('dq"uote', "sh $CLAUDE_PROJECT_DIR/scripts/check.sh"),
        ("do$llar", '"${CLAUDE_PROJECT_DIR}/scripts/check.sh"'),
        ("back`tick", 'sh "$CLAUDE_PROJECT_DIR"/scripts/check.sh'),
        ("sq'uote", "sh $CLAUDE_PROJECT_DIR/scripts/check.sh"),
        ("semi;colon", "sh $CLAUDE_PROJECT_DIR/scripts/check.sh"),
        ("br{a,b}", "sh ${CLAUDE_PROJECT_DIR}/scripts/check.sh"),
    ],
)
async def test_a_workspace_path_with_shell_characters_is_pinned(
    tmp_path: Path, name: str, command: str
) -> None:
    # The root is a value the shell expands, never shell text: a quote, "$", a backtick or ";"
    # in its name must not hide the script from the pins.
    ws = _named(tmp_path, name)
    (ws / ".claude").mkdir(parents=True)
    (ws / "scripts").mkdir()
    _script(ws, 'echo original >> "$CLAUDE_PROJECT_DIR/ran"\n')
    ex = builtin_executor(ws, hooks=Hooks.load(_settings(ws, command)), mode=PermissionMode.YOLO)
    first = await call(ex, "bash", {"command": "true"})
    assert first.ok, first.error
    _script(ws, 'echo rewritten >> "$CLAUDE_PROJECT_DIR/ran"\n')
    refused = await call(ex, "bash", {"command": "true"})
    assert refused.error is not None, "the rewritten script ran"
    assert "changed since the hook was loaded" in refused.error.message
    assert (ws / "ran").read_text() == "original\n"
    assert_idle(ex)


def _spelled(ws: Path, spelling: str) -> str:
    if spelling == "symlink":
        link = ws.parent / "link"
        link.symlink_to(ws)
        return str(link)
    return {"trailing slash": f"{ws}/", "dot": f"{ws.parent}/./{ws.name}"}.get(spelling, str(ws))


@pytest.mark.parametrize(
    ("spelling", "user_level"),
    [
        ("trailing slash", False),
        ("dot", False),
        ("symlink", False),
        ("as is", True),
        ("trailing slash", True),
    ],
)
async def test_a_script_is_pinned_at_load_before_the_model_can_touch_it(
    ws: Path, spelling: str, user_level: bool
) -> None:
    # The hook matches Write only; the model's first call (bash) rewrites the script before
    # the hook ever runs. The pin taken at load must be the one checked, however the call
    # spells its workspace, and for a user's hook naming the project's script too.
    _script(ws, 'echo original >> "$CLAUDE_PROJECT_DIR/ran"\n')
    hook = {"type": "command", "command": 'sh "$CLAUDE_PROJECT_DIR"/scripts/check.sh'}
    hooks = {"hooks": {"PreToolUse": [{"matcher": "Write", "hooks": [hook]}]}}
    files = [ws / ".claude" / "settings.json"]
    if user_level:
        user = _named(ws.parent, "home") / ".claude" / "settings.json"
        user.parent.mkdir(parents=True)
        files.insert(0, user)
        files[1].write_text(json.dumps({"permissions": {"allow": []}}))
    files[0].write_text(json.dumps(hooks))
    ex = builtin_executor(ws, hooks=Hooks.load(*files), mode=PermissionMode.YOLO)
    root = _spelled(ws, spelling)
    rewrite = (
        "printf '#!/bin/sh\\ncat > /dev/null\\necho rewritten >> \"$CLAUDE_PROJECT_DIR/ran\"\\n'"
        " > scripts/check.sh"
    )
    assert (await call(ex, "bash", {"command": rewrite}, workspace_root=root)).ok
    refused = await call(ex, "write", {"file_path": "x.txt", "content": "x"}, workspace_root=root)
    assert refused.error is not None, "the rewritten script ran"
    assert "changed since the hook was loaded" in refused.error.message
    assert not (ws / "ran").exists() and not (ws / "x.txt").exists()
    assert_idle(ex)
