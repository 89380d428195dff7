"""A command that kills its own launcher leaves nothing running (SPEC §22 "One supervisor"):
the resident launcher is a child subreaper, so what the command detached comes to it, never
to init, and it ends every process it did not fork. (The pure launcher, started by the server
itself, has no resident above it: a command that kills it is the sandbox's to refuse, see
tests/sandbox/test_confinement_supervisors.py.)"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from fastgate.processes import _spawn, spawn
from tests.processes_kit import (
    DAEMONS,
    compiled_launcher_fixture,  # noqa: F401  (the fixture "compiled_launcher")
    daemon_script,
    kill_all,
    recorded,
    until_dead,
)

# Kernel and process mechanisms, the same in both builds: run once, in the compiled build.
pytestmark = pytest.mark.slow


@pytest.fixture(name="resident_launcher")
def resident_launcher_fixture(compiled_launcher: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The compiled launcher (built from the source), forked by its resident."""
    monkeypatch.setattr(_spawn, "launcher_command", lambda: [compiled_launcher])
    return compiled_launcher


# How a command kills its launcher: by pid, by its process group, from a daemon of its own
# (the command itself still running), and stopped first (a stopped launcher ends nothing).
KILLS = {
    "kill -KILL $PPID": "kill -KILL $PPID; sleep 300",
    "kill -KILL -$PPID": "kill -KILL -- -$PPID; sleep 300",
    "from a grandchild": "(bash -c 'kill -KILL $0' $PPID &); sleep 300",
    "stopped, then killed": "kill -STOP $PPID; kill -KILL $PPID; sleep 300",
}


@pytest.mark.parametrize("kill", sorted(KILLS))
@pytest.mark.parametrize("case", sorted(DAEMONS))
async def test_a_daemon_of_a_command_that_killed_its_launcher_is_ended(
    resident_launcher: str, tmp_path: Path, case: str, kill: str
) -> None:
    script = daemon_script(case, KILLS[kill])
    process = spawn(["bash", "-c", script], cwd=str(tmp_path))
    try:
        async with asyncio.timeout(60):
            await process.wait()
    except OSError:
        pass  # killed before it could report the start
    pids = recorded(tmp_path)
    assert len(pids) == 2  # the daemon's, the command's
    try:
        await until_dead(pids)
    finally:
        kill_all(pids)


async def test_a_chain_of_detached_processes_is_ended_whole(
    resident_launcher: str, tmp_path: Path
) -> None:
    # Each process of the chain in a session of its own, each with a child of its own: when one
    # is ended its child comes to the resident, and is ended in turn.
    chain = (
        "import os, sys, time\n"
        "for _ in range(5):\n"
        "    if os.fork():\n"
        "        break\n"
        "    os.setsid()\n"
        'open("pids", "a").write(f"{os.getpid()}\\n")\n'
        "time.sleep(300)\n"
    )
    script = (
        f"(env -i python3 -c '{chain}' < /dev/null > /dev/null 2>&1 &)\n"
        'until [ "$(cat pids 2>/dev/null | wc -l)" -ge 6 ]; do sleep 0.01; done\n'
        "kill -KILL $PPID; sleep 300"
    )
    process = spawn(["bash", "-c", script], cwd=str(tmp_path))
    async with asyncio.timeout(60):
        await process.wait()
    pids = recorded(tmp_path)
    assert len(pids) == 6
    try:
        await until_dead(pids)
    finally:
        kill_all(pids)


async def test_the_resident_ends_orphans_only(resident_launcher: str, tmp_path: Path) -> None:
    # While one command's orphans are ended, another command of the same resident runs on.
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    fifo = tmp_path / "b" / "go"
    os.mkfifo(fifo)
    calm = spawn(
        ["bash", "-c", "echo $$ > pids; read < go; echo still-here > out"],
        cwd=str(tmp_path / "b"),
    )
    await calm.started()
    killer = spawn(
        ["bash", "-c", daemon_script("setsid -f", "kill -KILL $PPID; sleep 300")],
        cwd=str(tmp_path / "a"),
    )
    async with asyncio.timeout(60):
        await killer.wait()
    pids = recorded(tmp_path / "a")
    try:
        await until_dead(pids)
    finally:
        kill_all(pids)
    await asyncio.sleep(0.2)  # the resident's sweeps
    await asyncio.to_thread(fifo.write_text, "go\n")
    async with asyncio.timeout(60):
        assert await calm.wait() == 0
    assert (tmp_path / "b" / "out").read_text() == "still-here\n"
