"""``read``, ``write`` and ``edit`` (SPEC §16)."""

from __future__ import annotations

import difflib
import re
from bisect import bisect_left
from typing import Any

from fastgate.builtin._common import (
    MAX_FILE_BYTES,
    absolute,
    file_path_refusal,
    ledger_key,
    os_failure,
    read_file,
    read_target,
    shown,
    stale_failure,
    stat_file,
    write_target,
)
from fastgate.builtin._fs import FileStat, FileTooLarge, NotARegularFile
from fastgate.builtin._ledger import is_fresh, ledger_of
from fastgate.builtin._text import (
    PLAIN_UTF8,
    BinaryFile,
    Encoding,
    UndecodableFile,
    UnencodableText,
    decode,
    newline_of,
    sniff,
)
from fastgate.model import Failure
from fastgate.pipeline import RunContext

MAX_LINE_CHARS = 2000
MAX_READ_CHARS = 100_000  # one read's content; the note says where to go on
SNIPPET_LINES = 3  # lines shown around an edit, each side
LISTED_MATCHES = 20  # line numbers an ambiguous edit lists


_TEXT_ONLY = {
    "read": "read shows text files only.",
    "edit": "edit changes text files only, and read cannot show it either. Nothing was changed.",
}


def _not_text(name: str, exc: ValueError, tool: str) -> Failure:
    if isinstance(exc, BinaryFile):
        return Failure(
            f"{name} is a binary file ({exc}); {_TEXT_ONLY[tool]}",
            code="binary_file",
        )
    return Failure(
        f"{name} cannot be decoded as text ({exc}); the file tools handle UTF-8, and UTF-16 or "
        "UTF-32 with a byte-order mark. Nothing was changed.",
        code="undecodable",
    )


# -- read ------------------------------------------------------------------------------------


async def read(args: Any, ctx: RunContext) -> Any:
    given: str = args["file_path"]
    name = shown(ctx, absolute(ctx, given))
    offset: int = args.get("offset", 1)
    limit: int = args.get("limit", 2000)
    fs = ctx.fs
    refused = await file_path_refusal(ctx, fs, given, "read")
    if refused is not None:
        return refused
    try:
        # The path stage 5 checked (and the user approved), followed by no symlink from there.
        path = await read_target(ctx, fs, given)
        stat, data = await read_file(fs, path)
    except OSError as exc:
        return os_failure(exc, name, "read")
    try:
        text, _ = decode(data)
    except (BinaryFile, UndecodableFile) as exc:
        return _not_text(name, exc, "read")
    ledger_of(fs).remember(ctx.session_id, ledger_key(fs, path), stat, data)
    return number_lines(text, offset, limit, name)


def number_lines(text: str, offset: int, limit: int, name: str) -> Any:
    """``cat -n`` of lines ``offset`` .. ``offset + limit - 1``, each cut at 2000 characters,
    the whole cut at 100,000, with a note saying how to go on."""
    if not text:
        return f"({name} is empty.)"
    total = text.count("\n") + (0 if text.endswith("\n") else 1)
    if offset > total:
        return Failure(
            f"offset {offset} is past the end of {name}, which has {total} line"
            f"{'s' if total != 1 else ''}.",
            code="offset_past_end",
            details={"lines": total},
        )
    # Any positive limit is taken: one past the lines left means "to the end" (and keeps a
    # limit of 10**30 from reaching str.split, which takes a C size).
    limit = min(limit, total - offset + 1)
    lines = text.split("\n", offset - 1 + limit)[offset - 1 :]
    if len(lines) > limit:
        lines.pop()  # the rest of the file, unsplit
    out: list[str] = []
    size = 0
    last = offset - 1
    cut_lines = 0
    for number, line in enumerate(lines, offset):
        if number > total:
            break  # the empty piece after a final newline
        if line.endswith("\r"):
            line = line[:-1]
        if len(line) > MAX_LINE_CHARS:
            line = f"{line[:MAX_LINE_CHARS]}… [{len(line) - MAX_LINE_CHARS:,} more characters]"
            cut_lines += 1
        entry = f"{number:>6}\t{line}"
        if out and size + len(entry) + 1 > MAX_READ_CHARS:
            break
        out.append(entry)
        size += len(entry) + 1
        last = number
    if last < total:
        out.append(
            f"\n[Showing lines {offset}-{last} of {total}. To read on, call read with "
            f"offset={last + 1}.]"
        )
    if cut_lines:
        out.append(
            f"[{cut_lines} line{'s' if cut_lines != 1 else ''} over {MAX_LINE_CHARS:,} "
            "characters cut; grep shows them in parts.]"
        )
    return "\n".join(out)


