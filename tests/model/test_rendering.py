"""``render``: the content a tool gives the model is bounded, content blocks given as objects
(MCP's shape) as much as text: their text cut head and tail, their base64 data whole or left
out, their other values whole or left out, and all the blocks together within the budget. A
value that is neither (a dict, a list, ...) is its JSON, as before when it may fit, else written
only as far as the budget goes: a huge or deeply nested value costs what is shown."""

from __future__ import annotations

import datetime
import decimal
import tracemalloc
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import msgspec
import pytest

from fastgate.model.rendering import cut, render

BUDGET = 10_000


def _as_given(value: Any) -> Any:
    return value


def _size(content: Any) -> int:
    return len(msgspec.json.encode(content))


def _rendered(content: Any, budget: int = BUDGET) -> tuple[Any, int]:
    """What ``render`` makes of ``content`` (returned as such by the tool's renderer), and the
    memory it took at most."""
    tracemalloc.start()
    try:
        out = render(_as_given, content, budget)
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_the_text_of_a_text_block_is_cut_head_and_tail() -> None:
    text = "h" * 100 + "x" * 50_000_000 + "t" * 100
    (block,), peak = _rendered([{"type": "text", "text": text, "annotations": {"audience": []}}])
    assert block["type"] == "text" and block["annotations"] == {"audience": []}
    kept = block["text"]
    assert kept.startswith("h" * 100) and kept.endswith("t" * 100)
    assert "characters cut ...]" in kept and len(kept) <= BUDGET
    assert peak < 200_000, peak  # the head and the tail, not a copy of the text


def test_an_embedded_resource_text_is_cut_and_its_labels_clipped() -> None:
    resource = {"uri": "file:///" + "u" * 5_000, "mimeType": "text/plain", "text": "r" * 10**6}
    (block,), _ = _rendered([{"type": "resource", "resource": resource}])
    inner = block["resource"]
    assert len(inner["uri"]) <= 1_000 and "characters cut" in inner["uri"]
    assert inner["mimeType"] == "text/plain"
    assert "characters cut" in inner["text"] and _size(block) < BUDGET + 200


def test_base64_data_is_kept_whole_or_its_block_left_out() -> None:
    small = {"type": "image", "data": "QUJD" * 100, "mimeType": "image/png"}
    huge = {"type": "image", "data": "QUJD" * 10_000_000, "mimeType": "image/png"}
    out, _ = _rendered([small, huge, "after"])
    assert out[0] == small  # a block that fits is kept whole, as a frozen snapshot
    with pytest.raises(TypeError):
        out[0]["data"] = "changed"
    note = f"[... a 'image' content block left out: over the budget of {BUDGET} characters ...]"
    assert out[1] == {"type": "text", "text": note}
    assert out[2] == "after"


def test_other_values_in_a_block_are_kept_whole_or_the_block_left_out() -> None:
    crowded = {"type": "text", "text": "t", "_meta": {"rows": list(range(1_000_000))}}
    deep: dict[str, Any] = {"leaf": True}
    for _ in range(10_000):
        deep = {"next": deep}
    nested = {"type": "text", "text": "t", "_meta": deep}  # small, but no encoder writes it
    out, peak = _rendered([crowded, nested, {"type": "text", "text": "kept"}])
    assert [b["text"] for b in out[:2]] == [
        f"[... a 'text' content block left out: over the budget of {BUDGET} characters ...]"
    ] * 2
    assert out[2] == {"type": "text", "text": "kept"}
    assert peak < 200_000, peak
    msgspec.json.encode(out)  # what is left can be written


def test_all_the_blocks_share_one_budget() -> None:
    blocks = [{"type": "text", "text": "b" * 100} for _ in range(1_000_000)]
    out, peak = _rendered(blocks)
    assert _size(out) < 2 * BUDGET, _size(out)
    assert out[-1].startswith("[... ") and "more content block(s) left out" in out[-1]
    count = int(out[-1].split()[1])
    assert count + len(out) - 1 == len(blocks)
    assert peak < 1_000_000, peak


def test_text_blocks_share_the_budget_too() -> None:
    out, _ = _rendered(["a" * 6_000, "b" * 6_000, "c" * 6_000])
    assert out[0] == "a" * 6_000
    assert out[1].startswith("b") and "characters cut" in out[1]
    assert "more content block(s) left out" in out[2]
    assert sum(len(b) for b in out) < BUDGET + 200


def test_a_block_of_another_kind_is_kept_whole_or_left_out() -> None:
    out, _ = _rendered([[1, 2, 3], list(range(1_000_000))])
    assert out[0] == [1, 2, 3]
    assert "'list' content block left out" in out[1]["text"]


