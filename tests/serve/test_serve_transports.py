"""Streamable HTTP at /mcp in both protocol eras, /healthz, /metrics, and who may call."""

from __future__ import annotations

from pathlib import Path

import httpx
import httpx2
import pytest

from fastgate.serve import Gateway
from tests.serve.kit import (
    ACCEPT,
    ERAS,
    INITIALIZE,
    LEGACY,
    MODERN,
    client,
    executor,
    fastgate_meta,
    serving,
    text_of,
    tokens_file,
)


@pytest.mark.parametrize("era", ERAS)
async def test_both_eras_list_and_call_through_the_pipeline(era: str) -> None:
    gateway = Gateway(executor(), approvals="deny")
    async with serving(gateway) as url, client(url, era) as mcp:
        listed = await mcp.list_tools()
        assert sorted(t.name for t in listed.tools) == ["deploy", "echo"]  # forbidden: denied
        ok = await mcp.call_tool("echo", {"text": "hello"})
        assert not ok.is_error and text_of(ok) == "hello"
        meta = fastgate_meta(ok)
        assert meta["code"] is None and meta["reason"] is None and meta["replayed"] is False
        assert meta["decision_source"] == "mode" and len(meta["execution_id"]) == 32
        refused = await mcp.call_tool("deploy", {"target": "prod"})  # DEFAULT mode asks
        assert refused.is_error
        assert fastgate_meta(refused)["code"] == "PERMISSION_DENIED"
        assert fastgate_meta(refused)["reason"] == "no_approver"
        assert "needs approval" in text_of(refused)
        invalid = await mcp.call_tool("echo", {"text": 5})
        assert invalid.is_error and fastgate_meta(invalid)["code"] == "INVALID_ARGS"
        assert "text" in text_of(invalid)
        unknown = await mcp.call_tool("ecko", {})
        assert unknown.is_error and fastgate_meta(unknown)["code"] == "UNKNOWN_TOOL"
        assert "echo" in text_of(unknown)  # the close match
        denied = await mcp.call_tool("forbidden", {"text": "x"})  # not listed: no such tool
        assert denied.is_error and fastgate_meta(denied)["code"] == "UNKNOWN_TOOL"
    gateway.executor.dispose()


async def test_modern_era_cross_checks_the_routing_headers_against_the_body() -> None:
    gateway = Gateway(executor(), approvals="deny")
    async with serving(gateway) as url, httpx.AsyncClient() as http:
        envelope = {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
        }
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "x"}, "_meta": envelope},
        }
        base = {
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": MODERN,
            "mcp-method": "tools/call",
        }
        good = await http.post(url, json=body, headers={**base, "mcp-name": "echo"})
        assert good.status_code == 200 and '"hello"' not in good.text
        assert good.json()["result"]["content"][0]["text"] == "x"
        for wrong in ({**base, "mcp-name": "deploy"}, {**base, "mcp-method": "tools/list"}):
            answer = await http.post(
                url, json=body, headers={**wrong, "mcp-name": wrong.get("mcp-name", "echo")}
            )
            assert answer.status_code == 400, answer.text
            assert "does not match" in answer.json()["error"]["message"]
    assert gateway.executor.history() and len(gateway.executor.history()) == 1  # only the good
    gateway.executor.dispose()


async def test_healthz_and_metrics(tmp_path: Path) -> None:
    gateway = Gateway(executor(), tokens=tokens_file(tmp_path / "tokens.json"), approvals="deny")
    async with serving(gateway) as url, httpx.AsyncClient() as http:
        base = url.removesuffix("/mcp")
        health = await http.get(f"{base}/healthz")
        assert health.status_code == 200 and health.json() == {"status": "ok"}
        assert (await http.get(f"{base}/metrics")).status_code == 401
        bad = {"Authorization": "Bearer nope"}
        assert (await http.get(f"{base}/metrics", headers=bad)).status_code == 401
        async with client(url, LEGACY, token="alice-secret-token") as mcp:
            await mcp.call_tool("echo", {"text": "a"})
            await mcp.call_tool("deploy", {"target": "b"})
        good = {"Authorization": "Bearer bob-secret-token"}
        scraped = await http.get(f"{base}/metrics", headers=good)
        assert scraped.status_code == 200
        assert scraped.headers["content-type"].startswith("text/plain")
        text = scraped.text
        assert 'fastgate_calls_total{outcome="ok",tool="echo"} 1.0' in text
        assert 'fastgate_calls_total{outcome="PERMISSION_DENIED",tool="deploy"} 1.0' in text
        assert 'fastgate_refusals_total{code="PERMISSION_DENIED"} 1.0' in text
        assert 'fastgate_http_rejections_total{status="401"} 2.0' in text
        assert "fastgate_admission_wait_seconds_count 1.0" in text
        assert "fastgate_run_seconds_count 1.0" in text
        assert 'fastgate_queue_depth{pool="(all)"} 0.0' in text
    gateway.executor.dispose()


