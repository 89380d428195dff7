"""``glob`` and ``grep`` (SPEC §16): ripgrep on the local disk, the same search over the seam
anywhere else; results a read rule or the sensitive list covers are withheld either way.

Both routes list the same files: hidden ones included, ``.git`` skipped, ``.gitignore`` files
respected (``--no-require-git``: a workspace need not be a repository; a path named explicitly
is searched even when ignored, as ripgrep does), symlinks never followed. Both search the same
files: text is UTF-8 or UTF-16 with a BOM (ripgrep transcodes those), and a file holding a NUL
anywhere in its text is binary and never searched, wherever the NUL is (ripgrep stops at one
as it reads, so on its route each file it reports is checked to the end). The fallback reads
``.gitignore`` files through the seam and matches them with ``pathspec``'s git patterns, and
runs ripgrep's regex dialect on RE2 (``google-re2``): the same family of syntax, and linear
time, so a model's pattern cannot hang the server on either route. Glob patterns are matched
with RE2 too (``fastgate.paths.globs.Glob``), and every match over many names or a file's
content runs on a worker thread (RE2 releases the GIL), not the event loop.
"""

from __future__ import annotations

import asyncio
import base64
import codecs
import functools
import json
import os
import re
import stat as stat_module
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pathspec
import re2

from fastgate.builtin._common import absolute, os_failure, root_of, shown
from fastgate.builtin._fs import FileStat, LocalFileSystem, NotARegularFile
from fastgate.builtin._text import BinaryFile, UndecodableFile, decode, sniff
from fastgate.model import Failure
from fastgate.paths import Glob, GlobError, WorktreeEscape, compile_glob, plain_globs
from fastgate.pipeline import RunContext
from fastgate.processes import DEVNULL, spawn

GLOB_LIMIT = 100
MAX_OUTPUT_CHARS = 40_000
MAX_MATCH_LINE = 500  # characters of a matching line shown
MAX_RG_OUTPUT = 16 * 1024 * 1024  # bytes of ripgrep output kept before it is stopped
MAX_RG_LINE = 64 * 1024  # bytes of one line of ripgrep's JSON kept (the rest is read, not kept)
MAX_RG_READ = 256 * 1024 * 1024  # bytes of ripgrep's JSON read (kept or not) before it is stopped
MAX_WALK = 200_000  # entries the seam walk visits at most
MAX_SEARCH_BYTES = 64 * 1024 * 1024  # a file larger than this is not searched (either route)
_RG_COMMON = (
    "--no-config",
    "--no-messages",
    "--hidden",
    "--no-require-git",
    "--glob",
    "!.git",
    "--color=never",
)


@dataclass
class Found:
    """What a search found in one file."""

    path: str  # absolute
    mtime_ns: int = 0
    count: int = 0
    # (number (0: not known), match?, text clipped for showing)
    lines: list[tuple[int, bool, str]] = field(default_factory=list)


@dataclass(frozen=True)
class FileFilter:
    """``grep``'s ``glob``, read as ripgrep's ``--glob``: the files whose path from the search
    root matches (a pattern without ``/`` matches a name at any depth); with a leading ``!``,
    the files that do not, nor lie in a directory that does."""

    glob: Glob
    exclude: bool
    # What ripgrep is given to skip the other files early; empty when it may read the pattern
    # otherwise (then every file is searched, and only this filter decides).
    rg_globs: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> FileFilter:
        exclude = text.startswith("!")
        pattern = text[1:] if exclude else text
        glob = compile_glob(pattern, names_anywhere=True, below=exclude)
        plain = plain_globs(pattern) or ()
        if not all(map(_argument_safe, plain)):
            plain = ()  # (not a command-line argument: the filter alone decides)
        return cls(glob, exclude, tuple("!" + g if exclude else g for g in plain))

    def keeps(self, relative: str) -> bool:
        return self.glob.matches(relative) is not self.exclude


class SearchFailed(Exception):
    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure


# -- glob ------------------------------------------------------------------------------------


async def glob(args: Any, ctx: RunContext) -> Any:
    pattern: str = args["pattern"]
    try:
        base = _search_root(ctx, args.get("path"))
        rel_pattern = _pattern_under(ctx, pattern, base)
        matcher = compile_glob(rel_pattern)
    except SearchFailed as exc:
        return exc.failure
    except GlobError as exc:
        return Failure(f"invalid glob pattern {pattern!r}: {exc}", code="invalid_pattern")
    fs = ctx.fs
    try:
        stat = await fs.stat(base)
        if stat is None or not stat.is_dir:
            what = "does not exist" if stat is None else "is a file, not a directory"
            return Failure(f"path {shown(ctx, base)} {what}.", code="bad_path")
        rg = _ripgrep_of(fs)
        if rg is not None:
            candidates = await _rg_files(rg, fs, base)
            files = await _with_mtimes(await _matching(matcher, candidates, base))
        else:
            walked = {path: st async for path, st in walk(fs, base, root_of(ctx))}
            files = [
                Found(path, walked[path].mtime_ns)
                for path in await _matching(matcher, list(walked), base)
            ]
    except SearchFailed as exc:
        return exc.failure
    except (WorktreeEscape, NotARegularFile) as exc:
        return os_failure(exc, f"path {shown(ctx, base)}", "listed")
    except OSError as exc:
        return Failure(f"glob could not list {shown(ctx, base)}: {exc}", code="os_error")
    shown_files, withheld = _withhold(ctx, files)
    shown_files.sort(key=lambda f: (-f.mtime_ns, f.path))
    total = len(shown_files)
    listed = [shown(ctx, f.path) for f in shown_files[:GLOB_LIMIT]]
    lines = listed or [f"No files match {pattern!r} under {shown(ctx, base)}."]
    if total > GLOB_LIMIT:
        lines.append(
            f"(Showing the {GLOB_LIMIT} newest of {total:,} matching files: narrow the pattern "
            "or the path to see the others.)"
        )
    lines.extend(_withheld_note(withheld))
    return "\n".join(lines)


