"""Real MCP clients through the gateway: the TypeScript SDK's client (npm, a node script) and
the OpenAI Agents SDK's ``MCPServerStreamableHttp`` in a run driven by a local fake model. (The
official Python SDK's client is the one every other test of the gateway uses, in both eras.)"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from fastgate.serve import Gateway
from tests.serve.kit import ROOT, executor, serving, tokens_file

SDK = ROOT / "build" / "serve-clients" / "node_modules" / "@modelcontextprotocol" / "sdk"
TS_CLIENT = Path(__file__).with_name("ts_client.mjs")


async def test_the_typescript_sdk_client(tmp_path: Path) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    if not (SDK / "package.json").exists():
        pytest.skip("the TypeScript SDK is not installed: run `bash scripts/setup-serve-clients`")
    gateway = Gateway(executor(), tokens=tokens_file(tmp_path / "t.json"))
    async with serving(gateway) as url:
        process = await asyncio.create_subprocess_exec(
            node,
            str(TS_CLIENT),
            str(SDK),
            url,
            "carol-secret-token",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        async with asyncio.timeout(60):
            stdout, stderr = await process.communicate()
    assert process.returncode == 0, stderr.decode()
    said = {line["what"]: line["value"] for line in map(json.loads, stdout.decode().splitlines())}
    assert said["tools"] == ["deploy", "echo"]
    assert said["echo"]["content"] == [{"type": "text", "text": "from typescript"}]
    assert said["echo"]["isError"] is False
    assert said["echo"]["_meta"]["fastgate"]["code"] is None
    assert (
        said["deploy"]["isError"] is False
        and said["deploy"]["_meta"]["fastgate"]["decision_source"] == "user"
    )
    assert len(said["asked"]) == 1 and "carol" in said["asked"][0]
    # forbidden: denied outright, so not listed: refused as a name no tool has.
    for refused, code in (("forbidden", "UNKNOWN_TOOL"), ("invalid", "INVALID_ARGS")):
        assert said[refused]["isError"] is True
        assert said[refused]["_meta"]["fastgate"]["code"] == code
        assert said[refused]["content"][0]["text"]
    sessions = {r.meta.session_id or "" for r in gateway.executor.history()}
    assert len(sessions) == 1 and next(iter(sessions)).startswith("carol/")
    gateway.executor.dispose()


async def test_the_openai_agents_sdk_in_a_run(tmp_path: Path) -> None:
    """An agent whose model (the SDK's scripted model, local) calls three tools of the gateway:
    one runs, one has invalid arguments, one asks with no one to answer; the model reads
    fastgate's messages as the tools' outputs (and never sees the tool a rule denies)."""
    agents = pytest.importorskip("agents", reason="needs the test extra (openai-agents)")
    from agents.mcp import MCPServerStreamableHttp
    from agents.testing import ScriptedModel, assistant_message, function_call

    gateway = Gateway(executor(), tokens=tokens_file(tmp_path / "t.json"), approvals="deny")
    async with serving(gateway) as url:
        server = MCPServerStreamableHttp(
            params={"url": url, "headers": {"Authorization": "Bearer bob-secret-token"}},
            cache_tools_list=False,
            name="fastgate",
        )
        model = ScriptedModel(
            [
                [
                    function_call("echo", {"text": "agents"}, call_id="c-echo"),
                    function_call("echo", {"text": 5}, call_id="c-invalid"),
                    function_call("deploy", {"target": "prod"}, call_id="c-asked"),
                ],
                [assistant_message("done")],
            ]
        )
        async with server:
            agent = agents.Agent(name="tester", model=model, mcp_servers=[server])
            result = await agents.Runner.run(
                agent, "go", run_config=agents.RunConfig(tracing_disabled=True)
            )
    assert result.final_output == "done"
    outputs = {
        str(item.call_id): str(item.output)
        for item in result.new_items
        if isinstance(item, agents.ToolCallOutputItem)
    }
    assert "agents" in outputs["c-echo"]
    assert "text" in outputs["c-invalid"] and "string" in outputs["c-invalid"]
    assert "needs approval" in outputs["c-asked"]
    assert sorted(t.name for t in model.calls[0].tools) == ["deploy", "echo"]
    codes = sorted(str(r.error.code) if r.error else "ok" for r in gateway.executor.history())
    assert codes == ["INVALID_ARGS", "PERMISSION_DENIED", "ok"]
    sessions = {r.meta.session_id or "" for r in gateway.executor.history()}
    assert all(s == "bob" or s.startswith("bob/") for s in sessions)
    gateway.executor.dispose()
