"""A private PostgreSQL server in a temporary directory, on a Unix socket only (tests, benchmarks).

``initdb`` makes a fresh cluster (trust authentication, user ``postgres``); ``start()`` runs
``postgres -D <dir>/data -k <dir> -c listen_addresses=''`` and returns once the server says it
accepts connections (read from its log on a pipe, not polled). PostgreSQL refuses to run as
root: as root, the cluster belongs to, and the server runs as, the ``postgres`` user (Debian's
package creates it) or else ``nobody``. The server leads its own process group, so ``kill()``
ends it and every backend at once (a crashed database host); ``start()`` again recovers the
same data. ``close()`` stops it and removes the directory.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import threading
from pathlib import Path

from fastgate.cli.bench.children import dying_with_this_process

READY_LINE = "database system is ready to accept connections"


def postgres_bindir() -> str | None:
    """Where ``initdb`` and ``postgres`` are: Debian's /usr/lib/postgresql/<version>/bin (the
    newest), else ``pg_config --bindir``, else PATH; None when PostgreSQL is not installed."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/postgres"),
        key=lambda p: (
            int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0
        ),
    )
    if found:
        return str(Path(found[-1]).parent)
    pg_config = shutil.which("pg_config")
    if pg_config is not None:
        done = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False)
        bindir = done.stdout.strip()
        if done.returncode == 0 and os.path.exists(os.path.join(bindir, "initdb")):
            return bindir
    postgres = shutil.which("postgres")
    if postgres is not None and shutil.which("initdb") is not None:
        return str(Path(postgres).parent)
    return None


def _server_user() -> pwd.struct_passwd | None:
    """The user the server runs as: None (ourselves) unless we are root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise RuntimeError("running as root, and neither a 'postgres' nor a 'nobody' user exists")


class PostgresServer:
    """One private PostgreSQL cluster and its server process; ``dsn`` is what clients use."""

    def __init__(self, *, start_timeout: float = 60.0) -> None:
        bindir = postgres_bindir()
        if bindir is None:
            raise FileNotFoundError("PostgreSQL is not installed (scripts/setup-postgres)")
        self.bindir = bindir
        self.start_timeout = start_timeout
        self.user = _server_user()
        # Who the server's processes run as: None, ourselves (not root).
        self._uid = None if self.user is None else self.user.pw_uid
        self._gid = None if self.user is None else self.user.pw_gid
        self._groups: list[int] | None = None if self.user is None else []
        # Not under pytest's tmp_path: that is private to us, and the server's user must reach
        # the socket's directory. This one is ours alone (mkdtemp), then the server user's.
        self.directory = Path(tempfile.mkdtemp(prefix="fastgate-pg-"))
        self.data = self.directory / "data"
        self.process: subprocess.Popen[str] | None = None
        self.log: list[str] = []
        self._reader: threading.Thread | None = None
        self._initdb()

    @property
    def dsn(self) -> str:
        return f"host={self.directory} port=5432 user=postgres dbname=postgres"

    @property
    def pid(self) -> int:
        assert self.process is not None, "the server was never started"
        return self.process.pid

    def _initdb(self) -> None:
        if self.user is not None:
            os.chown(self.directory, self.user.pw_uid, self.user.pw_gid)
        os.chmod(self.directory, 0o755)  # the socket is reachable; the data dir stays 0700
        initdb = [os.path.join(self.bindir, "initdb"), "-D", str(self.data), "-U", "postgres"]
        done = subprocess.run(
            [*initdb, "--auth=trust", "--no-instructions", "-E", "UTF8", "--locale=C"],
            capture_output=True,
            text=True,
            check=False,
            cwd=self.directory,
            user=self._uid,
            group=self._gid,
            extra_groups=self._groups,
        )
        if done.returncode != 0:
            shutil.rmtree(self.directory, ignore_errors=True)
            raise RuntimeError(f"initdb failed:\n{done.stdout}\n{done.stderr}")

    def start(self) -> None:
        args = [
            os.path.join(self.bindir, "postgres"),
            "-D", str(self.data),
            "-k", str(self.directory),
            "-c", "listen_addresses=",
            "-c", "max_connections=100",
            "-c", "logging_collector=off",
        ]  # fmt: skip
        # Never outlives its starter, even one killed; the step that sees to it runs as us
        # (our interpreter may not be the server user's to run) and then becomes that user.
        process = subprocess.Popen(
            dying_with_this_process(args, uid=self._uid, gid=self._gid),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=self.directory,
            start_new_session=True,  # its own process group: kill() takes every backend
        )
        self.process = process
        ready = threading.Event()

        def read_log() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                self.log.append(line.rstrip("\n"))
                if READY_LINE in line:
                    ready.set()
            ready.set()  # the server exited: start() looks at why

        self._reader = threading.Thread(target=read_log, name="postgres-log", daemon=True)
        self._reader.start()
        if not ready.wait(self.start_timeout) or process.poll() is not None:
            self.stop()
            tail = "\n".join(self.log[-15:])
            raise RuntimeError(f"postgres did not start:\n{tail}")

    def kill(self) -> None:
        """SIGKILL the server and all its backends at once, and reap it."""
        process = self.process
        if process is None or process.returncode is not None:
            return
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._reap(process)

    def stop(self) -> None:
        """Fast shutdown (SIGINT: clients are disconnected), SIGKILL if it lingers; reaped."""
        process = self.process
        if process is None:
            return
        if process.returncode is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
        self._reap(process)

    def _reap(self, process: subprocess.Popen[str]) -> None:
        process.wait()
        if self._reader is not None:
            self._reader.join()  # the log pipe is at its end: every backend is gone too
            self._reader = None
        if process.stdout is not None:
            process.stdout.close()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
