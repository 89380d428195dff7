"""A refusal through the gateway names only tools the caller is shown: an unknown name's
suggestions and "available tools" come from the caller's own listing, never from tools a rule
denies outright or a token's scope leaves out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

import fastgate
from fastgate.serve import Gateway, token_digest
from tests.serve.kit import (
    ERAS,
    client,
    executor,
    fastgate_meta,
    post_modern,
    rpc_result,
    serving,
    text_of,
)

HIDDEN = ("forbidden", "deploy")  # a rule denies forbidden; alice's scope leaves deploy out


@pytest.mark.parametrize("era", ERAS)
async def test_an_unknown_name_is_answered_with_listed_tools_only(tmp_path: Path, era: str) -> None:
    tokens = {
        token_digest("alice-secret-token"): {"principal": "alice", "scope": ["echo", "forbid*"]},
        token_digest("bob-secret-token"): {"principal": "bob"},
    }
    permissions = fastgate.PermissionConfig(deny=["forbidden"], allow=["deploy"])
    gateway = Gateway(executor(permissions=permissions), tokens=tokens, approvals="deny")
    names = ("forbiden", "forbidden2", "deploi", "deploy", "nosuchtool", "Forbidden", "")
    answers: dict[str, list[Any]] = {}
    listed: dict[str, set[str]] = {}
    async with serving(gateway) as url:
        for who in ("alice", "bob"):
            async with client(url, era, token=f"{who}-secret-token") as mcp:
                listed[who] = {t.name for t in (await mcp.list_tools()).tools}
                answers[who] = [await mcp.call_tool(name, {"text": "x"}) for name in names]
    gateway.executor.dispose()
    assert listed == {"alice": {"echo"}, "bob": {"deploy", "echo"}}
    for who, results in answers.items():
        for name, result in zip(names, results, strict=True):
            meta = fastgate_meta(result)
            if who == "bob" and name == "deploy":  # listed for bob: judged on its arguments
                assert meta["code"] == "INVALID_ARGS"
                continue
            assert result.is_error and meta["code"] == "UNKNOWN_TOOL", (who, name)
            text = text_of(result)
            assert text.startswith(f"There is no tool named {name!r}."), text
            said = text.removeprefix(f"There is no tool named {name!r}.")
            for hidden in HIDDEN:
                if hidden not in listed[who]:
                    assert hidden not in said, (who, name, text)
            assert "echo" in said or "Did you mean" in said, text
    # bob sees deploy: a near miss still suggests it to him
    assert "Did you mean 'deploy'?" in text_of(answers["bob"][names.index("deploi")])


async def test_a_refusal_s_details_suggest_only_listed_tools() -> None:
    gateway = Gateway(executor(), approvals="deny")  # the kit's rule denies forbidden
    async with serving(gateway) as url, httpx.AsyncClient(timeout=30) as http:
        results = [
            rpc_result(
                await post_modern(
                    http, url, "tools/call", {"name": name, "arguments": {}}, request_id=n
                )
            )
            for n, name in enumerate(("forbiddn", "forbidden_", "orbidden"), 1)
        ]
    gateway.executor.dispose()
    for result in results:
        assert result["_meta"]["fastgate"]["code"] == "UNKNOWN_TOOL"
        text = result["content"][0]["text"]
        assert "forbidden'" not in text and "forbidden," not in text, text
    (entry,) = [r for r in gateway.executor.history() if r.meta.tool_name == "forbiddn"]
    assert entry.error is not None and entry.error.code.name == "UNKNOWN_TOOL"
