"""Who answers a call that asks: the calling client (an elicitation), a person at the console
(the pending-approvals registry), or nobody.

The form put to a client has one required field, ``decision`` (``once``, ``session`` or
``reject``), and an optional ``reason``, which becomes the feedback the model reads on a
rejection.

An approval covers only what the person was shown: a question carries the arguments whole (up
to ``QUESTION_LIMIT`` characters of their JSON) or is not asked, and the console offers only
Reject for arguments it cannot show whole. Nobody answering in time is a refusal of its own
(``approval_timeout``), never a person's rejection.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from fastgate.model import ApprovalRequest, ApprovalResponse, ErrorCode
from fastgate.permissions import ApprovalStore, Refusal
from fastgate.serve._preview import (
    FULL_LIMIT,
    ArgumentsPreview,
    arguments_line,
    preview_arguments,
    visible,
)

APPROVALS_MODES: Final = ("client", "console", "deny")
ApprovalsMode = Literal["client", "console", "deny"]

DECISIONS: Final = ("once", "session", "reject")
APPROVAL_FORM: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "decision": {
            "type": "string",
            "title": "Decision",
            "description": "once: allow this call; session: allow such calls for this session; "
            "reject: refuse it",
            "enum": list(DECISIONS),
        },
        "reason": {
            "type": "string",
            "title": "Reason",
            "description": "Optional: why (shown to the model when the call is rejected)",
        },
    },
    "required": ["decision"],
}
# Characters of the arguments' JSON a question to a client carries; longer arguments are not
# asked there (a client shows the question in a dialog, the console can scroll).
QUESTION_LIMIT: Final = 16_384
PENDING_PER_PRINCIPAL: Final = 50  # calls of one principal waiting at the console at once
SESSIONS_PER_PRINCIPAL: Final = 64  # sessions of one principal whose session approvals are kept
APPROVAL_TIMEOUT: Final = "approval_timeout"  # details.reason of an approval nobody answered
TOO_LONG_TO_SHOW: Final = "arguments_too_long_to_show"  # details.reason: not shown whole


def approval_message(request: ApprovalRequest, principal: str) -> str | None:
    """The question a person is shown: the tool, who asks, why, and the whole of what will run
    (every invisible character escaped); None when the arguments take more than
    ``QUESTION_LIMIT`` characters, since an answer would cover what the question left out.
    Arguments of any size cost no more to measure than that."""
    shown, whole = arguments_line(request.args, QUESTION_LIMIT)
    if not whole:
        return None
    return (
        f"fastgate: allow {visible(request.tool_name)} for {visible(principal)}?\n"
        f"Why it asks: {visible(request.reason or '')} (source: {visible(request.source)})\n"
        f"Arguments: {shown}"
    )


def unanswered(who: str, timeout: float) -> Refusal:
    """The refusal of a call whose approval nobody answered within ``timeout`` seconds: not a
    rejection (nobody rejected it), and distinguishable from one."""
    return Refusal(
        ErrorCode.PERMISSION_DENIED,
        f"No answer came from {who} within {timeout:g} s; the call was not run.",
        {"reason": APPROVAL_TIMEOUT},
    )


def too_long_to_ask(request: ApprovalRequest) -> Refusal:
    """The refusal of a call whose arguments are too long to be shown whole to the client
    asked, with no console to send it to."""
    return Refusal(
        ErrorCode.PERMISSION_DENIED,
        f"This call needs approval ({request.reason or request.source}), and its arguments are "
        f"longer than a question to the client shows whole ({QUESTION_LIMIT:,} characters of "
        "JSON); it was not run, since an approval covers only what the person was shown. "
        "Smaller calls can be asked; the console (--console) shows arguments up to "
        f"{FULL_LIMIT:,} characters.",
        {"reason": TOO_LONG_TO_SHOW, "limit": QUESTION_LIMIT},
    )


def answer_of(action: str, content: Mapping[str, Any] | None) -> ApprovalResponse:
    """The approval an elicitation answer gives: only an accepted form with a valid decision
    approves; a decline, a cancel or anything malformed rejects."""
    if action != "accept":
        verb = "declined" if action == "decline" else "dismissed"
        return ApprovalResponse(False, feedback=f"The user {verb} the approval of this call.")
    decision = content.get("decision") if content else None
    reason = content.get("reason") if content else None
    feedback = reason if isinstance(reason, str) and reason.strip() else None
    if decision == "once":
        return ApprovalResponse(True, scope="once", feedback=feedback)
    if decision == "session":
        return ApprovalResponse(True, scope="session", feedback=feedback)
    if decision == "reject":
        return ApprovalResponse(False, feedback=feedback or "The user rejected this call.")
    return ApprovalResponse(
        False, feedback=f"The approval form came back without a valid decision ({decision!r})."
    )


class KeptSessions:
    """The sessions whose session approvals the gateway keeps: at most ``per_principal`` for
    each principal. A 2026-era client names its own sessions, so without a bound it could
    grow the approval store forever; when a principal's session beyond the bound is given a
    session approval, the approvals of its session given one least recently are forgotten
    (its calls are asked again: forgetting never lets anything through)."""

    def __init__(self, per_principal: int = SESSIONS_PER_PRINCIPAL) -> None:
        if type(per_principal) is not int or per_principal < 1:
            raise ValueError(f"per_principal: expected a count >= 1, got {per_principal!r}")
        self.per_principal = per_principal
        self._kept: dict[str, OrderedDict[tuple[str | None, int], ApprovalStore]] = {}

    def approved(self, principal: str, session_id: str | None, store: ApprovalStore) -> None:
        """``session_id`` of ``principal`` was given a session approval kept in ``store``."""
        kept = self._kept.setdefault(principal, OrderedDict())
        key = (session_id, id(store))
        kept[key] = store
        kept.move_to_end(key)
        while len(kept) > self.per_principal:
            (oldest, _), held = kept.popitem(last=False)
            held.clear_session(oldest)

    def sessions(self, principal: str) -> list[str | None]:
        """``principal``'s sessions whose approvals are kept, least recently approved first."""
        return [session for session, _ in self._kept.get(principal, ())]


