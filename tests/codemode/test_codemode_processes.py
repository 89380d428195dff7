"""A worker runs under ``fastgate.processes``' launcher, its parent and the reaper of all it
starts. The sandbox's seccomp layer forbids a program to start a process; where a host has no
seccomp (here: switched off), a daemon a program detaches (``setsid`` and a double fork, out of
the worker's process group) is still ended when the run ends, finished or stopped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fastgate import RunContext, ToolKind, define_tool, schema
from fastgate.codemode import CodeMode, _sandbox
from tests.codemode_kit import Env, run
from tests.codemode_kit import env_fixture as env_fixture  # the fixture "env"

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
