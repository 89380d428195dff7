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


# -- character runs: the patterns a plain scan decides -------------------------------------------

#: One run: a table of 129 bytes (index ``ord(c)`` for ASCII, index 128 for every other
#: character; non-zero where allowed), the least and the most characters (-1: no limit).
Run = tuple[bytes, int, int]
_ANY_OTHER = 128  # the table index standing for every character beyond ASCII
_DIGITS = frozenset(range(ord("0"), ord("9") + 1))
_WORD = _DIGITS | frozenset(ord(c) for c in "_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_ALL_ASCII = frozenset(range(128))
# Escapes that stand for a set (the negated ones allow every non-ASCII character too).
_SET_ESCAPES = {
    "d": (_DIGITS, False),
    "w": (_WORD, False),
    "D": (_ALL_ASCII - _DIGITS, True),
    "W": (_ALL_ASCII - _WORD, True),
}
_PUNCTUATION = frozenset("\\^$.|?*+()[]{}/-")  # escaped, each stands for itself
_SPECIAL = frozenset("\\^$.|?*+()[]{}")  # unescaped, none is a plain character
_BOUNDED = re.compile(r"\{([0-9]+)(,([0-9]*))?\}")  # ASCII digits, as re reads a quantifier


def char_runs(source: str) -> tuple[Run, ...] | None:
    """``^...$`` made only of characters, classes and ``\\d \\w \\D \\W``, each with a greedy
    quantifier, as runs a left-to-right scan decides exactly; None for any other pattern.

    The scan takes as many characters as each run allows. That is exact when a run of variable
    length shares no character with the runs that could take the next character: those after
    it up to the first that needs at least one. A match that ended the run earlier would leave
    that run's next character to one of them. ASCII only, bar the negated sets.
    """
    if len(source) < 2 or source[0] != "^":
        return None
    atoms: list[tuple[frozenset[int], bool, int, int]] = []
    i, n = 1, len(source)
    while i < n:
        c = source[i]
        if c == "$":
            if i != n - 1:
                return None
            return _runs(atoms)
        if c == "[":
            found = _class_codes(source, i + 1)
        elif c == "\\":
            found = _escape_codes(source, i + 1)
        elif c in _SPECIAL or ord(c) >= _ANY_OTHER:
            return None
        else:
            found = (frozenset((ord(c),)), False, i + 1)
        if found is None:
            return None
        codes, others, i = found
        low, high, i = _quantifier(source, i)
        if low < 0 or (0 <= high < low) or (i < n and source[i] in "*+?{"):
            return None  # lazy or stacked quantifiers, or {m,n} with m > n
        atoms.append((codes, others, low, high))
    return None  # no closing "$": a match may stop early, the scan would not


def _runs(atoms: list[tuple[frozenset[int], bool, int, int]]) -> tuple[Run, ...] | None:
    runs: list[Run] = []
    for index, (codes, others, low, high) in enumerate(atoms):
        if low != high:
            for later, later_others, later_low, _ in atoms[index + 1 :]:
                if codes & later or (others and later_others):
                    return None  # the scan could end this run too late
                if later_low:
                    break  # the next character cannot go past this one
        table = bytearray(_ANY_OTHER + 1)
        for code in codes:
            table[code] = 1
        table[_ANY_OTHER] = others
        runs.append((bytes(table), low, high))
    return tuple(runs)


def _quantifier(source: str, i: int) -> tuple[int, int, int]:
    """(least, most or -1, next index) of the quantifier at ``i``; (-1, ...) when malformed."""
    c = source[i] if i < len(source) else ""
    if c == "*":
        return 0, -1, i + 1
    if c == "+":
        return 1, -1, i + 1
    if c == "?":
        return 0, 1, i + 1
    if c == "{":
        bounded = _BOUNDED.match(source, i)
        if bounded is None:
            return -1, -1, i
        low = int(bounded.group(1))
        if bounded.group(2) is None:
            return low, low, bounded.end()
        return low, int(bounded.group(3)) if bounded.group(3) else -1, bounded.end()
    return 1, 1, i


def _escape_codes(source: str, i: int) -> tuple[frozenset[int], bool, int] | None:
    c = source[i] if i < len(source) else ""
    if c in _SET_ESCAPES:
        codes, others = _SET_ESCAPES[c]
        return codes, others, i + 1
    if c and c in _PUNCTUATION:
        return frozenset((ord(c),)), False, i + 1
    return None


def _class_codes(source: str, i: int) -> tuple[frozenset[int], bool, int] | None:
    """The codes of ``[...]`` from just after its ``[``: single characters, ``a-z`` ranges,
    ``\\d \\w`` and escaped punctuation; None for anything a plain set cannot say."""
    n = len(source)
    negated = i < n and source[i] == "^"
    if negated:
        i += 1
    start = i
    codes: set[int] = set()
    while i < n and source[i] != "]":
        c = source[i]
        if c == "\\":
            e = source[i + 1] if i + 1 < n else ""
            if e in ("d", "w"):
                codes |= _SET_ESCAPES[e][0]
                i += 2
                continue
            if not e or e not in _PUNCTUATION:
                return None
            low, i = ord(e), i + 2
        elif c == "-" and i != start and i + 1 < n and source[i + 1] != "]":
            return None  # a dash that is neither first, last nor inside a plain range
        elif c == "[" or ord(c) >= _ANY_OTHER:
            return None
        else:
            low, i = ord(c), i + 1
        if i + 1 < n and source[i] == "-" and source[i + 1] not in "]\\[":
            high = ord(source[i + 1])
            if high < low or high >= _ANY_OTHER:
                return None
            codes.update(range(low, high + 1))
            i += 2
        else:
            codes.add(low)
    if i >= n or i == start:
        return None  # unterminated, or ECMA's empty class
    if negated:
        return _ALL_ASCII - codes, True, i + 1
    return frozenset(codes), False, i + 1


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
