"""The console's pages, rendered on the server: every value that comes from a call (tool names,
arguments, reasons, results, principals) goes through ``html.escape``, so an argument holding
``<script>`` is shown as text. Pages link only to the console's own paths: no external URL.
"""

from __future__ import annotations

import html
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote, urlencode

from fastgate.serve._approvals import PendingApproval
from fastgate.serve._console_calls import UNKNOWN, CallRecord
from fastgate.serve._preview import FULL_LIMIT, ArgumentsPreview, preview_arguments, visible


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def _when(wall: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(wall))


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


# -- the frame ------------------------------------------------------------------------------------

_NAV: Final = (("pending", "", "Pending approvals"), ("state", "/state", "Live state"))


def layout(
    title: str,
    body: str,
    *,
    base: str,
    csrf: str = "",
    active: str = "",
    admin: str | None = None,
) -> str:
    links = "".join(
        f'<a href="{esc(base + path)}"'
        + (' aria-current="page"' if key == active else "")
        + f">{esc(label)}</a>"
        for key, path, label in _NAV
    )
    signed_in = ""
    if admin is not None:
        signed_in = (
            f'<form method="post" action="{esc(base)}/logout">'
            f'<input type="hidden" name="csrf" value="{esc(csrf)}">'
            f'<span class="muted">{esc(admin)}</span> <button type="submit">Sign out</button>'
            "</form>"
        )
        links = f'<nav aria-label="Console">{links}</nav>'
    else:
        links = ""
    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)} · fastgate console</title>"
        f'<link rel="stylesheet" href="{esc(base)}/static/console.css">'
        f'<script src="{esc(base)}/static/console.js" defer></script>'
        f'</head><body data-base="{esc(base)}" data-csrf="{esc(csrf)}">'
        '<a class="skip" href="#main">Skip to the content</a>'
        f'<header><span class="brand">fastgate console</span>{links}{signed_in}</header>'
        f'<main id="main"><h1 tabindex="-1">{esc(title)}</h1>'
        '<p id="status" class="status" role="status" aria-live="polite"></p>'
        f"{body}</main></body></html>"
    )


def login_page(base: str, error: str | None, next_path: str) -> str:
    problem = f'<p class="error" role="alert">{esc(error)}</p>' if error else ""
    body = (
        f'<div class="login">{problem}'
        f'<form method="post" action="{esc(base)}/login">'
        f'<input type="hidden" name="next" value="{esc(next_path)}">'
        '<label for="token">Admin token</label>'
        '<input id="token" name="token" type="password" autocomplete="current-password" '
        "required autofocus>"
        '<p class="hint">The token whose SHA-256 digest is in the gateway\'s '
        "<code>--console-token-file</code>. A caller's bearer token does not open the console.</p>"
        '<button type="submit" class="allow">Sign in</button></form></div>'
    )
    return layout("Sign in", body, base=base)


def message_page(
    base: str, title: str, text: str, *, csrf: str = "", admin: str | None = None
) -> str:
    body = f'<p>{esc(text)}</p><p><a href="{esc(base)}">Back to the pending approvals</a></p>'
    return layout(title, body, base=base, csrf=csrf, admin=admin)


# -- pending approvals ----------------------------------------------------------------------------


def arguments_html(arguments: Any) -> str:
    """A call's arguments as pretty JSON, bounded (see ``_preview``)."""
    if arguments is UNKNOWN:
        return '<p class="muted">Not recorded (a call made from code).</p>'
    if isinstance(arguments, str):
        shown = visible(arguments)  # already cut to a head by the recorder
        return f'<pre aria-label="Arguments">{esc(shown)}</pre>'
    return preview_html(preview_arguments(arguments))


def preview_html(preview: ArgumentsPreview) -> str:
    """The preview, long values folded; the whole of the arguments (cut when very long) behind a
    disclosure when something was folded."""
    out = f'<pre aria-label="Arguments">{esc(preview.short)}</pre>'
    if preview.full is not None:
        out += (
            "<details><summary>Show the full arguments</summary>"
            f"<pre>{esc(preview.full)}</pre></details>"
        )
    return out


def _shown(value: object) -> str:
    """A caller's text on a card: invisible characters escaped, then HTML-escaped."""
    return esc(visible(str(value)))


