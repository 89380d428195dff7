"""Bash's brace expansion, on a word already split into quoted and unquoted pieces.

Bash expands braces before every other expansion, on the text as written: only unquoted ``{``,
``,`` and ``}`` are syntax, a ``{`` that opens ``${...}`` is not (the lexer hands such an
expansion over as one piece), and a brace pair expands only when it holds a comma at its own
level (``{a,b}``, ``{,x}``, nested ``{a,{b,c}}``) or is a sequence (``{1..9}``, ``{a..e}``,
``{01..10..3}``). Anything else stays literal (``{x}``, ``{}``, ``{a..1}``). Results that come
out empty (``{,}``) are dropped, as bash drops them.

The number of results is bounded (``MAX_RESULTS``): beyond it the caller treats the word as one
whose value is known only at run time.
"""

from __future__ import annotations

import re

# A piece of a word: its value (quotes removed), its spelling, and what it is.
UNQUOTED = 0  # unquoted text: ``{``, ``,`` and ``}`` stand alone, and may be syntax
LITERAL = 1  # quoted or escaped text, or an expansion whose value is known (a lone ``$``)
DYNAMIC = 2  # an expansion known only at run time (``$x``, ``$(...)``)
Piece = tuple[str, str, int]

MAX_RESULTS = 1024
MAX_PIECES = 1 << 16  # the pieces of every result together
MAX_DEPTH = 64  # nested brace pairs
# Pieces looked at while searching for braces: bash's search is quadratic in the number of
# braces (``{{{{...``), ours stops here.
MAX_STEPS = 1 << 17
_INTEGER = re.compile(r"[-+]?[0-9]+")
_MAX_DIGITS = 18  # longer numbers overflow bash's integers: known only to bash


class TooLarge(Exception):
    """The expansion would yield more than ``MAX_RESULTS`` words."""


def has_braces(pieces: list[Piece]) -> bool:
    return any(kind == UNQUOTED and value == "{" for value, _, kind in pieces)


def expand(pieces: list[Piece]) -> list[list[Piece]]:
    """Every word the pieces expand to, in bash's order (``TooLarge`` past the bound)."""
    budget = [MAX_STEPS]
    return [word for word in _expand(pieces, 0, budget) if any(raw for _, raw, _ in word)]


def _expand(pieces: list[Piece], depth: int, budget: list[int]) -> list[list[Piece]]:
    if depth > MAX_DEPTH:
        raise TooLarge
    opening = _opening(pieces, 0)
    closing = -1
    while opening >= 0:
        budget[0] -= len(pieces) - opening
        if budget[0] < 0:
            raise TooLarge
        closing = _closing(pieces, opening + 1)
        if closing >= 0:
            break
        opening = _opening(pieces, opening + 1)  # no ``}`` for this one: it is text
    if opening < 0:
        return [pieces]
    inner = pieces[opening + 1 : closing]
    if _has_comma(inner):
        middles = [
            word for item in _split_commas(inner) for word in _expand(item, depth + 1, budget)
        ]
    else:
        sequence = _sequence("".join(raw for _, raw, _ in inner))
        if sequence is None:  # not a valid sequence: the pair is text, what follows may expand
            if closing == len(pieces) - 1:
                return [pieces]
            middles = [pieces[opening : closing + 1]]
        else:
            middles = [[_generated(text)] for text in sequence]
    head = pieces[:opening]
    tails = _expand(pieces[closing + 1 :], depth + 1, budget)
    count = len(middles) * len(tails)
    size = count * len(head) + sum(map(len, middles)) * len(tails)
    size += sum(map(len, tails)) * len(middles)
    if count > MAX_RESULTS or size > MAX_PIECES:
        raise TooLarge
    return [head + middle + tail for middle in middles for tail in tails]


def _opening(pieces: list[Piece], start: int) -> int:
    """The next unquoted ``{`` from ``start`` that may open an expansion: not one at the start
    of the word followed by nothing or ``}`` (bash leaves ``{}`` alone)."""
    for index in range(start, len(pieces)):
        value, _, kind = pieces[index]
        if kind != UNQUOTED or value != "{":
            continue
        before = pieces[index - 1][1][-1:] if index else ""
        after = pieces[index + 1][1][:1] if index + 1 < len(pieces) else ""
        if before in ("", " ", "\t", "\n") and after in ("", " ", "\t", "\n", "}"):
            continue
        return index
    return -1


