"""Text an MCP server controls (its stderr, its error messages, what it wrote instead of
JSON-RPC), made safe to put in a log line or in ``status()``: every control or format character
(terminal escape sequences, BEL, carriage returns and line breaks, bidi overrides, zero-width
characters) is written as an escape, so what an operator reads is what the server sent and
nothing reaches the terminal as a command. Ordinary text, tabs included, is kept as it is.
``shown`` also cuts it to a length (a server's error message may be megabytes long: it would
otherwise be kept, escaped character by character on the event loop and logged whole)."""

from __future__ import annotations

import unicodedata
from typing import Final

_UNPRINTABLE: Final = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})
SHOWN_CHARS: Final = 4_000  # of a text of the server's in status() and logs (before escaping)
_SHORT: Final = {"\n": "\\n", "\r": "\\r"}


def printable(text: str) -> str:
    """``text`` with every control or format character but the tab escaped (``\\x1b``,
    ``\\r``, ``\\n``, ``\\u202e``)."""
    if text.isprintable():  # the common case: nothing to escape, and quick
        return text
    return "".join(_escape(ch) for ch in text)


def shown(text: str, limit: int = SHOWN_CHARS) -> str:
    """``printable(text)`` of at most about ``limit`` characters of ``text``: its head and its
    tail (where a stderr tail is), with a marker saying how much was cut between them."""
    if len(text) > limit:
        head = limit * 2 // 3
        tail = limit - head
        text = f"{text[:head]}[... {len(text) - limit} characters cut ...]{text[-tail:]}"
    return printable(text)


def _escape(ch: str) -> str:
    if ch == "\t" or unicodedata.category(ch) not in _UNPRINTABLE:
        return ch
    short = _SHORT.get(ch)
    if short is not None:
        return short
    code = ord(ch)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"
