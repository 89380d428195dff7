"""The resident launcher: one compiled launcher per server process forks each command's
launcher. It must be replaced when it dies, start nothing twice, leave no descriptor behind,
hold nothing of the server (environment, memory), and end with the server."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from fastgate.processes import PIPE, _resident, _spawn, spawn
from tests.processes_kit import (
    alive,
    compiled_launcher_fixture,  # noqa: F401  (the fixture "compiled_launcher")
    until_dead,
)


@pytest.fixture(name="compiled")
def compiled_fixture(compiled_launcher: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Every spawn of the test goes through the resident of the compiled launcher."""
    monkeypatch.setattr(_spawn, "launcher_command", lambda: [compiled_launcher])
    yield compiled_launcher


def open_descriptors() -> set[int]:
    return {int(name) for name in os.listdir("/proc/self/fd")}


async def test_commands_share_one_resident_that_forks_their_launchers(compiled: str) -> None:
    first = spawn(["bash", "-c", "echo $PPID"], stdout=PIPE)
    second = spawn(["bash", "-c", "echo $PPID"], stdout=PIPE)
    parents = []
    for process in (first, second):
        assert process.stdout is not None
        parents.append(int(process.stdout.read()))
        process.stdout.close()
        assert await process.wait() == 0
    resident = _resident.resident(compiled)
    assert parents == [first.supervisor_pid, second.supervisor_pid]
    assert len(set(parents)) == 2  # a launcher per command
    for launcher in parents:
        assert not alive(launcher)
    assert alive(resident.pid)
    environ = await asyncio.to_thread(Path(f"/proc/{resident.pid}/environ").read_bytes)
    assert environ == b""  # nothing of the server's environment


async def test_a_killed_resident_is_replaced_and_nothing_runs_twice(
    compiled: str, tmp_path: Path
) -> None:
    for _ in range(3):
        before = _resident.resident(compiled)
        os.kill(before.pid, signal.SIGKILL)
        await until_dead([before.pid])
        process = spawn(["bash", "-c", "echo once >> runs"], cwd=str(tmp_path))
        assert await process.wait() == 0
        after = _resident.resident(compiled)
        assert after.pid != before.pid and alive(after.pid)
    assert (tmp_path / "runs").read_text() == "once\n" * 3


async def idle_spare(resident: int) -> int:
    """The spare ``resident`` forks ahead (right after it starts, and after each request it
    hands over): no event tells when, so /proc is read until it is there (bounded)."""
    for _ in range(2000):
        if spares := _resident._spares(resident):
            return spares.pop()
        await asyncio.sleep(0.005)
    raise AssertionError(f"the resident {resident} forked no spare")


async def test_a_spare_takes_the_request_and_a_killed_one_is_replaced(
    compiled: str, tmp_path: Path
) -> None:
    resident = _resident.resident(compiled)
    for _ in range(3):
        spare = await idle_spare(resident.pid)
        assert spare in _resident.standing() and spare not in _resident.running()
        process = spawn(["bash", "-c", "echo once >> runs"], cwd=str(tmp_path))
        assert await process.wait() == 0
        assert process.supervisor_pid == spare  # the spare became the command's launcher
        # A spare killed as it waits (a process of the server's user may): the next command
        # still runs, once, and through the same resident.
        killed = await idle_spare(resident.pid)
        os.kill(killed, signal.SIGKILL)
        await until_dead([killed])
        process = spawn(["bash", "-c", "echo once >> runs"], cwd=str(tmp_path))
        assert await process.wait() == 0
        assert _resident.resident(compiled) is resident and alive(resident.pid)
    assert (tmp_path / "runs").read_text() == "once\n" * 6


