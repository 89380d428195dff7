"""``LocalShell`` leaves no survivors (SPEC §16 "Shell", §22 "One supervisor"): whatever a
command started is gone when the call ends — exited, timed out, or cancelled by token or by
task — daemons that detached included, and the test looks every pid up afterwards. Its
parent (the launcher) shows none of the server's secrets. The executors here pass
``LocalShell()`` explicitly (the built-ins' default is the sandbox, whose pid namespace would
hide the pids the commands record; tests/sandbox/ covers it)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from fastgate import CancelToken, ErrorCode, ExecutionContext, PermissionMode
from fastgate.builtin import LocalShell
from fastgate.processes import _spawn, supervision
from tests.builtin_kit import builtin_executor, gone
from tests.processes_kit import (
    DAEMONS,
    alive,
    compiled_launcher_fixture,  # noqa: F401  (the fixture "compiled_launcher")
    daemon_script,
    kill_all,
    launcher_fixture,  # noqa: F401  (the fixture "launcher")
    until_dead,
)

# The processes and the kernel it exercises are the same under both builds and both loops:
# run once, in the compiled build, on uvloop.
pytestmark = pytest.mark.slow

# Each case starts processes that record their pids (one line each) in ./pids; the number is
# how many lines to wait for.
CASES: dict[str, tuple[str, int]] = {
    "background child": ("sleep 300 & echo $! >> pids", 1),
    "nohup child": ("nohup sleep 300 > /dev/null 2>&1 & echo $! >> pids", 1),
    "setsid grandchild": (
        "(setsid bash -c 'echo $$ >> pids; exec sleep 300' > /dev/null 2>&1 &)",
        1,
    ),
    "child holding the pipe": ("setsid bash -c 'echo $$ >> pids; exec sleep 300' &", 1),
    "child ignoring TERM": ("(trap '' TERM; echo $BASHPID >> pids; exec sleep 300) &", 1),
    "pipe holder without a variable": (
        "(setsid env -i bash -c 'echo $$ >> pids; exec sleep 300' &)",
        1,
    ),
}
# Wait for the pids, then (when announcing) say so through ./ready, and exit or keep running.
WAIT = 'until [ "$(cat pids 2>/dev/null | wc -l)" -ge {n} ]; do sleep 0.01; done'


def command_for(case: str, then: str, announce: bool = False) -> str:
    """The case's processes, then ``then``; with ``announce``, the command also says it is
    ready through the FIFO ./ready (see ``until_ready``) before going on."""
    setup, n = CASES[case]
    ready = "echo ready > ready\n" if announce else ""
    return f"{setup}\n{WAIT.format(n=n)}\necho $$ >> pids\n{ready}{then}"


def local_executor(workspace: Path, **options: Any) -> Any:
    return builtin_executor(workspace, mode=PermissionMode.YOLO, shell=LocalShell(), **options)


def recorded(workspace: Path) -> list[int]:
    return [int(line) for line in (workspace / "pids").read_text().split()]


def in_workspace(workspace: Path) -> list[psutil.Process]:
    """Live processes whose working directory is the workspace (every command starts there)."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.cwd() == str(workspace) and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except psutil.Error:
            continue
    return found


def kill_leftovers(workspace: Path) -> None:
    for process in in_workspace(workspace):
        try:
            process.kill()
        except psutil.Error:
            pass


async def until_ready(workspace: Path) -> None:
    """Wait until the command wrote to the FIFO ./ready (made by ``announcing``): the read
    returns when it does. Bounded: a command that never writes fails the test, and the
    reading thread is then let go by a writer of our own."""
    fifo = workspace / "ready"
    reading = asyncio.ensure_future(asyncio.to_thread(fifo.read_bytes))
    try:
        async with asyncio.timeout(60):
            await asyncio.shield(reading)
    finally:
        if not reading.done():
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            await reading


def announcing(workspace: Path) -> Path:
    os.mkfifo(workspace / "ready")
    return workspace


@pytest.fixture
def workspace(tmp_path: Path) -> Any:
    yield tmp_path
    kill_leftovers(tmp_path)  # only ever needed when a test has already failed


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("how", ["exit", "timeout", "token", "task"])
async def test_nothing_the_command_started_survives(workspace: Path, case: str, how: str) -> None:
    await ends_everything(workspace, case, how)


@pytest.mark.parametrize("case", list(DAEMONS))
@pytest.mark.parametrize("how", ["exit", "timeout", "token", "task"])
async def test_no_daemon_outlives_the_call(
    workspace: Path, case: str, how: str, launcher: list[str]
) -> None:
    # Each daemon leaves the command's session, drops every variable and lets go of the
    # output pipe: nothing but its ancestry ties it to the call.
    await stopped_by(workspace, how, lambda then, announce: daemon_script(case, then, announce))
    pids = recorded(workspace)
    try:
        assert len(pids) == 2
        assert [pid for pid in pids if alive(pid)] == []
    finally:
        kill_all(pids)


