"""Glob patterns as regular expressions over ``/``-separated relative paths.

``*`` any run of characters but ``/``; ``?`` one of them; ``[...]`` a class (``[!...]`` or
``[^...]`` negated); ``**`` as a whole segment any number of directories; ``{a,b}``
alternatives (nested allowed). ``glob``'s patterns are anchored at the search root (``*.py`` is
the top level, ``**/*.py`` every level, as in a shell); ``grep``'s ``glob`` filter follows
ripgrep's ``--glob``, where a pattern without ``/`` matches a file's name at any depth.
"""

from __future__ import annotations

import re

MAX_ALTERNATIVES = 256


class GlobError(ValueError):
    pass


def compile_glob(pattern: str, *, names_anywhere: bool = False) -> re.Pattern[str]:
    if not pattern or "\x00" in pattern:
        raise GlobError("the pattern is empty or contains a NUL byte")
    if pattern.startswith("./"):
        pattern = pattern[2:]
    pattern = pattern.lstrip("/") if names_anywhere else pattern
    alternatives = _expand_braces(pattern)
    bodies = []
    for alternative in alternatives:
        body = _translate(alternative)
        if names_anywhere and "/" not in alternative.rstrip("/"):
            body = "(?:.*/)?" + body
        bodies.append(body)
    return re.compile("(?:" + "|".join(bodies) + ")", re.DOTALL)


def _expand_braces(pattern: str) -> list[str]:
    """``a{b,c}d`` -> ``abd``, ``acd`` (innermost first; an unmatched brace is literal)."""
    out = [pattern]
    done: list[str] = []
    while out:
        current = out.pop()
        span = _innermost_braces(current)
        if span is None:
            done.append(current)
            continue
        start, end = span
        options = current[start + 1 : end].split(",")
        out.extend(current[:start] + option + current[end + 1 :] for option in options)
        if len(out) + len(done) > MAX_ALTERNATIVES:
            raise GlobError(f"the pattern expands to more than {MAX_ALTERNATIVES} alternatives")
    return sorted(set(done))


def _innermost_braces(text: str) -> tuple[int, int] | None:
    opened: int | None = None
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            opened = i
        elif c == "}" and opened is not None:
            if "," in text[opened:i]:
                return opened, i
            opened = None
        i += 1
    return None


def _translate(pattern: str) -> str:
    segments = pattern.split("/")
    out: list[str] = []
    trailing = pattern.endswith("/")
    if trailing:
        segments = segments[:-1]
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == "**":
            out.append(".*" if last else "(?:[^/]*/)*")
            continue
        out.append(_segment(segment) + ("" if last else "/"))
    return "".join(out)


def _segment(segment: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(segment):
        c = segment[i]
        if c == "\\" and i + 1 < len(segment):
            out.append(re.escape(segment[i + 1]))
            i += 2
            continue
        if c == "*":
            while i + 1 < len(segment) and segment[i + 1] == "*":
                i += 1
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = segment.find("]", i + 2 if segment[i + 1 : i + 2] in ("!", "^", "]") else i + 1)
            if end == -1:
                out.append(re.escape(c))
            else:
                inner = segment[i + 1 : end]
                negate = inner[:1] in ("!", "^")
                if negate:
                    inner = inner[1:]
                inner = inner.replace("\\", "\\\\").replace("[", "\\[")
                out.append(f"[{'^/' if negate else ''}{inner}]")
                i = end
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)