# -- the console's registry -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """A call waiting for a person's answer at the console."""

    id: str
    principal: str
    session_id: str | None
    tool_name: str
    arguments: Any
    reason: str
    source: str
    execution_id: str | None
    since: float  # wall clock, seconds since the epoch
    rule: str | None = None  # the rule that asked (source "rule")
    rule_source: str | None = None  # the settings file it came from
    # What the console shows of the arguments, made once (None: made when shown).
    preview: ArgumentsPreview | None = field(default=None, compare=False, repr=False)

    def shown(self) -> ArgumentsPreview:
        """The arguments as the console shows them: pretty JSON, bounded (folded, cut)."""
        return self.preview if self.preview is not None else preview_arguments(self.arguments)

    @property
    def allowable(self) -> bool:
        """Whether the console shows the arguments whole, so that it may allow the call (one
        it cannot show whole it only lets a person reject)."""
        return self.shown().whole


@dataclass(frozen=True, slots=True)
class ApprovalEvent:
    """A change of the pending list: ``added``, ``answered`` or ``withdrawn`` (timed out or
    cancelled)."""

    kind: Literal["added", "answered", "withdrawn"]
    approval: PendingApproval
    response: ApprovalResponse | None = None


@dataclass(slots=True)
class _Waiting:
    approval: PendingApproval
    answer: asyncio.Future[ApprovalResponse] = field(repr=False)


