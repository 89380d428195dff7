"""The program's output, kept within its budget as it streams in: head and tail of the whole
text, whatever the chunks (a character split between two reads included)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fastgate.codemode import ToolCallError
from fastgate.codemode._run import Output, call_lines, render


def reference(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    marker = "\n[... {} characters cut ...]\n"
    keep = max(0, max_chars - len(marker.format(len(text))))
    head, tail = keep * 2 // 3, keep - keep * 2 // 3
    return text[:head] + marker.format(len(text) - head - tail) + (text[-tail:] if tail else "")


@given(
    text=st.text(alphabet=st.sampled_from("ab\n é漢🙂"), max_size=600),
    cuts=st.lists(st.integers(min_value=0, max_value=2400), max_size=12),
    max_chars=st.integers(min_value=200, max_value=400),
)
def test_the_kept_output_is_the_head_and_tail_of_the_whole(
    text: str, cuts: list[int], max_chars: int
) -> None:
    data = text.encode()
    output = Output(max_chars)
    start = 0
    for cut in sorted(c % (len(data) + 1) for c in cuts):  # arbitrary byte boundaries
        output.feed(data[start:cut])
        start = cut
    output.feed(data[start:])
    kept = output.text()
    assert kept == reference(text, max_chars)
    assert len(kept) <= max_chars
    assert output.chars == len(text) and output.bytes == len(data)


def test_bytes_that_are_not_utf8_are_replaced() -> None:
    output = Output(1000)
    output.feed(b"ok \xff\xfe end")
    assert output.text() == "ok \ufffd\ufffd end"


def test_a_line_per_call_in_order_repeats_included() -> None:
    calls = [
        {"name": "read", "ok": True, "code": None},
        {"name": "read", "ok": True, "code": None},
        {"name": "write", "ok": False, "code": "PERMISSION_DENIED"},
        {"name": "read", "ok": True, "code": None},
    ]
    assert call_lines(calls) == [
        "- read: ok",
        "- read: ok",
        "- write: PERMISSION_DENIED",
        "- read: ok",
    ]
    rendered = render({"stdout": "hi\n", "calls": calls[:1]})
    assert rendered == "```\nhi\n```\n\nTool calls:\n- read: ok"
    assert render({"stdout": "", "calls": []}) == "(the program printed nothing and called no tool)"


@pytest.mark.parametrize(
    ("args", "shown"),
    [
        (("RESOURCE_EXHAUSTED",), "RESOURCE_EXHAUSTED"),
        (("TIMEOUT", "too slow"), "TIMEOUT: too slow"),
    ],
)
def test_a_tool_call_error_is_made_with_or_without_a_message(
    args: tuple[str, ...], shown: str
) -> None:
    error = ToolCallError(*args)
    assert (error.code, error.message, str(error)) == (args[0], "".join(args[1:]), shown)
