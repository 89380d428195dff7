"""``fastgate serve`` as users run it: discovery of the workspace's settings and .mcp.json, the
built-ins it is told to serve, stdio, bad usage, and a shutdown that leaves no process."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from fastgate.cli.serve import listening_socket
from mcp import Client, StdioServerParameters
from tests.mcp.servers import FIXTURE, HOSTILE, alive
from tests.processes_kit import until_dead
from tests.serve.kit import (
    ERAS,
    LEGACY,
    MODERN,
    ROOT,
    client,
    fastgate_meta,
    gateway_process,
    post_modern,
    text_of,
)

# The processes and the kernel it exercises are the same under both builds and both loops:
# run once, in the compiled build, on uvloop.
pytestmark = pytest.mark.slow


def write(path: Path, content: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(content))
    return path


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "src" / "a.txt").write_text("alpha\n")
    write(
        project / ".claude" / "settings.json",
        {
            "permissions": {
                "deny": ["grep", "mcp__fx__crash"],
                "allow": ["mcp__fx"],
                "defaultMode": "acceptEdits",
            }
        },
    )
    write(
        project / ".mcp.json",
        {"mcpServers": {"fx": {"command": sys.executable, "args": [str(FIXTURE), "stdio"]}}},
    )
    return project


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.mark.parametrize("era", ERAS)
async def test_discovery_serves_the_workspace_as_fastgate_call_reads_it(
    workspace: Path, home: Path, era: str
) -> None:
    with gateway_process(
        "--builtin", "read,grep,write", cwd=workspace, env={"HOME": str(home)}
    ) as gw:
        async with client(gw.url, era) as mcp:
            names = {t.name for t in (await mcp.list_tools()).tools}
            assert {"read", "write", "mcp__fx__echo", "mcp__fx__add"} <= names
            assert not names & {"grep", "bash", "glob", "mcp__fx__crash"}  # denied, or not served
            read = await mcp.call_tool("read", {"file_path": "src/a.txt"})
            assert not read.is_error and "alpha" in text_of(read)
            written = await mcp.call_tool("write", {"file_path": "src/b.txt", "content": "beta\n"})
            assert not written.is_error, text_of(written)  # acceptEdits, from the settings
            assert fastgate_meta(written)["decision_source"] == "mode"
            upstream = await mcp.call_tool("mcp__fx__echo", {"text": "through"})
            assert text_of(upstream) == "through"
    assert (workspace / "src" / "b.txt").read_text() == "beta\n"
    assert (workspace / ".fastgate" / "serve.db").exists()  # the default journal


@pytest.mark.parametrize("era", ERAS)
async def test_a_call_the_journal_cannot_record_does_not_run(
    workspace: Path, home: Path, tmp_path: Path, era: str
) -> None:
    """Every call goes to the store: with the store unreachable, a call without a key is refused
    before its side effect, as a keyed one is."""
    unreachable = f"postgresql://postgres@/postgres?host={tmp_path}/no-server&connect_timeout=1"
    pytest.importorskip("psycopg", reason="the postgres extra is not installed")
    with gateway_process(
        "--builtin", "write", "--store", unreachable, cwd=workspace, env={"HOME": str(home)}
    ) as gw:
        async with client(gw.url, era) as mcp:
            written = await mcp.call_tool("write", {"file_path": "src/b.txt", "content": "beta\n"})
    assert written.is_error and fastgate_meta(written)["code"] == "PERSISTENCE_FAILED"
    assert not (workspace / "src" / "b.txt").exists()


async def test_a_server_the_settings_disable_is_not_served(workspace: Path, home: Path) -> None:
    write(home / ".claude" / "settings.json", {"disabledMcpjsonServers": ["fx"]})
    with gateway_process("--builtin", "read", cwd=workspace, env={"HOME": str(home)}) as gw:
        async with client(gw.url, LEGACY) as mcp:
            names = {t.name for t in (await mcp.list_tools()).tools}
    assert names == {"read"}


async def test_shutdown_leaves_no_process(workspace: Path, home: Path) -> None:
    with gateway_process("--builtin", "none", cwd=workspace, env={"HOME": str(home)}) as gw:
        async with client(gw.url, LEGACY) as mcp:
            server_pid = int(text_of(await mcp.call_tool("mcp__fx__pid", {})))
            child_pid = int(text_of(await mcp.call_tool("mcp__fx__spawn_child", {})))
        pids = [gw.pid, server_pid, child_pid]
        assert all(alive(pid) for pid in pids)
        assert gw.stop(signal.SIGTERM) == 0, gw.stderr()
        await until_dead(pids[1:])
    assert not any(alive(pid) for pid in pids)


def processes_naming(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline and alive(int(entry.name)):
                found.append(int(entry.name))
    return found


async def test_an_upstream_that_hangs_at_start_delays_serving_by_the_wait_alone(
    workspace: Path, home: Path
) -> None:
    """A server that never answers its handshake (its startup_timeout is 30 s) next to one that
    does: the gateway serves within --upstream-wait, the good server's tools listed; on
    shutdown the hung one is gone too."""
    marker = f"hung-{os.getpid()}-{id(workspace)}"
    hung = {"command": sys.executable, "args": [str(HOSTILE), "garbage", marker]}
    fx = {"command": sys.executable, "args": [str(FIXTURE), "stdio"]}
    write(workspace / ".mcp.json", {"mcpServers": {"fx": fx, "hung": hung}})
    began = time.monotonic()
    with gateway_process(
        "--builtin", "none", "--upstream-wait", "3", cwd=workspace, env={"HOME": str(home)}
    ) as gw:
        took = time.monotonic() - began
        assert took < 20.0, took
        async with client(gw.url, LEGACY) as mcp:
            names = {t.name for t in (await mcp.list_tools()).tools}
        assert processes_naming(marker)  # still trying, in the background
        assert gw.stop(signal.SIGTERM) == 0, gw.stderr()
    assert "mcp__fx__echo" in names and not any(n.startswith("mcp__hung__") for n in names)
    await until_dead(processes_naming(marker))
    assert not processes_naming(marker)


@pytest.mark.parametrize("era", ERAS)
async def test_stdio_serves_one_client_as_local(workspace: Path, home: Path, era: str) -> None:
    parameters = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "fastgate",
            "serve",
            "--stdio",
            "--builtin",
            "read",
            "--no-discover",
            "--mcp-config",
            str(workspace / ".mcp.json"),
            "--workspace",
            str(workspace),
        ],
        env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "HOME": str(home)},
        cwd=str(workspace),
    )
    async with Client(parameters, mode=era) as mcp:
        names = {t.name for t in (await mcp.list_tools()).tools}
        assert "read" in names and "mcp__fx__echo" in names
        read = await mcp.call_tool("read", {"file_path": "src/a.txt"})
        assert "alpha" in text_of(read)
        asked = await mcp.call_tool("mcp__fx__echo", {"text": "x"})  # no rules: it asks
        assert asked.is_error and fastgate_meta(asked)["reason"] == "no_approver"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--listen", "nowhere"], "--listen"),
        (["--builtin", "read,sparkle"], "sparkle"),
        (["--tokens", "missing.json"], "--tokens"),
        (["--store", "mysql://x"], "--store"),
        (["--mode", "godmode"], "godmode"),
        (["--stdio", "--tokens", "t.json"], "--tokens"),
        (["--workspace", "no/such/dir"], "not a directory"),
        (["--rate-limit", "-1"], "--rate-limit"),
        (["--rate-limit", "nan"], "--rate-limit"),
        (["--read-timeout", "0"], "--read-timeout"),
        (["--read-timeout", "-1"], "--read-timeout"),
        (["--upstream-wait", "-1"], "--upstream-wait"),
        (["--upstream-wait", "nan"], "--upstream-wait"),
        (["--read-timeout", "nan"], "--read-timeout"),
        (["--redis", "notaurl"], "--redis"),
        (["--redis", "http://localhost:6379"], "--redis"),
    ],
)
def test_bad_usage_exits_2_naming_the_problem(
    tmp_path: Path, argv: list[str], message: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fastgate", "serve", "--no-discover", *argv],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    _ = MODERN


@pytest.mark.parametrize("era", ERAS)
async def test_code_mode_serves_run_code_alone(workspace: Path, home: Path, era: str) -> None:
    settings = write(workspace / "extra.json", {"permissions": {"allow": ["run_code"]}})
    args = ("--no-discover", "--code-mode", "--builtin", "read", "--settings", str(settings))
    with gateway_process(*args, cwd=workspace, env={"HOME": str(home)}) as gw:
        async with client(gw.url, era) as mcp:
            names = [t.name for t in (await mcp.list_tools()).tools]
            program = "print(await tools.read(file_path='src/a.txt'))"
            ran = await mcp.call_tool("run_code", {"code": program})
            direct = await mcp.call_tool("read", {"file_path": "src/a.txt"})
    assert names == ["run_code"]
    assert not ran.is_error and "alpha" in text_of(ran), text_of(ran)
    assert direct.is_error and fastgate_meta(direct)["reason"] == "code_mode"


async def test_the_gateway_s_connections_send_small_writes_at_once() -> None:
    """Every accepted connection has TCP_NODELAY, on both loops: a reply written in two parts
    (headers, then the body or an event) is not held back until the client ACKs the first."""
    sock = listening_socket("127.0.0.1", 0)
    loop = asyncio.get_running_loop()
    accepted: asyncio.Future[asyncio.StreamWriter] = loop.create_future()
    server = await asyncio.start_server(lambda _r, w: accepted.set_result(w), sock=sock)
    try:
        _, client_writer = await asyncio.open_connection(*sock.getsockname())
        served = await accepted
        nodelay = served.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        client_writer.close()
        served.close()
    finally:
        server.close()
        await server.wait_closed()
    assert nodelay != 0


async def test_the_heap_left_by_startup_is_frozen_once_the_gateway_is_up(
    workspace: Path, home: Path, tmp_path: Path
) -> None:
    """What startup leaves alive (modules, classes, schemas) is out of the collector's reach,
    so a full collection under load walks only what calls made since."""
    probe = tmp_path / "probe"
    probe.mkdir()
    report = tmp_path / "frozen.txt"
    (probe / "sitecustomize.py").write_text(
        "import atexit, gc, os\n"
        "atexit.register(lambda: open(os.environ['FROZEN_REPORT'], 'w')"
        ".write(str(gc.get_freeze_count())))\n"
    )
    env = {
        "HOME": str(home),
        "PYTHONPATH": f"{probe}{os.pathsep}{ROOT / 'src'}",
        "FROZEN_REPORT": str(report),
    }
    with gateway_process("--builtin", "read", cwd=workspace, env=env) as gw:
        async with client(gw.url, MODERN) as mcp:
            read = await mcp.call_tool("read", {"file_path": "src/a.txt"})
            assert not read.is_error, text_of(read)
        assert gw.stop(signal.SIGTERM) == 0, gw.stderr()
    assert int(report.read_text()) > 20_000  # about 100,000 on this build


@pytest.mark.parametrize("listen", ["0.0.0.0:0", "127.0.0.1:0"])
async def test_without_tokens_only_this_machine_s_host_names_are_served(
    workspace: Path, home: Path, listen: str
) -> None:
    """Served to this machine alone (no --tokens), the gateway answers only requests naming it
    by a loopback name, whatever address it listens on: a page a browser here loaded from
    another name (DNS rebinding) is refused."""
    with gateway_process(
        "--no-discover", "--listen", listen, cwd=workspace, env={"HOME": str(home)}
    ) as gw:
        port = gw.url.rsplit(":", 1)[1].split("/", 1)[0]
        url = f"http://127.0.0.1:{port}/mcp"
        async with httpx.AsyncClient(timeout=30) as http:
            for host in ("evil.example", f"evil.example:{port}", f"127.0.0.1.evil.example:{port}"):
                refused = await post_modern(http, url, "tools/list", {}, headers={"host": host})
                assert refused.status_code == 421, (host, refused.status_code)
            for host in (f"127.0.0.1:{port}", f"localhost:{port}"):
                served = await post_modern(http, url, "tools/list", {}, headers={"host": host})
                assert served.status_code == 200, (host, served.status_code)