async def _matching(matcher: Glob, paths: list[str], base: str) -> list[str]:
    """The paths whose part below ``base`` the glob matches, decided on a worker thread: each
    match is linear in its path, but a tree holds many paths."""

    def match_all() -> list[str]:
        return [path for path in paths if matcher.matches(_relative(path, base))]

    return await asyncio.get_running_loop().run_in_executor(None, match_all)


# -- grep ------------------------------------------------------------------------------------


async def grep(args: Any, ctx: RunContext) -> Any:
    pattern: str = args["pattern"]
    mode: str = args.get("output_mode", "files_with_matches")
    ignore_case: bool = args.get("case_insensitive", False)
    context: int = args.get("context", 0) if mode == "content" else 0
    head_limit: int = args.get("head_limit", 100)
    file_glob: str | None = args.get("glob")
    try:
        _check_pattern(pattern)
        base = _search_root(ctx, args.get("path"))
        file_filter = FileFilter.parse(file_glob) if file_glob else None
    except SearchFailed as exc:
        return exc.failure
    except GlobError as exc:
        return Failure(f"invalid glob {file_glob!r}: {exc}", code="invalid_pattern")
    fs = ctx.fs
    try:
        stat = await fs.stat(base)
        if stat is None:
            return Failure(f"path {shown(ctx, base)} does not exist.", code="bad_path")
        if not stat.is_dir and stat.size > MAX_SEARCH_BYTES:
            return _not_searched(ctx, base, stat.size, pattern)
        rg = _ripgrep_of(fs)
        if rg is not None and not stat.is_dir and await _binary_file(fs, base):
            return _binary_not_searched(ctx, base, pattern)  # (ripgrep searches what it is given)
        if rg is not None:
            found, truncated, too_large = await _rg_grep_tree(
                rg, fs, base, stat.is_dir, pattern, mode, ignore_case, context, file_filter
            )
            if file_filter is not None:
                passed = await _kept_by(file_filter, [f.path for f in found] + too_large, base)
                found = [f for f in found if f.path in passed]
                too_large = [path for path in too_large if path in passed]
            found = await _text_only(fs, found)
            if mode == "files_with_matches":
                found = await _with_mtimes([f.path for f in found])
        else:
            regex = _compile_re2(pattern, ignore_case)
            if isinstance(fs, LocalFileSystem):  # its reads are checked, but say why, not "none"
                await _check_root(fs, base)
            found, truncated, too_large, binary = await _seam_grep(
                fs, base, stat, root_of(ctx), regex, mode, context, file_filter
            )
            if not stat.is_dir and base in binary:
                return _binary_not_searched(ctx, base, pattern)
    except SearchFailed as exc:
        return exc.failure
    except FileTooLarge as exc:  # grown or swapped in since the size was checked
        return _not_searched(ctx, base, exc.size, pattern)
    except (WorktreeEscape, NotARegularFile) as exc:
        return os_failure(exc, f"path {shown(ctx, base)}", "searched")
    except OSError as exc:
        return Failure(f"grep could not search {shown(ctx, base)}: {exc}", code="os_error")
    kept, withheld = _withhold(ctx, found)
    text = _render(ctx, kept, mode, head_limit, pattern)
    notes = _withheld_note(withheld)
    notes.extend(_too_large_note(ctx, too_large))
    if truncated:
        notes.append("(The search stopped early: it found too much. Narrow the pattern or path.)")
    return "\n".join([text, *notes])


def _check_pattern(pattern: str) -> None:
    """A regex ripgrep can be given as an argument and RE2 can read: no NUL (``\\x00`` says
    it), no line break (a line is searched at a time), nothing that is not Unicode text (a lone
    surrogate)."""
    problem = ""
    if "\x00" in pattern:
        problem = "it contains a NUL character (write it as \\x00)"
    elif "\n" in pattern:  # each line is searched apart: ripgrep refuses it too
        problem = "it contains a line break, and a search matches within one line"
    else:
        try:
            pattern.encode("utf-8")
        except UnicodeEncodeError:
            problem = "it is not valid Unicode text (it holds a lone surrogate)"
    if problem:
        raise SearchFailed(
            Failure(f"invalid regex {pattern!r}: {problem}.", code="invalid_pattern")
        )


def _argument_safe(text: str) -> bool:
    """Whether ripgrep takes ``text`` as an argument: no NUL, and UTF-8 (its ``--glob`` refuses
    other bytes, which a lone surrogate would become)."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


async def _kept_by(file_filter: FileFilter, paths: list[str], base: str) -> set[str]:
    """The paths grep's ``glob`` filter keeps, decided on a worker thread."""

    def keep_all() -> set[str]:
        return {path for path in paths if file_filter.keeps(_relative(path, base))}

    return await asyncio.get_running_loop().run_in_executor(None, keep_all)


class FileTooLarge(Exception):
    """The file to search is larger than ``MAX_SEARCH_BYTES``."""

    def __init__(self, size: int) -> None:
        super().__init__(f"{size} bytes")
        self.size = size


def _not_searched(ctx: RunContext, path: str, size: int, pattern: str) -> str:
    if not ctx.may_read(path):  # withheld: nothing about it is shown
        return f"No matches for {pattern!r}."
    return (
        f"No matches for {pattern!r}: {shown(ctx, path)} was not searched, as it is "
        f"{size:,} bytes, over the {MAX_SEARCH_BYTES >> 20} MiB grep searches in one file "
        "(bash can search it)."
    )


