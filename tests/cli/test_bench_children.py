"""The bench's servers and workers end with the bench, even when it is killed."""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fastgate.cli.bench.children import PARENT_VARIABLE, child_environment
from fastgate.cli.bench.postgres_server import postgres_bindir
from fastgate.cli.bench.redis_server import redis_server_binary

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

# A bench process stand-in: starts one of the bench's servers as the bench does, prints the
# server's pid, and waits to be killed.
_PARENT = """
import sys
from fastgate.cli.bench.serve import _ServerProcess
server = _ServerProcess("bare", sys.argv[1])
print(server.process.pid, flush=True)
sys.stdin.read()
"""


def _ended_within(pid: int, seconds: float) -> bool:
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([pidfd], [], [], seconds)
        return bool(readable)
    finally:
        os.close(pidfd)


def test_a_server_of_the_bench_dies_with_a_killed_bench(tmp_path: Path) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert parent.stdout is not None and parent.stdin is not None
    server = 0
    try:
        server = int(parent.stdout.readline())
        assert not _ended_within(server, 0)  # serving
        parent.kill()  # no clean-up of its own runs
        parent.wait(30)
        assert _ended_within(server, 30)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(30)
        if server and not _ended_within(server, 0):
            os.kill(server, signal.SIGKILL)  # the test failed: still leave nothing behind
        parent.stdin.close()
        parent.stdout.close()


def _child(environment: dict[str, str]) -> subprocess.CompletedProcess[str]:
    code = (
        "from fastgate.cli.bench.children import die_with_parent\n"
        "die_with_parent()\n"
        "import os\n"
        f"print('alive', os.environ.get({PARENT_VARIABLE!r}))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code], env=environment, capture_output=True, text=True, timeout=60
    )


def test_a_child_whose_parent_is_already_gone_exits_at_once() -> None:
    environment = child_environment()
    environment[PARENT_VARIABLE] = "1"  # not its parent: as if the bench had died already
    finished = _child(environment)
    assert finished.returncode == 1
    assert "alive" not in finished.stdout


def test_a_child_of_a_living_parent_runs_and_does_not_pass_the_name_on() -> None:
    finished = _child(child_environment())
    assert finished.returncode == 0, finished.stderr
    assert finished.stdout.strip() == "alive None"  # its own children are not bound to it


def test_a_process_started_elsewhere_is_left_alone() -> None:
    environment = {k: v for k, v in os.environ.items() if k != PARENT_VARIABLE}
    finished = _child(environment)
    assert finished.returncode == 0, finished.stderr
    assert finished.stdout.strip() == "alive None"


def test_the_parents_signal_is_sigkill_in_the_child() -> None:
    # PR_GET_PDEATHSIG (2) as the child sees it after die_with_parent().
    code = (
        "import ctypes\n"
        "from fastgate.cli.bench.children import die_with_parent\n"
        "die_with_parent()\n"
        "libc = ctypes.CDLL(None)\n"
        "value = ctypes.c_int()\n"
        "libc.prctl(2, ctypes.byref(value), 0, 0, 0)\n"
        "print(value.value)\n"
    )
    finished = subprocess.run(
        [sys.executable, "-c", code],
        env=child_environment(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert finished.returncode == 0, finished.stderr
    assert int(finished.stdout) == signal.SIGKILL


# A bench or test process stand-in for the servers that are not ours: starts one, prints its
# pid (and, for PostgreSQL, its backends' too), and waits to be killed.
_STARTER = """
import sys, tempfile
from pathlib import Path
if sys.argv[1] == "redis":
    from fastgate.cli.bench.redis_server import RedisServer
    server = RedisServer(Path(tempfile.mkdtemp(dir=sys.argv[2])))
else:
    from fastgate.cli.bench.postgres_server import PostgresServer
    server = PostgresServer()
server.start()
print(server.pid, server.directory, flush=True)
sys.stdin.read()
"""


def _descendants(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if parent == pid:
                found.append(int(entry))
    return found


@pytest.mark.parametrize("program", ["redis", "postgres"])
def test_a_server_that_is_not_ours_dies_with_its_killed_starter(
    tmp_path: Path, program: str
) -> None:
    if program == "redis" and redis_server_binary() is None:
        pytest.skip("redis-server is not installed (scripts/setup-redis)")
    if program == "postgres" and postgres_bindir() is None:
        pytest.skip("PostgreSQL is not installed (scripts/setup-postgres)")
    starter = subprocess.Popen(
        [sys.executable, "-c", _STARTER, program, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert starter.stdout is not None and starter.stdin is not None
    pids: list[int] = []
    directory = None
    try:
        first, directory = starter.stdout.readline().split(maxsplit=1)
        server = int(first)
        pids = [server, *_descendants(server)]  # postgres: its background workers too
        assert not _ended_within(server, 0)
        with open(f"/proc/{server}/comm") as comm:
            assert comm.read().strip() in ("redis-server", "postgres")  # the program itself
        starter.kill()  # no clean-up of its own runs
        starter.wait(30)
        assert all(_ended_within(each, 30) for each in pids)
    finally:
        if starter.poll() is None:
            starter.kill()
            starter.wait(30)
        for each in pids:
            if not _ended_within(each, 0):
                os.kill(each, signal.SIGKILL)  # the test failed: still leave nothing behind
        starter.stdin.close()
        starter.stdout.close()
        if directory is not None:
            shutil.rmtree(directory.strip(), ignore_errors=True)  # the killed starter's files
