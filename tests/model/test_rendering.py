"""``render``: the content a tool gives the model is bounded, content blocks given as objects
(MCP's shape) as much as text: their text cut head and tail, their base64 data whole or left
out, their other values whole or left out, and all the blocks together within the budget."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
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
    assert out[0] is small  # a block that fits is the tool's own
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
    assert all(o is b for o, b in zip(out, blocks, strict=True))
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
