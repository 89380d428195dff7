"""``apply_patch``: the ``*** Begin Patch`` format models are trained on (Codex's), applied to
all its files or to none.

The parser keeps the format's established error texts (``invalid patch: ...``, ``invalid hunk
at line N, ...``, ``Failed to find expected lines in ...``) and its lenient reading (markers
padded with whitespace, a heredoc wrapper, hunks located forward with exact, trailing-space,
surrounding-space and then Unicode-punctuation matching). Where it differs, on purpose:

- all or nothing: every file's new bytes are computed first, then written; a write that fails
  puts back what was already replaced;
- a chunk whose lines match at more than one place (after its ``@@`` anchor) is refused as
  ambiguous instead of taking the first;
- line endings, BOM, encoding and the final newline of each file are kept outside the change,
  and a context line is written back as the file has it (its own ending, its own text);
- ``Add File`` onto an existing file and ``Move to`` onto one are refused, not overwritten;
- a symbolic link is not removed (``Delete File`` of one, or a move from one): the pipeline
  checks, and asks about, the file a path leads to, which is not what removing the link
  removes.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fastgate.builtin._common import (
    absolute,
    entry_target,
    file_path_refusal,
    ledger_key,
    os_failure,
    read_file,
    shown,
    stat_file,
    write_target,
)
from fastgate.builtin._ledger import ledger_of
from fastgate.builtin._text import (
    PLAIN_UTF8,
    BinaryFile,
    Encoding,
    UndecodableFile,
    UnencodableText,
    decode,
    line_body,
    line_break,
    newline_of,
    split_lines,
)
from fastgate.model import Failure
from fastgate.pipeline import RunContext

BEGIN = "*** Begin Patch"
END = "*** End Patch"
ADD = "*** Add File: "
DELETE = "*** Delete File: "
UPDATE = "*** Update File: "
MOVE = "*** Move to: "
END_OF_FILE = "*** End of File"


class PatchError(ValueError):
    """A patch that does not parse; the message is the format's own text."""


@dataclass
class Chunk:
    context: str | None
    old: list[str] = field(default_factory=list)
    new: list[str] = field(default_factory=list)
    end_of_file: bool = False
    # For each line of ``new``: the index in ``old`` of the same context line, or None for an
    # added line. Context lines are written back as the file has them, ending included.
    kept: list[int | None] = field(default_factory=list)


@dataclass
class Hunk:
    kind: str  # "add" | "delete" | "update"
    path: str
    move_to: str | None = None
    contents: str = ""  # "add"
    chunks: list[Chunk] = field(default_factory=list)  # "update"


def parse_patch(text: str) -> list[Hunk]:
    """The hunks of a patch, in order; ``PatchError`` with the format's message otherwise."""
    if not isinstance(text, str):
        raise PatchError("invalid patch: the patch must be a string")
    lines = text.strip().split("\n")
    lines = [line[:-1] if line.endswith("\r") else line for line in lines]
    body = _boundaries(lines)
    if body is None:
        # A heredoc wrapper (what a model writes when it thinks of the shell command) is
        # taken off, and what it wraps is judged: its missing end is the error to report.
        lines = _unwrap_heredoc(lines)
        body = _boundaries(lines)
        if body is None:
            _raise_boundary_error(lines)
    assert body is not None
    hunks: list[Hunk] = []
    number = 2
    rest = body
    while rest:
        hunk, used = _parse_hunk(rest, number)
        hunks.append(hunk)
        number += used
        rest = rest[used:]
    return hunks


def _boundaries(lines: list[str]) -> list[str] | None:
    if len(lines) >= 2 and lines[0].strip() == BEGIN and lines[-1].strip() == END:
        return lines[1:-1]
    return None


_HEREDOC_OPENER = re.compile(r"(?:(?:apply_patch|applypatch)\s+)?<<-?\s*(['\"]?)(\w+)\1")


def _unwrap_heredoc(lines: list[str]) -> list[str]:
    """The lines inside ``[apply_patch ]<<'EOF'`` ... ``EOF`` (the closing word may be missing);
    ``lines`` as given when the first line opens no heredoc."""
    opener = _HEREDOC_OPENER.fullmatch(lines[0].strip()) if lines else None
    if opener is None:
        return lines
    inner = lines[1:]
    if inner and inner[-1].strip() == opener.group(2):
        inner = inner[:-1]
    return inner