def _asked_by(approval: PendingApproval) -> str:
    if approval.rule:
        where = f" in <code>{_shown(approval.rule_source)}</code>" if approval.rule_source else ""
        return f"rule <code>{_shown(approval.rule)}</code>{where}"
    return _shown(approval.source)


def _allow_buttons(approval: PendingApproval, url: str, aid: str, csrf: str) -> str:
    """Allow once / Allow for the session; for arguments too long to be shown whole, a note
    instead: an approval covers only what was shown, so such a call may only be rejected."""
    if not approval.allowable:
        return (
            f'<p class="hint" id="reject-only-{aid}">These arguments are longer than the console '
            f"shows whole ({FULL_LIMIT:,} characters of JSON): the call can only be rejected. "
            "Say in the reason how to split it.</p>"
        )
    return (
        f'<form class="answer" method="post" action="{url}" data-id="{aid}">'
        f'<input type="hidden" name="csrf" value="{esc(csrf)}">'
        f'<button class="allow" name="decision" value="once" aria-describedby="title-{aid}">'
        "Allow once</button>"
        f'<button class="session" name="decision" value="session" '
        f'aria-describedby="title-{aid}">Allow for the session</button></form>'
    )


def approval_card(approval: PendingApproval, base: str, csrf: str, tag: str = "li") -> str:
    aid = esc(approval.id)
    url = esc(f"{base}/approvals/{quote(approval.id)}")
    label = visible(f"{approval.tool_name} for {approval.principal}")
    session_hint = ""
    if approval.source != "mode" and approval.allowable:
        session_hint = (
            '<p class="hint">Asked by a rule, a hook or a sensitive path: "Allow for the '
            'session" allows this call, and the next such call is asked again.</p>'
        )
    return (
        f'<{tag} class="card" id="approval-{aid}" data-label="{esc(label)}">'
        f'<h3 id="title-{aid}">{_shown(approval.tool_name)}</h3><dl>'
        f"<dt>Principal</dt><dd>{_shown(approval.principal)}</dd>"
        f"<dt>Session</dt><dd>{_shown(approval.session_id or '(none)')}</dd>"
        f"<dt>Why it asks</dt><dd>{_shown(approval.reason)}</dd>"
        f"<dt>Asked by</dt><dd>{_asked_by(approval)}</dd>"
        f'<dt>Waiting</dt><dd><span data-since="{approval.since:.3f}">'
        f"since {esc(_when(approval.since))}</span></dd>"
        f'<dt>Approval</dt><dd><a href="{url}">{aid}</a></dd></dl>'
        f"{preview_html(approval.shown())}"
        f"{_allow_buttons(approval, url, aid, csrf)}"
        f'<form class="answer" method="post" action="{url}" data-id="{aid}">'
        f'<input type="hidden" name="csrf" value="{esc(csrf)}">'
        f'<label for="reason-{aid}">Reason (the model reads it)'
        f'<input type="text" id="reason-{aid}" name="reason" maxlength="2000"></label>'
        f'<button class="reject" name="decision" value="reject" aria-describedby="title-{aid}">'
        f"Reject</button></form>{session_hint}</{tag}>"
    )


def pending_cards(approvals: Iterable[PendingApproval], base: str, csrf: str) -> str:
    return "".join(approval_card(a, base, csrf) for a in approvals)


def pending_page(
    approvals: Sequence[PendingApproval], base: str, csrf: str, admin: str, timeout: float
) -> str:
    hidden = " hidden" if approvals else ""
    body = (
        f'<p class="muted">Calls waiting for a person, newest first. They update by '
        f"themselves; a call that is not answered within {timeout:g} s is rejected.</p>"
        f'<p id="pending-empty" class="empty"{hidden}>Nothing is waiting.</p>'
        f'<ul id="pending" class="cards">{pending_cards(approvals, base, csrf)}</ul>'
    )
    return layout("Pending approvals", body, base=base, csrf=csrf, active="pending", admin=admin)


