"""apply_patch: the format and its texts, all files or none, and declared paths checked before
anything runs (SPEC §5, §16)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from fastgate import (
    ApprovalResponse,
    ErrorCode,
    PermissionConfig,
    PermissionMode,
)
from fastgate.builtin._patch import PatchError, parse_patch
from tests.builtin_kit import MemoryFileSystem, builtin_executor, call, failure_code, real, text


def patch(*body: str) -> str:
    return "\n".join(("*** Begin Patch", *body, "*** End Patch"))


async def test_add_update_delete_move_and_the_success_text(tmp_path: Path) -> None:
    (tmp_path / "mod.py").write_text("a = 1\nb = 2\nc = 3\n")
    (tmp_path / "gone.txt").write_text("bye\n")
    (tmp_path / "old.txt").write_text("keep\nme\n")
    ex = builtin_executor(tmp_path)
    result = await call(
        ex,
        "apply_patch",
        {
            "patch": patch(
                "*** Add File: new/hello.txt",
                "+hello",
                "+world",
                "*** Update File: mod.py",
                "@@",
                " a = 1",
                "-b = 2",
                "+b = 20",
                " c = 3",
                "*** Delete File: gone.txt",
                "*** Update File: old.txt",
                "*** Move to: moved/new.txt",
                "@@",
                "-me",
                "+you",
            )
        },
    )
    assert result.ok, result.content
    assert text(result) == (
        "Success. Updated the following files:\nA new/hello.txt\nM mod.py\nM moved/new.txt\n"
        "D gone.txt"
    )
    assert (tmp_path / "new/hello.txt").read_text() == "hello\nworld\n"
    assert (tmp_path / "mod.py").read_text() == "a = 1\nb = 20\nc = 3\n"
    assert not (tmp_path / "gone.txt").exists() and not (tmp_path / "old.txt").exists()
    assert (tmp_path / "moved/new.txt").read_text() == "keep\nyou\n"


async def test_a_failing_second_hunk_leaves_the_first_file_untouched(tmp_path: Path) -> None:
    (tmp_path / "one.txt").write_text("x\n")
    (tmp_path / "two.txt").write_text("y\n")
    ex = builtin_executor(tmp_path)
    result = await call(
        ex,
        "apply_patch",
        {
            "patch": patch(
                "*** Update File: one.txt",
                "-x",
                "+X",
                "*** Update File: two.txt",
                "-not there",
                "+Y",
            )
        },
    )
    assert failure_code(result) == "hunk_not_found"
    assert text(result) == "Failed to find expected lines in two.txt:\nnot there"
    assert (tmp_path / "one.txt").read_text() == "x\n"


async def test_a_failed_write_puts_back_what_was_replaced(tmp_path: Path) -> None:
    root = str(tmp_path)
    fs = MemoryFileSystem(
        {f"{root}/a.txt": b"a\n", f"{root}/b.txt": b"b\n", f"{root}/c.txt": b"c\n"}
    )
    fs.fail_writes.add(f"{root}/c.txt")
    ex = builtin_executor(tmp_path, fs=fs)
    result = await call(
        ex,
        "apply_patch",
        {
            "patch": patch(
                "*** Update File: a.txt",
                "-a",
                "+A",
                "*** Delete File: b.txt",
                "*** Add File: d.txt",
                "+d",
                "*** Update File: c.txt",
                "-c",
                "+C",
            )
        },
    )
    assert failure_code(result) == "write_failed" and "restored" in text(result)
    assert fs.files == {f"{root}/a.txt": b"a\n", f"{root}/b.txt": b"b\n", f"{root}/c.txt": b"c\n"}
    assert not os.listdir(tmp_path)  # the disk was never touched


@pytest.mark.parametrize(
    ("patch_text", "message"),
    [
        ("bad", "invalid patch: The first line of the patch must be '*** Begin Patch'"),
        (
            "*** Begin Patch\nbad",
            "invalid patch: The last line of the patch must be '*** End Patch'",
        ),
        (
            patch("*** Frobnicate File: x"),
            "invalid hunk at line 2, '*** Frobnicate File: x' is not a valid hunk header. Valid "
            "hunk headers: '*** Add File: {path}', '*** Delete File: {path}', "
            "'*** Update File: {path}'",
        ),
        (
            patch("*** Update File: a.txt"),
            "invalid hunk at line 2, Update file hunk for path 'a.txt' is empty",
        ),
        (patch(), "No files were modified."),
        (
            patch("*** Update File: a.txt", "@@", "?what"),
            "invalid hunk at line 4, Unexpected line found in update hunk: '?what'. Every line "
            "should start with ' ' (context line), '+' (added line), or '-' (removed line)",
        ),
    ],
)
async def test_malformed_and_empty_patches(tmp_path: Path, patch_text: str, message: str) -> None:
    (tmp_path / "a.txt").write_text("a\n")
    result = await call(builtin_executor(tmp_path), "apply_patch", {"patch": patch_text})
    assert result.error is not None and result.error.code == ErrorCode.INVALID_ARGS
    assert result.error.message == message
    assert (tmp_path / "a.txt").read_text() == "a\n" and os.listdir(tmp_path) == ["a.txt"]


def test_parse_is_lenient_where_the_format_is() -> None:
    hunks = parse_patch("<<'EOF'\n  *** Begin Patch \n*** Add File: f\n+x\n *** End Patch\nEOF\n")
    assert [(h.kind, h.path, h.contents) for h in hunks] == [("add", "f", "x\n")]
    with pytest.raises(PatchError):
        parse_patch(patch("*** Update File: a", "@@", "-x", "junk after"))  # next hunk header


async def test_hunks_that_match_twice_or_not_at_all(tmp_path: Path) -> None:
    (tmp_path / "r.py").write_text("def f():\n    pass\n\ndef g():\n    pass\n")
    ex = builtin_executor(tmp_path)
    twice = await call(
        ex, "apply_patch", {"patch": patch("*** Update File: r.py", "@@", "-    pass", "+    ...")}
    )
    assert failure_code(twice) == "ambiguous_hunk" and "lines 2, 5" in text(twice)
    anchored = await call(
        ex,
        "apply_patch",
        {"patch": patch("*** Update File: r.py", "@@ def g():", "-    pass", "+    return 7")},
    )
    assert anchored.ok, anchored.content
    assert (tmp_path / "r.py").read_text() == "def f():\n    pass\n\ndef g():\n    return 7\n"
    no_context = await call(
        ex,
        "apply_patch",
        {"patch": patch("*** Update File: r.py", "@@ def nope():", "-x", "+y")},
    )
    assert text(no_context) == "Failed to find context 'def nope():' in r.py"
    missing = await call(ex, "apply_patch", {"patch": patch("*** Delete File: absent.txt")})
    assert failure_code(missing) == "not_found"
    exists = await call(ex, "apply_patch", {"patch": patch("*** Add File: r.py", "+x")})
    assert failure_code(exists) == "file_exists"


async def test_patches_keep_line_endings_bom_and_final_newline(tmp_path: Path) -> None:
    (tmp_path / "w.txt").write_bytes(b"\xef\xbb\xbfone\r\ntwo\r\nthree")
    (tmp_path / "fuzzy.txt").write_text("say \u201chi\u201d  \n")
    ex = builtin_executor(tmp_path)
    result = await call(
        ex,
        "apply_patch",
        {
            "patch": patch(
                "*** Update File: w.txt",
                "@@",
                " one",
                "-two",
                "+2",
                "+2b",
                "*** Update File: fuzzy.txt",
                '-say "hi"',
                "+said hi",
            )
        },
    )
    assert result.ok, result.content
    assert (tmp_path / "w.txt").read_bytes() == b"\xef\xbb\xbfone\r\n2\r\n2b\r\nthree"
    assert (tmp_path / "fuzzy.txt").read_text() == "said hi\n"
    end = await call(
        ex, "apply_patch", {"patch": patch("*** Update File: w.txt", "-three", "+3", "+4")}
    )
    assert end.ok and (tmp_path / "w.txt").read_bytes().endswith(b"2b\r\n3\r\n4")


async def test_declared_paths_meet_every_check_before_approval(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src/a.py").write_text("a\n")
    asked: list[Any] = []

    async def approver(request: Any) -> ApprovalResponse:
        asked.append(request)
        return ApprovalResponse(approved=False, feedback="no")

    ex = builtin_executor(
        tmp_path,
        mode=PermissionMode.YOLO,
        permissions=PermissionConfig(deny=("Edit(./src/secret.py)",)),
    )
    sensitive = await call(
        ex,
        "apply_patch",
        {"patch": patch("*** Add File: notes.txt", "+x", "*** Add File: .env", "+K=1")},
        approver=approver,
    )
    assert sensitive.error is not None and sensitive.error.code == ErrorCode.USER_REJECTED
    assert len(asked) == 1 and "sensitive" in asked[0].reason  # asked even in YOLO
    escape = await call(
        ex,
        "apply_patch",
        {"patch": patch("*** Add File: ok.txt", "+x", "*** Add File: ../../evil.txt", "+x")},
    )
    assert escape.error is not None and escape.error.code == ErrorCode.WORKTREE_VIOLATION
    denied = await call(
        ex,
        "apply_patch",
        {
            "patch": patch(
                "*** Update File: src/a.py", "-a", "+b", "*** Add File: src/secret.py", "+s"
            )
        },
    )
    assert denied.error is not None and denied.error.code == ErrorCode.PERMISSION_DENIED
    assert "Edit(./src/secret.py)" in denied.error.message
    assert sorted(os.listdir(tmp_path)) == ["src"] and os.listdir(tmp_path / "src") == ["a.py"]
    assert (tmp_path / "src/a.py").read_text() == "a\n"


async def test_edit_rules_govern_patches_with_move_targets(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src/a.py").write_text("a\n")
    ex = builtin_executor(
        tmp_path,
        mode=PermissionMode.DEFAULT,
        permissions=PermissionConfig(allow=("Edit(./src/**)",)),
    )
    inside = await call(
        ex,
        "apply_patch",
        {"patch": patch("*** Update File: src/a.py", "*** Move to: src/b.py", "-a", "+b")},
    )
    assert inside.ok, inside.content
    outside = await call(
        ex,
        "apply_patch",
        {"patch": patch("*** Update File: src/b.py", "*** Move to: docs/b.py", "-b", "+c")},
    )
    # The move target is outside the allow rule: DEFAULT mode asks, and no approver is there.
    assert outside.error is not None and outside.error.code == ErrorCode.PERMISSION_DENIED
    assert outside.error.details.get("reason") == "no_approver"


async def test_a_patch_holds_the_sorted_locks_of_all_its_paths(tmp_path: Path) -> None:
    for name in ("a.txt", "b.txt", "c.txt"):
        (tmp_path / name).write_text("x\n")
    ex = builtin_executor(tmp_path)
    keys = {n: real(tmp_path / n) for n in ("a.txt", "b.txt", "c.txt")}
    body = patch(
        *("*** Update File: c.txt", "-x", "+c"),
        *("*** Update File: a.txt", "-x", "+a"),
        *("*** Update File: b.txt", "-x", "+b"),
    )
    # An outsider holds b.txt: the patch (written c, a, b) waits there, having taken a (first
    # in sorted order) and not c (after b): sorted order, so two patches never deadlock.
    async with ex.locks.acquire(keys["b.txt"], owner="outsider"):
        task = asyncio.ensure_future(call(ex, "apply_patch", {"patch": body}))
        for _ in range(100):
            await asyncio.sleep(0)
            if ex.locks.locked(keys["a.txt"]):
                break
        assert ex.locks.locked(keys["a.txt"]) and not ex.locks.locked(keys["c.txt"])
        assert not task.done() and (tmp_path / "a.txt").read_text() == "x\n"
    result = await task
    assert result.ok, result.content
    assert [(tmp_path / n).read_text() for n in ("a.txt", "b.txt", "c.txt")] == [
        "a\n",
        "b\n",
        "c\n",
    ]
    assert len(ex.locks) == 0


@pytest.mark.parametrize(
    "first",
    [("*** Update File: a.txt", "@@", "-one", "+ONE"), ("*** Delete File: a.txt",)],
    ids=["update-and-update", "delete-and-update"],
)
async def test_two_names_of_one_file_refuse_the_whole_patch(
    tmp_path: Path, first: tuple[str, ...]
) -> None:
    (tmp_path / "a.txt").write_text("one\ntwo\n")
    os.symlink("a.txt", tmp_path / "link.txt")
    (tmp_path / "other.txt").write_text("x\n")
    ex = builtin_executor(tmp_path)
    body = (
        "*** Update File: other.txt",
        "-x",
        "+y",
        *first,
        "*** Update File: link.txt",
        "@@",
        "-two",
        "+TWO",
    )
    result = await call(ex, "apply_patch", {"patch": patch(*body)})
    assert not result.ok and failure_code(result) == "same_file", result.content
    assert text(result).startswith("a.txt and link.txt are the same file")
    assert "No file was changed." in text(result)
    assert (tmp_path / "a.txt").read_text() == "one\ntwo\n"
    assert os.readlink(tmp_path / "link.txt") == "a.txt"
    assert (tmp_path / "other.txt").read_text() == "x\n"


@pytest.mark.parametrize("target", ["../outside.txt", "link/outside.txt"])
async def test_a_move_out_of_the_workspace_is_refused_before_anything_runs(
    tmp_path: Path, target: str
) -> None:
    workspace, outside = tmp_path / "ws", tmp_path / "elsewhere"
    workspace.mkdir()
    outside.mkdir()
    (workspace / "a.txt").write_text("a\n")
    (workspace / "link").symlink_to(outside)  # a directory inside that leads outside
    asked: list[Any] = []

    async def approver(request: Any) -> ApprovalResponse:
        asked.append(request)
        return ApprovalResponse(True)

    ex = builtin_executor(workspace, mode=PermissionMode.YOLO)
    result = await call(
        ex,
        "apply_patch",
        {"patch": patch("*** Update File: a.txt", f"*** Move to: {target}", "-a", "+b")},
        approver=approver,
    )
    assert result.error is not None and result.error.code == ErrorCode.WORKTREE_VIOLATION
    assert asked == []  # refused at stage 5, before any approval
    assert (workspace / "a.txt").read_text() == "a\n"
    assert not (tmp_path / "outside.txt").exists() and list(outside.iterdir()) == []


def update(path: str, *body: str) -> str:
    return patch(f"*** Update File: {path}", *body)


@pytest.mark.parametrize(
    ("before", "body", "after"),
    [
        # mixed endings: the context lines keep theirs; a replaced line takes the one it replaces
        (b"a\r\nb\nc\n", ("-b", "+B"), b"a\r\nB\nc\n"),
        (b"a\r\nb\nc\n", ("@@", " a", "-b", "+B", " c"), b"a\r\nB\nc\n"),
        (b"x\ny\r\nz\nw\n", (" y", "-z", "+Z", "+Z2", " w"), b"x\ny\r\nZ\nZ2\nw\n"),
        (b"a\nb\r\nc\nd\n", (" a", "-b", "+B", " c"), b"a\nB\r\nc\nd\n"),
        (b"a\r\nb\nc\r\n", ("-a", "-b", "+A", "+B", " c"), b"A\r\nB\nc\r\n"),
        # added lines that replace nothing take the dominant ending
        (b"a\r\nb\r\nc\n", (" a", "+new", " b"), b"a\r\nnew\r\nb\r\nc\n"),
        (b"a\nb\nc\r\n", (" a", "+new", " b"), b"a\nnew\nb\nc\r\n"),
        # CRLF only, LF only
        (
            b"one\r\ntwo\r\nthree\r\n",
            ("@@", " one", "-two", "+2", "+2b", " three"),
            b"one\r\n2\r\n2b\r\nthree\r\n",
        ),
        (b"one\ntwo\nthree\n", (" one", "-two", "+2", " three"), b"one\n2\nthree\n"),
        # no final newline: kept as it was, wherever the last line goes
        (b"a\r\nb", ("-b", "+B", "+C"), b"a\r\nB\r\nC"),
        (b"a\r\nb", (" b", "+c"), b"a\r\nb\r\nc"),
        (b"a\r\nb", ("+c",), b"a\r\nb\r\nc"),
        (b"a\r\nb", (" a", "-b"), b"a"),
        (b"a\nb\r\n", ("-a", "+A", " b"), b"A\nb\r\n"),
        # *** End of File anchors at the end, endings kept around it
        (b"x\r\ny\nz", (" y", "-z", "+Z", "*** End of File"), b"x\r\ny\nZ"),
        (b"x\r\ny\nz\n", (" x", " y", "-z", "+Z", "*** End of File"), b"x\r\ny\nZ\n"),
        # a context line found by the lenient passes is written back as the file has it
        (b"  a  \r\nb\n", (" a", "-b", "+B"), b"  a  \r\nB\n"),
        (
            b"say \xe2\x80\x9chi\xe2\x80\x9d\r\nb\n",
            (' say "hi"', "-b", "+B"),
            b"say \xe2\x80\x9chi\xe2\x80\x9d\r\nB\n",
        ),
        # a trailing blank context line the file lacks is dropped, endings still kept
        (b"a\r\nb\n", (" a", "-b", "+B", ""), b"a\r\nB\n"),
    ],
)
async def test_unchanged_lines_keep_their_endings_byte_for_byte(
    tmp_path: Path, before: bytes, body: tuple[str, ...], after: bytes
) -> None:
    (tmp_path / "f.txt").write_bytes(before)
    result = await call(
        builtin_executor(tmp_path), "apply_patch", {"patch": update("f.txt", *body)}
    )
    assert result.ok, result.content
    assert (tmp_path / "f.txt").read_bytes() == after


async def test_endings_kept_through_the_memory_file_system_seam(tmp_path: Path) -> None:
    fs = MemoryFileSystem({str(tmp_path / "m.txt"): b"one\r\ntwo\nthree\r\n"})
    ex = builtin_executor(tmp_path, fs=fs)
    result = await call(
        ex, "apply_patch", {"patch": update("m.txt", " one", "-two", "+2", " three")}
    )
    assert result.ok, result.content
    assert await fs.read_bytes(str(tmp_path / "m.txt")) == b"one\r\n2\nthree\r\n"


LAST_LINE = "invalid patch: The last line of the patch must be '*** End Patch'"
FIRST_LINE = "invalid patch: The first line of the patch must be '*** Begin Patch'"


@pytest.mark.parametrize(
    ("patch_text", "message"),
    [
        ("<<'EOF'\n*** Begin Patch\n*** Update File: a.txt\n-a\n+b\nEOF", LAST_LINE),
        ('<<"EOF"\n*** Begin Patch\n*** Update File: a.txt\n-a\n+b\nEOF\n', LAST_LINE),
        ("<<EOF\n*** Begin Patch\n*** Update File: a.txt\n-a\n+b\nEOF", LAST_LINE),
        ("apply_patch <<'EOF'\n*** Begin Patch\n*** Update File: a.txt\n-a\n+b\nEOF", LAST_LINE),
        ("applypatch <<'PATCH'\n*** Begin Patch\n*** Delete File: a.txt\nPATCH\n", LAST_LINE),
        ("<<'EOF'\n*** Begin Patch\n*** Update File: a.txt\n-a\n+b", LAST_LINE),  # no closing word
        ("*** Begin Patch\n*** Update File: a.txt\n-a\n+b\n", LAST_LINE),
        ("*** Begin Patch\n*** Update File: a.txt\n-a\n+b\nEOF", LAST_LINE),
        ("<<'EOF'\n*** Update File: a.txt\n-a\n+b\n*** End Patch\nEOF", FIRST_LINE),
        ("cat <<'EOF'\n*** Begin Patch\n*** Delete File: a.txt\n*** End Patch\nEOF", FIRST_LINE),
        ("<<'EOF'\nEOF", FIRST_LINE),
    ],
)
async def test_a_patch_missing_its_end_says_the_last_line_is_wrong(
    tmp_path: Path, patch_text: str, message: str
) -> None:
    (tmp_path / "a.txt").write_text("a\n")
    result = await call(builtin_executor(tmp_path), "apply_patch", {"patch": patch_text})
    assert result.error is not None and result.error.code == ErrorCode.INVALID_ARGS
    assert result.error.message == message
    assert (tmp_path / "a.txt").read_text() == "a\n"


@pytest.mark.parametrize(
    "wrapped",
    [
        "<<'EOF'\n{}\nEOF\n",
        "apply_patch <<'EOF'\n{}\nEOF",
        'apply_patch <<"PATCH"\n{}\nPATCH\n',
        "applypatch <<EOF\n{}\nEOF",
    ],
)
async def test_a_complete_heredoc_wrapped_patch_applies(tmp_path: Path, wrapped: str) -> None:
    (tmp_path / "a.txt").write_text("a\n")
    body = wrapped.format(update("a.txt", "-a", "+b"))
    result = await call(builtin_executor(tmp_path), "apply_patch", {"patch": body})
    assert result.ok, result.content
    assert (tmp_path / "a.txt").read_text() == "b\n"


async def test_the_summary_lists_added_then_modified_then_deleted(tmp_path: Path) -> None:
    for name in ("d1.txt", "m1.txt", "d2.txt", "m2.txt", "src.txt"):
        (tmp_path / name).write_text("x\n")
    result = await call(
        builtin_executor(tmp_path),
        "apply_patch",
        {
            "patch": patch(
                "*** Delete File: d1.txt",
                "*** Update File: m1.txt",
                "-x",
                "+y",
                "*** Add File: a1.txt",
                "+new",
                "*** Delete File: d2.txt",
                "*** Update File: src.txt",
                "*** Move to: moved.txt",
                "-x",
                "+z",
                "*** Add File: a2.txt",
                "+new",
                "*** Update File: m2.txt",
                "-x",
                "+y",
            )
        },
    )
    assert result.ok, result.content
    assert text(result) == (
        "Success. Updated the following files:\n"
        "A a1.txt\nA a2.txt\nM m1.txt\nM moved.txt\nM m2.txt\nD d1.txt\nD d2.txt"
    )
