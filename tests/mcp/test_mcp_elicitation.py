"""Elicitation through the MCP bridge, in both protocol eras (SPEC §14 "Input requests"): a
server's question reaches the call's elicitor (``elicitation/create`` during the call on the
older protocol, an ``input_required`` result retried with the answers on the 2026 one); a form
answer is checked against the requested schema (defaults filled first) and never sent when it
does not match; URL mode is passed; no elicitor, a decline or a cancel fail the call with
``input_required``; a server asking more than 8 times is stopped; the ``requestState`` goes back
as it came; each question reaches its own call; a cancelled call leaves no prompt behind; and an
answer never changes what the policy admitted.

Servers: ``tests/mcp/elicit_sdk_server.py`` (the official SDK asking its own way, in either era),
``tests/mcp/elicit_modern_server.py`` and ``tests/mcp/elicit_legacy_server.py`` (hand-written,
asking exactly what a test says, recording what they get back).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from fastgate import (
    ApprovalResponse,
    CancelToken,
    ElicitationRequest,
    ElicitationResponse,
    ErrorCode,
    ExecutionContext,
    PermissionConfig,
    PermissionMode,
    ToolExecutor,
    ToolRegistry,
    ToolResult,
)
from fastgate.mcp import MCPServerConfig
from tests.mcp.servers import assert_settled, records, running

MCP_DIR = Path(__file__).parent
SDK_SERVER = MCP_DIR / "elicit_sdk_server.py"
MODERN = MCP_DIR / "elicit_modern_server.py"
LEGACY = MCP_DIR / "elicit_legacy_server.py"
ERAS = ("modern", "legacy")
NAME_ONLY = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def sdk_server(era: str, **options: Any) -> MCPServerConfig:
    env = {"ELICIT_ERA": era}
    return MCPServerConfig("b", command=[sys.executable, str(SDK_SERVER)], env=env, **options)


def raw_server(era: str, record: Path | None = None, **options: Any) -> MCPServerConfig:
    script = MODERN if era == "modern" else LEGACY
    env = {"FIXTURE_RECORD": str(record)} if record is not None else {}
    return MCPServerConfig("r", command=[sys.executable, str(script)], env=env, **options)


def form(message: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"mode": "form", "message": message, "requestedSchema": schema or NAME_ONLY}


def ask_arguments(era: str, questions: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """Arguments of the raw servers' ``ask`` tool asking ``questions`` (params of
    ``elicitation/create``): one round of them (2026), or one after another (older era)."""
    if era == "modern":
        requests = {
            f"q{n}": {"method": "elicitation/create", "params": q} for n, q in enumerate(questions)
        }
        return {"rounds": [requests], **extra}
    return {"requests": questions, **extra}


def answers_sent(era: str, record: Path, tag: str | None = None) -> list[Any]:
    """What the raw server got back for its questions, in order."""
    if era == "modern":
        calls = [r for r in records(record) if r["event"] == "call" and r.get("tag") == tag]
        return [a for r in calls if r["responses"] for _, a in sorted(r["responses"].items())]
    return [
        r["answer"] for r in records(record) if r["event"] == "answered" and r.get("tag") == tag
    ]


class Elicitor:
    """An async elicitor answering from a script, keeping every request it was shown."""

    def __init__(self, *answers: ElicitationResponse | Callable[[ElicitationRequest], Any]):
        self.answers = list(answers)
        self.asked: list[ElicitationRequest] = []

    async def __call__(self, request: ElicitationRequest) -> Any:
        self.asked.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return answer(request) if callable(answer) else answer


def yolo(registry: ToolRegistry, **options: Any) -> ToolExecutor:
    return ToolExecutor(registry, mode=PermissionMode.YOLO, **options)


def ctx(elicitor: Any = None, **fields: Any) -> ExecutionContext:
    fields.setdefault("session_id", "s1")
    return ExecutionContext(elicitor=elicitor, **fields)


def assert_input_required(result: ToolResult, answer: str) -> None:
    assert not result.ok
    assert result.error is not None and result.error.code is ErrorCode.TOOL_FAILURE, result.error
    assert result.error.details["reason"] == "input_required"
    assert result.error.details["answer"] == answer, result.error.details
    assert result.content == result.error.message


# -- the SDK and the public names --------------------------------------------------------------


def test_the_sdk_offers_what_the_bridge_uses() -> None:
    from mcp.client.session import ClientRequestContext
    from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher

    from mcp import Client

    assert "elicitation_callback" in inspect.signature(Client).parameters
    assert {"session", "request_id", "meta"} <= set(
        inspect.signature(ClientRequestContext).parameters
    )
    # The request id can be chosen, and it is the progress token: what names the call.
    source = inspect.getsource(JSONRPCDispatcher.send_raw_request)
    assert 'opts.get("request_id")' in source
    assert 'out_meta["progressToken"] = request_id' in source


def test_the_public_names() -> None:
    import fastgate

    assert fastgate.ElicitationRequest is ElicitationRequest
    assert ElicitationRequest("s", "t", "m").mode == "form"
    for bad in ("popup", "", "URL"):
        with pytest.raises(ValueError, match="mode"):
            ElicitationRequest("s", "t", "m", mode=bad)  # type: ignore[arg-type]
    for action in ("accept", "decline", "cancel"):
        assert ElicitationResponse(action).content is None
    for action in ("ok", "Accept", "", "yes"):
        with pytest.raises(ValueError, match="action"):
            ElicitationResponse(action)  # type: ignore[arg-type]


def test_the_elicitor_comes_from_context_defaults_unless_the_context_has_one() -> None:
    async def mine(request: ElicitationRequest) -> ElicitationResponse:
        return ElicitationResponse("decline")

    def default(request: ElicitationRequest) -> ElicitationResponse:
        return ElicitationResponse("cancel")

    defaults = ExecutionContext.check_defaults({"elicitor": default})
    assert ExecutionContext().merged(defaults).elicitor is default
    assert ExecutionContext(elicitor=mine).merged(defaults).elicitor is mine
    mask = ExecutionContext.field_mask(["elicitor"])
    assert ExecutionContext().lacks_any(mask) and not ExecutionContext(elicitor=mine).lacks_any(
        mask
    )


# -- the SDK's server, both eras -----------------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
async def test_a_form_answer_reaches_the_server_and_failures_say_input_required(era: str) -> None:
    registry = ToolRegistry()
    async with running(registry, sdk_server(era)) as bridge:
        status = bridge.status()["b"]
        assert status["protocol_version"] == ("2026-07-28" if era == "modern" else "2025-11-25")
        executor = yolo(registry)
        elicitor = Elicitor(ElicitationResponse("accept", {"name": "Ada", "guests": 4}))
        booked = await executor.execute("mcp__b__book", {"table": "t1"}, ctx(elicitor))
        assert booked.ok, booked.error
        # The server's own text, nothing of the answer added by the bridge: what the model sees.
        assert booked.content == "booked t1 for Ada: 4 guests, vegetarian=False"
        [request] = elicitor.asked
        assert (request.server, request.tool_name, request.mode) == ("b", "mcp__b__book", "form")
        assert request.message == "Book a table: under which name, for how many?"
        assert request.url is None and request.session_id == "s1"
        assert request.execution_id == booked.meta.execution_id
        assert request.requested_schema is not None
        assert request.requested_schema["required"] == ["name"]
        assert request.requested_schema["properties"]["guests"]["default"] == 2

        refusals: list[tuple[Any, str, str]] = [
            (None, "no_elicitor", "no elicitor"),
            (Elicitor(ElicitationResponse("decline")), "declined", "declined"),
            (Elicitor(ElicitationResponse("cancel")), "cancelled", "dismissed"),
        ]
        for elicitor_or_none, answer, words in refusals:
            result = await executor.execute("mcp__b__book", {"table": "t2"}, ctx(elicitor_or_none))
            assert_input_required(result, answer)
            assert words in result.error.message  # type: ignore[union-attr]
            assert "Book a table" in result.error.message  # type: ignore[union-attr]
            if era == "legacy":  # the server was told, and said so
                said = "declined" if answer != "cancelled" else "cancelled"
                assert f"the user {said}: nothing booked" in result.error.message  # type: ignore[union-attr]
        assert_settled(executor, bridge, calls=4)


@pytest.mark.parametrize("era", ERAS)
async def test_a_wrong_answer_is_refused_and_never_sent(era: str) -> None:
    # Each breaks the requested schema a different way: missing required field, wrong type,
    # out of range, a bool for an int, a nested value, not an object at all.
    wrong: list[Any] = [
        None,
        {},
        {"name": 5},
        {"name": "Ada", "guests": 40},
        {"name": "Ada", "guests": True},
        {"name": "Ada", "guests": 2.5},
        {"name": {"first": "Ada"}},
        {"name": ["Ada"]},
        {"name": "Ada", "vegetarian": "yes"},
        {"name": "Ada", "guests": float("nan")},
        ["Ada"],
        "Ada",
    ]
    registry = ToolRegistry()
    async with running(registry, sdk_server(era)) as bridge:
        executor = yolo(registry)
        for content in wrong:
            elicitor = Elicitor(ElicitationResponse("accept", content))
            result = await executor.execute("mcp__b__book", {"table": "t"}, ctx(elicitor))
            assert_input_required(result, "invalid")
            assert "did not match" in result.error.message, content  # type: ignore[union-attr]
            if era == "legacy":  # the server got a decline, not the wrong answer
                assert "the user declined: nothing booked" in result.error.message  # type: ignore[union-attr]
        assert_settled(executor, bridge, calls=len(wrong))


async def test_a_plain_elicitor_runs_in_a_thread_of_its_own() -> None:
    threads: list[int] = []

    def plain(request: ElicitationRequest) -> ElicitationResponse:
        threads.append(threading.get_ident())
        return ElicitationResponse("accept", {"name": "Bo"})

    registry = ToolRegistry()
    async with running(registry, sdk_server("modern")) as bridge:
        executor = yolo(registry)
        result = await executor.execute("mcp__b__book", {"table": "t"}, ctx(plain))
        assert result.content == "booked t for Bo: 2 guests, vegetarian=False"
        assert threads and threads[0] != threading.get_ident()
        assert_settled(executor, bridge, calls=1)


async def test_url_mode_is_passed_to_the_elicitor_older_era() -> None:
    registry = ToolRegistry()
    async with running(registry, sdk_server("legacy")) as bridge:
        executor = yolo(registry)
        # An accept for URL mode is consent only: content the elicitor adds is not sent.
        elicitor = Elicitor(ElicitationResponse("accept", {"password": "hunter2"}))
        result = await executor.execute("mcp__b__login", {}, ctx(elicitor))
        assert result.ok and result.content == "login: accept", result.error
        [request] = elicitor.asked
        assert request.mode == "url" and request.requested_schema is None
        assert request.url == "https://auth.example.com/authorize?state=1"
        assert request.message == "Sign in to the calendar"
        declined = await executor.execute(
            "mcp__b__login", {}, ctx(Elicitor(ElicitationResponse("decline")))
        )
        assert_input_required(declined, "declined")
        assert "login: decline" in declined.error.message  # type: ignore[union-attr]
        assert_settled(executor, bridge, calls=2)


async def test_an_older_era_error_naming_urls_is_put_to_the_elicitor_then_retried() -> None:
    registry = ToolRegistry()
    async with running(registry, sdk_server("legacy")) as bridge:
        executor = yolo(registry)
        elicitor = Elicitor(ElicitationResponse("accept"))
        result = await executor.execute("mcp__b__calendar", {}, ctx(elicitor))
        assert result.ok and result.content == "calendar: 3 meetings", result.error
        [request] = elicitor.asked
        assert request.mode == "url" and request.url == "https://auth.example.com/authorize?state=2"
        assert request.message == "Sign in to read the calendar"
        assert_settled(executor, bridge, calls=1)
    refusals: list[tuple[Elicitor | None, str]] = [
        (Elicitor(ElicitationResponse("decline")), "declined"),
        (Elicitor(ElicitationResponse("cancel")), "cancelled"),
        (None, "no_elicitor"),
    ]
    for answering, refusal in refusals:
        registry = ToolRegistry()
        async with running(registry, sdk_server("legacy")) as bridge:  # a server not signed in
            executor = yolo(registry)
            refused = await executor.execute("mcp__b__calendar", {}, ctx(answering))
            assert_input_required(refused, refusal)
            assert_settled(executor, bridge, calls=1)


# -- answers: defaults, extra fields, URL mode, refused kinds (hand-written servers) ------------


DEFAULTS_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "size": {
            "type": "string",
            "enum": ["s", "m", "l"],
            "enumNames": ["Small", "Medium", "Large"],
            "default": "m",
        },
        "count": {"type": "integer", "minimum": 1, "default": 3},
        "gift": {"type": "boolean", "default": False},
        "toppings": {
            "type": "array",
            "items": {"type": "string", "enum": ["a", "b"]},
            "default": ["a"],
        },
        "note": {"type": "string", "title": "Note", "description": "optional, no default"},
    },
    "required": ["name", "count"],
}


@pytest.mark.parametrize("era", ERAS)
async def test_defaults_fill_what_an_answer_leaves_out_and_extra_fields_are_not_sent(
    era: str, tmp_path: Path
) -> None:
    record = tmp_path / "record.jsonl"
    registry = ToolRegistry()
    async with running(registry, raw_server(era, record)) as bridge:
        executor = yolo(registry)
        elicitor = Elicitor(
            ElicitationResponse("accept", {"name": "Ada", "count": 7, "secret": "x"}),
            ElicitationResponse("accept", {"name": "Bo", "gift": True, "size": "l"}),
        )
        questions = [form("Order?", DEFAULTS_SCHEMA), form("Another?", DEFAULTS_SCHEMA)]
        result = await executor.execute(
            "mcp__r__ask", ask_arguments(era, questions, tag="d"), ctx(elicitor)
        )
        assert result.ok, result.error
        assert answers_sent(era, record, "d") == [
            {
                "action": "accept",
                "content": {
                    "name": "Ada",
                    "count": 7,
                    "size": "m",
                    "gift": False,
                    "toppings": ["a"],
                },
            },
            {
                "action": "accept",
                "content": {"name": "Bo", "gift": True, "size": "l", "count": 3, "toppings": ["a"]},
            },
        ]
        # The elicitor saw the schema as sent, its enum titles included.
        assert elicitor.asked[0].requested_schema == DEFAULTS_SCHEMA
        assert_settled(executor, bridge, calls=1)


@pytest.mark.parametrize("era", ERAS)
async def test_url_mode_and_questions_fastgate_cannot_put(era: str, tmp_path: Path) -> None:
    record = tmp_path / "record.jsonl"
    registry = ToolRegistry()
    url = "https://pay.example.com/checkout?id=7&x=%20"
    async with running(registry, raw_server(era, record)) as bridge:
        executor = yolo(registry)
        elicitor = Elicitor(ElicitationResponse("accept", {"card": "4111"}))
        question = {"mode": "url", "message": "Pay here", "url": url, "elicitationId": "p1"}
        result = await executor.execute(
            "mcp__r__ask", ask_arguments(era, [question], tag="u"), ctx(elicitor)
        )
        assert result.ok, result.error
        [request] = elicitor.asked
        assert (request.mode, request.url, request.message) == ("url", url, "Pay here")
        assert answers_sent(era, record, "u") == [{"action": "accept"}]  # consent, no content
        # Never put to the elicitor: an address that is not a web page, a mode nobody knows, a
        # schema fastgate cannot check.
        odd = [
            {"mode": "url", "message": "m", "url": "javascript:alert(1)", "elicitationId": "1"},
            {"mode": "url", "message": "m", "url": "file:///etc/passwd", "elicitationId": "1"},
            {"mode": "url", "message": "m", "url": "https://", "elicitationId": "1"},
            {
                "mode": "url",
                "message": "m",
                "url": "https://a.example/\x1b[2J",
                "elicitationId": "1",
            },
            form("m", {"type": "object", "properties": {"a": {"type": "string", "sparkle": 1}}}),
        ]
        for n, question in enumerate(odd):
            tag = f"odd{n}"
            result = await executor.execute(
                "mcp__r__ask", ask_arguments(era, [question], tag=tag), ctx(elicitor)
            )
            assert_input_required(result, "unsupported")
            if era == "legacy":
                assert answers_sent(era, record, tag) == [{"action": "decline"}]
        assert len(elicitor.asked) == 1
        assert_settled(executor, bridge, calls=1 + len(odd))


async def test_sampling_and_roots_requests_stay_refused() -> None:
    registry = ToolRegistry()
    async with running(registry, raw_server("modern")) as bridge:
        executor = yolo(registry)
        elicitor = Elicitor(ElicitationResponse("accept", {"name": "x"}))
        sampling = {"method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 5}}
        roots = {"method": "roots/list", "params": {}}
        for request in (sampling, roots):
            arguments = {
                "rounds": [
                    {"a": {"method": "elicitation/create", "params": form("Name?")}, "b": request}
                ]
            }
            result = await executor.execute("mcp__r__ask", arguments, ctx(elicitor))
            assert_input_required(result, "unsupported")
            assert request["method"] in result.error.message  # type: ignore[union-attr]
        assert_settled(executor, bridge, calls=2)


# -- rounds and the request state (2026) ----------------------------------------------------------


async def test_the_request_state_goes_back_as_it_came_with_a_new_id_each_round(
    tmp_path: Path,
) -> None:
    from tests.mcp.elicit_modern_server import state_for

    record = tmp_path / "record.jsonl"
    registry = ToolRegistry()
    rounds = [
        {"first": {"method": "elicitation/create", "params": form("Name?")}},
        {},  # a round that only carries state: the server wants the call again
        {
            "x": {"method": "elicitation/create", "params": form("Again?")},
            "y": {"method": "elicitation/create", "params": form("And?")},
        },
    ]
    async with running(registry, raw_server("modern", record)) as bridge:
        executor = yolo(registry)
        elicitor = Elicitor(lambda r: ElicitationResponse("accept", {"name": r.message}))
        result = await executor.execute(
            "mcp__r__ask", {"rounds": rounds, "tag": "st"}, ctx(elicitor)
        )
        assert result.ok, result.content
        calls = [r for r in records(record) if r["event"] == "call"]
        assert [c["state"] for c in calls] == [None] + [state_for("st", n) for n in (1, 2, 3)]
        assert all(c["state_ok"] for c in calls)
        assert len({c["id"] for c in calls}) == 4  # a new JSON-RPC id for every retry
        assert [c["responses"] for c in calls] == [
            None,
            {"first": {"action": "accept", "content": {"name": "Name?"}}},
            None,  # nothing was asked in the state-only round
            {
                "x": {"action": "accept", "content": {"name": "Again?"}},
                "y": {"action": "accept", "content": {"name": "And?"}},
            },
        ]
        assert [r.message for r in elicitor.asked] == ["Name?", "Again?", "And?"]
        assert json.loads(result.content)["rounds"] == 3
        assert_settled(executor, bridge, calls=1)


@pytest.mark.parametrize("era", ERAS)
async def test_a_server_asking_more_than_8_times_is_stopped(era: str, tmp_path: Path) -> None:
    record = tmp_path / "record.jsonl"
    registry = ToolRegistry()
    async with running(registry, raw_server(era, record)) as bridge:
        executor = yolo(registry)
        elicitor = Elicitor(ElicitationResponse("accept", {}))
        if era == "modern":
            arguments: dict[str, Any] = {"forever": True, "tag": "f"}
        else:
            empty = {"type": "object", "properties": {}}
            arguments = {"requests": [form(f"Again ({n})?", empty) for n in range(12)], "tag": "f"}
        result = await executor.execute("mcp__r__ask", arguments, ctx(elicitor))
        assert_input_required(result, "rounds_exceeded")
        assert "more than 8 times" in result.error.message  # type: ignore[union-attr]
        assert len(elicitor.asked) == 8
        if era == "modern":
            assert len([r for r in records(record) if r["event"] == "call"]) == 9
        else:  # every later question got a decline, without a prompt
            assert (
                answers_sent(era, record, "f")
                == [{"action": "accept", "content": {}}] * 8 + [{"action": "decline"}] * 4
            )
        assert_settled(executor, bridge, calls=1)


# -- routing and cancellation ---------------------------------------------------------------------


async def test_concurrent_calls_on_one_connection_each_get_their_own_questions(
    tmp_path: Path,
) -> None:
    record = tmp_path / "record.jsonl"
    registry = ToolRegistry()
    both_open = asyncio.Event()
    opened: list[str] = []

    def waiting_for_both(name: str) -> Any:
        async def elicitor(request: ElicitationRequest) -> ElicitationResponse:
            opened.append(name)
            if len(opened) == 2:
                both_open.set()
            async with asyncio.timeout(30):
                await both_open.wait()  # both questions are open at once
            return ElicitationResponse("accept", {"name": f"{name} answered {request.message}"})

        return elicitor

    async with running(registry, raw_server("legacy", record)) as bridge:
        # Two agents (each executor runs an untrusted server's calls one at a time) sharing one
        # connection; the server asks once both calls are in flight, naming each call.
        first, second = yolo(registry), yolo(registry)
        a, b = await asyncio.gather(
            *(
                executor.execute(
                    "mcp__r__ask",
                    {
                        "requests": [form(f"Q1 of {tag}")],
                        "tag": tag,
                        "name_the_call": True,
                        "after_calls": 2,
                    },
                    ctx(waiting_for_both(person), session_id=person),
                )
                for executor, tag, person in ((first, "A", "alice"), (second, "B", "bob"))
            )
        )
        assert a.ok and b.ok, (a.error, b.error)
        assert answers_sent("legacy", record, "A") == [
            {"action": "accept", "content": {"name": "alice answered Q1 of A"}}
        ]
        assert answers_sent("legacy", record, "B") == [
            {"action": "accept", "content": {"name": "bob answered Q1 of B"}}
        ]
        assert sorted(opened) == ["alice", "bob"]
        assert_settled(first, bridge, calls=1)
        assert_settled(second, bridge, calls=1)


async def test_a_question_naming_no_call_is_declined_when_several_are_in_flight(
    tmp_path: Path,
) -> None:
    record = tmp_path / "record.jsonl"
    registry = ToolRegistry()
    async with running(registry, raw_server("legacy", record)) as bridge:
        first, second = yolo(registry), yolo(registry)
        elicitor = Elicitor(ElicitationResponse("accept", {"name": "x"}))
        results = await asyncio.gather(
            *(
                executor.execute(
                    "mcp__r__ask",
                    {
                        "requests": [form("Whose?")],
                        "tag": tag,
                        "after_calls": 2,
                        "reply_after_answers": 2,  # both in flight while either is asked
                    },
                    ctx(elicitor),
                )
                for executor, tag in ((first, "A"), (second, "B"))
            )
        )
        # Either call might be the one asking: nobody is asked, the server hears no.
        assert not elicitor.asked
        for tag in ("A", "B"):
            assert answers_sent("legacy", record, tag) == [{"action": "decline"}]
        for result in results:  # nothing was refused for these calls themselves
            assert result.ok, result.error
        assert_settled(first, bridge, calls=1)
        assert_settled(second, bridge, calls=1)


@pytest.mark.parametrize("era", ERAS)
async def test_cancelling_a_call_while_its_elicitor_is_open_leaves_nothing_behind(
    era: str, tmp_path: Path
) -> None:
    record = tmp_path / "record.jsonl"
    registry = ToolRegistry()
    opened = asyncio.Event()
    ended: list[str] = []

    async def never_answers(request: ElicitationRequest) -> ElicitationResponse:
        opened.set()
        try:
            await asyncio.Event().wait()
        finally:
            ended.append("cancelled")
        raise AssertionError("unreachable")

    async with running(registry, raw_server(era, record)) as bridge:
        executor = yolo(registry)
        token = CancelToken()
        arguments = ask_arguments(era, [form("Name?")], tag="c")
        call = asyncio.ensure_future(
            executor.execute("mcp__r__ask", arguments, ctx(never_answers, cancel=token))
        )
        async with asyncio.timeout(30):
            await opened.wait()
        token.cancel("the user pressed stop")
        result = await call
        assert result.error is not None and result.error.code is ErrorCode.ABORTED, result.error
        assert ended == ["cancelled"]
        link = bridge._links["r"]
        assert not link._router._calls
        assert_settled(executor, bridge, calls=1)
    if era == "legacy":  # the server's open question was answered: cancelled
        replies = [
            r["result"] for r in records(record) if r["event"] == "wire" and r["method"] is None
        ]
        assert replies == [{"action": "cancel"}]


async def test_a_person_thinking_is_not_silence_but_the_call_timeout_still_counts() -> None:
    registry = ToolRegistry()
    server = raw_server("modern", idle_timeout=0.3, call_timeout=1.5)
    async with running(registry, server) as bridge:
        executor = yolo(registry)

        async def slow(request: ElicitationRequest) -> ElicitationResponse:
            await asyncio.sleep(0.8)  # longer than idle_timeout: a person thinking
            return ElicitationResponse("accept", {"name": "late"})

        answered = await executor.execute(
            "mcp__r__ask", ask_arguments("modern", [form("Q?")]), ctx(slow)
        )
        assert answered.ok, answered.error

        async def never(request: ElicitationRequest) -> ElicitationResponse:
            await asyncio.Event().wait()
            raise AssertionError("unreachable")

        timed_out = await executor.execute(
            "mcp__r__ask", ask_arguments("modern", [form("Q?")]), ctx(never)
        )
        assert timed_out.error is not None and timed_out.error.code is ErrorCode.TIMEOUT
        assert timed_out.error.details["reason"] == "call_timeout"
        assert_settled(executor, bridge, calls=2)


async def test_an_elicitor_that_fails_or_answers_nonsense_fails_the_call() -> None:
    def raising(request: ElicitationRequest) -> ElicitationResponse:
        raise RuntimeError("the UI crashed")

    async def cancelled_itself(request: ElicitationRequest) -> ElicitationResponse:
        raise asyncio.CancelledError

    async def nonsense(request: ElicitationRequest) -> Any:
        return {"action": "accept", "content": {"name": "x"}}

    registry = ToolRegistry()
    async with running(registry, sdk_server("modern")) as bridge:
        executor = yolo(registry)
        for elicitor in (raising, cancelled_itself, nonsense):
            result = await executor.execute("mcp__b__book", {"table": "t"}, ctx(elicitor))
            assert_input_required(result, "failed")
            assert "the UI crashed" not in result.error.message  # type: ignore[union-attr]
        assert_settled(executor, bridge, calls=3)


# -- policy -------------------------------------------------------------------------------------


class CountingStore:
    """A ToolUseStore that counts what it is asked to record."""

    def __init__(self) -> None:
        self.tool_uses: list[Any] = []
        self.results: list[Any] = []

    async def record_tool_use(self, record: Any) -> None:
        self.tool_uses.append(record)

    async def record_result(self, execution_id: str, result: Any) -> None:
        self.results.append((execution_id, result))

    async def load(self, session_id: str) -> list[Any]:
        return []

    async def close(self) -> None:
        return None


@pytest.mark.parametrize("era", ERAS)
async def test_an_answer_never_goes_around_the_policy(era: str) -> None:
    approvals: list[Any] = []

    async def approver(request: Any) -> ApprovalResponse:
        approvals.append(request)
        return ApprovalResponse(True)

    registry = ToolRegistry()
    store = CountingStore()
    async with running(registry, sdk_server(era)) as bridge:
        # DEFAULT mode asks before an MCP tool (EXECUTE): one approval for the call, and the
        # question and its answer (2026: a retried request) are part of that same call.
        executor = ToolExecutor(registry, store=store)
        elicitor = Elicitor(ElicitationResponse("accept", {"name": "Ada"}))
        result = await executor.execute(
            "mcp__b__book", {"table": "t"}, ctx(elicitor, approver=approver)
        )
        assert result.ok, result.error
        assert len(approvals) == 1 and len(elicitor.asked) == 1
        assert approvals[0].args == {"table": "t"}  # the answer never became an argument
        assert len(store.tool_uses) == 1 and len(store.results) == 1
        assert store.tool_uses[0].args == {"table": "t"}
        assert len(executor.history()) == 1
        # Denied by a rule: the server is never reached, so nobody is asked anything.
        strict = ToolExecutor(registry, permissions=PermissionConfig(deny=["mcp__b"]))
        refused = await strict.execute(
            "mcp__b__book", {"table": "t"}, ctx(elicitor, approver=approver)
        )
        assert refused.error is not None and refused.error.code is ErrorCode.PERMISSION_DENIED
        assert len(elicitor.asked) == 1 and len(approvals) == 1
        assert_settled(executor, bridge, calls=1)


# -- the terminal: fastgate call answers on it ----------------------------------------------------


class Screen:
    """A pseudo-terminal for the terminal elicitor: ``slave`` is its terminal, ``type`` writes
    at the keyboard, ``read_until`` reads the screen (synchronously: a subprocess may own it)."""

    def __init__(self) -> None:
        import os

        self.master, self.slave = os.openpty()
        self.screen = ""
        self._unread = ""

    def type(self, text: str) -> None:
        import os

        os.write(self.master, text.encode())

    def read_until(self, text: str, timeout: float = 60.0) -> str:
        import os
        import select
        import time

        end = time.monotonic() + timeout
        while text not in self._unread:
            left = end - time.monotonic()
            assert left > 0, f"{text!r} never shown; the screen: {self.screen!r}"
            readable, _, _ = select.select([self.master], [], [], left)
            if readable:
                try:
                    chunk = os.read(self.master, 65536).decode("utf-8", "replace")
                except OSError:  # the other side is gone
                    chunk = ""
                assert chunk, f"{text!r} never shown; the screen: {self.screen!r}"
                self.screen += chunk
                self._unread += chunk
        cut = self._unread.index(text) + len(text)
        shown, self._unread = self._unread[:cut], self._unread[cut:]
        return shown

    def close(self) -> None:
        import contextlib
        import os

        for fd in (self.master, self.slave):
            with contextlib.suppress(OSError):
                os.close(fd)


@pytest.fixture
def screen() -> Any:
    term = Screen()
    yield term
    term.close()


FORM = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "title": "Your name", "description": "as on the card"},
        "guests": {"type": "integer", "minimum": 1, "maximum": 12, "default": 2},
        "size": {"type": "string", "enum": ["s", "l"], "enumNames": ["Small", "Large"]},
        "extras": {
            "type": "array",
            "items": {"anyOf": [{"const": "wine", "title": "Wine"}, {"const": "cake"}]},
        },
        "vip": {"type": "boolean"},
    },
    "required": ["name", "vip"],
}


async def _with_typing(screen: Screen, asking: Any, script: list[tuple[str, str]]) -> Any:
    """Run ``asking`` while typing each answer once its prompt is on the screen."""
    pending = asyncio.ensure_future(asking)
    for prompt, typed in script:
        await asyncio.to_thread(screen.read_until, prompt)
        screen.type(typed)
    return await pending


async def test_the_terminal_elicitor_asks_field_by_field(screen: Screen) -> None:
    from fastgate.cli.terminal_elicitor import TerminalElicitor

    elicitor = TerminalElicitor(input=screen.slave, output=screen.slave)
    request = ElicitationRequest("b", "mcp__b__book", "Book a \x1b[2Jtable", FORM)
    answer = await _with_typing(
        screen,
        elicitor(request),
        [
            ("> ", "y\n"),
            ("name> ", "\n"),  # required: asked again
            ("name> ", "Ada Lovelace\n"),
            ("guests> ", "many\n"),  # not a number: asked again
            ("guests> ", "40\n"),  # over the maximum: asked again
            ("guests> ", "\n"),  # the default (the bridge fills it)
            ("size> ", "2\n"),
            ("extras> ", "cake, 1\n"),
            ("vip> ", "yes\n"),
        ],
    )
    assert answer == ElicitationResponse(
        "accept", {"name": "Ada Lovelace", "size": "l", "extras": ["cake", "wine"], "vip": True}
    )
    shown = screen.screen
    assert "MCP server b asks for mcp__b__book" in shown
    assert "\\u001b[2J" in shown and "\x1b[2J" not in shown  # escapes shown, not obeyed
    assert "Your name (string, required)" in shown and "as on the card" in shown
    assert "1) s — Small" in shown and "2) l — Large" in shown and "1) wine — Wine" in shown
    assert "Enter for 2" in shown and "An answer is required." in shown
    assert "not to the model" in shown


@pytest.mark.parametrize(
    ("typed", "action"),
    [("n\n", "decline"), ("\x03", "cancel"), ("\x04", "cancel"), ("maybe\n" * 10, "cancel")],
)
async def test_the_terminal_elicitor_declines_and_dismisses(
    screen: Screen, typed: str, action: str
) -> None:
    from fastgate.cli.terminal_elicitor import TerminalElicitor

    elicitor = TerminalElicitor(input=screen.slave, output=screen.slave)
    request = ElicitationRequest("b", "t", "Name?", NAME_ONLY)
    answer = await _with_typing(screen, elicitor(request), [("> ", typed)])
    assert answer == ElicitationResponse(action)  # type: ignore[arg-type]


async def test_the_terminal_elicitor_shows_a_url_for_consent(screen: Screen) -> None:
    from fastgate.cli.terminal_elicitor import TerminalElicitor

    elicitor = TerminalElicitor(input=screen.slave, output=screen.slave)
    url = "https://auth.example.com/authorize?state=1"
    request = ElicitationRequest("b", "t", "Sign in", url=url, mode="url")
    assert await _with_typing(screen, elicitor(request), [("> ", "y\n")]) == ElicitationResponse(
        "accept"
    )
    assert url in screen.screen and "domain: auth.example.com" in screen.screen
    assert "fastgate does not open it" in screen.screen
    # A form no terminal prompt can ask (a nested object) is declined without a question.
    nested = {"type": "object", "properties": {"a": {"type": "object"}}}
    declined = await elicitor(ElicitationRequest("b", "t", "Nested?", nested))
    assert declined == ElicitationResponse("decline")


def _mcp_config(tmp_path: Path) -> Path:
    config = tmp_path / "mcp.json"
    server = {"command": sys.executable, "args": [str(SDK_SERVER)], "env": {"ELICIT_ERA": "modern"}}
    config.write_text(json.dumps({"mcpServers": {"b": server}}))
    return config


def _fastgate_call(tmp_path: Path, *options: str, stdin: Any, stderr: Any) -> Any:
    import subprocess

    return subprocess.Popen(
        [
            str(Path(sys.executable).with_name("fastgate")),
            "call",
            "mcp__b__book",
            '{"table": "t1"}',
            "--mcp-config",
            str(_mcp_config(tmp_path)),
            "--no-discover",
            "--json",
            *options,
        ],
        cwd=tmp_path,
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
    )


def test_fastgate_call_answers_a_form_on_the_terminal(screen: Screen, tmp_path: Path) -> None:
    # The approval is given by --approve once; the server's question is asked at the terminal
    # (stdin), field by field, on stderr: stdout stays one JSON report.
    process = _fastgate_call(tmp_path, "--approve", "once", stdin=screen.slave, stderr=screen.slave)
    try:
        for prompt, typed in [
            ("[y] answer", "y\n"),
            ("name> ", "Ada\n"),
            ("guests> ", "4\n"),
            ("vegetarian> ", "y\n"),
        ]:
            screen.read_until(prompt)
            screen.type(typed)
        out, _ = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, screen.screen
    report = json.loads(out)
    assert report["result"]["content"] == "booked t1 for Ada: 4 guests, vegetarian=True"
    assert "MCP server b asks for mcp__b__book" in screen.screen


@pytest.mark.parametrize("terminal", [True, False])
def test_fastgate_call_declines_without_a_terminal_or_with_approve_never(
    screen: Screen, tmp_path: Path, terminal: bool
) -> None:
    import subprocess

    # An allow rule lets the call run without approval; the question is then declined, not
    # asked: --approve never on a terminal, or no terminal at all.
    options = ("--allow", "mcp__b") + (("--approve", "never") if terminal else ())
    process = _fastgate_call(
        tmp_path,
        *options,
        stdin=screen.slave if terminal else subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    out, err = process.communicate(timeout=120)
    report = json.loads(out)
    assert process.returncode == 1, err
    assert report["result"]["error"]["details"]["reason"] == "input_required"
    assert report["result"]["error"]["details"]["answer"] == "declined"
    why = "--approve never" if terminal else "no terminal to ask on"
    assert f"b asked a question: declined ({why})" in err
    assert "[y] answer" not in err