def _name(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None  # gone meanwhile


def _children_names(pid: int) -> set[str | None]:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return {_name(int(child)) for child in children.split()}


async def test_a_spare_is_named_a_spare_from_its_fork(compiled: str, tmp_path: Path) -> None:
    """How ``standing()`` tells an idle spare from a launcher running a command: its name,
    which a spare must have from the moment it exists (a process check made just after the
    resident forked one must not take it for a command's launcher)."""
    resident = _resident.resident(compiled)
    seen: set[str | None] = set()
    for _ in range(50):
        process = spawn(["true"], cwd=str(tmp_path))
        # Look at the resident's children while it forks the next spare.
        while not process.done():
            seen.update(_children_names(resident.pid))
            await asyncio.sleep(0)
        assert await process.wait() == 0
    seen.discard(None)
    # A launcher is "fastgate-launch" once it has taken its request; a child under the
    # resident's own name would be a spare not yet named.
    assert seen <= {"fastgate-spare", "fastgate-launch"}, seen
    assert "fastgate-spare" in seen
    assert (await idle_spare(resident.pid)) in _resident.standing()
    # Named once it serves (a moment after its start it still has its program's name).
    assert _name(resident.pid) == "fastgate-forker"


async def test_starting_leaves_no_descriptor_behind(compiled: str, tmp_path: Path) -> None:
    _resident.resident(compiled)  # its socket is kept: started before the count
    before = open_descriptors()
    for stdout in (PIPE, subprocess.DEVNULL, None):
        process = spawn(["true"], stdout=stdout, stderr=subprocess.STDOUT, cwd=str(tmp_path))
        if process.stdout is not None:
            process.stdout.close()
        assert await process.wait() == 0
    with pytest.raises(FileNotFoundError):
        spawn(["true"], cwd=str(tmp_path / "missing"), stdout=PIPE)
    with pytest.raises(OSError):
        spawn(["true"], stdout=999)  # not a descriptor of this process
    missing = spawn(["no-such-program-anywhere"], stdout=PIPE)
    with pytest.raises(FileNotFoundError):
        await missing.wait()
    assert missing.stdout is not None
    missing.stdout.close()
    assert open_descriptors() == before


async def test_the_commands_descriptors_are_the_ones_asked(compiled: str) -> None:
    read_end, write_end = os.pipe()
    try:
        process = spawn(
            ["bash", "-c", "echo to-stdout; echo to-stderr >&2; ls /proc/$$/fd"],
            stdout=write_end,
            stderr=subprocess.STDOUT,
        )
    finally:
        os.close(write_end)
    assert await process.wait() == 0
    with os.fdopen(read_end, "rb") as file:
        lines = file.read().decode().split()
    assert lines[:2] == ["to-stdout", "to-stderr"]
    # ls is bash's last command, run in its place: 3 is its listing of the directory.
    assert sorted(int(fd) for fd in lines[2:]) == [0, 1, 2, 3]


async def test_many_commands_at_once(compiled: str) -> None:
    processes = [spawn(["bash", "-c", f"exit {n}"]) for n in range(40)]
    statuses = await asyncio.gather(*(process.wait() for process in processes))
    assert statuses == list(range(40))
    assert len({process.supervisor_pid for process in processes}) == 40


def test_the_resident_ends_with_its_server(compiled_launcher: str, tmp_path: Path) -> None:
    # A server that starts a command and is then killed: its resident sees the end of its
    # socket and exits; the command's launcher sees its control pipe close and ends it.
    script = textwrap.dedent(
        f"""
        import asyncio, os, sys
        from fastgate.processes import _resident, _spawn, spawn
        _spawn.launcher_command = lambda: [{compiled_launcher!r}]
        async def main():
            process = spawn(["sleep", "300"])
            await process.started()
            print(_resident.resident({compiled_launcher!r}).pid, process.pid, flush=True)
            await asyncio.sleep(300)
        asyncio.run(main())
        """
    )
    server = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    assert server.stdout is not None
    try:
        with server.stdout:
            resident, command = (int(word) for word in server.stdout.readline().split())
    finally:
        server.kill()
        server.wait()
    asyncio.run(until_dead([resident, command]))


def test_a_forked_server_starts_its_own_resident(compiled_launcher: str) -> None:
    # The child of a fork must not send on its parent's socket (requests would interleave) nor
    # keep it open (the parent's resident would outlive the parent).
    script = textwrap.dedent(
        f"""
        import asyncio, json, os, sys
        from fastgate.processes import _resident, _spawn, spawn
        _spawn.launcher_command = lambda: [{compiled_launcher!r}]
        async def one():
            process = spawn(["true"])
            await process.wait()
        def sockets():
            count = 0
            for fd in os.listdir("/proc/self/fd"):
                try:
                    count += os.readlink(f"/proc/self/fd/{{fd}}").startswith("socket:")
                except FileNotFoundError:
                    pass  # the listing's own descriptor
            return count
        asyncio.run(one())
        parent = sorted(_resident.running())
        child = os.fork()
        if child == 0:
            try:
                before = sockets()
                asyncio.run(one())
                print(json.dumps([parent, sorted(_resident.running()), before]), flush=True)
            finally:
                os._exit(0)
        os.waitpid(child, 0)
        asyncio.run(one())
        print(json.dumps(sorted(_resident.running())), flush=True)
        """
    )
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and not done.stderr, done.stderr
    child_line, parent_line = done.stdout.splitlines()
    inherited, own, sockets_after_fork = json.loads(child_line)
    assert sockets_after_fork == 0  # the parent's socket closed in the child at once
    assert len(own) == 1 and own != inherited  # its own resident
    assert json.loads(parent_line) == inherited  # the parent's still serves the parent


async def test_a_stopped_resident_is_replaced_after_its_bound(compiled: str) -> None:
    # A process of the server's user may stop the resident: the server must not wait forever
    # behind it, and the next command gets a new one. The spare it forked ahead, if it had
    # yet, serves one command; the one after it has nobody to answer.
    stopped = _resident.resident(compiled)
    stopped._socket.settimeout(0.5)  # the bound, shortened for the test
    os.kill(stopped.pid, signal.SIGSTOP)
    with pytest.raises(OSError, match="did not answer"):
        for _ in range(2):
            assert await spawn(["true"]).wait() == 0
    await until_dead([stopped.pid])
    process = spawn(["true"])
    assert await process.wait() == 0
    assert _resident.resident(compiled).pid != stopped.pid