def _raise_boundary_error(lines: list[str]) -> None:
    if not lines or lines[0].strip() != BEGIN:
        raise PatchError("invalid patch: The first line of the patch must be '*** Begin Patch'")
    raise PatchError("invalid patch: The last line of the patch must be '*** End Patch'")


def _hunk_error(message: str, number: int) -> PatchError:
    return PatchError(f"invalid hunk at line {number}, {message}")


def _parse_hunk(lines: list[str], number: int) -> tuple[Hunk, int]:
    first = lines[0].strip()
    if first.startswith(ADD):
        contents: list[str] = []
        used = 1
        for line in lines[1:]:
            if not line.startswith("+"):
                break
            contents.append(line[1:] + "\n")
            used += 1
        return Hunk("add", _path_of(first, ADD, number), contents="".join(contents)), used
    if first.startswith(DELETE):
        return Hunk("delete", _path_of(first, DELETE, number)), 1
    if first.startswith(UPDATE):
        path = _path_of(first, UPDATE, number)
        used = 1
        rest = lines[1:]
        move_to = None
        if rest and rest[0].startswith(MOVE):
            move_to = _path_of(rest[0].strip(), MOVE, number + 1)
            rest = rest[1:]
            used += 1
        chunks: list[Chunk] = []
        while rest:
            if not rest[0].strip():
                rest = rest[1:]
                used += 1
                continue
            if rest[0].startswith("*"):
                break
            chunk, taken = _parse_chunk(rest, number + used, first_chunk=not chunks)
            chunks.append(chunk)
            rest = rest[taken:]
            used += taken
        if not chunks:
            raise _hunk_error(f"Update file hunk for path '{path}' is empty", number)
        return Hunk("update", path, move_to=move_to, chunks=chunks), used
    raise _hunk_error(
        f"'{first}' is not a valid hunk header. Valid hunk headers: '*** Add File: {{path}}', "
        "'*** Delete File: {path}', '*** Update File: {path}'",
        number,
    )


def _path_of(line: str, marker: str, number: int) -> str:
    path = line[len(marker) :].strip()
    if not path:
        raise _hunk_error(f"'{line}' names no file", number)
    return path


def _parse_chunk(lines: list[str], number: int, first_chunk: bool) -> tuple[Chunk, int]:
    if lines[0] == "@@":
        chunk, start = Chunk(None), 1
    elif lines[0].startswith("@@ "):
        chunk, start = Chunk(lines[0][3:]), 1
    elif first_chunk:
        chunk, start = Chunk(None), 0
    else:
        raise _hunk_error(
            f"Expected update hunk to start with a @@ context marker, got: '{lines[0]}'", number
        )
    if start >= len(lines):
        raise _hunk_error("Update hunk does not contain any lines", number + 1)
    taken = 0
    for line in lines[start:]:
        if line == END_OF_FILE:
            if taken == 0:
                raise _hunk_error("Update hunk does not contain any lines", number + 1)
            chunk.end_of_file = True
            taken += 1
            break
        marker = line[:1]
        if marker in ("", " "):
            chunk.kept.append(len(chunk.old))
            chunk.old.append(line[1:])
            chunk.new.append(line[1:])
        elif marker == "+":
            chunk.kept.append(None)
            chunk.new.append(line[1:])
        elif marker == "-":
            chunk.old.append(line[1:])
        else:
            if taken == 0:
                raise _hunk_error(
                    f"Unexpected line found in update hunk: '{line}'. Every line should start "
                    "with ' ' (context line), '+' (added line), or '-' (removed line)",
                    number + 1,
                )
            break
        taken += 1
    return chunk, taken + start


def patch_paths(args: Any) -> list[str]:
    """``ToolDefinition.paths`` of apply_patch: every file the patch adds, deletes, updates or
    moves to, as written in it (stage 5 resolves them against the workspace)."""
    paths: list[str] = []
    for hunk in parse_patch(args["patch"]):
        paths.append(hunk.path)
        if hunk.move_to is not None:
            paths.append(hunk.move_to)
    if not paths:
        raise PatchError("No files were modified.")
    return paths


