"""``TerminalApprover`` under a real pseudo-terminal: the approver reads and writes the slave
side as it would a person's terminal, the test types at the master side and reads what the person
would see."""

from __future__ import annotations

import asyncio
import os
import select
import subprocess
import sys
import termios
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest

import fastgate
from fastgate import (
    ApprovalRequest,
    ApprovalResponse,
    ErrorCode,
    ExecutionContext,
    TerminalApprover,
    ToolKind,
)
from tests.pipeline_kit import assert_idle, executor, tool


async def read_when_ready(fd: int) -> bytes:
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, wake)
    try:
        await ready
    finally:
        loop.remove_reader(fd)
    return os.read(fd, 65536)


class Terminal:
    """A pseudo-terminal: ``slave`` is what the approver gets, ``type`` writes at the keyboard,
    ``read_until`` reads the screen."""

    def __init__(self) -> None:
        self.master, self.slave = os.openpty()
        self.screen = ""  # everything shown so far
        self._unread = ""

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    async def read_until(self, text: str) -> str:
        """What the screen showed up to and including ``text`` (since the last read)."""
        async with asyncio.timeout(10):
            while text not in self._unread:
                chunk = (await read_when_ready(self.master)).decode("utf-8", "replace")
                self.screen += chunk
                self._unread += chunk
        end = self._unread.index(text) + len(text)
        shown, self._unread = self._unread[:end], self._unread[end:]
        return shown

    def close(self) -> None:
        for fd in (self.master, self.slave):
            try:
                os.close(fd)
            except OSError:
                pass


@pytest.fixture
def terminal() -> Iterator[Terminal]:
    term = Terminal()
    yield term
    term.close()


def request(tool_name: str = "bash", session: str = "s1", **fields: Any) -> ApprovalRequest:
    values: dict[str, Any] = {
        "args": {"command": "git push"},
        "signature": "sig",
        "reason": "bash asks by default",
        "source": "mode",
        "session_id": session,
    }
    values.update(fields)
    return ApprovalRequest(tool_name, **values)


def approver(term: Terminal, **options: Any) -> TerminalApprover:
    return TerminalApprover(input=term.slave, output=term.slave, **options)


async def answer(term: Terminal, asking: TerminalApprover, typed: str) -> ApprovalResponse:
    pending = asyncio.create_task(asking(request()))
    await term.read_until("> ")
    term.type(typed)
    return await pending


@pytest.mark.parametrize(
    ("typed", "expected"),
    [
        ("y\n", ApprovalResponse(True, "once")),
        ("  YES \n", ApprovalResponse(True, "once")),
        ("s\n", ApprovalResponse(True, "session")),
        ("session\n", ApprovalResponse(True, "session")),
        ("n\n", ApprovalResponse(False)),
        ("n use the staging remote\n", ApprovalResponse(False, feedback="use the staging remote")),
        ("reject\n", ApprovalResponse(False)),
    ],
)
async def test_each_answer_gives_its_scope(
    terminal: Terminal, typed: str, expected: ApprovalResponse
) -> None:
    assert await answer(terminal, approver(terminal), typed) == expected


async def test_project_is_offered_only_when_allowed(terminal: Terminal) -> None:
    offered = approver(terminal, allow_project=True)
    pending = asyncio.create_task(offered(request()))
    legend = await terminal.read_until("> ")
    assert "[p] yes, in this project" in legend
    assert "otherwise it counts for this session only" in legend  # said before choosing
    terminal.type("p\n")
    assert await pending == ApprovalResponse(True, "project")

    plain = approver(terminal)
    pending = asyncio.create_task(plain(request()))
    assert "[p]" not in await terminal.read_until("> ")
    terminal.type("p\n")  # not an answer here: asked again
    assert "Answer with one of:" in await terminal.read_until("> ")
    terminal.type("n\n")
    assert await pending == ApprovalResponse(False)


async def test_the_prompt_shows_the_call_escaped_and_bounded(terminal: Terminal) -> None:
    hostile = {
        "command": "echo ok\x1b[2K\r\x1b[1Arm -rf ~",  # would redraw the line it is shown on
        "note": "safe\u202eexe.txt\u200b",  # bidi override, zero-width space
        "blob": "x" * 10_000,
    }
    asking = approver(terminal, max_chars=500)
    pending = asyncio.create_task(
        asking(request("mcp__fs__write\x1b[31m", args=hostile, reason="rule\rASK", source="rule"))
    )
    shown = await terminal.read_until("> ")
    terminal.type("n\n")
    assert await pending == ApprovalResponse(False)
    assert "mcp__fs__write\\u001b[31m" in shown
    assert "echo ok\\u001b[2K\\r\\u001b[1Arm -rf ~" in shown  # JSON escapes
    assert "safe\\u202eexe.txt\\u200b" in shown
    assert "rule\\u000dASK (source: rule)" in shown and "session: s1" in shown
    assert "\x1b" not in terminal.screen and "\u202e" not in terminal.screen
    assert "more characters of the arguments are not shown" in shown
    assert len(shown) < 2_000


