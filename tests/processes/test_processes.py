"""``fastgate.processes``: a command and everything it starts end together (SPEC §22 "One
supervisor"), with both launchers; every pid a test saw is checked afterwards."""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from fastgate.processes import PIPE, _spawn, spawn, supervision
from tests.processes_kit import (
    DAEMONS,
    alive,
    compiled_launcher_fixture,  # noqa: F401  (the fixture "compiled_launcher")
    daemon_script,
    kill_all,
    launcher_fixture,  # noqa: F401  (the fixture "launcher")
    recorded,
    until_dead,
)

# The processes and the kernel it exercises are the same under both builds and both loops:
# run once, in the compiled build, on uvloop.
pytestmark = pytest.mark.slow


async def read_all(fd: int) -> bytes:
    """Everything written to a pipe until its last writer is gone."""
    loop = asyncio.get_running_loop()
    data = bytearray()
    done: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        chunk = os.read(fd, 65536)
        if chunk:
            data.extend(chunk)
        elif not done.done():
            done.set_result(None)

    os.set_blocking(fd, False)
    loop.add_reader(fd, readable)
    try:
        async with asyncio.timeout(30):
            await done
    finally:
        loop.remove_reader(fd)
    return bytes(data)


async def test_a_command_runs_and_reports_its_status(launcher: list[str]) -> None:
    process = spawn(["bash", "-c", "echo out; echo err >&2; exit 7"], stdout=PIPE, stderr=PIPE)
    pid = await process.started()
    assert pid == process.pid > 0 and process.supervisor_pid != pid
    assert await process.exited() == 7
    assert await process.wait() == 7
    assert process.stdout is not None and process.stderr is not None
    assert process.stdout.read() == b"out\n" and process.stderr.read() == b"err\n"
    process.stdout.close()
    process.stderr.close()
    assert process.done() and process.left == 0
    assert not alive(process.pid) and not alive(process.supervisor_pid)


async def test_a_signal_that_ended_the_command_is_its_status(launcher: list[str]) -> None:
    process = spawn(["bash", "-c", "kill -KILL $$"])
    assert await process.wait() == -signal.SIGKILL


async def test_what_cannot_start_raises_oserror(launcher: list[str], tmp_path: Path) -> None:
    # A program that cannot be executed: known once its launcher tried, from every wait.
    process = spawn(["fastgate-no-such-program"])
    with pytest.raises(FileNotFoundError) as missing:
        await process.started()
    assert missing.value.filename == "fastgate-no-such-program"
    for wait in (process.exited, process.wait):
        with pytest.raises(FileNotFoundError):
            await wait()
    assert process.done() and process.pid == 0
    process = spawn([str(tmp_path)])  # a directory
    with pytest.raises(PermissionError):
        await process.wait()
    # A directory that does not exist: not even the launcher starts.
    with pytest.raises(FileNotFoundError):
        spawn(["true"], cwd=str(tmp_path / "missing"))
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("case", list(DAEMONS))
async def test_a_daemon_is_gone_when_its_command_exits(
    launcher: list[str], tmp_path: Path, case: str
) -> None:
    process = spawn(["bash", "-c", daemon_script(case, "exit 3")], cwd=str(tmp_path))
    assert await process.wait() == 3
    pids = recorded(tmp_path)
    try:
        assert len(pids) == 2 and [pid for pid in pids if alive(pid)] == []
    finally:
        kill_all(pids)


@pytest.mark.parametrize("case", list(DAEMONS))
async def test_a_daemon_is_gone_when_the_command_is_stopped(
    launcher: list[str], tmp_path: Path, case: str
) -> None:
    process = spawn(
        ["bash", "-c", daemon_script(case, "echo started; sleep 300")],
        cwd=str(tmp_path),
        stdout=PIPE,
    )
    assert process.stdout is not None
    assert await asyncio.to_thread(process.stdout.readline) == b"started\n"
    await process.terminate_all(0.2)
    process.stdout.close()
    assert process.returncode == -signal.SIGTERM  # bash took the TERM; the rest waited for KILL
    pids = recorded(tmp_path)
    try:
        assert len(pids) == 2 and [pid for pid in pids if alive(pid)] == []
    finally:
        kill_all(pids)