def approval_page(
    approval: PendingApproval | None, approval_id: str, base: str, csrf: str, admin: str
) -> str:
    if approval is None:
        body = (
            f'<div data-approval="{esc(approval_id)}"><p>This approval is no longer waiting: '
            "it was answered, it timed out, or its call was cancelled.</p></div>"
            f'<p><a href="{esc(base)}">Back to the pending approvals</a></p>'
        )
    else:
        card = approval_card(approval, base, csrf, tag="div")
        body = f'<div data-approval="{esc(approval.id)}">{card}</div>'
    return layout("Approval", body, base=base, csrf=csrf, admin=admin)


# -- live state -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LiveState:
    """What the live-state fragment shows, read at one moment."""

    running: int
    queued: int
    wait_p50_ms: float
    wait_p99_ms: float
    by_pool: list[tuple[str, int, int]]
    by_session: list[tuple[str, int, int]]
    upstreams: list[tuple[str, str, int, int, str]]  # name, state, tools, restarts, last error
    pending: int


def _table(caption: str, head: Sequence[str], rows: Sequence[Sequence[str]], numeric: int) -> str:
    """``numeric``: how many trailing columns hold numbers."""
    if not rows:
        return f'<p class="empty">{esc(caption)}: none.</p>'
    first = len(head) - numeric

    def cells(values: Sequence[str], tag: str) -> str:
        return "".join(
            f"<{tag}{' class=num' if i >= first else ''}>{v}</{tag}>" for i, v in enumerate(values)
        )

    body = "".join(f"<tr>{cells(row, 'td')}</tr>" for row in rows)
    return (
        f'<div class="table"><table><caption class="muted">{esc(caption)}</caption>'
        f"<thead><tr>{cells([esc(h) for h in head], 'th')}</tr></thead>"
        f"<tbody>{body}</tbody></table></div>"
    )


def live_fragment(state: LiveState, base: str) -> str:
    pools = [(esc(p), str(r), str(q)) for p, r, q in state.by_pool]
    sessions = [(esc(s), str(r), str(q)) for s, r, q in state.by_session]
    upstreams = [
        (esc(n), f'<span class="{_state_class(s)}">{esc(s)}</span>', str(t), str(r), esc(e))
        for n, s, t, r, e in state.upstreams
    ]
    pending = (
        f'<a href="{esc(base)}">{state.pending} pending approval'
        f"{'' if state.pending == 1 else 's'}</a>"
    )
    return (
        f'<p><strong id="running">{state.running}</strong> running · '
        f'<strong id="queued">{state.queued}</strong> queued · admission wait p50 '
        f"{state.wait_p50_ms:.1f} ms, p99 {state.wait_p99_ms:.1f} ms · {pending}</p>"
        "<h2>Per session</h2>"
        + _table("Calls per session", ("session", "running", "queued"), sessions, 2)
        + "<h2>Per pool</h2>"
        + _table("Calls per pool", ("pool", "running", "queued"), pools, 2)
        + "<h2>Upstream servers</h2>"
        + _table(
            "Upstream MCP servers",
            ("server", "state", "tools", "restarts", "last error"),
            upstreams,
            0,
        )
    )


def _state_class(state: str) -> str:
    return {"ready": "ok", "closed": "bad"}.get(state, "warn")


def _outcome_html(outcome: str, reason: str | None) -> str:
    css = "ok" if outcome == "ok" else "bad"
    shown = outcome if not reason else f"{outcome} ({reason})"
    return f'<span class="{css}">{esc(shown)}</span>'


def decisions_table(records: Sequence[CallRecord], base: str) -> str:
    rows = [
        (
            esc(_when(r.started)),
            f'<a href="{esc(base)}/calls/{esc(quote(r.execution_id))}">{esc(r.tool)}</a>',
            esc(r.principal or ""),
            esc(r.session or ""),
            esc(f"{r.decision or '-'} ({r.source or '-'})"),
            _outcome_html(r.outcome, r.reason),
            _ms(r.total_ms),
        )
        for r in records
    ]
    return _table(
        "Recent decisions, newest first",
        ("time", "tool", "principal", "session", "decision (source)", "outcome", "ms"),
        rows,
        1,
    )


