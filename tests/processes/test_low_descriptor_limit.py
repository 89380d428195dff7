"""Commands still start in a server whose soft limit on open files is low.

The launcher moves the descriptors it was handed out of the way of the numbers the command
must get (0-2 and each passed descriptor's own). It must not ask for numbers the limit does not
allow: a server run with ``ulimit -n 128`` (containers, CI runners, systemd units set that low)
would otherwise fail every command with EINVAL.
"""

from __future__ import annotations

import asyncio
import resource
import sys
from pathlib import Path
from typing import Any

import pytest

from fastgate.builtin import LocalShell
from fastgate.sandbox import SandboxedShell, SandboxPolicy, sandbox_support
from tests.child_kit import report, run_scenario

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the launcher is Linux only"
)


async def _scenario(workspace: str) -> dict[str, Any]:
    shells: dict[str, Any] = {"local": LocalShell()}
    if sandbox_support().available:
        shells["sandboxed"] = SandboxedShell(SandboxPolicy())
    report: dict[str, Any] = {}
    for name, shell in shells.items():
        try:
            result = await shell.run(
                "echo started; echo $((6 * 7))", cwd=workspace, timeout=30, roots=[workspace]
            )
        except Exception as error:  # reported, so the test shows what failed
            report[name] = f"raised {type(error).__name__}: {error}"
        else:
            report[name] = [result.exit_code, result.output]
    return report


def _run_with_limit(limit: int, workspace: Path) -> dict[str, Any]:
    return run_scenario(
        "tests.processes.test_low_descriptor_limit", str(limit), str(workspace), timeout=120
    )


@pytest.mark.parametrize("limit", [64, 128, 256])
def test_commands_start_under_a_low_soft_limit_on_open_files(limit: int, tmp_path: Path) -> None:
    report = _run_with_limit(limit, tmp_path)
    expected = [0, "started\n42\n"]
    assert report["local"] == expected
    if sandbox_support().available:
        assert report["sandboxed"] == expected


if __name__ == "__main__":
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), hard))
    report(asyncio.run(_scenario(sys.argv[2])))