async def test_the_output_ends_when_the_daemons_holding_it_do(
    launcher: list[str], tmp_path: Path
) -> None:
    # The daemon keeps the command's stdout: the pipe reaches its end all the same.
    read_fd, write_fd = os.pipe()
    try:
        process = spawn(
            [
                "bash",
                "-c",
                "setsid -f sh -c 'echo $$ > pids; exec sleep 300'; "
                "until [ -s pids ]; do sleep 0.01; done; echo done",
            ],
            cwd=str(tmp_path),
            stdout=write_fd,
        )
    finally:
        os.close(write_fd)
    try:
        assert await read_all(read_fd) == b"done\n"
    finally:
        os.close(read_fd)
    assert await process.wait() == 0
    assert not alive(recorded(tmp_path)[0])


async def test_a_process_ignoring_term_is_killed_after_the_grace(
    launcher: list[str], tmp_path: Path
) -> None:
    script = "trap '' TERM; echo $$ > pids; echo > ready; exec sleep 300"
    os.mkfifo(tmp_path / "ready")
    process = spawn(["bash", "-c", script], cwd=str(tmp_path), grace=0.3)
    await asyncio.to_thread((tmp_path / "ready").read_bytes)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await process.terminate_all()
    assert loop.time() - started >= 0.3
    assert process.returncode == -signal.SIGKILL
    assert not alive(recorded(tmp_path)[0])


async def test_a_fork_loop_is_ended_whole(launcher: list[str], tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "ready")
    script = (
        "echo $$ > pids; for i in $(seq 20); do (sleep 300 &); done; echo > ready; "
        "while :; do (sleep 300 &); done"
    )
    process = spawn(["bash", "-c", script], cwd=str(tmp_path))
    await asyncio.to_thread((tmp_path / "ready").read_bytes)
    assert len(running_in(tmp_path)) > 20
    await process.terminate_all(0.1)
    assert not alive(recorded(tmp_path)[0])
    assert running_in(tmp_path) == []


