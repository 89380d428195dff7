"""Refusals and failures: the decision merge, and messages written for the model (what was
wrong, what to do instead)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

from fastgate.decision import Decision, DecisionSource
from fastgate.invocation import ABORTED, TIMEOUT, Outcome
from fastgate.permissions import RuleDecision
from fastgate.results import ErrorCode, ToolFault
from fastgate.schema import ValidationIssue
from fastgate.tools import ToolDefinition


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


def merge_decision(
    rule: RuleDecision, hook: Decision | None, hook_reason: str | None
) -> tuple[Decision, DecisionSource, str]:
    """Strictest wins; with no decision at all the answer is ASK. A hook that asks as the mode
    does is named as the source: only the mode's own ask may be covered by a session approval."""
    if hook is not None and (
        hook.strictness > rule.decision.strictness
        or (
            hook is Decision.ASK
            and rule.decision is Decision.ASK
            and rule.source is DecisionSource.MODE
        )
    ):
        return hook, DecisionSource.HOOK, hook_reason or f"a PreToolUse hook said {hook}"
    return rule.decision, rule.source, rule.reason


def failure_of(
    tool: ToolDefinition, outcome: Outcome
) -> tuple[ErrorCode, str, dict[str, Any], bool]:
    """(code, message, details, retryable) of a body that did not return."""
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
        )
    if outcome.kind == ABORTED:
        return (
            ErrorCode.ABORTED,
            "The call was cancelled while running; it may have had side effects.",
            details,
            False,
        )
    exc = outcome.error
    assert exc is not None
    if isinstance(exc, ToolFault):  # the body chose its code and words
        details.update(exc.details)
        return exc.code, exc.message, details, exc.retryable
    details["type"] = type(exc).__name__
    message = f"{tool.name} raised {type(exc).__name__}: {exc}"
    return ErrorCode.TOOL_ERROR, message, details, False
