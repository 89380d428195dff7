"""Approvals through the gateway: elicitation in both eras, the sealed ``input_required`` state
and its refusals, ``deny``, and the console's pending-approvals registry."""

from __future__ import annotations

import asyncio
import base64
import json
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp_types import ElicitResult

import fastgate
from fastgate import ApprovalRequest, ApprovalResponse, ToolKind
from fastgate.serve import Gateway
from fastgate.serve._approvals import QUESTION_LIMIT, PendingApprovals, approval_message
from tests.serve.kit import (
    ERAS,
    LEGACY,
    client,
    executor,
    fastgate_meta,
    post_modern,
    registry,
    rpc_result,
    serving,
    text_of,
    tokens_file,
)

RUNS: list[str] = []


@fastgate.tool(kind=ToolKind.EXECUTE)
async def launch(target: str) -> str:
    """Launch something (records each run).

    Args:
        target: what.
    """
    RUNS.append(target)
    return f"launched {target}"


def answering(*decisions: dict[str, Any] | str) -> tuple[Any, list[str]]:
    """An elicitation callback answering ``decisions`` in turn; the questions it saw."""
    asked: list[str] = []
    queue = list(decisions)

    async def callback(context: Any, params: Any) -> ElicitResult:
        asked.append(params.message)
        answer = queue.pop(0)
        if isinstance(answer, str):
            return ElicitResult(action=answer)  # type: ignore[arg-type]
        return ElicitResult(action="accept", content=answer)

    return callback, asked


@pytest.mark.parametrize("era", ERAS)
async def test_the_client_answers_once_session_and_reject(era: str) -> None:
    RUNS.clear()
    gateway = Gateway(executor(registry(launch)))
    callback, asked = answering(
        {"decision": "once"},
        {"decision": "session"},
        {"decision": "reject", "reason": "use staging"},
        "decline",
    )
    async with serving(gateway) as url, client(url, era, elicitation_callback=callback) as mcp:
        once = await mcp.call_tool("launch", {"target": "a"})
        assert not once.is_error and fastgate_meta(once)["decision_source"] == "user"
        session = await mcp.call_tool("launch", {"target": "b"})
        assert not session.is_error
        remembered = await mcp.call_tool("launch", {"target": "b"})  # the same call: no prompt
        assert not remembered.is_error and fastgate_meta(remembered)["decision_source"] == "session"
        rejected = await mcp.call_tool("launch", {"target": "c"})
        assert rejected.is_error and fastgate_meta(rejected)["code"] == "USER_REJECTED"
        assert text_of(rejected) == "use staging"
        declined = await mcp.call_tool("launch", {"target": "d"})
        assert declined.is_error and fastgate_meta(declined)["code"] == "USER_REJECTED"
    assert RUNS == ["a", "b", "b"]
    assert len(asked) == 4 and all("launch" in q and "local" in q for q in asked)
    assert '"target": "c"' in asked[2]  # the question shows what will run
    gateway.executor.dispose()


@pytest.mark.parametrize("era", ERAS)
async def test_approvals_deny_refuses_every_ask(era: str) -> None:
    RUNS.clear()
    gateway = Gateway(executor(registry(launch)), approvals="deny")
    callback, asked = answering({"decision": "once"})
    async with serving(gateway) as url, client(url, era, elicitation_callback=callback) as mcp:
        refused = await mcp.call_tool("launch", {"target": "a"})
        assert refused.is_error
        assert fastgate_meta(refused)["code"] == "PERMISSION_DENIED"
        assert fastgate_meta(refused)["reason"] == "no_approver"
        assert not (await mcp.call_tool("echo", {"text": "still"})).is_error
    assert RUNS == [] and asked == []
    gateway.executor.dispose()


@pytest.mark.parametrize("era", ERAS)
async def test_a_client_without_elicitation_falls_back_to_the_console(era: str) -> None:
    RUNS.clear()
    gateway = Gateway(executor(registry(launch)), console=True)
    events: list[str] = []

    async def console() -> None:
        async for event in gateway.pending.events():
            events.append(event.kind)
            if event.kind == "added":
                (pending,) = gateway.pending.pending()
                assert pending.tool_name == "launch" and pending.principal == "local"
                assert pending.arguments == {"target": "x"}
                assert gateway.pending.answer(event.approval.id, ApprovalResponse(True))
                assert not gateway.pending.answer(event.approval.id, ApprovalResponse(False))
                return

    watcher = asyncio.create_task(console())
    await asyncio.sleep(0)
    async with serving(gateway) as url, client(url, era) as mcp:  # no elicitation callback
        done = await mcp.call_tool("launch", {"target": "x"})
        assert not done.is_error, text_of(done)
    await watcher
    assert RUNS == ["x"] and events == ["added"]
    assert gateway.pending.pending() == []
    gateway.executor.dispose()


# -- huge arguments cost a question no more than small ones ----------------------------------


