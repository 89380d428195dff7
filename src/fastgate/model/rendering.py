"""From a tool's canonical value to model-visible content (SPEC §2.1 ``Output``, §10).

Content is bounded to ``max_chars`` characters of text: a string is cut head and tail; content
blocks share that budget all together. A block's text (a text block's, an embedded resource's)
is cut head and tail, its labels (``type``, ``uri``, ``mimeType``, ...) are clipped, its base64
``data`` or ``blob`` is kept whole or the block is left out with a note, and any other value in
it (or a block that is neither text nor an object) is kept whole when it fits, else the block
is left out; once the budget is spent, the blocks that remain are replaced by one note counting
them. What is measured is only what can be kept: the work is the budget's, not the value's.
A value that is neither text nor blocks is shown as its compact JSON, cut head and tail; one too
large for the budget (or nested too deep) is written only as far as the budget goes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import msgspec

from fastgate.errors import USER_CODE_ERRORS
from fastgate.model.freeze import freeze_loosely
from fastgate.model.preview import JsonPreview, json_size

DEFAULT_MAX_CONTENT_CHARS = 200_000
_LABEL_CHARS: Final = 1_000  # of a block's label (its type, uri, name, mimeType, ...)
_TEXT: Final = "text"
_BINARY: Final = frozenset({"data", "blob"})  # base64: kept whole or left out, never cut
_MIN_LEFT: Final = 256  # below this much budget, a block that does not fit whole is left out
_OVERHEAD: Final = 6  # of a block or a field (quotes, colon, comma, braces), as JSON
_DEPTH: Final = 64  # levels of nesting a value kept in a block may have


class RenderError(Exception):
    """The value could not be turned into content (the result becomes ``OUTPUT_INVALID``)."""


def exception_line(exc: BaseException) -> str:
    """``"Type: message"`` of an exception raised by user code (a tool, a guard, a hook, an
    approver, a renderer), whose ``__str__`` is user code too: one that raises, or returns no
    text, is named by its type alone."""
    try:
        text = str(exc)
    except Exception:
        return f"{type(exc).__name__} (its message could not be read)"
    return f"{type(exc).__name__}: {text}"


def render(renderer: Callable[[Any], Any] | None, value: Any, max_chars: int) -> Any:
    """``str`` or a tuple of content blocks, bounded to ``max_chars`` characters of text;
    ``renderer`` is the tool's ``Output.render``."""
    if renderer is None and type(value) is str and len(value) <= max_chars:
        return value  # the common case: short text, nothing to do
    try:
        if renderer is not None:
            content = renderer(value)
        elif isinstance(value, str):
            content = value
        elif value is None:
            content = ""
        else:
            content = _json_text(value, max_chars)
    except USER_CODE_ERRORS as exc:
        message = f"the tool's result could not be rendered: {exception_line(exc)}"
        raise RenderError(message) from exc
    if isinstance(content, str):
        return cut(content, max_chars)
    if isinstance(content, (list, tuple)):
        return bounded_blocks(content, max_chars)
    raise RenderError(f"render returned {type(content).__name__}; expected str or content blocks")


def _json_text(value: Any, max_chars: int) -> str:
    """``value`` as msgspec writes it when it may fit in ``max_chars`` characters; else as much
    of it as fits, written piece by piece, and a note: a value of a million items, or nested
    ten thousand levels deep, costs what is shown, never its whole encoding."""
    if _plainly_small(value, max_chars):
        return msgspec.json.encode(value).decode()
    marker = f"\n[... the rest cut: the value is over {max_chars} characters as JSON ...]"
    room = max(max_chars - len(marker), 0)
    kind = type(value)
    if kind is list or kind is tuple or kind is dict:
        shown = _encoded_items(value, room)
        if shown is not None:
            return shown if len(shown) <= room else shown[:room] + marker
    if json_size(value, max_chars, _DEPTH) <= max_chars:
        return msgspec.json.encode(value).decode()
    head = JsonPreview(room, indent=None, sort_keys=False, compact=True)
    head.write(value)
    return head.written() + (marker if head.cut else "")


_ESCAPED: Final = 6  # characters a string's character may take as JSON at most (``\u0000``)
_NUMBER: Final = 24  # characters a float, a 64-bit integer, a bool or null takes at most
_PLAIN_NODES: Final = 8192


