"""What unpacking writes: an archive's extraction (``tar -x``, ``unzip``, ``7z x``, ``unrar
x``, ``pax -r``, ``dpkg-deb -x``, ...) writes files its contents name, and a decompressor
(``gunzip F.gz``, ``xz -d``, ``zstd -d``, ...) writes its operand's name without the suffix
(``.mcp.json.gz`` becomes ``.mcp.json``), or the name stored in the file (``gzip -dN``).

A name the words determine is a written word like any other; names only the contents know
become one word known only when the command runs, below the directory they land in: at least
ASK in every mode.
"""

from __future__ import annotations

import os
import re

from fastgate.permissions.arguments import (
    operand_words,
    option_values,
    short_letters,
    unknown_below,
)
from fastgate.permissions.shell import Word


def unpacked_words(name: str, args: tuple[Word, ...]) -> list[Word]:
    """The files an extraction or a decompression by ``name`` (a basename) writes."""
    return _extracted(name, args) + _decompressed(name, args) + _decoded(name, args)


def _decoded(name: str, args: tuple[Word, ...]) -> list[Word]:
    """``uudecode`` writes the file its input's ``begin`` line names, unless ``-o`` names it."""
    if name != "uudecode" or option_values(args, ("-o", "--output-file")):
        return []
    shown = "the file uudecode's input names"
    return [unknown_below(".", shown)]


# Archive extractors: the files they write are the archive's entries, named by its contents,
# not by any word (a ``.claude/settings.json`` or ``.git/hooks/pre-commit`` inside it).
_TARS = frozenset({"tar", "gtar", "bsdtar"})
_SEVEN_ZIPS = frozenset({"7z", "7za", "7zr", "7zz"})
_PYTHONS = re.compile(r"python(?:3(?:\.[0-9]+)?)?")
# unzip's listing, testing and printing options: nothing is written.
_UNZIP_WRITES_NOTHING = frozenset({"-l", "-t", "-v", "-z", "-Z", "-p", "-c"})


def _extracted(name: str, args: tuple[Word, ...]) -> list[Word]:
    """For a command extracting an archive, one word standing for the files it writes: known
    only when it runs, below its destination directory (so a protected path may be among
    them, and the call is at least ASK in every mode)."""
    where = _extraction_directory(name, args)
    if where is None:
        return []
    shown = f"the archive's files under {where.value}"
    return [unknown_below(where.value, shown)]


def _extraction_directory(name: str, args: tuple[Word, ...]) -> Word | None:
    here = Word(".", ".")
    values = [w.value for w in args]
    if name in _TARS:
        first = values[0] if values else ""
        bundled = first if first[:1] not in ("-", "") else ""  # ``tar xzf a.tgz``
        clusters = [short_letters(v) for v in values]
        extracting = (
            "x" in bundled
            or any(v in ("--extract", "--get") for v in values)
            or any("x" in c for c in clusters)
        )
        to_stdout = (
            "O" in bundled or "--to-stdout" in values or any("O" in cluster for cluster in clusters)
        )
        if not extracting or to_stdout:
            return None
        found = option_values(args, ("-C", "--directory"))
        return found[-1] if found else here
    if name == "unzip":
        if any(v in _UNZIP_WRITES_NOTHING for v in values):
            return None
        found = option_values(args, ("-d",))
        return found[-1] if found else here
    if name in _SEVEN_ZIPS:
        operands = operand_words(args)
        if not operands or operands[0].value not in ("x", "e"):
            return None
        out = [Word(w.value[2:], w.raw, w.dynamic) for w in args if w.value.startswith("-o")]
        return out[-1] if out else here
    if name == "cpio":
        extracting = any(v in ("-i", "--extract") or "i" in short_letters(v) for v in values)
        passing = any(  # ``find . | cpio -pdm DIR``: the names come from its input
            v == "--pass-through" or "p" in short_letters(v) for v in values
        )
        if passing:
            operands = operand_words(args)
            return operands[-1] if operands else here
        if not extracting:
            return None
        found = option_values(args, ("-D", "--directory"))
        return found[-1] if found else here
    if name in ("jar", "ar"):
        first = values[0] if values else ""
        return here if "x" in first.lstrip("-") else None
    if name in _OTHER_EXTRACTORS:
        return _other_extraction(name, args)
    if _PYTHONS.fullmatch(name):
        for index in range(len(values) - 2):
            if values[index] == "-m" and values[index + 1] in ("zipfile", "tarfile"):
                rest = args[index + 2 :]
                if not rest or rest[0].value not in ("-e", "--extract"):
                    return None
                operands = operand_words(rest[1:])
                return operands[1] if len(operands) > 1 else here
    return None


_OTHER_EXTRACTORS = frozenset(
    {"unrar", "rar", "unar", "cabextract", "pax", "dpkg-deb", "dpkg", "lha", "lhasa", "arj",
     "unsquashfs"}
)  # fmt: skip
_DEB_EXTRACTS = frozenset({"-x", "--extract", "-X", "--vextract", "-R", "--raw-extract"})


