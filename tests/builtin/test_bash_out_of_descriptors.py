"""The built-in ``bash`` in a server out of file descriptors: a structured, retryable error that
says so (``details.reason = "resource_exhausted"``), for the local shell and the sandboxed one,
nothing left open; and the same call runs once descriptors are free again.

Each scenario runs in a child interpreter whose soft limit is lowered and whose descriptors are
then taken up to a few: the test process's own limit is never touched.
"""

from __future__ import annotations

import asyncio
import os
import resource
import sys
from pathlib import Path
from typing import Any

import pytest

from fastgate import PermissionMode
from fastgate.builtin import LocalShell
from fastgate.sandbox import SandboxedShell, sandbox_support
from tests.builtin_kit import builtin_executor, call
from tests.child_kit import report, run_scenario

LIMIT = 96

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="descriptors are counted through /proc"
)


async def _scenario(shell_name: str, workspace: str, free: int) -> dict[str, Any]:
    shell = LocalShell() if shell_name == "local" else SandboxedShell()
    ex = builtin_executor(Path(workspace), mode=PermissionMode.YOLO, shell=shell)
    first = await call(ex, "bash", {"command": "echo ran"})  # warm: resident launcher started
    held = []
    while len(os.listdir("/proc/self/fd")) - 1 < LIMIT - free:
        held.append(os.open("/dev/null", os.O_RDONLY))
    before = len(os.listdir("/proc/self/fd"))
    starved = await call(ex, "bash", {"command": "echo ran"})
    after = len(os.listdir("/proc/self/fd"))
    for fd in held:
        os.close(fd)
    again = await call(ex, "bash", {"command": "echo ran"})
    error = starved.error
    return {
        "first": first.ok,
        "starved": None
        if error is None
        else {
            "code": str(error.code),
            "retryable": error.retryable,
            "details": dict(error.details or {}),
            "message": error.message,
        },
        "starved_ok": starved.ok,
        "leaked": after - before,
        "again": [again.ok, again.value["output"] if again.ok else None],
    }


def _run(shell_name: str, workspace: Path, free: int) -> dict[str, Any]:
    return run_scenario(
        "tests.builtin.test_bash_out_of_descriptors",
        shell_name,
        str(workspace),
        str(free),
        timeout=120,
    )


@pytest.mark.parametrize("shell_name", ["local", "sandboxed"])
@pytest.mark.parametrize("free", [1, 2, 3])
def test_bash_out_of_descriptors_is_a_retryable_resource_error(
    shell_name: str, free: int, tmp_path: Path
) -> None:
    if shell_name == "sandboxed" and not sandbox_support().available:
        pytest.skip(f"the command sandbox is not available here: {sandbox_support().reason}")
    report = _run(shell_name, tmp_path, free)
    assert report["first"] is True
    assert report["starved_ok"] is False
    starved = report["starved"]
    assert starved["code"].endswith("TOOL_ERROR")
    assert starved["retryable"] is True
    assert starved["details"]["reason"] == "resource_exhausted"
    assert starved["details"]["resource"] == "file_descriptors"
    assert starved["details"]["limit"] == LIMIT
    assert "out of file descriptors" in starved["message"]
    assert report["leaked"] <= 0  # nothing of the call stayed open
    assert report["again"] == [True, "ran\n"]


if __name__ == "__main__":
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, hard))
    shell_arg, workspace_arg, free_arg = sys.argv[1], sys.argv[2], int(sys.argv[3])
    report(asyncio.run(_scenario(shell_arg, workspace_arg, free_arg)))
