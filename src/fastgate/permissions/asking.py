"""Stage 10 of the pipeline: asking the approver, one prompt at a time per session.

What a session approval covers: only an ASK that came from the mode's default. An ASK rule, a
sensitive or protected path and a hook's ask are asked every time, so neither a remembered
approval nor one granted while a call queued lets such a call through unasked.

Approvers may be async or plain functions. A plain function runs in a thread of its own, not
on the event loop: approvers wait for people (``input()``), and a blocking prompt must hold back
neither the other sessions nor the loop's worker threads (file I/O runs there).
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

from fastgate.admission.holds import Aborted, until_cancelled
from fastgate.model.approvals import ApprovalRequest, ApprovalResponse
from fastgate.model.context import ExecutionContext
from fastgate.model.decision import Decision, DecisionSource, PermissionMode
from fastgate.model.rendering import exception_line
from fastgate.model.results import ErrorCode
from fastgate.permissions.approval_store import ApprovalStore
from fastgate.permissions.resolver import PermissionResolver, RuleDecision
from fastgate.tools import ToolDefinition

log = logging.getLogger("fastgate.pipeline.executor")


class Refusal(NamedTuple):
    """The call may not run, and why (the executor turns it into the result)."""

    code: ErrorCode
    message: str
    details: dict[str, Any]


def session_may_cover(rule: RuleDecision, source: str = DecisionSource.MODE) -> bool:
    """Whether a session approval may stand for this decision: an ASK of the mode's default,
    not an ASK rule, a sensitive or protected path, or a hook (``source``: the merged
    decision's source)."""
    return (
        rule.decision is Decision.ASK
        and rule.source is DecisionSource.MODE
        and not rule.sensitive
        and source == DecisionSource.MODE
    )


async def ask_approval(
    approvals: ApprovalStore,
    ctx: ExecutionContext,
    request: ApprovalRequest,
    rule: RuleDecision,
    reason: str,
    mode: PermissionMode = PermissionMode.DEFAULT,
) -> ApprovalResponse | Refusal:
    """The approver's valid answer, or a refusal (DONT_ASK mode, no approver, the approver
    failed or gave no answer).

    Prompts are serialized per session; a request the session approved while it queued is
    answered without a prompt when a session approval may cover it. ``Aborted`` if
    ``ctx.cancel`` fires meanwhile.
    """
    if mode is PermissionMode.DONT_ASK:
        return Refusal(
            ErrorCode.PERMISSION_DENIED,
            f"Not permitted: {reason}. DONT_ASK mode never asks: what would need approval is "
            "refused.",
            {"reason": "dont_ask", "source": request.source},
        )
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
    prompt = _Prompt(lock.release)
    try:
        if session_may_cover(rule, request.source) and approvals.is_approved(
            session_id, rule.signature
        ):
            return ApprovalResponse(True, "session")  # granted while this one queued
        answer = await prompt.ask(approver, request, cancel)
    finally:
        prompt.done()
    if isinstance(answer, Refusal):
        return answer
    if not isinstance(answer, ApprovalResponse):  # an approver is user code: check it
        return Refusal(
            ErrorCode.PERMISSION_DENIED,
            "The approver gave no valid answer; the call was not run.",
            {"reason": "approver_error"},
        )
    return answer


class _Prompt:
    """One prompt: the approver's call, and the release of the session's prompt lock once the
    prompt is closed (for a plain function still running in its thread after the call stopped
    waiting, when that thread returns: one open prompt per session)."""

    __slots__ = ("_release", "_thread_done")

    def __init__(self, release: Callable[[], None]) -> None:
        self._release = release
        self._thread_done: asyncio.Future[Any] | None = None

    async def ask(self, approver: Any, request: ApprovalRequest, cancel: Any) -> object:
        """The approver's answer (not yet checked), or a ``Refusal`` when it failed."""
        try:
            if _is_async(approver):
                pending: Any = approver(request)
            else:
                self._thread_done = _in_thread(approver, request)
                pending = asyncio.shield(self._thread_done)
            answer: object = await (
                until_cancelled(pending, cancel) if cancel is not None else pending
            )
            if inspect.isawaitable(answer):  # a plain function that handed back a coroutine
                answer = await (until_cancelled(answer, cancel) if cancel is not None else answer)
            return answer
        except Aborted:
            raise
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
            return _failed("raised CancelledError")  # the approver's own, not a cancellation
        except Exception as exc:
            return _failed(exception_line(exc))

    def done(self) -> None:
        thread_done = self._thread_done
        if thread_done is not None and not thread_done.done():
            thread_done.add_done_callback(lambda _: self._release())
        else:
            self._release()


def _failed(what: str) -> Refusal:
    return Refusal(
        ErrorCode.PERMISSION_DENIED,
        f"The approver failed ({what}); the call was not run.",
        {"reason": "approver_error"},
    )


def _is_async(approver: Any) -> bool:
    """An ``async def`` function (or a partial of one), or an object whose ``__call__`` is."""
    return inspect.iscoroutinefunction(approver) or inspect.iscoroutinefunction(
        getattr(approver, "__call__", None)  # noqa: B004 - the method, not callability
    )


def _in_thread(approver: Callable[[ApprovalRequest], Any], request: ApprovalRequest) -> Any:
    """Run a plain approver in a daemon thread of its own; a future of the loop settles with
    what it returned or raised."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def run() -> None:
        try:
            outcome: tuple[bool, Any] = (True, context.run(approver, request))
        except BaseException as exc:  # a thread must not die with it: the call is refused
            error = exc if isinstance(exc, Exception) else RuntimeError(type(exc).__name__)
            outcome = (False, error)
        try:
            loop.call_soon_threadsafe(_settle, future, outcome)
        except RuntimeError:
            pass  # the loop is closed: nobody waits any more

    threading.Thread(target=run, name="fastgate-approver", daemon=True).start()
    return future


def _settle(future: asyncio.Future[Any], outcome: tuple[bool, Any]) -> None:
    if future.done():
        return
    ok, value = outcome
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


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
    if response.scope == "once":
        return None
    kept_for = "this session"
    why = ""
    if response.scope == "project":
        try:
            written = resolver.record_project_approval(tool, args, ctx)
        except Exception as exc:  # the call was approved; only remembering it failed
            log.warning("could not record the project approval: %s", exc)
            why = f"the project rule could not be saved: {exc}"
        else:
            if session_may_cover(rule):
                return None
            # Saved, but an ask rule (or a hook) still asks before every such call.
            return f"(saved {written} for the project, yet {_asked_every_time(rule)})"
    if not session_may_cover(rule):
        kept_for = "this call"
        why = _asked_every_time(rule)
    elif not approvals.approve(ctx.session_id, rule.signature, tool):
        kept_for = "this call"
        why = "the tool's definition was replaced while the approval was asked"
    elif not why:
        return None
    return f"(approved for {kept_for} only: {why})"


def _asked_every_time(rule: RuleDecision) -> str:
    if rule.sensitive:
        return "a call touching a sensitive or protected file is asked every time"
    if rule.decision is Decision.ASK and rule.matched_rule is not None:
        return f"the rule {rule.matched_rule} asks every time"
    if rule.decision is not Decision.ASK:
        return "a hook asked for approval, and asks every time"
    return "this permission is asked every time"