def _closing(pieces: list[Piece], start: int) -> int:
    """The ``}`` closing the brace opened before ``start``, or -1. A ``}`` at the top level
    closes only after a top-level ``,`` or ``..`` (one before them is text), as in bash."""
    level = 0
    separated = False
    for index in range(start, len(pieces)):
        value, _, kind = pieces[index]
        if kind != UNQUOTED:
            continue
        if value == "}":
            if level:
                level -= 1
            elif separated:
                return index
        elif value == "{":
            level += 1
        elif level == 0 and not separated:
            separated = value == "," or _has_range(pieces, index)
    return -1


def _has_range(pieces: list[Piece], index: int) -> bool:
    """A ``..`` in the unquoted text at ``index`` not followed by ``}``."""
    value = pieces[index][0]
    following = pieces[index + 1][1][:1] if index + 1 < len(pieces) else ""
    position = value.find("..")
    while position >= 0:
        after = value[position + 2 : position + 3] or following
        if after != "}":
            return True
        position = value.find("..", position + 1)
    return False


def _has_comma(pieces: list[Piece]) -> bool:
    """Bash's test for a list: a comma anywhere in the text, quoted or nested, unless a
    backslash escapes it."""
    text = "".join(raw for _, raw, _ in pieces)
    index = 0
    while index < len(text):
        if text[index] == "\\":
            index += 2
            continue
        if text[index] == ",":
            return True
        index += 1
    return False


def _split_commas(pieces: list[Piece]) -> list[list[Piece]]:
    """The items between the commas at the top level of a brace pair."""
    items: list[list[Piece]] = [[]]
    level = 0
    for piece in pieces:
        value, _, kind = piece
        if kind == UNQUOTED:
            if value == "{":
                level += 1
            elif value == "}" and level:
                level -= 1
            elif value == "," and level == 0:
                items.append([])
                continue
        items[-1].append(piece)
    return items


def _generated(text: str) -> Piece:
    # A generated backslash is removed with the quotes, as in bash (``{Z..a}``).
    return ("" if text == "\\" else text, text, UNQUOTED if text != "\\" else LITERAL)


def _sequence(text: str) -> list[str] | None:
    """The words of ``x..y`` or ``x..y..step`` (integers, or single ASCII letters), or None
    when it is not one (bash then leaves the pair as text)."""
    left, separator, right = text.partition("..")
    if not separator or not left or not right:
        return None
    step = 1
    right_value, rest = _leading_integer(right)
    if right_value is None and right[:1].isascii() and right[:1].isalpha():
        rest = right[1:]
    elif right_value is None:
        return None
    if rest:
        if not rest.startswith("..") or len(rest) == 2:
            return None
        step_value, tail = _leading_integer(rest[2:])
        if step_value is None or tail:
            return None
        step = abs(step_value) or 1
    left_value, tail = _leading_integer(left)
    if left_value is not None and not tail:
        if right_value is None:
            return None
        return _numbers(
            left_value, right_value, step, _width(left, right[: len(right) - len(rest)])
        )
    if len(left) == 1 and left.isascii() and left.isalpha() and right_value is None:
        low, high = ord(left), ord(right[0])
        direction = 1 if high >= low else -1
        count = abs(high - low) // step + 1
        if count > MAX_RESULTS:
            raise TooLarge
        return [chr(low + direction * step * k) for k in range(count)]
    return None


def _leading_integer(text: str) -> tuple[int | None, str]:
    """An optionally signed decimal at the start of ``text`` and what follows it."""
    match = _INTEGER.match(text)
    if match is None:
        return None, text
    digits = match.group(0)
    if len(digits.lstrip("+-")) > _MAX_DIGITS:
        raise TooLarge  # bash's 64-bit arithmetic: what it makes of this is bash's own
    return int(digits), text[match.end() :]


def _width(left: str, right: str) -> int:
    """The zero-padded width (``{01..10}``, ``{-05..5}``), or 0."""
    if any(_padded(term) for term in (left, right)):
        return max(len(left), len(right))
    return 0


def _padded(term: str) -> bool:
    return (len(term) > 1 and term[0] == "0") or (len(term) > 2 and term[:2] == "-0")


def _numbers(low: int, high: int, step: int, width: int) -> list[str]:
    count = abs(high - low) // step + 1
    if count > MAX_RESULTS:
        raise TooLarge
    direction = 1 if high >= low else -1
    out: list[str] = []
    for k in range(count):
        number = low + direction * step * k
        digits = str(abs(number))
        if width:
            digits = digits.zfill(width - (number < 0))
        out.append("-" + digits if number < 0 else digits)
    return out