# -- locating chunks -------------------------------------------------------------------------

_PUNCTUATION = str.maketrans(
    {
        **dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212", "-"),
        **dict.fromkeys("\u2018\u2019\u201a\u201b", "'"),
        **dict.fromkeys("\u201c\u201d\u201e\u201f", '"'),
        **dict.fromkeys(
            "\u00a0\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u202f\u205f\u3000", " "
        ),
    }
)
_PASSES: tuple[Callable[[str], str], ...] = (
    lambda s: s,
    str.rstrip,
    str.strip,
    lambda s: s.strip().translate(_PUNCTUATION),
)


class Ambiguous(Exception):
    def __init__(self, places: list[int]) -> None:
        super().__init__(places)
        self.places = places


def seek(lines: list[str], pattern: list[str], start: int, eof: bool) -> int | None:
    """Where ``pattern`` starts in ``lines`` at or after ``start``: the strictest pass that
    matches anywhere decides, and it must match at one place only (``Ambiguous``)."""
    if not pattern:
        return start
    if len(pattern) > len(lines):
        return None
    last = len(lines) - len(pattern)
    for normal in _PASSES:
        wanted = [normal(p) for p in pattern]
        if eof and [normal(x) for x in lines[last:]] == wanted:
            return last  # anchored at the end of the file: one place by definition
        places = [
            i
            for i in range(start, last + 1)
            if normal(lines[i]) == wanted[0]
            and all(normal(lines[i + k]) == wanted[k] for k in range(1, len(wanted)))
        ]
        if len(places) == 1:
            return places[0]
        if places:
            raise Ambiguous(places)
    return None


# -- applying --------------------------------------------------------------------------------


@dataclass
class _File:
    """One path the patch touches: what it was, and what it becomes (None: absent)."""

    path: str
    original: bytes | None
    current: bytes | None
    key: str  # the file's identity: a symlink and its target share one
    given: str  # the name the patch used for it, made absolute
    name: str = ""  # that name as the patch wrote it (what the summary shows)
    moved_to: str | None = None  # a Move to took its content there (a key of the staged files)
    arrived_by_move: bool = False  # its content came by a Move to (and is still there)


class _Refused(Exception):
    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure


async def apply_patch(args: Any, ctx: RunContext) -> Any:
    try:
        hunks = parse_patch(args["patch"])
    except PatchError as exc:
        return Failure(str(exc), code="invalid_patch")
    if not hunks:
        return Failure("No files were modified.", code="empty_patch")
    fs = ctx.fs
    files: dict[str, _File] = {}
    try:
        for hunk in hunks:
            await _stage(ctx, fs, files, hunk)
    except _Refused as refused:
        return refused.failure
    changed = [f for f in files.values() if f.current != f.original]
    failure = await _commit(ctx, fs, changed)
    if failure is not None:
        return failure
    ledger = ledger_of(fs)
    for f in changed:
        key = ledger_key(fs, f.path)
        if f.current is None:
            ledger.forget(ctx.session_id, key)
        else:
            try:
                stat = await stat_file(fs, f.path)
            except OSError:
                stat = None
            ledger.remember(ctx.session_id, key, stat, f.current)
    ctx.files_changed([f.path for f in changed])
    summary = _summary(files)
    if not summary:
        return "Success. No file was changed: the patch leaves every file as it was."
    return "Success. Updated the following files:\n" + "\n".join(summary)


def _summary(files: dict[str, _File]) -> list[str]:
    """One line per path, saying how it ends against how it began (a path deleted and then
    written again by a later hunk is not reported deleted): ``A`` added, ``M`` modified, ``D``
    deleted. A move is named by its destination (``M``), as the format does; its source is
    not listed while the moved content still stands somewhere, and is listed ``D`` when a
    later hunk deleted it. A path that began and ends absent is not listed. The format's
    order: added, then modified, then deleted, each in the order the patch first named them."""
    lines: list[str] = []
    for f in files.values():
        if f.current is not None:
            letter = "M" if f.original is not None or f.arrived_by_move else "A"
        elif f.original is not None and not _moved_content_stands(files, f):
            letter = "D"
        else:
            continue
        lines.append(f"{letter} {f.name}")
    lines.sort(key=lambda line: "AMD".index(line[0]))
    return lines


