"""One call's confinement: its plan, what the command's environment gains, the proxy.

``Confinement.open(policy, roots=..., cwd=...)`` computes the plan for the mechanism this host
has and starts what the call needs (a private temporary directory without namespaces; the
network proxy for a ``NetworkPolicy``); pass ``steps`` (a ``Plan``), ``pass_fds`` and
``environment`` to
``fastgate.processes.spawn``, then ``started(process)`` once spawned, and ``await close()``
once every process has ended (it stops the proxy; the launcher itself removes what it made, so
nothing stays behind should the server die).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import socket
import stat
import tempfile
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from fastgate.processes import (
    OUT_OF_DESCRIPTORS,
    DescriptorsExhausted,
    Plan,
    Process,
    ensure_free,
)
from fastgate.sandbox import _planner
from fastgate.sandbox._network import NetworkEvent
from fastgate.sandbox._policy import SandboxPolicy
from fastgate.sandbox._proxy import NetworkProxy, proxy_environment
from fastgate.sandbox._support import SandboxSupport, host, sandbox_support, warn_unconfined

#: Descriptors that must be free for a sandboxed command to be started: the search, the
#: proxy's listener and channel, the output pipe, the launcher's pipes, plan and pidfd, with
#: room to spare. Fewer: ``DescriptorsExhausted`` before anything is made.
SPAWN_DESCRIPTORS = 32


class Confinement:
    """What one sandboxed command is started with (see the module's docstring)."""

    def __init__(
        self,
        steps: Plan,
        environment: dict[str, str],
        pass_fds: tuple[int, ...],
        *,
        proxy: NetworkProxy | None,
        channel: socket.socket | None,
        temporary: str | None,
    ) -> None:
        self.steps = steps
        self.environment = environment
        self.pass_fds = pass_fds
        self.proxy = proxy
        self._channel = channel  # ours; its twin (in pass_fds) is the launcher's
        self._temporary = temporary
        self._adopt: asyncio.Task[None] | None = None

    @classmethod
    async def open(
        cls,
        policy: SandboxPolicy,
        support: SandboxSupport,
        *,
        roots: Sequence[str] | None,
        cwd: str,
    ) -> Confinement:
        try:
            return await cls._open(policy, support, roots=roots, cwd=cwd)
        except OSError as exc:
            if exc.errno in OUT_OF_DESCRIPTORS and not isinstance(exc, DescriptorsExhausted):
                raise DescriptorsExhausted(exc.errno) from exc
            raise

    @classmethod
    async def _open(
        cls,
        policy: SandboxPolicy,
        support: SandboxSupport,
        *,
        roots: Sequence[str] | None,
        cwd: str,
    ) -> Confinement:
        arch, abi = host()
        if arch is None:
            raise OSError("seccomp is not available here")
        # Checked before anything is made: a server at its limit otherwise fails halfway (a
        # directory of the search that cannot be opened reads as one that cannot be listed).
        ensure_free(SPAWN_DESCRIPTORS)
        # The search for hidden and protected paths lists whole directories (hundreds of
        # thousands of entries, should a command make them): never on the event loop, nor on
        # its default executor, which the file tools share (calls queue for the one planner).
        where = await asyncio.get_running_loop().run_in_executor(
            _planning(), _planner.layout, policy, roots, cwd
        )
        proxy: NetworkProxy | None = None
        if policy.network is not None:
            if support.namespaces:
                # Its only listener is the one the command's namespace sends back.
                proxy = NetworkProxy(policy.network, tcp=False)
            else:
                # On the host's loopback: only a request carrying this call's secret is served.
                proxy = NetworkProxy(policy.network, credential=secrets.token_hex(24))
            await proxy.start()
        try:
            if support.namespaces:
                return cls._namespaced(where, policy, arch, abi, proxy)
            return cls._landlocked(where, policy, arch, abi, proxy)
        except BaseException:
            if proxy is not None:
                await proxy.aclose()
            raise

    @classmethod
    def _namespaced(
        cls,
        where: _planner.Layout,
        policy: SandboxPolicy,
        arch: str,
        abi: int,
        proxy: NetworkProxy | None,
    ) -> Confinement:
        ours: socket.socket | None = None
        theirs: socket.socket | None = None
        environment = {"TMPDIR": "/tmp"}
        if proxy is not None:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            environment.update(proxy_environment(f"http://127.0.0.1:{_planner.PROXY_PORT}"))
        try:
            if theirs is None:
                steps = _planner.namespace_plan(where, policy, arch=arch, landlock_abi=abi)
            else:
                steps = Plan(
                    _planner.namespace_steps(
                        where, policy, arch=arch, landlock_abi=abi, proxy_channel=theirs.fileno()
                    )
                )
        except BaseException:
            for sock in (ours, theirs):
                if sock is not None:
                    sock.close()
            raise
        fds = (theirs.detach(),) if theirs is not None else ()
        return cls(steps, environment, fds, proxy=proxy, channel=ours, temporary=None)

    @classmethod
    def _landlocked(
        cls,
        where: _planner.Layout,
        policy: SandboxPolicy,
        arch: str,
        abi: int,
        proxy: NetworkProxy | None,
    ) -> Confinement:
        temporary = tempfile.mkdtemp(prefix="call-", dir=temporary_parent())
        environment = {"TMPDIR": temporary}
        port = None
        if proxy is not None and proxy.address is not None:
            port = proxy.address[1]
            environment.update(proxy.environment())  # its URL carries the call's secret
        try:
            steps = Plan(
                _planner.landlock_steps(
                    where, policy, arch=arch, landlock_abi=abi, temporary=temporary, proxy_port=port
                )
            )
        except BaseException:
            shutil.rmtree(temporary, ignore_errors=True)
            raise
        return cls(steps, environment, (), proxy=proxy, channel=None, temporary=temporary)

    def started(self, process: Process) -> None:
        """The command's launcher runs: its copies of our descriptors are closed here, and the
        proxy accepts on the listener the command's namespace sends back."""
        for fd in self.pass_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.pass_fds = ()
        if self._channel is not None and self.proxy is not None:
            self._adopt = asyncio.get_running_loop().create_task(
                _adopt_listener(self._channel, self.proxy)
            )

    @property
    def network(self) -> tuple[NetworkEvent, ...]:
        return self.proxy.events if self.proxy is not None else ()

    @property
    def refusals_dropped(self) -> int:
        """Refusals past the proxy's ``max_events``: counted, not kept."""
        return self.proxy.refusals_dropped if self.proxy is not None else 0

    async def close(self) -> None:
        """Once every process has ended: stop the proxy, release what is left."""
        for fd in self.pass_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.pass_fds = ()
        if self._adopt is not None:
            self._adopt.cancel()
            with contextlib.suppress(asyncio.CancelledError, OSError):
                await self._adopt
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        if self.proxy is not None:
            await self.proxy.aclose()
        if self._temporary is not None:
            await asyncio.to_thread(shutil.rmtree, self._temporary, True)
            self._temporary = None


_parent: str | None = None
_parent_lock = threading.Lock()
_planner_thread: ThreadPoolExecutor | None = None


def _planning() -> ThreadPoolExecutor:
    """The thread layouts are computed in (one: they share their caches, and are computed one
    at a time anyway)."""
    global _planner_thread
    with _parent_lock:
        if _planner_thread is None:
            _planner_thread = ThreadPoolExecutor(1, "fastgate-sandbox-plan")
        return _planner_thread


def temporary_parent() -> str:
    """The directory the private temporary directories of calls without namespaces are made
    in: ``fastgate-sandbox-<uid>`` in the system's temporary directory (its real path), the
    user's alone (mode 0700), made once; where another user holds that name, one of this
    process's own (``mkdtemp``). The mode keeps other users out; one parent holding them all is
    what a plan can leave out of its read grants while granting each call its own directory."""
    global _parent
    with _parent_lock:
        if _parent is None or not _is_private_directory(_parent):
            _parent = _make_parent()
        return _parent


def _make_parent() -> str:
    where, name = os.path.realpath(tempfile.gettempdir()), f"fastgate-sandbox-{os.geteuid()}"
    path = os.path.join(where, name)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    if _is_private_directory(path):
        return path
    return tempfile.mkdtemp(prefix=f"{name}-", dir=where)


def _is_private_directory(path: str) -> bool:
    """``path`` is a directory (not a link to one) of this user's that no one else can enter
    (its group and others' permissions are taken off when it is ours)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        found = os.fstat(fd)
        if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.geteuid():
            return False
        if found.st_mode & 0o077:
            os.fchmod(fd, 0o700)
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


async def _adopt_listener(channel: socket.socket, proxy: NetworkProxy) -> None:
    """Receive the listener made in the command's network namespace (its only way out) and
    let the proxy accept on it."""
    loop = asyncio.get_running_loop()
    channel.setblocking(False)
    ready: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(channel.fileno(), readable)
    try:
        await ready
    finally:
        loop.remove_reader(channel.fileno())
    _, fds, _, _ = socket.recv_fds(channel, 1, 1)
    if not fds:
        return  # the command's init ended before it made one
    listener = socket.socket(fileno=fds[0])
    for extra in fds[1:]:
        os.close(extra)
    # The proxy's own listener is on the server's loopback; this one is in the command's
    # namespace.
    proxy.adopt(listener)


async def confinement_for(
    policy: SandboxPolicy, *, roots: Sequence[str] | None, cwd: str
) -> Confinement | None:
    """The confinement of one command under ``policy`` (for spawners other than the shell:
    command hooks), or ``None`` where this host cannot confine it and ``policy.require`` is
    false (said once a process); ``OSError`` when it is required but cannot be."""
    support = sandbox_support()
    why = support.reason if not support.available else None
    if why is None and policy.network is not None and not support.network:
        why = f"a NetworkPolicy cannot be enforced here: {support.reason}"
    if why is not None:
        if policy.require:
            raise OSError(f"the sandbox is required but unavailable: {why}")
        warn_unconfined(why)
        return None
    return await Confinement.open(policy, support, roots=roots, cwd=cwd)
