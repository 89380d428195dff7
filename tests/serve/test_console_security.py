"""The console's defences, in a real browser: every state-changing request needs the session's
CSRF token and must come from the console's own origin; another site's page cannot answer an
approval even with the token; values are escaped; no page names or fetches anything outside
the gateway; the pages work from the keyboard alone."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.serve.browser import browsers, sign_in
from tests.serve.console_kit import ADMIN, PAID, console_gateway, origin_of
from tests.serve.kit import LEGACY, MODERN, client, fastgate_meta, serving

# A real browser: run once in CI, on the compiled build and its production loop.
pytestmark = [pytest.mark.slow, pytest.mark.one_loop]

_POST = """async ([action, fields, headers]) => {
    const response = await fetch(action, {method: "POST", headers: headers,
        body: new URLSearchParams(fields)});
    return response.status;
}"""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    PAID.clear()
    return tmp_path


async def _csrf_and_action(page: Any) -> tuple[str, str]:
    form = page.locator("#pending .card form").first
    action = await form.get_attribute("action")
    csrf = await form.locator("input[name=csrf]").get_attribute("value")
    assert action and csrf
    return action, csrf


async def test_a_state_changing_request_needs_the_csrf_token_and_the_console_s_origin(
    folder: Path,
) -> None:
    gateway = console_gateway(folder)
    async with serving(gateway) as url, browsers(folder) as opened:
        origin = origin_of(url)
        context = await opened.launch()
        page = await context.new_page()
        await sign_in(page, origin, ADMIN)
        async with client(url, LEGACY) as mcp:
            call = asyncio.create_task(mcp.call_tool("pay", {"amount": 9.0, "to": "Zed"}))
            await page.locator("#pending .card").wait_for()
            action, csrf = await _csrf_and_action(page)
            absolute = origin + action

            # From the console's own page, but without a valid token.
            for fields, headers in (
                ({"decision": "once"}, {}),
                ({"decision": "once", "csrf": ""}, {}),
                ({"decision": "once", "csrf": csrf[:-1] + ("A" if csrf[-1] != "A" else "B")}, {}),
                ({"decision": "once"}, {"X-CSRF-Token": "not-it"}),
            ):
                status = await page.evaluate(_POST, [action, fields, headers])
                assert status == 403, (fields, headers)
            # With the token, from elsewhere (the session's cookie copied into another client).
            (cookie,) = await context.cookies()
            jar = {cookie["name"]: cookie["value"]}
            async with httpx.AsyncClient(cookies=jar) as http:
                for headers in (
                    {"origin": "http://evil.example"},
                    {"origin": "null"},
                    {"origin": origin.replace("127.0.0.1", "localhost")},
                    {"origin": origin.rsplit(":", 1)[0] + ":1"},
                    {"sec-fetch-site": "cross-site"},
                    {"sec-fetch-site": "same-site"},
                ):
                    answer = await http.post(
                        absolute, data={"decision": "once", "csrf": csrf}, headers=headers
                    )
                    assert answer.status_code == 403, headers
            # Another site's page in the browser, holding the token, posting a form.
            attacker = await context.new_page()
            await attacker.route(
                "http://attacker.test/**",
                lambda route: route.fulfill(body="<html><body>win a prize</body></html>"),
            )
            await attacker.goto("http://attacker.test/")
            async with attacker.expect_response(absolute) as posted:
                await attacker.evaluate(
                    """([action, csrf]) => {
                        const form = document.createElement("form");
                        form.method = "post";
                        form.action = action;
                        for (const [name, value] of [["csrf", csrf], ["decision", "once"]]) {
                            const input = document.createElement("input");
                            input.name = name;
                            input.value = value;
                            form.appendChild(input);
                        }
                        document.body.appendChild(form);
                        form.submit();
                    }""",
                    [absolute, csrf],
                )
            assert (await posted.value).status in (401, 403)
            assert len(gateway.pending.pending()) == 1 and not call.done()  # still waiting
            # The same answer, done right: the console's page, its token.
            status = await page.evaluate(
                _POST, [action, {"decision": "reject", "reason": "no", "csrf": csrf}, {}]
            )
            assert status == 200
            refused = await asyncio.wait_for(call, 20)
        assert fastgate_meta(refused)["code"] == "USER_REJECTED" and PAID == []
        # Signing out is a state change too.
        assert await page.evaluate(_POST, ["/console/logout", {}, {}]) == 403
    gateway.executor.dispose()


_URL_ATTRIBUTE = re.compile(r"""\b(?:src|href|action)\s*=\s*["']([^"']*)["']""", re.IGNORECASE)


async def test_no_page_names_or_fetches_anything_outside_the_gateway(folder: Path) -> None:
    gateway = console_gateway(folder)
    hostile = {"amount": 1.0, "to": "https://evil.example/x", "memo": '"><script src=//e.x>'}
    async with serving(gateway) as url, browsers(folder) as opened:
        origin = origin_of(url)
        page = await (await opened.launch()).new_page()
        fetched: list[str] = []
        page.on("request", lambda request: fetched.append(request.url))
        await sign_in(page, origin, ADMIN)
        pages: dict[str, str] = {"login": ""}
        async with client(url, MODERN) as mcp:
            call = asyncio.create_task(mcp.call_tool("pay", hostile))
            card = page.locator("#pending .card")
            await card.wait_for()
            pages["pending"] = await page.content()
            (waiting,) = gateway.pending.pending()
            await page.goto(f"{origin}/console/approvals/{waiting.id}")
            pages["approval"] = await page.content()
            await page.get_by_role("button", name="Allow once").click()
            done = await asyncio.wait_for(call, 20)
        await page.goto(f"{origin}/console/state")
        pages["state"] = await page.content()
        await page.goto(f"{origin}/console/calls/{fastgate_meta(done)['execution_id']}")
        pages["call"] = await page.content()
        await page.goto(f"{origin}/console/calls/nope")
        pages["missing call"] = await page.content()
        await page.goto(f"{origin}/console/approvals/{waiting.id}")
        pages["gone approval"] = await page.content()
        for path in ("/console/static/console.css", "/console/static/console.js"):
            pages[path] = await (await page.request.get(origin + path)).text()
        await page.click("text=Sign out")
        await page.wait_for_url(f"{origin}/console/login")
        pages["login"] = await page.content()
    for name, text in pages.items():
        for target in _URL_ATTRIBUTE.findall(text):
            assert target.startswith(("/console", "#")), (name, target)
        unescaped = text.replace("https://evil.example/x", "").replace("//e.x", "")
        assert "http://" not in unescaped and "https://" not in unescaped, name
        assert "<script src=//e.x>" not in text, name  # the argument is text, not markup
    assert fetched and all(u.startswith(origin + "/console") for u in fetched), fetched
    assert not done.is_error
    gateway.executor.dispose()


async def test_the_pages_work_from_the_keyboard_alone(folder: Path) -> None:
    gateway = console_gateway(folder)
    async with serving(gateway) as url, browsers(folder) as opened:
        origin = origin_of(url)
        page = await (await opened.launch()).new_page()
        await page.goto(f"{origin}/console/login")
        # The token field takes the focus by itself (autofocus, applied at the page's next
        # rendering, which may come after "load" on a busy machine).
        await page.wait_for_function("document.activeElement.id === 'token'")
        await page.keyboard.type(ADMIN)
        await page.keyboard.press("Enter")
        await page.wait_for_url(f"{origin}/console")
        async with client(url, LEGACY) as mcp:
            call = asyncio.create_task(mcp.call_tool("pay", {"amount": 2.0, "to": "Kim"}))
            await page.locator("#pending .card").wait_for()
            focused = ""
            for _ in range(30):  # Tab through the page until the first answer button
                await page.keyboard.press("Tab")
                focused = await page.evaluate("document.activeElement.textContent")
                if focused == "Allow once":
                    break
            assert focused == "Allow once"
            outline = await page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
            assert outline != "none"  # the focus is visible
            await page.keyboard.press("Enter")
            done = await asyncio.wait_for(call, 20)
        assert not done.is_error and len(PAID) == 1
    gateway.executor.dispose()