class _Counted(list[Any]):
    """A list that counts the items read from it, by index or by iteration."""

    reads = 0

    def __getitem__(self, index: Any) -> Any:
        self.reads += 1
        return super().__getitem__(index)

    def __iter__(self) -> Iterator[Any]:
        for item in super().__iter__():
            self.reads += 1
            yield item


def _request(args: Any) -> ApprovalRequest:
    return ApprovalRequest("launch", args, "launch", "DEFAULT mode asks", "mode", "s", "e1")


def test_the_question_quotes_huge_arguments_with_bounded_work() -> None:
    # Arguments too long to be shown whole make no question; finding that out reads no more
    # of them than a question could hold.
    items = _Counted(range(1_000_000))
    message = approval_message(_request({"items": items, "more": [items]}), "alice")
    assert message is None
    assert items.reads < QUESTION_LIMIT, items.reads  # what a question holds, not a million
    # A string of 20 MB: nothing of the size of the string is made to measure it.
    huge = {"target": "t" * 20_000_000}
    tracemalloc.start()
    try:
        message = approval_message(_request(huge), "alice")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000, peak
    assert message is None


async def test_the_console_previews_huge_arguments_with_bounded_work() -> None:
    pending = PendingApprovals(60.0)
    items = _Counted(range(1_000_000))
    shown: list[Any] = []

    def answer(approval: Any) -> None:
        shown.append(approval.shown())
        assert pending.answer(approval.id, ApprovalResponse(False, feedback="no"))

    answered = await pending.ask(_request({"items": items}), "alice", on_added=answer)
    assert isinstance(answered, ApprovalResponse) and not answered.approved
    (preview,) = shown
    assert "… (+999980 more items)" in preview.short
    assert preview.full is not None and preview.full.endswith("(cut after 65536 characters)")
    assert items.reads < 20_000, items.reads  # the preview's items, not a copy of them all


@pytest.mark.parametrize("era", ERAS)
async def test_a_call_with_huge_arguments_is_refused_without_a_question(era: str) -> None:
    RUNS.clear()
    gateway = Gateway(executor(registry(launch)), max_body=16 * 1024 * 1024)
    callback, asked = answering({"decision": "once"})
    target = "t" * 3_000_000
    async with serving(gateway) as url, client(url, era, elicitation_callback=callback) as mcp:
        refused = await mcp.call_tool("launch", {"target": target})
    meta = fastgate_meta(refused)
    assert refused.is_error and meta["code"] == "PERMISSION_DENIED", meta
    assert meta["reason"] == "arguments_too_long_to_show", meta
    assert len(text_of(refused)) < 1_000  # the refusal does not quote the arguments
    assert asked == [] and RUNS == []
    gateway.executor.dispose()


async def test_console_approvals_time_out_and_leave_the_list() -> None:
    RUNS.clear()
    gateway = Gateway(executor(registry(launch)), approvals="console", approval_timeout=0.2)
    async with serving(gateway) as url, client(url, LEGACY) as mcp:
        refused = await mcp.call_tool("launch", {"target": "x"})
    meta = fastgate_meta(refused)
    assert refused.is_error and meta["code"] == "PERMISSION_DENIED", meta
    assert meta["reason"] == "approval_timeout", meta
    assert "No answer came from the console within 0.2 s" in text_of(refused)
    assert RUNS == [] and gateway.pending.pending() == []
    gateway.executor.dispose()


# -- the sealed state of the 2026 era ---------------------------------------------------------


async def _ask(http: Any, url: str, arguments: dict[str, Any], token: str) -> dict[str, Any]:
    answer = await post_modern(
        http, url, "tools/call", {"name": "launch", "arguments": arguments}, token=token
    )
    result = rpc_result(answer)
    assert result["resultType"] == "input_required", result
    (question,) = result["inputRequests"].values()
    assert question["method"] == "elicitation/create"
    schema = question["params"]["requestedSchema"]
    assert schema["required"] == ["decision"]
    assert schema["properties"]["decision"]["enum"] == ["once", "session", "reject"]
    return result


async def _retry(
    http: Any, url: str, arguments: dict[str, Any], state: str, token: str, request_id: int = 2
) -> dict[str, Any]:
    params = {
        "name": "launch",
        "arguments": arguments,
        "inputResponses": {
            "fastgate/approval": {"action": "accept", "content": {"decision": "once"}}
        },
        "requestState": state,
    }
    return rpc_result(
        await post_modern(http, url, "tools/call", params, token=token, request_id=request_id)
    )


def _flip(state: str, index: int) -> str:
    char = state[index]
    return state[:index] + ("A" if char != "A" else "B") + state[index + 1 :]


def _resealed_payload(state: str) -> str:
    """The state with its payload rewritten (a byte of it changed) but the old tag kept."""
    prefix, body, tag = state.split(".")
    payload = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    claims = json.loads(payload)
    claims["exp"] = claims["exp"] + 3600
    new = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    return f"{prefix}.{new}.{tag}"