def _binary_not_searched(ctx: RunContext, path: str, pattern: str) -> str:
    if not ctx.may_read(path):  # withheld: nothing about it is shown
        return f"No matches for {pattern!r}."
    return (
        f"No matches for {pattern!r}: {shown(ctx, path)} was not searched, as it is a binary "
        "file (it holds a NUL byte)."
    )


# -- what is text ------------------------------------------------------------------------------

_UTF16_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
_NUL_READ = 1 << 20  # bytes read at a time when a file is checked for a NUL
# A file up to this size is in ripgrep's first read (64 KiB) whole, where a NUL makes it skip
# the file: ripgrep's own check is then the whole check (half its buffer, to be safe).
_RG_SEES_WHOLE = 32 * 1024


def holds_nul(data: bytes) -> bool:
    """grep's binary rule: whether ``data`` holds a NUL in its text, wherever it is. A file
    that starts with a UTF-16 BOM is read as UTF-16 (a NUL is a zero code unit), as ripgrep
    transcodes it; any other file is binary with a NUL byte anywhere (UTF-32, whose BOM starts
    like UTF-16's, then holds a zero code unit, as ripgrep reads it too)."""
    scan = _NulScan()
    scan.feed(data)
    return scan.finish()


class _NulScan:
    """``holds_nul`` over a file read piece by piece: ``feed`` returns True once a NUL is seen."""

    def __init__(self) -> None:
        self.utf16: bool | None = None  # known once two bytes are in
        self.pending = b""  # bytes held back: the BOM's start, or half a code unit
        self.found = False

    def feed(self, data: bytes) -> bool:
        if self.found or not data:
            return self.found
        if self.utf16 is None:
            data = self.pending + data
            if len(data) < 2:
                self.pending = data
                return False
            self.utf16 = data[:2] in _UTF16_BOMS
            self.pending = b""
            if self.utf16:
                data = data[2:]
        if not self.utf16:
            self.found = b"\x00" in data
            return self.found
        data = self.pending + data
        whole = len(data) & ~1
        self.pending = data[whole:]
        self.found = _zero_unit(data, whole)
        return self.found

    def finish(self) -> bool:
        if self.utf16 is None:  # (fewer than two bytes)
            return self.found or b"\x00" in self.pending
        return self.found


def _zero_unit(data: bytes, end: int) -> bool:
    """Whether ``data[:end]`` (code units of two bytes) holds a zero one."""
    at = data.find(b"\x00\x00", 0, end)
    while at >= 0:
        if at % 2 == 0:
            return True
        at = data.find(b"\x00\x00", at + 1, end)
    return False


async def _text_only(fs: LocalFileSystem, found: list[Found]) -> list[Found]:
    """ripgrep's findings without the binary files (``holds_nul``): ripgrep skips a file whose
    NUL it meets in its first read (64 KiB), but reports what it matched before a later one, so
    a file larger than ``_RG_SEES_WHOLE`` is checked to its end here. A file that is gone or
    no longer a regular file is dropped, as the seam would skip it."""

    def check_all() -> list[Found]:
        kept: list[Found] = []
        for f in found:
            try:
                st = os.stat(f.path, follow_symlinks=False)
                if not stat_module.S_ISREG(st.st_mode):
                    continue
                if st.st_size <= _RG_SEES_WHOLE or not _file_holds_nul(fs, f.path):
                    kept.append(f)
            except OSError:  # (WorktreeEscape is one)
                continue
        return kept

    return await asyncio.get_running_loop().run_in_executor(None, check_all)


async def _binary_file(fs: LocalFileSystem, path: str) -> bool:
    """Whether the file ``path`` is binary (``holds_nul``), checked before ripgrep is given
    it: ripgrep searches a file it is given whatever it holds."""
    return await asyncio.get_running_loop().run_in_executor(None, _file_holds_nul, fs, path)


def _file_holds_nul(fs: LocalFileSystem, path: str) -> bool:
    fd = fs.open_regular_now(path)
    try:
        scan = _NulScan()
        left = MAX_SEARCH_BYTES + 1  # (a file grown past the bound was not searched whole)
        while left > 0:
            chunk = os.read(fd, min(_NUL_READ, left))
            if not chunk:
                break
            if scan.feed(chunk):
                return True
            left -= len(chunk)
        return scan.finish()
    finally:
        os.close(fd)


MAX_TOO_LARGE_NAMED = 10  # files skipped for their size named in a result, at most


def _too_large_note(ctx: RunContext, paths: list[str]) -> list[str]:
    """What a search of a directory says of the files it skipped for their size: how many, and
    the first ``MAX_TOO_LARGE_NAMED`` names. A file withheld from reading is not mentioned."""
    shown_paths = sorted(shown(ctx, path) for path in paths if ctx.may_read(path))
    if not shown_paths:
        return []
    count = len(shown_paths)
    names = ", ".join(shown_paths[:MAX_TOO_LARGE_NAMED])
    if count > MAX_TOO_LARGE_NAMED:
        names += f", and {count - MAX_TOO_LARGE_NAMED:,} more"
    what = "file was" if count == 1 else "files were"
    them = "it is" if count == 1 else "they are"
    return [
        f"({count:,} {what} not searched, as {them} over the {MAX_SEARCH_BYTES >> 20} MiB grep "
        f"searches in one file (bash can search {'it' if count == 1 else 'them'}): {names}.)"
    ]


