"""Where the tests' MCP servers are, how to start them, and the checks every bridge test makes.

The npm and PyPI servers are installed by ``scripts/setup-mcp-servers`` (``scripts/test`` runs
it); a test that needs one that is missing skips, saying what to run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from fastgate import ToolExecutor, ToolRegistry
from fastgate.mcp import MCPBridge, MCPServerConfig
from tests.pipeline_kit import assert_idle

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = Path(__file__).with_name("fixture_server.py")
LEGACY_FIXTURE = Path(__file__).with_name("legacy_fixture_server.py")
HOSTILE = Path(__file__).with_name("hostile_server.py")
INSTALLED = ROOT / "build" / "mcp-servers"
NPM = INSTALLED / "npm" / "node_modules" / "@modelcontextprotocol"
EVERYTHING = NPM / "server-everything" / "dist" / "index.js"
FILESYSTEM = NPM / "server-filesystem" / "dist" / "index.js"
TIME_VENV = INSTALLED / "venv-time" / "bin"
SETUP = "run `bash scripts/setup-mcp-servers` (scripts/test does)"


def node_server(script: Path) -> list[str]:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the npm MCP servers cannot run")
    if not script.exists():
        pytest.skip(f"{script.relative_to(ROOT)} is not installed: {SETUP}")
    return [node, str(script)]


def time_server() -> list[str]:
    program = TIME_VENV / "mcp-server-time"
    if not program.exists():
        pytest.skip(f"mcp-server-time is not installed in {TIME_VENV.parent}: {SETUP}")
    return [str(program)]


def legacy_fixture() -> list[str]:
    """The legacy fixture runs on the mcp 1.x SDK of the mcp-server-time venv."""
    python = TIME_VENV / "python"
    if not python.exists():
        pytest.skip(f"the mcp 1.x venv {TIME_VENV.parent} is not installed: {SETUP}")
    return [str(python), str(LEGACY_FIXTURE)]


def fixture(name: str = "fx", record: Path | None = None, **options: Any) -> MCPServerConfig:
    env = {"FIXTURE_RECORD": str(record)} if record is not None else {}
    return MCPServerConfig(
        name, command=[sys.executable, str(FIXTURE), "stdio"], env=env, **options
    )


def hostile(mode: str, record: Path | None = None, **options: Any) -> MCPServerConfig:
    """The hand-written server of ``hostile_server.py``, misbehaving the way ``mode`` says."""
    env = {"HOSTILE_RECORD": str(record)} if record is not None else {}
    return MCPServerConfig("h", command=[sys.executable, str(HOSTILE), mode], env=env, **options)


def records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def cancellations(path: Path) -> list[Any]:
    """The request ids of the ``notifications/cancelled`` a fixture received (tools/call ones:
    the bridge's own subscription stream is cancelled on close too)."""
    return [
        r["params"]["requestId"]
        for r in records(path)
        if r["event"] == "wire"
        and r["method"] == "notifications/cancelled"
        and not str(r["params"]["requestId"]).startswith("listen-")
    ]


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def assert_gone(pids: list[int]) -> None:
    from fastgate.mcp._stdio import process_group_members

    assert pids, "no server process was started"
    left = [pid for pid in pids if alive(pid)]
    group_left = [m for pid in pids for m in process_group_members(pid)]
    assert not left and not group_left, f"server processes left behind: {left} {group_left}"


def assert_settled(executor: ToolExecutor, bridge: MCPBridge, calls: int) -> None:
    """After the faults: nothing held, one history entry per call, no request in flight."""
    assert_idle(executor)
    assert len(executor.history()) == calls
    assert not any(link._requests for link in bridge._links.values())


def all_pids(bridge: MCPBridge) -> list[int]:
    return [pid for status in bridge.status().values() for pid in status["pids"]]


@contextlib.asynccontextmanager
async def running(
    registry: ToolRegistry, *configs: MCPServerConfig, within: float = 60.0, spawns: bool = True
) -> AsyncIterator[MCPBridge]:
    """A started bridge; on the way out it is closed and every process it started is checked
    to be gone (``spawns=False``: a test whose servers cannot even be spawned)."""
    bridge = MCPBridge(registry, configs)
    async with asyncio.timeout(within):
        await bridge.start()
    try:
        yield bridge
    finally:
        pids = all_pids(bridge)
        await bridge.aclose()
        if spawns and any(c.command is not None for c in configs):
            assert_gone(pids)
        assert not any(alive(pid) for pid in pids)


@contextlib.contextmanager
def http_fixture(record: Path | None = None) -> Iterator[tuple[str, int]]:
    """The fixture over streamable HTTP on 127.0.0.1: (url, pid). Stopped (and checked gone)
    at the end."""
    import subprocess

    env = dict(os.environ)
    if record is not None:
        env["FIXTURE_RECORD"] = str(record)
    process = subprocess.Popen(
        [sys.executable, str(FIXTURE), "http"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("PORT "), f"the HTTP fixture did not start: {line!r}"
        yield f"http://127.0.0.1:{int(line.split()[1])}/mcp", process.pid
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        if process.stdout is not None:
            process.stdout.close()
    assert not alive(process.pid)


@contextlib.contextmanager
def http_script_server(script: Path) -> Iterator[tuple[str, int]]:
    """``script`` (an MCP server over HTTP on 127.0.0.1 that prints ``PORT <n>`` once it
    listens) in a process of its own: (url, pid); killed and checked gone at the end."""
    process = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=dict(os.environ),
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("PORT "), f"the HTTP server did not start: {line!r}"
        yield f"http://127.0.0.1:{int(line.split()[1])}/mcp", process.pid
    finally:
        process.kill()
        process.wait(10)
        if process.stdout is not None:
            process.stdout.close()
    assert not alive(process.pid)