async def ends_everything(workspace: Path, case: str, how: str) -> None:
    await stopped_by(workspace, how, lambda then, announce: command_for(case, then, announce))
    pids = recorded(workspace)
    assert len(pids) == CASES[case][1] + 1
    assert [pid for pid in pids if not gone(pid)] == []
    assert in_workspace(workspace) == []


async def stopped_by(workspace: Path, how: str, command: Callable[[str, bool], str]) -> None:
    """Run ``command(then, announce)`` through ``bash`` in ``workspace`` and let the call end
    ``how``: the command exits (``exit``), its timeout passes, its token is cancelled, or its
    task is (for the last two, once the command announced itself through ./ready)."""
    ex = local_executor(workspace, cancel_grace=30.0)
    announcing(workspace)
    if how == "exit":
        result = await ex.execute("bash", {"command": command("exit 0", False)})
        assert result.ok, result.content
    elif how == "timeout":
        args = {"command": command("sleep 300", False), "timeout": 1}
        result = await ex.execute("bash", args)
        assert result.error is not None and result.error.code == ErrorCode.TIMEOUT, result
    elif how == "token":
        token = CancelToken()
        running = asyncio.ensure_future(
            ex.execute(
                "bash", {"command": command("sleep 300", True)}, ExecutionContext(cancel=token)
            )
        )
        await until_ready(workspace)
        token.cancel("stop")
        result = await running
        assert result.error is not None and result.error.code == ErrorCode.ABORTED, result
    else:
        running = asyncio.ensure_future(ex.execute("bash", {"command": command("sleep 300", True)}))
        await until_ready(workspace)
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running


