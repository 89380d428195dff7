"""``--audit``: one JSON line per decision and per result, with the caller, the session, the
tool, the arguments' digest, the decision and its source, the outcome code and the execution
id; appended and synced in batches."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from mcp_types import ElicitResult

from fastgate import PermissionConfig, ToolRegistry
from fastgate.builtin import register_builtins
from fastgate.model import Decision, DecisionSource
from fastgate.permissions import AuditEvent, NetworkAuditEvent, NetworkAuditSink
from fastgate.serve import Gateway, GatewayAudit
from fastgate.serve._audit import WITHHELD, withhold_arguments
from tests.serve.kit import (
    ERAS,
    client,
    executor,
    fastgate_meta,
    post_modern,
    serving,
    tokens_file,
)


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
    # Denied outright by a rule, so not listed: refused as an unknown name, before any decision.
    assert [(e["event"], e["code"]) for e in events(denied)] == [("result", "UNKNOWN_TOOL")]
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


SECRET = "sk-live-SUPERSECRET-4242"


async def test_no_line_carries_argument_text(tmp_path: Path) -> None:
    """Arguments reach the audit as their digest only: the resolver's reasons quote them (``rule
    Bash(curl:*) denies `curl ...` ``), and the lines keep the rule and the source without the
    quote."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    path = tmp_path / "audit.jsonl"
    audit = GatewayAudit(path)
    tools = ToolRegistry()
    register_builtins(tools, include=["bash", "read", "write"])
    permissions = PermissionConfig(
        deny=["Bash(curl:*)"], ask=["Bash(git push:*)"], allow=["Bash(echo:*)"]
    )
    served = executor(
        tools,
        permissions=permissions,
        audit=audit,
        context_defaults={"workspace_root": str(workspace)},
    )
    gateway = Gateway(
        served,
        tokens=tokens_file(tmp_path / "t.json"),
        audit=audit,
        approvals="deny",
        workspace=str(workspace),
        rate_limit=None,
    )
    calls = [
        ("bash", {"command": f"curl -H 'Authorization: Bearer {SECRET}' https://x"}),
        ("bash", {"command": f"git push https://user:{SECRET}@example.com/r.git"}),
        ("bash", {"command": f"echo `{SECRET}`"}),
        ("write", {"file_path": f"out-{SECRET}.txt", "content": SECRET}),
        ("read", {"file_path": f"/etc/{SECRET}"}),
        ("bash", {"command": 5, "x": SECRET}),
        ("nope", {"k": SECRET}),
    ]
    async with serving(gateway) as url, httpx.AsyncClient(timeout=30) as http:
        for number, (name, arguments) in enumerate(calls, 1):
            call = {"name": name, "arguments": arguments}
            await post_modern(
                http, url, "tools/call", call, token="alice-secret-token", request_id=number
            )
    await audit.aclose()
    served.dispose()
    text = path.read_text()
    assert SECRET not in text and "Bearer" not in text and "example.com" not in text
    reasons = [json.loads(line).get("reason") for line in text.splitlines()]
    assert f"rule Bash(curl:*) denies {WITHHELD}" in reasons
    assert f"rule Bash(git push:*) asks before {WITHHELD}" in reasons


def test_a_reason_is_written_without_argument_text() -> None:
    arguments = {"command": "cat /home/me/.env-4242", "n": [{"deep": "tok-9999"}]}
    assert (
        withhold_arguments("rule X denies `a` and `b`c` d", arguments)
        == f"rule X denies {WITHHELD} d"
    )
    assert withhold_arguments("a lone ` quote tok-9999", arguments) == f"a lone {WITHHELD}"
    bare = withhold_arguments("touches sensitive file /home/me/.env-4242 (tok-9999)", arguments)
    assert bare == f"touches sensitive file {WITHHELD} ({WITHHELD})"
    assert withhold_arguments("the command cannot be parsed", arguments) == (
        "the command cannot be parsed"  # a key of the arguments is the schema's, not theirs
    )


def _withheld_as_specified(reason: str, arguments: Any) -> str:
    """The rule written out plainly: the quoted span, then each word of the reason (its edge
    punctuation aside, 3 characters or more) found inside any string of the arguments."""
    first = reason.find("`")
    if first >= 0:
        last = reason.rfind("`")
        reason = reason[:first] + WITHHELD + (reason[last + 1 :] if last > first else "")
    strings: list[str] = []
    pending = [arguments]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            strings.append(item)
        elif isinstance(item, Mapping):
            pending.extend(item.values())
        elif isinstance(item, (list, tuple)):
            pending.extend(item)

    def one(word: str) -> str:
        core = word.strip("()[]{}<>,;:.!?'\"`")
        if len(core) < 3 or core == WITHHELD or not any(core in s for s in strings):
            return word
        return word.replace(core, WITHHELD)

    return re.sub(r"\S+", lambda m: one(m.group()), reason) if strings else reason


_TEXT = st.text(alphabet=st.sampled_from("ab/.-_`( )\x00\u00a0\n\u2003éx"), max_size=30)
_JSON = st.recursive(
    st.none() | st.integers() | st.booleans() | _TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None)
@given(reason=_TEXT, arguments=_JSON, pieces=st.lists(_TEXT, max_size=3))
@example(reason="x", arguments=["ab", "ba"], pieces=["a\x00a", "b\x00b"])  # across two strings
def test_withholding_matches_the_rule_written_out(
    reason: str, arguments: Any, pieces: list[str]
) -> None:
    # Words of the reason taken from the arguments, NUL bytes and Unicode spaces among them.
    reason = " ".join([reason, *pieces])
    assert withhold_arguments(reason, arguments) == _withheld_as_specified(reason, arguments)
    assert withhold_arguments(reason, [arguments, *pieces]) == _withheld_as_specified(
        reason, [arguments, *pieces]
    )


async def test_a_call_from_code_is_written_without_its_program_s_text(tmp_path: Path) -> None:
    """A program's call was not begun by the gateway: its reason is kept from the arguments of
    the calls of its session, the program among them."""
    path = tmp_path / "audit.jsonl"
    audit = GatewayAudit(path)
    audit.begin("run", "alice", "d", {"code": f"await tools.read('/x/{SECRET}')"}, "alice/s1")
    for session in ("alice/s1", "alice/other"):
        audit.record(
            AuditEvent(
                execution_id="nested",
                session_id=session,
                tool_name="read",
                decision=Decision.ASK,
                source=DecisionSource.RULE,
                reason=f"touches sensitive file /x/{SECRET}",
                signature="s",
                time=1.0,
            )
        )
    await audit.aclose()
    same, other = (json.loads(line)["reason"] for line in path.read_text().splitlines())
    assert same == f"touches sensitive file {WITHHELD}"
    assert SECRET in other  # another session's program is not this call's
