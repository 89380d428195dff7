"""From a tool's canonical value to model-visible content (SPEC §2.1 ``Output``, §10)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

DEFAULT_MAX_CONTENT_CHARS = 200_000


class RenderError(Exception):
    """The value could not be turned into content (the result becomes ``OUTPUT_INVALID``)."""


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
            content = msgspec.json.encode(value).decode()
    except Exception as exc:
        message = f"the tool's result could not be rendered: {type(exc).__name__}: {exc}"
        raise RenderError(message) from exc
    if isinstance(content, str):
        return cut(content, max_chars)
    if isinstance(content, (list, tuple)):
        return tuple(cut(b, max_chars) if isinstance(b, str) else b for b in content)
    raise RenderError(f"render returned {type(content).__name__}; expected str or content blocks")


def cut(text: str, max_chars: int) -> str:
    """Keep the head and the tail of ``text`` with a marker saying how much was cut."""
    if len(text) <= max_chars:
        return text
    omitted = len(text) - max_chars
    marker = f"\n[... {omitted} characters cut ...]\n"
    head = (max_chars - len(marker)) * 2 // 3
    tail = max(0, max_chars - len(marker) - head)
    return text[:head] + marker + (text[-tail:] if tail else "")
