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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from fastgate.model import JsonPreview, json_preview

FOLD: Final = 200  # characters of a string shown before it is folded
ITEMS: Final = 20  # items of a list or an object shown before the rest is folded
SHORT_LIMIT: Final = 8_000  # characters of the preview
FULL_LIMIT: Final = 65_536  # characters of the full arguments shown at all


@dataclass(frozen=True, slots=True)
class ArgumentsPreview:
    """``short``: the arguments as pretty JSON with long strings, lists and objects folded (at
    most ``SHORT_LIMIT`` characters and a closing note); ``full``: the whole of them (cut after
    ``FULL_LIMIT`` characters) when ``short`` left something out, else None."""

    short: str
    full: str | None


def arguments_line(arguments: Any, limit: int) -> tuple[str, bool]:
    """The arguments as one line of JSON, ``json.dumps(arguments, sort_keys=True,
    ensure_ascii=False)`` as far as ``limit`` characters (then ``… (cut after N characters)``),
    and whether that is all of them (the text is then their JSON). Nothing past ``limit`` is
    encoded; an object of more than a thousand keys is written in the order sent."""
    return json_preview(arguments, limit, indent=None)


def preview_arguments(arguments: Any) -> ArgumentsPreview:
    short = JsonPreview(SHORT_LIMIT, fold=FOLD, items=ITEMS).write(arguments)
    if not short.folded and not short.cut:
        return ArgumentsPreview(short.text(), None)
    full = JsonPreview(FULL_LIMIT).write(arguments)
    return ArgumentsPreview(short.text(), full.text())
