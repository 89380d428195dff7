"""ToolResultProjector: recovery order and content; the cut (budget, marker, pairs, idempotence)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastgate.durable.projector import DEFAULT_BUDGETS, MIN_BUDGET_CHARS, ToolResultProjector
from fastgate.durable.sqlite import SqliteToolUseStore
from fastgate.durable.store import StoredCall, ToolUseRecord
from fastgate.model.results import DurableResult, ResultMeta, ToolResult

MARKER = re.compile(r"\n\[\.\.\. (\d+) characters cut \.\.\.\]\n")
META = ResultMeta("e1", "c1", "t", "s1", 1.0, 2.0, 1000.0)


def result(content: Any, value: Any = None) -> ToolResult:
    return ToolResult(True, content, None, META, value)


class ListStore:
    """A minimal in-memory store returning calls in the order it was given them."""

    def __init__(self, calls: list[StoredCall]) -> None:
        self.calls = calls

    async def record_tool_use(self, record: ToolUseRecord) -> None:
        raise NotImplementedError

    async def record_result(self, execution_id: str, result: DurableResult) -> None:
        raise NotImplementedError

    async def load(self, session_id: str) -> list[StoredCall]:
        return list(self.calls)

    async def close(self) -> None:
        pass


def stored(execution_id: str, turn: str, epoch: int, seq: int, res: Any = None) -> StoredCall:
    if res is None:
        return StoredCall(None, execution_id, "t", {}, "interrupted", None, turn, epoch, seq)
    return StoredCall(None, execution_id, "t", {}, "completed", res, turn, epoch, seq)


def projector() -> ToolResultProjector:
    return ToolResultProjector(ListStore([]))


# -- recover ---------------------------------------------------------------------------------------


async def test_recover_orders_by_turn_then_epoch_then_position() -> None:
    calls = [
        stored("b", "turn-2", 0, 0),
        stored("a2", "turn-1", 1, 0),
        stored("a1", "turn-1", 0, 1),
        stored("a0", "turn-1", 0, 0),
        stored("b1", "turn-2", 0, 1),
    ]
    recovered = await ToolResultProjector(ListStore(calls)).recover("s1")
    assert [c.execution_id for c in recovered] == ["b", "b1", "a0", "a1", "a2"]


async def test_recover_never_hands_back_the_canonical_value() -> None:
    full = result("content", value={"secret": 1})
    sloppy = stored("a", "turn-1", 0, 0, full)  # a store that kept the whole ToolResult
    [call] = await ToolResultProjector(ListStore([sloppy])).recover("s1")
    assert type(call.result) is DurableResult
    assert call.result == full.durable()


async def test_recover_reads_every_epoch_from_the_sqlite_store(tmp_path: Path) -> None:
    async with SqliteToolUseStore(tmp_path / "calls.db") as store:
        for epoch, seq, eid in [(0, 0, "old-0"), (0, 1, "old-1"), (1, 0, "new-0")]:
            record = ToolUseRecord(eid, None, "s1", "turn-1", epoch, seq, "t", {"x": seq})
            await store.record_tool_use(record)
        await store.record_result("old-0", result("done", value=object()).durable())
        calls = await ToolResultProjector(store).recover("s1")
    assert [(c.execution_id, c.epoch, c.status) for c in calls] == [
        ("old-0", 0, "completed"),
        ("old-1", 0, "interrupted"),
        ("new-0", 1, "interrupted"),
    ]


def test_the_store_must_be_a_tool_use_store() -> None:
    with pytest.raises(TypeError, match="ToolUseStore"):
        ToolResultProjector(object())  # type: ignore[arg-type]


# -- project ---------------------------------------------------------------------------------------


def cut_count(text: str) -> int:
    found = MARKER.search(text)
    assert found is not None, text
    return int(found.group(1))


def test_short_content_is_returned_as_is() -> None:
    r = result("short")
    assert projector().project(r, "model") is r


def test_long_content_keeps_head_and_tail_and_says_how_much_was_cut() -> None:
    text = "".join(f"line {i}\n" for i in range(10_000))
    out = projector().project(result(text), "log").content
    assert len(out) <= DEFAULT_BUDGETS["log"]
    head, tail = MARKER.split(out)[0], MARKER.split(out)[2]
    assert text.startswith(head) and text.endswith(tail)
    assert len(head) + cut_count(out) + len(tail) == len(text)
    assert abs(len(head) - len(tail)) <= 1


def test_budget_chars_overrides_the_surface_and_the_value_is_kept() -> None:
    r = result("x" * 1000, value=[1, 2])
    out = projector().project(r, "model", budget_chars=100)
    assert len(out.content) <= 100 and out.value == [1, 2] and out.meta == r.meta


def test_durable_results_are_projected_too() -> None:
    r = result("y" * 5000).durable()
    out = projector().project(r, "log", 200)
    assert isinstance(out, DurableResult) and len(out.content) <= 200


def test_unknown_surfaces_and_bad_budgets_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown surface 'tv'"):
        projector().project(result("x"), "tv")
    with pytest.raises(ValueError, match="at least"):
        projector().project(result("x"), "model", MIN_BUDGET_CHARS - 1)
    with pytest.raises(TypeError):
        projector().project(result("x"), "model", True)
    with pytest.raises(TypeError):
        projector().project("text", "model")  # type: ignore[type-var]
    with pytest.raises(ValueError):
        ToolResultProjector(ListStore([]), budgets={"tiny": 1})


def test_budgets_can_add_surfaces() -> None:
    p = ToolResultProjector(ListStore([]), budgets={"sms": 100, "log": 500})
    assert p.budget("sms") == 100 and p.budget("log") == 500
    assert p.budget("model") == DEFAULT_BUDGETS["model"]


def test_a_cut_never_separates_a_surrogate_pair() -> None:
    pair = "\ud83d\ude00"  # what surrogatepass decoding of UTF-16 text gives
    text = pair * 500
    for budget in range(MIN_BUDGET_CHARS, 140):
        out = projector().project(result(text), "log", budget).content
        head, _, tail = MARKER.split(out)
        assert not head.endswith("\ud83d") and not tail.startswith("\ude00"), budget
        assert len(out) <= budget


def test_multibyte_characters_stay_whole() -> None:
    text = "é漢😀" * 1000
    out = projector().project(result(text), "log", 101).content
    out.encode("utf-8")  # valid text
    head, _, tail = MARKER.split(out)
    assert text.startswith(head) and text.endswith(tail)


def test_blocks_share_the_budget_text_is_cut_and_other_blocks_stay() -> None:
    image = {"type": "image", "data": "AAAA" * 10_000}
    blocks = (
        "a" * 300,
        image,
        {"type": "text", "text": "b" * 300},
        "c" * 300,
        {"type": "text", "text": "d" * 300},
    )
    out = projector().project(result(blocks), "log", 400).content
    assert isinstance(out, tuple) and image in out
    texts = [b if isinstance(b, str) else b.get("text", "") for b in out if b is not image]
    assert sum(len(t) for t in texts) <= 400
    joined = "".join(texts)
    assert joined.startswith("a" * 100) and joined.endswith("d" * 100)
    assert cut_count(joined) == 1200 - len(MARKER.sub("", joined))
    assert not any(set(t) == {"c"} for t in texts)  # a block wholly inside the cut is gone
    assert projector().project(result(out), "log", 400).content == out


def test_other_content_is_untouched() -> None:
    for content in (None, 42, {"k": "v" * 10_000}):
        r = result(content)
        assert projector().project(r, "log", 100) is r


texts = st.lists(
    st.one_of(
        st.characters(codec="utf-8"),
        st.sampled_from(["\ud83d", "\ude00", "\udcff", "\ud83d\ude00", "é", "漢", "\n"]),
    ),
    max_size=400,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(
    content=st.one_of(
        texts,
        st.lists(
            st.one_of(texts, texts.map(lambda t: {"type": "text", "text": t}), st.just({"x": 1})),
            max_size=5,
        ).map(tuple),
    ),
    budget=st.integers(MIN_BUDGET_CHARS, 700),
)
def test_projection_fits_keeps_pairs_and_is_idempotent(content: Any, budget: int) -> None:
    p = projector()
    once = p.project(result(content), "log", budget)
    assert p.project(once, "log", budget) == once
    out = once.content
    pieces = (
        [out] if isinstance(out, str) else [b if isinstance(b, str) else b.get("text") for b in out]
    )
    text = "".join(t for t in pieces if isinstance(t, str))
    assert len(text) <= budget
    original = (
        [content]
        if isinstance(content, str)
        else [b if isinstance(b, str) else b.get("text") for b in content]
    )
    whole = "".join(t for t in original if isinstance(t, str))
    if len(whole) <= budget:
        assert once == result(content)
        return
    head, cut, tail = MARKER.split(text, maxsplit=1)
    assert whole.startswith(head) and whole.endswith(tail)
    assert len(head) + int(cut) + len(tail) == len(whole)
    for i in range(len(whole) - 1):  # no pair of the original is separated by the cut
        if "\ud800" <= whole[i] <= "\udbff" and "\udc00" <= whole[i + 1] <= "\udfff":
            assert not (i + 1 == len(head) and i + 1 < len(whole) - len(tail))
            assert not (i + 1 == len(whole) - len(tail) and i + 1 > len(head))
    assert msgspec.structs.replace(once, content=content) == result(content)
