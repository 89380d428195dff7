"""apply_patch: several chunks of one file apply in file order, even when two start at the same
line (an insertion after an @@ anchor, then a change of the very next line), and a chunk that
reaches back into an earlier one is refused rather than half-applied (SPEC §16)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from fastgate.builtin._patch import _apply_chunks, parse_patch
from tests.builtin_kit import builtin_executor, call, failure_code, text


def patch(*body: str) -> str:
    return "\n".join(("*** Begin Patch", *body, "*** End Patch"))


async def _patched(tmp_path: Path, before: str, *body: str) -> tuple[bool, str, str]:
    (tmp_path / "f.py").write_text(before)
    result = await call(
        builtin_executor(tmp_path), "apply_patch", {"patch": patch("*** Update File: f.py", *body)}
    )
    return result.ok, text(result), (tmp_path / "f.py").read_text()


async def test_an_insertion_then_a_change_of_the_next_line_both_apply(tmp_path: Path) -> None:
    ok, message, after = await _patched(
        tmp_path,
        "def a():\n    x = 1\n    y = 2\n",
        "@@ def a():",
        "+    # added",
        "@@",
        "-    x = 1",
        "+    x = 10",
    )
    assert ok, message
    assert after == "def a():\n    # added\n    x = 10\n    y = 2\n"


async def test_several_inserted_lines_before_a_replaced_block(tmp_path: Path) -> None:
    ok, message, after = await _patched(
        tmp_path,
        "class C:\n    a = 1\n    b = 2\n    c = 3\n",
        "@@ class C:",
        "+    # one",
        "+    # two",
        "@@",
        "-    a = 1",
        "-    b = 2",
        "+    ab = 12",
    )
    assert ok, message
    assert after == "class C:\n    # one\n    # two\n    ab = 12\n    c = 3\n"


async def test_an_insertion_before_a_context_only_chunk_is_kept(tmp_path: Path) -> None:
    ok, message, after = await _patched(
        tmp_path,
        "def a():\n    x = 1\n    y = 2\n",
        "@@ def a():",
        "+    # added",
        "@@",
        "     x = 1",
        "+    z = 3",
    )
    assert ok, message
    assert after == "def a():\n    # added\n    x = 1\n    z = 3\n    y = 2\n"


async def test_a_chunk_reaching_back_into_an_earlier_one_is_refused(tmp_path: Path) -> None:
    # The end-of-file anchor finds the last line, which the first chunk already replaced.
    (tmp_path / "f.py").write_text("x\ny\n")
    result = await call(
        builtin_executor(tmp_path),
        "apply_patch",
        {
            "patch": patch(
                "*** Update File: f.py",
                "@@",
                "-x",
                "-y",
                "+X",
                "+Y",
                "@@",
                "-y",
                "+Z",
                "*** End of File",
            )
        },
    )
    assert failure_code(result) == "overlapping_chunks"
    assert "No file was changed" in text(result)
    assert (tmp_path / "f.py").read_text() == "x\ny\n"


# -- property: one patch == its chunks applied one by one, in order --------------------------

_PIECE = st.tuples(
    st.integers(0, 3),  # lines left alone before the chunk
    st.booleans(),  # an @@-anchored pure insertion (else a replacement)
    st.integers(0, 2),  # lines the replacement removes
    st.integers(0, 2),  # lines it adds
)


def _chunks_over(pieces: list[tuple[int, bool, int, int]]) -> tuple[list[str], list[list[str]]]:
    """A file of unique lines and, over it, chunks in file order that never overlap."""
    lines: list[str] = []
    chunks: list[list[str]] = []
    added = 0
    for gap, anchored_insert, removed, adds in pieces:
        lines += [f"keep{len(lines) + i}" for i in range(gap)]
        new = [f"new{added + i}" for i in range(max(adds, 1))]
        added += len(new)
        if anchored_insert and gap:  # anchored on a line no earlier chunk touched
            chunks.append([f"@@ {lines[-1]}", *(f"+{n}" for n in new)])
            continue
        old = [f"old{len(lines) + i}" for i in range(max(removed, 1))]
        lines += old
        chunks.append(["@@", *(f"-{o}" for o in old), *(f"+{n}" for n in new[:adds])])
    lines.append("tail")
    return lines, chunks


def _chunks_of(body: list[str]) -> list:  # type: ignore[type-arg]
    (hunk,) = parse_patch(patch("*** Update File: f", *body))
    return hunk.chunks


@settings(max_examples=200, deadline=None)
@given(st.lists(_PIECE, min_size=1, max_size=6))
def test_a_patch_applies_like_its_chunks_one_by_one(
    pieces: list[tuple[int, bool, int, int]],
) -> None:
    lines, chunks = _chunks_over(pieces)
    original = "".join(line + "\n" for line in lines)
    at_once = _apply_chunks(original, _chunks_of([line for c in chunks for line in c]), "f")
    one_by_one = original
    for chunk in chunks:
        one_by_one = _apply_chunks(one_by_one, _chunks_of(chunk), "f")
    assert at_once == one_by_one
