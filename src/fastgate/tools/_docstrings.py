"""Read a tool's description and per-parameter descriptions from its docstring.

Google style (``Args:`` / ``Arguments:`` / ``Parameters:`` followed by indented ``name: text`` or
``name (type): text`` entries) and NumPy style (``Parameters`` underlined with dashes, then
``name : type`` lines with indented text) are understood. The description is the text before the
first section.
"""

from __future__ import annotations

import inspect
import re

_GOOGLE_HEADER = re.compile(r"^(Args|Arguments|Parameters|Params|Keyword Args):\s*$")
_GOOGLE_ENTRY = re.compile(r"^(\*{0,2}[A-Za-z_]\w*)\s*(\([^)]*\))?\s*:\s*(.*)$")
_NUMPY_ENTRY = re.compile(r"^(\*{0,2}[A-Za-z_]\w*)\s*(:.*)?$")
_ANY_HEADER = re.compile(r"^[A-Z][A-Za-z ]*:\s*$")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """(description, {parameter name: description}) of a docstring."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    params: dict[str, str] = {}
    i = 0
    in_summary = True
    while i < len(lines):
        line = lines[i]
        numpy_header = (
            i + 1 < len(lines)
            and re.fullmatch(r"-{3,}", lines[i + 1].strip()) is not None
            and line.strip() != ""
        )
        if numpy_header:
            in_summary = False
            if line.strip() in ("Parameters", "Other Parameters", "Arguments"):
                i = _numpy_section(lines, i + 2, params)
            else:
                i += 2
            continue
        if _GOOGLE_HEADER.match(line.strip()) and not line.startswith((" ", "\t")):
            in_summary = False
            i = _google_section(lines, i + 1, params)
            continue
        if _ANY_HEADER.match(line) and not line.startswith((" ", "\t")):
            in_summary = False
        if in_summary:
            summary.append(line)
        i += 1
    return "\n".join(summary).strip(), params


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _google_section(lines: list[str], i: int, params: dict[str, str]) -> int:
    base: int | None = None
    current: str | None = None
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        indent = _indent(line)
        if indent == 0:
            break
        if base is None:
            base = indent
        entry = _GOOGLE_ENTRY.match(line.strip())
        if indent == base and entry:
            current = entry.group(1).lstrip("*")
            params[current] = entry.group(3).strip()
        elif current is not None and indent > base:
            params[current] = (params[current] + " " + line.strip()).strip()
        i += 1
    return i


def _numpy_section(lines: list[str], i: int, params: dict[str, str]) -> int:
    current: str | None = None
    while i < len(lines):
        line = lines[i]
        if (
            i + 1 < len(lines)
            and re.fullmatch(r"-{3,}", lines[i + 1].strip())
            and line.strip()
            and _indent(line) == 0
        ):
            break  # the next section
        if not line.strip():
            i += 1
            continue
        entry = _NUMPY_ENTRY.match(line)
        if _indent(line) == 0 and entry:
            current = entry.group(1).lstrip("*")
            params[current] = ""
        elif current is not None:
            params[current] = (params[current] + " " + line.strip()).strip()
        i += 1
    return i