def _encoded_items(value: Any, room: int) -> str | None:
    """A large list or dict written item by item, each by msgspec, until ``room`` characters are
    passed (then the text may run past ``room`` by one item's JSON, at most ``room``); ``None``
    when an item is not plainly small (the general measure then decides)."""
    members = type(value) is dict
    pieces: list[str] = []
    used = 1
    for item in value.items() if members else value:
        if not _plainly_small(item, room):
            return None
        if members:  # written as one object's member, so the key is spelled as msgspec spells it
            piece = msgspec.json.encode({item[0]: item[1]}).decode()[1:-1]
        else:
            piece = msgspec.json.encode(item).decode()
        pieces.append(piece)
        used += len(piece) + 1
        if used > room:
            return ("{" if members else "[") + ",".join(pieces)  # the caller cuts it, says so
    return ("{%s}" if members else "[%s]") % ",".join(pieces)


def _plainly_small(value: Any, max_chars: int) -> bool:
    """Whether ``value`` is made of at most ``_PLAIN_NODES`` dicts (with string keys), lists,
    tuples, scalars and strings, and its JSON surely fits in ``max_chars``: the usual tool
    result, told in a few compiled steps instead of the general measure's walk."""
    stack = [value]
    size = nodes = 0
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict or kind is list or kind is tuple:
            nodes += len(item) + 1
            if nodes > _PLAIN_NODES:
                return False
            size += 2 + len(item)
            if kind is dict:
                for key, inner in item.items():
                    if type(key) is not str:
                        return False
                    size += _scalar_size(key) + 1
                    stack.append(inner)
            else:
                stack.extend(item)
        else:
            size += _scalar_size(item)
        if size > max_chars:
            return False
    return True


def _scalar_size(item: Any) -> int:
    """At most how many characters ``item`` takes as JSON; very large when it is not a plain
    scalar or string (so the general measure decides)."""
    kind = type(item)
    if kind is str:
        if item.isprintable() and '"' not in item and "\\" not in item:
            return len(item) + 2  # written as it is
        return len(item) * _ESCAPED + 2
    if item is None or kind is bool or kind is float:
        return _NUMBER
    if kind is int and -(1 << 63) <= item < (1 << 64):
        return _NUMBER
    return 1 << 62