def _render(ctx: RunContext, found: list[Found], mode: str, head_limit: int, pattern: str) -> str:
    if not found:
        return f"No matches for {pattern!r}."
    entries: list[str] = []
    if mode == "files_with_matches":
        found.sort(key=lambda f: (-f.mtime_ns, f.path))
        entries = [shown(ctx, f.path) for f in found]
        head = f"Found {len(found):,} file{'s' if len(found) != 1 else ''}"
    elif mode == "count":
        found.sort(key=lambda f: f.path)
        entries = [f"{shown(ctx, f.path)}:{f.count}" for f in found]
        total = sum(f.count for f in found)
        head = (
            f"Found {total:,} matching line{'s' if total != 1 else ''} in {len(found):,} "
            f"file{'s' if len(found) != 1 else ''}"
        )
    else:
        found.sort(key=lambda f: f.path)
        previous: int | None = None
        for f in found:
            name = shown(ctx, f.path)
            if entries:
                entries.append("--")
            previous = None
            for number, is_match, line in f.lines:
                if previous is not None and number > previous + 1:
                    entries.append("--")
                mark = ":" if is_match else "-"
                entries.append(f"{name}{mark}{number or '?'}{mark}{line}")
                previous = number
        head = ""
    limited = entries if head_limit == 0 else entries[:head_limit]
    body: list[str] = [head] if head else []
    size = len(head)
    shown_count = 0
    for entry in limited:
        if size + len(entry) + 1 > MAX_OUTPUT_CHARS:
            break
        body.append(entry)
        size += len(entry) + 1
        shown_count += 1
    left = len(entries) - shown_count
    if left > 0:
        body.append(
            f"({left:,} more {'lines' if mode == 'content' else 'entries'} not shown: raise "
            "head_limit, or narrow the pattern, path or glob.)"
        )
    return "\n".join(body)


def _clip(line: str, cut: bool = False) -> str:
    """A line shown in a result: at most ``MAX_MATCH_LINE`` characters, then a note of the
    rest; ``cut``: only the line's start was read (it is too long to be read whole)."""
    if cut:
        return f"{line[:MAX_MATCH_LINE]}… [the rest of this line is not shown: it is too long]"
    if len(line) <= MAX_MATCH_LINE:
        return line
    return f"{line[:MAX_MATCH_LINE]}… [{len(line) - MAX_MATCH_LINE:,} more characters]"


def _compile_re2(pattern: str, ignore_case: bool) -> Any:
    options = re2.Options()
    options.case_sensitive = not ignore_case
    options.never_nl = True  # like ripgrep: a match never spans lines
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        raise SearchFailed(
            Failure(
                f"regex parse error: {exc}; grep takes ripgrep's regex syntax.",
                code="invalid_pattern",
            )
        ) from None


# -- shared ----------------------------------------------------------------------------------


def _search_root(ctx: RunContext, path: str | None) -> str:
    return absolute(ctx, path) if path else os.path.normpath(root_of(ctx))


def _pattern_under(ctx: RunContext, pattern: str, base: str) -> str:
    """A glob pattern relative to the search root (an absolute one must lie under it)."""
    if not pattern.startswith("/"):
        return pattern
    prefix = base.rstrip("/") + "/"
    if pattern.startswith(prefix):
        return pattern[len(prefix) :]
    raise SearchFailed(
        Failure(
            f"the absolute pattern {pattern!r} is not under the search path {shown(ctx, base)}; "
            "give a pattern relative to it (e.g. '**/*.py').",
            code="invalid_pattern",
        )
    )


def _relative(path: str, base: str) -> str:
    prefix = base.rstrip("/") + "/"
    return path[len(prefix) :] if path.startswith(prefix) else os.path.basename(path)


def _ripgrep_of(fs: Any) -> str | None:
    # grep pins ripgrep to a descriptor through /proc; without it the seam route searches
    if not isinstance(fs, LocalFileSystem) or not os.path.isdir(_PROC_FD):
        return None
    return fs.ripgrep


_PROC_FD = "/proc/self/fd"


def _withhold(ctx: RunContext, found: list[Found]) -> tuple[list[Found], int]:
    kept = [f for f in found if ctx.may_read(f.path)]
    return kept, len(found) - len(kept)


def _withheld_note(withheld: int) -> list[str]:
    if not withheld:
        return []
    files = "file was" if withheld == 1 else "files were"
    return [
        f"({withheld:,} {files} withheld: a deny rule or the sensitive-file list covers "
        "reading them.)"
    ]


async def _with_mtimes(paths: list[str]) -> list[Found]:
    def stat_all() -> list[Found]:
        out: list[Found] = []
        for path in paths:
            try:
                out.append(Found(path, os.stat(path, follow_symlinks=False).st_mtime_ns))
            except OSError:
                continue  # gone since it was listed
        return out

    return await asyncio.get_running_loop().run_in_executor(None, stat_all)


# -- ripgrep ---------------------------------------------------------------------------------


