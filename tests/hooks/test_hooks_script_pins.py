"""What a settings hook runs is pinned before the model can act: in the workspace the server
loads the settings for (a user's hook in a workspace with no settings of its own too), for a
script that does not exist yet (it must not appear later), and however the command spells the
project directory."""

from __future__ import annotations

import argparse
import json
import shlex
import stat
from pathlib import Path
from typing import Any

import pytest

from fastgate import ErrorCode, PermissionMode, ToolExecutor, ToolResult
from fastgate.cli import call as call_command
from fastgate.cli import serve as serve_command
from fastgate.hooks import Hooks
from tests.builtin_kit import builtin_executor, call
from tests.pipeline_kit import assert_idle

SCRIPT = "scripts/check.sh"
# The hook's own check: it leaves a mark of the version that ran, and lets the call through.
ORIGINAL = '#!/bin/sh\ncat > /dev/null\necho original >> "$CLAUDE_PROJECT_DIR/ran"\n'
# What a model allowed to run commands writes in its place.
REWRITTEN = '#!/bin/sh\ncat > /dev/null\necho rewritten >> "$CLAUDE_PROJECT_DIR/ran"\n'


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path.resolve() / "project"
    (root / "scripts").mkdir(parents=True)
    return root


def write_script(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def settings_file(path: Path, command: str, matcher: str = "Write") -> Path:
    hook = {"type": "command", "command": command, "timeout": 30}
    hooks = {"PreToolUse": [{"matcher": matcher, "hooks": [hook]}]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"hooks": hooks}))
    return path


def yolo(ws: Path, hooks: Hooks) -> ToolExecutor:
    return builtin_executor(ws, hooks=hooks, mode=PermissionMode.YOLO)


async def model_writes_script(ex: ToolExecutor, relative: str, body: str) -> None:
    """The model's own call (the hook matches Write only, so it does not run for it)."""
    path, folder = shlex.quote(relative), shlex.quote(relative.rpartition("/")[0])
    command = f"mkdir -p {folder} && printf %s {shlex.quote(body)} > {path} && chmod +x {path}"
    done = await call(ex, "bash", {"command": command})
    assert done.ok, done.content


async def write_call(ex: ToolExecutor) -> ToolResult:
    return await call(ex, "write", {"file_path": "x.txt", "content": "x"})


def refused(result: ToolResult, why: str) -> None:
    assert result.error is not None, "the hook ran the model's script"
    assert result.error.code is ErrorCode.PERMISSION_DENIED, result.error
    assert why in result.error.message, result.error.message


# -- a user's hook in a workspace with no settings of its own ---------------------------------


def user_settings(home: Path) -> Path:
    return settings_file(home / ".claude" / "settings.json", f'sh "$CLAUDE_PROJECT_DIR"/{SCRIPT}')


async def test_a_user_hook_is_pinned_at_load_in_the_workspace_it_is_loaded_for(
    ws: Path, tmp_path: Path
) -> None:
    write_script(ws / SCRIPT, ORIGINAL)
    ex = yolo(ws, Hooks.load(user_settings(tmp_path / "home"), workspace=ws))
    await model_writes_script(ex, SCRIPT, REWRITTEN)
    refused(await write_call(ex), "changed since the hook was loaded")
    assert not (ws / "ran").exists() and not (ws / "x.txt").exists()
    assert_idle(ex)


def call_setup(ws: Path) -> Any:
    parser = argparse.ArgumentParser()
    call_command.add_arguments(parser)
    return call_command._Setup(parser.parse_args(["write", "{}", "--workspace", str(ws)]))


def serve_setup(ws: Path) -> Any:
    parser = argparse.ArgumentParser()
    serve_command.add_arguments(parser)
    return serve_command._Setup(parser.parse_args(["--workspace", str(ws)]))


@pytest.mark.parametrize("setup", [call_setup, serve_setup], ids=["call", "serve"])
async def test_the_command_line_pins_a_user_hook_in_its_workspace_at_load(
    ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, setup: Any
) -> None:
    home = tmp_path / "home"
    user_settings(home)
    monkeypatch.setenv("HOME", str(home))
    write_script(ws / SCRIPT, ORIGINAL)
    loaded = setup(ws)
    assert loaded.settings_files[0] == str(home / ".claude" / "settings.json")
    assert not (ws / ".claude").exists()  # the workspace has no settings of its own
    ex = yolo(ws, loaded.hooks)
    await model_writes_script(ex, SCRIPT, REWRITTEN)
    refused(await write_call(ex), "changed since the hook was loaded")
    assert not (ws / "ran").exists()
    assert_idle(ex)