async def test_sealed_state_approves_exactly_the_call_it_was_given_for(tmp_path: Path) -> None:
    RUNS.clear()
    gateway = Gateway(executor(registry(launch)), tokens=tokens_file(tmp_path / "t.json"))
    alice, bob = "alice-secret-token", "bob-secret-token"
    arguments = {"target": "prod"}
    async with serving(gateway) as url, httpx.AsyncClient() as http:
        state = (await _ask(http, url, arguments, alice))["requestState"]
        refused = [
            await _retry(http, url, arguments, _flip(state, len(state) // 2), alice),
            await _retry(http, url, arguments, _flip(state, -3), alice),
            await _retry(http, url, arguments, _resealed_payload(state), alice),
            await _retry(http, url, {"target": "prod "}, state, alice),  # one byte more
            await _retry(http, url, {"target": "pród"}, state, alice),
            await _retry(http, url, arguments, state, bob),  # another principal
            await _retry(http, url, arguments, "not a state", alice),
        ]
        for result in refused:
            assert result["isError"] is True, result
            meta = result["_meta"]["fastgate"]
            assert meta["code"] == "PERMISSION_DENIED"
            assert meta["reason"] == "invalid_request_state"
        assert RUNS == []
        accepted = await _retry(http, url, arguments, state, alice)
        assert accepted["isError"] is False and RUNS == ["prod"]
        replayed = await _retry(http, url, arguments, state, alice, request_id=3)
        assert replayed["isError"] is True and RUNS == ["prod"]  # one state, one call
    gateway.executor.dispose()


async def test_an_expired_state_is_refused() -> None:
    RUNS.clear()
    gateway = Gateway(executor(registry(launch)), state_ttl=0.3)
    arguments = {"target": "late"}
    async with serving(gateway) as url, httpx.AsyncClient() as http:
        state = (await _ask(http, url, arguments, "unused"))["requestState"]
        await asyncio.sleep(0.5)
        expired = await _retry(http, url, arguments, state, "unused")
    assert expired["isError"] is True
    assert expired["_meta"]["fastgate"]["reason"] == "invalid_request_state"
    assert RUNS == []
    gateway.executor.dispose()


async def test_a_state_from_another_gateway_key_is_refused() -> None:
    RUNS.clear()
    first = Gateway(executor(registry(launch)), state_keys=[b"k" * 32])
    second = Gateway(executor(registry(launch)), state_keys=[b"q" * 32])
    same = Gateway(executor(registry(launch)), state_keys=[b"k" * 32])
    arguments = {"target": "x"}
    async with serving(first) as one, serving(second) as two, serving(same) as three:
        async with httpx.AsyncClient() as http:
            state = (await _ask(http, one, arguments, "unused"))["requestState"]
            other = await _retry(http, two, arguments, state, "unused")
            assert other["isError"] is True and RUNS == []
            replica = await _retry(http, three, arguments, state, "unused")  # a shared key
            assert replica["isError"] is False and RUNS == ["x"]
    for gateway in (first, second, same):
        gateway.executor.dispose()


async def test_a_state_asked_under_another_policy_is_refused() -> None:
    """The tool's definition changed between the question and the answer (an upstream server
    changed its schema, say): the policy generation differs, and the call is asked afresh."""
    RUNS.clear()
    tools = registry(launch)
    gateway = Gateway(executor(tools))
    arguments = {"target": "x"}
    async with serving(gateway) as url, httpx.AsyncClient() as http:
        state = (await _ask(http, url, arguments, "unused"))["requestState"]
        changed = fastgate.define_tool(
            "launch",
            "Launch, now with an optional note.",
            {
                "type": "object",
                "properties": {"target": {"type": "string"}, "note": {"type": "string"}},
                "required": ["target"],
            },
            launch.execute,
            kind=ToolKind.EXECUTE,
        )
        tools.register(changed)
        refused = await _retry(http, url, arguments, state, "unused")
    assert refused["isError"] is True
    assert refused["_meta"]["fastgate"]["reason"] == "policy_changed"
    assert RUNS == []
    gateway.executor.dispose()


@pytest.mark.parametrize("elicits", [True, False])
async def test_a_program_s_call_no_one_can_approve_is_refused_for_no_approver(
    elicits: bool,
) -> None:
    """2026 era, code mode, no console: the client cannot be asked during a program's call,
    whether it takes elicitations or not. That is no approver (SPEC §7), not a rejection."""
    from fastgate.codemode import CodeMode

    served = executor(
        permissions=fastgate.PermissionConfig(allow=["run_code"]),
        code_mode=CodeMode(pool_size=0),
    )
    gateway = Gateway(served, rate_limit=None)
    program = "print(await tools.deploy(target='prod'))"
    call = {"name": "run_code", "arguments": {"code": program}}
    async with serving(gateway) as url, httpx.AsyncClient(timeout=60) as http:
        ran = rpc_result(await post_modern(http, url, "tools/call", call, elicits=elicits))
    served.dispose()
    text = json.dumps(ran["content"])
    assert "PERMISSION_DENIED" in text and "no approver is available" in text, text
    assert "USER_REJECTED" not in text