def _moved_content_stands(files: dict[str, _File], source: _File) -> bool:
    """Whether what a Move to took from ``source`` is still in some file at the end (a move
    onward from the destination is followed; a delete of it is not a place it stands)."""
    seen = {source.path}
    at = source
    while at.moved_to is not None and at.moved_to not in seen:
        at = files[at.moved_to]
        if at.current is not None:
            return True
        seen.add(at.path)
    return False


async def _load(ctx: RunContext, fs: Any, files: dict[str, _File], given: str) -> _File:
    refused = await file_path_refusal(ctx, fs, given, "changed")
    if refused is not None:
        raise _Refused(refused)
    path = await _write_target(ctx, fs, given)
    name = given
    given = absolute(ctx, given)
    known = files.get(path)
    if known is None or known.given != given:
        # Two names of one file would be staged twice and the last write would win, silently
        # dropping the other change: such a patch is refused whole.
        key = ledger_key(fs, path)
        alias = known or next((f for f in files.values() if f.key == key), None)
        if alias is not None:
            first, second = shown(ctx, alias.given), shown(ctx, given)
            raise _Refused(
                Failure(
                    f"{first} and {second} are the same file; give each file once in a patch. "
                    "No file was changed.",
                    code="same_file",
                    details={"paths": [first, second]},
                )
            )
        try:
            _, data = await read_file(fs, path)
        except FileNotFoundError:
            data = None
        except OSError as exc:
            raise _Refused(os_failure(exc, shown(ctx, path), "changed")) from None
        known = files[path] = _File(path, data, data, key, given, name)
    return known


async def _load_entry(ctx: RunContext, fs: Any, files: dict[str, _File], given: str) -> _File:
    """What a Delete File (or a move's source) removes: the name itself, the file ``_load``
    stages. A symlink there is refused: the pipeline checked, and the user was asked about,
    the file it leads to (``RunContext.checked_path``), while removing the name would remove
    the link, a path no rule and no prompt judged (a link placed in a directory no rule allows,
    or reached through a linked directory that no deny rule names). Removing the target
    instead would remove what the model did not name."""
    refused = await file_path_refusal(ctx, fs, given, "changed")
    if refused is not None:
        raise _Refused(refused)
    try:
        path, link = await entry_target(ctx, fs, given)
    except OSError as exc:
        raise _Refused(os_failure(exc, given, "changed")) from None
    if link is None:
        return await _load(ctx, fs, files, given)
    name, leads_to = shown(ctx, path), shown(ctx, ctx.checked_path(given))
    raise _Refused(
        Failure(
            f"{given} is a symbolic link ({name} -> {leads_to}). apply_patch checks a path, and "
            f"asks about it, by the file it leads to ({leads_to}), so it never removes a link "
            "(Delete File, or a Move to from it): what it would remove is the link, which no "
            f"check was about. No file was changed. Update File of {given} changes "
            f"{leads_to}; remove the link itself some other way.",
            code="symlink_not_removed",
            details={"link": name, "leads_to": leads_to},
        )
    )


async def _write_target(ctx: RunContext, fs: Any, given: str) -> str:
    """Where the patch changes ``given``: the path stage 5 checked, with no symlink on it since
    (the same rule as ``write`` and ``edit``)."""
    try:
        return await write_target(ctx, fs, given)
    except OSError as exc:
        raise _Refused(os_failure(exc, given, "changed")) from None


