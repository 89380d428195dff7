"""``fastgate serve --stdio`` answers every line a client sends that is a request: a request
whose id is no string or integer, a line that is not JSON, JSON that is no object, a request the
SDK cannot read all get JSON-RPC's error on stdout, nothing runs, and the session goes on.
Notifications and responses stay unanswered, and blank lines are skipped."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.processes_kit import alive
from tests.serve.kit import INITIALIZE, ROOT

# A process per test, as the other tests of fastgate serve's command line.
pytestmark = pytest.mark.slow

REPLY_TIMEOUT = 60.0  # a bound on a reply that must come, never a wait for one that must not


class StdioGateway:
    """``fastgate serve --stdio`` in a process of its own, spoken to line by line."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    @property
    def pid(self) -> int:
        return self.process.pid

    async def send(self, line: str | dict[str, Any]) -> None:
        text = line if isinstance(line, str) else json.dumps(line)
        assert self.process.stdin is not None
        self.process.stdin.write(text.encode() + b"\n")
        await self.process.stdin.drain()

    async def reply(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = await asyncio.wait_for(self.process.stdout.readline(), REPLY_TIMEOUT)
        assert line, "the gateway closed stdout"
        message: dict[str, Any] = json.loads(line)
        return message

    async def ask(self, line: str | dict[str, Any]) -> dict[str, Any]:
        await self.send(line)
        return await self.reply()

    async def tools(self, request_id: int) -> set[str]:
        """A valid tools/list: the session still serves (and nothing came before its reply)."""
        message = await self.ask({"jsonrpc": "2.0", "id": request_id, "method": "tools/list"})
        assert message.get("id") == request_id, message
        return {tool["name"] for tool in message["result"]["tools"]}


@contextlib.asynccontextmanager
async def stdio_gateway(workspace: Path, *builtins: str) -> AsyncIterator[StdioGateway]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "fastgate",
        "serve",
        "--stdio",
        "--no-discover",
        "--mode",
        "bypassPermissions",
        "--builtin",
        ",".join(builtins),
        "--workspace",
        str(workspace),
        cwd=workspace,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "HOME": str(workspace)},
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True,
    )
    gateway = StdioGateway(process)
    try:
        opened = await gateway.ask(INITIALIZE)
        assert "result" in opened, opened
        await gateway.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        yield gateway
        assert process.stdin is not None
        process.stdin.close()  # the client leaves: the gateway ends by itself
        assert await asyncio.wait_for(process.wait(), REPLY_TIMEOUT) == 0
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
    assert not alive(process.pid)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    return root


def invalid(message: dict[str, Any], code: int = -32600, request_id: Any = None) -> str:
    assert message.get("jsonrpc") == "2.0", message
    assert "id" in message and message["id"] == request_id, message
    assert type(message["id"]) is type(request_id), message
    assert "result" not in message, message
    assert message["error"]["code"] == code, message
    text: str = message["error"]["message"]
    return text


BAD_IDS: list[Any] = [{}, {"n": 1}, [], [1], True, False, 1.5, 2.0, 1e3, None]


async def test_a_request_whose_id_is_no_string_or_integer_is_refused(workspace: Path) -> None:
    async with stdio_gateway(workspace, "read,write") as gw:
        assert os.readlink(f"/proc/{gw.pid}/fd/0") == "/dev/null"  # no child reads the wire
        for number, bad in enumerate(BAD_IDS):
            for method, params in [
                ("tools/list", None),
                (
                    "tools/call",
                    {"name": "write", "arguments": {"file_path": "x.txt", "content": "x"}},
                ),
                ("notifications/cancelled", {"requestId": 1}),
            ]:
                request: dict[str, Any] = {"jsonrpc": "2.0", "id": bad, "method": method}
                if params is not None:
                    request["params"] = params
                text = invalid(await gw.ask(request))
                assert "id must be a string or an integer" in text
            assert await gw.tools(100 + number) == {"read", "write"}
        assert not (workspace / "x.txt").exists()  # the refused calls never ran
        # The same call with a valid id runs: the refusal was about the id alone.
        call = {"name": "write", "arguments": {"file_path": "x.txt", "content": "x"}}
        done = await gw.ask({"jsonrpc": "2.0", "id": "w", "method": "tools/call", "params": call})
        assert done["id"] == "w" and done["result"]["isError"] is False, done
        assert (workspace / "x.txt").read_text() == "x"


NOT_JSON = ["not json", "{", '{"jsonrpc": "2.0", "id": 1,', "{'id': 1}", "\x00", "NaNa", "}{"]
NO_OBJECT = ["5", "-1.5", '"tools/list"', "null", "true", "[]", "[1, 2]"]
BATCH = '[{"jsonrpc": "2.0", "id": 9, "method": "tools/list"}]'


UNANSWERED = [
    '{"jsonrpc": "2.0", "method": "notifications/progress", "params": 5}',
    '{"jsonrpc": "2.0", "method": "notifications/whatever"}',
    '{"method": "notifications/initialized"}',
    '{"jsonrpc": "2.0", "id": 1, "result": {}}',
    '{"jsonrpc": "2.0", "id": {}, "result": 5}',
    '{"jsonrpc": "2.0", "id": null, "error": {"code": 1, "message": "x"}}',
    "",
    "   ",
]


async def test_lines_that_are_no_json_rpc_object_get_parse_or_invalid_request(
    workspace: Path,
) -> None:
    async with stdio_gateway(workspace, "read") as gw:
        for number, line in enumerate(NOT_JSON):
            invalid(await gw.ask(line), code=-32700)
            assert await gw.tools(number) == {"read"}
        for number, line in enumerate([*NO_OBJECT, BATCH]):
            text = invalid(await gw.ask(line))
            assert "one JSON object" in text
            assert await gw.tools(100 + number) == {"read"}
        # An object that is no request either: no method, or no valid request shape.
        for number, (line, request_id) in enumerate(
            [
                ("{}", None),
                ('{"jsonrpc": "2.0", "id": 3}', 3),
                ('{"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": 5}', 4),
                ('{"jsonrpc": "2.0", "id": "s", "method": 7}', "s"),
                ('{"id": 5, "method": "tools/list"}', 5),
                ('{"jsonrpc": "1.0", "id": 6, "method": "tools/list"}', 6),
            ]
        ):
            invalid(await gw.ask(line), request_id=request_id)
            assert await gw.tools(200 + number) == {"read"}
        # Notifications and responses, well-formed or not, are never answered: the next reply
        # is the one to the line after them.
        for line in UNANSWERED:
            await gw.send(line)
            invalid(await gw.ask("not json"), code=-32700)
        assert await gw.tools(300) == {"read"}
