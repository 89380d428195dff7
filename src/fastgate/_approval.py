"""Stage 10 of the pipeline: asking the approver, one prompt at a time per session."""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

from fastgate._holds import Aborted, until_cancelled
from fastgate.approvals import ApprovalRequest, ApprovalResponse, ApprovalStore
from fastgate.context import ExecutionContext
from fastgate.permissions import PermissionResolver, RuleDecision
from fastgate.results import ErrorCode
from fastgate.tools import ToolDefinition

log = logging.getLogger("fastgate.executor")


class Refusal(NamedTuple):
    """The call may not run, and why (the executor turns it into the result)."""

    code: ErrorCode
    message: str
    details: dict[str, Any]


async def ask_approval(
    approvals: ApprovalStore,
    ctx: ExecutionContext,
    request: ApprovalRequest,
    rule: RuleDecision,
    reason: str,
) -> ApprovalResponse | Refusal:
    """The approver's valid answer, or a refusal (no approver, approver failed or gave no answer).

    Prompts are serialized per session; a request whose signature was approved for its session
    while it queued is answered without a prompt. ``Aborted`` if ``ctx.cancel`` fires meanwhile.
    """
    approver = ctx.approver
    if approver is None:
        return Refusal(
            ErrorCode.PERMISSION_DENIED,
            f"This call needs approval ({reason}), and no approver is available.",
            {"reason": "no_approver"},
        )
    session_id = ctx.session_id
    lock = approvals.prompt_lock(session_id)
    cancel = ctx.cancel
    await (
        until_cancelled(lock.acquire(), cancel, undo=lambda _: lock.release())
        if cancel is not None
        else lock.acquire()
    )
    try:
        if not rule.sensitive and approvals.is_approved(session_id, rule.signature):
            return ApprovalResponse(True, "session")  # granted while this one queued
        try:
            pending = approver(request)
            answer: object = await (
                until_cancelled(pending, cancel) if cancel is not None else pending
            )
        except Aborted:
            raise
        except Exception as exc:
            return Refusal(
                ErrorCode.PERMISSION_DENIED,
                f"The approver failed ({type(exc).__name__}: {exc}); the call was not run.",
                {"reason": "approver_error"},
            )
    finally:
        lock.release()
    if not isinstance(answer, ApprovalResponse):  # an approver is user code: check it
        return Refusal(
            ErrorCode.PERMISSION_DENIED,
            "The approver gave no valid answer; the call was not run.",
            {"reason": "approver_error"},
        )
    return answer


def remember_approval(
    response: ApprovalResponse,
    approvals: ApprovalStore,
    resolver: PermissionResolver,
    tool: ToolDefinition,
    args: Any,
    ctx: ExecutionContext,
    rule: RuleDecision,
) -> str | None:
    """Keep a granted approval for its scope; returns a note for the result when it could not be
    kept as asked."""
    if response.scope == "session" and not rule.sensitive:
        approvals.approve(ctx.session_id, rule.signature)
    elif response.scope == "project":
        try:
            resolver.record_project_approval(tool, args, ctx)
        except Exception as exc:  # the call was approved; only remembering it failed
            # Not expressible as a rule (or not writable): keep it for the session instead,
            # unless it touches a sensitive file (those are asked every time).
            if not rule.sensitive:
                approvals.approve(ctx.session_id, rule.signature)
            log.warning("could not record the project approval: %s", exc)
            return f"(approved for this session only: the project rule could not be saved: {exc})"
    return None