async def _run_rg(
    rg: str, argv: list[str], cwd: str | None, stdin: int, lines: _JsonLines | None = None
) -> tuple[bytes, bool]:
    """ripgrep's output (at most ``MAX_RG_OUTPUT`` bytes: then it is stopped) and whether it
    was cut; given ``lines``, the output goes there instead (and ``b""`` is returned). It runs
    under ``fastgate.processes``' launcher: however the search ends (ripgrep exits, its output
    is cut, the call is cancelled), ripgrep and anything it started are ended and reaped before
    this returns."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        process = spawn([rg, *argv], cwd=cwd, stdin=stdin, stdout=out_w, stderr=err_w, grace=0)
    except BaseException:
        os.close(out_r)
        os.close(err_r)
        raise
    finally:
        os.close(out_w)
        os.close(err_w)
    output = _RgOutput(asyncio.get_running_loop(), out_r, err_r, lines)
    ended = asyncio.ensure_future(process.wait())
    try:
        await asyncio.wait((output.done, ended), return_when=asyncio.FIRST_COMPLETED)
        if output.truncated:
            await process.terminate_all(0)
        await ended  # raises OSError when ripgrep could not be started
        if not output.done.done():  # held open by a process that could not be ended
            await asyncio.wait((output.done,), timeout=_READ_GRACE)
    except BaseException:
        ended.cancel()
        await process.terminate_all(0)  # waits for the end, also when cancelled again
        raise
    finally:
        output.close()
        if lines is not None:
            lines.finish()
    code = process.returncode
    if code == 2 and not output.truncated and not output.read:
        message = bytes(output.errors).decode("utf-8", "replace").strip().removeprefix("rg: ")
        raise SearchFailed(Failure(message or "ripgrep failed", code="invalid_pattern"))
    return b"".join(output.chunks), output.truncated


_READ_GRACE = 2.0  # after ripgrep's end: how long its output may stay open
_KEEP_ERRORS = 65536  # bytes of ripgrep's stderr kept for a message


class _RgOutput:
    """ripgrep's stdout and the start of its stderr, read as they come on the running loop;
    ``done`` when both are closed, or when stdout passed ``MAX_RG_OUTPUT`` bytes kept or, given
    ``lines`` (which then takes stdout), ``MAX_RG_READ`` bytes read (``truncated``)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        out_fd: int,
        err_fd: int,
        lines: _JsonLines | None = None,
    ) -> None:
        self.loop = loop
        self.out_fd = out_fd
        self.chunks: list[bytes] = []
        self.lines = lines
        self.read = 0
        self.truncated = False
        self.errors = bytearray()
        self.done: asyncio.Future[None] = loop.create_future()
        self.open = [out_fd, err_fd]
        for fd in self.open:
            os.set_blocking(fd, False)
            loop.add_reader(fd, self._readable, fd)

    def _readable(self, fd: int) -> None:
        try:
            data = os.read(fd, 1 << 20)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._close(fd)
            if not self.open:
                self._finish()
        elif fd == self.out_fd:
            if self.truncated:
                return  # (read past the bound while ripgrep is stopped: dropped)
            self.read += len(data)
            if self.lines is None:
                self.chunks.append(data)
                full = self.read >= MAX_RG_OUTPUT
            else:
                self.lines.feed(data)
                full = self.lines.kept >= MAX_RG_OUTPUT or self.read >= MAX_RG_READ
            if full:
                self.truncated = True
                self._finish()
        elif len(self.errors) < _KEEP_ERRORS:
            self.errors += data[: _KEEP_ERRORS - len(self.errors)]

    def _finish(self) -> None:
        if not self.done.done():
            self.done.set_result(None)

    def _close(self, fd: int) -> None:
        self.loop.remove_reader(fd)
        os.close(fd)
        self.open.remove(fd)

    def close(self) -> None:
        for fd in list(self.open):
            self._close(fd)


@dataclass
class _Cut:
    """A line of ripgrep's JSON longer than ``MAX_RG_LINE`` bytes: its first ``MAX_RG_LINE``
    bytes, and the line number it states (None until seen: the stream may end first)."""

    head: bytes
    number: int | None = None
    seen: bytes = b""  # the end of what was read: where the key may begin
    digits: bytes | None = None  # what follows the key, once found


_NUMBER_KEY = b',"line_number":'  # (a '"' after a ',' is never inside a JSON string)


class _JsonLines:
    """ripgrep's ``--json`` output split into its lines as it is read, so that no line is held
    whole past ``MAX_RG_LINE`` bytes: a line up to that is kept as its bytes; of a longer one
    (a match on a huge line: ripgrep's ``--max-columns`` does not apply to its JSON), only its
    head and its line number (``_Cut``). ``kept``: the bytes held."""

    def __init__(self) -> None:
        self.lines: list[bytes | _Cut] = []
        self.kept = 0
        self._partial = bytearray()
        self._cut: _Cut | None = None

    def feed(self, data: bytes) -> None:
        start = 0
        while start < len(data):
            end = data.find(b"\n", start)
            piece = data[start:] if end < 0 else data[start:end]
            self._add(piece)
            if end < 0:
                return
            self._end_line()
            start = end + 1

    def finish(self) -> None:
        """The last line, not ended by a newline (cut short when the stream was stopped)."""
        if self._partial or self._cut is not None:
            self._end_line()

    def _add(self, piece: bytes) -> None:
        cut = self._cut
        if cut is None:
            room = MAX_RG_LINE - len(self._partial)
            if len(piece) <= room:
                self._partial += piece
                return
            self._partial += piece[:room]
            cut = self._cut = _Cut(bytes(self._partial))
            self._partial.clear()
            self._scan(cut, cut.head)
            piece = piece[room:]
        self._scan(cut, piece)

    def _scan(self, cut: _Cut, piece: bytes) -> None:
        """Looks for the line number in the next bytes of an over-long line."""
        if cut.number is not None or not piece:
            return
        if cut.digits is None:
            window = cut.seen + piece
            at = window.find(_NUMBER_KEY)
            if at < 0:
                cut.seen = window[-(len(_NUMBER_KEY) - 1) :]
                return
            cut.seen = b""
            cut.digits = b""
            piece = window[at + len(_NUMBER_KEY) :]
        digits = cut.digits + piece[:24]
        run = len(digits) - len(digits.lstrip(b"0123456789"))
        if run < len(digits):  # the number ended
            cut.number = int(digits[:run]) if 0 < run <= 20 else 0
        else:
            cut.digits = digits if len(digits) <= 20 else None
            if cut.digits is None:
                cut.number = 0  # not a number ripgrep writes: not known

    def _end_line(self) -> None:
        if self._cut is not None:
            self.lines.append(self._cut)
            self.kept += MAX_RG_LINE
            self._cut = None
        else:
            self.lines.append(bytes(self._partial))
            self.kept += len(self._partial) + 1
            self._partial.clear()


