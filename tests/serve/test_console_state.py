"""The console's live state under a flood, in a real browser: while one caller's calls hold every
admission slot and queue behind it, the page shows each session's running and queued calls, the
console's own pages still load (they never wait for a tool's slot), and the figures follow the
flood live as it drains."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

import fastgate
from fastgate import SchedulerLimits, ToolKind
from fastgate.serve import Gateway
from tests.serve.browser import browsers, screenshot, sign_in
from tests.serve.console_kit import ADMIN, admins, origin_of
from tests.serve.kit import MODERN, client, executor, registry, serving, tokens_file

# A real browser: run once in CI, on the compiled build and its production loop.
pytestmark = [pytest.mark.slow, pytest.mark.one_loop]

FLOOD = 40  # alice's calls: two run, the rest queue
STEADY = 4  # bob's calls: all queue behind alice's running ones
RELEASES: dict[str, asyncio.Event] = {}


@fastgate.tool(kind=ToolKind.READ_ONLY, parallelism="shared", is_concurrency_safe=True)
async def hold(n: int) -> int:
    """Hold a slot until the test releases it.

    Args:
        n: returned.
    """
    await RELEASES["hold"].wait()
    return n


@pytest.fixture
def release() -> Any:
    RELEASES["hold"] = asyncio.Event()
    yield RELEASES["hold"]
    RELEASES.clear()


async def _session_rows(page: Any) -> dict[str, tuple[int, int]]:
    """The per-session table as the page shows it: session -> (running, queued)."""
    table = page.locator("table:has(caption:text-is('Calls per session'))")
    if not await table.count():
        return {}
    rows: dict[str, tuple[int, int]] = {}
    for cells in await table.locator("tbody tr").evaluate_all(
        "rows => rows.map(r => Array.from(r.cells, c => c.textContent))"
    ):
        session, running, queued = cells
        rows[session] = (int(running), int(queued))
    return rows


async def _until(page: Any, wanted: dict[str, tuple[int, int]]) -> None:
    """Until the page (updated by its own event stream, never reloaded) shows ``wanted``."""
    deadline = time.monotonic() + 20
    shown: dict[str, tuple[int, int]] = {}
    while time.monotonic() < deadline:
        shown = await _session_rows(page)
        if shown == wanted:
            return
        await page.wait_for_timeout(50)
    raise AssertionError(f"the page shows {shown}, expected {wanted}")


async def test_live_state_shows_each_session_s_queue_and_stays_responsive_under_a_flood(
    tmp_path: Path, release: asyncio.Event
) -> None:
    served = executor(registry(hold), limits=SchedulerLimits(global_limit=2, session_limit=2))
    gateway = Gateway(
        served,
        tokens=tokens_file(tmp_path / "tokens.json"),
        rate_limit=None,
        console=True,
        console_tokens=admins(tmp_path),
    )
    async with serving(gateway) as url, browsers(tmp_path) as opened:
        origin = origin_of(url)
        page = await (await opened.launch()).new_page()
        await sign_in(page, origin, ADMIN)
        await page.goto(f"{origin}/console/state")
        async with (
            client(url, MODERN, token="alice-secret-token") as alice,
            client(url, MODERN, token="bob-secret-token") as bob,
        ):
            flood = [asyncio.create_task(alice.call_tool("hold", {"n": i})) for i in range(FLOOD)]
            steady: list[asyncio.Task[Any]] = []
            try:
                await _watch_the_flood(page, opened, origin, flood, steady, bob, tmp_path)
            finally:
                release.set()  # (also when a check failed: no call is left holding a slot)
            done = await asyncio.wait_for(asyncio.gather(*flood, *steady), 60)
            assert all(not result.is_error for result in done)
            await _until(page, {})  # drained: the table empties by itself
            assert await page.locator("#queued").text_content() == "0"
    served.dispose()


async def _watch_the_flood(
    page: Any,
    opened: Any,
    origin: str,
    flood: list[asyncio.Task[Any]],
    steady: list[asyncio.Task[Any]],
    bob: Any,
    folder: Path,
) -> None:
    await _until(page, {"alice": (2, FLOOD - 2)})
    steady.extend(asyncio.create_task(bob.call_tool("hold", {"n": i})) for i in range(STEADY))
    await _until(page, {"alice": (2, FLOOD - 2), "bob": (0, STEADY)})
    assert await page.locator("#running").text_content() == "2"
    assert await page.locator("#queued").text_content() == str(FLOOD - 2 + STEADY)
    await screenshot(page, "state", folder)

    # Every slot is held and 42 calls wait for one: the console's pages still load, and so do
    # the gateway's own endpoints.
    other = await (await opened.launch()).new_page()
    await sign_in(other, origin, ADMIN)
    for path in ("/console", "/console/state", "/console/state?principal=alice"):
        loaded = await other.goto(origin + path)
        assert loaded is not None and loaded.status == 200, path
    async with httpx.AsyncClient(timeout=10) as http:
        assert (await http.get(origin + "/healthz")).status_code == 200
        bearer = {"authorization": "Bearer carol-secret-token"}
        metrics = await http.get(origin + "/metrics", headers=bearer)
        assert metrics.status_code == 200
    assert all(not call.done() for call in [*flood, *steady])  # nothing got through
