"""``fastgate.adapters.openai_agents``: an Agents SDK ``Agent`` driven by the SDK's own scripted
model calls its tools through fastgate: a deny rule denies, an approval is asked, and the answers
come back as the SDK's tool outputs."""

from __future__ import annotations

import copy
from typing import Any

import pytest

pytest.importorskip("agents", reason="needs the test extra (openai-agents)")

from agents import Agent, FunctionTool, RunConfig, Runner, ToolCallOutputItem
from agents.strict_schema import ensure_strict_json_schema
from agents.testing import ScriptedModel, assistant_message, function_call

from fastgate import ApprovalResponse, ExecutionContext, PermissionConfig, ToolExecutor
from fastgate.adapters.openai_agents import function_tools
from tests.adapters_kit import PNG, registry
from tests.pipeline_kit import assert_idle, executor

NO_TRACING = RunConfig(tracing_disabled=True)  # the SDK would otherwise export traces


def _executor(**options: Any) -> ToolExecutor:
    ex = executor(**options)
    ex.registry = registry()
    return ex


class Approver:
    def __init__(self, approve: bool) -> None:
        self.approve = approve
        self.asked: list[tuple[str, Any]] = []

    async def __call__(self, request: Any) -> ApprovalResponse:
        self.asked.append((request.tool_name, request.args))
        return ApprovalResponse(self.approve, feedback=None if self.approve else "not now")


def _outputs(result: Any) -> dict[str, Any]:
    items = [item for item in result.new_items if isinstance(item, ToolCallOutputItem)]
    return {str(item.call_id): item.output for item in items}


def test_function_tools_are_the_sdks_function_tools() -> None:
    ex = _executor()
    tools = [t for t in function_tools(ex) if isinstance(t, FunctionTool)]
    assert len(tools) == len(function_tools(ex))
    assert [t.name for t in tools] == sorted(ex.registry.visible())
    by_name = {t.name: t for t in tools}
    assert by_name["note"].strict_json_schema is False  # optional and nullable: not strict
    assert by_name["search"].strict_json_schema is True
    for tool in tools:
        if tool.strict_json_schema:
            schema = tool.params_json_schema
            assert ensure_strict_json_schema(copy.deepcopy(schema)) == schema
    loose = [t for t in function_tools(ex, strict=False) if isinstance(t, FunctionTool)]
    assert len(loose) == len(tools) and not any(t.strict_json_schema for t in loose)


@pytest.mark.parametrize("approve", [True, False])
async def test_an_agent_runs_its_calls_through_fastgate(approve: bool) -> None:
    ex = _executor(permissions=PermissionConfig(deny=("run(rm:*)",)))
    approver = Approver(approve)
    model = ScriptedModel(
        [
            [
                function_call("echo", {"text": "hi"}, call_id="c-echo"),
                function_call("run", {"command": "rm -rf /"}, call_id="c-denied"),
                function_call("run", {"command": "ls"}, call_id="c-asked"),
                function_call("search", {"query": "q", "limit": None}, call_id="c-strict"),
                function_call("echo", '{"text": ', call_id="c-bad"),
                function_call("picture", {}, call_id="c-picture"),
            ],
            [assistant_message("all done")],
        ]
    )
    agent = Agent(name="worker", model=model, tools=function_tools(ex))
    ctx = ExecutionContext(session_id="agent-session", approver=approver)
    result = await Runner.run(agent, "work", context=ctx, run_config=NO_TRACING)
    assert result.final_output == "all done"
    outputs = _outputs(result)
    assert outputs["c-echo"] == "hi"
    assert outputs["c-denied"].startswith("Error (PERMISSION_DENIED): Not permitted")
    assert approver.asked == [("run", {"command": "ls"})]  # the deny never reached the approver
    if approve:
        assert outputs["c-asked"] == "ran ls"
    else:
        assert outputs["c-asked"] == "Error (USER_REJECTED): not now"
    assert outputs["c-strict"] == '{"query":"q","limit":"absent"}'  # strict null read as absent
    assert outputs["c-bad"].startswith("Error (INVALID_ARGS): The arguments of echo are not valid")
    picture = outputs["c-picture"]
    assert [o.type for o in picture] == ["text", "image"]
    assert picture[1].image_url == f"data:image/png;base64,{PNG}"
    # The model's second turn saw every answer as a function_call_output, in its own order.
    second = model.calls[1].input
    sent = [item for item in second if isinstance(item, dict)
            and item.get("type") == "function_call_output"]  # fmt: skip
    assert [item["call_id"] for item in sent] == [
        "c-echo", "c-denied", "c-asked", "c-strict", "c-bad", "c-picture"
    ]  # fmt: skip
    # fastgate saw each call with the run's session and the model's call ids.
    history = {r.meta.call_id: r for r in ex.history()}
    assert set(history) == {"c-echo", "c-denied", "c-asked", "c-strict", "c-bad", "c-picture"}
    assert {r.meta.session_id for r in history.values()} == {"agent-session"}
    assert_idle(ex)


async def test_the_context_can_come_from_the_tool_call() -> None:
    ex = _executor()
    seen: list[str] = []

    def context_for(tool_context: Any) -> ExecutionContext:
        seen.append(tool_context.tool_call_id)
        return ExecutionContext(session_id=f"user-{tool_context.context['user']}")

    model = ScriptedModel(
        [[function_call("echo", {"text": "x"}, call_id="c1")], [assistant_message("ok")]]
    )
    agent = Agent(name="worker", model=model, tools=function_tools(ex, context=context_for))
    await Runner.run(agent, "go", context={"user": "ada"}, run_config=NO_TRACING)
    assert seen == ["c1"]
    (result,) = ex.history()
    assert result.ok and result.meta.session_id == "user-ada"
