"""Builders for the code-mode tests: small tools of our own, an executor in code mode, and the
check that no process a test started is left behind."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from fastgate import (
    ConcurrencyScheduler,
    ExecutionContext,
    FileLockManager,
    Output,
    PermissionConfig,
    RunContext,
    SchedulerLimits,
    ToolExecutor,
    ToolKind,
    ToolRegistry,
    ToolResult,
    define_tool,
    schema,
)
from fastgate.codemode import CodeMode, sandbox_missing
from fastgate.processes import _resident
from fastgate.tools import ToolDefinition

if sys.platform != "linux" or sandbox_missing():
    pytest.skip(
        f"code mode's sandbox is not available here: {sandbox_missing()}", allow_module_level=True
    )

READ_ARGS = schema.Object(
    {"file_path": schema.String(), "offset": schema.Integer(minimum=1)}, required=("file_path",)
)


def read_tool() -> ToolDefinition:
    """A ``read``-like tool: the text of a file of the workspace (its path checked by stage 5)."""

    async def execute(args: Any, ctx: RunContext) -> str:
        root = ctx.workspace_root or os.getcwd()
        return (Path(root) / str(args["file_path"])).read_text()

    return define_tool(
        "read",
        "Read a text file of the workspace.",
        READ_ARGS,
        execute,
        kind=ToolKind.READ_ONLY,
        parallelism="shared",
        is_concurrency_safe=True,
    )


def noop_tool(name: str = "noop") -> ToolDefinition:
    async def execute(args: Any, ctx: RunContext) -> None:
        return None

    return define_tool(name, "Does nothing.", schema.Object({}), execute, kind=ToolKind.READ_ONLY)


def value_tool() -> ToolDefinition:
    """Returns a JSON value (or, for ``kind="opaque"``, an object JSON cannot carry)."""

    async def execute(args: Any, ctx: RunContext) -> Any:
        if args.get("kind") == "opaque":
            return object()
        return {"n": args.get("n", 0), "items": [1, 2, 3], "nested": {"ok": True}}

    return define_tool(
        "value",
        "Returns a structured value.",
        schema.Object({"n": schema.Integer(), "kind": schema.String()}),
        execute,
        kind=ToolKind.READ_ONLY,
        output=Output(render=lambda v: "a value"),
    )


def deep_tool() -> ToolDefinition:
    """Returns a list nested ``d`` deep; its content is short text, so that the value itself
    is never encoded for the model."""

    async def execute(args: Any, ctx: RunContext) -> Any:
        value: list[Any] = []
        for _ in range(args["d"]):
            value = [value]
        return value

    params = schema.Object({"d": schema.Integer()}, required=("d",))
    render = Output(render=lambda value: "nested")
    return define_tool("deep", "Nested.", params, execute, kind=ToolKind.READ_ONLY, output=render)


class Gate:
    """A slow tool's body: records who is inside, waits until released."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.inside = 0
        self.most_inside = 0
        self.entries: list[str] = []
        self.cancelled: list[str] = []

    async def hold(self, label: str) -> None:
        self.inside += 1
        self.most_inside = max(self.most_inside, self.inside)
        self.entries.append(label)
        self.entered.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled.append(label)
            raise
        finally:
            self.inside -= 1


def slow_tool(
    gate: Gate, name: str = "slow", kind: ToolKind = ToolKind.WRITE, parallelism: str = "exclusive"
) -> ToolDefinition:
    """Holds ``gate`` until it is released; its ``file_path`` is locked (not concurrency safe)."""

    async def execute(args: Any, ctx: RunContext) -> str:
        await gate.hold(args.get("label", ctx.execution_id))
        return "done"

    params = schema.Object({"file_path": schema.String(), "label": schema.String()})
    return define_tool(name, "Waits.", params, execute, kind=kind, parallelism=parallelism)


def make_executor(
    *tools: ToolDefinition,
    workspace: Path,
    code_mode: CodeMode | None = None,
    permissions: PermissionConfig | None = None,
    **options: Any,
) -> ToolExecutor:
    registry = ToolRegistry()
    for definition in tools:
        registry.register(definition)
    if permissions is None:
        permissions = PermissionConfig(allow=("run_code",))
    options.setdefault("scheduler", ConcurrencyScheduler(SchedulerLimits()))
    options.setdefault("locks", FileLockManager())
    options.setdefault("cancel_grace", 2.0)
    return ToolExecutor(
        registry,
        permissions=permissions,
        code_mode=code_mode,
        context_defaults={"session_id": "s1", "workspace_root": str(workspace)},
        **options,
    )