# -- a script that does not exist when the hook is loaded -------------------------------------


@pytest.mark.parametrize(
    ("command", "created"),
    [
        (f'"$CLAUDE_PROJECT_DIR"/{SCRIPT}', SCRIPT),
        (f"./{SCRIPT}", SCRIPT),
        (f"sh {SCRIPT}", SCRIPT),
        ("cd scripts && bash check.sh", SCRIPT),
        (f"env CHECK=1 timeout 20 sh ./{SCRIPT} --quiet", SCRIPT),
        ('python3 -u "$CLAUDE_PROJECT_DIR"/tools/guard.py', "tools/guard.py"),
    ],
)
async def test_a_script_missing_at_load_is_refused_when_it_appears(
    ws: Path, command: str, created: str
) -> None:
    settings = settings_file(ws / ".claude" / "settings.json", command)
    ex = yolo(ws, Hooks.load(settings))
    body = (
        "import os\nwith open(os.environ['CLAUDE_PROJECT_DIR'] + '/ran', 'a') as f:\n"
        "    f.write('created')\n"
        if created.endswith(".py")
        else REWRITTEN
    )
    await model_writes_script(ex, created, body)
    refused(await write_call(ex), "did not exist when the hook was loaded and exists now")
    assert not (ws / "ran").exists() and not (ws / "x.txt").exists()
    # Loading the settings again is the way to accept the new script.
    reloaded = yolo(ws, Hooks.load(settings))
    assert (await write_call(reloaded)).ok
    assert (ws / "ran").exists()
    assert_idle(ex)
    assert_idle(reloaded)


@pytest.mark.parametrize(
    "command",
    [
        f'"$CLAUDE_PROJECT_DIR"/{SCRIPT} "$CLAUDE_PROJECT_DIR"/hooks.log',
        f"./{SCRIPT} >> hooks.log",
        f'sh {SCRIPT} | tee -a "$CLAUDE_PROJECT_DIR"/logs/hooks.log',
    ],
)
async def test_a_file_the_hook_creates_itself_does_not_stop_it(ws: Path, command: str) -> None:
    # The log the hook writes (named as its argument, or by a redirection) is not a script:
    # its appearing after the first run is no reason to refuse the second.
    (ws / "logs").mkdir()
    write_script(ws / SCRIPT, '#!/bin/sh\n[ -n "$1" ] && echo called >> "$1"\necho checked\n')
    ex = yolo(ws, Hooks.load(settings_file(ws / ".claude" / "settings.json", command, "*")))
    for _ in range(2):
        result = await call(ex, "bash", {"command": "true"})
        assert result.ok, result.content
    assert_idle(ex)


@pytest.mark.parametrize(
    "writes",
    [
        '>> "$CLAUDE_PROJECT_DIR"/hooks.log',
        "2>> hooks.log",
        '>> "$CLAUDE_PROJECT_DIR/hooks.log" 2>&1',
        ">>hooks.log 2>&1",
        "> hooks.log",
        '| tee -a "$CLAUDE_PROJECT_DIR"/hooks.log',
    ],
)
async def test_a_log_the_hook_appends_to_does_not_stop_it(ws: Path, writes: str) -> None:
    # A log that exists when the settings are loaded (a server that ran before) changes at
    # every run: it is written, not run, and a long-running server must keep running the hook.
    (ws / "hooks.log").write_text("earlier runs\n")
    write_script(ws / SCRIPT, "#!/bin/sh\ncat > /dev/null\necho checked\necho noted >&2\n")
    command = f'"$CLAUDE_PROJECT_DIR"/{SCRIPT} {writes}'
    ex = yolo(ws, Hooks.load(settings_file(ws / ".claude" / "settings.json", command, "Write")))
    for _ in range(3):
        result = await write_call(ex)
        assert result.ok, result.content
    assert (ws / "hooks.log").read_text() != "earlier runs\n"  # the hook wrote it each time
    # The script it runs is still pinned: the model's rewrite is refused.
    await model_writes_script(ex, SCRIPT, REWRITTEN)
    refused(await write_call(ex), "changed since the hook was loaded")
    assert_idle(ex)


# The hook's own script appends to the file named last on its command line.
APPENDS_TO_LAST = '#!/bin/sh\ncat > /dev/null\nfor last; do :; done\necho call >> "$last"\n'


