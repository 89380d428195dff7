"""What a caller or a stranger cannot do to the console: make its pages as large as the arguments
it sends, fill it with calls of its own, hold its forms open by sending slowly, out-guess the
sign-in limit by sending guesses at once, keep a live stream after signing out, or reach it
from another machine when the gateway serves this machine only."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

import fastgate
from fastgate import ApprovalResponse, ToolKind
from fastgate.serve import Gateway
from fastgate.serve._approvals import PENDING_PER_PRINCIPAL
from tests.serve.console_kit import ADMIN, admins, console_gateway, origin_of
from tests.serve.kit import executor, post_modern, registry, rpc_result, serving, tokens_file

ALICE, BOB = "alice-secret-token", "bob-secret-token"


@fastgate.tool(kind=ToolKind.EXECUTE)
async def bulk(items: list[int], table: dict[str, int], memo: str = "") -> str:
    """Store a batch (asks: the mode asks before any command).

    Args:
        items: the values.
        table: named values.
        memo: a note.
    """
    return f"stored {len(items)} items"


def _gateway(folder: Path, **options: Any) -> Gateway:
    return Gateway(
        executor(registry(bulk)),
        approvals="console",
        console=True,
        console_tokens=admins(folder),
        **options,
    )


async def _signed_in(http: httpx.AsyncClient, origin: str) -> str:
    """Sign ``http`` in; the session's CSRF token."""
    answer = await http.post(f"{origin}/console/login", data={"token": ADMIN})
    assert answer.status_code == 303, answer.text
    page = await http.get(f"{origin}/console")
    found = re.search(r'data-csrf="([^"]+)"', page.text)
    assert found is not None
    return found.group(1)


async def _until_pending(gateway: Gateway, following: AsyncIterator[Any], count: int) -> None:
    async with asyncio.timeout(60):
        while len(gateway.pending.pending()) < count:
            await anext(following)


async def _reject_all(gateway: Gateway) -> None:
    for waiting in gateway.pending.pending():
        gateway.pending.answer(waiting.id, ApprovalResponse(False, feedback="no"))


def _call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


# -- the arguments a card shows are bounded ---------------------------------------------------


async def test_huge_arguments_make_a_bounded_card_made_once(tmp_path: Path) -> None:
    gateway = _gateway(tmp_path, max_body=16 * 1024 * 1024)
    arguments = {
        "items": list(range(200_000)),
        "table": {f"k{i:06d}": i for i in range(50_000)},
        "memo": "m" * 100_000,
    }
    calls = 3
    following = gateway.pending.events()
    async with serving(gateway) as url, httpx.AsyncClient(timeout=60) as http:
        origin = origin_of(url)
        asking = [
            asyncio.create_task(
                post_modern(
                    http,
                    url,
                    "tools/call",
                    _call("bulk", arguments),
                    headers={"mcp-client-session": f"s{n}"},
                )
            )
            for n in range(calls)
        ]
        await _until_pending(gateway, following, calls)
        # Made once, when the call began to wait: every page and stream reuses it.
        made = [getattr(w, "preview", None) is not None for w in gateway.pending.pending()]
        await _signed_in(http, origin)
        page = (await http.get(f"{origin}/console")).text
        async with http.stream("GET", f"{origin}/console/events") as stream:
            first = ""
            async for chunk in stream.aiter_text():
                first += chunk
                if "\n\n" in first:
                    break
        await _reject_all(gateway)
        answers = await asyncio.gather(*asking)
    await following.aclose()  # type: ignore[attr-defined]
    for answer in answers:
        assert rpc_result(answer)["_meta"]["fastgate"]["code"] == "USER_REJECTED"
    # Each card: the folded preview (at most 8,000 characters) and the full arguments cut at
    # 65,536, escaped; the arguments themselves are over 1.6 MB of JSON.
    assert len(page) < calls * 110_000 + 10_000, len(page)
    snapshot = json.loads(first.split("data: ", 1)[1].split("\n", 1)[0])
    assert len(snapshot) < calls * 110_000 + 10_000, len(snapshot)
    assert page.count("… (+199980 more items)") == calls
    assert page.count("… (+49980 more keys)") == calls
    assert page.count("… (+99800 characters)") == calls
    assert page.count("… (cut after 65536 characters)") == calls
    card = page.split('<li class="card"')[1]
    preview = card.split('<pre aria-label="Arguments">')[1].split("</pre>")[0]
    full = card.split("<details>")[1].split("</details>")[0]
    assert "&quot;k000019&quot;: 19" in preview and "k000020" not in preview
    assert "\n    19,\n" in preview and "\n    20,\n" not in preview
    assert "\n    20,\n" in full  # the full text goes on where the preview folds
    assert made == [True] * calls
    gateway.executor.dispose()