async def _rg_at(
    rg: str,
    fs: LocalFileSystem,
    base: str,
    argv: list[str],
    max_file_bytes: int | None = None,
    lines: _JsonLines | None = None,
) -> tuple[bytes, bool, Callable[[bytes], str]]:
    """ripgrep's output on ``base``, whether it was cut, and how to name a path it printed.

    ripgrep follows a root given as a symlink, so it gets the descriptor opened beneath the
    roots, not the name: a swap after this open cannot redirect it. A directory becomes its
    working directory (so the .gitignore files above it still apply: the directory is entered
    through this process's descriptor before ripgrep starts); a file becomes its stdin, read
    through ``/proc/self/fd/0`` (ripgrep reads a path it is given, never stdin then).
    ``FileTooLarge`` when ``base`` is a file larger than ``max_file_bytes`` (ripgrep's
    ``--max-filesize`` bounds only the files a walk finds, not one it is given). Given
    ``lines``, the output goes there (``_run_rg``)."""
    loop = asyncio.get_running_loop()
    fd, is_dir = await loop.run_in_executor(None, fs.open_search_root_now, base)
    if not is_dir and max_file_bytes is not None:
        try:
            size = os.fstat(fd).st_size
        except BaseException:
            os.close(fd)
            raise
        if size > max_file_bytes:
            os.close(fd)
            raise FileTooLarge(size)
    if is_dir:
        cwd, stdin, target = f"{_PROC_FD}/{fd}", DEVNULL, "."
    else:
        cwd, stdin, target = None, fd, f"{_PROC_FD}/0"
    try:
        out, truncated = await _run_rg(rg, [*argv, "--", target], cwd, stdin, lines)
    finally:
        os.close(fd)

    def logical(raw_path: bytes) -> str:
        path = os.fsdecode(raw_path)
        return base if path == target else os.path.join(base, path.removeprefix("./"))

    return out, truncated, logical


async def _rg_files(rg: str, fs: LocalFileSystem, base: str) -> list[str]:
    out, _, logical = await _rg_at(rg, fs, base, [*_RG_COMMON, "--files", "--null"])
    return [logical(p) for p in out.split(b"\x00") if p]


async def _rg_grep(
    rg: str,
    fs: LocalFileSystem,
    base: str,
    pattern: str,
    mode: str,
    ignore_case: bool,
    context: int,
    file_filter: FileFilter | None,
) -> tuple[list[Found], bool]:
    """ripgrep's findings. Its output is read so that a path is never taken for another: a
    name may hold a newline, so ``content`` comes as ripgrep's JSON (its standard output puts
    lines without a NUL, such as a binary file's warning, between a name's NUL and the next
    name) and ``count`` as ``path NUL count newline`` records read from the NUL."""
    argv = [*_RG_COMMON, f"--max-filesize={MAX_SEARCH_BYTES}"]
    if ignore_case:
        argv.append("--ignore-case")
    for glob_ in file_filter.rg_globs if file_filter is not None else ():
        argv += ["--glob", glob_]
    if mode == "files_with_matches":
        argv += ["--null", "--files-with-matches"]
    elif mode == "count":
        argv += ["--null", "--with-filename", "--count"]
    else:
        argv.append("--json")
        if context:
            argv.append(f"--context={context}")
    lines = _JsonLines() if mode == "content" else None
    out, truncated, logical = await _rg_at(
        rg, fs, base, [*argv, "--regexp", pattern], MAX_SEARCH_BYTES, lines
    )
    if mode == "files_with_matches":  # (a last name not ended by its NUL was cut short)
        return [Found(logical(p)) for p in out.split(b"\x00")[:-1] if p], truncated
    if mode == "count":
        return _rg_counts(out, logical), truncated
    assert lines is not None
    parsed = await asyncio.get_running_loop().run_in_executor(None, _rg_json, lines.lines, logical)
    return parsed, truncated


async def _rg_grep_tree(
    rg: str,
    fs: LocalFileSystem,
    base: str,
    is_dir: bool,
    pattern: str,
    mode: str,
    ignore_case: bool,
    context: int,
    file_filter: FileFilter | None,
) -> tuple[list[Found], bool, list[str]]:
    """``_rg_grep``, and for a directory the files it skipped for their size
    (``_rg_too_large``, found while the search runs)."""
    if not is_dir:
        found, truncated = await _rg_grep(
            rg, fs, base, pattern, mode, ignore_case, context, file_filter
        )
        return found, truncated, []
    sizes = asyncio.ensure_future(_rg_too_large(rg, fs, base, file_filter))
    try:
        found, truncated = await _rg_grep(
            rg, fs, base, pattern, mode, ignore_case, context, file_filter
        )
    except BaseException:
        sizes.cancel()
        await asyncio.wait((sizes,))  # its ripgrep ended and reaped
        raise
    return found, truncated, await sizes


async def _rg_too_large(
    rg: str, fs: LocalFileSystem, base: str, file_filter: FileFilter | None
) -> list[str]:
    """The files under ``base`` a search skips for their size (``--max-filesize`` skips them
    silently): of those ripgrep lists (the same walk, without that bound), the regular files
    larger than ``MAX_SEARCH_BYTES``. Empty when the list was cut (a tree that large is not
    told apart) or could not be made."""
    argv = [*_RG_COMMON, "--files", "--null"]
    for glob_ in file_filter.rg_globs if file_filter is not None else ():
        argv += ["--glob", glob_]
    try:
        out, cut, logical = await _rg_at(rg, fs, base, argv)
    except (OSError, SearchFailed):  # (the search itself says what failed)
        return []
    if cut:
        return []
    listed = [logical(p) for p in out.split(b"\x00") if p]

    def too_large() -> list[str]:
        large: list[str] = []
        for path in listed:
            try:
                st = os.stat(path, follow_symlinks=False)
            except OSError:
                continue  # gone since it was listed
            if stat_module.S_ISREG(st.st_mode) and st.st_size > MAX_SEARCH_BYTES:
                large.append(path)
        return large

    return await asyncio.get_running_loop().run_in_executor(None, too_large)


