"""What an upstream MCP server sends is bounded before fastgate holds it or passes it on: content
blocks of every kind within the content budget, HTTP bodies while they are read (compressed ones
by what they decode to), progress messages, tool definitions one by one and listings in all, and
the questions one call may put to a person. Servers: ``tests/mcp/bounds_server.py`` (stdio, both
eras), ``tests/mcp/bodies_http_server.py`` (streamable HTTP), ``tests/mcp/elicit_modern_server.py``
(input requests of the 2026 era)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import sys
import tracemalloc
from pathlib import Path
from typing import Any, cast

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from fastgate import (
    ElicitationRequest,
    ElicitationResponse,
    ErrorCode,
    ExecutionContext,
    PermissionMode,
    ToolExecutor,
    ToolRegistry,
)
from fastgate.mcp import MCPBridge, MCPServerConfig, MCPStartupError, _http, _server
from fastgate.model.rendering import DEFAULT_MAX_CONTENT_CHARS
from tests.mcp.servers import (
    all_pids,
    assert_gone,
    assert_settled,
    http_script_server,
    running,
)

# Servers and processes of their own, the same in both builds: run once, in the compiled build.
pytestmark = pytest.mark.slow

CTX = ExecutionContext(session_id="s1")
MCP_DIR = Path(__file__).parent
BOUNDS = MCP_DIR / "bounds_server.py"
BODIES = MCP_DIR / "bodies_http_server.py"
MODERN_ELICIT = MCP_DIR / "elicit_modern_server.py"
ERAS = ("legacy", "modern")
# The JSON of a block carries a few characters per field besides what the budget counts.
SLACK = 2_000


def bounds(era: str, listing: str = "plain", name: str = "b", **options: Any) -> MCPServerConfig:
    return MCPServerConfig(name, command=[sys.executable, str(BOUNDS), era, listing], **options)


def yolo(registry: ToolRegistry) -> ToolExecutor:
    return ToolExecutor(registry, mode=PermissionMode.YOLO)


def size(content: Any) -> int:
    if isinstance(content, str):
        return len(content)
    return len(json.dumps(content, separators=(",", ":")))


# -- content blocks -------------------------------------------------------------------------------

# tool -> what its content must say was left out or cut (None: nothing needs to be)
BLOCKS: dict[str, str | None] = {
    "text_and_image": "characters cut",
    "big_image": "'image' block left out",
    "big_audio": "'audio' block left out",
    "resource_text": "characters cut",
    "resource_blob": "'resource' block left out",
    "many_blocks": "more content block(s) left out",
    "long_labels": "characters cut",
    "resource_meta": "'resource' block left out",
    "structured_shown": "characters cut",
}


@pytest.mark.parametrize("era", ERAS)
async def test_content_blocks_are_held_to_the_content_budget(era: str) -> None:
    # Text alongside an image, a base64 image or audio of megabytes, an embedded resource's text
    # or blob, a hundred thousand small blocks, labels of megabytes, a resource's _meta of
    # megabytes, structured content shown through such blocks: the model gets at most the budget.
    registry = ToolRegistry()
    async with running(registry, bounds(era)) as bridge:
        executor = yolo(registry)
        for tool, said in BLOCKS.items():
            result = await executor.execute(f"mcp__b__{tool}", {}, CTX)
            assert result.ok, (tool, result.error)
            assert isinstance(result.content, tuple), tool
            assert size(result.content) <= DEFAULT_MAX_CONTENT_CHARS + SLACK, tool
            shown = json.dumps(result.content)
            assert said is None or said in shown, (tool, shown[:300])
        small = await executor.execute("mcp__b__small", {}, CTX)
        assert small.ok and small.content == "fine"
        assert_settled(executor, bridge, calls=len(BLOCKS) + 1)


def test_blocks_within_the_budget_are_passed_on_as_they_came() -> None:
    from fastgate.mcp._tools import bounded_blocks

    blocks = (
        {"type": "text", "text": "hello"},
        {"type": "image", "data": "QUJD", "mimeType": "image/png"},
        {"type": "resource", "resource": {"uri": "file:///r", "text": "r", "mimeType": "x/y"}},
    )
    assert bounded_blocks(blocks) == blocks


@pytest.mark.parametrize(
    "nested",
    [
        functools.reduce(lambda inner, _: [inner], range(100_000), cast(Any, [])),
        list(range(3_000_000)),
        {"k": ["x" * 1000] * 100_000},
    ],
    ids=["deep", "a long list", "a wide object"],
)
def test_a_huge_nested_field_is_left_out_without_being_encoded(nested: Any) -> None:
    # A server's nested value in a block (its _meta, annotations) is kept whole or left out;
    # finding it too large costs the budget, not the value (nothing of it is encoded).
    from fastgate.mcp._tools import bounded_blocks

    blocks = ({"type": "text", "text": "hello", "_meta": nested},)
    tracemalloc.start()
    try:
        (kept,) = bounded_blocks(blocks)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert kept["type"] == "text" and "left out" in kept["text"]
    assert peak < 1_000_000


# -- progress -------------------------------------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
async def test_progress_messages_are_cut(era: str) -> None:
    # Forty progress notifications of a megabyte each: each message is passed on cut.
    registry = ToolRegistry()
    async with running(registry, bounds(era)) as bridge:
        executor = yolo(registry)
        seen: list[Any] = []

        async def watch() -> None:
            async for event in executor.progress():
                seen.append(event.data)  # noqa: PERF401 - cancelled mid-stream

        watcher = asyncio.get_running_loop().create_task(watch())
        await asyncio.sleep(0)
        result = await executor.execute("mcp__b__progress", {}, CTX)
        await asyncio.sleep(0.1)
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        assert result.ok and result.content == "done"
        assert seen, "no progress reached the executor"
        longest = max(len(data["message"]) for data in seen)
        assert longest <= _server.PROGRESS_MESSAGE_CHARS + 1
        assert_settled(executor, bridge, calls=1)


# -- listings -------------------------------------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
async def test_a_tool_over_a_megabyte_is_quarantined_and_the_rest_work(era: str) -> None:
    # Over a megabyte in its description, its input schema, its output schema, its name.
    registry = ToolRegistry()
    async with running(registry, bounds(era, "fat")) as bridge:
        status = bridge.status()["b"]
        assert status["state"] == "ready"
        fat = [name for name in status["quarantined"] if name.startswith("fat_")]
        assert len(fat) == 4, status["quarantined"].keys()
        for name in fat:
            assert "a tool may take" in status["quarantined"][name]
        assert not any(name.startswith("mcp__b__fat_") for name in status["tool_names"])
        result = await yolo(registry).execute("mcp__b__small", {}, CTX)
        assert result.ok and result.content == "fine"


@pytest.mark.parametrize("era", ERAS)
async def test_a_listing_over_its_bytes_in_all_is_refused(
    era: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pages of tools of half a megabyte each, none too large alone: the listing as a whole is.
    monkeypatch.setattr(_server, "MAX_LISTING_BYTES", 2 * 1024 * 1024)
    registry = ToolRegistry()
    bridge = MCPBridge(registry, [bounds(era, "heavy", required=True, startup_timeout=30)])
    with pytest.raises(MCPStartupError) as raised:
        async with asyncio.timeout(60):
            await bridge.start()
    assert_gone(all_pids(bridge))
    assert "bytes of tools" in raised.value.reason
    assert registry.resolve("mcp__b__small") is None


# -- HTTP bodies ----------------------------------------------------------------------------------


async def test_http_bodies_are_bounded_while_they_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    # Eight megabytes against a limit of one: chunked, with a length, gzip and deflate bombs
    # (a few kilobytes on the wire), and a 401 carrying them. Each call fails, none is read
    # whole, and the connection still serves calls.
    monkeypatch.setattr(_http, "MAX_BODY_BYTES", 1024 * 1024)
    registry = ToolRegistry()
    with http_script_server(BODIES) as (url, _):
        config = MCPServerConfig("w", url=url, call_timeout=60)
        async with running(registry, config) as bridge:
            executor = yolo(registry)
            for tool in ("chunked", "sized", "gzip", "deflate", "unauthorized"):
                result = await executor.execute(f"mcp__w__{tool}", {}, CTX)
                assert not result.ok, (tool, size(result.content))
                assert result.error is not None and result.error.code is ErrorCode.TOOL_ERROR
                if tool == "unauthorized":  # its body is not needed: the answer is the status
                    assert result.error.details["reason"] == "unauthorized", result.error
                else:
                    assert "over 1048576 bytes" in result.error.message, (tool, result.error)
                small = await executor.execute("mcp__w__small", {}, CTX)
                assert small.ok and small.content == "fine", (tool, small.error)
            assert_settled(executor, bridge, calls=10)


# -- questions ------------------------------------------------------------------------------------


class Counting:
    def __init__(self) -> None:
        self.asked: list[ElicitationRequest] = []

    async def __call__(self, request: ElicitationRequest) -> ElicitationResponse:
        self.asked.append(request)
        return ElicitationResponse("accept", {"name": "x", "ok": True})


def ask(message: str) -> dict[str, Any]:
    schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    params = {"mode": "form", "message": message, "requestedSchema": schema}
    return {"method": "elicitation/create", "params": params}


# The rounds of input requests a 2026 server answers a call with: more questions than a call
# may put to a person, in one round or over several.
ROUNDS: dict[str, list[dict[str, Any]]] = {
    "nine in one round": [{f"q{n}": ask(f"Q{n}?") for n in range(9)}],
    "three rounds of three": [{f"r{r}q{n}": ask(f"R{r}Q{n}?") for n in range(3)} for r in range(3)],
    "a hundred in one round": [{f"q{n}": ask(f"Q{n}?") for n in range(100)}],
}


async def test_a_call_puts_at_most_8_questions_to_a_person() -> None:
    registry = ToolRegistry()
    config = MCPServerConfig("r", command=[sys.executable, str(MODERN_ELICIT)])
    async with running(registry, config, bounds("modern", name="b")) as bridge:
        executor = yolo(registry)
        for spelling, rounds in [*ROUNDS.items(), ("forty (bounds server)", [])]:
            elicitor = Counting()
            context = ExecutionContext(session_id="s1", elicitor=elicitor)
            if rounds:
                result = await executor.execute("mcp__r__ask", {"rounds": rounds}, context)
            else:
                result = await executor.execute("mcp__b__questions", {}, context)
            assert not result.ok, spelling
            assert result.error is not None and result.error.code is ErrorCode.TOOL_FAILURE
            assert result.error.details["answer"] == "rounds_exceeded", spelling
            assert "more than 8 questions" in result.error.message, spelling
            assert len(elicitor.asked) <= 8, (spelling, len(elicitor.asked))
        # Eight questions over several rounds are answered.
        elicitor = Counting()
        within = [{f"r{r}q{n}": ask(f"R{r}Q{n}?") for n in range(2)} for r in range(4)]
        context = ExecutionContext(session_id="s1", elicitor=elicitor)
        result = await executor.execute("mcp__r__ask", {"rounds": within}, context)
        assert result.ok, result.error
        assert len(elicitor.asked) == 8
        assert_settled(executor, bridge, calls=len(ROUNDS) + 2)


class Endless:
    """A transport whose every answer has ``status`` and a body of 16 MiB (as good as endless
    against a limit of one), counting what was pulled from it."""

    def __init__(self, status: int) -> None:
        self.status = status
        self.pulled = 0

    async def handle_async_request(self, request: Any) -> Any:
        import httpx2

        transport = self

        class Body(httpx2.AsyncByteStream):
            async def __aiter__(self) -> Any:
                for _ in range(256):
                    transport.pulled += 65536
                    yield b"x" * 65536

        return httpx2.Response(
            self.status, headers={"content-type": "application/json"}, stream=Body()
        )

    async def aclose(self) -> None:
        pass


@pytest.mark.parametrize("status", [200, 401, 403])
async def test_every_connection_reads_bounded_bodies(
    status: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The transport every connection gets: an answer, an unauthorized one included, is read
    # only up to the limit, however much more the server sends.
    import httpx2

    from fastgate.mcp import _auth

    inner = Endless(status)
    monkeypatch.setattr(httpx2, "AsyncHTTPTransport", lambda: inner)
    monkeypatch.setattr(_http, "MAX_BODY_BYTES", 1024 * 1024)
    options = _auth.HttpAuth(None, ()).client_options()
    async with httpx2.AsyncClient(**options) as client:
        request = client.build_request(
            "POST", "http://127.0.0.1:9/mcp", extensions={_auth._MCP_REQUEST: True}
        )
        async with asyncio.timeout(30):
            response = await client.send(request, stream=True)
            try:
                if status == 200:
                    with pytest.raises(_http.BodyTooLarge):
                        await response.aread()
                else:
                    await response.aread()  # the unauthorized answer, made of its status
                    assert response.status_code == status
            finally:
                await response.aclose()
    assert inner.pulled <= 1024 * 1024 + 65536


# -- a server whose tools never stop changing -----------------------------------------------------

CHURN = MCP_DIR / "churn_server.py"


@pytest.mark.parametrize("mode", ["after-list", "flood"])
async def test_a_server_changing_its_tools_over_and_over_gets_a_share_of_the_loop(
    mode: str,
) -> None:
    # Each listing is new and costly to compile, and the server says its tools changed after
    # every listing (or a thousand times a second): its refreshes are spaced, and the event
    # loop, which every other session shares, stays free most of the time.
    registry = ToolRegistry()
    config = MCPServerConfig("c", command=[sys.executable, str(CHURN), mode])
    async with running(registry, config) as bridge:
        loop = asyncio.get_running_loop()
        began = loop.time()
        ticks = 0
        while loop.time() - began < 5.0:
            await asyncio.sleep(0.01)
            ticks += 1
        status = bridge.status()["c"]
        assert status["state"] == "ready"
        # Free, about 450 ticks of 10 ms; a server holding the loop leaves about 50.
        assert ticks >= 250, (ticks, status["generation"])


# -- what the server says, in status() and logs -------------------------------------------------


@pytest.mark.parametrize(
    ("era", "listing"),
    [
        ("legacy", "refuse-initialize"),
        ("legacy", "refuse-tools/list"),
        ("modern", "refuse-tools/list"),
    ],
)
async def test_a_servers_huge_error_message_is_cut_where_it_is_shown(
    era: str, listing: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The handshake or the listing refused with an error message of megabytes, full of
    # terminal escapes: the startup error, status() and the log quote it cut and escaped.
    caplog.set_level(logging.INFO, logger="fastgate.mcp")
    registry = ToolRegistry()
    bridge = MCPBridge(registry, [bounds(era, listing, required=True)])
    with pytest.raises(MCPStartupError) as raised:
        async with asyncio.timeout(60):
            await bridge.start()
    assert_gone(all_pids(bridge))
    reason = raised.value.reason
    assert "no\\x1b[2J" in reason and "\x1b" not in reason
    assert len(reason) <= 20_000, len(reason)
    assert len(bridge.status()["b"]["last_error"] or "") <= 20_000
    logged = sum(len(r.getMessage()) for r in caplog.records if r.name == "fastgate.mcp")
    assert logged <= 50_000, logged


async def test_quarantined_tools_with_huge_names_are_cut_where_they_are_shown(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Forty tools refused for their schema, each named with 200 kB of escapes: status() names
    # each apart, cut and escaped; the log names the first few and counts the rest.
    caplog.set_level(logging.INFO, logger="fastgate.mcp")
    registry = ToolRegistry()
    async with running(registry, bounds("legacy", "odd-names")) as bridge:
        quarantined = bridge.status()["b"]["quarantined"]
        assert len(quarantined) == 40
        for name, reason in quarantined.items():
            assert len(name) <= 1_000 and "\x1b" not in name, len(name)
            assert len(reason) <= 2_000 and "\x1b" not in reason, len(reason)
        result = await yolo(registry).execute("mcp__b__small", {}, CTX)
        assert result.ok and result.content == "fine"
    logged = [r.getMessage() for r in caplog.records if r.name == "fastgate.mcp"]
    assert sum(map(len, logged)) <= 100_000, sum(map(len, logged))
    assert sum("not registered" in m for m in logged) <= 21


LEGACY_ELICIT = MCP_DIR / "elicit_legacy_server.py"

# Requested schemas no person could be asked, each over 256 KiB.
HUGE_FORMS: dict[str, dict[str, Any]] = {
    "thousands of fields": {
        "type": "object",
        "properties": {f"f{n}": {"type": "string", "title": "t" * 90} for n in range(4000)},
    },
    "a title of 300 kB": {
        "type": "object",
        "properties": {"name": {"type": "string", "title": "t" * 300_000}},
    },
    "an enum of 30,000 choices": {
        "type": "object",
        "properties": {"pick": {"type": "string", "enum": [f"choice-{n}" for n in range(30_000)]}},
    },
}


@pytest.mark.parametrize("era", ERAS)
async def test_a_question_with_a_huge_form_is_not_put_to_anyone(era: str) -> None:
    script = MODERN_ELICIT if era == "modern" else LEGACY_ELICIT
    registry = ToolRegistry()
    async with running(registry, MCPServerConfig("r", command=[sys.executable, str(script)])):
        executor = yolo(registry)
        for spelling, schema in HUGE_FORMS.items():
            elicitor = Counting()
            question = {"mode": "form", "message": "Fill this in", "requestedSchema": schema}
            if era == "modern":
                request = {"method": "elicitation/create", "params": question}
                arguments: dict[str, Any] = {"rounds": [{"q": request}]}
            else:
                arguments = {"requests": [question]}
            context = ExecutionContext(session_id="s1", elicitor=elicitor)
            result = await executor.execute("mcp__r__ask", arguments, context)
            assert not result.ok, spelling
            assert result.error is not None and result.error.details["answer"] == "unsupported"
            assert "a question may take" in result.error.message, (spelling, result.error)
            assert not elicitor.asked, spelling


# -- a server that stops reading ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("idle", "limit", "which"), [(1.0, 30.0, "idle_timeout"), (30.0, 1.5, "call_timeout")]
)
async def test_a_call_to_a_server_that_stops_reading_times_out_on_time(
    idle: float, limit: float, which: str
) -> None:
    # The server reads nothing after its listing: the call's arguments (bigger than a pipe
    # holds) and then its notifications/cancelled stay unwritten. The caller has its TIMEOUT
    # when the clock says, not after the SDK has given up writing the cancellation.
    registry = ToolRegistry()
    config = bounds("legacy", "deaf", idle_timeout=idle, call_timeout=limit)
    async with running(registry, config) as bridge:
        executor = yolo(registry)
        loop = asyncio.get_running_loop()
        for n in range(2):
            began = loop.time()
            result = await executor.execute("mcp__b__small", {"pad": "p" * 300_000}, CTX)
            took = loop.time() - began
            assert result.error is not None and result.error.code is ErrorCode.TIMEOUT, result
            assert result.error.details["reason"] == which
            assert took <= min(idle, limit) + 2.0, (n, took)
        link = bridge._links["b"]
        if link._requests:  # they wind down in the background
            await asyncio.wait(set(link._requests), timeout=30)
        assert_settled(executor, bridge, calls=2)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc")
@pytest.mark.parametrize("tool", ["silent", "stalled_json", "stalled_sse"])
async def test_answers_that_never_come_over_http_leave_nothing_behind(tool: str) -> None:
    # A POST answered with nothing, with a JSON head and a first chunk, or with an event stream
    # that goes quiet: each call times out, and its POST (which the SDK abandons unclosed)
    # is ended once no call or start could still need it: no task or connection stays.
    registry = ToolRegistry()
    with http_script_server(BODIES) as (url, _):
        config = MCPServerConfig(
            "w", url=url, idle_timeout=0.3, call_timeout=1.0, startup_timeout=2.0
        )
        async with running(registry, config) as bridge:
            executor = yolo(registry)
            assert (await executor.execute("mcp__w__small", {}, CTX)).ok
            tasks, fds = len(asyncio.all_tasks()), open_fds()
            for _ in range(3):
                result = await executor.execute(f"mcp__w__{tool}", {}, CTX)
                assert result.error is not None and result.error.code is ErrorCode.TIMEOUT
            await asyncio.sleep(5.0)  # past call_timeout and startup_timeout and the grace
            assert len(asyncio.all_tasks()) <= tasks + 1, (tasks, asyncio.all_tasks())
            assert open_fds() <= fds + 1, (fds, open_fds())
            small = await executor.execute("mcp__w__small", {}, CTX)
            assert small.ok and small.content == "fine"
            assert bridge.status()["w"]["restarts"] == 0
            assert_settled(executor, bridge, calls=5)


async def test_the_2026_listen_stream_outlives_the_post_deadline() -> None:
    # The POST deadline (the longer of call_timeout and startup_timeout, plus 2 s) is 4 s here;
    # the subscription that brings tools/list_changed stays open well past it.
    from tests.mcp.servers import http_fixture

    with http_fixture() as (url, _pid):
        registry = ToolRegistry()
        config = MCPServerConfig("web", url=url, call_timeout=2.0, startup_timeout=2.0)
        async with running(registry, config) as bridge:
            assert bridge.status()["web"]["protocol_version"] == "2026-07-28"
            await asyncio.sleep(6.0)
            executor = yolo(registry)
            assert (await executor.execute("mcp__web__bump", {}, CTX)).ok
            async with asyncio.timeout(10):
                await bridge.wait_for("web", generation=2)
            assert registry.resolve("mcp__web__extra") is not None
            assert bridge.status()["web"]["restarts"] == 0


@pytest.mark.parametrize("era", ERAS)
async def test_a_questions_message_is_cut_for_the_person(era: str) -> None:
    # A message of a megabyte (plain, and full of line breaks): the elicitor sees it cut.
    from fastgate.mcp._elicitation import MAX_MESSAGE_CHARS

    script = MODERN_ELICIT if era == "modern" else LEGACY_ELICIT
    schema = {"type": "object", "properties": {"name": {"type": "string"}}}
    registry = ToolRegistry()
    async with running(registry, MCPServerConfig("r", command=[sys.executable, str(script)])):
        executor = yolo(registry)
        for message in ("m" * 1_000_000, "line\n" * 200_000):
            elicitor = Counting()
            question = {"mode": "form", "message": message, "requestedSchema": schema}
            if era == "modern":
                request = {"method": "elicitation/create", "params": question}
                arguments: dict[str, Any] = {"rounds": [{"q": request}]}
            else:
                arguments = {"requests": [question]}
            context = ExecutionContext(session_id="s1", elicitor=elicitor)
            result = await executor.execute("mcp__r__ask", arguments, context)
            assert result.ok, result.error
            assert len(elicitor.asked) == 1
            shown = elicitor.asked[0].message
            assert len(shown) <= MAX_MESSAGE_CHARS + 1 and message.startswith(shown[:-1])
