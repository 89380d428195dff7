"""Regular expressions matched in time linear in the text (RE2), for patterns that come from
settings files and are matched against what a model chose (paths, command words): a rule such
as ``Read(*a*a*a*a*a*b)`` on Python's backtracking engine takes minutes on one long name.

``linear(regex, fold)`` compiles a regex in the syntax RE2 and Python's ``re`` share (no
lookaround, no back-references) with ``re.DOTALL`` semantics; text is matched as UTF-8 with
surrogates passed through, so a name that is not UTF-8 on disk (decoded with
``surrogateescape``) is one character per such byte.
"""

from __future__ import annotations

from typing import Any

NEVER = r"[^\x00-\x{10ffff}]"  # a regex that matches nothing (RE2 has no ``(?!)``)
_MAX_MEM = 64 << 20


class LinearRegex:
    """A compiled pattern: ``fullmatch`` and ``search`` answer True or False."""

    __slots__ = ("_compiled", "pattern")

    def __init__(self, regex: str, fold: bool = False) -> None:
        import re2  # a dependency; imported when the first rule is compiled

        options = re2.Options()
        options.dot_nl = True
        options.case_sensitive = not fold
        options.log_errors = False
        options.max_mem = _MAX_MEM
        self.pattern = regex
        try:
            self._compiled: Any = re2.compile(_utf8(regex), options)
        except re2.error as exc:
            raise ValueError(f"the pattern cannot be matched in linear time: {exc}") from None

    def fullmatch(self, text: str) -> bool:
        return self._compiled.fullmatch(_utf8(text)) is not None

    def search(self, text: str) -> bool:
        return self._compiled.search(_utf8(text)) is not None

    def __repr__(self) -> str:
        return f"LinearRegex({self.pattern!r})"


def linear(regex: str, fold: bool = False) -> LinearRegex:
    return LinearRegex(regex, fold)


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")