def cut(text: str, max_chars: int) -> str:
    """Keep the head and the tail of ``text`` with a marker saying how much was cut."""
    if len(text) <= max_chars:
        return text
    omitted = len(text) - max_chars
    marker = f"\n[... {omitted} characters cut ...]\n"
    head = max(0, (max_chars - len(marker)) * 2 // 3)  # a budget smaller than the marker: none
    tail = max(0, max_chars - len(marker) - head)
    return text[:head] + marker + (text[-tail:] if tail else "")


def bounded_blocks(blocks: list[Any] | tuple[Any, ...], budget: int) -> tuple[Any, ...]:
    """``blocks`` holding about ``budget`` characters in all (see the module's docstring), each
    frozen (``freeze_loosely``: a result's content is nobody's to change, the history's copy
    included)."""
    out: list[Any] = []
    left = budget
    count = len(blocks)
    for index in range(count):
        block = blocks[index]
        kept, used, whole = _bounded_block(block, left)
        if not whole and index > 0 and left < _MIN_LEFT:
            out.append(f"[... {count - index} more content block(s) left out: over the budget ...]")
            break
        if kept is not None and type(kept) is not str and not _is_json(kept):
            kept = _not_json(block)
            used = len(kept["text"]) + _OVERHEAD
        elif kept is None:
            kept = _left_out(block, budget)
            used = len(kept["text"]) + _OVERHEAD
        out.append(freeze_loosely(kept))
        left -= used
    return tuple(out)


def _bounded_block(block: Any, left: int) -> tuple[Any, int, bool]:
    """The block within about ``left`` characters (None: it cannot be, and is left out), the
    characters it takes, and whether it is kept whole."""
    if isinstance(block, str):
        if len(block) <= left:
            return block, len(block) + _OVERHEAD, True
        text = cut(block, max(left, 0))
        return text, len(text) + _OVERHEAD, False
    if isinstance(block, dict):
        return _bounded_fields(block, left, True)
    size = json_size(block, left, _DEPTH)
    return (block, size, True) if size <= left else (None, size, False)


def _bounded_fields(fields: dict[Any, Any], left: int, outer: bool) -> tuple[Any, int, bool]:
    """A block's fields (``outer``) or an embedded resource's within about ``left`` characters:
    labels and other values first, then the text (cut to what is left) and the base64 data
    (whole, or the block is left out). Returns as ``_bounded_block`` does."""
    kept: dict[Any, Any] = {}
    used = _OVERHEAD
    whole = True
    later = False  # text, data or a resource: given what the rest leaves
    for key, value in fields.items():
        if used > left:
            return None, used, False
        if key == _TEXT or key in _BINARY or (outer and key == "resource"):
            later = True
            continue
        used += (len(key) if isinstance(key, str) else _OVERHEAD) + _OVERHEAD
        if isinstance(value, str):
            if len(value) > _LABEL_CHARS:
                value = cut(value, _LABEL_CHARS)
                whole = False
            used += len(value)
        else:
            size = json_size(value, left - used, _DEPTH)
            if size > left - used:
                return None, used + size, False
            used += size
        kept[key] = value
    if later:
        for key, value in fields.items():
            if key in kept:
                continue
            used += len(key) + _OVERHEAD
            room = left - used
            if key == "resource" and isinstance(value, dict):
                inner, size, inner_whole = _bounded_fields(value, room, False)
                if inner is None:
                    return None, used + size, False
                value, whole = inner, whole and inner_whole
                used += size
            elif isinstance(value, str) and key == _TEXT:
                if len(value) > room:
                    value = cut(value, max(room, 0))
                    whole = False
                used += len(value)
            elif isinstance(value, str) and len(value) <= room:
                used += len(value)  # base64 data that fits
            elif isinstance(value, str):
                return None, used + len(value), False
            else:
                size = json_size(value, room, _DEPTH)
                if size > room:
                    return None, used + size, False
                used += size
            kept[key] = value
    if whole:
        return fields, used, used <= left
    return {key: kept[key] for key in fields}, used, False


def _is_json(value: Any) -> bool:
    """Whether ``value`` can be written as JSON (and so recorded with its result); called on
    what the budget kept, so the work stays the budget's."""
    try:
        msgspec.json.encode(value)
    except (TypeError, ValueError, OverflowError, RecursionError):
        return False
    return True


def _not_json(block: Any) -> dict[str, Any]:
    kind = block.get("type") if isinstance(block, dict) else None
    label = kind[:100] if isinstance(kind, str) else type(block).__name__
    return {"type": "text", "text": f"[... a {label!r} content block left out: not JSON ...]"}


def bounded_details(details: dict[Any, Any], budget: int) -> dict[str, Any]:
    """An error's ``details`` as JSON within about ``budget`` characters, so that the result can
    be recorded and shown: details that are (the usual case) come back as they are; otherwise
    each value that cannot be written as JSON, or does not fit in what is left, is replaced by
    a note, and keys that are not strings by their text."""
    if (
        json_size(details, budget, _DEPTH) <= budget
        and all(type(key) is str for key in details)
        and _is_json(details)
    ):
        return details
    bounded: dict[str, Any] = {}
    left = budget
    for key, value in details.items():
        name = key[:_LABEL_CHARS] if type(key) is str else _key_text(key)
        size = json_size(value, left, _DEPTH)
        if size > left:
            bounded[name] = f"[... left out: over the budget of {budget} characters ...]"
        elif not _is_json(value):
            bounded[name] = f"[... a {type(value).__name__[:100]} left out: not JSON ...]"
        else:
            bounded[name] = value
        left -= min(size, left) + len(name) + _OVERHEAD
    return bounded


def _key_text(key: Any) -> str:
    try:
        return str(key)[:_LABEL_CHARS]
    except Exception:  # its __str__ is user code
        return type(key).__name__


def _left_out(block: Any, budget: int) -> dict[str, Any]:
    kind = block.get("type") if isinstance(block, dict) else type(block).__name__
    label = kind[:100] if isinstance(kind, str) else "?"
    return {
        "type": "text",
        "text": f"[... a {label!r} content block left out: over the budget of {budget} "
        "characters ...]",
    }
