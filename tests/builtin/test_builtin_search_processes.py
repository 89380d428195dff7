"""ripgrep runs under ``fastgate.processes``' launcher: a process it starts, even one that
detaches (``setsid``), is gone when the search returns, and a cancelled search ends ripgrep and
everything it started. The "ripgrep" here is a script that leaves a daemon behind."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

import pytest

from fastgate.builtin import LocalFileSystem
from tests.builtin_kit import builtin_executor, call, text

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="Linux only")


def fake_ripgrep(tmp_path: Path, then: str, signal: bool = False) -> str:
    """A "ripgrep" that starts a daemon in a session of its own, adds the daemon's pid to
    ``pids.log`` and (``signal``) writes it to the FIFO ``pids``, then runs ``then``. A search
    may run it more than once (grep also lists a directory's files, to say which it skipped for
    their size), so ``pids.log`` holds every daemon's pid."""
    script = tmp_path / "rg"
    fifo = f"echo $! > {tmp_path / 'pids'}\n" if signal else ""
    script.write_text(
        "#!/bin/sh\n"
        "setsid sh -c 'exec sleep 300' </dev/null >/dev/null 2>&1 &\n"
        f"echo $! >> {tmp_path / 'pids.log'}\n"
        f"{fifo}"
        f"{then}\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    os.mkfifo(tmp_path / "pids")
    return str(script)


def gone(pid: int) -> bool:
    """Ended and reaped (by the launcher, its reaper)."""
    return not os.path.exists(f"/proc/{pid}")


async def read_pid(fifo: Path) -> int:
    """The pid a run of the script writes (opening the FIFO waits for a writer: no timer);
    the first, when two runs wrote at once."""
    return int((await asyncio.to_thread(fifo.read_text)).split()[0])


def all_pids(tmp_path: Path) -> list[int]:
    return [int(pid) for pid in (tmp_path / "pids.log").read_text().split()]


@pytest.mark.parametrize("tool", ["grep", "glob"])
async def test_a_daemon_ripgrep_left_is_gone_when_the_search_returns(
    tmp_path: Path, tool: str
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    rg = fake_ripgrep(tmp_path, "exit 1")
    ex = builtin_executor(ws, fs=LocalFileSystem(str(ws), ripgrep=rg))
    args = {"pattern": "needle"} if tool == "grep" else {"pattern": "**/*"}
    result = await call(ex, tool, args)
    assert result.ok, text(result)
    daemons = all_pids(tmp_path)
    assert daemons and all(map(gone, daemons))


async def test_a_cancelled_search_ends_ripgrep_and_its_daemon(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    rg = fake_ripgrep(tmp_path, "exec sleep 300", signal=True)
    ex = builtin_executor(ws, fs=LocalFileSystem(str(ws), ripgrep=rg))
    searching = asyncio.ensure_future(call(ex, "grep", {"pattern": "needle"}))
    daemon = await read_pid(tmp_path / "pids")
    searching.cancel()
    with pytest.raises(asyncio.CancelledError):
        await searching
    assert gone(daemon) and all(map(gone, all_pids(tmp_path)))
    assert not [pid for pid in _children() if _command(pid).startswith("sleep")]


def _children() -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == os.getpid():
                found.append(int(entry))
    return found


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""
