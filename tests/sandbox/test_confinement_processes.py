"""No process a sandboxed call started outlives it (SPEC §22 "One supervisor"): daemons that
bash, a settings file's command hook or an AutoVerify check started (``setsid -f``, a
subshell's ``setsid``, ``nohup``, a double fork with ``setsid``, one ignoring TERM) are gone when
the call ends (exit, timeout, cancel); a fork bomb and a temporary-directory filler are bounded
and named. Processes are found from outside by a marker in their command line (their pids
inside a pid namespace are not the server's)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from fastgate import AutoVerify, CancelToken, ErrorCode, ExecutionContext, Hooks
from fastgate.sandbox import SandboxPolicy
from tests.sandbox.confinement_kit import (
    PYTHON,
    approve_everything,
    bash,
    kill,
    mechanism_fixture,  # noqa: F401  (the fixture "mechanism")
    no_process_outlives_the_test,  # noqa: F401  (autouse)
    output,
    sandboxed,
    unconfined,
    unique,
    until_none,
    with_marker,
)

# The processes and the kernel it exercises are the same under both builds and both loops:
# run once, in the compiled build, on uvloop.
pytestmark = pytest.mark.slow

# Each detaches from the command in its own way; each renames itself to the marker.
DAEMONS = {
    "setsid -f": "setsid -f bash -c 'exec -a {m} sleep 300' > /dev/null 2>&1",
    "( setsid ... & )": "(setsid bash -c 'exec -a {m} sleep 300' > /dev/null 2>&1 &)",
    "(nohup setsid ... &)": "(nohup setsid bash -c 'exec -a {m} sleep 300' > /dev/null 2>&1 &)",
    "double fork and setsid": (
        f"{PYTHON} -c 'import os\nif os.fork(): os._exit(0)\nos.setsid()\n"
        'if os.fork(): os._exit(0)\nos.execv("/bin/sleep", ["{m}", "300"])\' '
        "< /dev/null > /dev/null 2>&1"
    ),
    "ignoring TERM": "setsid -f bash -c \"trap '' TERM; exec -a {m} sleep 300\" > /dev/null 2>&1",
}
ALL_STARTED = 'until [ "$(pgrep -fc "^{m} ")" -ge {n} ]; do sleep 0.01; done'


def daemons(marker: str) -> str:
    started = "\n".join(command.format(m=marker) for command in DAEMONS.values())
    return f"{started}\n{ALL_STARTED.format(m=marker, n=len(DAEMONS))}"


async def until_file(path: Path) -> None:
    """Until ``path`` (a FIFO) has been written to once."""
    reading = asyncio.ensure_future(asyncio.to_thread(path.read_bytes))
    try:
        async with asyncio.timeout(60):
            await asyncio.shield(reading)
    finally:
        if not reading.done():
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            await reading


@pytest.mark.parametrize("how", ["exit", "timeout", "token", "task"])
async def test_no_daemon_outlives_a_sandboxed_call(
    tmp_path: Path, mechanism: str, how: str
) -> None:
    marker = unique("fastgate-daemon")
    os.mkfifo(tmp_path / "ready")
    os.mkfifo(tmp_path / "go")
    ex = sandboxed(tmp_path, cancel_grace=30.0)
    then = "cat go > /dev/null; exit 0" if how == "exit" else "sleep 300"
    command = f"{daemons(marker)}\necho ready > ready\n{then}"
    token = CancelToken()
    context = {"cancel": token} if how == "token" else {}
    running = asyncio.ensure_future(
        bash(ex, command, seconds=3 if how == "timeout" else 60, **context)
    )
    try:
        await until_file(tmp_path / "ready")
        assert len(with_marker(marker)) == len(DAEMONS)  # all running, seen from outside
        if how == "exit":
            (tmp_path / "go").write_text("go\n")
        elif how == "token":
            token.cancel("stop")
        elif how == "task":
            running.cancel()
        try:
            result = await running
        except asyncio.CancelledError:
            assert how == "task"
        else:
            expected = {"exit": None, "timeout": ErrorCode.TIMEOUT, "token": ErrorCode.ABORTED}
            assert (result.error.code if result.error else None) == expected[how], output(result)
        assert with_marker(marker) == []
    finally:
        kill(with_marker(marker))


async def test_a_fork_bomb_is_bounded_and_named(tmp_path: Path, mechanism: str) -> None:
    marker = unique("fastgate-bomb")
    bomb = f"for i in $(seq 200); do bash -c 'exec -a {marker} sleep 60' & done; wait"
    policy = SandboxPolicy(max_processes=32)
    result = await bash(sandboxed(tmp_path, policy), bomb, seconds=60)
    assert not result.ok
    assert "[sandbox] The command was ended: more than 32 processes" in output(result)
    assert await until_none(lambda: with_marker(marker)) == []
    # The control: unbounded, every one of them runs at once (ended by its own timeout).
    counted = f"{bomb.removesuffix('; wait')}; sleep 1; pgrep -fc '^{marker} '"
    control = await bash(unconfined(tmp_path), counted, seconds=30)
    assert control.ok and int(output(control).split()[0]) == 200, output(control)
    assert await until_none(lambda: with_marker(marker)) == []


async def test_a_temporary_directory_filler_is_bounded_and_named(
    tmp_path: Path, mechanism: str
) -> None:
    policy = SandboxPolicy(max_tmp_bytes=8 << 20)
    filler = 'head -c 64M /dev/zero > "$TMPDIR/fill"; sleep 5; ls -la "$TMPDIR"'
    result = await bash(sandboxed(tmp_path, policy), filler, seconds=60)
    assert not result.ok
    assert "[sandbox] The command was ended: its temporary directory is full" in output(result)
    # The same bound leaves room for what fits, and the directory is the call's own.
    fits = 'head -c 1M /dev/zero > "$TMPDIR/f" && ls "$TMPDIR"'
    assert (await bash(sandboxed(tmp_path, policy), fits)).ok
    fresh = 'test ! -e "$TMPDIR/f" && test ! -e "$TMPDIR/fill"'
    assert (await bash(sandboxed(tmp_path, policy), fresh)).ok  # nothing of the calls before


async def test_a_temporary_directory_filled_with_empty_files_is_bounded(
    tmp_path: Path, mechanism: str
) -> None:
    # 8 MiB allow 2,048 entries: empty files take no blocks, but each takes an inode.
    policy = SandboxPolicy(max_tmp_bytes=8 << 20)
    filler = 'cd "$TMPDIR" && for i in $(seq 6000); do : > "f$i"; done; sleep 5'
    result = await bash(sandboxed(tmp_path, policy), filler, seconds=60)
    assert not result.ok
    assert "[sandbox] The command was ended: its temporary directory is full" in output(result)


# Commands that fill the temporary directory and give up at once, before the supervisor's next
# look: the bound is named all the same. They write just past the bound (8 MiB): under a private
# tmpfs the write fails there; without one (Landlock only) the supervisor reads the tree every
# 100 ms, and a command that wrote far more would still be writing at its next look.
GIVING_UP = {
    "head fails": 'head -c 9M /dev/zero > "$TMPDIR/fill"',
    "dd, then true": 'dd if=/dev/zero of="$TMPDIR/fill" bs=1M count=9 2>/dev/null; true',
    "python swallows the error": (
        f"{PYTHON} -c \"import os\ntry:\n  open(os.environ['TMPDIR'] + '/fill', 'wb')"
        '.write(bytes(9 << 20))\nexcept OSError: pass"'
    ),
}


@pytest.mark.parametrize("case", list(GIVING_UP))
async def test_a_filler_that_gives_up_at_once_is_named(
    tmp_path: Path, mechanism: str, case: str
) -> None:
    policy = SandboxPolicy(max_tmp_bytes=8 << 20)
    result = await bash(sandboxed(tmp_path, policy), f"{GIVING_UP[case]}; echo after", seconds=60)
    # It went on and ended as it chose: the bound is named, and not as what ended it.
    assert result.ok and "after" in output(result), output(result)
    assert "[sandbox] The command reached a bound: its temporary directory is full" in output(
        result
    )


def hook_settings(ws: Path, command: str) -> Path:
    path = ws / ".claude" / "settings.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    hooks = {
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": command}]}]
    }
    path.write_text(json.dumps({"hooks": hooks}))
    return path


async def test_a_settings_files_hook_runs_sandboxed_and_its_daemons_end(tmp_path: Path) -> None:
    marker = unique("fastgate-hook-daemon")
    ws = tmp_path / "ws"
    ws.mkdir()
    outside = tmp_path / "outside"
    hook = (
        f"{DAEMONS['setsid -f'].format(m=marker)}; {ALL_STARTED.format(m=marker, n=1)}; "
        f"echo started > started; echo x > {outside}; exit 0"
    )
    hooks = Hooks.load(hook_settings(ws, hook))
    result = await bash(sandboxed(ws, hooks=hooks), "echo ran")
    assert result.ok, output(result)
    assert (ws / "started").exists()  # the hook ran, and started its daemon
    assert not outside.exists()  # confined: no write outside the workspace
    assert await until_none(lambda: with_marker(marker)) == []


async def test_an_autoverify_checks_daemons_end_with_the_call(tmp_path: Path) -> None:
    marker = unique("fastgate-check-daemon")
    (tmp_path / "pyproject.toml").write_text('[tool.fastgate]\nverify = ["bash", "check.sh"]\n')
    (tmp_path / "check.sh").write_text(
        f"{DAEMONS['double fork and setsid'].format(m=marker)}\n"
        f"{ALL_STARTED.format(m=marker, n=1)}\necho started > started\n"
        "echo 'src/a.py:1: checked'\nexit 1\n"
    )
    ex = sandboxed(tmp_path, auto_verify=AutoVerify(timeout=30))
    args: Any = {"file_path": "src/a.py", "content": "x = 1\n"}
    ctx = ExecutionContext(session_id="s1", trusted=True, approver=approve_everything)
    result = await ex.execute("write", args, ctx)
    assert result.ok and "src/a.py:1: checked" in output(result), output(result)
    assert (tmp_path / "started").exists()
    assert await until_none(lambda: with_marker(marker)) == []
