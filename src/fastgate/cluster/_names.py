"""How sessions and pools are named in Redis, and in the cluster view of ``stats()``.

A session id is whatever the caller passed, and Redis must accept every one of them: its script
decodes the reports with cjson, which refuses a lone surrogate (``"\\ud800"``), and a refused
report would take the worker off its lease. So nothing the caller chose is sent as it is: Redis
sees a digest of the id's bytes (UTF-8, surrogates kept by ``surrogatepass``), the same on every
worker, 32 lowercase hex characters whatever the id holds (NUL, newlines, 10 KB, JSON or Lua
syntax). Each worker keeps the mapping back to its local sessions (see ``RedisCluster``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable

#: The longest id ``shown`` gives as it is; longer ones are cut.
SHOWN_MAX = 48


def _text(name: Hashable) -> str:
    # A string is compared by its text on every worker; anything else by its repr, so that the
    # session 7 and the session "7" stay two sessions.
    return name if isinstance(name, str) else repr(name)


def redis_name(name: Hashable) -> str:
    """The name a session (or pool) goes by in Redis: ASCII, fixed length, the same on every
    worker for the same id."""
    tag = b"s:" if isinstance(name, str) else b"r:"
    raw = tag + _text(name).encode("utf-8", "surrogatepass")
    return hashlib.blake2b(raw, digest_size=16).hexdigest()


def shown(name: Hashable) -> str:
    """A session (or pool) as the cluster view shows it: the id itself when it is short
    printable text;
    otherwise its escaped text (``\\ud800``, ``\\x00``, ``\\n``), cut to ``SHOWN_MAX``
    characters and followed by the start of its Redis name, so that two ids never show alike."""
    text = _text(name)
    if isinstance(name, str) and text.isprintable() and len(text) <= SHOWN_MAX:
        return text
    escaped = text.encode("unicode_escape").decode("ascii")
    if len(escaped) > SHOWN_MAX:
        escaped = escaped[:SHOWN_MAX] + "..."
    return f"{escaped} #{redis_name(name)[:8]}"