class PendingApprovals:
    """Calls waiting for an answer from the console: ``pending()``, ``answer(id, response)``
    (the first answer wins), and ``events()``, every change as it happens.

    ``timeout``: how long a call waits for an answer before it is rejected (seconds);
    ``per_principal``: how many calls of one principal may wait at once (one more is refused,
    ``RESOURCE_EXHAUSTED``, so that one caller cannot fill the console)."""

    def __init__(self, timeout: float = 300.0, per_principal: int = PENDING_PER_PRINCIPAL) -> None:
        if not timeout > 0:
            raise ValueError(f"timeout: expected seconds > 0, got {timeout!r}")
        if type(per_principal) is not int or per_principal < 1:
            raise ValueError(f"per_principal: expected a count >= 1, got {per_principal!r}")
        self.timeout = float(timeout)
        self.per_principal = per_principal
        self._waiting: dict[str, _Waiting] = {}
        self._ids = itertools.count(1)
        self._listeners: set[asyncio.Queue[ApprovalEvent]] = set()

    def pending(self) -> list[PendingApproval]:
        """The calls waiting now, newest first."""
        return sorted(
            (w.approval for w in self._waiting.values()), key=lambda a: a.since, reverse=True
        )

    def answer(self, approval_id: str, response: ApprovalResponse) -> bool:
        """Answer a waiting call; False when it is no longer waiting (answered, timed out,
        cancelled). The console allows only a call it shows whole (``allowable``); an
        application answering here itself shows the arguments in its own way."""
        if not isinstance(response, ApprovalResponse):
            raise TypeError(f"response: expected an ApprovalResponse, got {type(response)!r}")
        waiting = self._waiting.pop(approval_id, None)
        if waiting is None or waiting.answer.done():
            return False
        waiting.answer.set_result(response)
        self._publish(ApprovalEvent("answered", waiting.approval, response))
        return True

    def events(self) -> AsyncIterator[ApprovalEvent]:
        """Every change from this call on (a consumer that lists ``pending()`` right after
        misses none), until the iterator is closed or dropped."""
        queue: asyncio.Queue[ApprovalEvent] = asyncio.Queue(maxsize=1024)
        self._listeners.add(queue)
        return _Following(self._listeners, queue)

    async def ask(
        self,
        request: ApprovalRequest,
        principal: str,
        *,
        rule: str | None = None,
        rule_source: str | None = None,
        on_added: Callable[[PendingApproval], object] | None = None,
    ) -> ApprovalResponse | Refusal:
        """Wait for the console's answer to ``request`` (after ``timeout``, the refusal
        ``PERMISSION_DENIED``, reason ``approval_timeout``; an answer given as the deadline
        passes counts), or refuse it at once (``RESOURCE_EXHAUSTED``, reason
        ``too_many_pending_approvals``) when ``per_principal`` calls of ``principal`` wait
        already. ``on_added``: told of the pending approval once it is listed (the gateway
        points a URL-mode elicitation at it)."""
        waiting_now = sum(1 for w in self._waiting.values() if w.approval.principal == principal)
        if waiting_now >= self.per_principal:
            return Refusal(
                ErrorCode.RESOURCE_EXHAUSTED,
                f"{principal} has {waiting_now} calls waiting for an answer at the console "
                f"already (at most {self.per_principal}); this call was not run: retry once "
                "some are answered.",
                {"reason": "too_many_pending_approvals", "limit": self.per_principal},
            )
        arguments = request.args  # previewed here, never copied: what it costs is the preview's
        approval = PendingApproval(
            id=f"a{next(self._ids)}-{request.execution_id or ''}",
            principal=principal,
            session_id=request.session_id,
            tool_name=request.tool_name,
            arguments=arguments,
            reason=request.reason or "",
            source=request.source,
            execution_id=request.execution_id,
            since=time.time(),
            rule=rule,
            rule_source=rule_source,
            preview=preview_arguments(arguments),
        )
        waiting = _Waiting(approval, asyncio.get_running_loop().create_future())
        self._waiting[approval.id] = waiting
        self._publish(ApprovalEvent("added", approval))
        if on_added is not None:
            on_added(approval)
        deadline = asyncio.timeout(self.timeout)
        try:
            async with deadline:
                return await asyncio.shield(waiting.answer)
        except TimeoutError:
            if not deadline.expired():
                raise
            if waiting.answer.done():  # answered as the deadline passed: the answer it was told
                return waiting.answer.result()  # was taken counts (answer() returned True)
            return unanswered("the console", self.timeout)
        finally:
            if self._waiting.pop(approval.id, None) is not None:
                self._publish(ApprovalEvent("withdrawn", approval))

    def _publish(self, event: ApprovalEvent) -> None:
        for queue in list(self._listeners):
            try:
                queue.put_nowait(event)
            except asyncio.QueueFull:  # a consumer that stopped reading misses events
                pass


class _Following:
    """One consumer of ``PendingApprovals.events()``: listening from its creation, until
    ``aclose()`` or until it is dropped."""

    def __init__(
        self, listeners: set[asyncio.Queue[ApprovalEvent]], queue: asyncio.Queue[ApprovalEvent]
    ) -> None:
        self._listeners = listeners
        self._queue = queue

    def __aiter__(self) -> _Following:
        return self

    async def __anext__(self) -> ApprovalEvent:
        return await self._queue.get()

    async def aclose(self) -> None:
        self._listeners.discard(self._queue)

    def __del__(self) -> None:
        self._listeners.discard(self._queue)
