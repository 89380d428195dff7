"""MCP results with base64 that is not base64, the truth of a server's status once its process
has exited, and code-mode programs that print a flood of output."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from fastgate import ErrorCode, ExecutionContext, PermissionMode, ToolExecutor, ToolRegistry
from fastgate.codemode import sandbox_missing
from fastgate.mcp import MCPServerConfig
from tests.mcp.servers import assert_settled, fixture, running

CODEMODE_MISSING = sys.platform != "linux" or bool(sandbox_missing())
if not CODEMODE_MISSING:
    from tests.codemode_kit import (
        Env,
        env_fixture,  # noqa: F401  (the fixture "env")
        noop_tool,
        run,
    )

CTX = ExecutionContext(session_id="s1")

# -- base64 payloads that are not base64 ---------------------------------------------------------

# A stdio MCP server written byte for byte: its one tool, ``media``, answers with a text block,
# a block of the ``kind`` asked for whose base64 payload is ``data`` as given, and a text block.
MEDIA_SERVER = textwrap.dedent(
    """
    import json, sys

    TOOL = {
        "name": "media",
        "description": "Blocks with the payload given.",
        "inputSchema": {
            "type": "object",
            "properties": {"kind": {"type": "string"}, "data": {"type": "string"}},
            "required": ["kind", "data"],
        },
    }

    def send(message):
        sys.stdout.write(json.dumps(message) + "\\n")
        sys.stdout.flush()

    def block(kind, data):
        if kind == "resource":
            return {"type": "resource", "resource": {"uri": "file:///a.bin", "blob": data}}
        mime = "image/png" if kind == "image" else "audio/wav"
        return {"type": kind, "data": data, "mimeType": mime}

    for line in sys.stdin:
        message = json.loads(line)
        request_id, method = message.get("id"), message.get("method")
        params = message.get("params") or {}
        if request_id is None:
            continue
        if method == "initialize":
            result = {
                "protocolVersion": params.get("protocolVersion", "2025-06-18"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "media", "version": "0"},
            }
        elif method == "tools/list":
            result = {"tools": [TOOL]}
        elif method == "tools/call":
            args = params["arguments"]
            content = [
                {"type": "text", "text": "before"},
                block(args["kind"], args["data"]),
                {"type": "text", "text": "after"},
            ]
            result = {"content": content}
        else:
            send({"jsonrpc": "2.0", "id": request_id,
                  "error": {"code": -32601, "message": "Method not found"}})
            continue
        send({"jsonrpc": "2.0", "id": request_id, "result": result})
    """
)

NOT_BASE64 = {
    "prose": "this is not base64!",
    "line breaks": "iVBORw0KGgo=\niVBORw0KGgo=",
    "trailing newline": "iVBORw0KGgoAAAAN\n",
    "spaces": "iVBO Rw0K",
    "url-safe alphabet": "iVBO-w0K_go=",
    "missing padding": "iVBORw0KGg",
    "too much padding": "iVBORw0KGgo====",
    "padding inside": "iV==Rw0K",
    "non-ASCII": "iVBÖRw0KGgo=",
    "NUL": "iVBORw0K\x00Ggo=",
    "markup": '"><script>alert(1)</script>',
}


def media_server(tmp_path: Path) -> MCPServerConfig:
    script = tmp_path / "media_server.py"
    script.write_text(MEDIA_SERVER)
    return MCPServerConfig("md", command=[sys.executable, str(script)])


async def media_results(tmp_path: Path, calls: list[dict[str, str]]) -> list[Any]:
    registry = ToolRegistry()
    async with running(registry, media_server(tmp_path)) as bridge:
        executor = ToolExecutor(registry, mode=PermissionMode.YOLO)
        results = [await executor.execute("mcp__md__media", args, CTX) for args in calls]
        assert_settled(executor, bridge, calls=len(calls))
    return results


@pytest.mark.parametrize("kind", ["image", "audio", "resource"])
async def test_a_block_whose_base64_is_not_base64_is_left_out_with_a_note(
    tmp_path: Path, kind: str
) -> None:
    spellings = list(NOT_BASE64.values())
    results = await media_results(tmp_path, [{"kind": kind, "data": d} for d in spellings])
    field = "blob" if kind == "resource" else "data"
    for data, result in zip(spellings, results, strict=True):
        assert result.ok, result.content
        before, note, after = result.content
        # The server's other blocks are kept; the bad one is a note in its place.
        assert before == {"type": "text", "text": "before"}
        assert after == {"type": "text", "text": "after"}
        assert note["type"] == "text"
        assert f"{kind!r} block left out" in note["text"]
        assert f"its {field!r} is not valid base64" in note["text"]
        assert data not in json.dumps(result.content, ensure_ascii=False), data
        assert data not in json.dumps(result.value, ensure_ascii=False), data


@pytest.mark.parametrize("kind", ["image", "audio", "resource"])
async def test_valid_base64_passes_unchanged(tmp_path: Path, kind: str) -> None:
    spellings = ["", "QQ==", "QUI=", "QUJD", "iVBORw0KGgoAAAANSUhEUgAAAAE+/w=="]
    results = await media_results(tmp_path, [{"kind": kind, "data": d} for d in spellings])
    for data, result in zip(spellings, results, strict=True):
        assert result.ok, result.content
        block = result.content[1]
        assert block["type"] == kind
        payload = block["resource"]["blob"] if kind == "resource" else block["data"]
        assert payload == data


# -- status() after the server process exited ------------------------------------------------


def kill_and_wait(pid: int, sig: signal.Signals) -> None:
    """Send ``sig`` to ``pid`` and block (the event loop too, on purpose: the bridge gets no
    chance to notice) until it has exited, on its pidfd."""
    fd = os.pidfd_open(pid)
    try:
        os.kill(pid, sig)
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        assert poller.poll(30_000), f"the server {pid} did not exit"
    finally:
        os.close(fd)


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="Linux only")
# (not SIGHUP: a server started under nohup, as a CI job may be, inherits it ignored)
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
async def test_status_is_not_ready_once_the_server_process_exited(sig: signal.Signals) -> None:
    registry = ToolRegistry()
    async with running(registry, fixture()) as bridge:
        executor = ToolExecutor(registry, mode=PermissionMode.YOLO)
        assert bridge.status()["fx"]["state"] == "ready"
        assert (await executor.execute("mcp__fx__echo", {"text": "a"}, CTX)).ok
        pid = bridge.status()["fx"]["pid"]
        kill_and_wait(pid, sig)
        # The loop has not run since the exit: what status() says comes from the process.
        status = bridge.status()["fx"]
        assert status["state"] == "restarting", status
        assert status["last_error"], status
        # A call fails at once, unsent, rather than being written to a dead server.
        failed = await executor.execute("mcp__fx__echo", {"text": "b"}, CTX)
        assert failed.error is not None and failed.error.code == ErrorCode.TOOL_ERROR
        assert failed.error.details["reason"] == "server_unavailable"
        assert failed.error.details["sent"] is False
        assert failed.error.retryable
        # wait_for("ready") waits for the restart, not for the ready state of the dead one.
        async with asyncio_timeout(60):
            await bridge.wait_for("fx", state="ready")
        status = bridge.status()["fx"]
        assert status["pid"] != pid and status["restarts"] >= 1
        assert (await executor.execute("mcp__fx__echo", {"text": "c"}, CTX)).ok
        assert_settled(executor, bridge, calls=3)


def asyncio_timeout(seconds: float) -> Any:
    import asyncio

    return asyncio.timeout(seconds)


# -- code mode: a flood of output ----------------------------------------------------------------

needs_codemode = pytest.mark.skipif(
    CODEMODE_MISSING, reason=f"code mode's sandbox is not available here: {sandbox_missing()}"
)

# Ways to print about 40 MB, each between two tool calls, ending with a last line.
FLOODS = {
    "many prints": "for i in range(400_000):\n    print('x' * 99)",
    "one huge write": "sys.stdout.write('x' * 40_000_000)",
    "to stderr": "for i in range(40):\n    print('e' * 1_000_000, file=sys.stderr)",
    "multibyte text": "for i in range(10):\n    print('\u00e9\u4e2d\U0001f600' * 1_000_000)",
    "from threads": (
        "import threading\n"
        "def flood():\n"
        "    for i in range(10):\n"
        "        print('t' * 1_000_000)\n"
        "threads = [threading.Thread(target=flood) for _ in range(4)]\n"
        "for t in threads: t.start()\n"
        "for t in threads: t.join()"
    ),
}
_MARKER = re.compile(r"\n\[\.\.\. (\d+) characters cut \.\.\.\]\n")


def program(flood: str, end: str = "print('THE END')") -> str:
    return f"import sys\nprint('HEAD')\nawait tools.noop()\n{flood}\nawait tools.noop()\n{end}\n"


@needs_codemode
@pytest.mark.parametrize("flood", list(FLOODS))
async def test_a_program_that_floods_its_output_ends_with_it_cut_and_its_calls(
    env: Env, flood: str
) -> None:
    executor = env.make(noop_tool())
    result = await run(executor, program(FLOODS[flood]))
    assert result.ok, str(result.content)[:2000]
    stdout = result.value["stdout"]
    assert len(stdout) <= 30_000
    assert stdout.startswith("HEAD\n") and stdout.endswith("THE END\n")
    found = _MARKER.search(stdout)
    assert found is not None, stdout[:200]
    assert int(found.group(1)) > 25_000_000  # the count says how much was printed
    assert [(c["name"], c["ok"]) for c in result.value["calls"]] == [("noop", True)] * 2
    assert result.content.endswith("Tool calls:\n- noop: ok\n- noop: ok")


@needs_codemode
async def test_the_cut_counts_every_character_printed(env: Env) -> None:
    executor = env.make(noop_tool())
    printed = 3 + 9_000_000 + 7 + 3_000_000 + 4  # "HD\n", a flood, "MIDDLE\n", a flood, "END\n"
    code = (
        "import sys\nprint('HD')\nsys.stdout.write('a' * 9_000_000)\nprint('MIDDLE')\n"
        "sys.stdout.write('b' * 3_000_000)\nprint('END')\n"
    )
    result = await run(executor, code)
    assert result.ok, str(result.content)[:2000]
    stdout = result.value["stdout"]
    found = _MARKER.search(stdout)
    assert found is not None
    kept = len(stdout) - len(found.group(0))
    assert int(found.group(1)) + kept == printed
    assert stdout.startswith("HD\naaa") and stdout.endswith("bbbEND\n")


@needs_codemode
async def test_a_flood_then_an_exception_keeps_the_output_cut_and_the_calls(env: Env) -> None:
    executor = env.make(noop_tool())
    code = program(FLOODS["one huge write"], end="raise ValueError('after the flood')")
    result = await run(executor, code)
    assert result.error is not None and result.error.code == ErrorCode.TOOL_FAILURE
    assert result.error.details["reason"] == "exception"
    assert [c["ok"] for c in result.error.details["calls"]] == [True, True]
    assert "characters cut" in result.content
    assert "ValueError: after the flood" in result.content
    assert len(result.content) < 70_000
