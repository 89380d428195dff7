"""Two gateways on different ports sharing one Redis and one Postgres store serve as one: a cap
of 4 on an upstream holds across both (concurrency observed at the upstream), and a call re-sent
to the other replica returns the recorded result."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from fastgate.cli.bench.redis_server import RedisServer
from tests.mcp.servers import FIXTURE, records
from tests.serve.kit import ROOT, gateway_process, post_modern, rpc_result

pytestmark = pytest.mark.slow  # run once in CI, on the compiled build

CAP = 4


def _fixture_over_http(record: Path) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, str(FIXTURE), "http"],
        env={**os.environ, "FIXTURE_RECORD": str(record)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    assert process.stdout is not None
    port = re.fullmatch(r"PORT (\d+)\n", process.stdout.readline())
    assert port is not None, "the fixture server did not start"
    return process, f"http://127.0.0.1:{port.group(1)}/mcp"


def _most_at_once(record: Path) -> int:
    """The most calls of ``slow`` the upstream was running at once (from its start/done log)."""
    running = most = 0
    for entry in records(record):
        if entry["event"] == "start":
            running += 1
            most = max(most, running)
        elif entry["event"] in ("done", "cancelled"):
            running -= 1
    return most


async def test_two_replicas_serve_as_one(
    tmp_path: Path, redis_server: RedisServer, postgres_url: str
) -> None:
    record = tmp_path / "upstream.jsonl"
    upstream, url = _fixture_over_http(record)
    try:
        config = tmp_path / "mcp.json"
        config.write_text(
            json.dumps({"mcpServers": {"fx": {"type": "http", "url": url, "max_concurrency": CAP}}})
        )
        settings = tmp_path / "settings.json"
        settings.write_text(json.dumps({"permissions": {"allow": ["mcp__fx"]}}))
        key = tmp_path / "state.key"
        key.write_text("ab" * 32)
        common = (
            "--no-discover", "--builtin", "none", "--rate-limit", "0",
            "--mcp-config", str(config), "--settings", str(settings),
            "--redis", redis_server.url, "--store", postgres_url, "--state-key-file", str(key),
        )  # fmt: skip
        with (
            gateway_process(*common, cwd=tmp_path) as first,
            gateway_process(*common, cwd=tmp_path) as second,
        ):
            assert first.url != second.url
            async with httpx.AsyncClient(timeout=60) as http:

                async def slow(url: str, n: int) -> dict[str, Any]:
                    params = {
                        "name": "mcp__fx__slow",
                        "arguments": {"seconds": 0.3, "tag": f"t{n}"},
                    }
                    headers = {"mcp-client-session": f"caller-{n}"}
                    return rpc_result(
                        await post_modern(http, url, "tools/call", params, headers=headers)
                    )

                started = time.monotonic()
                results = await asyncio.gather(
                    *(slow(gw.url, n) for n in range(12) for gw in (first, second))
                )
                took = time.monotonic() - started
                assert all(r["isError"] is False for r in results), results
                # A call re-sent to the other replica: the recorded result, nothing run again.
                call = {"name": "mcp__fx__echo", "arguments": {"text": "once"}}
                keyed = {"idempotency-key": "replica-key"}
                there = rpc_result(
                    await post_modern(http, first.url, "tools/call", call, headers=keyed)
                )
                here = rpc_result(
                    await post_modern(
                        http, second.url, "tools/call", call, headers=keyed, request_id=2
                    )
                )
    finally:
        upstream.terminate()
        upstream.wait(20)
        if upstream.stdout is not None:
            upstream.stdout.close()
    assert _most_at_once(record) == CAP  # 24 calls from two replicas, never more than 4 at once
    assert took >= 24 / CAP * 0.3 * 0.9
    assert there["_meta"]["fastgate"]["replayed"] is False
    assert here["_meta"]["fastgate"]["replayed"] is True
    assert here["_meta"]["fastgate"]["execution_id"] == there["_meta"]["fastgate"]["execution_id"]
    _ = ROOT
