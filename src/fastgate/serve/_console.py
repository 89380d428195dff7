"""The console (SPEC §25): the gateway's pages for the people who answer approvals and run it.

``/console``: the pending approvals, updated live by server-sent events, each with Allow once /
Allow for the session / Reject (a POST carrying the session's CSRF token); ``/console/state``:
calls running and queued per session and per pool (the scheduler's own counts), the upstream
servers, the recent decisions with filters; ``/console/calls/<execution id>``: one call's
decision trail, timings and result head; ``/console/approvals/<id>``: one approval, the page a
URL-mode elicitation points at.

The console's requests are not tool calls: they never pass the scheduler, the rate limit or
the MCP session manager, and a page is rendered from counters read in memory, so a flood of
calls does not slow them down. Live updates are pushed by the server as things change; the
browser never polls. An event's data is one line of JSON (``\r`` and ``\n`` escaped, ASCII
only), so nothing a caller sends (a tool's name, an argument) can end a line of the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import secrets
from collections.abc import AsyncGenerator, Callable, Sequence
from typing import Any, Final
from urllib.parse import parse_qs, quote

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

from fastgate.model import ApprovalResponse
from fastgate.serve import _console_html as pages
from fastgate.serve._approvals import ApprovalEvent, PendingApprovals
from fastgate.serve._callers import token_digest
from fastgate.serve._console_assets import CSS, SCRIPT
from fastgate.serve._console_auth import (
    AdminTokens,
    ConsoleSession,
    ConsoleSessions,
    SignInLimit,
    cookie_header,
    cookie_value,
    csrf_matches,
    same_origin,
)
from fastgate.serve._console_calls import CallRecorder
from fastgate.serve._preview import visible

log = logging.getLogger("fastgate.serve.console")

PATH: Final = "/console"
_FORM_LIMIT: Final = 65_536  # bytes of a console form
_REASON_LIMIT: Final = 2_000
_ID: Final = re.compile(r"[A-Za-z0-9._-]{1,160}")
_EVENT_NAME: Final = re.compile(r"[a-z]{1,32}")
_HEARTBEAT: Final = 15.0  # seconds between keep-alive comments on a quiet stream
_STATE_PERIOD: Final = 1.0  # how often the live state is compared and, if changed, pushed
_DECISIONS_SHOWN: Final = 50
_HEADERS: Final = {
    "content-security-policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "img-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; "
    "frame-ancestors 'none'",
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",  # ("no-referrer" makes a form's Origin "null")
    "cache-control": "no-store",
}
_VERDICTS: Final = {
    "once": "allowed once",
    "session": "allowed for the session",
    "reject": "rejected",
}


class Console:
    """The console's routes over a gateway's pending approvals, scheduler and upstreams.

    ``admins``: the admin tokens' digests; None makes one token for this process only
    (``generated_token``, which ``fastgate serve`` prints)."""

    def __init__(
        self,
        pending: PendingApprovals,
        recorder: CallRecorder,
        scheduler_stats: Callable[[], Any],
        upstreams: Callable[[], dict[str, dict[str, Any]]] | None,
        admins: AdminTokens | None = None,
        allowed_hosts: Sequence[str] | None = None,
    ) -> None:
        self.generated_token: str | None = None
        if admins is None:
            self.generated_token = secrets.token_urlsafe(24)
            admins = AdminTokens([token_digest(self.generated_token)])
        self.admins = admins
        self.pending = pending
        self.recorder = recorder
        self._stats = scheduler_stats
        self._upstreams = upstreams
        self._allowed_hosts = list(allowed_hosts) if allowed_hosts is not None else None
        self.sessions = ConsoleSessions()
        self._sign_ins = SignInLimit()
        self._closing = asyncio.Event()

    def close(self) -> None:
        """End every live stream (a server shutting down need not wait for them)."""
        self._closing.set()

    def routes(self) -> list[BaseRoute]:
        return [
            Route(PATH, self._guarded(self._pending_page), methods=["GET"]),
            Route(PATH + "/", self._guarded(self._pending_page), methods=["GET"]),
            Route(PATH + "/login", self._hosted(self._login), methods=["GET", "POST"]),
            Route(PATH + "/logout", self._hosted(self._logout), methods=["POST"]),
            Route(PATH + "/events", _Stream(self, self._pending_stream), methods=["GET"]),
            Route(
                PATH + "/approvals/{approval_id}",
                self._guarded(self._approval),
                methods=["GET", "POST"],
            ),
            Route(PATH + "/state", self._guarded(self._state_page), methods=["GET"]),
            Route(PATH + "/state/events", _Stream(self, self._state_stream), methods=["GET"]),
            Route(PATH + "/calls/{execution_id}", self._guarded(self._call_page), methods=["GET"]),
            Route(PATH + "/static/console.css", _asset(CSS, "text/css"), methods=["GET"]),
            Route(PATH + "/static/console.js", _asset(SCRIPT, "text/javascript"), methods=["GET"]),
        ]

    # -- who is asking ----------------------------------------------------------------------------

    def host_allowed(self, host: str | None) -> bool:
        allowed = self._allowed_hosts
        if allowed is None:
            return True
        if not host:
            return False
        return host in allowed or any(a.endswith(":*") and host.startswith(a[:-1]) for a in allowed)

    def session_of(self, request: Request | Scope) -> tuple[str | None, ConsoleSession | None]:
        headers = request.headers if isinstance(request, Request) else Request(request).headers
        sid = cookie_value(headers)
        return sid, self.sessions.get(sid)

    def _hosted(self, endpoint: Callable[[Request], Any]) -> Callable[[Request], Any]:
        async def checked(request: Request) -> Response:
            if not self.host_allowed(request.headers.get("host")):
                return _html("Invalid Host header", status=421)
            response: Response = await endpoint(request)
            return response

        return checked

    def _guarded(
        self, endpoint: Callable[[Request, ConsoleSession], Any]
    ) -> Callable[[Request], Any]:
        """Signed-in admins only: a page asks the others to sign in, a POST is refused."""

        async def checked(request: Request) -> Response:
            if not self.host_allowed(request.headers.get("host")):
                return _html("Invalid Host header", status=421)
            _, session = self.session_of(request)
            if session is None:
                if request.method != "GET":
                    return _refused(request, 401, "Sign in to the console first.")
                target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                login = f"{_base(request)}/login?next={quote(target, safe='')}"
                return RedirectResponse(login, status_code=303, headers=_HEADERS)
            if request.method == "POST":
                problem = await _post_problem(request, session)
                if problem is not None:
                    return _refused(request, 403, problem)
            response: Response = await endpoint(request, session)
            return response

        return checked

    # -- sign-in ----------------------------------------------------------------------------------

    async def _login(self, request: Request) -> Response:
        base = _base(request)
        if request.method == "GET":
            next_path = _safe_next(request.query_params.get("next"), base)
            return _html(pages.login_page(base, None, next_path))
        if not same_origin(request.headers):
            return _html(pages.login_page(base, "Refused: not sent from this console.", base), 403)
        address = request.client.host if request.client else "?"
        # Counted before the token is read: sign-ins sent at once cannot all be judged.
        attempt = self._sign_ins.attempt(address)
        if attempt is None:
            return _html(pages.login_page(base, "Too many wrong tokens: wait a minute.", base), 429)
        form = await _form(request)
        next_path = _safe_next(form.get("next"), base)
        token = form.get("token", "")
        admin = self.admins.verify(token) if token else None
        if admin is None:
            return _html(
                pages.login_page(base, "That token does not open the console.", next_path), 401
            )
        self._sign_ins.succeeded(address, attempt)
        sid, session = self.sessions.open(admin)
        response = RedirectResponse(next_path, status_code=303, headers=_HEADERS)
        secure = request.url.scheme == "https"
        response.headers.append(
            "set-cookie", cookie_header(sid, base, secure, int(self.sessions.ttl))
        )
        log.info("console: %s signed in from %s", session.admin, address)
        return response

    async def _logout(self, request: Request) -> Response:
        sid, session = self.session_of(request)
        base = _base(request)
        if session is not None:
            problem = await _post_problem(request, session)
            if problem is not None:
                return _refused(request, 403, problem)
            self.sessions.close(sid)
        response = RedirectResponse(f"{base}/login", status_code=303, headers=_HEADERS)
        response.headers.append("set-cookie", cookie_header("", base, False, 0))
        return response

    # -- approvals --------------------------------------------------------------------------------

    async def _pending_page(self, request: Request, session: ConsoleSession) -> Response:
        page = pages.pending_page(
            self.pending.pending(),
            _base(request),
            session.csrf,
            session.admin,
            self.pending.timeout,
        )
        return _html(page)

    async def _approval(self, request: Request, session: ConsoleSession) -> Response:
        approval_id = request.path_params["approval_id"]
        base = _base(request)
        if request.method == "GET":
            found = next((a for a in self.pending.pending() if a.id == approval_id), None)
            return _html(pages.approval_page(found, approval_id, base, session.csrf, session.admin))
        form = await _form(request)
        decision = form.get("decision")
        if decision not in _VERDICTS:
            return _refused(request, 400, "Choose Allow once, Allow for the session or Reject.")
        reason = form.get("reason", "").strip()[:_REASON_LIMIT] or None
        state, message = self.answer(approval_id, decision, reason, session.admin)
        status = 200 if state == "answered" else 409
        if "application/json" in request.headers.get("accept", ""):
            return JSONResponse({"state": state, "message": message}, status, headers=_HEADERS)
        title = {"answered": "Answered", "reject_only": "Reject only"}.get(
            state, "No longer waiting"
        )
        return _html(
            pages.message_page(base, title, message, csrf=session.csrf, admin=session.admin),
            status,
        )

    def answer(
        self, approval_id: str, decision: str, reason: str | None, admin: str
    ) -> tuple[str, str]:
        """Answer a pending approval: ``("answered", what)``, ``("gone", why)`` when it is
        no longer waiting (the first answer won, it timed out, its call was cancelled), or
        ``("reject_only", why)`` for an approval of arguments too long to be shown whole."""
        found = next((a for a in self.pending.pending() if a.id == approval_id), None)
        if decision == "reject":
            response = ApprovalResponse(False, feedback=reason or "Rejected at the console.")
        else:
            response = ApprovalResponse(True, scope="session" if decision == "session" else "once")
            if found is not None and not found.allowable:
                return "reject_only", (
                    "This call's arguments are too long to be shown whole here, so it can only "
                    "be rejected: an approval covers only what you were shown."
                )
        if found is None or not self.pending.answer(approval_id, response):
            return "gone", (
                "This approval is no longer waiting: it was answered, it timed out, or its "
                "call was cancelled."
            )
        # The waiting call resumes only after this handler yields: the note is in time.
        self.recorder.answered(found.execution_id, admin)
        log.info("console: %s %s %s (%s)", admin, _VERDICTS[decision], found.tool_name, found.id)
        label = visible(f"{found.tool_name} for {found.principal}")
        return "answered", f"{_VERDICTS[decision].capitalize()}: {label}."

    async def _pending_stream(
        self, scope: Scope, session: ConsoleSession
    ) -> AsyncGenerator[tuple[str, Any], None]:
        base = _base(Request(scope))
        following = self.pending.events()  # listening before the snapshot: nothing is missed
        try:
            yield "snapshot", pages.pending_cards(self.pending.pending(), base, session.csrf)
            while True:
                try:
                    async with asyncio.timeout(_HEARTBEAT):
                        event = await anext(following)
                except TimeoutError:
                    yield "", ""
                    continue
                yield _pending_event(event, base, session.csrf)
        finally:
            await following.aclose()  # type: ignore[attr-defined]

    # -- live state -------------------------------------------------------------------------------

    def live_state(self) -> pages.LiveState:
        stats = self._stats()
        pools = set(stats.in_flight_by_pool) | set(stats.queued_by_pool)
        sessions = set(stats.in_flight_by_session) | set(stats.queued_by_session)
        upstreams = []
        for name, status in sorted((self._upstreams() if self._upstreams else {}).items()):
            upstreams.append(
                (
                    name,
                    str(status.get("state", "")),
                    int(status.get("tools", 0)),
                    int(status.get("restarts", 0)),
                    str(status.get("last_error") or ""),
                )
            )
        return pages.LiveState(
            running=stats.in_flight,
            queued=stats.queued,
            wait_p50_ms=stats.wait_p50_ms,
            wait_p99_ms=stats.wait_p99_ms,
            by_pool=[
                (str(p), stats.in_flight_by_pool.get(p, 0), stats.queued_by_pool.get(p, 0))
                for p in sorted(pools, key=str)
            ],
            by_session=[
                (str(s), stats.in_flight_by_session.get(s, 0), stats.queued_by_session.get(s, 0))
                for s in sorted(sessions, key=str)
            ],
            upstreams=upstreams,
            pending=len(self.pending.pending()),
        )

    def _filters(self, query: Any) -> dict[str, str]:
        return {k: str(query.get(k, ""))[:200] for k in ("tool", "principal", "outcome")}

    def _live_html(self, base: str, filters: dict[str, str]) -> str:
        records = self.recorder.recent(
            tool=filters["tool"] or None,
            principal=filters["principal"] or None,
            outcome=filters["outcome"] or None,
            limit=_DECISIONS_SHOWN,
        )
        return pages.live_fragment(self.live_state(), base) + pages.decisions_table(records, base)

    async def _state_page(self, request: Request, session: ConsoleSession) -> Response:
        filters = self._filters(request.query_params)
        records = self.recorder.recent(
            tool=filters["tool"] or None,
            principal=filters["principal"] or None,
            outcome=filters["outcome"] or None,
            limit=_DECISIONS_SHOWN,
        )
        page = pages.state_page(
            self.live_state(),
            records,
            self.recorder.choices(),
            filters,
            _base(request),
            session.csrf,
            session.admin,
        )
        return _html(page)

    async def _state_stream(
        self, scope: Scope, session: ConsoleSession
    ) -> AsyncGenerator[tuple[str, Any], None]:
        request = Request(scope)
        base, filters = _base(request), self._filters(request.query_params)
        shown, quiet = "", 0.0
        while True:
            now = self._live_html(base, filters)
            if now != shown:
                shown, quiet = now, 0.0
                yield "state", now
            elif quiet >= _HEARTBEAT:
                quiet = 0.0
                yield "", ""
            await asyncio.sleep(_STATE_PERIOD)
            quiet += _STATE_PERIOD

    # -- one call ---------------------------------------------------------------------------------

    async def _call_page(self, request: Request, session: ConsoleSession) -> Response:
        execution_id = request.path_params["execution_id"]
        record = self.recorder.get(execution_id) if _ID.fullmatch(execution_id) else None
        page = pages.call_page(record, execution_id, _base(request), session.csrf, session.admin)
        return _html(page, 200 if record is not None else 404)


# -- the pieces ---------------------------------------------------------------------------------


class _Stream:
    """A server-sent event stream for signed-in admins: ``source(scope, session)`` yields
    ``(event, data)`` pairs, data anything JSON can hold (an empty event is a keep-alive
    comment). It ends when the browser goes away, the console closes, or the session ends
    (signed out, expired): nothing is sent once the session is gone, and the page is told
    (an ``ended`` event)."""

    def __init__(
        self,
        console: Console,
        source: Callable[[Scope, ConsoleSession], AsyncGenerator[tuple[str, Any], None]],
    ) -> None:
        self._console = console
        self._source = source

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        console = self._console
        request = Request(scope)
        if not console.host_allowed(request.headers.get("host")):
            await _html("Invalid Host header", status=421)(scope, receive, send)
            return
        sid, session = console.session_of(request)
        if sid is None or session is None:
            await _refused(request, 401, "Sign in to the console first.")(scope, receive, send)
            return
        headers = [(k.encode(), v.encode()) for k, v in _HEADERS.items()]
        headers += [(b"content-type", b"text/event-stream; charset=utf-8")]
        headers += [(b"x-accel-buffering", b"no")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        events = self._source(scope, session)

        def signed_in() -> bool:
            # ``ended`` first: the expiry timer runs on the loop's clock, which may fire a
            # moment before ``time.monotonic()`` reaches the expiry ``get`` compares with.
            return not session.ended.is_set() and console.sessions.get(sid) is session

        ended = asyncio.ensure_future(session.wait_ended())
        tasks = [
            asyncio.ensure_future(self._pump(events, send, signed_in)),
            asyncio.ensure_future(_disconnected(receive)),
            asyncio.ensure_future(console._closing.wait()),
            ended,
        ]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            for outcome in await asyncio.gather(*tasks, return_exceptions=True):
                if isinstance(outcome, Exception):
                    log.error("console: a live stream failed", exc_info=outcome)
            await events.aclose()
        with contextlib.suppress(Exception):  # the browser may be gone already
            if not signed_in():
                await send({"type": "http.response.body", "body": _ENDED, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    @staticmethod
    async def _pump(
        events: AsyncGenerator[tuple[str, Any], None],
        send: Send,
        signed_in: Callable[[], bool],
    ) -> None:
        async for name, data in events:
            if not signed_in():  # checked again before every event and keep-alive
                return
            await send(
                {"type": "http.response.body", "body": _event(name, data), "more_body": True}
            )


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def _event(name: str, data: Any) -> bytes:
    """One server-sent event: its name (one of ours) and its data as one line of JSON. JSON
    escapes every control character and, ASCII only, every other character a parser could
    take for a line end: the event's lines are exactly the two written here, whatever a caller
    put in the data (EventSource ends a line at CR, LF and CRLF alike)."""
    if not name:
        return b": keep-alive\n\n"
    if not _EVENT_NAME.fullmatch(name):
        raise ValueError(f"not an event name of the console: {name!r}")
    return b"event: " + name.encode() + b"\ndata: " + json.dumps(data).encode() + b"\n\n"


_ENDED: Final = _event(
    "ended", {"message": "Signed out: sign in again to follow the console live."}
)


def _pending_event(event: ApprovalEvent, base: str, csrf: str) -> tuple[str, Any]:
    approval = event.approval
    if event.kind == "added":
        return "added", pages.approval_card(approval, base, csrf)
    label = visible(f"{approval.tool_name} for {approval.principal}")
    if event.kind == "answered" and event.response is not None:
        verdict = (
            f"allowed {'for the session' if event.response.scope == 'session' else 'once'}"
            if event.response.approved
            else "rejected"
        )
        message = f"{label} was answered: {verdict}."
    else:
        message = f"{label} is no longer waiting: it timed out or its call was cancelled."
    return "gone", {"id": approval.id, "message": message}


def _base(request: Request) -> str:
    return str(request.scope.get("root_path", "")) + PATH


def _safe_next(value: str | None, base: str) -> str:
    """Where to go after signing in: a console path only (no other site, no open redirect)."""
    if not value or not (
        value == base or value.startswith(base + "/") or value.startswith(base + "?")
    ):
        return base
    if "//" in value or "\\" in value or any(ord(c) < 0x20 for c in value):
        return base
    return value


async def _form(request: Request) -> dict[str, str]:
    """A urlencoded form's fields (the first value of each), at most ``_FORM_LIMIT`` bytes."""
    known: dict[str, str] | None = getattr(request.state, "console_form", None)
    if known is not None:
        return known
    request.state.console_form = {}
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > _FORM_LIMIT:
            return {}
    try:
        fields = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=32)
    except (UnicodeDecodeError, ValueError):
        return {}
    form = request.state.console_form = {k: v[0] for k, v in fields.items() if v}
    return form


async def _post_problem(request: Request, session: ConsoleSession) -> str | None:
    """Why a state-changing request is refused: not from the console's own pages, or without
    the session's CSRF token (a form field or the ``X-CSRF-Token`` header)."""
    if not same_origin(request.headers):
        return "Refused: the request did not come from this console."
    presented: str | None = request.headers.get("x-csrf-token")
    if presented is None:
        presented = (await _form(request)).get("csrf")
    if not csrf_matches(session, presented):
        return "Refused: the request carries no valid CSRF token; reload the page."
    return None


def _html(body: str, status: int = 200) -> Response:
    return Response(body, status, headers=_HEADERS, media_type="text/html; charset=utf-8")


def _refused(request: Request, status: int, text: str) -> Response:
    if "application/json" in request.headers.get("accept", ""):
        return JSONResponse({"state": "refused", "message": text}, status, headers=_HEADERS)
    return _html(pages.message_page(_base(request), "Refused", text), status)


def _asset(text: str, media_type: str) -> Callable[[Request], Any]:
    body = text.encode()

    async def serve(request: Request) -> Response:
        headers = {**_HEADERS, "cache-control": "no-cache"}
        return Response(body, headers=headers, media_type=f"{media_type}; charset=utf-8")

    return serve