async def test_a_finished_call_keeps_a_bounded_head_of_huge_arguments(tmp_path: Path) -> None:
    """What the console keeps of a finished call's arguments is the head of the encoding the
    gateway made for their digest: nothing of their size is encoded again to show them (the
    recorder encodes nothing: it reads a head of those bytes)."""
    gateway = _gateway(tmp_path, max_body=16 * 1024 * 1024)
    huge = {"items": list(range(200_000)), "table": {"k": 1}}  # 1.3 MB of JSON
    small = {"items": [1], "table": {}}
    following = gateway.pending.events()
    async with serving(gateway) as url, httpx.AsyncClient(timeout=60) as http:
        origin = origin_of(url)
        ran: list[str] = []
        for arguments in (huge, small):
            asking = asyncio.create_task(
                post_modern(http, url, "tools/call", _call("bulk", arguments))
            )
            await _until_pending(gateway, following, 1)
            (waiting,) = gateway.pending.pending()
            assert gateway.pending.answer(waiting.id, ApprovalResponse(True))
            assert rpc_result(await asking)["isError"] is False
            assert waiting.execution_id is not None
            ran.append(waiting.execution_id)
        await _signed_in(http, origin)
        page = (await http.get(f"{origin}/console/calls/{ran[0]}")).text
    await following.aclose()  # type: ignore[attr-defined]
    assert gateway.calls is not None
    kept = [gateway.calls.get(execution_id) for execution_id in ran]
    assert kept[0] is not None and kept[1] is not None
    note = "… (cut after 16384 characters)"
    head = kept[0].arguments
    assert isinstance(head, str) and head.startswith('{"items":[0,1,2,3,') and head.endswith(note)
    assert len(head) == 16_384 + len(note)
    assert kept[1].arguments == small  # a copy of arguments that fit
    assert note in page and len(page) < 60_000, len(page)
    gateway.executor.dispose()


async def test_one_principal_cannot_fill_the_console(tmp_path: Path) -> None:
    gateway = _gateway(tmp_path, tokens=tokens_file(tmp_path / "tokens.json"))
    small = _call("bulk", {"items": [1], "table": {}})
    following = gateway.pending.events()
    async with serving(gateway) as url, httpx.AsyncClient(timeout=60) as http:

        def ask(token: str, session: str) -> asyncio.Task[httpx.Response]:
            headers = {"mcp-client-session": session}
            return asyncio.create_task(
                post_modern(http, url, "tools/call", small, token=token, headers=headers)
            )

        waiting = [ask(ALICE, f"s{n}") for n in range(PENDING_PER_PRINCIPAL)]
        await _until_pending(gateway, following, PENDING_PER_PRINCIPAL)
        # One more of alice's: refused at once, saying why; nothing waits for it.
        async with asyncio.timeout(30):
            refused = rpc_result(await ask(ALICE, "one-more"))
        assert refused["isError"] is True
        meta = refused["_meta"]["fastgate"]
        assert meta["code"] == "RESOURCE_EXHAUSTED", meta
        assert meta["reason"] == "too_many_pending_approvals", meta
        assert f"at most {PENDING_PER_PRINCIPAL}" in refused["content"][0]["text"]
        assert len(gateway.pending.pending()) == PENDING_PER_PRINCIPAL
        # Another principal is still asked.
        waiting.append(ask(BOB, "b"))
        await _until_pending(gateway, following, PENDING_PER_PRINCIPAL + 1)
        assert {w.principal for w in gateway.pending.pending()} == {"alice", "bob"}
        await _reject_all(gateway)
        for answer in await asyncio.gather(*waiting):
            assert rpc_result(answer)["_meta"]["fastgate"]["code"] == "USER_REJECTED"
        # Once answered, alice may ask again.
        again = ask(ALICE, "later")
        await _until_pending(gateway, following, 1)
        await _reject_all(gateway)
        assert rpc_result(await again)["_meta"]["fastgate"]["code"] == "USER_REJECTED"
    await following.aclose()  # type: ignore[attr-defined]
    gateway.executor.dispose()


# -- every form has the body deadline ---------------------------------------------------------

LIMIT = 1.0  # the gateway's read timeout in these tests


