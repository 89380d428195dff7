"""A value as JSON text for people to read, written only as far as it is shown.

``JsonPreview`` writes what ``json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)``
would (on one line without ``indent``; keys in the order given without ``sort_keys``) piece by
piece, and stops after ``limit`` characters: nothing past the limit is encoded, so a value of a
million items, a string of fifty megabytes or an object nested ten thousand levels deep costs no
more to show than a small one. It can also fold a long string after ``fold`` characters and a
list or an object after its first ``items`` items, and shows at most ``DEPTH`` levels of
nesting. The console, the approval questions and the terminal prompt all show values through it,
and so does the content a tool's large value gives the model (``compact``: as msgspec writes it).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final

import msgspec

DEPTH: Final = 64  # levels of nesting shown
_SORTED: Final = 1_000  # keys of an object shown in sorted order; a larger one in the order given
_INDENT: Final = "  "


def json_preview(
    value: Any, limit: int, *, indent: str | None = _INDENT, sort_keys: bool = True
) -> tuple[str, bool]:
    """``value`` as JSON text as far as ``limit`` characters (then ``… (cut after N
    characters)``), and whether that is all of it."""
    preview = JsonPreview(limit, indent=indent, sort_keys=sort_keys).write(value)
    return preview.text(), not preview.folded and not preview.cut


class JsonPreview:
    """``json.dumps(value, indent=indent, sort_keys=sort_keys, ensure_ascii=False)`` written piece
    by piece, folding as asked, and stopping after ``limit`` characters (``indent`` None: on one
    line, as ``json.dumps`` without ``indent``; ``compact`` too: without a space after a comma or
    a colon). After ``write``: ``text()`` (with a closing note when cut) or ``written()``
    (without), and whether a value was shortened (``folded``) or the limit reached (``cut``).

    Values JSON has no spelling for are shown as JSON would hold them: a msgspec struct or a
    dataclass as an object of its fields, a set as a list, bytes as their size, anything else
    as the string ``str()`` makes of it."""

    __slots__ = (
        "colon",
        "comma",
        "cut",
        "fold",
        "folded",
        "indent",
        "items",
        "left",
        "limit",
        "parts",
        "sort_keys",
    )

    def __init__(
        self,
        limit: int,
        *,
        fold: int | None = None,
        items: int | None = None,
        indent: str | None = _INDENT,
        sort_keys: bool = True,
        compact: bool = False,
    ) -> None:
        self.limit = limit
        self.left = limit
        self.fold = fold
        self.items = items
        self.indent = indent
        self.sort_keys = sort_keys
        # Pretty: each item on a line of its own; compact: as msgspec writes JSON.
        self.comma = "," if indent or compact else ", "
        self.colon = ":" if compact else ": "
        self.parts: list[str] = []
        self.folded = False  # a value was shortened
        self.cut = False  # the limit was reached

    def write(self, value: Any) -> JsonPreview:
        self.value(value, 0)
        return self

    def written(self) -> str:
        """The JSON text written, without the note saying where it was cut."""
        return "".join(self.parts)

    def text(self) -> str:
        out = self.written()
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
        elif isinstance(value, (list, tuple, set, frozenset)):
            self.sequence(value, len(value), level)
        elif value is None or isinstance(value, (bool, int, float)):
            try:
                self.put(json.dumps(value))
            except ValueError:  # an integer of more digits than Python converts
                self.put('"(a number too long to show)"')
                self.folded = True
        elif isinstance(value, msgspec.Struct):
            self.mapping(_FieldsOf(value, value.__struct_fields__), level)
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            names = tuple(f.name for f in dataclasses.fields(value))
            self.mapping(_FieldsOf(value, names), level)
        elif isinstance(value, (bytes, bytearray, memoryview)):
            self.put(self.string(f"({len(value)} bytes)"))
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

    def sequence(self, values: Iterable[Any], count: int, level: int) -> None:
        if count == 0:
            self.put("[]")
            return
        if level >= DEPTH:
            self.folded = True
            self.put(f"[… {count} items]")
            return
        shown = count if self.items is None else min(count, self.items)
        inner, outer = self.margins(level)
        self.put("[")
        for index, item in enumerate(itertools.islice(values, shown)):
            self.put(inner)
            self.value(item, level + 1)
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
        if level >= DEPTH:
            self.folded = True
            self.put(f"{{… {count} keys}}")
            return
        # Each key shown costs at least six characters: no more are taken than can be shown.
        wanted = min(count, self.items if self.items is not None else self.left // 6 + 1)
        keys = _first_keys(values, wanted, self.sort_keys)
        inner, outer = self.margins(level)
        self.put("{")
        for index, key in enumerate(keys):
            self.put(inner + self.string(key if isinstance(key, str) else str(key)) + self.colon)
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


class _FieldsOf(Mapping[str, Any]):
    """The fields of a struct or a dataclass as a read-only mapping, in their order."""

    __slots__ = ("_names", "_of")

    def __init__(self, of: Any, names: tuple[str, ...]) -> None:
        self._of = of
        self._names = names

    def __getitem__(self, name: str) -> Any:
        return getattr(self._of, name)

    def __iter__(self) -> Any:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def _first_keys(values: Mapping[Any, Any], wanted: int, sort_keys: bool) -> list[Any]:
    """The first ``wanted`` keys: in sorted order (by their text when they do not compare), or,
    unsorted or for an object too large to sort cheaply, in the order they came."""
    keys: Iterable[Any] = values.keys()
    if not sort_keys or len(values) > _SORTED:
        return list(itertools.islice(keys, wanted))
    try:
        ordered = sorted(keys)
    except TypeError:
        ordered = sorted(keys, key=str)
    return ordered[:wanted]


_END: Final = object()
_OTHER_CHARS: Final = 1  # a value of another kind (a date, a UUID, an enum): at least this much


def json_size(value: Any, limit: int, depth: int | None = None) -> int:
    """At least how many characters the compact JSON of ``value`` takes (strings counted
    unescaped, commas and colons not at all: every item counts one character at least),
    counting no further than past ``limit``: the work is bounded by ``limit`` whatever the
    value holds (a million items, a long string, a deep nesting; no recursion). Nesting deeper
    than ``depth`` (when given) counts as past the limit."""
    size = 0
    pending: list[Iterator[Any]] = [iter((value,))]
    while pending:
        item = next(pending[-1], _END)
        if item is _END:
            pending.pop()
            continue
        if isinstance(item, str):
            size += len(item) + 2
        elif item is None or isinstance(item, bool):
            size += 4  # null, true, false
        elif isinstance(item, int):
            size += _digits(item)
        elif isinstance(item, float):
            size += 1
        elif isinstance(item, Mapping):
            size += 2
            pending.append(itertools.chain.from_iterable(item.items()))
        elif isinstance(item, (list, tuple, set, frozenset)):
            size += 2
            pending.append(iter(item))
        elif isinstance(item, msgspec.Struct):
            size += 2
            pending.append(_fields(item, item.__struct_fields__))
        elif dataclasses.is_dataclass(item) and not isinstance(item, type):
            size += 2
            names = tuple(f.name for f in dataclasses.fields(item))
            pending.append(_fields(item, names))
        elif isinstance(item, (bytes, bytearray, memoryview)):
            size += len(item) * 4 // 3 + 2  # base64
        else:
            size += _OTHER_CHARS
        if size > limit or (depth is not None and len(pending) > depth + 1):
            return max(size, limit + 1)
    return size


def _digits(number: int) -> int:
    """At least how many digits ``number`` has, from its size in bits (no conversion: an
    integer of thousands of digits costs no more than a small one)."""
    return max(number.bit_length() - 1, 0) * 3 // 10 + 1  # log10(2) > 0.3


def _fields(of: Any, names: tuple[str, ...]) -> Iterator[Any]:
    """The names and values of the fields of a struct or a dataclass, one after the other."""
    for name in names:
        yield name
        yield getattr(of, name)