@pytest.mark.parametrize(
    "names",
    [
        '"$CLAUDE_PROJECT_DIR"/calls.log',
        "--log calls.log",
        "-o ./calls.log",
        '--quiet "${CLAUDE_PROJECT_DIR}/calls.log"',
    ],
)
async def test_a_file_the_hook_writes_through_an_argument_does_not_stop_it(
    ws: Path, names: str
) -> None:
    # The file exists at load (pinned: the command names it) and the hook's own code appends to
    # it at every run: the hook keeps running, and a change made between runs still stops it.
    (ws / "calls.log").write_text("earlier runs\n")
    write_script(ws / SCRIPT, APPENDS_TO_LAST)
    command = f'"$CLAUDE_PROJECT_DIR"/{SCRIPT} {names}'
    ex = yolo(ws, Hooks.load(settings_file(ws / ".claude" / "settings.json", command, "Write")))
    for _ in range(3):
        result = await write_call(ex)
        assert result.ok, result.content
    assert (ws / "calls.log").read_text() == "earlier runs\n" + "call\n" * 3
    await model_writes_script(ex, "./calls.log", "the model's line\n")
    refused(await write_call(ex), "calls.log, which the hook's command names, changed since it")
    assert_idle(ex)


async def test_the_script_a_hook_runs_stays_pinned_whatever_its_run_does_to_it(ws: Path) -> None:
    # A script that rewrites itself as it runs: its first run is its last.
    body = '#!/bin/sh\ncat > /dev/null\necho "# ran" >> "$0"\n'
    write_script(ws / SCRIPT, body)
    command = f'"$CLAUDE_PROJECT_DIR"/{SCRIPT}'
    ex = yolo(ws, Hooks.load(settings_file(ws / ".claude" / "settings.json", command, "Write")))
    first = await write_call(ex)
    assert first.ok, first.content
    refused(await write_call(ex), "changed since the hook was loaded")
    assert_idle(ex)


# -- every spelling of the project directory --------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        f'"$CLAUDE_PROJECT_DIR"/{SCRIPT}',
        f"${{CLAUDE_PROJECT_DIR}}/{SCRIPT}",
        f'"${{CLAUDE_PROJECT_DIR}}/{SCRIPT}"',
        f"${{CLAUDE_PROJECT_DIR:-.}}/{SCRIPT}",
        f'sh "${{CLAUDE_PROJECT_DIR:-$PWD}}"/{SCRIPT}',
        f'bash "${{CLAUDE_PROJECT_DIR-.}}/{SCRIPT}" --quiet',
        f'"${{CLAUDE_PROJECT_DIR:?no project}}"/{SCRIPT}',
        f"sh -c '\"$CLAUDE_PROJECT_DIR\"/{SCRIPT}'",
    ],
)
async def test_a_script_is_pinned_however_the_project_directory_is_spelled(
    ws: Path, command: str
) -> None:
    write_script(ws / SCRIPT, ORIGINAL)
    ex = yolo(ws, Hooks.load(settings_file(ws / ".claude" / "settings.json", command, "*")))
    first = await call(ex, "bash", {"command": "true"})
    assert first.ok, first.content
    write_script(ws / SCRIPT, REWRITTEN)
    refused(await call(ex, "bash", {"command": "true"}), "changed since the hook was loaded")
    assert (ws / "ran").read_text() == "original\n"
    assert_idle(ex)


@pytest.mark.parametrize(
    "command",
    [
        f"'$CLAUDE_PROJECT_DIR'/{SCRIPT}",
        f"'${{CLAUDE_PROJECT_DIR}}'/{SCRIPT}",
        f"sh '$CLAUDE_PROJECT_DIR/{SCRIPT}'",
        f"bash \\$CLAUDE_PROJECT_DIR/{SCRIPT}",
    ],
)
async def test_a_project_directory_the_shell_does_not_expand_is_pinned_as_written(
    ws: Path, command: str
) -> None:
    # Quoted so, the variable is text: the shell runs a path under the workspace named as
    # written (the hook fails while it is missing). A model creating it must not get it run.
    write_script(ws / SCRIPT, ORIGINAL)
    ex = yolo(ws, Hooks.load(settings_file(ws / ".claude" / "settings.json", command)))
    literal = "$CLAUDE_PROJECT_DIR" if "{" not in command else "${CLAUDE_PROJECT_DIR}"
    await model_writes_script(ex, f"{literal}/{SCRIPT}", REWRITTEN)
    assert (ws / literal / SCRIPT).is_file()
    refused(await write_call(ex), "did not exist when the hook was loaded and exists now")
    assert not (ws / "ran").exists() and not (ws / "x.txt").exists()
    assert_idle(ex)