def running_in(directory: Path) -> list[int]:
    """Live processes whose working directory is ``directory``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/cwd") == str(directory) and alive(int(entry)):
                    found.append(int(entry))
            except OSError:
                continue
    return found


async def test_cancelling_the_caller_of_terminate_all_still_ends_everything(
    launcher: list[str], tmp_path: Path
) -> None:
    script = "trap '' TERM; echo $$ > pids; echo > ready; exec sleep 300"
    os.mkfifo(tmp_path / "ready")
    process = spawn(["bash", "-c", script], cwd=str(tmp_path))
    await asyncio.to_thread((tmp_path / "ready").read_bytes)
    stopping = asyncio.ensure_future(process.terminate_all(0.3))
    await asyncio.sleep(0)
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping
    assert process.done() and not alive(recorded(tmp_path)[0])


async def test_the_command_holds_neither_launcher_pipe(launcher: list[str]) -> None:
    # Only its stdio: the control pipe (which could stop the launcher) and the report pipe
    # (which could forge a status) stay the launcher's.
    process = spawn(["ls", "/proc/self/fd"], stdout=PIPE)
    assert process.stdout is not None
    fds = process.stdout.read().split()
    process.stdout.close()
    await process.wait()
    assert sorted(int(fd) for fd in fds) == [0, 1, 2, 3]  # 3: ls's own listing of the dir


async def test_the_launcher_has_the_commands_environment(
    launcher: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FASTGATE_TEST_SECRET_TOKEN", "hunter2-launcher")
    env = {"PATH": os.environ["PATH"], "ONLY": "this"}
    script = "tr '\\0' '\\n' < /proc/$PPID/environ; echo =====; env"
    process = spawn(["bash", "-c", script], env=env, stdout=PIPE)
    assert process.stdout is not None
    out = process.stdout.read().decode()
    process.stdout.close()
    await process.wait()
    launchers, _, commands = out.partition("=====\n")
    assert "ONLY=this" in commands.split()
    assert "hunter2" not in out
    # What the launcher's /proc file shows is the command's own (the pure launcher runs with
    # it) or nothing (the resident compiled one starts with an empty environment).
    assert set(launchers.split()) <= set(commands.split())


async def test_a_killed_launcher_takes_its_command_and_group_along(
    launcher: list[str], tmp_path: Path
) -> None:
    # A command killing its own launcher (same user: the sandbox's to prevent) takes itself
    # down (the launcher's death signal) and its group (ended by the server).
    os.mkfifo(tmp_path / "go")
    script = "sleep 300 & echo $! > pids; echo $$ >> pids; read < go; kill -KILL $PPID; sleep 300"
    process = spawn(["bash", "-c", script], cwd=str(tmp_path))
    await process.started()
    await asyncio.to_thread((tmp_path / "go").write_text, "go\n")
    assert await process.wait() is None  # no status: the launcher could not report one
    pids = recorded(tmp_path)
    try:
        await until_dead(pids)  # signalled, not reaped by us: they die on their own time
    finally:
        kill_all(pids)


@pytest.mark.parametrize("attempt", range(5))
async def test_a_launcher_killed_before_it_reported_the_start_leaves_nothing(
    launcher: list[str], tmp_path: Path, attempt: int
) -> None:
    # The command kills its launcher as soon as it runs: whether or not the start was reported
    # by then, the group it left behind is ended.
    script = "sleep 300 & echo $! > pids; echo $$ >> pids; kill -KILL $PPID; sleep 300"
    process = spawn(["bash", "-c", script], cwd=str(tmp_path))
    try:
        assert await process.wait() is None
    except OSError as exc:  # killed before it could report the start
        assert exc.errno == errno.EIO
    pids = recorded(tmp_path)  # both written before the kill
    assert len(pids) == 2
    try:
        await until_dead(pids)  # signalled, not reaped by us: they die on their own time
    finally:
        kill_all(pids)


async def test_a_stop_before_the_start_was_reported_leaves_nothing(
    launcher: list[str], tmp_path: Path
) -> None:
    process = spawn(["bash", "-c", "echo $$ > pids; exec sleep 300"], cwd=str(tmp_path))
    await process.terminate_all(0)  # at once: the launcher may not have reported the start
    assert process.done()
    if (tmp_path / "pids").exists():  # (empty when bash was killed between open and write)
        assert not any(alive(pid) for pid in recorded(tmp_path))


async def test_without_a_launcher_the_process_group_is_ended(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Where there are no subreapers (not Linux): the command's process group.
    monkeypatch.setattr(_spawn, "launcher_command", lambda: None)
    assert supervision() == "process group"
    process = spawn(
        ["bash", "-c", "sleep 300 & echo $! > pids; exit 5"], cwd=str(tmp_path), grace=0
    )
    assert process.supervisor_pid == process.pid
    assert await process.wait() == 5
    await until_dead(recorded(tmp_path))  # signalled, not reaped by us
    process = spawn(["sleep", "300"], grace=0.1)
    await process.terminate_all()
    assert process.returncode == -signal.SIGTERM


def test_supervision_names_the_launcher() -> None:
    # The compiled one wherever the build made it, the pure core included.
    built = os.access(_spawn.COMPILED_LAUNCHER, os.X_OK)
    assert supervision() == ("compiled launcher" if built else "pure launcher")
    if os.environ.get("FASTGATE_REQUIRE_EXTENSIONS"):
        assert built, "the build did not make fastgate-launcher"


@pytest.mark.parametrize("bad", [[], "bash -c true", [b"bash"]])
async def test_bad_argv_is_refused(bad: object) -> None:
    with pytest.raises(TypeError):
        spawn(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("grace", [-1, float("nan"), float("inf")])
async def test_a_bad_grace_is_refused(grace: float) -> None:
    with pytest.raises(ValueError, match="grace"):
        spawn(["true"], grace=grace)
    process = spawn(["true"])
    with pytest.raises(ValueError, match="grace"):
        await process.terminate_all(grace)
    await process.wait()


async def test_a_compiled_launcher_that_cannot_run_falls_back(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Installed where nothing may be executed (a noexec mount): the pure one takes over.
    broken = tmp_path / "fastgate-launcher"
    broken.write_bytes(b"\x7fELF not really")
    broken.chmod(0o755)
    monkeypatch.setattr(_spawn, "COMPILED_LAUNCHER", str(broken))
    monkeypatch.setattr(_spawn, "REQUIRE_EXTENSIONS", False)
    monkeypatch.setattr(_spawn, "_compiled_failed", False)
    assert supervision() == "compiled launcher"
    process = spawn([sys.executable, "-c", "pass"])
    assert await process.wait() == 0
    assert supervision() == "pure launcher"


async def test_a_launcher_stopped_by_its_command_is_continued(
    launcher: list[str], tmp_path: Path
) -> None:
    # The command stops its launcher (same user): a stop request continues it first.
    os.mkfifo(tmp_path / "ready")
    script = "echo $$ > pids; kill -STOP $PPID; echo > ready; exec sleep 300"
    process = spawn(["bash", "-c", script], cwd=str(tmp_path), grace=0.1)
    await asyncio.to_thread((tmp_path / "ready").read_bytes)
    await process.terminate_all()
    assert process.returncode == -signal.SIGTERM
    assert not alive(recorded(tmp_path)[0])


async def test_a_launcher_that_does_not_end_is_killed_after_a_bound(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A launcher that reports its start and then ignores every request (a stand-in for one
    # stuck in the kernel): killed once the grace and the bound have passed, its group too.
    fake = "echo S $$ >&$3; trap '' TERM; sleep 300 & echo $! > pids; wait"
    monkeypatch.setattr(_spawn, "launcher_command", lambda: ["bash", "-c", fake, "bash"])
    monkeypatch.setattr(_spawn, "_LAUNCHER_BOUND", 0.2)
    process = spawn(["ignored"], cwd=str(tmp_path))
    await process.terminate_all(0)
    assert process.returncode is None
    await until_dead(recorded(tmp_path))


@pytest.mark.parametrize("kind", ["pure", "compiled"])
def test_the_command_cannot_inspect_its_launcher(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    # The launcher is not dumpable: a process of its user (the command) may not read its
    # /proc files (its environment, its descriptors: the pipes to the server) or ptrace it.
    # As root the check runs as nobody (root may read anything); the launcher is copied where
    # nobody can run it.
    shared = Path(tempfile.mkdtemp(prefix="fastgate-launcher-"))
    try:
        shared.chmod(0o755)
        if kind == "compiled":
            shutil.copy(request.getfixturevalue("compiled_launcher"), shared)
            launcher = [str(shared / "fastgate-launcher")]
        else:
            shutil.copy(_spawn.PURE_LAUNCHER, shared)
            python = "/usr/bin/python3" if os.getuid() == 0 else sys.executable
            if not os.access(python, os.X_OK):
                pytest.skip(f"no interpreter {python} for another user")
            launcher = [python, "-I", "-S", "-B", str(shared / "_launcher.py")]
        output = run_launcher_as_nobody(
            launcher,
            "cat /proc/$PPID/environ; echo read=$?; ls /proc/$PPID/fd; echo listed=$?",
            env={"PATH": "/usr/bin:/bin", "FASTGATE_TEST_SEEN": "in-the-launcher"},
        )
    finally:
        shutil.rmtree(shared)
    assert "in-the-launcher" not in output
    assert "read=1" in output and "listed=2" in output, output


def run_launcher_as_nobody(launcher: list[str], script: str, env: dict[str, str]) -> str:
    """Run ``bash -c script`` under ``launcher`` directly (the protocol by hand), as nobody
    when this is root; the command's output."""
    control_r, control_w = os.pipe()
    report_r, report_w = os.pipe()
    argv = [*launcher, "1000", str(control_r), str(report_w), "bash", "bash", "-c", script]
    try:
        done = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            pass_fds=(control_r, report_w),
            env=env,
            cwd="/",
            user=65534 if os.getuid() == 0 else None,
            group=65534 if os.getuid() == 0 else None,
            extra_groups=[] if os.getuid() == 0 else None,
        )
    finally:
        os.close(control_r)
        os.close(report_w)
    try:
        output, _ = done.communicate(timeout=60)
        report = os.read(report_r, 4096)
    finally:
        os.close(control_w)
        os.close(report_r)
    assert report.startswith(b"P ") and b"\nS " in report and b"X 0" in report, report
    return output.decode()