async def _slow_body(port: int, path: str, cookie: str = "") -> tuple[bytes, float]:
    """POST ``path`` whose body stops after a few bytes of the 100 announced: what the server
    answered and when it closed the connection (inf: still open after ``LIMIT + 4`` s)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n"
        + (f"Cookie: fastgate_console={cookie}\r\n" if cookie else "")
        + "\r\n"
    )
    started = time.monotonic()
    writer.write(head.encode() + b"csrf=x&token=y")
    try:
        async with asyncio.timeout(LIMIT + 4):
            answer = await reader.read()  # until the server closes
        return answer, time.monotonic() - started
    except TimeoutError:
        return b"", float("inf")
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def test_every_console_form_has_the_body_deadline(tmp_path: Path) -> None:
    gateway = console_gateway(tmp_path, read_timeout=LIMIT)
    async with serving(gateway) as url, httpx.AsyncClient(timeout=30) as http:
        origin = origin_of(url)
        port = int(origin.rsplit(":", 1)[1])
        await _signed_in(http, origin)
        cookie = http.cookies["fastgate_console"]
        paths = {
            "/console/login": "",
            "/console/logout": cookie,
            "/console/approvals/a1-x": cookie,
        }
        results = await asyncio.gather(*(_slow_body(port, p, c) for p, c in paths.items()))
        for path, (answer, closed) in zip(paths, results, strict=True):
            assert answer.startswith(b"HTTP/1.1 408 "), (path, answer)
            assert closed <= LIMIT + 2, (path, closed)
        # Nothing was changed by them: the session is still signed in, a prompt form works.
        assert (await http.get(f"{origin}/console")).status_code == 200
        assert (
            await http.post(f"{origin}/console/login", data={"token": ADMIN})
        ).status_code == 303
        metrics = (await http.get(f"{origin}/metrics")).text
        assert 'fastgate_http_rejections_total{status="408"} 3.0' in metrics
    gateway.executor.dispose()


# -- the sign-in limit holds for guesses sent at once -----------------------------------------


async def test_sign_ins_sent_at_once_judge_no_more_than_the_limit(tmp_path: Path) -> None:
    gateway = console_gateway(tmp_path)
    guesses, limit = 30, 10
    async with serving(gateway) as url:
        origin = origin_of(url)
        port = int(origin.rsplit(":", 1)[1])
        connections = [await asyncio.open_connection("127.0.0.1", port) for _ in range(guesses)]
        bodies = [f"token=wrong-{n}".encode() for n in range(guesses)]
        try:
            # Every request's head first, its token later: the limit must hold all the same.
            for (_, writer), body in zip(connections, bodies, strict=True):
                writer.write(
                    f"POST /console/login HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                    "Content-Type: application/x-www-form-urlencoded\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n".encode()
                )
            status = [asyncio.ensure_future(reader.readline()) for reader, _ in connections]
            # Those beyond the limit are answered without their token.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(15):
                    early = 0
                    for answered in asyncio.as_completed(status):
                        await answered
                        early += 1
                        if early == guesses - limit:
                            break
            for (_, writer), body, line in zip(connections, bodies, status, strict=True):
                if not line.done():
                    writer.write(body)
            async with asyncio.timeout(30):
                lines = [(await line).decode().strip() for line in status]
        finally:
            for _, writer in connections:
                writer.close()
        judged = [line for line in lines if line.startswith("HTTP/1.1 401 ")]
        refused = [line for line in lines if line.startswith("HTTP/1.1 429 ")]
        assert (len(judged), len(refused)) == (limit, guesses - limit), lines
        async with httpx.AsyncClient(timeout=30) as http:  # the minute is used up, right or not
            answer = await http.post(f"{origin}/console/login", data={"token": ADMIN})
            assert answer.status_code == 429
    gateway.executor.dispose()


async def test_a_right_token_does_not_count_against_the_limit(tmp_path: Path) -> None:
    gateway = console_gateway(tmp_path)
    async with serving(gateway) as url, httpx.AsyncClient(timeout=30) as http:
        login = f"{origin_of(url)}/console/login"
        for _ in range(15):
            assert (await http.post(login, data={"token": ADMIN})).status_code == 303
        statuses = [(await http.post(login, data={"token": "no"})).status_code for _ in range(11)]
        assert statuses == [401] * 10 + [429]
    gateway.executor.dispose()


# -- a live stream ends with its session ------------------------------------------------------


async def _until_closed(response: httpx.Response) -> str:
    """The rest of a stream's text, once the server has ended it."""
    text = ""
    async with asyncio.timeout(20):
        async for chunk in response.aiter_text():
            text += chunk
    return text


