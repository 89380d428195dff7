"""read, write and edit through the whole pipeline: behaviour, byte-exact preservation, the
stale-file check, and bad input (SPEC §16)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fastgate import ErrorCode, ToolResult, builtin
from fastgate.builtin import _ledger
from fastgate.builtin._files import MAX_LINE_CHARS
from tests.builtin_kit import builtin_executor, call, failure_code, real, text


async def test_read_numbers_lines_and_says_where_to_go_on(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    ex = builtin_executor(tmp_path)
    result = await call(ex, "read", {"file_path": "a.txt", "offset": 3, "limit": 4})
    assert result.ok
    lines = text(result).split("\n")
    assert lines[:4] == [f"{n:>6}\tline {n}" for n in range(3, 7)]
    assert "Showing lines 3-6 of 10" in text(result) and "offset=7" in text(result)
    whole = await call(ex, "read", {"file_path": str(tmp_path / "a.txt")})
    assert "Showing" not in text(whole) and text(whole).endswith("    10\tline 10")


async def test_read_cuts_long_lines_and_bounds_the_output(tmp_path: Path) -> None:
    (tmp_path / "long.txt").write_text("x" * 5000 + "\nshort\n")
    (tmp_path / "wide.txt").write_text(("y" * 1900 + "\n") * 2000)
    ex = builtin_executor(tmp_path)
    first = text(await call(ex, "read", {"file_path": "long.txt"})).split("\n")[0]
    assert first.startswith("     1\t" + "x" * MAX_LINE_CHARS + "…")
    assert "3,000 more characters" in first
    wide = text(await call(ex, "read", {"file_path": "wide.txt"}))
    assert len(wide) < 110_000  # bounded, and the note says where to go on
    assert "To read on, call read with offset=" in wide


@pytest.mark.parametrize(
    ("data", "code", "words"),
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00IHDR", "binary_file", "binary"),
        (b"caf\xe9 au lait\n", "undecodable", "UTF-8"),
    ],
)
async def test_read_refuses_binary_and_undecodable(
    tmp_path: Path, data: bytes, code: str, words: str
) -> None:
    (tmp_path / "f").write_bytes(data)
    result = await call(builtin_executor(tmp_path), "read", {"file_path": "f"})
    assert result.error is not None and result.error.code == ErrorCode.TOOL_FAILURE
    assert failure_code(result) == code and words in text(result)


async def test_read_missing_directory_offset_and_huge(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "small.txt").write_text("a\nb\n")
    (tmp_path / "huge.bin").touch()
    os.truncate(tmp_path / "huge.bin", 40 * 1024 * 1024)  # sparse: no disk used
    ex = builtin_executor(tmp_path)
    assert failure_code(await call(ex, "read", {"file_path": "nope.txt"})) == "not_found"
    assert failure_code(await call(ex, "read", {"file_path": "d"})) == "is_a_directory"
    past = await call(ex, "read", {"file_path": "small.txt", "offset": 9})
    assert failure_code(past) == "offset_past_end" and "has 2 lines" in text(past)
    huge = await call(ex, "read", {"file_path": "huge.bin"})
    assert failure_code(huge) == "file_too_large" and "grep" in text(huge)


async def test_bad_paths_are_refused_before_the_tool_runs(tmp_path: Path) -> None:
    ex = builtin_executor(tmp_path)
    for bad in ("a\x00b", "x/" * 2100 + "f", "../outside.txt"):
        result = await call(ex, "write", {"file_path": bad, "content": "x"})
        assert result.error is not None and result.error.code == ErrorCode.WORKTREE_VIOLATION
    empty = await call(ex, "read", {"file_path": ""})
    assert empty.error is not None and empty.error.code == ErrorCode.INVALID_ARGS
    assert sorted(os.listdir(tmp_path)) == []


async def test_write_creates_parents_atomically_and_keeps_the_mode(tmp_path: Path) -> None:
    ex = builtin_executor(tmp_path)
    created = await call(ex, "write", {"file_path": "a/b/c.txt", "content": "hi\r\nthere"})
    assert created.ok and "Created a/b/c.txt" in text(created)
    assert (tmp_path / "a/b/c.txt").read_bytes() == b"hi\r\nthere"  # content as given
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o750)
    assert (await call(ex, "read", {"file_path": "run.sh"})).ok
    assert (await call(ex, "write", {"file_path": "run.sh", "content": "#!/bin/sh\nls\n"})).ok
    assert script.read_text() == "#!/bin/sh\nls\n" and (script.stat().st_mode & 0o777) == 0o750
    assert [p for p in os.listdir(tmp_path) if p.endswith(".tmp")] == []


async def test_write_keeps_an_existing_files_encoding_and_bom(tmp_path: Path) -> None:
    path = tmp_path / "u16.txt"
    path.write_bytes("\ufeffold\n".encode("utf-16-le"))
    ex = builtin_executor(tmp_path)
    assert (await call(ex, "read", {"file_path": "u16.txt"})).ok
    assert (await call(ex, "write", {"file_path": "u16.txt", "content": "néw\n"})).ok
    assert path.read_bytes() == b"\xff\xfe" + "néw\n".encode("utf-16-le")


async def test_write_of_a_lone_surrogate_is_refused(tmp_path: Path) -> None:
    ex = builtin_executor(tmp_path)
    result = await call(ex, "write", {"file_path": "s.txt", "content": "bad \ud800 text"})
    assert failure_code(result) == "unencodable"
    assert not (tmp_path / "s.txt").exists()


async def test_stale_file_checks(tmp_path: Path) -> None:
    path = tmp_path / "f.txt"
    path.write_text("one\ntwo\n")
    ex = builtin_executor(tmp_path)
    never = await call(ex, "edit", {"file_path": "f.txt", "old_string": "one", "new_string": "1"})
    assert failure_code(never) == "stale_file" and "not been read" in text(never)
    overwrite = await call(ex, "write", {"file_path": "f.txt", "content": "x"})
    assert failure_code(overwrite) == "stale_file"
    assert (await call(ex, "read", {"file_path": "f.txt"})).ok
    # Touched, same bytes: not stale (an mtime-only check would refuse this).
    os.utime(path, ns=(1, 1))
    ok = await call(ex, "edit", {"file_path": "f.txt", "old_string": "one", "new_string": "1"})
    assert ok.ok, ok.content
    # Its own write counts as seen: a second edit needs no read.
    again = await call(ex, "edit", {"file_path": "f.txt", "old_string": "two", "new_string": "2"})
    assert again.ok, again.content
    path.write_text("1\n2\nthree\n")  # someone else changes it
    stale = await call(ex, "edit", {"file_path": "f.txt", "old_string": "1", "new_string": "I"})
    assert failure_code(stale) == "stale_file" and "changed since" in text(stale)
    assert path.read_text() == "1\n2\nthree\n"
    # Another session never read it, whatever this one did.
    other = await call(
        ex, "edit", {"file_path": "f.txt", "old_string": "1", "new_string": "I"}, session="s2"
    )
    assert failure_code(other) == "stale_file"


async def test_read_records_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_ledger, "PER_FILE_SYSTEM", 8)
    ex = builtin_executor(tmp_path)
    for i in range(20):
        (tmp_path / f"f{i}.txt").write_text("x\n")
        assert (await call(ex, "read", {"file_path": f"f{i}.txt"}, session=f"bounded-{i}")).ok
    fs = builtin._local_file_system(str(tmp_path), ())
    assert len(_ledger.ledger_of(fs)) == 8
    # The oldest record was forgotten: that session must read again (safe, not lost data).
    first = await call(
        ex,
        "write",
        {"file_path": "f0.txt", "content": "y"},
        session="bounded-0",
    )
    assert failure_code(first) == "stale_file"


async def test_edit_keeps_crlf_bom_and_missing_final_newline(tmp_path: Path) -> None:
    path = tmp_path / "w.txt"
    original = b"\xef\xbb\xbfalpha\r\nbeta\r\ngamma"
    path.write_bytes(original)
    ex = builtin_executor(tmp_path)
    assert (await call(ex, "read", {"file_path": "w.txt"})).ok
    result = await call(
        ex, "edit", {"file_path": "w.txt", "old_string": "alpha\nbeta", "new_string": "A\nB\nC"}
    )
    assert result.ok, result.content
    assert path.read_bytes() == b"\xef\xbb\xbfA\r\nB\r\nC\r\ngamma"


async def test_edit_of_a_mixed_file_changes_only_the_match(tmp_path: Path) -> None:
    path = tmp_path / "m.txt"
    path.write_bytes(b"a\r\nb\nc\r\nd\n\tkeep  \r\n")
    ex = builtin_executor(tmp_path)
    assert (await call(ex, "read", {"file_path": "m.txt"})).ok
    result = await call(
        ex, "edit", {"file_path": "m.txt", "old_string": "b\nc", "new_string": "B\nC"}
    )
    assert result.ok, result.content
    assert path.read_bytes() == b"a\r\nB\r\nC\r\nd\n\tkeep  \r\n"


async def test_edit_replace_all_and_utf16(tmp_path: Path) -> None:
    path = tmp_path / "u.txt"
    path.write_bytes(codecs_utf16be("x = 1\nx = 1\n"))
    ex = builtin_executor(tmp_path)
    assert (await call(ex, "read", {"file_path": "u.txt"})).ok
    result = await call(
        ex,
        "edit",
        {"file_path": "u.txt", "old_string": "x = 1", "new_string": "y = 2", "replace_all": True},
    )
    assert result.ok and "2 replacements" in text(result)
    assert path.read_bytes() == codecs_utf16be("y = 2\ny = 2\n")


def codecs_utf16be(text_: str) -> bytes:
    return b"\xfe\xff" + text_.encode("utf-16-be")


async def test_edit_failures_name_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "e.py"
    original = "def f():\n    return 1\n\ndef g():\n    return 1\n"
    path.write_text(original)
    ex = builtin_executor(tmp_path)
    assert (await call(ex, "read", {"file_path": "e.py"})).ok

    async def edit(old: str, new: str) -> ToolResult:
        return await call(ex, "edit", {"file_path": "e.py", "old_string": old, "new_string": new})

    several = await edit("    return 1", "    return 2")
    assert failure_code(several) == "ambiguous" and "lines 2, 5" in text(several)
    absent = await edit("def h():", "def k():")
    assert failure_code(absent) == "not_found_in_file"
    assert "closest lines" in text(absent) and "def f():" in text(absent)
    spaces = await edit("def f():\n  return 1", "x")
    assert "whitespace is ignored" in text(spaces)
    same = await edit("def f():", "def f():")
    assert failure_code(same) == "no_change"
    empty = await edit("", "x")
    assert failure_code(empty) == "empty_old_string"
    missing = await call(ex, "edit", {"file_path": "nope.py", "old_string": "a", "new_string": "b"})
    assert failure_code(missing) == "not_found" and "write" in text(missing)
    assert path.read_text() == original


async def test_edit_of_binary_and_non_utf8_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "bin").write_bytes(b"ab\x00cd")
    (tmp_path / "latin").write_bytes(b"caf\xe9\n")
    ex = builtin_executor(tmp_path)
    for name, code in (("bin", "binary_file"), ("latin", "undecodable")):
        read = await call(ex, "read", {"file_path": name})
        assert failure_code(read) == code
        # The reason read gave, not "read it first": reading again could never help.
        result = await call(ex, "edit", {"file_path": name, "old_string": "a", "new_string": "b"})
        assert failure_code(result) == code
    assert (tmp_path / "bin").read_bytes() == b"ab\x00cd"
    assert (tmp_path / "latin").read_bytes() == b"caf\xe9\n"


async def test_writers_report_changed_paths(tmp_path: Path) -> None:
    ex = builtin_executor(tmp_path)
    seen: list[tuple[str, ...]] = []
    ex.on_files_changed(seen.append)
    assert (await call(ex, "write", {"file_path": "n.txt", "content": "a\n"})).ok
    assert (await call(ex, "edit", {"file_path": "n.txt", "old_string": "a", "new_string": "b"})).ok
    assert (await call(ex, "read", {"file_path": "n.txt"})).ok  # a reader reports nothing
    failed = await call(ex, "edit", {"file_path": "n.txt", "old_string": "zz", "new_string": "b"})
    assert not failed.ok
    canonical = real(tmp_path / "n.txt")
    assert seen == [(canonical,), (canonical,)]


async def test_an_edit_matching_everywhere_lists_a_bounded_few_lines(tmp_path: Path) -> None:
    path = tmp_path / "many.txt"
    original = "a" * 200_000 + "\n" + "a\n" * 50
    path.write_text(original)
    ex = builtin_executor(tmp_path)
    assert (await call(ex, "read", {"file_path": "many.txt"})).ok
    result = await call(ex, "edit", {"file_path": "many.txt", "old_string": "a", "new_string": "b"})
    assert failure_code(result) == "ambiguous"
    assert result.error is not None
    assert result.error.details == {
        "code": "ambiguous",
        "lines": [1] * 20,
        "count": 200_050,
    }
    assert "occurs 200,050 times" in text(result) and "(lines 1, 1, " in text(result)
    # The numbers are right past the first line too.
    tail = await call(ex, "edit", {"file_path": "many.txt", "old_string": "\na", "new_string": "b"})
    assert tail.error is not None and tail.error.details == {
        "code": "ambiguous",
        "lines": list(range(1, 21)),
        "count": 50,
    }
    assert path.read_text() == original


async def test_a_replace_all_past_the_size_limit_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "grow.txt"
    original = "x\n" * 500_000  # 1 MB; each x becomes 80 bytes: 40 MB, over the 32 MiB limit
    path.write_text(original)
    ex = builtin_executor(tmp_path)
    assert (await call(ex, "read", {"file_path": "grow.txt"})).ok
    args = {"file_path": "grow.txt", "old_string": "x", "new_string": "y" * 80, "replace_all": True}
    result = await call(ex, "edit", args)
    assert failure_code(result) == "file_too_large", result.content
    assert "grow.txt was not changed" in text(result)
    assert path.read_text() == original
