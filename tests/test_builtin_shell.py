"""``LocalShell`` leaves no survivors (SPEC §16 "Shell"): whatever a command started is gone
when the call ends — exited, timed out, or cancelled by token or by task — and the test looks
every pid up afterwards."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import psutil
import pytest

from fastgate import CancelToken, ErrorCode, PermissionMode
from fastgate.builtin import LocalShell, _shell
from fastgate.builtin._shell import _Run
from tests.builtin_kit import builtin_executor, gone

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
    "pipe holder without the marker": (
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


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("how", ["exit", "token"])
async def test_the_portable_search_finds_the_same(
    workspace: Path, case: str, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Where there is no /proc (macOS, the BSDs) processes are found through psutil.
    monkeypatch.setattr(_shell, "_PROC", False)
    await ends_everything(workspace, case, how)


async def ends_everything(workspace: Path, case: str, how: str) -> None:
    announcing(workspace)
    ex = builtin_executor(workspace, mode=PermissionMode.YOLO, cancel_grace=30.0)
    if how == "exit":
        result = await ex.execute("bash", {"command": command_for(case, "exit 0")})
        assert result.ok, result.content
    elif how == "timeout":
        args = {"command": command_for(case, "sleep 300"), "timeout": 2}
        result = await ex.execute("bash", args)
        assert result.error is not None and result.error.code == ErrorCode.TIMEOUT, result
    elif how == "token":
        from fastgate import ExecutionContext

        token = CancelToken()
        running = asyncio.ensure_future(
            ex.execute(
                "bash",
                {"command": command_for(case, "sleep 300", announce=True)},
                ExecutionContext(cancel=token),
            )
        )
        await until_ready(workspace)
        token.cancel("stop")
        result = await running
        assert result.error is not None and result.error.code == ErrorCode.ABORTED, result
    else:
        running = asyncio.ensure_future(
            ex.execute("bash", {"command": command_for(case, "sleep 300", announce=True)})
        )
        await until_ready(workspace)
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
    pids = recorded(workspace)
    assert len(pids) == CASES[case][1] + 1
    assert [pid for pid in pids if not gone(pid)] == []
    assert in_workspace(workspace) == []


async def test_a_command_that_closed_its_output_and_runs_on_times_out(workspace: Path) -> None:
    ex = builtin_executor(workspace, mode=PermissionMode.YOLO)
    command = "echo before; exec >&- 2>&-; echo $$ > pids; sleep 300"
    result = await ex.execute("bash", {"command": command, "timeout": 2})
    assert result.error is not None and result.error.code == ErrorCode.TIMEOUT
    assert result.content.startswith("before\n")
    assert all(gone(pid) for pid in recorded(workspace))


async def test_a_fork_loop_is_ended_whole(workspace: Path) -> None:
    ex = builtin_executor(workspace, mode=PermissionMode.YOLO)
    command = "while :; do sleep 300 & done"
    result = await ex.execute("bash", {"command": command, "timeout": 1})
    assert result.error is not None and result.error.code == ErrorCode.TIMEOUT
    assert in_workspace(workspace) == []


async def test_reading_stops_in_bounded_time_when_a_holder_cannot_be_ended(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A holder none of the searches can see (here: the pipe search is switched off): the call
    # still returns, after read_grace, with what was read.
    monkeypatch.setattr(_Run, "_pipe_holders", lambda self: [])
    shell = LocalShell(read_grace=0.3)
    command = (
        "echo out; (setsid env -i bash -c 'echo $$ > pids; exec sleep 300' &); " + WAIT.format(n=1)
    )
    result = await shell.run(command, cwd=str(workspace), timeout=60)
    assert result.exit_code == 0
    assert result.output == "out\n"
    (holder,) = recorded(workspace)
    assert not gone(holder)  # it escaped: the limit the docs name
    psutil.Process(holder).kill()


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
