"""The messages and details of the pipeline's early refusals and of failed bodies."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

from fastgate.model.rendering import exception_line
from fastgate.model.results import ErrorCode, ToolFault
from fastgate.pipeline.invocation import ABORTED, TIMEOUT, Outcome
from fastgate.schema import ValidationIssue
from fastgate.tools import ToolDefinition

# difflib's ratio is 2*M/(len(a)+len(b)): against names of at most 64 characters, a name longer
# than this cannot reach the cutoff of 0.6, so it is not compared (difflib's time grows with
# the square of the length: a 4 MB name held the event loop for a second).
_LONGEST_CLOSE = 149
_SHOWN_NAME = 100  # characters of an unknown name quoted back


def unknown_tool(name: str, visible: Iterable[str]) -> tuple[str, dict[str, Any]]:
    names = sorted(visible)
    close: list[str] = []
    if len(name) <= _LONGEST_CLOSE:
        close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    if len(name) > _SHOWN_NAME:
        name = name[:_SHOWN_NAME] + f"... ({len(name)} characters)"
    if close:
        hint = "Did you mean " + " or ".join(repr(c) for c in close) + "?"
    elif names:
        shown = ", ".join(names[:20]) + (", ..." if len(names) > 20 else "")
        hint = f"Available tools: {shown}."
    else:
        hint = "No tools are available here."
    return f"There is no tool named {name!r}. {hint}", {"suggestions": close}


def not_an_object(args: Any) -> str:
    """Arguments that are not an object, named in JSON's terms (the frozen array the pipeline
    made of a list is an array)."""
    if isinstance(args, (list, tuple)):
        kind = "an array"
    elif isinstance(args, str):
        kind = "a string"
    elif isinstance(args, bool):
        kind = "a boolean"
    elif args is None:
        kind = "null"
    elif isinstance(args, (int, float)):
        kind = "a number"
    else:
        kind = type(args).__name__
    return f"Tool arguments must be a JSON object (named fields), got {kind}."


def invalid_args(
    tool_name: str, issues: list[ValidationIssue], limit: int | None = None
) -> tuple[str, dict[str, Any]]:
    """The refusal of arguments with ``issues``; ``limit``: the most the validator reports (at
    it, the model is told that more may follow once these are fixed)."""
    lines = [f"Invalid arguments for {tool_name}:"]
    lines += [f"- {issue.message}" for issue in issues]
    details: dict[str, Any] = {
        "issues": [
            {"path": _shown_path(issue.path), "keyword": issue.keyword, "message": issue.message}
            for issue in issues
        ]
    }
    if limit is not None and len(issues) >= limit:
        lines.append(
            f"(Validation stopped at {limit} issues; there may be more once these are fixed.)"
        )
        details["truncated"] = True
    return "\n".join(lines), details


_PATH_HEAD, _PATH_TAIL, _KEY_CHARS = 4, 6, 60


def _shown_path(path: Any) -> list[Any]:
    """An issue's path as the details show it: keys past 60 characters cut, and a path deeper
    than ten steps as its first four and last six, around a marker (the model chose the keys
    and the depth: the refusal must not echo megabytes)."""
    steps = [
        step[: _KEY_CHARS - 1] + "…" if isinstance(step, str) and len(step) > _KEY_CHARS else step
        for step in (path if len(path) <= _PATH_HEAD + _PATH_TAIL + 1 else _ends(path))
    ]
    return steps


def _ends(path: Any) -> list[Any]:
    left = len(path) - _PATH_HEAD - _PATH_TAIL
    return [*path[:_PATH_HEAD], f"…({left} more)…", *path[-_PATH_TAIL:]]


def failure_of(
    tool: ToolDefinition, outcome: Outcome
) -> tuple[ErrorCode, str, dict[str, Any], bool, str | float | None]:
    """(code, message, details, retryable, retry_after) of a body that did not return."""
    details: dict[str, Any] = {}
    if outcome.runaway is not None:
        details["still_running"] = True
        details["holds"] = "its slot, gate passage and file locks until it ends"
    if outcome.kind == TIMEOUT:
        return (
            ErrorCode.TIMEOUT,
            f"{tool.name} did not finish within {tool.timeout:g}s and was stopped.",
            details,
            False,
            None,
        )
    if outcome.kind == ABORTED:
        return (
            ErrorCode.ABORTED,
            "The call was cancelled while running; it may have had side effects.",
            details,
            False,
            None,
        )
    exc = outcome.error
    assert exc is not None
    if isinstance(exc, ToolFault):  # the body chose its code and words
        details.update(exc.details)
        return exc.code, exc.message, details, exc.retryable, exc.retry_after
    details["type"] = type(exc).__name__
    message = f"{tool.name} raised {exception_line(exc)}"
    return ErrorCode.TOOL_ERROR, message, details, False, None