def _rg_counts(out: bytes, logical: Callable[[bytes], str]) -> list[Found]:
    """``--count --null`` output: each NUL ends a name, the digits after it end with a
    newline, and the next name follows. Anything else (a record cut short) ends the list."""
    found: list[Found] = []
    pieces = out.split(b"\x00")
    path = pieces[0]
    for piece in pieces[1:]:
        count, newline, following = piece.partition(b"\n")
        if not newline or not count.isdigit():
            break
        found.append(Found(logical(path), count=int(count)))
        path = following
    return found


def _rg_json(out: list[bytes | _Cut], logical: Callable[[bytes], str]) -> list[Found]:
    """``--json`` output, a message a line (``_JsonLines``); the ``match`` and ``context`` ones
    carry the path, the line number and the line (as text, or base64 bytes when not UTF-8),
    which is clipped (``_clip``). A line that does not parse (the last one, cut short) is
    skipped; of an over-long one, what its head holds is shown, said to be cut."""
    found: dict[str, Found] = {}
    for raw in out:
        try:
            if isinstance(raw, _Cut):
                kind, raw_path, line = _cut_message(raw)
                number = raw.number or 0
            else:
                message = json.loads(raw)
                kind = message["type"]
                if kind not in ("match", "context"):
                    continue
                data = message["data"]
                raw_path = _rg_bytes(data["path"])
                number = int(data["line_number"])
                line = _clip(_rg_line(data["lines"]))
            path = logical(raw_path)
        except (ValueError, KeyError, TypeError):
            continue
        entry = found.get(path)
        if entry is None:
            entry = found[path] = Found(path)
        is_match = kind == "match"
        entry.lines.append((number, is_match, line))
        entry.count += is_match
    return list(found.values())


def _rg_line(field: Any) -> str:
    line = _rg_bytes(field).decode("utf-8", "replace")
    return line.removesuffix("\n").removesuffix("\r")


_CUT_HEAD = re.compile(r'\{"type":"(match|context)","data":\{"path":')
_CUT_LINE = re.compile(r',"lines":\{"(text|bytes)":"')
_JSON_STRING_PART = re.compile(r'(?:[^"\\]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*')
_BASE64_PART = re.compile(r"[A-Za-z0-9+/]*")


