"""``--audit``: the result line of every call carries the hash of its arguments, a repeat the
journal answers (replayed, under the first call's execution id) and a refused approval state
included."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from fastgate import PermissionConfig, SqliteToolUseStore
from fastgate.serve import Gateway, GatewayAudit
from tests.serve.kit import executor, legacy_session, post_modern, rpc_result, serving


def _digest(arguments: dict[str, Any]) -> str:
    return hashlib.sha256(
        json.dumps(arguments, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()


@pytest.mark.parametrize("where", ["header", "meta", "legacy"])
async def test_a_replayed_result_line_carries_the_argument_hash(tmp_path: Path, where: str) -> None:
    path = tmp_path / "audit.jsonl"
    audit = GatewayAudit(path)
    store = await SqliteToolUseStore.open(tmp_path / "journal.db")
    allowed = PermissionConfig(allow=["deploy"])
    served = executor(audit=audit, store=store, permissions=allowed)
    gateway = Gateway(served, audit=audit, rate_limit=None)
    arguments = {"target": "once"}
    results = []
    try:
        async with serving(gateway) as url, httpx.AsyncClient(timeout=30) as http:
            if where == "legacy":
                results = await _legacy_twice(http, url, arguments)
            else:
                for request_id in (1, 2, 3):
                    params: dict[str, Any] = {"name": "deploy", "arguments": arguments}
                    headers = {}
                    if where == "header":
                        headers["idempotency-key"] = "K1"
                    else:
                        params["_meta"] = {"fastgate/idempotency-key": "K1"}
                    answer = await post_modern(
                        http, url, "tools/call", params, request_id=request_id, headers=headers
                    )
                    results.append(rpc_result(answer))
    finally:
        served.dispose()
        await audit.aclose()
        await store.close()
    assert [r["_meta"]["fastgate"]["replayed"] for r in results][:2] == [False, True]
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    result_lines = [line for line in lines if line["event"] == "result"]
    assert len(result_lines) == len(results)
    assert [line["replayed"] for line in result_lines][:2] == [False, True]
    assert {line["arguments_sha256"] for line in result_lines} == {_digest(arguments)}


async def _legacy_twice(
    http: httpx.AsyncClient, url: str, arguments: dict[str, Any]
) -> list[dict[str, Any]]:
    """The older era: one request re-sent on its session (the journal answers it)."""
    session = await legacy_session(http, url)
    call = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "deploy", "arguments": arguments},
    }
    return [rpc_result(await http.post(url, json=call, headers=session)) for _ in range(2)]


@pytest.mark.parametrize("state", ["not a state", "fg1.e30.AAAA", ""])
async def test_a_refused_state_s_result_line_carries_the_argument_hash(
    tmp_path: Path, state: str
) -> None:
    path = tmp_path / "audit.jsonl"
    audit = GatewayAudit(path)
    gateway = Gateway(executor(audit=audit), audit=audit, rate_limit=None)
    arguments = {"target": "prod"}
    params = {
        "name": "deploy",
        "arguments": arguments,
        "requestState": state,
        "inputResponses": {
            "fastgate/approval": {"action": "accept", "content": {"decision": "once"}}
        },
    }
    try:
        async with serving(gateway) as url, httpx.AsyncClient(timeout=30) as http:
            refused = rpc_result(await post_modern(http, url, "tools/call", params))
    finally:
        gateway.executor.dispose()
        await audit.aclose()
    assert refused["isError"] is True
    assert refused["_meta"]["fastgate"]["reason"] == "invalid_request_state"
    (line,) = [json.loads(x) for x in path.read_text().splitlines()]
    assert line["event"] == "result" and line["arguments_sha256"] == _digest(arguments)
