"""Glob patterns as regular expressions over ``/``-separated paths: the one grammar of the
permission rules' path patterns and of the ``glob`` and ``grep`` built-ins.

The grammar is git's wildmatch in pathname mode:

- ``*`` any run of characters but ``/``; ``?`` one such character; ``**`` as a whole segment
  any number of directories (elsewhere it is ``*``); ``\\x`` a literal ``x``.
- ``[...]`` a class: members, ranges (``a-z``), ``\\x`` escapes; ``[!...]`` or ``[^...]``
  negated; a ``]`` first is a member; a ``[`` never closed is a literal ``[``. A class never
  matches ``/``: not negated (``[!a]``), not through a range that spans it (``[+-0]``). A range
  whose ends are reversed is an error.
- Empty and ``.`` segments are ignored (``./a//b`` is ``a/b``), ``**/**`` is ``**``, a
  trailing ``/`` is ignored; a ``..`` segment is an error (a pattern names canonical paths).
- ``{a,b}`` alternatives, nested allowed, only where the caller asks (``braces=True``).

What a pattern is anchored to is the caller's choice: ``compile_glob`` matches paths relative
to a directory (anchored there, or, with ``names_anywhere``, a pattern with no ``/`` but a
trailing one matches a name at any depth, as in ``.gitignore`` files and ripgrep's ``--glob``);
``compile_path_pattern`` adds Claude Code's anchors over absolute canonical paths. Every regex
here is meant to be compiled with ``re.DOTALL`` (a name may hold a newline); case folding is the
caller's flag. The regexes are in the syntax Python's ``re`` and RE2 share (no lookaround), and
translating a pattern takes time linear in its length.

The built-ins match a model's pattern against names in the workspace on the event loop, so
``compile_glob`` compiles with RE2 (``google-re2``, a dependency): matching is linear in
the path, where ``re`` backtracks (``*a*a*a*a*a*b`` against a long name of ``a``s would take
minutes). Patterns longer than ``MAX_PATTERN_CHARS``, or whose braces expand past
``MAX_EXPANDED_CHARS``, are refused.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Literal

MAX_ALTERNATIVES = 256  # brace expansion's bound: ``{a,b}{c,d}...`` grows exponentially
MAX_PATTERN_CHARS = 4096  # a built-in's pattern: as long as the longest path (PATH_MAX)
MAX_EXPANDED_CHARS = 16384  # the alternatives braces give, all together

Anchor = Literal["anywhere", "root", "absolute"]


class GlobError(ValueError):
    """A malformed pattern."""


# -- relative paths: the glob and grep built-ins ----------------------------------------------


class Glob:
    """A compiled glob pattern: ``matches(path)`` in time linear in the path (RE2)."""

    __slots__ = ("_compiled", "pattern")

    def __init__(self, regex: str, fold: bool) -> None:
        import re2  # imported when first needed: only the built-ins compile globs

        options = re2.Options()
        options.dot_nl = True  # a name may hold a newline
        options.case_sensitive = not fold
        options.log_errors = False
        options.max_mem = _RE2_MAX_MEM
        self.pattern = regex  # the regex, as in ``re.Pattern.pattern``
        try:
            # Text is matched as UTF-8 with surrogates passed through, so a name that is not
            # UTF-8 on disk (decoded with ``surrogateescape``) is one character per such byte.
            self._compiled = re2.compile(_utf8(regex), options)
        except re2.error as exc:  # too large for the memory RE2 is allowed
            raise GlobError(f"the pattern is too complex to match ({exc})") from None

    def matches(self, path: str) -> bool:
        """Whether the whole of ``path`` (relative, ``/``-separated) matches."""
        return self._compiled.fullmatch(_utf8(path)) is not None

    def __repr__(self) -> str:
        return f"Glob({self.pattern!r})"


_RE2_MAX_MEM = 64 << 20  # enough for the largest pattern MAX_EXPANDED_CHARS allows


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def compile_glob(
    pattern: str,
    *,
    names_anywhere: bool = False,
    below: bool = False,
    braces: bool = True,
    fold: bool = False,
) -> Glob:
    """A full-match matcher of paths relative to a directory (``a/b.py``). ``below``: a path
    below one the pattern matches matches too (gitignore's exclusions). ``GlobError`` for an
    empty, malformed or oversized pattern."""
    if not pattern or "\x00" in pattern:
        raise GlobError("the pattern is empty or contains a NUL byte")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise GlobError(
            f"the pattern is {len(pattern):,} characters long; at most {MAX_PATTERN_CHARS:,} "
            "are allowed"
        )
    bodies = []
    for alternative in expand_braces(pattern) if braces else [pattern]:
        body = segments_regex(split_segments(alternative))
        if names_anywhere and not anchored(alternative):
            body = "(?:.*/)?" + body
        bodies.append(body + "(?:/.*)?" if below else body)
    return Glob("|".join(f"(?:{body})" for body in bodies), fold)


def plain_globs(pattern: str) -> list[str] | None:
    """The pattern's alternatives, braces expanded, each spelled so that another
    gitignore-style matcher (ripgrep's ``--glob``) reads it as this module does: empty and
    ``.`` segments dropped, a leading ``/`` on an anchored one. ``None`` when an alternative
    holds a character such a matcher may read otherwise: a class (ripgrep's may match ``/``),
    an escape, a brace left, ``!`` or ``#`` (a negation, a comment), whitespace at either end
    (gitignore drops it)."""
    plain = []
    for alternative in expand_braces(pattern):
        if _NOT_PLAIN.search(alternative) or alternative != alternative.strip():
            return None
        joined = "/".join(split_segments(alternative))
        plain.append("/" + joined if anchored(alternative) else joined)
    return plain


_NOT_PLAIN = re.compile(r"[\\\[\]{}!#]")


def anchored(pattern: str) -> bool:
    """gitignore's rule: a pattern with a ``/`` other than a trailing one is anchored; one
    without matches a name at any depth."""
    return "/" in pattern.rstrip("/")


def expand_braces(pattern: str) -> list[str]:
    """``a{b,c}d`` -> ``abd``, ``acd`` (innermost first; a brace with no ``,`` in it, or not
    closed, is literal). ``GlobError`` past ``MAX_ALTERNATIVES``, or when the alternatives hold
    more than ``MAX_EXPANDED_CHARS`` characters together."""
    pending = [pattern]
    done: list[str] = []
    size = len(pattern)  # of the pending and the done alternatives together
    while pending:
        current = pending.pop()
        span = _innermost_braces(current)
        if span is None:
            done.append(current)
            continue
        start, end = span
        options = current[start + 1 : end].split(",")
        pending.extend(current[:start] + option + current[end + 1 :] for option in options)
        if len(pending) + len(done) > MAX_ALTERNATIVES:
            raise GlobError(f"the pattern expands to more than {MAX_ALTERNATIVES} alternatives")
        size += sum(len(p) for p in pending[-len(options) :]) - len(current)
        if size > MAX_EXPANDED_CHARS:
            raise GlobError(
                f"the pattern's alternatives hold more than {MAX_EXPANDED_CHARS:,} characters"
            )
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


# -- the translator -----------------------------------------------------------------------------


def split_segments(pattern: str) -> list[str]:
    """The pattern's segments: empty and ``.`` ones dropped, ``**/**`` collapsed. ``GlobError``
    for a ``..`` segment."""
    segments: list[str] = []
    for segment in pattern.split("/"):
        if segment in ("", ".") or (segment == "**" and segments[-1:] == ["**"]):
            continue
        if segment == "..":
            raise GlobError("'..' is not allowed in a pattern")
        segments.append(segment)
    return segments


def segments_regex(segments: list[str]) -> str:
    """The regex of a path made of these segments: ``**`` is any number of directories (a last
    ``**`` everything below, at least one character)."""
    out = ""
    need_separator = False
    for index, segment in enumerate(segments):
        if segment == "**":
            if index == len(segments) - 1:
                out += "/.+" if need_separator else ".*"
            else:  # any number of directories, each followed by its separator
                out += ("/" if need_separator else "") + "(?:.*/)?"
                need_separator = False
            continue
        out += ("/" if need_separator else "") + segment_regex(segment)
        need_separator = True
    return out


def segment_regex(segment: str) -> str:
    """The regex of one segment (no ``/`` in it): nothing it matches holds a ``/``. Linear in
    the segment's length: a class is scanned only when a ``]`` can still close it."""
    out: list[str] = []
    last_close = _last_unescaped_close(segment)
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
            end, cls = _char_class(segment, i) if i + 1 < last_close else (i, None)
            if cls is None:
                out.append(re.escape(c))
            else:
                out.append(cls)
                i = end
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def _last_unescaped_close(segment: str) -> int:
    """The index of the segment's last ``]`` not escaped by a ``\\`` (-1: none). Whether a
    ``\\`` escapes depends only on the run of ``\\`` before it, wherever a scan starts, so a
    ``[`` at or past this index can never be closed (``_char_class`` would scan to the end for
    each such ``[``: quadratic)."""
    last = -1
    i = 0
    while i < len(segment):
        if segment[i] == "\\":
            i += 2
            continue
        if segment[i] == "]":
            last = i
        i += 1
    return last


def _char_class(segment: str, start: int) -> tuple[int, str | None]:
    """The regex of the ``[...]`` class opening at ``start`` and the index of its ``]``;
    ``None`` when it is never closed."""
    i = start + 1
    negate = i < len(segment) and segment[i] in "!^"
    if negate:
        i += 1
    first = i
    ranges: list[tuple[str, str]] = []
    while i < len(segment):
        c = segment[i]
        if c == "]" and i > first:
            return i, _class_regex(ranges, negate)
        if c == "\\" and i + 1 < len(segment):
            i += 1
            c = segment[i]
        after = i + 1
        if (
            segment[after : after + 1] == "-"
            and after + 1 < len(segment)
            and segment[after + 1] != "]"
        ):
            high_at = after + 1
            if segment[high_at] == "\\" and high_at + 1 < len(segment):
                high_at += 1
            ranges.append((c, segment[high_at]))
            i = high_at + 1
        else:
            ranges.append((c, c))  # a "-" first or last is a member
            i += 1
    return start, None


def _class_regex(ranges: list[tuple[str, str]], negate: bool) -> str:
    members: list[tuple[str, str]] = []
    for low, high in ranges:
        if low > high:
            raise GlobError(f"the range {low}-{high} in a class is reversed")
        # ``/`` is never a member: a range that holds it (``+-0``) is cut in two around it.
        if low <= "/" <= high:
            if low < "/":
                members.append((low, "."))
            if high > "/":
                members.append(("0", high))
        else:
            members.append((low, high))
    body = "".join(
        re.escape(low) if low == high else f"{re.escape(low)}-{re.escape(high)}"
        for low, high in members
    )
    if negate:
        return f"[^/{body}]"
    return f"[{body}]" if body else "[^\\s\\S]"  # (a class of "/" alone matches nothing)


# -- absolute paths: permission rules ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PathPattern:
    """A permission rule's path pattern: Claude Code's anchors over the shared grammar.

    - A pattern with no ``/`` (but a trailing one) matches a name at any depth; one that starts
      with ``**/`` matches at any depth of the absolute path.
    - ``//x`` is the absolute ``/x``; ``~/x`` is under the home directory; ``/x`` is relative
      to the project (the workspace root, unless ``project`` is given: the directory a settings
      file stands for); ``./x`` and other patterns holding a ``/`` are relative to the workspace
      root.
    - A pattern that matches a directory also matches everything below it, and ``x/**`` matches
      ``x`` itself (a sensitive directory copied whole is caught).
    """

    text: str
    anchor: Anchor
    body: str  # the regex of the part after the anchor
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
    """Parse one rule's pattern; ``GlobError`` (a ``ValueError``) for an empty or malformed one.
    ``project``: the absolute directory ``/x`` is relative to (``None``: the workspace root)."""
    if not text or text.strip() != text:
        raise GlobError("empty path pattern or surrounding whitespace")
    if "\x00" in text:
        raise GlobError("NUL byte in path pattern")
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
    elif anchored(pattern):
        anchor = "root"
    else:
        anchor = "anywhere"
    segments = split_segments(pattern)
    return PathPattern(text, anchor, _rule_regex(segments), prefix, tuple(segments))


def _rule_regex(segments: list[str]) -> str:
    """As ``segments_regex``, but a last ``**`` after a segment also matches the directory
    itself (everything below it follows from ``PathPattern.regex``)."""
    if len(segments) > 1 and segments[-1] == "**":
        return segments_regex(segments[:-1])
    return segments_regex(segments)


def tail_regex(pattern: PathPattern) -> str | None:
    """A full-match regex over a relative path (``a/b``) for "this path, below some directory
    not known in advance, may be one the pattern matches": some tail of the pattern, holding a
    segment other than ``**``, matches the path's first components (what follows them is
    below). A pattern that matches at any depth (``.env``, ``**/.ssh/**``) may match at any
    depth of the path too: ``srv/.env`` below an unknown directory may be a ``.env``. The
    unknown directory itself is not assumed to be a match: a tail of only ``**``
    (``**/.ssh/**``'s last segment) is left out. None when no tail qualifies."""
    segments = [*(c for c in pattern.prefix.split("/") if c), *pattern.segments]
    if pattern.anchor == "anywhere":
        segments = ["**", *segments]
    tails = [
        _rule_regex(segments[start:])
        for start in range(len(segments))
        if any(segment != "**" for segment in segments[start:])
    ]
    if not tails:
        return None
    return "(?:" + "|".join(f"(?:{t})" for t in tails) + ")(?:/.*)?"