async def _stage(ctx: RunContext, fs: Any, files: dict[str, _File], hunk: Hunk) -> None:
    """Work out one hunk on the staged files."""
    loader = _load_entry if hunk.kind == "delete" else _load
    target = await loader(ctx, fs, files, hunk.path)
    name = hunk.path
    if hunk.kind == "add":
        if target.current is not None:
            raise _Refused(
                Failure(
                    f"Add File: {name} already exists. Use '*** Update File: {name}' to change "
                    "it (or delete it first). No file was changed.",
                    code="file_exists",
                )
            )
        target.current = _encode(PLAIN_UTF8, hunk.contents, name)
        target.arrived_by_move = False
        return
    if hunk.kind == "delete":
        if target.current is None:
            raise _Refused(
                Failure(
                    f"Failed to delete file {name}: it does not exist. No file was changed.",
                    code="not_found",
                )
            )
        target.current = None
        target.arrived_by_move = False
        return
    if target.current is None:
        raise _Refused(
            Failure(
                f"Failed to read file to update {name}: No such file or directory. No file was "
                "changed.",
                code="not_found",
            )
        )
    try:
        text, encoding = decode(target.current)
    except (BinaryFile, UndecodableFile) as exc:
        code = "binary_file" if isinstance(exc, BinaryFile) else "undecodable"
        raise _Refused(
            Failure(
                f"Failed to read file to update {name}: {exc}; apply_patch changes text files "
                "only. No file was changed.",
                code=code,
            )
        ) from None
    new_text = _apply_chunks(text, hunk.chunks, name)
    new_bytes = _encode(encoding, new_text, name)
    if hunk.move_to is None:
        target.current = new_bytes
        return
    destination = await _load(ctx, fs, files, hunk.move_to)
    if destination is not target:
        if destination.current is not None:
            raise _Refused(
                Failure(
                    f"Move to: {hunk.move_to} already exists; nothing is overwritten by a move. "
                    "No file was changed.",
                    code="file_exists",
                )
            )
        destination.current = new_bytes
        destination.arrived_by_move = True
        # The source name goes: the file staged above (a symlink there is refused, as for
        # Delete File).
        await _load_entry(ctx, fs, files, hunk.path)
        target.current = None
        target.moved_to = destination.path
    else:
        target.current = new_bytes


def _encode(encoding: Encoding, text: str, name: str) -> bytes:
    try:
        return encoding.encode(text)
    except UnencodableText as exc:
        raise _Refused(
            Failure(f"{name}: {exc}. No file was changed.", code="unencodable")
        ) from None


def _apply_chunks(text: str, chunks: list[Chunk], name: str) -> str:
    lines = split_lines(text)
    bodies = [line_body(line) for line in lines]
    newline = newline_of(text)
    replacements: list[tuple[int, int, list[str]]] = []
    index = 0
    for chunk in chunks:
        if chunk.context is not None:
            try:
                found = seek(bodies, [chunk.context], index, False)
            except Ambiguous as exc:
                found = exc.places[0]  # the anchor narrows; its first match after the last
            if found is None:
                raise _Refused(
                    Failure(
                        f"Failed to find context '{chunk.context}' in {name}",
                        code="context_not_found",
                    )
                )
            index = found + 1
        if not chunk.old:
            at = index if chunk.context is not None else len(lines)
            replacements.append((at, 0, [body + newline for body in chunk.new]))
            continue
        old, new, kept = chunk.old, chunk.new, chunk.kept
        try:
            found = seek(bodies, old, index, chunk.end_of_file)
            if found is None and old[-1] == "":
                old, new, kept = _without_final_blank(old, new, kept)
                found = seek(bodies, old, index, chunk.end_of_file)
        except Ambiguous as exc:
            places = ", ".join(str(p + 1) for p in exc.places[:10])
            raise _Refused(
                Failure(
                    f"Ambiguous hunk in {name}: the expected lines match at lines {places}"
                    f"{' (after the @@ context)' if chunk.context is not None else ''}. Add "
                    "context lines (or an @@ line naming the enclosing function or class) so "
                    "they match at one place. No file was changed. Expected lines:\n"
                    + "\n".join(chunk.old),
                    code="ambiguous_hunk",
                    details={"lines": [p + 1 for p in exc.places]},
                )
            ) from None
        if found is None:
            raise _Refused(
                Failure(
                    f"Failed to find expected lines in {name}:\n" + "\n".join(chunk.old),
                    code="hunk_not_found",
                )
            )
        span = lines[found : found + len(old)]
        replacements.append((found, len(old), _replaced(span, new, kept, newline)))
        index = found + len(old)
    had_final_break = not lines or bool(line_break(lines[-1]))
    lines = _assembled(lines, replacements, name)
    _settle_breaks(lines, newline, had_final_break)
    return "".join(lines)


