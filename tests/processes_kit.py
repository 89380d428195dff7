"""Shared pieces of the tests of processes started for a call (``fastgate.processes``, bash,
command hooks): both launchers, the daemons that try to outlive a call, and pid checks.

``launcher`` (a fixture, parametrized ``pure`` and ``compiled``): the pure launcher, or the C
one compiled from ``_launcher.c`` into a temporary directory (skipped without a C compiler),
so the pure build's run tests both."""

from __future__ import annotations

import asyncio
import os
import select
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fastgate.processes import _spawn

if not sys.platform.startswith("linux"):
    pytest.skip("the launcher is Linux only", allow_module_level=True)

SOURCE = Path(_spawn.__file__).with_name("_launcher.c")

# Daemons as a command would start them, each detaching in another way from the command (its
# own session, its parent gone, no variable of the command's, stdio away from the call's
# pipes), each writing its pid to ./pids and then sleeping.
DAEMONS: dict[str, str] = {
    "setsid -f": "env -i setsid -f sh -c 'echo $$ >> pids; exec sleep 300' > /dev/null 2>&1",
    "( setsid ... & )": (
        "(env -i setsid sh -c 'echo $$ >> pids; exec sleep 300' > /dev/null 2>&1 &)"
    ),
    "(nohup setsid ... &)": (
        "(env -i nohup setsid sh -c 'echo $$ >> pids; exec sleep 300' > /dev/null 2>&1 &)"
    ),
    "double fork and setsid": (
        "env -i python3 -c 'import os\n"
        "if os.fork(): os._exit(0)\n"
        "os.setsid()\n"
        "if os.fork(): os._exit(0)\n"
        'open("pids", "a").write(f"{os.getpid()}\\n")\n'
        'os.execv("/bin/sleep", ["sleep", "300"])\' < /dev/null > /dev/null 2>&1'
    ),
    "setsid -f ignoring TERM": (
        "env -i setsid -f sh -c 'trap \"\" TERM; echo $$ >> pids; exec sleep 300' > /dev/null 2>&1"
    ),
}
WAIT_FOR_PIDS = 'until [ "$(cat pids 2>/dev/null | wc -l)" -ge {n} ]; do sleep 0.01; done'


def daemon_script(case: str, then: str, announce: bool = False) -> str:
    """The daemon of ``case``, then (once its pid is written) the command's own pid, an
    optional line to the FIFO ./ready, and ``then``."""
    ready = "echo ready > ready\n" if announce else ""
    return f"{DAEMONS[case]}\n{WAIT_FOR_PIDS.format(n=1)}\necho $$ >> pids\n{ready}{then}"


def recorded(directory: Path) -> list[int]:
    return [int(line) for line in (directory / "pids").read_text().split()]


def alive(pid: int) -> bool:
    """Running (a zombie, or nothing at that pid, is not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            stat = file.read()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3] != b"Z"


async def until_dead(pids: list[int]) -> None:
    """Wait (on pidfds, bounded) until each of ``pids`` has exited: for processes that were
    signalled but are not ours to reap (then they die on their own time)."""
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        try:
            readable, _, _ = await asyncio.to_thread(select.select, [fd], [], [], 10.0)
            assert readable, f"process {pid} still runs"
        finally:
            os.close(fd)


def kill_all(pids: list[int]) -> None:
    """After a failed test only: leave nothing running."""
    for pid in pids:
        try:
            os.kill(pid, 9)
        except OSError:
            pass


@pytest.fixture(scope="session", name="compiled_launcher")
def compiled_launcher_fixture(tmp_path_factory: pytest.TempPathFactory) -> str:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the compiled launcher with")
    target = tmp_path_factory.mktemp("launcher") / "fastgate-launcher"
    subprocess.run(
        [compiler, "-O2", "-Wall", "-Werror", "-o", str(target), str(SOURCE)], check=True
    )
    return str(target)


@pytest.fixture(params=["pure", "compiled"], name="launcher")
def launcher_fixture(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[list[str]]:
    """The launcher every spawn of the test uses."""
    if request.param == "compiled":
        command = [request.getfixturevalue("compiled_launcher")]
    else:
        command = [sys.executable, "-I", "-S", "-B", _spawn.PURE_LAUNCHER]
    monkeypatch.setattr(_spawn, "launcher_command", lambda: command)
    yield command
