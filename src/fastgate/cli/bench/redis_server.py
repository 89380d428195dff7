"""A private ``redis-server`` on a Unix socket in a directory of its own (tests and benchmarks).

Nothing persists (no RDB, no AOF) and nothing listens on TCP. ``start()`` returns once the server
says it accepts connections (read from its log on a pipe, not polled); ``stop()`` ends it and
reaps it, so its pid is gone afterwards.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
from pathlib import Path

from fastgate.cli.bench.children import dying_with_this_process

READY_LINE = "ready to accept connections"  # 7.x: "The server is now ready to ..."


def redis_server_binary() -> str | None:
    """The ``redis-server`` on PATH (Debian's package installs it), or None."""
    return shutil.which("redis-server")


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid still exists (a zombie counts: it is not reaped yet)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


class RedisServer:
    """One redis-server process; ``url`` is what a client connects to."""

    def __init__(self, directory: Path, *, start_timeout: float = 20.0) -> None:
        self.directory = directory
        self.socket = directory / "redis.sock"
        self.start_timeout = start_timeout
        self.process: subprocess.Popen[str] | None = None
        self.log: list[str] = []
        self._reader: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    @property
    def pid(self) -> int:
        assert self.process is not None, "the server was never started"
        return self.process.pid

    def start(self) -> None:
        binary = redis_server_binary()
        if binary is None:
            raise FileNotFoundError("redis-server is not installed (scripts/setup-redis)")
        self.directory.mkdir(parents=True, exist_ok=True)
        self.socket.unlink(missing_ok=True)
        args = [
            binary,
            "--port", "0",
            "--unixsocket", str(self.socket),
            "--unixsocketperm", "700",
            "--dir", str(self.directory),
            "--save", "",
            "--appendonly", "no",
            "--daemonize", "no",
            "--logfile", "",
            "--maxclients", "1000",
        ]  # fmt: skip
        process = subprocess.Popen(
            dying_with_this_process(args),  # never outlives its starter, even one killed
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # a Ctrl-C in the terminal is the test's, not the server's
        )
        self.process = process
        ready = threading.Event()

        def read_log() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                self.log.append(line.rstrip("\n"))
                if READY_LINE in line.lower():
                    ready.set()
            ready.set()  # the server exited: start() looks at why

        self._reader = threading.Thread(target=read_log, name="redis-server-log", daemon=True)
        self._reader.start()
        if not ready.wait(self.start_timeout) or process.poll() is not None:
            self.stop()
            tail = "\n".join(self.log[-10:])
            raise RuntimeError(f"redis-server did not start:\n{tail}")

    def stop(self) -> None:
        """End the server (SIGTERM, then SIGKILL) and reap it."""
        process = self.process
        if process is None:
            return
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._reader is not None:
            self._reader.join()  # the pipe is at its end: the server is gone
            self._reader = None
        if process.stdout is not None:
            process.stdout.close()

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