# -- write -----------------------------------------------------------------------------------


async def write(args: Any, ctx: RunContext) -> Any:
    name = shown(ctx, absolute(ctx, args["file_path"]))
    content: str = args["content"]
    fs = ctx.fs
    refused = await file_path_refusal(ctx, fs, args["file_path"], "written")
    if refused is not None:
        return refused
    try:
        path = await write_target(ctx, fs, args["file_path"])
    except OSError as exc:
        return os_failure(exc, name, "written")
    key = ledger_key(fs, path)
    encoding: Encoding = PLAIN_UTF8
    try:
        stat = await stat_file(fs, path)
    except OSError as exc:
        return os_failure(exc, name, "written")
    existed = stat is not None
    if stat is not None:
        kept = await _replaceable(ctx, fs, path, key, stat, name)
        if isinstance(kept, Failure):
            return kept
        encoding = kept
    try:
        data = encoding.encode(content)
    except UnencodableText as exc:
        return Failure(f"{name} was not written: {exc}.", code="unencodable")
    try:
        await fs.write_bytes(path, data)
    except OSError as exc:
        return os_failure(exc, name, "written")
    await _remember_written(ctx, fs, path, key, data)
    ctx.files_changed([path])
    verb = "Overwrote" if existed else "Created"
    return f"{verb} {name} ({len(data):,} bytes)."


async def _replaceable(
    ctx: RunContext, fs: Any, path: str, key: str, stat: FileStat, name: str
) -> Encoding | Failure:
    """The encoding (and BOM) the existing file at ``path`` keeps when ``write`` replaces it, or
    why it may not: it is no regular file, or not what this session read. A file read refuses
    (binary, undecodable, too large) gets that reason: "read it first" could never be done."""
    if stat.is_dir:
        return os_failure(IsADirectoryError(21, "is a directory", path), name, "written")
    if stat.is_special:  # a FIFO would block the open, a device take the bytes: never opened
        return os_failure(NotARegularFile(path), name, "written")
    try:
        stat, old = await read_file(fs, path)
    except FileTooLarge as exc:
        return _not_replaced(
            name,
            f"is {exc.size:,} bytes, over the {exc.limit:,} bytes the file tools load at once",
            "file_too_large",
            "Use grep (with context) to see what is in it. ",
        )
    except OSError as exc:
        return os_failure(exc, name, "written")
    record = ledger_of(fs).seen(ctx.session_id, key)
    if record is not None and is_fresh(record, stat, old):
        return sniff(old) or PLAIN_UTF8
    try:
        decode(old)
    except BinaryFile as exc:
        return _not_replaced(name, f"is a binary file ({exc})", "binary_file")
    except UndecodableFile as exc:
        return _not_replaced(
            name,
            f"cannot be decoded as text ({exc}; the file tools handle UTF-8, and UTF-16 or "
            "UTF-32 with a byte-order mark)",
            "undecodable",
        )
    return stale_failure(name, never_read=record is None)


def _not_replaced(name: str, why: str, code: str, hint: str = "") -> Failure:
    """``write`` refusing a file read cannot show: it replaces only a file this session read
    as it is now, so that it never overwrites what nobody saw; retrying cannot help."""
    return Failure(
        f"{name} {why}, so read cannot show it, and write replaces only a file this session "
        f"has read: write does not replace {name}. Nothing was written. {hint}If it must be "
        "replaced, ask the user.",
        code=code,
    )