def _cut_message(cut: _Cut) -> tuple[str, bytes, str]:
    """The kind, path and clipped line of a ``match`` or ``context`` message of which only the
    head was kept: ripgrep writes the path, then the line, then the line number."""
    head = cut.head.decode("utf-8", "ignore")  # (only its end can split a character)
    start = _CUT_HEAD.match(head)
    if start is None:
        raise ValueError("not a match")
    path, at = json.JSONDecoder().raw_decode(head, start.end())
    lines = _CUT_LINE.match(head, at)
    if lines is None:
        raise ValueError("no line")
    if lines.group(1) == "text":
        part = _JSON_STRING_PART.match(head, lines.end())
        assert part is not None  # (it matches the empty string)
        text = json.loads(f'"{part.group()}"')
        if text and "\ud800" <= text[-1] <= "\udbff":
            text = text[:-1]  # the first half of a pair cut in two
        text = text.encode("utf-8", "replace").decode("utf-8")
    else:
        part = _BASE64_PART.match(head, lines.end())
        assert part is not None
        encoded = part.group()
        text = base64.b64decode(encoded[: len(encoded) // 4 * 4]).decode("utf-8", "replace")
    return start.group(1), _rg_bytes(path), _clip(text, cut=True)


def _rg_bytes(field: Any) -> bytes:
    """A JSON ``{"text": ...}`` or ``{"bytes": base64}`` as the bytes it stands for."""
    if "bytes" in field:
        return base64.b64decode(field["bytes"], validate=True)
    return os.fsencode(field["text"])


async def _check_root(fs: LocalFileSystem, base: str) -> None:
    fd, _ = await asyncio.get_running_loop().run_in_executor(None, fs.open_search_root_now, base)
    os.close(fd)


# -- over the seam -----------------------------------------------------------------------------


async def walk(fs: Any, base: str, workspace: str) -> AsyncIterator[tuple[str, FileStat]]:
    """Every file under ``base`` a search looks at, through ``fs`` alone: hidden files too,
    never ``.git``, nothing a ``.gitignore`` excludes, no symlink followed, no FIFO, socket or
    device (``FileStat.is_special``)."""
    ignores = await _parent_ignores(fs, base, workspace)
    stack: list[tuple[str, list[tuple[str, pathspec.GitIgnoreSpec]]]] = [(base, ignores)]
    visited = 0
    while stack:
        directory, specs = stack.pop()
        try:
            names = await fs.list_dir(directory)
        except OSError:
            continue
        if ".gitignore" in names:
            spec = await _ignore_file(fs, os.path.join(directory, ".gitignore"))
            if spec is not None:
                specs = [*specs, (directory, spec)]
        subdirs: list[str] = []
        for name in sorted(names):
            if name == ".git":
                continue
            visited += 1
            if visited > MAX_WALK:
                raise SearchFailed(
                    Failure(
                        f"the search visited {MAX_WALK:,} entries and stopped; give a narrower "
                        "path.",
                        code="too_many_files",
                    )
                )
            path = os.path.join(directory, name)
            try:
                st = await fs.stat(path)
            except OSError:
                continue
            if st is None or st.is_symlink or st.is_special or _ignored(specs, path, st.is_dir):
                continue  # a FIFO, socket or device is never opened (nor by ripgrep)
            if st.is_dir:
                subdirs.append(path)
            else:
                yield path, st
        stack.extend((d, specs) for d in reversed(subdirs))


async def _parent_ignores(
    fs: Any, base: str, workspace: str
) -> list[tuple[str, pathspec.GitIgnoreSpec]]:
    """The ``.gitignore`` files from the workspace root down to (not including) ``base``."""
    specs: list[tuple[str, pathspec.GitIgnoreSpec]] = []
    for directory in _ancestors(base, workspace):
        spec = await _ignore_file(fs, os.path.join(directory, ".gitignore"))
        if spec is not None:
            specs.append((directory, spec))
    return specs


def _ancestors(base: str, workspace: str) -> list[str]:
    """The directories from the workspace root down to ``base``'s parent (none outside it)."""
    root = os.path.normpath(workspace)
    if base == root or not base.startswith(root.rstrip("/") + "/"):
        return []
    chain: list[str] = []
    current = os.path.dirname(base)
    while current == root or current.startswith(root.rstrip("/") + "/"):
        chain.append(current)
        if current == root:
            break
        current = os.path.dirname(current)
    return chain[::-1]


async def _ignore_file(fs: Any, path: str) -> pathspec.GitIgnoreSpec | None:
    try:
        st = await fs.stat(path)
        if st is None or st.is_dir or st.size > 1 << 20:
            return None
        data = await fs.read_bytes(path)
    except OSError:
        return None
    return pathspec.GitIgnoreSpec.from_lines(data.decode("utf-8", "replace").splitlines())


def _ignored(specs: list[tuple[str, pathspec.GitIgnoreSpec]], path: str, is_dir: bool) -> bool:
    """ripgrep's answer: the deepest ``.gitignore`` with a pattern matching the path itself
    decides, by the last such pattern. A pattern that matches only a directory above the path
    does not count: the walk never enters an ignored directory, so this matters only below a
    search path named explicitly, which ripgrep searches even when it is ignored."""
    for directory, spec in reversed(specs):
        relative = path[len(directory.rstrip("/")) + 1 :]
        verdict = _own_verdict(spec, relative + "/" if is_dir else relative)
        if verdict is not None:
            return verdict
    return False


def _own_verdict(spec: pathspec.GitIgnoreSpec, relative: str) -> bool | None:
    """Whether the last pattern of ``spec`` matching ``relative`` itself ignores it; None when
    none does. ``pathspec`` matches a directory pattern (``build/``, or ``build`` naming a
    directory) on everything below that directory too, marking the slash after the directory
    (``_DIR_MARK``): a match through that mark counts only when the mark can be the end of
    ``relative`` (a directory's path ends with its slash); otherwise it is a match of a
    directory above, not of ``relative``."""
    verdict: bool | None = None
    for pattern in spec.patterns:
        regex = pattern.regex
        if pattern.include is None or regex is None:
            continue
        match = regex.search(relative)
        if match is None:
            continue
        if (
            _DIR_MARK in regex.groupindex
            and match.group(_DIR_MARK) is not None
            and _ending_at_the_end(regex).search(relative) is None
        ):
            continue
        verdict = bool(pattern.include)
    return verdict


_DIR_MARK = "ps_d"  # the group pathspec's gitignore patterns give a directory's closing slash


@functools.lru_cache(maxsize=4096)
def _ending_at_the_end(regex: re.Pattern[str]) -> re.Pattern[str]:
    """``regex``, matching only where a match ends at the end of the text."""
    return re.compile(f"(?:{regex.pattern})\\Z", regex.flags)


async def _seam_grep(
    fs: Any,
    base: str,
    base_stat: FileStat,
    workspace: str,
    regex: Any,
    mode: str,
    context: int,
    file_filter: FileFilter | None,
) -> tuple[list[Found], bool, list[str], list[str]]:
    """What the search found, whether it stopped early (never), the files it skipped for
    their size, and those it skipped as binary."""
    found: list[Found] = []
    too_large: list[str] = []
    binary: list[str] = []
    if base_stat.is_dir:
        files = walk(fs, base, workspace)
    else:
        files = _single(base, base_stat)
    async for path, st in files:
        if file_filter is not None and not file_filter.keeps(_relative(path, base)):
            continue
        if st.size > MAX_SEARCH_BYTES:
            too_large.append(path)
            continue
        try:
            data = await fs.read_bytes(path)
        except OSError:
            continue
        hit = await asyncio.get_running_loop().run_in_executor(
            None, _search_text, path, st, data, regex, mode, context
        )
        if hit is _BINARY:
            binary.append(path)
        elif isinstance(hit, Found):
            found.append(hit)
    return found, False, too_large, binary


_BINARY = object()  # what _search_text answers for a binary file


async def _single(path: str, st: FileStat) -> AsyncIterator[tuple[str, FileStat]]:
    yield path, st


def _search_text(
    path: str, st: FileStat, data: bytes, regex: Any, mode: str, context: int
) -> object:
    """The file's ``Found``, ``_BINARY``, or None (no match)."""
    if holds_nul(data):
        return _BINARY
    try:
        text, _ = decode(data)
    except BinaryFile:
        return _BINARY
    except UndecodableFile:  # what ripgrep does too: each bad sequence stands as U+FFFD
        encoding = sniff(data)
        codec, bom = (encoding.codec, encoding.bom) if encoding is not None else ("utf-8", b"")
        text = data[len(bom) :].decode(codec, "replace")
    if regex.search(text) is None:
        return None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    matching = [i for i, line in enumerate(lines) if regex.search(line.rstrip("\r"))]
    if not matching:
        return None
    result = Found(path, st.mtime_ns, len(matching))
    if mode == "content":
        wanted: dict[int, bool] = {}
        for i in matching:
            for j in range(max(0, i - context), min(len(lines), i + context + 1)):
                wanted.setdefault(j, False)
            wanted[i] = True
        result.lines = [(j + 1, wanted[j], _clip(lines[j].rstrip("\r"))) for j in sorted(wanted)]
    return result