@pytest.mark.parametrize("era", ERAS)
async def test_tokens_name_the_caller_and_anything_else_is_401(tmp_path: Path, era: str) -> None:
    gateway = Gateway(executor(), tokens=tokens_file(tmp_path / "tokens.json"), approvals="deny")
    async with serving(gateway) as url:
        for token in (
            None,
            "wrong",
            "alice-secret-toke",
            "alice-secret-tokenx",
            "ALICE-SECRET-TOKEN",
        ):
            async with httpx.AsyncClient() as http:
                headers = {"accept": "application/json, text/event-stream"}
                if token is not None:
                    headers["authorization"] = f"Bearer {token}"
                answer = await http.post(
                    url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers=headers
                )
                assert answer.status_code == 401, token
                assert answer.headers["www-authenticate"].startswith("Bearer")
        async with client(url, era, token="alice-secret-token") as mcp:
            done = await mcp.call_tool("echo", {"text": "hi"})
            assert not done.is_error
    (result,) = gateway.executor.history()
    assert result.meta.session_id is not None and result.meta.session_id.startswith("alice")
    gateway.executor.dispose()


async def test_without_tokens_only_loopback_is_served() -> None:
    gateway = Gateway(executor(), approvals="deny")
    app = gateway.asgi()
    for address in ("10.1.2.3", "192.168.0.7", "::ffff:10.0.0.1", "2001:db8::1"):
        transport = httpx.ASGITransport(app=app, client=(address, 5000))
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as http:
            answer = await http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
            assert answer.status_code == 403, address
            assert (await http.get("/metrics")).status_code == 403
            assert (await http.get("/healthz")).status_code == 200
    gateway.executor.dispose()


async def test_a_legacy_session_is_the_principal_s_own(tmp_path: Path) -> None:
    """A session opened with alice's token answers 404 to bob's (the SDK binds it to the
    credential), so bob never acts in alice's session."""
    gateway = Gateway(executor(), tokens=tokens_file(tmp_path / "tokens.json"), approvals="deny")
    async with serving(gateway) as url:
        async with httpx.AsyncClient() as http:
            opened = await http.post(
                url,
                json=INITIALIZE,
                headers={**ACCEPT, "authorization": "Bearer alice-secret-token"},
            )
            session = opened.headers["mcp-session-id"]
            stolen = await http.post(
                url,
                json={"jsonrpc": "2.0", "id": 2, "method": "ping"},
                headers={
                    **ACCEPT,
                    "authorization": "Bearer bob-secret-token",
                    "mcp-session-id": session,
                    "mcp-protocol-version": "2025-11-25",
                },
            )
            assert stolen.status_code == 404
    gateway.executor.dispose()


def test_token_tables_refuse_what_they_cannot_use(tmp_path: Path) -> None:
    from fastgate.serve import TokensError, TokenTable

    digest = "a" * 64
    bad = [
        {"alice-secret-token": {"principal": "alice"}},  # a token, not its digest
        {digest.upper(): {"principal": "alice"}},
        {digest: {"principal": "al/ice"}},  # "/" would blur <principal>/<session>
        {digest: {"principal": ""}},
        {digest: {"principal": "alice", "mode": "godmode"}},
        {digest: {"principal": "alice", "scope": 3}},
        {digest: {"principal": "alice", "extra": 1}},
        {},
        [],
    ]
    for entry in bad:
        with pytest.raises(TokensError):
            TokenTable.from_mapping(entry)
    table = TokenTable.from_mapping({digest: {"principal": "alice", "mode": "plan"}})
    assert table.verify("x") is None
    _ = httpx2  # the SDK's client stack is importable with the serve extra
