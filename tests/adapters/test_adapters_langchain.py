"""``fastgate.adapters.langchain``: a LangGraph graph (a scripted chat model, then the prebuilt
``ToolNode``) runs its tool calls through fastgate: a deny rule denies, an approval is asked, and
the answers come back as ``ToolMessage`` s with their status."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("langgraph.prebuilt", reason="needs the test extra (langgraph)")

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from fastgate import ApprovalResponse, ExecutionContext, PermissionConfig, ToolExecutor, ToolResult
from fastgate.adapters.langchain import CONTEXT_KEY, tools
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


def _call(name: str, args: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


CALLS = [
    _call("echo", {"text": "hi"}, "c-echo"),
    _call("run", {"command": "rm -rf /"}, "c-denied"),
    _call("run", {"command": "ls"}, "c-asked"),
    _call("echo", {"text": 5}, "c-invalid"),
    _call("boom", {}, "c-boom"),
    _call("picture", {}, "c-picture"),
]


def _graph(
    model: GenericFakeChatModel, node_tools: list[BaseTool], checkpointer: Any = None
) -> Any:
    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode(node_tools))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    graph.add_edge("agent", END)
    return graph.compile(checkpointer=checkpointer)


@pytest.mark.parametrize("approve", [True, False])
async def test_a_graph_runs_its_tool_calls_through_fastgate(approve: bool) -> None:
    ex = _executor(permissions=PermissionConfig(deny=("run(rm:*)",)))
    approver = Approver(approve)
    model = GenericFakeChatModel(
        messages=iter([AIMessage(content="", tool_calls=CALLS), AIMessage(content="all done")])
    )
    app = _graph(model, tools(ex))
    ctx = ExecutionContext(session_id="graph-session", approver=approver)
    state = await app.ainvoke(
        {"messages": [HumanMessage("work")]}, {"configurable": {CONTEXT_KEY: ctx}}
    )
    assert state["messages"][-1].content == "all done"
    answers = {m.tool_call_id: m for m in state["messages"] if isinstance(m, ToolMessage)}
    assert list(answers) == [c["id"] for c in CALLS]  # in model order
    echo = answers["c-echo"]
    assert (echo.status, echo.content, echo.name) == ("success", "hi", "echo")
    assert isinstance(echo.artifact, ToolResult) and echo.artifact.ok
    denied = answers["c-denied"]
    assert denied.status == "error"
    assert str(denied.content).startswith("Error (PERMISSION_DENIED): Not permitted")
    assert approver.asked == ["run"]
    asked = answers["c-asked"]
    if approve:
        assert (asked.status, asked.content) == ("success", "ran ls")
    else:
        assert (asked.status, asked.content) == ("error", "Error (USER_REJECTED): not now")
    invalid = answers["c-invalid"]
    assert invalid.status == "error"
    assert str(invalid.content).startswith("Error (INVALID_ARGS): Invalid arguments for echo")
    assert answers["c-boom"].status == "error"
    assert answers["c-picture"].content == [
        {"type": "text", "text": "a chart"},
        {"type": "image", "base64": PNG, "mime_type": "image/png"},
    ]
    history = {r.meta.call_id: r for r in ex.history()}
    assert set(history) == {c["id"] for c in CALLS}
    assert {r.meta.session_id for r in history.values()} == {"graph-session"}
    assert_idle(ex)


async def test_tools_outside_a_graph_and_their_context() -> None:
    ex = _executor()
    (echo,) = [t for t in tools(ex) if t.name == "echo"]
    assert echo.args == {"text": {"type": "string"}}
    assert await echo.ainvoke({"text": "bare"}) == "bare"  # no call id: the content alone
    with pytest.raises(NotImplementedError, match="ainvoke"):
        echo.invoke({"text": "sync"})

    seen: list[Any] = []

    def context_for(config: Any) -> ExecutionContext:
        seen.append(config["configurable"]["user"])
        return ExecutionContext(session_id="from-config")

    ex.registry.scope("helper", allow=("echo",))
    scoped = tools(ex, scope="helper", context=context_for)
    assert [t.name for t in scoped] == ["echo"]
    message = await scoped[0].ainvoke(_call("echo", {"text": "x"}, "c1"),
                                      {"configurable": {"user": "ada"}})  # fmt: skip
    assert isinstance(message, ToolMessage) and message.content == "x"
    assert seen == ["ada"]
    assert ex.history()[-1].meta.session_id == "from-config"


async def _secret_value(args: Any, ctx: Any) -> Any:
    return {"shown": "fine", "internal": _Secret()}


class _Secret:
    """A canonical value that lives in-process only: never in a checkpoint."""

    def __init__(self) -> None:
        self.token = "sk-never-serialized"


@pytest.mark.parametrize(
    "call",
    [
        _call("echo", {"text": "hi"}, "plain"),
        _call("run", {"command": "rm -rf /"}, "denied"),
        _call("picture", {}, "blocks"),
        _call("secret", {}, "own-value"),
    ],
    ids=lambda call: str(call["id"]),
)
async def test_messages_serialize_and_a_checkpointed_graph_runs(call: dict[str, Any]) -> None:
    """A ``ToolMessage`` whose artifact is the ``ToolResult`` serializes (``model_dump_json``,
    LangGraph's checkpointer) as the result's durable part, never its canonical value."""
    import json

    from langchain_core.messages import messages_to_dict
    from langgraph.checkpoint.memory import InMemorySaver

    from fastgate import Output, define_tool, schema

    ex = _executor(permissions=PermissionConfig(deny=("run(rm:*)",)))
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
    model = GenericFakeChatModel(
        messages=iter([AIMessage(content="", tool_calls=[call]), AIMessage(content="done")])
    )
    app = _graph(model, tools(ex), checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "t1", CONTEXT_KEY: ExecutionContext()}}
    state = await app.ainvoke({"messages": [HumanMessage("work")]}, config)
    (message,) = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    assert isinstance(message.artifact, ToolResult)
    assert message.artifact.meta.call_id == call["id"]
    for text in (message.model_dump_json(), json.dumps(messages_to_dict([message]))):
        assert "sk-never-serialized" not in text and '"value":' not in text
        assert json.loads(text)
    saved = (await app.aget_state(config)).values["messages"]
    (kept,) = [m for m in saved if isinstance(m, ToolMessage)]
    assert kept.artifact["ok"] is message.artifact.ok
    assert kept.artifact["meta"]["execution_id"] == message.artifact.meta.execution_id
    assert set(kept.artifact) == {"ok", "content", "error", "meta"}
    assert_idle(ex)
