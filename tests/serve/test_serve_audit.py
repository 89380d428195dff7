"""``--audit``: one JSON line per decision and per result, with the caller, the session, the
tool, the arguments' digest, the decision and its source, the outcome code and the execution
id; appended and synced in batches."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from mcp_types import ElicitResult

from fastgate.permissions import NetworkAuditEvent, NetworkAuditSink
from fastgate.serve import Gateway, GatewayAudit
from tests.serve.kit import ERAS, client, executor, fastgate_meta, serving, tokens_file


def _digest(arguments: dict[str, Any]) -> str:
    return hashlib.sha256(
        json.dumps(arguments, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()


@pytest.mark.parametrize("era", ERAS)
async def test_every_decision_and_result_is_a_line(tmp_path: Path, era: str) -> None:
    path = tmp_path / "audit.jsonl"
    audit = GatewayAudit(path)
    gateway = Gateway(executor(audit=audit), tokens=tokens_file(tmp_path / "t.json"), audit=audit)

    async def approve(context: Any, params: Any) -> ElicitResult:
        return ElicitResult(action="accept", content={"decision": "once"})

    async with serving(gateway) as url:
        async with client(
            url, era, token="alice-secret-token", elicitation_callback=approve
        ) as mcp:
            ok = await mcp.call_tool("echo", {"text": "hi"})
            asked = await mcp.call_tool("deploy", {"target": "prod"})
            denied = await mcp.call_tool("forbidden", {"text": "x"})
            unknown = await mcp.call_tool("nope", {})
    await audit.aclose()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    by_id: dict[str, list[dict[str, Any]]] = {}
    for line in lines:
        by_id.setdefault(line["execution_id"], []).append(line)
        assert line["principal"] == "alice" and line["session"].startswith("alice")
        assert isinstance(line["time"], float)

    def events(result: Any) -> list[dict[str, Any]]:
        return by_id[fastgate_meta(result)["execution_id"]]

    echo_lines = events(ok)
    assert [(e["event"], e.get("decision"), e.get("source")) for e in echo_lines] == [
        ("decision", "allow", "mode"),
        ("result", None, None),
    ]
    assert echo_lines[1]["code"] is None and echo_lines[0]["tool"] == "echo"
    assert {e["arguments_sha256"] for e in echo_lines} == {_digest({"text": "hi"})}
    deploy_lines = events(asked)
    assert [(e["event"], e.get("decision"), e.get("source")) for e in deploy_lines] == [
        ("decision", "ask", "mode"),
        ("decision", "allow", "user"),
        ("result", None, None),
    ]
    assert deploy_lines[-1]["decision_source"] == "user"
    assert deploy_lines[0]["arguments_sha256"] == _digest({"target": "prod"})
    denied_lines = events(denied)
    assert denied_lines[0]["decision"] == "deny" and denied_lines[0]["source"] == "rule"
    assert denied_lines[-1]["code"] == "PERMISSION_DENIED"
    assert [e["event"] for e in events(unknown)] == ["result"]  # refused before any decision
    assert events(unknown)[0]["code"] == "UNKNOWN_TOOL"
    if era != "legacy":  # the question of the 2026 era: its ask, and no result (nothing ran)
        first_rounds = [
            ls
            for ls in by_id.values()
            if [e["event"] for e in ls] == ["decision"] and ls[0]["tool"] == "deploy"
        ]
        assert len(first_rounds) == 1 and first_rounds[0][0]["decision"] == "ask"
    gateway.executor.dispose()


def test_the_audit_file_is_held_by_one_writer(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    first = GatewayAudit(path)
    try:
        with pytest.raises(OSError):
            GatewayAudit(path)
    finally:
        first.close()
    assert oct(path.stat().st_mode & 0o777) == "0o600"


async def test_a_refused_network_connection_is_a_line_with_its_caller(tmp_path: Path) -> None:
    """What a sandboxed call's proxy refused reaches ``--audit`` with the caller of the call
    (the executor hands it over as ``network_refused``, as for any audit sink)."""
    path = tmp_path / "audit.jsonl"
    audit = GatewayAudit(path)
    assert isinstance(audit, NetworkAuditSink)
    audit.begin("e1", "alice", _digest({"command": "curl"}))
    for execution_id, session in (("e1", "alice/s1"), ("e2", "bob/s9")):  # e2: a call from code
        audit.network_refused(
            NetworkAuditEvent(
                execution_id=execution_id,
                session_id=session,
                tool_name="bash",
                host="evil.example",
                port=443,
                reason="not_allowed",
                time=1.5,
            )
        )
    await audit.aclose()
    first, second = (json.loads(line) for line in path.read_text().splitlines())
    assert first == {
        "time": 1.5,
        "event": "network_refused",
        "principal": "alice",
        "session": "alice/s1",
        "tool": "bash",
        "host": "evil.example",
        "port": 443,
        "reason": "not_allowed",
        "execution_id": "e1",
    }
    assert second["principal"] == "bob" and second["execution_id"] == "e2"
