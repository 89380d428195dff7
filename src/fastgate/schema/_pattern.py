"""Translate an ECMA-262 regular expression (JSON Schema ``pattern``) to RE2 and match with it.

Patterns come from schemas a server publishes and are matched against what a model sends, so
matching must take linear time whatever both hold: a backtracking engine (Python's ``re``) runs
``^([a-z]+)+$`` on forty letters and a ``!`` for ever, on the event loop. Patterns run on RE2
(``google-re2``), which never backtracks. Constructs only a backtracking engine can run
(back-references, lookahead, lookbehind) are refused with ``ValueError`` (the compiler turns it
into a ``SchemaError``), as is anything RE2 or the translation cannot say with the ECMA meaning:
``\\p{...}``, possessive quantifiers, repetition counts above 1000, surrogate escapes.
Differences handled: ``\\d \\w \\s`` and ``\\b`` are ASCII/ECMA sets, ``.`` excludes every line
terminator, ``$`` matches only at the very end, ``[]`` and ``[^]``, ``(?<name>`` groups.

Patterns a left-to-right scan decides (``char_runs``) need no regex at all.
"""

from __future__ import annotations

import re
from typing import Any

try:
    import re2
except ImportError:  # pragma: no cover - google-re2 ships with the builtin and test extras
    re2 = None

_ECMA_SPACE = (
    " \\t\\n\\x0b\\x0c\\r\\xa0\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}"
    "\\x{205f}\\x{3000}\\x{feff}"
)
_CLASS_ESCAPES = {"d": "0-9", "w": "a-zA-Z0-9_", "s": _ECMA_SPACE}
_ATOM_ESCAPES = {
    "d": "[0-9]",
    "D": "[^0-9]",
    "w": "[a-zA-Z0-9_]",
    "W": "[^a-zA-Z0-9_]",
    "s": f"[{_ECMA_SPACE}]",
    "S": f"[^{_ECMA_SPACE}]",
    "b": "\\b",  # RE2's word boundary is ASCII, as ECMA's
    "B": "\\B",
}
_SAME_ESCAPES = {"t": "\\t", "n": "\\n", "r": "\\r", "v": "\\x0b", "f": "\\x0c"}
_QUANTIFIERS = set("*+?}")
_NOTHING = "[^\\x00-\\x{10ffff}]"  # ECMA "[]": matches no character
_ANYTHING = "[\\x00-\\x{10ffff}]"  # ECMA "[^]": matches every character
_GROUP_NAME = re.compile(r"<([A-Za-z_$][A-Za-z0-9_$]*)>")
_HEX2 = re.compile(r"[0-9a-fA-F]{2}")
_HEX4 = re.compile(r"[0-9a-fA-F]{4}")
_BRACED = re.compile(r"\{([0-9a-fA-F]{1,6})\}")
_SURROGATES = range(0xD800, 0xE000)
#: RE2's memory budget per pattern (its default): a pattern whose program does not fit is
#: refused at compile time; matching that would need more falls back to a slower linear engine.
MAX_MEM = 8 << 20
_SURROGATE_CHARS = frozenset(chr(code) for code in _SURROGATES)
if re2 is not None:
    _OPTIONS = re2.Options()
    _OPTIONS.log_errors = False
    _OPTIONS.never_capture = True  # only "is there a match": the DFA answers, no submatches
    _OPTIONS.max_mem = MAX_MEM
    _UNANCHORED = re2._re2.RE2.Anchor.UNANCHORED


def translate(source: str) -> str:
    """The RE2 spelling of ``source``; ValueError when it cannot be faithful or linear."""
    out: list[str] = []
    names: set[str] = set()
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
            text, i = _group_open(source, i + 1, names)
            out.append(text)
            continue
        if c == ".":
            out.append("[^\\n\\r\\x{2028}\\x{2029}]")
        elif c == "$":
            out.append("\\z")
        elif c in _SURROGATE_CHARS:
            raise ValueError("a lone UTF-16 surrogate has no faithful translation")
        else:
            out.append(c)
        # ECMA has no possessive quantifiers ("a*+" is an error there).
        if c in _QUANTIFIERS and i + 1 < n and source[i + 1] == "+":
            raise ValueError("possessive quantifiers do not exist in ECMA-262")
        i += 1
    if _ATOM_ESCAPES["B"] in out:
        # RE2 searches byte by byte, and between the bytes of one UTF-8 character (neither a
        # word character) \B holds: start every match at a character, as ECMA does.
        return "\\A(?s:.)*?(?:" + "".join(out) + ")"
    return "".join(out)


class Pattern:
    """A compiled ``pattern``: ``search(text)`` finds a match anywhere in ``text``, in time
    linear in its length: by the scan of its character runs when it has some (``char_runs``,
    no regex at all), else by RE2's automata (no capture groups tracked)."""

    __slots__ = ("_match", "runs", "source")

    def __init__(self, source: str, regexp: Any, runs: tuple[Run, ...] | None) -> None:
        self.source = source
        self.runs = runs
        self._match = None if regexp is None else regexp.Match

    def search(self, text: str) -> tuple[int, int] | None:
        """The span of the first match (in UTF-8 bytes; the whole text for runs), or None."""
        if self.runs is not None:
            return (0, len(text)) if scan(self.runs, text) else None
        try:
            data = str.encode(text)
        except UnicodeEncodeError:
            data = _scalar_values(text)
        span: tuple[int, int] = self._match(_UNANCHORED, data, 0, len(data))[0]  # type: ignore[misc]
        return span if span[0] >= 0 else None

    def __repr__(self) -> str:
        return f"Pattern({self.source!r})"