async def test_a_live_stream_ends_when_its_session_does(tmp_path: Path) -> None:
    gateway = console_gateway(tmp_path)
    following = gateway.pending.events()
    async with serving(gateway) as url, httpx.AsyncClient(timeout=30) as http:
        origin = origin_of(url)
        csrf = await _signed_in(http, origin)
        async with (
            http.stream("GET", f"{origin}/console/events") as approvals,
            http.stream("GET", f"{origin}/console/state/events") as state,
        ):
            assert approvals.status_code == state.status_code == 200
            signed_out = await http.post(f"{origin}/console/logout", data={"csrf": csrf})
            assert signed_out.status_code == 303
            ended = await asyncio.gather(_until_closed(approvals), _until_closed(state))
        for text in ended:
            assert "event: ended\n" in text
            assert "Signed out" in text
        # A call that asks now is shown to nobody who signed out.
        async with httpx.AsyncClient(timeout=30) as caller:
            call = asyncio.create_task(
                post_modern(caller, url, "tools/call", _call("pay", {"amount": 1.0, "to": "Z"}))
            )
            await _until_pending(gateway, following, 1)
            assert (await http.get(f"{origin}/console/events")).status_code == 401
            await _reject_all(gateway)
            await call
    await following.aclose()  # type: ignore[attr-defined]
    gateway.executor.dispose()


async def test_a_live_stream_ends_when_its_session_expires(tmp_path: Path) -> None:
    gateway = console_gateway(tmp_path)
    assert gateway._console is not None
    gateway._console.sessions.ttl = 3.0  # (eight hours otherwise; room to sign in under load)
    async with serving(gateway) as url, httpx.AsyncClient(timeout=30) as http:
        origin = origin_of(url)
        await _signed_in(http, origin)
        async with http.stream("GET", f"{origin}/console/events") as approvals:
            assert approvals.status_code == 200
            text = await _until_closed(approvals)
        assert "event: ended\n" in text
        assert (await http.get(f"{origin}/console/events")).status_code == 401
    gateway.executor.dispose()


async def test_a_stream_ends_when_the_expiry_timer_fires_before_the_clock_reaches_it(
    tmp_path: Path,
) -> None:
    """uvloop's timer clock runs a little ahead of ``time.monotonic()``: the expiry timer can
    fire while the session still looks current to ``get``. The stream must end all the same."""
    gateway = console_gateway(tmp_path)
    assert gateway._console is not None
    async with serving(gateway) as url, httpx.AsyncClient(timeout=30) as http:
        origin = origin_of(url)
        await _signed_in(http, origin)
        (session,) = gateway._console.sessions._sessions.values()
        async with http.stream("GET", f"{origin}/console/events") as approvals:
            assert approvals.status_code == 200
            session.ended.set()  # what the timer does, with the expiry not yet reached
            text = await _until_closed(approvals)
        assert "event: ended\n" in text
    gateway.executor.dispose()


# -- without tokens, this machine only --------------------------------------------------------

REMOTE = {"x-forwarded-for": "192.0.2.2"}  # (uvicorn believes it from 127.0.0.1: a proxy)


async def test_without_tokens_the_console_serves_this_machine_only(tmp_path: Path) -> None:
    gateway = console_gateway(tmp_path)
    async with serving(gateway) as url, httpx.AsyncClient(timeout=30) as http:
        origin = origin_of(url)
        assert (await post_modern(http, url, "tools/list", {}, headers=REMOTE)).status_code == 403
        for path in (
            "/console",
            "/console/login",
            "/console/state",
            "/console/events",
            "/console/state/events",
            "/console/calls/x",
            "/console/approvals/a1-x",
            "/console/static/console.js",
            "/console/static/console.css",
        ):
            answer = await http.get(origin + path, headers=REMOTE)
            assert answer.status_code == 403, (path, answer.status_code)
            assert "fastgate console" not in answer.text
        remote_sign_in = await http.post(
            f"{origin}/console/login", data={"token": ADMIN}, headers=REMOTE
        )
        assert remote_sign_in.status_code == 403 and "set-cookie" not in remote_sign_in.headers
        assert (await http.get(f"{origin}/healthz", headers=REMOTE)).status_code == 200
        # From this machine, as ever.
        assert (await http.get(f"{origin}/console/login")).status_code == 200
        await _signed_in(http, origin)
    gateway.executor.dispose()


async def test_with_tokens_the_console_serves_other_machines(tmp_path: Path) -> None:
    gateway = console_gateway(tmp_path, tokens=tokens_file(tmp_path / "tokens.json"))
    async with serving(gateway) as url, httpx.AsyncClient(timeout=30) as http:
        origin = origin_of(url)
        assert (await http.get(f"{origin}/console/login", headers=REMOTE)).status_code == 200
        answer = await http.post(f"{origin}/console/login", data={"token": ADMIN}, headers=REMOTE)
        assert answer.status_code == 303
    gateway.executor.dispose()
