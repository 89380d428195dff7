"""Every JSON value the pipeline admits is recorded whole, in both stores: integers past 64 bits
(JSON numbers have no bound) and values nested past the encoder's depth, alone or with text
UTF-8 cannot encode. Such a call used to run with no record saved (SPEC §21: no durable record
is lost)."""

from __future__ import annotations

from typing import Any

import pytest

from fastgate import ErrorCode, ExecutionContext, StreamingToolExecutor, ToolCall
from fastgate.durable.store import args_digest
from fastgate.tools import ToolDefinition
from tests.durable.conftest import Backend
from tests.pipeline_kit import assert_idle, executor, tool


def nested(depth: int, leaf: Any) -> Any:
    value = leaf
    for level in range(depth):
        value = {"k": value, "n": level} if level % 2 else [value, "x"]
    return value


def kept_in(ran: list[Any]) -> ToolDefinition:
    """A tool taking any object, which keeps each arguments it runs with in ``ran``."""

    def keep(args: Any, ctx: Any) -> str:
        ran.append(args)
        return "kept"

    return tool("keep", keep, {"type": "object"})


VALUES = {
    "an integer past 64 bits": {"n": 10**400},
    "a negative one": {"n": -(2**64), "m": [2**64, -(10**30)]},
    "nested 2,000 deep": {"v": nested(2_000, None)},
    "nested 20,000 deep, big integers inside": {"v": nested(20_000, 2**70)},
    "nested deep, with a lone surrogate in a key and a value": {
        "v": nested(1_500, {"k\udcff": "v\udcfe"})
    },
}


@pytest.mark.parametrize("args", VALUES.values(), ids=VALUES.keys())
async def test_a_call_with_any_admitted_value_is_recorded_whole(
    backend: Backend, args: dict[str, Any]
) -> None:
    ran: list[Any] = []
    keep = kept_in(ran)
    store = backend.open()
    try:
        ex = executor(keep, store=store, require_persistence=True)
        ctx = ExecutionContext(session_id="values")
        result = await ex.execute("keep", args, ctx)
        assert result.ok, result.content
        assert len(ran) == 1
        (stored,) = await store.load("values")
        assert stored.status == "completed"
        assert args_digest(stored.args) == args_digest(args)
        assert_idle(ex)
    finally:
        await store.close()


# Text no store can hold as it is: a lone surrogate (a model's JSON may carry "\udcff"), a NUL.
ODD_IDS = ["call\udcff", "\ud800", "call\x00id"]


@pytest.mark.parametrize("odd", ODD_IDS, ids=["surrogate", "lone high", "NUL"])
async def test_a_call_whose_id_cannot_be_recorded_is_refused_not_run_unrecorded(
    backend: Backend, odd: str
) -> None:
    ran: list[Any] = []
    keep = kept_in(ran)
    store = backend.open()
    try:
        ex = executor(keep, store=store)  # persistence optional
        by_call_id = await ex.execute("keep", {}, ExecutionContext(session_id="ids"), call_id=odd)
        by_session = await ex.execute("keep", {}, ExecutionContext(session_id=odd))
        plain = executor(keep)  # the stream records
        streaming = StreamingToolExecutor(plain, ExecutionContext(session_id="ids"), store=store)
        streaming.add_tool(ToolCall(odd, "keep", {}))
        streaming.add_tool(ToolCall("fine", "keep", {}))
        streaming.finish()
        streamed = [result async for result in streaming.results()]
        for refused in (by_call_id, by_session, streamed[0]):
            assert refused.error is not None, refused
            assert refused.error.code is ErrorCode.INVALID_ARGS
            assert refused.error.details["reason"] == "unrecordable"
        assert streamed[1].ok
        assert len(ran) == 1  # only the streamed call with a plain id ran
        assert [c.call_id for c in await store.load("ids")] == ["fine"]
        assert_idle(ex)
        assert_idle(plain)
    finally:
        await store.close()
