"""Shared pieces of the command sandbox's tests: executors with the built-ins whose ``bash`` runs
through ``SandboxedShell`` (or, for the controls, ``LocalShell``), both mechanisms (user
namespaces, and Landlock alone as where they are blocked), and a check that no process a test
started outlives it."""

from __future__ import annotations

import asyncio
import os
import select
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fastgate import (
    ApprovalResponse,
    ExecutionContext,
    PermissionConfig,
    PermissionMode,
    ToolResult,
)
from fastgate.builtin import LocalShell
from fastgate.processes import _resident
from fastgate.sandbox import SandboxedShell, SandboxPolicy, _kernel, _support, sandbox_support
from tests.builtin_kit import builtin_executor

if not sys.platform.startswith("linux") or not sandbox_support().available:
    pytest.skip(
        f"the command sandbox is not available here: {sandbox_support().reason}",
        allow_module_level=True,
    )

PYTHON = sys.executable
MECHANISMS = ["namespaces", "landlock"]


@pytest.fixture(params=MECHANISMS, name="mechanism")
def mechanism_fixture(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """Each mechanism in turn: user namespaces (what this host has), and Landlock with seccomp
    alone, as on a host that blocks user namespaces (simulated: the probe says so)."""
    if request.param == "namespaces" and not sandbox_support().namespaces:
        pytest.skip("user namespaces are not usable here")
    if request.param == "landlock":
        if _kernel.landlock_abi() < 4:
            pytest.skip("Landlock with TCP rules (ABI 4) is not available here")
        monkeypatch.setattr(_support, "namespaces_missing", lambda: "simulated: no user namespaces")
        _support.forget_support()
    try:
        yield str(request.param)
    finally:
        _support.forget_support()


def _permissive() -> PermissionConfig:
    # YOLO without the sensitive and protected lists: every command runs, so what is tested
    # is the sandbox alone (the rules catch many of these spellings first, as they should).
    return PermissionConfig(sensitive=(), protected=())


def sandboxed(workspace: Path, policy: SandboxPolicy | None = None, **options: Any) -> Any:
    """The built-ins (nothing asks), ``bash`` confined by ``policy``."""
    shell = SandboxedShell(policy or SandboxPolicy())
    options.setdefault("permissions", _permissive())
    return builtin_executor(workspace, mode=PermissionMode.YOLO, shell=shell, **options)


def unconfined(workspace: Path, **options: Any) -> Any:
    """The controls: the same built-ins, ``bash`` through ``LocalShell``."""
    options.setdefault("permissions", _permissive())
    return builtin_executor(workspace, mode=PermissionMode.YOLO, shell=LocalShell(), **options)


async def approve_everything(request: Any) -> ApprovalResponse:
    return ApprovalResponse(True)


async def bash(ex: Any, command: str, seconds: float = 60, **context: Any) -> ToolResult:
    """``command`` through the ``bash`` built-in (its ``timeout``: ``seconds``); what the
    rules would ask is approved."""
    ctx = ExecutionContext(approver=approve_everything, **context)
    result: ToolResult = await ex.execute("bash", {"command": command, "timeout": seconds}, ctx)
    return result


def names(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir())


def output(result: ToolResult) -> str:
    return str(result.content)


def succeeded(result: ToolResult) -> bool:
    return result.ok


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.fixture(name="outside")
def outside_fixture() -> Iterator[Path]:
    """A directory outside every root and outside /tmp (a private /tmp would hide one there)."""
    path = Path("/var/tmp") / unique("fastgate-outside")
    path.mkdir()
    try:
        yield path
    finally:
        _remove(path)


def _remove(path: Path) -> None:
    for child in path.rglob("*"):
        child.chmod(0o700) if child.is_dir() else None
    for child in sorted(path.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if child.is_dir() and not child.is_symlink():
            child.rmdir()
        else:
            child.unlink()
    path.rmdir()


# -- processes --------------------------------------------------------------------------------


def descendants(root: int | None = None) -> set[int]:
    """Live processes below ``root`` (default: this one), from /proc; the resident launchers
    (they serve every test) not counted, what they forked is."""
    root = os.getpid() if root is None else root
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as file:
                stat = file.read()
        except OSError:
            continue
        after = stat[stat.rindex(b")") + 2 :].split()
        if after[0] == b"Z":
            continue
        children.setdefault(int(after[1]), []).append(int(name))
    found: set[int] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found - _resident.standing()


def with_marker(marker: str) -> list[int]:
    """Live processes named ``marker`` (their first argument, as ``exec -a`` sets it)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as file:
                cmdline = file.read()
            with open(f"/proc/{name}/stat", "rb") as file:
                stat = file.read()
        except OSError:
            continue
        named = cmdline.split(b"\0", 1)[0] == marker.encode()
        if named and stat[stat.rindex(b")") + 2 :][:1] != b"Z":
            found.append(int(name))
    return found


async def until_none(find: Any, bound: float = 10.0) -> list[int]:
    """Poll ``find()`` until it returns nothing or ``bound`` seconds passed; what is left."""
    deadline = time.monotonic() + bound
    left: list[int] = list(find())
    while left and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
        left = list(find())
    return left


def kill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, 9)
        except OSError:
            pass


def wait_gone(pids: set[int], bound: float = 10.0) -> list[int]:
    """Wait (on pidfds, at most ``bound`` seconds in all) until each of ``pids`` has exited;
    those still running."""
    deadline = time.monotonic() + bound
    left = []
    for pid in sorted(pids):
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        try:
            ready, _, _ = select.select([fd], [], [], max(deadline - time.monotonic(), 0))
            if not ready:
                left.append(pid)
        finally:
            os.close(fd)
    return left


@pytest.fixture(autouse=True)
def no_process_outlives_the_test() -> Iterator[None]:
    """After every test: nothing it started is still running."""
    before = descendants()
    yield
    left = wait_gone(descendants() - before)
    kill(left)
    assert left == [], f"processes outlived the test: {left}"