def _other_extraction(name: str, args: tuple[Word, ...]) -> Word | None:
    here = Word(".", ".")
    values = [w.value for w in args]
    operands = operand_words(args)
    first = operands[0].value if operands else ""
    if name in ("unrar", "rar", "arj"):  # ``unrar x a.rar [DIR/]``, ``arj e a.arj``
        if first not in ("x", "e"):
            return None
        return operands[2] if len(operands) > 2 else here
    if name == "unar":
        found = option_values(args, ("-o", "-output-directory", "--output-directory"))
        return found[-1] if found else here
    if name == "cabextract":
        if any(v in ("-l", "--list", "-t", "--test", "-p", "--pipe") for v in values):
            return None
        found = option_values(args, ("-d", "--directory"))
        return found[-1] if found else here
    if name == "pax":  # ``-r`` reads an archive into place; ``-rw`` copies trees
        reading = any("r" in short_letters(v) for v in values)
        if not reading:
            return None
        copying = any("w" in short_letters(v) for v in values)
        return operands[-1] if copying and operands else here
    if name in ("dpkg-deb", "dpkg"):  # ``dpkg-deb -x PKG DIR``
        if not any(v in _DEB_EXTRACTS for v in values):
            return None
        return operands[1] if len(operands) > 1 else here
    if name in ("lha", "lhasa"):
        letters = first.lstrip("-")
        return here if "x" in letters[:1] or "e" in letters[:1] else None
    # unsquashfs: into ``-d DIR`` (``squashfs-root`` when none), unless only listing
    if any(v in ("-l", "-ll", "-lls", "-ls", "-s", "-stat", "-cat") for v in values):
        return None
    found = option_values(args, ("-d", "-dest"))
    return found[-1] if found else Word("squashfs-root", "squashfs-root")


# Decompressors: each program's suffixes and the name the file gets without them.
_GZIP_SUFFIXES = (
    (".gz", ""), ("-gz", ""), (".z", ""), ("-z", ""), ("_z", ""), (".tgz", ".tar"), (".taz", ".tar")
)  # fmt: skip
_SUFFIXES: dict[str, tuple[tuple[str, str], ...]] = {
    "gzip": _GZIP_SUFFIXES,
    "pigz": (*_GZIP_SUFFIXES, (".zz", "")),
    "bzip2": ((".bz2", ""), (".bz", ""), (".tbz2", ".tar"), (".tbz", ".tar")),
    "pbzip2": ((".bz2", ""), (".bz", ""), (".tbz2", ".tar"), (".tbz", ".tar")),
    "xz": ((".xz", ""), (".lzma", ""), (".txz", ".tar"), (".tlz", ".tar")),
    "lzma": ((".lzma", ""), (".tlz", ".tar")),
    "zstd": ((".zst", ""), (".zstd", ""), (".tzst", ".tar")),
    "lz4": ((".lz4", ""),),
    "brotli": ((".br", ""),),
    "lzip": ((".lz", ""), (".tlz", ".tar")),
    "compress": ((".Z", ""), (".taz", ".tar")),
}
# Programs that always decompress, under the compressor they stand for.
_UNPACKERS = {
    "gunzip": "gzip",
    "unpigz": "pigz",
    "bunzip2": "bzip2",
    "unxz": "xz",
    "unlzma": "lzma",
    "unzstd": "zstd",
    "unlz4": "lz4",
    "unbrotli": "brotli",
    "lunzip": "lzip",
    "uncompress": "compress",
}
_TO_STANDARD_OUTPUT = frozenset({"--stdout", "--to-stdout", "--test", "--list"})


def _decompressed(name: str, args: tuple[Word, ...]) -> list[Word]:
    """A decompression's output: each operand without its suffix, beside it (``-o F`` names
    it instead; standard output, testing and listing write nothing); the name stored in a
    gzip file (``-N``) or every file below a directory (``-r``) is known only when it runs."""
    program = _UNPACKERS.get(name, name)
    suffixes = _SUFFIXES.get(program)
    if suffixes is None:
        return []
    values = [w.value for w in args if not w.dynamic]
    clusters = [short_letters(v) for v in values]
    decompressing = (
        name in _UNPACKERS
        or any(v in ("--decompress", "--uncompress") for v in values)
        or any("d" in c for c in clusters)
    )
    if not decompressing:
        return []
    if any(v in _TO_STANDARD_OUTPUT for v in values) or any(
        letter in c for c in clusters for letter in "ctl"
    ):
        return []
    if option_values(args, ("-o", "--output")):
        return []  # one file the words name (seen as any option value)
    custom = option_values(args, ("-S", "--suffix"))
    endings = (*suffixes, *((w.value, "") for w in custom if w.value))
    stored = any(v == "--name" for v in values) or any("N" in c for c in clusters)
    recursive = any(v == "--recursive" for v in values) or any("r" in c for c in clusters)
    out: list[Word] = []
    for word in operand_words(args):
        if word.dynamic or stored or recursive:
            where = word.value if recursive else os.path.dirname(word.value) or "."
            shown = f"the files {name} restores under {where}, named by their contents"
            return [unknown_below(where, shown)]
        for ending, replacement in endings:  # compared as gzip may: without case
            if word.value.lower().endswith(ending.lower()) and len(word.value) > len(ending):
                value = word.value[: -len(ending)] + replacement
                out.append(Word(value, word.raw, word.dynamic))
    return out
