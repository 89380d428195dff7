"""Text an MCP server controls (its stderr, its error messages, what it wrote instead of
JSON-RPC), made safe to put in a log line or in ``status()``: every control or format character
(terminal escape sequences, BEL, carriage returns and line breaks, bidi overrides, zero-width
characters) is written as an escape, so what an operator reads is what the server sent and
nothing reaches the terminal as a command. Ordinary text, tabs included, is kept as it is."""

from __future__ import annotations

import unicodedata
from typing import Final

_UNPRINTABLE: Final = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})
_SHORT: Final = {"\n": "\\n", "\r": "\\r"}


def printable(text: str) -> str:
    """``text`` with every control or format character but the tab escaped (``\\x1b``,
    ``\\r``, ``\\n``, ``\\u202e``)."""
    if text.isprintable():  # the common case: nothing to escape, and quick
        return text
    return "".join(_escape(ch) for ch in text)


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
