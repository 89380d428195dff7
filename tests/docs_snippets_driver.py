"""Runs one page's Python snippets in order, in one interpreter, as a reader would paste them.

``python docs_snippets_driver.py TIMEOUT SNIPPETS.json PRINTS.jsonl``: SNIPPETS.json is a list of
``{"page": <absolute path>, "line": <first code line>, "code": ...}``; each snippet is compiled
under its page's path with its own line numbers, so a traceback points into the page. Every
``print`` a snippet makes is also written to PRINTS.jsonl as ``{"line", "text"}`` (the page
line it was called from), for the test to compare with the comments that show output.

The process started is a warden: started in a session of its own with a pseudo-terminal on
stdin, it makes that terminal its controlling one (a snippet's ``/dev/tty`` is the test's, as a
user's would be), becomes a child subreaper (Linux), and runs the snippets in a child process,
killed after TIMEOUT seconds. When that child has ended, every process the snippets started and
left behind, detached or not, is a child of the warden: it waits a moment for them to end, then
names and kills those still running, and fails (exit status ``LEFT_RUNNING``).
"""

from __future__ import annotations

import builtins
import ctypes
import fcntl
import json
import os
import signal
import subprocess
import sys
import termios
import time
import traceback
from pathlib import Path
from typing import Any

PR_SET_CHILD_SUBREAPER = 36
LEFT_RUNNING = 3
GRACE = 5.0  # seconds the page's processes get to end after the page's interpreter has


def run_snippets(snippets_path: str, record_path: str) -> int:
    with open(snippets_path, encoding="utf-8") as f:
        snippets: list[dict[str, Any]] = json.load(f)
    sys.path[0] = os.getcwd()  # as for a script of the workspace (not tests/, which has an mcp/)
    record_prints({s["page"] for s in snippets}, record_path)
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    for snippet in snippets:
        source = "\n" * (snippet["line"] - 1) + snippet["code"]
        try:
            exec(compile(source, snippet["page"], "exec"), namespace)
        except BaseException:
            traceback.print_exc()
            print(f"SNIPPET FAILED: {snippet['page']}:{snippet['line']}", file=sys.stderr)
            return 1
        sys.stdout.flush()
    return 0


def record_prints(pages: set[str], record_path: str) -> None:
    real_print = builtins.print
    record = open(record_path, "a", encoding="utf-8")  # open for the whole run

    def recording_print(*args: Any, **kwargs: Any) -> None:
        real_print(*args, **kwargs)
        caller = sys._getframe(1)
        target = kwargs.get("file")
        if caller.f_code.co_filename in pages and (target is None or target is sys.stdout):
            sep = kwargs.get("sep")
            text = (" " if sep is None else sep).join(map(str, args))
            record.write(json.dumps({"line": caller.f_lineno, "text": text}) + "\n")
            record.flush()

    builtins.print = recording_print


def children() -> list[int]:
    """The live (not zombie) children of this process."""
    me, found = os.getpid(), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == me and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return "?"


def warden(argv: list[str]) -> int:
    if os.isatty(0):
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
    timeout = float(argv.pop(0))
    page = subprocess.Popen([sys.executable, __file__, "--run", *argv])
    try:
        status = page.wait(timeout)
    except subprocess.TimeoutExpired:
        print(f"PAGE TIMED OUT after {timeout:g} s", file=sys.stderr)
        page.kill()
        status = page.wait()
    deadline = time.monotonic() + GRACE
    while (left := children()) and time.monotonic() < deadline:
        reap()
        time.sleep(0.05)
    if not left:
        return status
    while left:  # a killed process's own children come to the warden in turn
        for pid in left:
            print(f"LEFT RUNNING: {pid} {command_line(pid)}", file=sys.stderr)
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
        reap()
        left = children()
    return LEFT_RUNNING


if __name__ == "__main__":
    if sys.argv[1] == "--run":
        sys.exit(run_snippets(sys.argv[2], sys.argv[3]))
    sys.exit(warden(sys.argv[1:]))
