"""A worker runs under ``fastgate.processes``' launcher, its parent and the reaper of all it
starts. The sandbox's seccomp layer forbids a program to start a process; where a host has no
seccomp (here: switched off), a daemon a program detaches (``setsid`` and a double fork, out of
the worker's process group) is still ended when the run ends, finished or stopped."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from fastgate import RunContext, ToolKind, define_tool, schema
from fastgate.codemode import CodeMode, _pool, _sandbox
from fastgate.processes import _spawn
from tests.codemode_kit import Env, children, noop_tool, run
from tests.codemode_kit import env_fixture as env_fixture  # the fixture "env"

# The processes and the kernel it exercises are the same under both builds and both loops:
# run once, in the compiled build, on uvloop.
pytestmark = pytest.mark.slow

DAEMON = """
import os, time
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.write(w, str(os.getpid()).encode())
        time.sleep(300)
    os._exit(0)
os.close(w)
await tools.note(pid=int(os.read(r, 32)))
"""


@pytest.fixture
def no_seccomp(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_sandbox, "seccomp_arch", lambda: None)


def exists(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


@pytest.mark.usefixtures("no_seccomp")
@pytest.mark.parametrize("then", ["", "time.sleep(300)"])
async def test_a_daemon_a_program_started_is_gone_when_the_run_ends(env: Env, then: str) -> None:
    noted: list[int] = []

    async def note(args: Any, ctx: RunContext) -> None:
        noted.append(args["pid"])
        assert exists(args["pid"])

    tool = define_tool(
        "note",
        "Notes a pid.",
        schema.Object({"pid": schema.Integer()}),
        note,
        kind=ToolKind.READ_ONLY,
    )
    code_mode = CodeMode(pool_size=1, timeout=3.0, require_sandbox=False)
    executor = env.make(tool, code_mode=code_mode)
    result = await run(executor, DAEMON + then)
    if then:  # stopped by its timeout
        assert result.error is not None and "did not finish" in result.content, result.content
    else:
        assert result.ok, result.content
    (daemon,) = noted
    assert not exists(daemon)  # ended, and reaped by the launcher, before the run returned


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[1])


async def test_a_run_returns_only_once_its_launcher_is_reaped(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The run sees its launcher exit first; the launcher's parent, the supervisor's loop, reaps
    # it. Held busy here, that loop cannot: the run must wait for it, not leave a zombie. (A
    # launcher started per command, as the pure one is, is this process's child; one the
    # resident forked is the resident's to reap.)
    pure = [sys.executable, "-I", "-S", "-B", _spawn.PURE_LAUNCHER]
    monkeypatch.setattr(_spawn, "launcher_command", lambda: pure)
    code_mode = CodeMode(pool_size=1)
    executor = env.make(noop_tool(), code_mode=code_mode)
    (worker,) = code_mode.worker_pids()
    launcher = parent_of(worker)
    assert launcher in children()
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        holding.set()
        release.wait()

    _pool._SUPERVISOR.loop().call_soon_threadsafe(hold)
    await asyncio.to_thread(holding.wait)
    loop = asyncio.get_running_loop()
    launcher_exited: asyncio.Future[None] = loop.create_future()
    pidfd = os.pidfd_open(launcher)

    def on_exit() -> None:
        if not launcher_exited.done():
            launcher_exited.set_result(None)

    loop.add_reader(pidfd, on_exit)
    try:
        program = asyncio.ensure_future(run(executor, "print('ran')"))
        await launcher_exited
        finished, _ = await asyncio.wait({program}, timeout=1.0)
        assert not finished, "the run returned while its launcher was a zombie"
        assert children().get(launcher) == "Z"
    finally:
        loop.remove_reader(pidfd)
        os.close(pidfd)
        release.set()
    result = await program
    assert result.ok and result.value["stdout"] == "ran\n", result.content
    assert launcher not in children()
