"""Gitignore-style path patterns, translated to regular expressions over canonical paths.

- ``*`` any run of characters except ``/``; ``?`` one such character; ``[...]`` a class
  (``[!...]`` negated, never ``/``); ``**`` as a whole segment: any number of directories;
  ``\\x`` a literal ``x``.
- A pattern with no ``/`` (other than a trailing one) matches a basename at any depth; one that
  starts with ``**/`` matches at any depth of the absolute path.
- Claude Code's anchors: ``//x`` is the absolute ``/x``; ``~/x`` is under the home directory;
  ``/x`` is relative to the project (the workspace root, unless a ``project`` directory is
  given: the one a settings file stands for); ``./x`` and other patterns containing ``/`` are
  relative to the workspace root.
- A pattern that matches a directory also matches everything below it (a trailing ``/`` says
  the pattern names a directory; it matches the same paths).

Matching always runs on absolute canonical paths (``canonical_path``), so ``a/../.env`` and a
symlink to ``.env`` are seen as ``<root>/.env``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Literal

Anchor = Literal["anywhere", "root", "absolute"]


@dataclass(frozen=True, slots=True)
class PathPattern:
    text: str
    anchor: Anchor
    body: str  # regex fragment for the part after the anchor
    prefix: str = ""  # the absolute directory of an "absolute" pattern
    segments: tuple[str, ...] = ()  # the glob's segments after the anchor

    def regex(self, root: str) -> str:
        """A full-match regex over absolute paths; ``root`` is the canonical workspace root."""
        tail = self.body + "(?:/.*)?" if self.body else "(?:/.*)?"
        if self.anchor == "anywhere":
            return ".*/" + tail  # paths are absolute: every component follows a "/"
        base = root if self.anchor == "root" else self.prefix
        base = base.rstrip("/")
        return re.escape(base) + ("/" + tail if self.body else tail)


def compile_path_pattern(text: str, project: str | None = None) -> PathPattern:
    """Parse one pattern; ``ValueError`` for an empty or malformed one. ``project``: the
    absolute directory ``/x`` is relative to (``None``: the workspace root)."""
    if not text or text.strip() != text:
        raise ValueError("empty path pattern or surrounding whitespace")
    if "\x00" in text:
        raise ValueError("NUL byte in path pattern")
    pattern = text
    anchor: Anchor
    prefix = ""
    if pattern.startswith("~/") or pattern == "~":
        anchor, prefix, pattern = "absolute", os.path.expanduser("~"), pattern[2:]
    elif pattern.startswith("//"):
        anchor, prefix, pattern = "absolute", "/", pattern.lstrip("/")
    elif pattern.startswith("/"):
        pattern = pattern.lstrip("/")
        if project is None:
            anchor = "root"
        else:
            anchor, prefix = "absolute", project
    elif pattern.startswith("./") or pattern == ".":
        anchor, pattern = "root", pattern[2:]
    elif pattern.startswith("**/"):
        anchor, pattern = "anywhere", pattern[3:]
    elif "/" in pattern.rstrip("/"):
        anchor = "root"
    else:
        anchor = "anywhere"
    pattern = pattern.rstrip("/")
    segments: list[str] = []
    for segment in pattern.split("/"):
        if segment in ("", ".") or (segment == "**" and segments[-1:] == ["**"]):
            continue  # ``**/**`` is ``**``
        segments.append(segment)
    if ".." in segments:
        raise ValueError("'..' is not allowed in a path pattern")
    return PathPattern(text, anchor, _segments_regex(segments), prefix, tuple(segments))


def tail_regex(pattern: PathPattern) -> str | None:
    """A full-match regex over a relative path (``a/b``) for "this path, below some directory
    not known in advance, may be one the pattern matches": some tail of the pattern, holding a
    segment other than ``**``, matches the path's first components (what follows them is
    below). The unknown directory itself is not assumed to be a match: a tail of only ``**``
    (``**/.ssh/**``'s last segment) is left out. None when no tail qualifies."""
    segments = [*(c for c in pattern.prefix.split("/") if c), *pattern.segments]
    tails = [
        _segments_regex(segments[start:])
        for start in range(len(segments))
        if any(segment != "**" for segment in segments[start:])
    ]
    if not tails:
        return None
    return "(?:" + "|".join(f"(?:{t})" for t in tails) + ")(?:/.*)?"


def _segments_regex(segments: list[str]) -> str:
    out = ""
    need_separator = False
    for index, segment in enumerate(segments):
        if segment == "**":
            if index == len(segments) - 1:
                if need_separator:
                    # ``x/**``: everything below x, and x itself (a directory holding the files)
                    out = f"(?:{out}(?:/.*)?)"
                else:  # ``**`` alone, or after another ``**``
                    out += ".*"
            else:  # any number of directories, each followed by its separator
                out += ("/" if need_separator else "") + "(?:.*/)?"
                need_separator = False
            continue
        out += ("/" if need_separator else "") + _segment_regex(segment)
        need_separator = True
    return out


def _segment_regex(segment: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(segment):
        c = segment[i]
        if c == "*":
            while i + 1 < len(segment) and segment[i + 1] == "*":
                i += 1
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "\\" and i + 1 < len(segment):
            i += 1
            out.append(re.escape(segment[i]))
        elif c == "[":
            end, cls = _char_class(segment, i)
            if cls is None:
                out.append(re.escape(c))
            else:
                out.append(cls)
                i = end
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def _char_class(segment: str, start: int) -> tuple[int, str | None]:
    """The regex of a ``[...]`` class starting at ``start`` and the index of its ``]``."""
    i = start + 1
    negate = i < len(segment) and segment[i] in "!^"
    if negate:
        i += 1
    first = i
    members: list[str] = []
    while i < len(segment):
        c = segment[i]
        if c == "]" and i > first:
            body = "".join(members)
            return i, f"[^/{body}]" if negate else f"(?!/)[{body}]"
        if c == "\\" and i + 1 < len(segment):
            i += 1
            c = segment[i]
            members.append(re.escape(c))
        elif c == "-":
            members.append("-")
        else:
            members.append(re.escape(c) if c in "\\^[]" else c)
        i += 1
    return start, None