async def _remember_written(ctx: RunContext, fs: Any, path: str, key: str, data: bytes) -> None:
    try:
        stat = await stat_file(fs, path)
    except OSError:
        stat = None
    ledger_of(fs).remember(ctx.session_id, key, stat, data)


# -- edit ------------------------------------------------------------------------------------


async def edit(args: Any, ctx: RunContext) -> Any:
    name = shown(ctx, absolute(ctx, args["file_path"]))
    old_string: str = args["old_string"].replace("\r\n", "\n")
    new_string: str = args["new_string"].replace("\r\n", "\n")
    replace_all: bool = args.get("replace_all", False)
    if old_string == new_string:
        return Failure(
            "old_string and new_string are the same: there is nothing to change.",
            code="no_change",
        )
    if not old_string:
        return Failure(
            "old_string is empty. Give the exact text to replace (with a few neighbouring "
            "lines to make it unique); to create a file, use write.",
            code="empty_old_string",
        )
    fs = ctx.fs
    refused = await file_path_refusal(ctx, fs, args["file_path"], "changed")
    if refused is not None:
        return refused
    try:
        path = await write_target(ctx, fs, args["file_path"])
    except OSError as exc:
        return os_failure(exc, name, "changed")
    ledger = ledger_of(fs)
    key = ledger_key(fs, path)
    try:
        stat, data = await read_file(fs, path)
    except FileNotFoundError:
        return Failure(f"File does not exist: {name}. Use write to create it.", code="not_found")
    except OSError as exc:
        return os_failure(exc, name, "changed")
    try:  # before the stale check: "read it first" cannot help with a file read refuses
        text, encoding = decode(data)
    except (BinaryFile, UndecodableFile) as exc:
        return _not_text(name, exc, "edit")
    record = ledger.seen(ctx.session_id, key)
    if record is None:
        return stale_failure(name, never_read=True)
    if not is_fresh(record, stat, data):
        return stale_failure(name, never_read=False)
    replaced = replace_text(text, old_string, new_string, replace_all, name)
    if isinstance(replaced, Failure):
        return replaced
    new_text, count, first_line = replaced
    try:
        new_data = encoding.encode(new_text)
    except UnencodableText as exc:
        return Failure(f"{name} was not changed: new_string {exc}.", code="unencodable")
    if len(new_data) > MAX_FILE_BYTES:  # characters of more than one byte
        return _too_large(name, len(new_data))
    try:
        await fs.write_bytes(path, new_data)
    except OSError as exc:
        return os_failure(exc, name, "changed")
    await _remember_written(ctx, fs, path, key, new_data)
    ctx.files_changed([path])
    times = f"{count} replacement{'s' if count != 1 else ''}"
    snippet = _snippet(new_text, first_line, new_string.count("\n") + 1)
    return f"The file {name} has been updated ({times}). Around line {first_line} now:\n{snippet}"