@pytest.mark.parametrize("case", ["background child", "nohup child", "child ignoring TERM"])
@pytest.mark.parametrize("how", ["exit", "token"])
async def test_without_a_launcher_the_process_group_is_ended(
    workspace: Path, case: str, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Where there are no subreapers (not Linux) the command's group is what is ended.
    monkeypatch.setattr(_spawn, "launcher_command", lambda: None)
    await stopped_by(workspace, how, lambda then, announce: command_for(case, then, announce))
    await until_dead(recorded(workspace))  # signalled, but not ours to reap


async def test_a_command_that_closed_its_output_and_runs_on_times_out(workspace: Path) -> None:
    ex = local_executor(workspace)
    command = "echo before; exec >&- 2>&-; echo $$ > pids; sleep 300"
    result = await ex.execute("bash", {"command": command, "timeout": 2})
    assert result.error is not None and result.error.code == ErrorCode.TIMEOUT
    assert result.content.startswith("before\n")
    assert all(gone(pid) for pid in recorded(workspace))


async def test_a_fork_loop_is_ended_whole(workspace: Path) -> None:
    ex = local_executor(workspace)
    command = "while :; do sleep 300 & done"
    result = await ex.execute("bash", {"command": command, "timeout": 1})
    assert result.error is not None and result.error.code == ErrorCode.TIMEOUT
    assert in_workspace(workspace) == []


async def test_reading_stops_in_bounded_time_when_a_holder_cannot_be_ended(
    workspace: Path,
) -> None:
    # A command that kills its launcher (same user: the sandbox is what prevents it) leaves
    # its detached daemon holding the output pipe; the call still returns after read_grace
    # with what was read. The compiled launcher's resident adopts the daemon and ends it; the
    # pure launcher has none above it, so there the daemon escapes (the limit the docs name).
    shell = LocalShell(read_grace=0.3)
    command = (
        "echo out; setsid -f sh -c 'echo $$ > pids; exec sleep 300'; "
        + WAIT.format(n=1)
        + "; kill -KILL $PPID; sleep 300"
    )
    result = await shell.run(command, cwd=str(workspace), timeout=60)
    assert result.exit_code is None and not result.timed_out  # no status: its reporter died
    assert result.output == "out\n"
    (holder,) = recorded(workspace)
    launcher = _spawn.launcher_command()
    if launcher is not None and os.path.basename(launcher[0]) == "fastgate-launcher":
        await until_dead([holder])
    else:
        assert alive(holder)
        psutil.Process(holder).kill()


async def test_a_command_that_stops_its_launcher_still_ends(workspace: Path) -> None:
    # SIGSTOP to its parent (same user) would freeze the launcher's reports and its reaping:
    # the call's end continues it.
    command = "echo $$ > pids; kill -STOP $PPID; exec sleep 300"
    result = await LocalShell(kill_grace=0.2).run(command, cwd=str(workspace), timeout=1)
    assert result.timed_out
    assert not alive(recorded(workspace)[0])


async def test_the_signal_stops_the_command(workspace: Path) -> None:
    shell = LocalShell()
    token = CancelToken()
    running = asyncio.ensure_future(
        shell.run(
            "echo $$ > pids; echo > ready; sleep 300", cwd=str(announcing(workspace)), signal=token
        )
    )
    await until_ready(workspace)
    token.cancel()
    result = await running
    assert result.exit_code is None and not result.timed_out
    assert all(gone(pid) for pid in recorded(workspace))


async def test_a_signal_already_cancelled_runs_nothing_for_long(workspace: Path) -> None:
    token = CancelToken()
    token.cancel()
    result = await LocalShell().run("sleep 300", cwd=str(workspace), signal=token)
    assert result.exit_code is None
    assert in_workspace(workspace) == []


async def test_a_missing_program_or_directory_raises_oserror(workspace: Path) -> None:
    with pytest.raises(FileNotFoundError):
        await LocalShell().run("true", cwd=str(workspace / "missing"))
    with pytest.raises(FileNotFoundError):
        await LocalShell(executable="/nonexistent/bash").run("true", cwd=str(workspace))
    assert os.listdir(workspace) == []


@pytest.mark.parametrize("bad", [0, -1, float("nan")])
async def test_a_bad_timeout_is_refused(workspace: Path, bad: float) -> None:
    with pytest.raises(ValueError, match="timeout"):
        await LocalShell().run("true", cwd=str(workspace), timeout=bad)


# -- the server's secrets ----------------------------------------------------------------------

SECRET = "hunter2-proc-environ"
# Each reads the environment of the command's parent (the secret must not be in it).
SPELLINGS = {
    "cat": "cat -v /proc/$PPID/environ",  # -v: NULs as ^@ (raw NULs make the output binary)
    "tr": "tr '\\0' '\\n' < /proc/$PPID/environ",
    "xargs": "xargs -0 -n1 < /proc/$PPID/environ",
    "parent through status": (
        "p=$(awk '/^PPid:/ {print $2}' /proc/$$/status); tr '\\0' '\\n' < /proc/$p/environ"
    ),
    "from a child, two up": (
        'sh -c \'p=$(awk "/^PPid:/ {print \\$2}" /proc/$PPID/status); '
        "cat -v /proc/$PPID/environ /proc/$p/environ'"
    ),
    # The launcher's parent: the resident launcher (the compiled one's), empty.
    "the launcher's parent": (
        "p=$(awk '/^PPid:/ {print $2}' /proc/$PPID/status); cat -v /proc/$p/environ"
    ),
}


@pytest.mark.parametrize("spelling", list(SPELLINGS))
async def test_the_servers_secrets_are_not_in_the_parents_environment(
    workspace: Path, spelling: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FASTGATE_TEST_API_TOKEN", SECRET)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET + "-aws")
    if spelling == "the launcher's parent" and supervision() != "compiled launcher":
        pytest.skip("the pure launcher is started by the server itself: its parent")
    result = await LocalShell().run(SPELLINGS[spelling], cwd=str(workspace), timeout=60)
    assert SECRET not in result.output
    if os.getuid() == 0:  # root may read any process's environment: every read succeeded
        assert result.exit_code == 0, result.output
        if spelling != "from a child, two up" and supervision() == "compiled launcher":
            assert result.output.strip() == ""  # the launcher's (its parent's): nothing at all
    # Others may not read it at all (the launcher is not dumpable): tested in test_processes.


async def test_every_ancestor_below_the_server_shows_only_the_filtered_environment(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Walking up from the command: every process between it and the server (its launcher)
    # holds the filtered environment and a command line without secrets. The server itself,
    # one step further, is readable by any process of its user: the sandbox hides it.
    monkeypatch.setenv("FASTGATE_TEST_API_TOKEN", SECRET)
    command = (
        'p=$$; n=0; while [ "$p" != "$FASTGATE_TEST_SERVER" ] && [ "$p" -gt 1 ]; do '
        "cat -v /proc/$p/environ /proc/$p/cmdline; echo; n=$((n + 1)); "
        "p=$(awk '/^PPid:/ {print $2}' /proc/$p/status); done; echo walked $n to $p"
    )
    result = await LocalShell().run(
        command,
        cwd=str(workspace),
        env={"FASTGATE_TEST_SERVER": str(os.getpid())},
        timeout=60,
    )
    assert result.exit_code == 0, result.output
    assert SECRET not in result.output
    assert result.output.rstrip().endswith(f"to {os.getpid()}")  # it reached the server
    walked = int(result.output.rsplit("walked ", 1)[1].split()[0])
    assert walked >= 2  # the shell, then its launcher: the server is not the shell's parent
