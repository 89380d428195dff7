"""What the console shows of a call's arguments: pretty JSON, bounded whatever the caller sent.

The preview folds a string after ``FOLD`` characters, a list or an object after its first
``ITEMS`` items (``… (+N more items)``), and ends after ``SHORT_LIMIT`` characters; the full
text (behind a disclosure, when something was folded) ends after ``FULL_LIMIT`` characters.
The work is bounded as the text is: nothing is encoded past a limit, so an argument of a
million items costs no more to show than one of a hundred. The gateway makes a call's preview
once, when the call starts waiting; every page and stream that shows the call reuses it. The
walk is ``fastgate.model.JsonPreview``'s (the terminal prompt and the console's result view
show values through it too).

``arguments_line`` is the same walk on one line, nothing folded: the arguments as compact JSON
(keys sorted) cut after a limit, for the question put to a client.

Whatever is shown to a person goes through ``visible``: a character that draws nothing or moves
the text around it (a control, a bidi override, a zero-width space) is written as its JSON
escape, so an argument cannot hide or reorder part of what is approved.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from fastgate.model import JsonPreview, json_preview

FOLD: Final = 200  # characters of a string shown before it is folded
ITEMS: Final = 20  # items of a list or an object shown before the rest is folded
SHORT_LIMIT: Final = 8_000  # characters of the preview
FULL_LIMIT: Final = 65_536  # characters of the full arguments shown at all
# Letters that draw nothing (Hangul fillers): isprintable() keeps them, a reader sees a gap.
_BLANK_LETTERS: Final = frozenset("\u115f\u1160\u3164\uffa0")


def visible(text: str) -> str:
    """``text`` as a person may be shown it: every character that draws nothing or moves the
    text around it (controls, format characters such as bidi overrides and zero-width ones,
    separators other than the space and the line feed, private-use and unassigned code points,
    Hangul fillers) written as its JSON escape (``\\u202e``; a pair of them beyond the BMP).
    Inside a JSON string the escape means the same character, so the arguments shown are still
    the arguments that run."""
    if _BLANK_LETTERS.isdisjoint(text) and all(line.isprintable() for line in text.split("\n")):
        return text  # the usual case, checked at C speed
    return "".join(
        ch if ch == "\n" or (ch.isprintable() and ch not in _BLANK_LETTERS) else _escape(ch)
        for ch in text
    )


def _escape(ch: str) -> str:
    code = ord(ch)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


@dataclass(frozen=True, slots=True)
class ArgumentsPreview:
    """``short``: the arguments as pretty JSON with long strings, lists and objects folded (at
    most ``SHORT_LIMIT`` characters and a closing note); ``full``: the whole of them (cut after
    ``FULL_LIMIT`` characters) when ``short`` left something out, else None; ``whole``: whether
    what is shown holds all of the arguments (an approval may only cover what was shown).
    Both texts are ``visible``."""

    short: str
    full: str | None
    whole: bool = True


def arguments_line(arguments: Any, limit: int) -> tuple[str, bool]:
    """The arguments as one line of JSON, ``json.dumps(arguments, sort_keys=True,
    ensure_ascii=False)`` as far as ``limit`` characters (then ``… (cut after N characters)``),
    ``visible``, and whether that is all of them (the text is then their JSON). Nothing past
    ``limit`` is encoded; an object of more than a thousand keys is written in the order sent."""
    text, whole = json_preview(arguments, limit, indent=None)
    return visible(text), whole


def preview_arguments(arguments: Any) -> ArgumentsPreview:
    short = JsonPreview(SHORT_LIMIT, fold=FOLD, items=ITEMS).write(arguments)
    if not short.folded and not short.cut:
        return ArgumentsPreview(visible(short.text()), None)
    full = JsonPreview(FULL_LIMIT).write(arguments)
    whole = not full.folded and not full.cut  # deeper than DEPTH folds even here
    return ArgumentsPreview(visible(short.text()), visible(full.text()), whole)
