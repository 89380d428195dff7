"""``TerminalApprover``: asks a human at a terminal whether a call may run (SPEC §7).

One prompt at a time on the terminal, whichever session asks; each shows the tool, its
arguments (pretty, bounded: nothing past what is shown is encoded; control and bidi characters
escaped so an argument cannot redraw the prompt), the reason and the source of the decision.
Answers: once, for the session, for the project (only when offered), or no (with feedback for
the model). Input typed before the prompt is discarded, an empty or unknown answer asks again,
and end of input or Ctrl-C rejects: nothing but an explicit answer approves.

Input is read through the event loop's reader callbacks (``loop.add_reader``), never a blocking
read, so the loop keeps serving other sessions while a prompt waits (asyncio and uvloop alike).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import unicodedata
from collections.abc import Iterator
from types import TracebackType
from typing import IO, Any, Final

from fastgate.model import JsonPreview
from fastgate.model.approvals import ApprovalRequest, ApprovalResponse

try:
    import termios
except ImportError:  # pragma: no cover - not a POSIX system: streams are read as plain lines
    termios = None  # type: ignore[assignment]

Stream = int | IO[Any]

_CTRL_C: Final = b"\x03"
_MAX_ANSWER: Final = 4096  # bytes of one answer line; a longer one is not an answer
_OVERLONG: Final = b"\x00"  # what is left of an overlong line: never a valid answer
MAX_TRIES: Final = 10  # unreadable answers in a row before the prompt gives up (a rejection)
_ONCE: Final = frozenset({"y", "yes", "once"})
_SESSION: Final = frozenset({"s", "session", "a", "always"})
_PROJECT: Final = frozenset({"p", "project"})
_REJECT: Final = frozenset({"n", "no", "r", "reject"})


class TerminalApprover:
    """An approver (``ExecutionContext(approver=TerminalApprover())``) that asks at a terminal.

    ``input`` / ``output``: file descriptors or files; by default the controlling terminal,
    ``/dev/tty``, opened at the first prompt (so the prompt reaches the person even when stdin
    and stdout are pipes). ``allow_project=True`` offers the ``project`` scope (an allow rule
    written to ``<workspace>/.fastgate/settings.local.json``); it is not offered otherwise.
    ``max_chars`` bounds the arguments shown; a longer rendering is cut and says how much is
    hidden. Use from one event loop; ``close()`` (or ``with``) closes a terminal it opened.
    """

    def __init__(
        self,
        *,
        input: Stream | None = None,
        output: Stream | None = None,
        allow_project: bool = False,
        max_chars: int = 4000,
    ) -> None:
        if (input is None) != (output is None):
            raise ValueError("give both input and output, or neither (the terminal)")
        if type(max_chars) is not int or max_chars < 200:
            raise ValueError(f"max_chars: expected an integer >= 200, got {max_chars!r}")
        self._input, self._output = input, output
        self._owned_fd: int | None = None
        self.allow_project = allow_project
        self.max_chars = max_chars
        self._lock = asyncio.Lock()  # one prompt at a time on the terminal, across sessions
        self._pending = bytearray()  # read past the last answer (a pipe's next lines)

    async def __call__(self, request: ApprovalRequest) -> ApprovalResponse:
        async with self._lock:
            in_fd, out_fd = self._fds()
            with _prompt_mode(in_fd) as terminal:
                if terminal:
                    self._pending.clear()  # typed before this prompt was shown
                return await self._ask(request, in_fd, out_fd)

    def close(self) -> None:
        """Close the terminal this approver opened (a given stream is the caller's to close)."""
        fd, self._owned_fd = self._owned_fd, None
        if fd is not None:
            os.close(fd)

    def __enter__(self) -> TerminalApprover:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- the prompt -------------------------------------------------------------------------------

    async def _ask(self, request: ApprovalRequest, in_fd: int, out_fd: int) -> ApprovalResponse:
        _write(out_fd, self._render(request))
        try:
            return await self._answer(in_fd, out_fd)
        except asyncio.CancelledError:
            _note(out_fd, "\n(the call was cancelled; no answer is needed)\n")
            raise

    async def _answer(self, in_fd: int, out_fd: int) -> ApprovalResponse:
        for _ in range(MAX_TRIES):
            _write(out_fd, "> ")
            line = await _read_line(in_fd, self._pending)
            if line is None:
                _note(out_fd, "\n(no answer: end of input) rejected\n")
                return ApprovalResponse(False, feedback="No answer came from the terminal.")
            if _CTRL_C in line:
                _note(out_fd, "\n(Ctrl-C) rejected\n")
                return ApprovalResponse(False)
            answer = self._parse(line.decode("utf-8", "replace"))
            if answer is not None:
                return answer
            _write(out_fd, self._legend(again=True))
        _note(out_fd, f"(no valid answer after {MAX_TRIES} tries) rejected\n")
        return ApprovalResponse(False, feedback="No valid answer came from the terminal.")

    def _parse(self, text: str) -> ApprovalResponse | None:
        word, _, rest = text.strip().partition(" ")
        word = word.lower()
        if word in _REJECT:
            return ApprovalResponse(False, feedback=rest.strip() or None)
        if rest.strip():
            return None  # an approval is one word: "yes, but ..." is not one
        if word in _ONCE:
            return ApprovalResponse(True, "once")
        if word in _SESSION:
            return ApprovalResponse(True, "session")
        if word in _PROJECT and self.allow_project:
            return ApprovalResponse(True, "project")
        return None

    def _render(self, request: ApprovalRequest) -> str:
        lines = [
            "",
            "── fastgate: allow this tool call? ──",
            f"tool:    {_printable(request.tool_name)}",
            f"session: {_printable(str(request.session_id))}",
            f"why:     {_printable(request.reason or '(none given)')} "
            f"(source: {_printable(request.source)})",
            "args:",
            _indent(_shown(request.args, self.max_chars)),
            self._legend(again=False),
        ]
        return "\n".join(lines)

    def _legend(self, *, again: bool) -> str:
        project = "   [p] yes, in this project from now on" if self.allow_project else ""
        head = "Answer with one of:" if again else ""
        choices = f"[y] yes, once   [s] yes, for this session{project}   [n] no (n <why>)"
        if self.allow_project:  # what [p] keeps is said before it is chosen, not after
            choices += (
                "\n([p] saves an allow rule only when one rule names exactly this call, with "
                "all its arguments; otherwise it counts for this session only)"
            )
        return f"{head}\n{choices}\n" if again else f"{choices}\n"

    # -- the terminal -----------------------------------------------------------------------------

    def _fds(self) -> tuple[int, int]:
        if self._input is not None and self._output is not None:
            return _fileno(self._input), _fileno(self._output)
        if self._owned_fd is None:
            try:
                self._owned_fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
            except OSError as exc:
                raise RuntimeError(
                    f"no terminal to ask on: /dev/tty cannot be opened ({exc.strerror}); give "
                    "TerminalApprover(input=..., output=...) or another approver"
                ) from None
        return self._owned_fd, self._owned_fd


def _fileno(stream: Stream) -> int:
    if isinstance(stream, int):
        return stream
    with contextlib.suppress(AttributeError, ValueError, OSError):
        stream.flush()  # what the caller wrote to it comes first
    return stream.fileno()


@contextlib.contextmanager
def _prompt_mode(fd: int) -> Iterator[bool]:
    """While a prompt is open: line editing and echo on, so the person sees what they type;
    Ctrl-C ends the line (read as a rejection) instead of signalling the whole program; input
    typed before the prompt is discarded (an answer is always given to the prompt shown). The
    terminal's own settings come back afterwards, whatever happens."""
    if termios is None or not os.isatty(fd):
        yield False
        return
    saved = termios.tcgetattr(fd)
    mode = termios.tcgetattr(fd)
    mode[0] |= termios.ICRNL  # Enter ends the line even if the terminal was raw
    mode[3] |= termios.ICANON | termios.ECHO | termios.ECHOE
    mode[3] &= ~termios.ISIG
    cc = list(mode[6])
    cc[termios.VEOL] = _CTRL_C
    mode[6] = cc
    termios.tcsetattr(fd, termios.TCSAFLUSH, mode)  # TCSAFLUSH: drops the type-ahead
    try:
        yield True
    finally:
        with contextlib.suppress(termios.error):  # a terminal that is gone has nothing to restore
            termios.tcsetattr(fd, termios.TCSANOW, saved)


async def _read_line(fd: int, pending: bytearray) -> bytes | None:
    """The next line (ended by newline or Ctrl-C) of ``fd``, what was read past it kept in
    ``pending`` for the next prompt; None at the end of input. Waits on the loop, never in a
    blocking read. A line over ``_MAX_ANSWER`` bytes is kept as an unparseable marker (its
    tail alone must never pass for an answer)."""
    while True:
        ends = [i for i in (pending.find(b"\n"), pending.find(_CTRL_C)) if i >= 0]
        if ends:
            end = min(ends) + 1
            line = bytes(pending[:end])
            del pending[:end]
            return line
        chunk = await _read_ready(fd)
        if not chunk:
            pending.clear()
            return None
        pending += chunk
        if len(pending) > _MAX_ANSWER and b"\n" not in pending and _CTRL_C not in pending:
            pending[:] = _OVERLONG


async def _read_ready(fd: int) -> bytes:
    """What one read returns once ``fd`` is readable (b"" at the end of input; a terminal whose
    other side is gone, EIO, is the end too)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[bytes] = loop.create_future()

    def readable() -> None:
        try:
            data = os.read(fd, 1024)
        except (BlockingIOError, InterruptedError):
            return  # woken for nothing: wait again
        except OSError:
            data = b""
        if not done.done():
            done.set_result(data)

    loop.add_reader(fd, readable)
    try:
        return await done
    finally:
        loop.remove_reader(fd)


def _note(fd: int, text: str) -> None:
    """A closing line after the answer is known: a terminal gone by then changes nothing."""
    with contextlib.suppress(OSError):
        _write(fd, text)


def _write(fd: int, text: str) -> None:
    """A short, bounded write (a prompt is a few kB at most) straight to the terminal."""
    data = text.encode("utf-8", "replace")
    while data:
        data = data[os.write(fd, data) :]


def _shown(args: Any, limit: int) -> str:
    """The arguments as pretty JSON (keys in the order sent), as far as ``limit`` characters,
    saying when more is hidden. Nothing past ``limit`` is encoded and only what is shown is
    escaped: a huge argument costs no more than a small one."""
    preview = JsonPreview(limit, sort_keys=False).write(args)
    text = _printable(preview.written(), keep_newlines=True)
    if preview.cut:
        text += f"\n… cut: more characters of the arguments are not shown (after {limit})"
    return text


def _bounded(text: str, limit: int) -> str:
    """At most ``limit`` characters of ``text`` (cut before escaping: a huge argument costs no
    more than a small one), saying how much is hidden."""
    if len(text) <= limit:
        return _printable(text, keep_newlines=True)
    hidden = len(text) - limit
    return (
        _printable(text[:limit], keep_newlines=True)
        + f"\n… cut: {hidden} more characters of the arguments are not shown"
    )


_UNPRINTABLE: Final = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def _printable(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` with every control or format character (escape sequences, carriage returns,
    bidi overrides, zero-width characters) written as an escape: what is shown is what runs."""
    return "".join(
        ch
        if (ch == "\n" and keep_newlines) or unicodedata.category(ch) not in _UNPRINTABLE
        else (f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}")
        for ch in text
    )


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.split("\n"))
