"""A command's output kept within a budget: its head and its tail, never the whole of a flood."""

from __future__ import annotations

from collections import deque

BINARY_PROBE = 8000  # git's rule: a NUL byte in the first 8,000 bytes means binary


class OutputBuffer:
    """Keeps the first ``limit`` bytes and the last ``limit`` bytes of everything added, and
    counts the rest. Memory stays about ``2 * limit`` whatever the command prints."""

    __slots__ = ("_limit", "_tail", "_tail_size", "head", "total")

    def __init__(self, limit: int) -> None:
        self._limit = max(limit, 1)
        self.head = bytearray()
        self._tail: deque[bytes] = deque()
        self._tail_size = 0
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self._limit - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
            if not chunk:
                return
        self._tail.append(chunk)
        self._tail_size += len(chunk)
        # Drop whole chunks from the front while the rest still covers the limit.
        while self._tail and self._tail_size - len(self._tail[0]) >= self._limit:
            self._tail_size -= len(self._tail.popleft())

    @property
    def tail(self) -> bytes:
        data = b"".join(self._tail)
        return data[-self._limit :]

    def render(self, max_chars: int) -> tuple[str, bool]:
        """The output as text of at most ``max_chars`` characters (a note included), and whether
        anything was cut. Undecodable bytes become U+FFFD; binary output is only described."""
        if b"\x00" in self.head[:BINARY_PROBE]:
            note = (
                f"[binary output: {self.total:,} bytes not shown; redirect it to a file, or "
                "pipe it through a filter such as `xxd | head`]"
            )
            return note[:max_chars], True
        kept = len(self.head) + self._tail_size
        if kept >= self.total:  # nothing was dropped: the whole output is here
            text = _decode(bytes(self.head) + b"".join(self._tail))
            if len(text) <= max_chars:
                return text, False
        head_text = _decode(bytes(self.head))
        tail_text = _decode(self.tail)
        if kept >= self.total:  # everything is here, but too long: cut the whole text
            whole = head_text + tail_text
            head_text, tail_text = whole, whole
        # The note's width depends on the count it shows: room for the widest is kept.
        budget = max(max_chars - len(_note(self.total, "")), 0)
        head_part = head_text[: budget // 2]
        tail_room = budget - len(head_part)
        tail_part = tail_text[len(tail_text) - tail_room :] if tail_room else ""
        shown = len(head_part.encode("utf-8", "replace")) + len(
            tail_part.encode("utf-8", "replace")
        )
        note = _note(max(self.total - shown, 0), head_part)
        return (head_part + note + tail_part)[:max_chars], True


def _note(cut: int, before: str) -> str:
    """The line saying how much was cut, on a line of its own after ``before``."""
    lead = "" if not before or before.endswith("\n") else "\n"
    return f"{lead}[... {cut:,} bytes of output cut here ...]\n"


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "replace")
