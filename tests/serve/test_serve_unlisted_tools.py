"""A tool a caller is not shown (out of its token's scope, denied outright by a rule, refused by
its mode) is, to that caller, a name no tool has: its call is refused as unknown before the
arguments are checked against its schema, and its schema never checks the call's
``Mcp-Param-*`` headers. Nothing the caller gets names its properties."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

import fastgate
from fastgate import ToolKind
from fastgate.serve import Gateway, token_digest
from tests.serve.kit import (
    ERAS,
    client,
    executor,
    fastgate_meta,
    post_modern,
    registry,
    rpc_result,
    serving,
    text_of,
)

SECRET_PROPERTIES = ("secret_path", "rotate_after_days")


@fastgate.tool(kind=ToolKind.EXECUTE)
async def vault(secret_path: str, rotate_after_days: int) -> str:
    """Rotate a vault secret.

    Args:
        secret_path: the secret.
        rotate_after_days: when to rotate it.
    """
    return "rotated"


TENANT_ADMIN = fastgate.define_tool(
    "tenant_admin",
    "Administer a tenant.",
    {
        "type": "object",
        "properties": {"tenant": {"type": "string", "x-mcp-header": "Tenant"}},
        "required": ["tenant"],
    },
    lambda tenant: "ok",
    kind=ToolKind.READ_ONLY,
)


def _tokens(tmp_path: Path) -> Path:
    """alice: no scope, default mode; bob: echo alone; carol: plan mode."""
    entries = {
        token_digest("alice-secret-token"): {"principal": "alice", "mode": None, "scope": None},
        token_digest("bob-secret-token"): {"principal": "bob", "mode": None, "scope": ["echo"]},
        token_digest("carol-secret-token"): {"principal": "carol", "mode": "plan", "scope": None},
    }
    path = tmp_path / "t.json"
    path.write_text(json.dumps(entries))
    return path


@pytest.mark.parametrize("era", ERAS)
async def test_a_call_of_an_unlisted_tool_is_answered_as_an_unknown_name(
    tmp_path: Path, era: str
) -> None:
    permissions = fastgate.PermissionConfig(deny=["forbidden", "vault"])
    gateway = Gateway(
        executor(registry(vault), permissions=permissions),
        tokens=_tokens(tmp_path),
        approvals="deny",
        rate_limit=None,
    )
    listed: dict[str, set[str]] = {}
    answers: dict[tuple[str, str], Any] = {}
    async with serving(gateway) as url:
        for who in ("alice", "bob", "carol"):
            async with client(url, era, token=f"{who}-secret-token") as mcp:
                listed[who] = {t.name for t in (await mcp.list_tools()).tools}
                for name in ("vault", "forbidden", "deploy", "made_up"):
                    answers[who, name] = await mcp.call_tool(name, {})
    gateway.executor.dispose()
    assert listed == {"alice": {"deploy", "echo"}, "bob": {"echo"}, "carol": {"echo"}}
    for (who, name), result in answers.items():
        text = text_of(result)
        if name in listed[who]:  # listed: judged on its arguments
            assert fastgate_meta(result)["code"] == "INVALID_ARGS", (who, name, text)
            continue
        assert fastgate_meta(result)["code"] == "UNKNOWN_TOOL", (who, name, text)
        assert text.startswith(f"There is no tool named {name!r}."), text
        assert not any(p in text for p in (*SECRET_PROPERTIES, "target")), (who, name, text)
        made_up = text_of(answers[who, "made_up"]).replace("'made_up'", f"{name!r}")
        assert text == made_up, (who, name)  # word for word what a made-up name gets


async def test_an_unlisted_tool_s_schema_checks_no_header(tmp_path: Path) -> None:
    """The SDK checks ``Mcp-Param-*`` headers against the schema the gateway gives it: none for
    a tool out of the caller's scope, as for a made-up name (no 400 naming the argument)."""
    gateway = Gateway(
        executor(registry(TENANT_ADMIN)),
        tokens=_tokens(tmp_path),
        approvals="deny",
        rate_limit=None,
    )
    call = {"name": "tenant_admin", "arguments": {"tenant": "acme"}}
    async with serving(gateway) as url, httpx.AsyncClient(timeout=10) as http:
        hidden = await post_modern(http, url, "tools/call", call, token="bob-secret-token")
        made_up = await post_modern(
            http, url, "tools/call", {**call, "name": "no_such_tool"}, token="bob-secret-token"
        )
        listed = await post_modern(http, url, "tools/call", call, token="alice-secret-token")
    gateway.executor.dispose()
    assert hidden.status_code == made_up.status_code == 200, hidden.text
    assert "tenant" not in hidden.text.replace("tenant_admin", "")
    assert rpc_result(hidden)["_meta"]["fastgate"]["code"] == "UNKNOWN_TOOL"
    # Listed to alice: its header declaration is checked (the header is missing).
    assert listed.status_code == 400 and "Mcp-Param-Tenant" in listed.text, listed.text
