"""``fastgate.adapters.pydantic_ai``: a pydantic-ai ``Agent`` driven by its ``FunctionModel`` calls
its tools through fastgate: a deny rule denies, an approval is asked, and the answers come back
as pydantic-ai's own parts (returned, denied, retried, failed)."""

from __future__ import annotations

import base64
from typing import Any

import pytest

pytest.importorskip("pydantic_ai", reason="needs the test extra (pydantic-ai-slim)")

from pydantic_ai import Agent, BinaryContent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from fastgate import ApprovalResponse, ExecutionContext, PermissionConfig, ToolExecutor, ToolResult
from fastgate.adapters.pydantic_ai import FastgateToolset, toolset
from tests.adapters_kit import PNG, registry
from tests.pipeline_kit import assert_idle, executor


def _executor(**options: Any) -> ToolExecutor:
    ex = executor(**options)
    ex.registry = registry()
    return ex


class Approver:
    def __init__(self, approve: bool) -> None:
        self.approve = approve
        self.asked: list[str] = []

    async def __call__(self, request: Any) -> ApprovalResponse:
        self.asked.append(request.tool_name)
        return ApprovalResponse(self.approve, feedback=None if self.approve else "not now")


CALLS = [
    ToolCallPart("echo", {"text": "hi"}, tool_call_id="c-echo"),
    ToolCallPart("run", {"command": "rm -rf /"}, tool_call_id="c-denied"),
    ToolCallPart("run", {"command": "ls"}, tool_call_id="c-asked"),
    ToolCallPart("search", {"query": "q", "limit": None}, tool_call_id="c-strict"),
    ToolCallPart("echo", {"text": 5}, tool_call_id="c-invalid"),
    ToolCallPart("boom", {}, tool_call_id="c-boom"),
    ToolCallPart("picture", {}, tool_call_id="c-picture"),
]


class Script:
    """The model: every call at once, then a final answer once it has seen the returns."""

    def __init__(self) -> None:
        self.tools_seen: list[str] = []
        self.strict: dict[str, bool | None] = {}
        self.requests: list[ModelRequest] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.tools_seen = [t.name for t in info.function_tools]
        self.strict = {t.name: t.strict for t in info.function_tools}
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        self.requests.append(last)
        if len(self.requests) == 1:
            return ModelResponse(parts=list(CALLS))
        return ModelResponse(parts=[TextPart("all done")])


def _returns(messages: list[ModelMessage]) -> dict[str, ToolReturnPart]:
    return {
        part.tool_call_id: part
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    }


@pytest.mark.parametrize("approve", [True, False])
async def test_an_agent_runs_its_calls_through_fastgate(approve: bool) -> None:
    ex = _executor(permissions=PermissionConfig(deny=("run(rm:*)",)))
    approver = Approver(approve)
    script = Script()
    agent = Agent(FunctionModel(script), toolsets=[toolset(ex)], deps_type=ExecutionContext)
    ctx = ExecutionContext(session_id="pyd-session", approver=approver)
    result = await agent.run("work", deps=ctx)
    assert result.output == "all done"
    assert script.tools_seen == sorted(ex.registry.visible())
    assert script.strict["search"] is True and script.strict["note"] is False
    returns = _returns(result.all_messages())
    echo = returns["c-echo"]
    assert echo.outcome == "success" and echo.content == "hi"
    assert isinstance(echo.metadata, ToolResult) and echo.metadata.ok
    denied = returns["c-denied"]
    assert denied.outcome == "denied"
    assert str(denied.content).startswith("Error (PERMISSION_DENIED): Not permitted")
    assert approver.asked == ["run"]
    asked = returns["c-asked"]
    if approve:
        assert asked.outcome == "success" and asked.content == "ran ls"
    else:
        assert asked.outcome == "denied"
        assert asked.content == "Error (USER_REJECTED): not now"
    assert returns["c-strict"].content == '{"query":"q","limit":"absent"}'
    invalid = returns["c-invalid"]
    assert invalid.outcome == "retried"  # pydantic-ai asks the model to fix the arguments
    assert "Error (INVALID_ARGS)" in str(invalid.content)
    boom = returns["c-boom"]
    assert boom.outcome == "failed" and str(boom.content).startswith("Error (TOOL_ERROR):")
    picture = returns["c-picture"].content
    assert isinstance(picture, list) and picture[0] == "a chart"
    assert isinstance(picture[1], BinaryContent) and picture[1].media_type == "image/png"
    assert picture[1].data == base64.b64decode(PNG)
    # fastgate saw every call, with the run's session and the model's call ids.
    history = {r.meta.call_id: r for r in ex.history()}
    assert set(history) == {p.tool_call_id for p in CALLS}
    assert {r.meta.session_id for r in history.values()} == {"pyd-session"}
    assert_idle(ex)