def test_blocks_that_fit_are_returned_as_they_are() -> None:
    blocks = (
        {"type": "text", "text": "a"},
        "b",
        {"type": "image", "data": "QUJD", "mimeType": "x"},
    )
    out = render(_as_given, blocks, BUDGET)
    assert out == blocks  # whole, each a frozen snapshot of the tool's block
    with pytest.raises(TypeError):
        out[0]["text"] = "changed"
    assert blocks[0]["text"] == "a"
    assert render(None, "short", BUDGET) == "short"


class Counted(list[Any]):
    """A list that counts the items read from it."""

    read = 0

    def __iter__(self) -> Iterator[Any]:
        for item in super().__iter__():
            Counted.read += 1
            yield item


def test_the_work_is_the_budgets() -> None:
    Counted.read = 0
    out, _ = _rendered([{"type": "text", "text": "t", "_meta": Counted(range(1_000_000))}])
    assert "left out" in out[0]["text"]
    assert Counted.read < BUDGET, Counted.read


@pytest.mark.parametrize("budget", [0, 5, 20])
def test_a_budget_smaller_than_the_marker_keeps_only_the_marker(budget: int) -> None:
    text = "x" * 10_000
    kept = cut(text, budget)
    assert kept.strip().startswith("[...") and len(kept) < 40


# -- a value that is neither text nor blocks (the default renderer) --------------------------------

CUT_NOTE = f"\n[... the rest cut: the value is over {BUDGET} characters as JSON ...]"


def _shown(value: Any, budget: int = BUDGET) -> tuple[str, int]:
    """What the default renderer makes of ``value``, and the memory it took at most."""
    tracemalloc.start()
    try:
        out = render(None, value, budget)
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _nested(levels: int, kind: str) -> Any:
    value: Any = "leaf"
    for _ in range(levels):
        value = {"next": value} if kind == "object" else [value]
    return value


LARGE: dict[str, Callable[[], Any]] = {
    "a million numbers": lambda: list(range(1_000_000)),
    "rows": lambda: [{"id": i, "name": f"row {i}\n", "ok": True} for i in range(200_000)],
    "a wide object": lambda: {f"key {i}": [i, None] for i in range(300_000)},
    "a long string, many times": lambda: ("x" * 9_000,) * 5_000,
    "a huge number, many times": lambda: [10**4_000] * 2_000,
}


@pytest.mark.parametrize("build", LARGE.values(), ids=LARGE.keys())
def test_a_large_value_is_written_only_as_far_as_the_budget(build: Callable[[], Any]) -> None:
    value = build()
    out, peak = _shown(value)
    assert peak < 400_000, peak  # what is shown, not the value's whole JSON (megabytes)
    assert out.endswith(CUT_NOTE) and len(out) == BUDGET, out[-200:]
    # The head is the value's own JSON, as far as it goes.
    assert msgspec.json.encode(value).decode().startswith(out[: -len(CUT_NOTE)])


@pytest.mark.parametrize("kind", ["object", "list"])
def test_a_deeply_nested_value_is_shown_folded_not_refused(kind: str) -> None:
    out, peak = _shown(_nested(100_000, kind))
    opener = '{"next":' if kind == "object" else "["
    assert out.startswith(opener * 64) and "\u2026" in out, out  # folded after 64 levels
    assert len(out) < 2_000 and peak < 200_000, (len(out), peak)


ORDINARY: dict[str, Any] = {
    "an object": {"a": 1, "b": [1.5, None, True, False], "c": {"d": "caf\u00e9 \U0001f600\n"}},
    "a list": [1, 2, 3],
    "a tuple": ("t", 1),
    "integer keys": {1: "one", 2: "two"},
    "rows": [{"id": i, "name": f"row {i}"} for i in range(300)],
    "large numbers": [10**30, -(2**63), 1e300],
    "other kinds": [datetime.date(2026, 1, 2), uuid.UUID(int=7), decimal.Decimal("1.50")],
    "nested to the limit": _nested(63, "object"),
    "empty": {},
}


@pytest.mark.parametrize("value", ORDINARY.values(), ids=ORDINARY.keys())
def test_an_ordinary_value_is_its_json_as_before(value: Any) -> None:
    assert render(None, value, BUDGET) == msgspec.json.encode(value).decode()


def test_a_value_whose_json_may_fit_is_cut_head_and_tail_as_before() -> None:
    escaped = ["\x00" * 3_000]  # 3,000 characters, six times as many as JSON
    assert render(None, escaped, BUDGET) == cut(msgspec.json.encode(escaped).decode(), BUDGET)
