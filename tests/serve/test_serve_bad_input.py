"""Bad input gets a clear answer and leaves nothing behind: oversized bodies, malformed
JSON-RPC, unknown methods, batches, slow clients, floods (429 beyond the request rate,
RESOURCE_EXHAUSTED when the scheduler's queue is full)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

import fastgate
from fastgate import SchedulerLimits, ToolKind
from fastgate.serve import Gateway
from tests.serve.kit import (
    ACCEPT,
    INITIALIZE,
    MODERN,
    client,
    executor,
    legacy_session,
    post_modern,
    registry,
    rpc_result,
    serving,
    tokens_file,
)


def _error(response: httpx.Response) -> dict[str, Any]:
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
        message = json.loads(data[-1])
    else:
        message = response.json()
    assert "error" in message, message
    found: dict[str, Any] = message["error"]
    return found


def _settled(gateway: Gateway) -> None:
    """Nothing ran, nothing is held."""
    assert gateway.executor.history() == []
    stats = gateway.executor.scheduler.stats()
    assert stats.in_flight == 0 and stats.queued == 0


async def test_oversized_bodies_are_413_before_anything_is_read_into_the_pipeline() -> None:
    gateway = Gateway(executor(), approvals="deny", max_body=64 * 1024)
    big = {"name": "echo", "arguments": {"text": "x" * (128 * 1024)}}
    async with serving(gateway) as url, httpx.AsyncClient() as http:
        modern = await post_modern(http, url, "tools/call", big)
        assert modern.status_code == 413
        headers = await legacy_session(http, url)
        legacy = await http.post(
            url,
            json={"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": big},
            headers=headers,
        )
        assert legacy.status_code == 413

        async def chunks() -> Any:  # no content-length: counted as it arrives
            for _ in range(40):
                yield b"x" * 4096

        streamed = await http.post(
            url, content=chunks(), headers={**ACCEPT, "content-type": "application/json"}
        )
        assert streamed.status_code == 413
    _settled(gateway)
    gateway.executor.dispose()


async def test_malformed_json_rpc_unknown_methods_and_batches_get_json_rpc_errors() -> None:
    gateway = Gateway(executor(), approvals="deny")
    async with serving(gateway) as url, httpx.AsyncClient() as http:
        modern_headers = {
            **ACCEPT,
            "content-type": "application/json",
            "mcp-protocol-version": MODERN,
            "mcp-method": "tools/call",
        }
        bad_json = await http.post(
            url, content=b'{"jsonrpc": "2.0", "id": 1, "method": ', headers=modern_headers
        )
        assert _error(bad_json)["code"] == -32700
        batch = await http.post(url, json=[INITIALIZE, INITIALIZE], headers=modern_headers)
        assert _error(batch)["code"] == -32600
        unknown = await post_modern(http, url, "tools/sparkle", {})
        assert _error(unknown)["code"] == -32601
        no_name = await post_modern(http, url, "tools/call", {"arguments": {}})
        assert _error(no_name)["code"] in (-32602, -32600)

        headers = await legacy_session(http, url)
        legacy_bad = await http.post(
            url, content=b"{nope", headers={**headers, "content-type": "application/json"}
        )
        assert legacy_bad.status_code == 400 and _error(legacy_bad)["code"] == -32700
        legacy_batch = await http.post(
            url, json=[{"jsonrpc": "2.0", "id": 7, "method": "ping"}] * 2, headers=headers
        )
        assert legacy_batch.status_code >= 400
        legacy_unknown = await http.post(
            url,
            json={"jsonrpc": "2.0", "id": 8, "method": "tools/sparkle", "params": {}},
            headers=headers,
        )
        assert _error(legacy_unknown)["code"] == -32601
        not_rpc = await http.post(url, json={"hello": "world"}, headers=headers)
        assert not_rpc.status_code >= 400
        # The gateway still serves, in both eras.
        fine = await post_modern(
            http, url, "tools/call", {"name": "echo", "arguments": {"text": "ok"}}
        )
        assert rpc_result(fine)["isError"] is False
    assert len(gateway.executor.history()) == 1
    gateway.executor.dispose()


@pytest.mark.parametrize("arguments", [[1, 2], "hi", 3, True])
async def test_arguments_that_are_not_an_object_are_an_invalid_args_result(
    arguments: Any,
) -> None:
    """A refused call is a result the model can act on, never a JSON-RPC error: arguments of the
    wrong JSON type are INVALID_ARGS in both eras, and nothing runs."""
    gateway = Gateway(executor(), approvals="deny")
    params = {"name": "echo", "arguments": arguments}
    async with serving(gateway) as url, httpx.AsyncClient() as http:
        modern = await post_modern(http, url, "tools/call", params)
        headers = await legacy_session(http, url)
        call = {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": params}
        legacy = await http.post(url, json=call, headers=headers)
    for response in (modern, legacy):
        result = rpc_result(response)
        assert result["isError"] is True
        assert result["_meta"]["fastgate"]["code"] == "INVALID_ARGS"
        assert "object" in result["content"][0]["text"]
    assert {r.error.code for r in gateway.executor.history() if r.error} == {
        fastgate.ErrorCode.INVALID_ARGS
    }
    gateway.executor.dispose()


async def test_a_slow_client_gets_408_and_holds_nothing() -> None:
    gateway = Gateway(executor(), approvals="deny", read_timeout=0.5)
    async with serving(gateway) as url:
        host, port = url.removeprefix("http://").removesuffix("/mcp").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()
        writer.write(
            b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            b"accept: application/json, text/event-stream\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body[:5]
        )
        await writer.drain()
        async with asyncio.timeout(10):
            head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408"), head
        writer.close()
        await writer.wait_closed()
        async with client(url, MODERN) as mcp:  # and it still serves everyone else
            assert not (await mcp.call_tool("echo", {"text": "x"})).is_error
    assert 'fastgate_http_rejections_total{status="408"} 1.0' in gateway.metrics.render().decode()
    gateway.executor.dispose()


async def test_a_flood_beyond_the_request_rate_is_429_for_that_principal_only(
    tmp_path: Path,
) -> None:
    gateway = Gateway(
        executor(), tokens=tokens_file(tmp_path / "t.json"), approvals="deny", rate_limit=(1.0, 10)
    )
    async with serving(gateway) as url, httpx.AsyncClient() as http:
        call = {"name": "echo", "arguments": {"text": "x"}}
        answers = [
            await post_modern(http, url, "tools/call", call, token="alice-secret-token")
            for _ in range(25)
        ]
        statuses = [a.status_code for a in answers]
        assert statuses[:10] == [200] * 10 and statuses.count(429) >= 12  # ~1/s refills
        limited = next(a for a in answers if a.status_code == 429)
        assert int(limited.headers["retry-after"]) >= 1
        assert "alice" in limited.json()["error_description"]
        other = await post_modern(http, url, "tools/call", call, token="bob-secret-token")
        assert other.status_code == 200  # bob is not alice
    assert len(gateway.executor.history()) == statuses.count(200) + 1
    gateway.executor.dispose()


_release: asyncio.Event | None = None  # set by the test once the refusals are in


@fastgate.tool(kind=ToolKind.READ_ONLY, parallelism="shared", is_concurrency_safe=True)
async def hold(label: str) -> str:
    """Hold a slot until the test lets go.

    Args:
        label: which call this is.
    """
    assert _release is not None
    await _release.wait()
    return "held"


@pytest.mark.parametrize("era", ["legacy", MODERN])
async def test_a_full_scheduler_queue_is_resource_exhausted_as_a_result(era: str) -> None:
    global _release
    _release = asyncio.Event()
    served = executor(registry(hold), limits=SchedulerLimits(global_limit=1, max_queue=2))
    gateway = Gateway(served, approvals="deny", rate_limit=None)
    async with serving(gateway) as url, client(url, era) as mcp:
        calls = [asyncio.ensure_future(mcp.call_tool("hold", {"label": str(i)})) for i in range(6)]
        # One holds the slot and two wait in the queue until released: the three others can
        # only be refused, however slowly the calls arrive.
        pending: set[asyncio.Future[Any]] = set(calls)
        while len(pending) > 3:
            _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        _release.set()
        results = await asyncio.gather(*calls)
    codes = sorted(((r.meta or {})["fastgate"]["code"] or "ok") for r in results)
    assert codes.count("ok") == 3 and codes.count("RESOURCE_EXHAUSTED") == 3
    refused = next(r for r in results if r.is_error)
    assert "busy" in refused.content[0].text  # type: ignore[union-attr]
    stats = served.scheduler.stats()
    assert stats.in_flight == 0 and stats.queued == 0
    served.dispose()