def _scalar_values(text: str) -> bytes:
    """UTF-8 of a string holding UTF-16 surrogates: a pair becomes its character, a lone one
    U+FFFD (no pattern can name a surrogate: those are refused)."""
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace").encode()


def for_schema(source: str) -> Pattern:
    """``source`` (ECMA-262) as a schema runs it: its character runs when a scan decides it
    (no regex is compiled: a bounded scan needs none, whatever its counts), else RE2."""
    runs = char_runs(source)
    return Pattern(source, None, runs) if runs is not None else compile_pattern(source)


def compile_pattern(source: str) -> Pattern:
    """``source`` (ECMA-262) compiled for RE2; ValueError when it cannot be used."""
    translated = translate(source)
    if re2 is None:
        raise ValueError("patterns beyond a plain character scan need google-re2 (not installed)")
    try:
        encoded = translated.encode()
    except UnicodeEncodeError:
        raise ValueError("a lone UTF-16 surrogate has no faithful translation") from None
    regexp = re2._re2.RE2(encoded, _OPTIONS)
    if not regexp.ok():
        error = regexp.error()
        if isinstance(error, bytes):
            error = error.decode(errors="replace")
        raise ValueError(f"RE2 cannot take it: {error}")
    return Pattern(source, regexp, None)


def scan(runs: tuple[Run, ...], text: str) -> bool:
    """Whether ``text`` matches the pattern of ``runs`` (the core's ``_matches``, in Python)."""
    end = len(text)
    pos = 0
    for table, least, most in runs:
        stop = end if most < 0 or most > end - pos else pos + most
        start = pos
        while pos < stop:
            code = ord(text[pos])
            if not table[code if code < _ANY_OTHER else _ANY_OTHER]:
                break
            pos += 1
        if pos - start < least:
            return False
    return pos == end


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
        return _SAME_ESCAPES[c], i + 1
    if c == "0" and not (i + 1 < len(source) and source[i + 1].isdigit()):
        return "\\x00", i + 1
    if c in "0123456789" and not in_class:
        raise ValueError(
            "back-references need a backtracking matcher, which a model's input could stall"
        )
    if c == "c" and i + 1 < len(source) and source[i + 1].isalpha() and source[i + 1].isascii():
        return f"\\x{ord(source[i + 1]) % 32:02x}", i + 2
    if c == "x" and _HEX2.fullmatch(source, i + 1, i + 3):
        return "\\x" + source[i + 1 : i + 3], i + 3
    if c == "u":
        if _HEX4.fullmatch(source, i + 1, i + 5):
            return _code_point(int(source[i + 1 : i + 5], 16)), i + 5
        braced = _BRACED.match(source, i + 1)
        if braced:
            return _code_point(int(braced.group(1), 16)), braced.end()
        raise ValueError("malformed \\u escape")
    if c == "k" and not in_class:
        raise ValueError(
            "back-references need a backtracking matcher, which a model's input could stall"
        )
    if c.isalnum():
        raise ValueError(f"\\{c} has no faithful translation")
    if c.isascii() and c.isprintable() and c != " ":
        return "\\" + c, i + 1  # escaped punctuation stands for itself
    return _code_point(ord(c)), i + 1  # any other character escaped: itself


def _code_point(code: int) -> str:
    if code in _SURROGATES:
        raise ValueError("UTF-16 surrogate escapes have no faithful translation")
    if code > 0x10FFFF:
        raise ValueError("\\u escape beyond U+10FFFF")
    return f"\\x{{{code:x}}}"


def _char_class(source: str, i: int) -> tuple[str, int]:
    n = len(source)
    negated = i < n and source[i] == "^"
    if negated:
        i += 1
    if i < n and source[i] == "]":
        return (_ANYTHING if negated else _NOTHING), i + 1
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
            parts.append("\\" + c)  # literal in ECMA; RE2 would read "[:" as a POSIX class
        elif c == "-" and parts and parts[-1] == "-":
            parts.append("\\-")
        elif c in _SURROGATE_CHARS:
            raise ValueError("a lone UTF-16 surrogate has no faithful translation")
        else:
            parts.append(c)
        i += 1
    return "[" + ("^" if negated else "") + "".join(parts) + "]", i + 1


def _group_open(source: str, i: int, names: set[str]) -> tuple[str, int]:
    if i >= len(source) or source[i] != "?":
        return "(", i
    rest = source[i + 1 : i + 3]
    if rest[:1] == ":":
        return "(?:", i + 2
    if rest[:1] in ("=", "!") or rest in ("<=", "<!"):
        raise ValueError(
            "lookahead and lookbehind need a backtracking matcher, which a model's input "
            "could stall"
        )
    named = _GROUP_NAME.match(source, i + 1)
    if named:
        if named.group(1) in names:
            raise ValueError(f"duplicate group name {named.group(1)!r}")
        names.add(named.group(1))
        return "(", named.end()
    raise ValueError("unsupported group syntax")
