"""A strict schema's ``pattern``, written so that every regex dialect reads it the same way.

fastgate reads ``pattern`` as JSON Schema does: ECMA-262, found anywhere in the string. OpenAI
documents neither the dialect strict mode reads a pattern in nor whether it anchors one, and
the constrained-decoding engines behind strict modes use their own syntax (``\\d`` may mean
every Unicode digit) and some anchor every pattern at both ends. Only a pattern that means one
set of strings whatever the dialect and whatever the anchoring can go into a strict schema.

Such a pattern is anchored at both ends and built of ASCII literals, character sets of literals
and ranges, groups, alternation inside a group and greedy repetition counts. ``portable_pattern``
writes an ECMA pattern in that form: ``\\d`` and ``\\w`` spelled out as ECMA's ASCII sets, and an
end without its anchor opened with ``[\\s\\S]*`` (any text, in every dialect). Anything else
(``.``, ``\\s``, a negated set, a lookaround, a lazy quantifier, a non-ASCII character, an
anchor inside an alternation, ...) answers None: that tool stays non-strict.
"""

from __future__ import annotations

import re
import string
from typing import Any, Final

_ALNUM: Final = string.ascii_letters + string.digits
# Plain characters outside a set: none has a special meaning in any common dialect.
_LITERALS: Final = frozenset(_ALNUM + "_-,:;@#%=!/ '\"<>~&`")
# Plain characters inside a set (not "&", "~", "-", "[": some dialects give them set operations).
_SET_LITERALS: Final = frozenset(_ALNUM + "_.,:;@#%=!/ '\"<>+*?(){}$|`")
# Escaped, each stands for itself in every dialect.
_SYNTAX: Final = frozenset("^$\\.*+?()[]{}|")
_CONTROL: Final = frozenset("tnr")
_SETS: Final = {"d": "0-9", "w": "A-Za-z0-9_"}  # ECMA's (ASCII) meaning, spelled out
_SETS_AS_ATOMS: Final = {name: f"[{members}]" for name, members in _SETS.items()}
_ANY_TEXT: Final = "[\\s\\S]*"
_MAX_COUNT: Final = 1000  # the largest repetition count RE2 (and so fastgate) accepts
_COUNT: Final = re.compile(r"\{([0-9]{1,4})(,([0-9]{0,4}))?\}")


class _NotPortable(Exception):
    """The pattern may mean different strings to different dialects."""


def portable_pattern(source: Any) -> str | None:
    """``source`` (ECMA-262, unanchored as JSON Schema reads it) anchored at both ends and
    written so that every dialect reads it the same way, or None where that cannot be done."""
    if not isinstance(source, str):
        return None
    body, head, tail = source, _ANY_TEXT, _ANY_TEXT
    if body.startswith("^"):
        body, head = body[1:], ""
    if body.endswith("$") and not _escaped_last(body):
        body, tail = body[:-1], ""
    try:
        return f"^{head}{_translate(body)}{tail}$"
    except _NotPortable:
        return None


def _escaped_last(text: str) -> bool:
    """Whether the last character of ``text`` is escaped (an odd run of backslashes before it)."""
    run = len(text) - 1 - len(text[:-1].rstrip("\\"))
    return run % 2 == 1


def _translate(body: str) -> str:
    out: list[str] = []
    depth = 0
    repeatable = False  # whether the last item is an atom a quantifier may follow
    i = 0
    while i < len(body):
        char = body[i]
        if char == "[":
            text, i = _set(body, i)
            out.append(text)
            repeatable = True
            continue
        if char == "\\":
            out.append(_escape(body, i, _SETS_AS_ATOMS))
            i += 2
            repeatable = True
            continue
        if char == "{":
            text, i = _count(body, i, repeatable)
            out.append(text)
            repeatable = False
            continue
        if char == "(":
            if body.startswith("(?", i):  # lookarounds, flags, named groups: dialect-specific
                raise _NotPortable(char)
            depth += 1
            repeatable = False
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise _NotPortable(char)
            repeatable = True
        elif char == "|":
            if depth == 0:  # "^a|b$": the anchors would bind to one branch each
                raise _NotPortable(char)
            repeatable = False
        elif char in "*+?":
            if not repeatable:  # nothing to repeat, or a lazy or possessive quantifier
                raise _NotPortable(char)
            repeatable = False
        elif char in _LITERALS:
            repeatable = True
        else:
            raise _NotPortable(char)
        out.append(char)
        i += 1
    if depth != 0:
        raise _NotPortable("(")
    return "".join(out)


def _escape(body: str, i: int, sets: dict[str, str]) -> str:
    """The escape at ``body[i]`` (a backslash) as every dialect reads it."""
    escaped = body[i + 1 : i + 2]
    if escaped in sets:
        return sets[escaped]
    if escaped and (escaped in _SYNTAX or escaped in _CONTROL):
        return "\\" + escaped
    raise _NotPortable("\\" + escaped)


def _count(body: str, i: int, repeatable: bool) -> tuple[str, int]:
    """A ``{n}``, ``{n,}`` or ``{n,m}`` repetition count at ``body[i]``, and where it ends."""
    match = _COUNT.match(body, i)
    if not repeatable or match is None:  # ECMA reads a malformed "{" as text, others refuse it
        raise _NotPortable("{")
    low = int(match[1])
    high = int(match[3]) if match[3] else low if match[2] is None else _MAX_COUNT
    if not low <= high <= _MAX_COUNT:
        raise _NotPortable(match[0])
    return match[0], match.end()


def _set(body: str, i: int) -> tuple[str, int]:
    """A character set at ``body[i]`` (``[``) of literals, ranges and ``\\d`` / ``\\w``, and
    where it ends."""
    out = ["["]
    j = i + 1
    if body[j : j + 1] in ("^", "]", ""):  # negated, empty or unterminated
        raise _NotPortable("[")
    while j < len(body) and body[j] != "]":
        char = body[j]
        if char == "\\":
            out.append(_escape(body, j, _SETS) if body[j + 1 : j + 2] != "-" else "\\-")
            j += 2
        elif char == "-" and body[j + 1 : j + 2] == "]":  # a last "-" is itself
            out.append(char)
            j += 1
        elif char in _SET_LITERALS and body[j + 1 : j + 2] == "-" and body[j + 2 : j + 3] != "]":
            out.append(_range(char, body[j + 2 : j + 3]))
            j += 3
        elif char in _SET_LITERALS:
            out.append(char)
            j += 1
        else:
            raise _NotPortable(char)
    if j >= len(body):
        raise _NotPortable("[")
    out.append("]")
    return "".join(out), j + 1


def _range(low: str, high: str) -> str:
    """``low-high``, only between two digits, two lowercase or two uppercase letters."""
    for kind in (string.digits, string.ascii_lowercase, string.ascii_uppercase):
        if low in kind and high in kind and low <= high:
            return f"{low}-{high}"
    raise _NotPortable(f"{low}-{high}")