def _assembled(
    lines: list[str], replacements: list[tuple[int, int, list[str]]], name: str
) -> list[str]:
    """The file with every replacement made, built front to back. Replacements sharing a start
    (an insertion right before a changed line) keep the patch's order: the sort is stable. A
    chunk that reaches back into an earlier one's lines is refused, never half-applied."""
    made_lines: list[str] = []
    cursor = 0
    for start, length, made in sorted(replacements, key=lambda r: r[0]):
        if start < cursor:
            raise _Refused(
                Failure(
                    f"Two chunks of the patch for {name} change the same lines (line "
                    f"{start + 1}). Merge them into one chunk. No file was changed.",
                    code="overlapping_chunks",
                )
            )
        made_lines += lines[cursor:start]
        made_lines += made
        cursor = start + length
    made_lines += lines[cursor:]
    return made_lines


def _without_final_blank(
    old: list[str], new: list[str], kept: list[int | None]
) -> tuple[list[str], list[str], list[int | None]]:
    """The chunk without the empty last line that the file lacks (the format's tolerance of a
    patch ending in a blank context line)."""
    old = old[:-1]
    if new and new[-1] == "":
        new, kept = new[:-1], kept[:-1]
    return old, new, [k if k is not None and k < len(old) else None for k in kept]


def _replaced(span: list[str], new: list[str], kept: list[int | None], newline: str) -> list[str]:
    """The lines that take the place of ``span`` (the file's lines the chunk matched, with their
    breaks). A context line is the file's own line, byte for byte. The added lines between two
    context lines replace the removed lines between them: the i-th takes the break of the i-th
    removed one (the last removed one's when there are more added lines); added lines that
    replace nothing take the file's dominant break."""
    made: list[str] = []
    previous = -1  # index in ``span`` of the last context line written
    run: list[str] = []  # added lines waiting for the next context line (or the end)

    def flush(following: int) -> None:
        removed = span[previous + 1 : following]
        for i, body in enumerate(run):
            made.append(
                body + (line_break(removed[min(i, len(removed) - 1)]) if removed else newline)
            )
        run.clear()

    for body, source in zip(new, kept, strict=True):
        if source is None:
            run.append(body)
            continue
        flush(source)
        made.append(span[source])
        previous = source
    flush(len(span))
    return made


def _settle_breaks(lines: list[str], newline: str, had_final_break: bool) -> None:
    """Every line but the last ends with a break (a line that was the file's unterminated last
    line may now stand inside it); the last one has a break exactly when the file had one."""
    for i in range(len(lines) - 1):
        if not line_break(lines[i]):
            lines[i] += newline
    if lines:
        last = lines[-1]
        if had_final_break and not line_break(last):
            lines[-1] = last + newline
        elif not had_final_break:
            lines[-1] = line_body(last)


async def _commit(ctx: RunContext, fs: Any, changed: list[_File]) -> Failure | None:
    """Write every staged file, then remove the deleted ones; on a failure, put back the ones
    already done. Writes go first: a move whose target cannot be written (it now leads outside
    the workspace, say) has not deleted its source, which keeps its inode, mode and owner."""
    done: list[_File] = []
    for f in sorted(changed, key=lambda f: f.current is None):
        try:
            if f.current is None:
                await fs.remove(f.path)
            else:
                await fs.write_bytes(f.path, f.current)
        except OSError as exc:
            undone = await _restore(fs, done)
            failure = os_failure(exc, shown(ctx, f.path), "changed")
            note = (
                "No file was changed: the files already written were restored."
                if not undone
                else "These could not be restored: " + ", ".join(shown(ctx, p) for p in undone)
            )
            # A symlink that appeared since the check keeps its own code, as in write and edit.
            return Failure(
                f"Failed to write {shown(ctx, f.path)}: {failure.message} {note}",
                code="path_changed" if failure.code == "path_changed" else "write_failed",
                details={"unrestored": [shown(ctx, p) for p in undone], "cause": failure.code},
            )
        done.append(f)
    return None


async def _restore(fs: Any, done: list[_File]) -> list[str]:
    """Put back the originals of ``done`` (newest first); the paths that could not be."""
    failed: list[str] = []
    for f in reversed(done):
        try:
            if f.original is None:
                await fs.remove(f.path)
            else:
                await fs.write_bytes(f.path, f.original)
        except OSError:
            failed.append(f.path)
    return failed