def _select(name: str, label: str, options: Sequence[str], chosen: str) -> str:
    choices = '<option value="">any</option>' + "".join(
        f'<option value="{esc(o)}"{" selected" if o == chosen else ""}>{esc(o)}</option>'
        for o in options
    )
    return (
        f'<label for="f-{name}">{esc(label)}'
        f'<select id="f-{name}" name="{name}">{choices}</select></label>'
    )


def state_page(
    state: LiveState,
    records: Sequence[CallRecord],
    choices: tuple[list[str], list[str], list[str]],
    filters: Mapping[str, str],
    base: str,
    csrf: str,
    admin: str,
) -> str:
    tools, principals, outcomes = choices
    form = (
        f'<form class="filters" method="get" action="{esc(base)}/state">'
        + _select("tool", "Tool", tools, filters.get("tool", ""))
        + _select("principal", "Principal", principals, filters.get("principal", ""))
        + _select("outcome", "Outcome", outcomes, filters.get("outcome", ""))
        + '<button type="submit">Filter</button></form>'
    )
    body = (
        '<p class="muted">Updated as it changes. The scheduler admits calls round-robin across '
        "sessions: a session that floods waits in its own line.</p>"
        f'<section id="live" aria-label="Running and queued calls">{live_fragment(state, base)}'
        f"{decisions_table(records, base)}</section>"
        f"<h2>Filter the recent decisions</h2>{form}"
    )
    return layout("Live state", body, base=base, csrf=csrf, active="state", admin=admin)


def filter_query(filters: Mapping[str, str]) -> str:
    kept = {k: v for k, v in filters.items() if v}
    return ("?" + urlencode(kept)) if kept else ""


# -- one call -------------------------------------------------------------------------------------


def call_page(
    record: CallRecord | None, execution_id: str, base: str, csrf: str, admin: str
) -> str:
    if record is None:
        body = (
            f"<p>No call {esc(execution_id)} is remembered here: the console keeps the most "
            "recent calls of this gateway process.</p>"
            f'<p><a href="{esc(base)}/state">Back to the live state</a></p>'
        )
        return layout("Call not found", body, base=base, csrf=csrf, admin=admin)
    r = record
    facts = (
        f"<dt>Execution id</dt><dd><code>{esc(r.execution_id)}</code></dd>"
        f"<dt>Principal</dt><dd>{esc(r.principal or '')}</dd>"
        f"<dt>Session</dt><dd>{esc(r.session or '(none)')}</dd>"
        f"<dt>Started</dt><dd>{esc(_when(r.started))}</dd>"
        f"<dt>Decision</dt><dd>{esc(r.decision or 'none (refused before a decision)')}"
        f"{esc(f' (source {r.source})') if r.source else ''}</dd>"
        f"<dt>Outcome</dt><dd>{_outcome_html(r.outcome, r.reason)}"
        f"{' · replayed from the journal' if r.replayed else ''}</dd>"
    )
    trail_rows = [
        (
            esc(step.stage),
            _outcome_html(step.outcome, None)
            if step.outcome not in ("passed", "running")
            else esc(step.outcome),
            _ms(step.ms),
            esc(step.said)
            + (f" <span class=muted>[{esc(step.rule_source)}]</span>" if step.rule_source else ""),
        )
        for step in r.trail()
    ]
    trail = _table(
        "The stages the call passed, in order",
        ("stage", "outcome", "ms", "what it said"),
        trail_rows,
        0,
    )
    timings = (
        f"<dt>Admission wait</dt><dd>{_ms(r.admission_wait_ms) or '-'} ms</dd>"
        f"<dt>Run</dt><dd>{_ms(r.run_ms) or '-'} ms</dd>"
        f"<dt>Total</dt><dd>{_ms(r.total_ms)} ms</dd>"
    )
    body = (
        f'<div class="card"><dl>{facts}</dl></div>'
        f"<h2>Arguments</h2>{arguments_html(r.arguments)}"
        f"<h2>Decision trail</h2>{trail}"
        f'<h2>Timings</h2><div class="card"><dl>{timings}</dl></div>'
        f'<h2>Result (head)</h2><pre aria-label="Result">{esc(r.result_head) or "(empty)"}</pre>'
        f'<p><a href="{esc(base)}/state">Back to the live state</a></p>'
    )
    return layout(f"Call {r.tool}", body, base=base, csrf=csrf, admin=admin)
