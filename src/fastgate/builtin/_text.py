"""Bytes to text and back without losing a byte: BOM, encoding, line endings, final newline.

A file is text when it is UTF-8 (with or without a BOM) or UTF-16/UTF-32 with a BOM; anything
else is binary (a NUL byte in its first 8 KiB, git's rule) or undecodable, and the tools say so
rather than guess (a wrong guess rewrites every byte). Decoding is strict, so encoding the
decoded text again gives back the very same bytes: writers change only what they change.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass

_BOMS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),  # before UTF-16 LE: its BOM starts with that one's
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
BINARY_PROBE = 8192


class BinaryFile(ValueError):
    """The bytes are not text (a NUL byte near the start)."""


class UndecodableFile(ValueError):
    """The bytes are neither UTF-8 nor a Unicode encoding announced by a BOM."""

    def __init__(self, position: int, codec: str) -> None:
        super().__init__(f"not valid {codec.upper()} at byte {position}")
        self.position = position
        self.codec = codec


class UnencodableText(ValueError):
    """Text the file's encoding cannot hold (a lone surrogate, for instance)."""


@dataclass(frozen=True, slots=True)
class Encoding:
    """How a file's text is stored: its BOM (``b""`` for none) and codec."""

    bom: bytes = b""
    codec: str = "utf-8"

    def encode(self, text: str) -> bytes:
        try:
            return self.bom + text.encode(self.codec)
        except UnicodeEncodeError as exc:
            bad = repr(exc.object[exc.start : exc.end])
            raise UnencodableText(
                f"the text contains {bad}, which {self.codec.upper()} cannot store"
            ) from None

    @property
    def label(self) -> str:
        return self.codec.upper() + (" with BOM" if self.bom else "")


PLAIN_UTF8 = Encoding()


def sniff(data: bytes) -> Encoding | None:
    """The encoding a BOM announces, else None."""
    for bom, codec in _BOMS:
        if data.startswith(bom):
            return Encoding(bom, codec)
    return None


def decode(data: bytes) -> tuple[str, Encoding]:
    """(text, encoding) of a text file; ``BinaryFile`` or ``UndecodableFile`` otherwise."""
    announced = sniff(data)
    encoding = announced or PLAIN_UTF8
    if announced is None and b"\x00" in data[:BINARY_PROBE]:
        raise BinaryFile("a NUL byte in its first 8 KiB")
    body = memoryview(data)[len(encoding.bom) :]
    try:
        return codecs.decode(body, encoding.codec), encoding
    except UnicodeDecodeError as exc:
        raise UndecodableFile(exc.start + len(encoding.bom), encoding.codec) from None


def newline_of(text: str) -> str:
    """The file's line ending: CRLF when most of its line breaks are CRLF, else LF."""
    breaks = text.count("\n")
    if not breaks:
        return "\n"
    crlf = text.count("\r\n")
    return "\r\n" if crlf * 2 > breaks else "\n"


def split_lines(text: str) -> list[str]:
    """The lines of ``text``, each with its own line break (the last may have none)."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def line_body(line: str) -> str:
    """A line without its line break (``\\n`` or ``\\r\\n``)."""
    if line.endswith("\n"):
        line = line[:-1]
        if line.endswith("\r"):
            line = line[:-1]
    return line


def line_break(line: str) -> str:
    if line.endswith("\r\n"):
        return "\r\n"
    return "\n" if line.endswith("\n") else ""
