"""A real headless browser for the console's tests: Debian's ``chromium`` (scripts/setup-chromium)
driven by Playwright's client from PyPI with ``executable_path`` (no browser is downloaded). Each
browser has a fresh profile; every process it started is checked gone when it closes. Where the
browser or Playwright is missing, the test skips saying so; under CI that is a failure."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "docs" / "console"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)


def chromium_path() -> str | None:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    return found if found is not None else None


def unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


def _descendants() -> set[int]:
    return {child.pid for child in psutil.Process().children(recursive=True)}


class Browsers:
    """Launches browsers (each its own chromium, its own profile) on one Playwright driver."""

    def __init__(self, playwright: Any, executable: str, folder: Path) -> None:
        self._playwright = playwright
        self._executable = executable
        self._folder = folder
        self._contexts: list[Any] = []

    async def launch(self, *, phone: bool = False) -> Any:
        profile = self._folder / f"profile-{len(self._contexts)}"
        options: dict[str, Any] = {"viewport": {"width": 1200, "height": 900}}
        if phone:
            options = {"viewport": {"width": 390, "height": 844}, "is_mobile": True}
        context = await self._playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=self._executable,
            args=list(CHROMIUM_FLAGS),
            headless=True,
            **options,
        )
        context.set_default_timeout(30_000)
        self._contexts.append(context)
        return context

    async def close(self) -> None:
        for context in self._contexts:
            with contextlib.suppress(Exception):
                await context.close()


@contextlib.asynccontextmanager
async def browsers(folder: Path) -> AsyncIterator[Browsers]:
    """A Playwright driver and the browsers launched on it; all of their processes are gone
    when this ends (checked by pid)."""
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        unavailable("Playwright is not installed (pip install playwright: the test extra)")
        raise
    executable = chromium_path()
    if executable is None:
        unavailable("chromium is not installed (scripts/setup-chromium installs Debian's package)")
        raise AssertionError("unreachable")
    before = _descendants()
    started: set[int] = set()
    try:
        async with async_playwright() as playwright:
            opened = Browsers(playwright, executable, folder)
            try:
                yield opened
            finally:
                started = _descendants() - before
                await opened.close()
    finally:
        _check_gone(started)


def _check_gone(pids: set[int]) -> None:
    alive = []
    for pid in pids:
        try:
            process = psutil.Process(pid)
            process.wait(timeout=10)
        except psutil.NoSuchProcess:
            continue
        except psutil.TimeoutExpired:
            alive.append(pid)
    assert not alive, f"browser processes outlived their test: {alive}"


async def sign_in(page: Any, origin: str, token: str) -> None:
    await page.goto(f"{origin}/console/login")
    await page.fill("#token", token)
    await page.click("button[type=submit]")
    await page.wait_for_url(f"{origin}/console")


async def screenshot(page: Any, name: str, folder: Path) -> Path:
    """Into the test's folder; into docs/console/ as well when FASTGATE_UPDATE_SCREENSHOTS is
    set (the pictures the docs show, refreshed on purpose, not by every run)."""
    target = folder / f"{name}.png"
    await page.screenshot(path=str(target), full_page=True)
    if os.environ.get("FASTGATE_UPDATE_SCREENSHOTS"):
        SCREENSHOTS.mkdir(exist_ok=True)
        shutil.copyfile(target, SCREENSHOTS / f"{name}.png")
    return target