class Env:
    """A workspace, and executors in code mode made on it; at the end every executor is
    disposed and no process started meanwhile may be left (fixture ``env``)."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        self.executors: list[ToolExecutor] = []
        self.code_modes: list[CodeMode] = []

    def make(
        self, *tools: ToolDefinition, code_mode: CodeMode | None = None, **options: Any
    ) -> ToolExecutor:
        if code_mode is None:
            code_mode = CodeMode(pool_size=1)
        self.code_modes.append(code_mode)
        executor = make_executor(*tools, workspace=self.workspace, code_mode=code_mode, **options)
        self.executors.append(executor)
        return executor

    def plain(self, *tools: ToolDefinition, **options: Any) -> ToolExecutor:
        """An executor without code mode (for direct calls alongside a program's)."""
        return make_executor(*tools, workspace=self.workspace, **options)


@pytest.fixture(name="env")
def env_fixture(tmp_path: Path) -> Iterator[Env]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with no_process_left():
        made = Env(workspace)
        try:
            yield made
        finally:
            for executor in made.executors:
                executor.dispose()


async def run(
    executor: ToolExecutor, code: str, ctx: ExecutionContext | None = None, **kw: Any
) -> ToolResult:
    return await executor.execute("run_code", {"code": code}, ctx, **kw)


async def within(event: Coroutine[Any, Any, Any], program: asyncio.Future[ToolResult]) -> None:
    """Wait for ``event``; should the program end first, fail with its result (no hang)."""
    waiter = asyncio.ensure_future(event)
    await asyncio.wait((waiter, program), timeout=60, return_when=asyncio.FIRST_COMPLETED)
    if not waiter.done():
        waiter.cancel()
        outcome = program.result() if program.done() else "still running after 60 s"
        raise AssertionError(f"the program did not get there: {outcome}")


# -- processes ------------------------------------------------------------------------------------


def children(pid: int | None = None) -> dict[int, str]:
    """The processes whose parent is ``pid`` (default: this one, whose resident launchers'
    running children count as its own, the residents and their idle spares not), with their
    state letter (a zombie, ``Z``, is one nobody has reaped; a resident reaps its own as it
    sees them)."""
    residents = _resident.standing() if pid is None else frozenset()
    parents = {os.getpid(), *residents} if pid is None else {pid}
    found: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        parent, state = int(fields[1]), fields[0]
        if parent in parents and int(entry) not in parents:
            if not (parent in residents and state == "Z"):
                found[int(entry)] = state
    return found


def gone(pid: int) -> bool:
    """``pid`` neither runs nor waits to be reaped, and its process group is empty."""
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        pass
    else:
        return False
    return not os.path.exists(f"/proc/{pid}")


@contextmanager
def no_process_left() -> Iterator[None]:
    """Every child process started inside the block is gone (reaped) when it ends."""
    before = set(children())
    yield
    left = {pid: state for pid, state in children().items() if pid not in before}
    assert not left, f"processes left behind (pid: state): {left}"


async def wait_gone(pid: int) -> None:
    """Wait (on its pidfd, not a timer) until ``pid`` has exited, then until it is reaped."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    loop = asyncio.get_running_loop()
    exited: asyncio.Future[None] = loop.create_future()

    def on_exit() -> None:
        if not exited.done():
            exited.set_result(None)

    loop.add_reader(fd, on_exit)
    try:
        await asyncio.wait_for(exited, 10)
    finally:
        loop.remove_reader(fd)
        os.close(fd)
    for _ in range(1000):  # the reaping is a done-callback of the same exit event
        if not _exists(pid):
            return
        await asyncio.sleep(0)
    raise AssertionError(f"process {pid} exited but was not reaped")


def _exists(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


def pid_of(result: ToolResult) -> int:
    """The pid a program printed on a line ``pid <n>``."""
    text = result.content if isinstance(result.content, str) else str(result.content)
    for line in text.splitlines():
        if line.startswith("pid "):
            return int(line.split()[1])
    raise AssertionError(f"no pid line in {text!r}")