def _deep(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": True}
    for _ in range(levels):
        value = {"next": value}
    return value


class Opaque:
    """An argument JSON has no spelling for; counts how often it is turned into text."""

    made = 0

    def __repr__(self) -> str:
        Opaque.made += 1
        return "opaque"

    __str__ = __repr__


HUGE: dict[str, Any] = {
    "items": lambda: {"command": "sync", "items": list(range(1_000_000))},  # ~6.9 MB as JSON
    "text": lambda: {"command": "write", "text": "x" * 50_000_000},
    "deep": lambda: {"command": "walk", "tree": _deep(100_000)},  # deeper than encoders go
}


@pytest.mark.parametrize("kind", sorted(HUGE))
async def test_huge_arguments_cost_what_the_prompt_shows(terminal: Terminal, kind: str) -> None:
    """A million items, fifty megabytes of text, an object nested a hundred thousand deep: the
    prompt shows a bounded head of them, and making it allocates next to nothing (their JSON,
    and the pretty copy of it, would take tens of megabytes; the deep one none could write)."""
    args = HUGE[kind]()
    asking = approver(terminal, max_chars=2_000)
    tracemalloc.start()
    try:
        pending = asyncio.create_task(asking(request(args=args)))
        shown = await terminal.read_until("> ")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    terminal.type("n\n")
    assert await pending == ApprovalResponse(False)
    assert '"command": ' in shown  # the keys in the order sent: the command first
    assert peak < 2_000_000, peak
    assert "more characters of the arguments are not shown" in shown
    assert len(shown) < 3_000, len(shown)


async def test_only_the_arguments_shown_are_turned_into_text(terminal: Terminal) -> None:
    Opaque.made = 0
    asking = approver(terminal, max_chars=2_000)
    pending = asyncio.create_task(asking(request(args={"objects": [Opaque()] * 1_000_000})))
    shown = await terminal.read_until("> ")
    terminal.type("n\n")
    assert await pending == ApprovalResponse(False)
    assert '"opaque",' in shown and len(shown) < 3_000
    assert Opaque.made < 500, Opaque.made  # the items shown, not the million


async def test_garbage_is_asked_again_and_never_approves(terminal: Terminal) -> None:
    asking = approver(terminal)
    pending = asyncio.create_task(asking(request()))
    for garbage in ("\n", "maybe\n", "yes please\n", "y y\n", "\x1b[A\n"):
        await terminal.read_until("> ")
        terminal.type(garbage)
    await terminal.read_until("> ")
    assert not pending.done()
    terminal.type("y\n")
    assert await pending == ApprovalResponse(True, "once")
    assert terminal.screen.count("Answer with one of:") == 5


async def test_endless_garbage_is_a_rejection(terminal: Terminal) -> None:
    asking = approver(terminal)
    pending = asyncio.create_task(asking(request()))
    for _ in range(10):
        await terminal.read_until("> ")
        terminal.type("what\n")
    result = await pending
    assert not result.approved and "No valid answer" in (result.feedback or "")


@pytest.mark.parametrize("ending", ["ctrl-c", "ctrl-c after text", "ctrl-d", "terminal gone"])
async def test_end_of_input_and_ctrl_c_reject(terminal: Terminal, ending: str) -> None:
    before = termios.tcgetattr(terminal.slave)
    asking = approver(terminal)
    pending = asyncio.create_task(asking(request()))
    await terminal.read_until("> ")
    if ending == "ctrl-c":
        terminal.type("\x03")
    elif ending == "ctrl-c after text":
        terminal.type("y\x03")  # the line never ended with Enter: no approval
    elif ending == "ctrl-d":
        terminal.type("\x04")
    else:
        os.close(terminal.master)
    result = await pending
    assert result.approved is False
    # The terminal's own settings are back (Ctrl-C signals again, as before the prompt).
    if ending != "terminal gone":
        assert termios.tcgetattr(terminal.slave) == before


async def test_type_ahead_is_discarded(terminal: Terminal) -> None:
    """A "y" typed before the prompt appeared does not answer it."""
    terminal.type("y\n")
    assert select.select([terminal.slave], [], [], 10)[0]  # the line is waiting to be read
    asking = approver(terminal)
    pending = asyncio.create_task(asking(request()))
    await terminal.read_until("> ")
    for _ in range(5):
        await asyncio.sleep(0)
    assert not pending.done()
    terminal.type("n\n")
    assert await pending == ApprovalResponse(False)


async def test_two_sessions_are_prompted_one_after_the_other(terminal: Terminal) -> None:
    asking = approver(terminal)
    first = asyncio.create_task(asking(request("tool_a", session="alice")))
    second = asyncio.create_task(asking(request("tool_b", session="bob")))
    shown = await terminal.read_until("> ")
    assert "tool_a" in shown and "session: alice" in shown
    for _ in range(5):  # room for a second prompt to (wrongly) appear
        await asyncio.sleep(0)
    terminal.type("s\n")
    shown = await terminal.read_until("> ")
    # The second prompt comes after the first one's answer was echoed, never over it.
    assert shown.index("s\r\n") < shown.index("tool_b")
    assert "tool_a" not in shown and terminal.screen.count("tool_b") == 1
    terminal.type("n\n")
    assert await first == ApprovalResponse(True, "session")
    assert await second == ApprovalResponse(False)


async def test_a_cancelled_prompt_restores_the_terminal_and_frees_the_next(
    terminal: Terminal,
) -> None:
    before = termios.tcgetattr(terminal.slave)
    asking = approver(terminal)
    first = asyncio.create_task(asking(request("tool_a")))
    await terminal.read_until("> ")
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert "no answer is needed" in await terminal.read_until("needed")
    assert termios.tcgetattr(terminal.slave) == before
    assert await answer(terminal, asking, "y\n") == ApprovalResponse(True, "once")


async def test_through_the_executor_the_loop_keeps_running(terminal: Terminal) -> None:
    ran: list[str] = []

    def run(args: Any, ctx: Any) -> str:
        ran.append(args["text"])
        return "done"

    deploy = tool("deploy", run, kind=ToolKind.EXECUTE)
    ex = executor(deploy)
    ctx = ExecutionContext(session_id="s1", approver=approver(terminal))
    asked = asyncio.create_task(ex.execute("deploy", {"text": "prod"}, ctx))
    await terminal.read_until("> ")
    # While the prompt waits, the loop serves other work (here another executor's call).
    other = executor(tool("look", lambda a, c: "seen"))
    seen = await other.execute("look", {"text": "x"}, ExecutionContext(session_id="s2"))
    assert seen.ok and not asked.done()
    terminal.type("y\n")
    result = await asked
    assert result.ok and ran == ["prod"]
    assert_idle(ex)


def test_under_fastgate_run_and_plain_asyncio(terminal: Terminal) -> None:
    async def main() -> ApprovalResponse:
        asking = approver(terminal)
        pending = asyncio.create_task(asking(request()))
        await terminal.read_until("> ")
        terminal.type("s\n")
        return await pending

    assert fastgate.run(main()) == ApprovalResponse(True, "session")
    assert asyncio.run(main()) == ApprovalResponse(True, "session")


async def test_plain_pipes_are_read_line_by_line() -> None:
    in_read, in_write = os.pipe()
    out_read, out_write = os.pipe()
    try:
        asking = TerminalApprover(input=in_read, output=out_write)
        os.write(in_write, b"maybe\nsession\n")
        assert await asking(request()) == ApprovalResponse(True, "session")
        # A line too long to be an answer is not one, whatever it ends with (here "y" alone
        # after the reads that filled the limit).
        os.write(in_write, b"x" * 5120 + b"y\n" + b"y" * 9000 + b"\nn\n")
        assert await asking(request()) == ApprovalResponse(False)
        os.close(in_write)
        in_write = -1
        assert (await asking(request())).approved is False  # end of input
        assert b"Answer with one of:" in os.read(out_read, 65536)
    finally:
        for fd in (in_read, in_write, out_read, out_write):
            if fd >= 0:
                os.close(fd)


def test_without_a_terminal_the_call_is_denied_not_approved() -> None:
    """No controlling terminal (a daemon): the approver fails, the call is PERMISSION_DENIED
    with approver_error, and the message says why."""
    code = """
import asyncio
from fastgate import ExecutionContext, TerminalApprover
from tests.pipeline_kit import executor, tool
from fastgate import ToolKind
t = tool("deploy", lambda a, c: "ran", kind=ToolKind.EXECUTE)
async def main():
    with TerminalApprover() as asking:
        r = await executor(t).execute(
            "deploy", {"text": "x"}, ExecutionContext(session_id="s", approver=asking))
    print(r.error.code, r.error.details["reason"], "/dev/tty" in r.error.message)
asyncio.run(main())
"""
    run = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        start_new_session=True,  # no controlling terminal
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert run.stdout.split() == [str(ErrorCode.PERMISSION_DENIED), "approver_error", "True"], (
        run.stdout + run.stderr
    )


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError, match="both input and output"):
        TerminalApprover(input=0)
    with pytest.raises(ValueError, match="max_chars"):
        TerminalApprover(max_chars=10)
