"""Translate an ECMA-262 regular expression (JSON Schema ``pattern``) to Python's ``re``.

Only constructs whose meaning is the same in both engines are translated; anything else raises
``ValueError`` (the compiler turns it into a ``SchemaError``) rather than matching differently.
Differences handled: ``\\d \\w \\s`` and ``\\b`` are ASCII/ECMA sets, ``.`` excludes every line
terminator, ``$`` matches only at the very end, ``(?<name>`` and ``\\k<name>`` are renamed.
"""

from __future__ import annotations

import re

_ECMA_SPACE = (
    " \\t\\n\\x0b\\x0c\\r\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff"
)
_CLASS_ESCAPES = {"d": "0-9", "w": "a-zA-Z0-9_", "s": _ECMA_SPACE}
_ATOM_ESCAPES = {
    "d": "[0-9]",
    "D": "[^0-9]",
    "w": "[a-zA-Z0-9_]",
    "W": "[^a-zA-Z0-9_]",
    "s": f"[{_ECMA_SPACE}]",
    "S": f"[^{_ECMA_SPACE}]",
    "b": "\\b",
    "B": "\\B",
}
_SAME_ESCAPES = set("tnrvf")
_QUANTIFIERS = set("*+?}")


def translate(source: str) -> str:
    """The Python ``re`` spelling of ``source``; ValueError when it cannot be faithful."""
    out: list[str] = []
    i = 0
    n = len(source)
    while i < n:
        c = source[i]
        if c == "\\":
            text, i = _escape(source, i + 1, in_class=False)
            out.append(text)
            continue
        if c == "[":
            text, i = _char_class(source, i + 1)
            out.append(text)
            continue
        if c == "(":
            text, i = _group_open(source, i + 1)
            out.append(text)
            continue
        if c == ".":
            out.append("[^\\n\\r\\u2028\\u2029]")
        elif c == "$":
            out.append("\\Z")
        else:
            out.append(c)
        # ECMA has no possessive quantifiers; Python 3.11 would read "a*+" as one.
        if c in _QUANTIFIERS and i + 1 < n and source[i + 1] == "+":
            raise ValueError("possessive quantifiers do not exist in ECMA-262")
        i += 1
    return "".join(out)


def compile_pattern(source: str) -> re.Pattern[str]:
    # re.ASCII makes \b and \B ASCII word boundaries, as in ECMA-262; the classes are explicit.
    return re.compile(translate(source), re.ASCII)


def _escape(source: str, i: int, *, in_class: bool) -> tuple[str, int]:
    if i >= len(source):
        raise ValueError("pattern ends with a lone backslash")
    c = source[i]
    if in_class and c in _CLASS_ESCAPES:
        return _CLASS_ESCAPES[c], i + 1
    if in_class and c in "DWS":
        raise ValueError(f"\\{c} inside a character class has no faithful translation")
    if in_class and c == "b":
        return "\\x08", i + 1
    if not in_class and c in _ATOM_ESCAPES:
        return _ATOM_ESCAPES[c], i + 1
    if c in _SAME_ESCAPES:
        return "\\" + c, i + 1
    if c == "0" and not (i + 1 < len(source) and source[i + 1].isdigit()):
        return "\\x00", i + 1
    if c.isdigit() and not in_class:
        j = i
        while j < len(source) and source[j].isdigit():
            j += 1
        return "\\" + source[i:j], j
    if c == "c" and i + 1 < len(source) and source[i + 1].isalpha():
        return f"\\x{ord(source[i + 1]) % 32:02x}", i + 2
    if c == "x" and re.fullmatch(r"[0-9a-fA-F]{2}", source[i + 1 : i + 3]):
        return "\\x" + source[i + 1 : i + 3], i + 3
    if c == "u":
        if re.fullmatch(r"[0-9a-fA-F]{4}", source[i + 1 : i + 5]):
            return "\\u" + source[i + 1 : i + 5], i + 5
        braced = re.match(r"\{([0-9a-fA-F]{1,6})\}", source[i + 1 :])
        if braced:
            return f"\\U{int(braced.group(1), 16):08x}", i + 1 + braced.end()
        raise ValueError("malformed \\u escape")
    if c == "k" and not in_class:
        named = re.match(r"<([A-Za-z_][A-Za-z0-9_]*)>", source[i + 1 :])
        if named:
            return f"(?P={named.group(1)})", i + 1 + named.end()
        raise ValueError("malformed \\k<name> back-reference")
    if c.isalnum():
        raise ValueError(f"\\{c} has no faithful Python translation")
    return "\\" + c, i + 1


def _char_class(source: str, i: int) -> tuple[str, int]:
    n = len(source)
    negated = i < n and source[i] == "^"
    if negated:
        i += 1
    if i < n and source[i] == "]":
        # ECMA "[]" matches nothing and "[^]" matches anything; Python reads both differently.
        return ("[\\s\\S]" if negated else "(?!)"), i + 1
    parts: list[str] = []
    while True:
        if i >= n:
            raise ValueError("unterminated character class")
        c = source[i]
        if c == "]":
            break
        if c == "\\":
            text, i = _escape(source, i + 1, in_class=True)
            parts.append(text)
            continue
        if c in "[&~|^":
            parts.append("\\" + c)  # literal in ECMA; Python may read a set operation
        elif c == "-" and parts and parts[-1] == "-":
            parts.append("\\-")
        else:
            parts.append(c)
        i += 1
    return "[" + ("^" if negated else "") + "".join(parts) + "]", i + 1


def _group_open(source: str, i: int) -> tuple[str, int]:
    if i >= len(source) or source[i] != "?":
        return "(", i
    rest = source[i + 1 : i + 3]
    if rest[:1] in (":", "=", "!"):
        return "(?" + rest[:1], i + 2
    if rest in ("<=", "<!"):
        return "(?" + rest, i + 3
    named = re.match(r"<([A-Za-z_][A-Za-z0-9_]*)>", source[i + 1 :])
    if named:
        return f"(?P<{named.group(1)}>", i + 1 + named.end()
    raise ValueError("unsupported group syntax")
