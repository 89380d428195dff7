"""The console in a real headless browser: sign-in, pending approvals arriving live, the answer
buttons reaching the waiting call (checked from the MCP client), two admins answering one
approval, a call that times out leaving the list, and a call's own page."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from fastgate.serve import Gateway, token_digest
from tests.serve.browser import browsers, screenshot, sign_in
from tests.serve.console_kit import ADMIN, PAID, admins, console_gateway, origin_of
from tests.serve.kit import (
    LEGACY,
    MODERN,
    client,
    executor,
    fastgate_meta,
    serving,
    text_of,
    tokens_file,
)

# A real browser: run once in CI, on the compiled build and its production loop.
pytestmark = [pytest.mark.slow, pytest.mark.one_loop]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    PAID.clear()
    return tmp_path


# -- sign-in ------------------------------------------------------------------------------------


async def test_sign_in_takes_an_admin_token_never_a_caller_s(folder: Path) -> None:
    gateway = console_gateway(folder, tokens=tokens_file(folder / "tokens.json"))
    async with serving(gateway) as url, browsers(folder) as opened:
        origin = origin_of(url)
        async with httpx.AsyncClient() as http:  # a caller's bearer token opens nothing
            bearer = {"authorization": "Bearer alice-secret-token"}
            for path in ("/console", "/console/state", "/console/events", "/console/calls/x"):
                answer = await http.get(origin + path, headers=bearer)
                assert answer.status_code in (303, 401), (path, answer.status_code)
                assert "Pending approvals" not in answer.text
            refused = await http.post(
                f"{origin}/console/approvals/a1-x", data={"decision": "once"}, headers=bearer
            )
            assert refused.status_code == 401
        page = await (await opened.launch()).new_page()
        await page.goto(f"{origin}/console")
        assert page.url.startswith(f"{origin}/console/login")  # signed out: asked to sign in
        for wrong in ("not-the-token", "alice-secret-token", ADMIN + " ", token_digest(ADMIN)):
            await page.fill("#token", wrong)
            async with page.expect_response(f"{origin}/console/login") as answered:
                await page.click("button[type=submit]")
            assert (await answered.value).status == 401
            assert "does not open the console" in await page.inner_text("[role=alert]")
        assert await page.context.cookies() == []
        await page.fill("#token", ADMIN)
        await page.click("button[type=submit]")
        await page.wait_for_url(f"{origin}/console")
        assert await page.inner_text("h1") == "Pending approvals"
        (cookie,) = await page.context.cookies()
        assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
        assert cookie["path"] == "/console"
        assert await page.evaluate("document.cookie") == ""  # no script reads it
        # Signing out ends the session: its cookie opens nothing any more.
        await page.click("text=Sign out")
        await page.wait_for_url(f"{origin}/console/login")
        await page.goto(f"{origin}/console/state")
        assert page.url.startswith(f"{origin}/console/login")
    gateway.executor.dispose()


# -- pending approvals, live --------------------------------------------------------------------


async def test_a_call_that_asks_appears_live_and_allow_once_completes_it(folder: Path) -> None:
    gateway = console_gateway(folder)
    hostile = "<script>window.pwned = 1</script><img src=x onerror=window.pwned=2>"
    arguments = {"amount": 42.5, "to": "ACME GmbH", "memo": hostile + " " + "x" * 400}
    async with serving(gateway) as url, browsers(folder) as opened:
        origin = origin_of(url)
        page = await (await opened.launch()).new_page()
        dialogs: list[str] = []
        page.on("dialog", lambda dialog: dialogs.append(dialog.message))
        await sign_in(page, origin, ADMIN)
        assert await page.is_visible("#pending-empty")
        async with client(url, LEGACY) as mcp:
            call = asyncio.create_task(mcp.call_tool("pay", arguments))
            card = page.locator("#pending .card")
            await card.wait_for()  # pushed to the open page: no reload
            assert await card.locator("h3").inner_text() == "pay"
            facts = await card.locator("dl").inner_text()
            assert "local" in facts  # the principal
            assert "rule pay in " + str(folder / "settings.json") in " ".join(facts.split())
            shown = await card.locator("pre").first.inner_text()
            assert hostile in shown and "ACME GmbH" in shown  # the script shown as text
            assert "(+" in shown  # the long value folded
            assert await page.evaluate("window.pwned === undefined")
            assert await page.locator("script").count() == 1  # the console's own only
            await screenshot(page, "pending", folder)
            await card.get_by_role("button", name="Allow once").click()
            done = await asyncio.wait_for(call, 20)
        assert not done.is_error, text_of(done)
        assert fastgate_meta(done)["decision_source"] == "user"
        assert PAID == [arguments]
        await page.locator("#pending .card").wait_for(state="detached")
        await page.locator("#status", has_text="Allowed once: pay for local.").wait_for()
        assert gateway.pending.pending() == []
        # The call's page, reached from its execution id: the trail, timings, result head.
        execution_id = fastgate_meta(done)["execution_id"]
        await page.goto(f"{origin}/console/calls/{execution_id}")
        trail = await page.locator("table").inner_text()
        assert "rule pay asks" in trail and str(folder / "settings.json") in trail
        assert "allowed (once) by admin-1 at the console" in trail
        for stage in ("lookup", "validation", "rules", "approval", "admission", "invocation"):
            assert stage in trail
        assert "paid 42.50 EUR to ACME GmbH" in await page.inner_text("pre[aria-label=Result]")
        assert "Admission wait" in await page.inner_text("main")
        assert await page.evaluate("window.pwned === undefined")
        await screenshot(page, "call", folder)
        assert dialogs == []
    gateway.executor.dispose()


async def test_allow_for_the_session_covers_the_next_identical_call_of_that_session_only(
    folder: Path,
) -> None:
    # The mode asks (an EXECUTE tool in the default mode): what a session approval may cover.
    gateway = Gateway(executor(), approvals="console", console=True, console_tokens=admins(folder))
    async with serving(gateway) as url, browsers(folder) as opened:
        origin = origin_of(url)
        page = await (await opened.launch()).new_page()
        await sign_in(page, origin, ADMIN)
        card = page.locator("#pending .card")
        async with client(url, MODERN, headers={"mcp-client-session": "s1"}) as s1:
            first = asyncio.create_task(s1.call_tool("deploy", {"target": "eu"}))
            await card.wait_for()
            assert "local/s1" in await card.locator("dl").inner_text()
            await card.get_by_role("button", name="Allow for the session").click()
            assert not (await asyncio.wait_for(first, 20)).is_error
            again = await s1.call_tool("deploy", {"target": "eu"})  # no question this time
            assert fastgate_meta(again)["decision_source"] == "session"
            other_target = asyncio.create_task(s1.call_tool("deploy", {"target": "us"}))
            await card.wait_for()  # other arguments: asked again
            await card.get_by_role("button", name="Reject").click()
            assert fastgate_meta(await asyncio.wait_for(other_target, 20))["code"] == (
                "USER_REJECTED"
            )
        async with client(url, MODERN, headers={"mcp-client-session": "s2"}) as s2:
            elsewhere = asyncio.create_task(s2.call_tool("deploy", {"target": "eu"}))
            await card.wait_for()  # another session: asked again
            assert "local/s2" in await card.locator("dl").inner_text()
            await card.get_by_role("button", name="Reject").click()
            refused = await asyncio.wait_for(elsewhere, 20)
        assert fastgate_meta(refused)["code"] == "USER_REJECTED"
    gateway.executor.dispose()


async def test_reject_with_a_reason_is_the_model_s_feedback(folder: Path) -> None:
    gateway = console_gateway(folder)
    async with serving(gateway) as url, browsers(folder) as opened:
        origin = origin_of(url)
        page = await (await opened.launch()).new_page()
        await sign_in(page, origin, ADMIN)
        async with client(url, MODERN) as mcp:
            call = asyncio.create_task(mcp.call_tool("pay", {"amount": 900.0, "to": "Mallory"}))
            card = page.locator("#pending .card")
            await card.wait_for()
            await card.get_by_label("Reason").fill("Unknown payee: ask finance first")
            await card.get_by_label("Reason").press("Enter")  # the reason's own form: Reject
            refused = await asyncio.wait_for(call, 20)
        assert refused.is_error and fastgate_meta(refused)["code"] == "USER_REJECTED"
        assert text_of(refused) == "Unknown payee: ask finance first"
        assert PAID == []
        await page.locator("#status", has_text="Rejected: pay for local.").wait_for()
    gateway.executor.dispose()


async def test_two_admins_answer_one_approval_the_first_wins(folder: Path) -> None:
    gateway = console_gateway(folder)
    async with serving(gateway) as url, browsers(folder) as opened:
        origin = origin_of(url)
        first = await (await opened.launch()).new_page()
        second = await (await opened.launch()).new_page()
        await sign_in(first, origin, ADMIN)
        await sign_in(second, origin, ADMIN)
        async with client(url, LEGACY) as mcp:
            call = asyncio.create_task(mcp.call_tool("pay", {"amount": 1.0, "to": "Bob"}))
            for page in (first, second):
                await page.locator("#pending .card").wait_for()
            (waiting,) = gateway.pending.pending()
            # The second admin's form, as its page holds it, sent once the first has answered.
            form = second.locator("#pending .card form").first
            action = await form.get_attribute("action")
            csrf = await form.locator("input[name=csrf]").get_attribute("value")
            await first.locator("#pending .card").get_by_role("button", name="Allow once").click()
            done = await asyncio.wait_for(call, 20)
            await second.locator("#pending .card").wait_for(state="detached")  # gone, live
            await second.locator("#status", has_text="was answered: allowed once").wait_for()
            late = await second.evaluate(
                """async ([action, csrf]) => {
                    const response = await fetch(action, {method: "POST",
                        headers: {"Accept": "application/json"},
                        body: new URLSearchParams({csrf: csrf, decision: "reject"})});
                    return [response.status, await response.json()];
                }""",
                [action, csrf],
            )
            assert late[0] == 409 and late[1]["state"] == "gone"
            assert "no longer waiting" in late[1]["message"]
            await second.goto(f"{origin}/console/approvals/{waiting.id}")
            assert "no longer waiting" in await second.inner_text("main")
        assert not done.is_error and PAID == [{"amount": 1.0, "to": "Bob", "memo": ""}]
    gateway.executor.dispose()


async def test_a_call_that_times_out_leaves_the_list_by_itself(folder: Path) -> None:
    gateway = console_gateway(folder, approval_timeout=1.5)
    async with serving(gateway) as url, browsers(folder) as opened:
        origin = origin_of(url)
        page = await (await opened.launch()).new_page()
        await sign_in(page, origin, ADMIN)
        async with client(url, LEGACY) as mcp:
            call = asyncio.create_task(mcp.call_tool("pay", {"amount": 3.0, "to": "Carol"}))
            card = page.locator("#pending .card")
            await card.wait_for()
            await card.wait_for(state="detached", timeout=20_000)  # no click, no reload
            refused = await asyncio.wait_for(call, 20)
        await page.locator("#status", has_text="timed out").wait_for()
        assert await page.is_visible("#pending-empty")
        meta = fastgate_meta(refused)
        assert meta["code"] == "PERMISSION_DENIED" and meta["reason"] == "approval_timeout", meta
        assert PAID == []
    gateway.executor.dispose()


async def test_a_cancelled_call_leaves_the_list_by_itself(folder: Path) -> None:
    gateway = console_gateway(folder)
    async with serving(gateway) as url, browsers(folder) as opened:
        origin = origin_of(url)
        page = await (await opened.launch()).new_page()
        await sign_in(page, origin, ADMIN)
        async with client(url, LEGACY) as mcp:
            call = asyncio.create_task(mcp.call_tool("pay", {"amount": 5.0, "to": "Dan"}))
            card = page.locator("#pending .card")
            await card.wait_for()
            call.cancel()  # the client gives up: the SDK sends notifications/cancelled
            with pytest.raises(asyncio.CancelledError):
                await call
            await card.wait_for(state="detached", timeout=20_000)
        await page.locator("#status", has_text="cancelled").wait_for()
        assert gateway.pending.pending() == [] and PAID == []
    gateway.executor.dispose()


# -- URL-mode elicitation -------------------------------------------------------------------------


async def test_url_mode_elicitation_sends_the_client_to_the_approval_s_page(folder: Path) -> None:
    from mcp_types import ElicitResult

    gateway = console_gateway(folder)
    pointed: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def open_the_url(context: Any, params: Any) -> ElicitResult:
        if getattr(params, "mode", None) == "url":
            pointed.set_result(params.url)
            return ElicitResult(action="accept")
        return ElicitResult(action="decline")

    async with serving(gateway) as url, browsers(folder) as opened:
        origin = origin_of(url)
        page = await (await opened.launch(phone=True)).new_page()
        async with client(url, LEGACY, elicitation_callback=open_the_url) as mcp:
            call = asyncio.create_task(mcp.call_tool("pay", {"amount": 7.0, "to": "Erin"}))
            approval_url = await asyncio.wait_for(pointed, 20)
            (waiting,) = gateway.pending.pending()
            assert approval_url == f"{origin}/console/approvals/{waiting.id}"
            await page.goto(approval_url)  # signed out: the sign-in leads back to it
            await page.fill("#token", ADMIN)
            await page.click("button[type=submit]")
            await page.wait_for_url(approval_url)
            await page.get_by_role("button", name="Allow once").click()
            done = await asyncio.wait_for(call, 20)
        assert not done.is_error and PAID == [{"amount": 7.0, "to": "Erin", "memo": ""}]
        width = await page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390  # readable on a phone: nothing wider than the screen
    gateway.executor.dispose()
