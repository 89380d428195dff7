"""A tool's result as the gateway passes it on is bounded by what is sent, not by what the tool
returned: a structured value over the budget is never encoded whole (the client gets an error
result saying so, with the tool's bounded content), and the console keeps a head of a result
without encoding the rest of it."""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

import httpx
import pytest

import fastgate
from fastgate import Output, ToolKind, ToolResult
from fastgate.model import DEFAULT_MAX_CONTENT_CHARS, ResultMeta
from fastgate.serve import Gateway, _console_calls, _results
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

OBJECT = Output(schema={"type": "object"})
HUGE: dict[str, Any] = {}  # what ``shaped`` returns for each ``size``


def _deep(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": True}
    for _ in range(levels):
        value = {"next": value}
    return value


@fastgate.tool(kind=ToolKind.READ_ONLY, output=OBJECT)
async def shaped(size: str) -> Any:
    """A structured value of the size asked for.

    Args:
        size: small, items or text.
    """
    if size == "small":
        return {"rows": [1, 2, 3], "note": "fits"}
    return HUGE[size]


@fastgate.tool(
    kind=ToolKind.READ_ONLY,
    output=Output(schema={"type": "object"}, render=lambda value: "a nested value"),
)
async def nested() -> Any:
    """A structured value nested deeper than JSON encoders go (its own text is short)."""
    return HUGE["deep"]


@pytest.fixture(scope="module", autouse=True)
def _huge() -> Any:
    HUGE.update(
        items={"rows": list(range(1_000_000))},  # about 6.9 MB of JSON
        text={"blob": "x" * 5_000_000},
        deep=_deep(20_000),  # deeper than JSON encoders go
    )
    yield
    HUGE.clear()


def _gateway() -> Gateway:
    return Gateway(executor(registry(shaped, nested)), approvals="deny")


@pytest.mark.parametrize("era", ERAS)
async def test_a_structured_value_that_fits_is_sent_whole(era: str) -> None:
    gateway = _gateway()
    async with serving(gateway) as url, client(url, era) as mcp:
        done = await mcp.call_tool("shaped", {"size": "small"})
    assert not done.is_error, text_of(done)
    assert done.structured_content == {"rows": [1, 2, 3], "note": "fits"}
    gateway.executor.dispose()


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("size", ["items", "text"])
async def test_a_structured_value_over_the_budget_is_left_out_with_a_note(
    era: str, size: str
) -> None:
    """The client (bound to the output schema) gets an error result it can read: the tool's
    bounded content and a note; never the whole value, nor a cut copy that breaks the schema."""
    gateway = _gateway()
    async with serving(gateway) as url, client(url, era) as mcp:
        done = await mcp.call_tool("shaped", {"size": size})
    assert done.is_error
    assert done.structured_content is None
    text = text_of(done)
    assert "structured result is left out" in text and "over 200000 characters" in text
    assert len(text) < DEFAULT_MAX_CONTENT_CHARS + 1_000  # the tool's content: cut already
    assert text.startswith('{"rows":[0,1,2,' if size == "items" else '{"blob":"xxx')
    meta = fastgate_meta(done)
    assert meta["code"] is None and len(meta["execution_id"]) == 32  # the call itself succeeded
    gateway.executor.dispose()


async def test_over_the_budget_nothing_of_the_value_is_encoded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On the wire: a small response, and the gateway never encoded anything of the value's
    size to find it too large."""
    encoded: list[int] = []
    real = _results._COMPACT

    class Measured:
        def encode(self, value: Any) -> bytes:
            out = real.encode(value)
            encoded.append(len(out))
            return out

    monkeypatch.setattr(_results, "_COMPACT", Measured())
    gateway = _gateway()
    async with serving(gateway) as url, httpx.AsyncClient(timeout=60) as http:
        answers = [
            await post_modern(
                http, url, "tools/call", {"name": "shaped", "arguments": {"size": size}}
            )
            for size in ("items", "text")
        ]
    for answer in answers:
        assert len(answer.content) < DEFAULT_MAX_CONTENT_CHARS + 10_000, len(answer.content)
        result = rpc_result(answer)
        assert result["isError"] is True and "structuredContent" not in result
    assert max(encoded, default=0) < DEFAULT_MAX_CONTENT_CHARS, encoded
    gateway.executor.dispose()


@pytest.mark.parametrize("era", ERAS)
async def test_a_structured_value_too_deep_to_encode_is_an_error_result(era: str) -> None:
    """Its JSON is small, but no encoder writes it: an error result saying so, not a failed
    request."""
    gateway = _gateway()
    async with serving(gateway) as url, client(url, era) as mcp:
        done = await mcp.call_tool("nested", {})
        after = await mcp.call_tool("shaped", {"size": "small"})  # the session goes on
    assert done.is_error and done.structured_content is None
    assert text_of(done).startswith("a nested value")
    assert "structured result is left out: it cannot be written as JSON" in text_of(done)
    assert not after.is_error and after.structured_content is not None
    gateway.executor.dispose()


def test_the_bound_is_checked_without_encoding_the_value() -> None:
    """Deciding that a value is over the budget costs the budget, not the value: a value of
    ten million items allocates next to nothing to be refused (its encoding alone is ~90 MB)."""
    value = {"rows": list(range(10_000_000))}
    tracemalloc.start()
    try:
        kept, why = _results.structured_value(value)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert kept is None and why is not None and "over 200000 characters" in why
    assert peak < 1_000_000, peak
    kept, why = _results.structured_value({"rows": list(range(10))})
    assert kept == {"rows": list(range(10))} and why is None


# -- the console's head of a result -----------------------------------------------------------


class Opaque:
    """A value JSON has no spelling for; counts how often it is turned into text."""

    made = 0

    def __str__(self) -> str:
        Opaque.made += 1
        return "opaque"

    __repr__ = __str__


def _result(content: Any) -> ToolResult:
    meta = ResultMeta("e" * 32, None, "t", "s", 0.0, 0.0, 0.0)
    return ToolResult(True, content, None, meta)


def _peak(content: Any) -> tuple[str, int]:
    """The head the console keeps of ``content``, and the memory its making took at most."""
    result = _result(content)
    tracemalloc.start()
    try:
        head = _console_calls._head(result)
        return head, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_the_result_head_of_a_million_blocks_turns_only_the_head_into_text() -> None:
    Opaque.made = 0
    head, peak = _peak(tuple(Opaque() for _ in range(1_000_000)))
    assert len(head) < _console_calls.RESULT_HEAD + 100, len(head)
    assert head.startswith('[\n  "opaque",\n  "opaque",')
    assert head.endswith(f"… (cut after {_console_calls.RESULT_HEAD} characters)")
    assert Opaque.made < 500, Opaque.made  # the items shown, not the million
    assert peak < 1_000_000, peak


def test_the_result_head_of_a_huge_text_block_is_not_encoded_whole() -> None:
    """A 50 MB text in a block: its JSON (and the pretty copy made of it) would be over 100 MB."""
    head, peak = _peak(({"type": "text", "text": "x" * 50_000_000},))
    assert len(head) < _console_calls.RESULT_HEAD + 100, len(head)
    assert '"type": "text"' in head and '"text": "xxxxx' in head
    assert peak < 1_000_000, peak


def test_the_result_head_of_a_deep_value_is_shown_bounded() -> None:
    head, _ = _peak((_deep(100_000),))
    assert len(head) < _console_calls.RESULT_HEAD + 100, len(head)
    assert head.startswith('[\n  {\n    "next": {')


def test_the_result_head_of_text_and_small_values_is_unchanged() -> None:
    assert _console_calls._head(_result("hello")) == "hello"
    blocks = ({"type": "text", "text": "a"}, "b")
    assert _console_calls._head(_result(blocks)) == json.dumps(blocks, indent=2)