def replace_text(
    text: str, old: str, new: str, replace_all: bool, name: str
) -> tuple[str, int, int] | Failure:
    """(new text, replacements, first changed line) or the failure to report.

    ``old`` and ``new`` use ``\\n``; the file may use CRLF. Matching runs on the file with its
    CRLFs read as ``\\n``, and each match is mapped back to its place in the real text, so only
    the matched bytes change and each ``\\n`` of ``new`` is written as the file's line ending.
    """
    crlf = "\r\n" in text
    view = text.replace("\r\n", "\n") if crlf else text
    starts = _occurrences(view, old)
    if not starts:
        return _not_found(view, old, name)
    if len(starts) > 1 and not replace_all:
        lines = _line_numbers(view, starts[:LISTED_MATCHES])
        more = ", ..." if len(starts) > LISTED_MATCHES else ""
        return Failure(
            f"old_string occurs {len(starts):,} times in {name} (lines "
            f"{', '.join(map(str, lines))}{more}). Add neighbouring lines to old_string so it "
            "matches one place, or set replace_all to replace every occurrence.",
            code="ambiguous",
            details={"lines": lines, "count": len(starts)},
        )
    removed = _dropped_cr_positions(text) if crlf else []
    newline = newline_of(text) if crlf else "\n"

    def real(position: int) -> int:
        return position + bisect_left(removed, position) if removed else position

    written = new.replace("\n", newline) if newline != "\n" else new
    pieces: list[str] = []
    size = len(text)
    last = 0
    for start in starts:
        begin, end = real(start), real(start + len(old))
        pieces.append(text[last:begin])
        pieces.append(written)
        size += len(written) - (end - begin)
        last = end
    pieces.append(text[last:])
    # Each character is a byte at least: a text this long could not be loaded again.
    if size > MAX_FILE_BYTES:
        return _too_large(name, size)
    first_line = view.count("\n", 0, starts[0]) + 1
    return "".join(pieces), len(starts), first_line


def _line_numbers(text: str, starts: list[int]) -> list[int]:
    """The line of each of the sorted ``starts``, counting newlines once, left to right."""
    numbers: list[int] = []
    line, counted = 1, 0
    for start in starts:
        line += text.count("\n", counted, start)
        counted = start
        numbers.append(line)
    return numbers


def _too_large(name: str, size: int) -> Failure:
    return Failure(
        f"{name} was not changed: the edit would make it {size:,} bytes or more, over the "
        f"{MAX_FILE_BYTES:,} bytes the file tools load at once. Replace fewer occurrences, or "
        "a shorter new_string.",
        code="file_too_large",
        details={"size": size, "limit": MAX_FILE_BYTES},
    )


def _dropped_cr_positions(text: str) -> list[int]:
    """For each CRLF of ``text``, the position of its ``\\n`` in the text with CRLFs read as
    ``\\n`` (sorted): ``real(p) = p + (CRs dropped before p)``."""
    out: list[int] = []
    dropped = 0
    for match in re.finditer("\r\n", text):
        out.append(match.start() - dropped)
        dropped += 1
    return out


def _occurrences(text: str, sub: str) -> list[int]:
    found: list[int] = []
    start = text.find(sub)
    while start != -1:
        found.append(start)
        start = text.find(sub, start + len(sub))
    return found


def _not_found(text: str, old: str, name: str) -> Failure:
    lines = text.split("\n")
    wanted = next((line for line in old.split("\n") if line.strip()), old)
    hint = ""
    squeezed = " ".join(old.split())
    if squeezed and squeezed in " ".join(text.split()):
        hint = (
            " It does match if whitespace is ignored: copy the indentation and line breaks "
            "exactly as read shows them (tabs and spaces differ)."
        )
    close = difflib.get_close_matches(wanted.strip(), [ln.strip() for ln in lines], n=3, cutoff=0.6)
    listed = ""
    if close:
        numbered: list[str] = []
        for candidate in close:
            number = next(i for i, ln in enumerate(lines, 1) if ln.strip() == candidate)
            numbered.append(f"{number:>6}\t{lines[number - 1][:200]}")
        listed = " The closest lines are:\n" + "\n".join(numbered)
    return Failure(
        f"old_string was not found in {name}.{hint} Read the file again and copy the text "
        f"exactly.{listed}",
        code="not_found_in_file",
    )


def _snippet(text: str, first_line: int, span: int) -> str:
    lines = text.split("\n")
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()  # the final newline ends the last line; it starts none
    start = max(1, first_line - SNIPPET_LINES)
    end = min(len(lines), first_line + span - 1 + SNIPPET_LINES)
    shown_lines = []
    for number in range(start, end + 1):
        line = lines[number - 1].rstrip("\r")
        if len(line) > 200:
            line = line[:200] + "…"
        shown_lines.append(f"{number:>6}\t{line}")
    return "\n".join(shown_lines)
