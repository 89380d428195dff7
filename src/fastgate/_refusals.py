"""Messages for refused calls, written for the model: what was wrong and what to do instead."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

from fastgate.schema import ValidationIssue


def unknown_tool(name: str, visible: Iterable[str]) -> tuple[str, dict[str, Any]]:
    names = sorted(visible)
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    if close:
        hint = "Did you mean " + " or ".join(repr(c) for c in close) + "?"
    elif names:
        shown = ", ".join(names[:20]) + (", ..." if len(names) > 20 else "")
        hint = f"Available tools: {shown}."
    else:
        hint = "No tools are available here."
    return f"There is no tool named {name!r}. {hint}", {"suggestions": close}


def not_an_object(args: Any) -> str:
    kind = {
        list: "an array",
        tuple: "an array",
        str: "a string",
        bool: "a boolean",
        type(None): "null",
        int: "a number",
        float: "a number",
    }.get(type(args))
    return (
        f"Tool arguments must be a JSON object (named fields), got {kind or type(args).__name__}."
    )


def invalid_args(tool_name: str, issues: list[ValidationIssue]) -> tuple[str, dict[str, Any]]:
    lines = [f"Invalid arguments for {tool_name}:"]
    lines += [f"- {issue.message}" for issue in issues]
    details = {
        "issues": [
            {"path": list(issue.path), "keyword": issue.keyword, "message": issue.message}
            for issue in issues
        ]
    }
    return "\n".join(lines), details