async def test_a_context_function_and_a_scope() -> None:
    ex = _executor()
    ex.registry.scope("helper", allow=("echo",))
    seen: list[str | None] = []

    def context_for(run: Any) -> ExecutionContext:
        seen.append(run.tool_call_id)
        return ExecutionContext(session_id=f"user-{run.deps['user']}")

    class Once:
        def __init__(self) -> None:
            self.tools: list[str] = []

        def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            self.tools = [t.name for t in info.function_tools]
            if len(messages) == 1:
                return ModelResponse(parts=[ToolCallPart("echo", {"text": "x"}, tool_call_id="c1")])
            return ModelResponse(parts=[TextPart("ok")])

    model = Once()
    tools = toolset(ex, scope="helper", context=context_for, id="fastgate")
    assert isinstance(tools, FastgateToolset) and tools.id == "fastgate"
    agent = Agent(FunctionModel(model), toolsets=[tools])
    result = await agent.run("go", deps={"user": "ada"})
    assert result.output == "ok" and model.tools == ["echo"]
    assert seen == ["c1"]
    (done,) = ex.history()
    assert done.ok and done.meta.session_id == "user-ada"


class ManyCalls:
    """The model: ``per_step`` echo calls in each of ``steps`` responses, then a final answer."""

    def __init__(self, steps: int, per_step: int) -> None:
        self.steps, self.per_step, self.step = steps, per_step, 0

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.step += 1
        if self.step > self.steps:
            return ModelResponse(parts=[TextPart("done")])
        parts = [
            ToolCallPart("echo", {"text": f"{self.step}-{i}"}, tool_call_id=f"c{self.step}-{i}")
            for i in range(self.per_step)
        ]
        return ModelResponse(parts=list(parts))


@pytest.mark.parametrize("deps", [None, ExecutionContext(session_id="s1")], ids=["none", "ctx"])
async def test_one_model_response_is_one_turn(deps: ExecutionContext | None) -> None:
    ex = _executor()
    agent = Agent(FunctionModel(ManyCalls(steps=2, per_step=70)), toolsets=[toolset(ex)])
    result = await agent.run("work", deps=deps)
    assert result.output == "done"
    outcomes = [p.outcome for p in _returns(result.all_messages()).values()]
    assert outcomes.count("success") == 2 * 64 and outcomes.count("failed") == 2 * 6
    limited = [r for r in ex.history() if not r.ok]
    assert len(limited) == 12
    assert {r.error.details["reason"] for r in limited if r.error is not None} == {"turn_limit"}
    assert_idle(ex)


async def test_the_callers_turn_is_kept_across_responses() -> None:
    ex = _executor()
    agent = Agent(FunctionModel(ManyCalls(steps=2, per_step=40)), toolsets=[toolset(ex)])
    ctx = ExecutionContext(session_id="s1", turn_id="turn-1")
    result = await agent.run("work", deps=ctx)
    outcomes = [p.outcome for p in _returns(result.all_messages()).values()]
    assert outcomes.count("success") == 64 and outcomes.count("failed") == 16
    assert_idle(ex)


class _Secret:
    """A canonical value that lives in-process only: never in serialized history."""

    def __init__(self) -> None:
        self.token = "sk-never-serialized"


async def _secret_value(args: Any, ctx: Any) -> Any:
    return {"shown": "fine", "internal": _Secret()}


@pytest.mark.parametrize(
    "call",
    [
        ToolCallPart("echo", {"text": "hi"}, tool_call_id="plain"),
        ToolCallPart("picture", {}, tool_call_id="blocks"),
        ToolCallPart("search", {"query": "q", "limit": None}, tool_call_id="strict"),
        ToolCallPart("secret", {}, tool_call_id="own-value"),
    ],
    ids=lambda call: str(call.tool_call_id),
)
async def test_the_message_history_serializes_and_loads_again(call: ToolCallPart) -> None:
    """``all_messages_json()`` (how a server keeps a conversation, and what durable runs do)
    works with fastgate's results in it: their durable part, never the canonical value."""
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    from fastgate import Output, define_tool, schema
    from fastgate.adapters.pydantic_ai import ReturnedResult

    ex = _executor()
    ex.registry.register(
        define_tool(
            "secret",
            "Keeps a value of its own.",
            schema.Object({}),
            _secret_value,
            kind="read_only",
            output=Output(render=lambda value: str(value["shown"])),
        )
    )
    steps = iter([ModelResponse(parts=[call]), ModelResponse(parts=[TextPart("done")])])
    agent = Agent(
        FunctionModel(lambda messages, info: next(steps)),
        toolsets=[toolset(ex)],
        deps_type=ExecutionContext,
    )
    result = await agent.run("go", deps=ExecutionContext(session_id="s"))
    returned = _returns(result.all_messages())[str(call.tool_call_id)]
    assert isinstance(returned.metadata, ToolResult) and returned.metadata.ok
    assert isinstance(returned.metadata, ReturnedResult)
    assert returned.metadata.meta.call_id == call.tool_call_id
    text = result.all_messages_json()
    assert b"sk-never-serialized" not in text and b'"value":' not in text
    loaded = ModelMessagesTypeAdapter.validate_json(text)
    again = _returns(loaded)[str(call.tool_call_id)]
    assert again.metadata["ok"] is True
    assert again.metadata["meta"]["execution_id"] == returned.metadata.meta.execution_id
    assert set(again.metadata) == {"ok", "content", "error", "meta"}
    assert ModelMessagesTypeAdapter.dump_python(loaded, mode="json")
    assert_idle(ex)
