"""What the console shows of a call's arguments: pretty JSON, bounded whatever the caller sent.

The preview folds a string after ``FOLD`` characters, a list or an object after its first
``ITEMS`` items (``… (+N more items)``), and ends after ``SHORT_LIMIT`` characters; the full
text (behind a disclosure, when something was folded) ends after ``FULL_LIMIT`` characters.
The work is bounded as the text is: nothing is encoded past a limit, so an argument of a
million items costs no more to show than one of a hundred. The gateway makes a call's preview
once, when the call starts waiting; every page and stream that shows the call reuses it.

``arguments_line`` is the same walk on one line, nothing folded: the arguments as compact JSON
(keys sorted) cut after a limit, for the question put to a client.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

FOLD: Final = 200  # characters of a string shown before it is folded
ITEMS: Final = 20  # items of a list or an object shown before the rest is folded
SHORT_LIMIT: Final = 8_000  # characters of the preview
FULL_LIMIT: Final = 65_536  # characters of the full arguments shown at all
_DEPTH: Final = 64  # levels of nesting shown
_SORTED: Final = 1_000  # keys of an object shown in sorted order; a larger one in the order sent
_INDENT: Final = "  "


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
    encoded; an object of more than ``_SORTED`` keys is written in the order sent."""
    line = _Pretty(limit, None, None, None)
    line.value(arguments, 0)
    return line.text(), not line.folded and not line.cut


def preview_arguments(arguments: Any) -> ArgumentsPreview:
    short = _Pretty(SHORT_LIMIT, FOLD, ITEMS)
    short.value(arguments, 0)
    if not short.folded and not short.cut:
        return ArgumentsPreview(short.text(), None)
    full = _Pretty(FULL_LIMIT, None, None)
    full.value(arguments, 0)
    return ArgumentsPreview(short.text(), full.text())


class _Pretty:
    """``json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)`` written piece by
    piece, folding as asked, and stopping after ``limit`` characters (``indent`` None: on one
    line, as ``json.dumps`` without ``indent``)."""

    __slots__ = ("comma", "cut", "fold", "folded", "indent", "items", "left", "limit", "parts")

    def __init__(
        self, limit: int, fold: int | None, items: int | None, indent: str | None = _INDENT
    ) -> None:
        self.limit = limit
        self.left = limit
        self.fold = fold
        self.items = items
        self.indent = indent
        self.comma = "," if indent else ", "  # pretty: each item on a line of its own
        self.parts: list[str] = []
        self.folded = False  # a value was shortened
        self.cut = False  # the limit was reached

    def text(self) -> str:
        out = "".join(self.parts)
        if self.cut:
            out += ("\n" if self.indent else "") + f"… (cut after {self.limit} characters)"
        return out

    def put(self, text: str) -> None:
        if self.cut:
            return
        if len(text) > self.left:
            self.parts.append(text[: self.left])
            self.left = 0
            self.cut = True
            return
        self.parts.append(text)
        self.left -= len(text)

    def value(self, value: Any, level: int) -> None:
        if self.cut:
            return
        if isinstance(value, str):
            self.put(self.string(value))
        elif isinstance(value, Mapping):
            self.mapping(value, level)
        elif isinstance(value, (list, tuple)):
            self.sequence(value, level)
        elif value is None or isinstance(value, (bool, int, float)):
            try:
                self.put(json.dumps(value))
            except ValueError:  # an integer of more digits than Python converts
                self.put('"(a number too long to show)"')
                self.folded = True
        else:
            self.put(self.string(str(value)))

    def string(self, text: str) -> str:
        fold = self.fold
        if fold is not None and len(text) > fold:
            self.folded = True
            text = text[:fold] + f"… (+{len(text) - fold} characters)"
        elif len(text) > self.left:
            text = text[: self.left + 1]  # encoding only lengthens it: still past the limit
        return json.dumps(text, ensure_ascii=False)

    def sequence(self, values: list[Any] | tuple[Any, ...], level: int) -> None:
        count = len(values)
        if count == 0:
            self.put("[]")
            return
        if level >= _DEPTH:
            self.folded = True
            self.put(f"[… {count} items]")
            return
        shown = count if self.items is None else min(count, self.items)
        inner, outer = self.margins(level)
        self.put("[")
        for index in range(shown):
            self.put(inner)
            self.value(values[index], level + 1)
            if index + 1 < count:
                self.put(self.comma)
            if self.cut:
                return
        self.more(count - shown, "item", inner)
        self.put(outer + "]")

    def mapping(self, values: Mapping[Any, Any], level: int) -> None:
        count = len(values)
        if count == 0:
            self.put("{}")
            return
        if level >= _DEPTH:
            self.folded = True
            self.put(f"{{… {count} keys}}")
            return
        # Each key shown costs at least six characters: no more are taken than can be shown.
        wanted = min(count, self.items if self.items is not None else self.left // 6 + 1)
        keys = _first_keys(values, wanted)
        inner, outer = self.margins(level)
        self.put("{")
        for index, key in enumerate(keys):
            self.put(inner + self.string(key if isinstance(key, str) else str(key)) + ": ")
            self.value(values[key], level + 1)
            if index + 1 < count:
                self.put(self.comma)
            if self.cut:
                return
        self.more(count - len(keys), "key", inner)
        self.put(outer + "}")

    def margins(self, level: int) -> tuple[str, str]:
        """What goes before each item of a list or an object at ``level``, and before its
        closing bracket."""
        if not self.indent:
            return "", ""
        return "\n" + self.indent * (level + 1), "\n" + self.indent * level

    def more(self, rest: int, what: str, inner: str) -> None:
        if rest > 0:
            self.folded = True
            self.put(f"{inner}… (+{rest} more {what}{'' if rest == 1 else 's'})")


def _first_keys(values: Mapping[Any, Any], wanted: int) -> list[Any]:
    """The first ``wanted`` keys: in sorted order (by their text when they do not compare),
    or, for an object too large to sort cheaply, in the order they came."""
    keys: Iterable[Any] = values.keys()
    if len(values) > _SORTED:
        return list(itertools.islice(keys, wanted))
    try:
        ordered = sorted(keys)
    except TypeError:
        ordered = sorted(keys, key=str)
    return ordered[:wanted]
