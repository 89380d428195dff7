"""The sandbox's network under file-descriptor pressure: every call's proxy together keeps to a
budget derived from the process's ``RLIMIT_NOFILE`` soft limit, so sandboxed programs holding
tunnels cannot take the server to its limit; a connection over the budget is refused
(``server_busy``, an answer and an event of the call that made it, in ``ShellResult.network``
and the audit sink); an unrelated call still runs; descriptors come back when the calls end.
And a command spawned when the process is out of descriptors fails with ``DescriptorsExhausted``
(a structured, retryable error), leaving no descriptor and no launcher behind.

Each scenario runs in a child interpreter whose soft limit is lowered first (this process's is
never touched), with real sockets, a loopback HTTP server and the real sandbox; the child prints
what it saw as one JSON line, which the test judges."""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
import resource
import select
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from fastgate.sandbox import _kernel, sandbox_support
from tests.child_kit import report as report_to_parent
from tests.child_kit import run_scenario

pytestmark = pytest.mark.slow

PYTHON = sys.executable

if not sys.platform.startswith("linux") or not sandbox_support().available:
    pytest.skip(
        f"the command sandbox is not available here: {sandbox_support().reason}",
        allow_module_level=True,
    )


def run_child(*argv: str) -> dict[str, Any]:
    """What the scenario ``argv`` reported from a child interpreter (killed after 180 s)."""
    return run_scenario("tests.sandbox.test_proxy_descriptor_budget", *argv, timeout=180)


def skip_without(mechanism: str) -> None:
    if mechanism == "namespaces" and not sandbox_support().namespaces:
        pytest.skip("user namespaces are not usable here")
    if mechanism == "landlock" and _kernel.landlock_abi() < 4:
        pytest.skip("Landlock with TCP rules (ABI 4) is not available here")


# -- the budget, through sandboxed calls -----------------------------------------------------

HOLDERS = 3
TUNNELS_EACH = 8


@pytest.mark.parametrize("mechanism", ["namespaces", "landlock"])
def test_calls_holding_tunnels_are_refused_past_the_budget_and_others_still_run(
    mechanism: str,
) -> None:
    skip_without(mechanism)
    limit = 512
    report = run_child("budget", str(limit), mechanism)
    budget = report["budget"]
    # A quarter of the soft limit, an eighth of it kept for requests still being read, in
    # connections of six descriptors each: below what three calls of 8 ask for together.
    assert budget == (limit // 4 - limit // 4 // 8) // 6
    # Each holder gets at least one tunnel whatever the order (it signals through it).
    assert budget - (HOLDERS - 1) * TUNNELS_EACH >= 1 and budget < HOLDERS * TUNNELS_EACH
    port = report["held_port"]
    opened = refused = 0
    for holder in report["holders"]:
        answers = holder["answers"]
        assert holder["exit_code"] == 0, holder
        assert {tuple(a) for a in answers} <= {("200", ""), ("503", "server_busy")}, answers
        ok = sum(1 for status, _ in answers if status == "200")
        busy = len(answers) - ok
        # Each refusal is the call's: an event naming what it asked, and a line of its output.
        assert holder["network"] == sorted(
            [["127.0.0.1", port, True, "allowed"]] * ok
            + [["127.0.0.1", port, False, "server_busy"]] * busy
        ), holder
        if busy:
            assert f"Network refused: 127.0.0.1:{port} (server_busy)" in holder["output"]
        opened += ok
        refused += busy
    assert opened == budget and refused == HOLDERS * TUNNELS_EACH - budget
    # While the budget is spent, a call without a network runs, and one with a network gets
    # a structured refusal (an answer, an event, an audit record), not a hang.
    assert report["plain"] == {"exit_code": 0, "output": "hi\n"}
    victim = report["victim"]
    assert victim["ok"] and victim["answers"] == [["503", "server_busy"]], victim
    assert victim["audit"] == [["127.0.0.1", report["victim_port"], "server_busy"]]
    assert f"Network refused: 127.0.0.1:{report['victim_port']} (server_busy)" in victim["content"]
    # The proxy never came near the limit, and everything it held came back with the calls.
    assert report["fds_holding"] < limit // 2, report
    assert report["fds_after"] == report["fds_baseline"], report
    assert report["budget_held_after"] == 0
    # Released: a call after them has the whole budget again.
    assert report["after"]["answers"] == [["200", ""]] * TUNNELS_EACH


# -- the budget at accept, on a proxy of its own ----------------------------------------------


@pytest.mark.parametrize("credential", [False, True], ids=["own-listener", "loopback-credential"])
def test_connections_past_the_budget_are_answered_at_once(credential: bool) -> None:
    limit = 128
    report = run_child("accept", str(limit), "credential" if credential else "plain")
    share = limit // 4
    # Requests still being read take one descriptor each, up to the share; the rest are
    # answered 503 at once, never left waiting in the backlog.
    assert report["pending"] == share
    busy = report["connections"] - share
    assert report["refused"] == [["503", "server_busy"]] * busy
    if credential:
        # Not yet shown to be the call's: no event of the call's.
        assert report["accept_events"] == []
    else:
        assert report["accept_events"] == [["", 0, False, "server_busy"]] * busy
    # A request read while the budget is spent is refused with what it asked, for the call.
    assert report["upgrade"] == ["503", "server_busy"]
    assert report["upgrade_event"] == ["127.0.0.1", report["port"], False, "server_busy"]
    assert report["budget_held_after"] == 0
    assert report["fds_after"] == report["fds_baseline"]


def test_accept_out_of_descriptors_backs_off_and_resumes_when_one_is_freed() -> None:
    report = run_child("emfile_accept", "128")
    # Out of descriptors for a whole second: said once, and retried with a growing delay, not
    # every few milliseconds.
    assert report["warnings"] == 1, report
    assert report["accept_tries"] <= 8, report
    # A connection of the proxy's ending frees a descriptor: the waiting client is accepted
    # and answered; with none left for its upstream, refused for the call, not dropped.
    assert report["served"] == ["503", "server_busy"], report
    assert report["event"] == ["127.0.0.1", report["upstream_port"], False, "server_busy"]
    assert report["budget_held_after"] == 0
    assert report["fds_after"] == report["fds_baseline"]


# -- spawning out of descriptors ---------------------------------------------------------------

FREE = (0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 24, 31, 32, 48, 64)


def test_spawning_out_of_descriptors_fails_structured_and_leaves_nothing() -> None:
    report = run_child("spawn", "512")
    for attempt in report["attempts"]:
        free, how, outcome = attempt["free"], attempt["how"], attempt["outcome"]
        assert outcome in ("ok", "structured"), attempt
        if free == 0:
            assert outcome == "structured", attempt
        if free >= 48:
            assert outcome == "ok", attempt
        assert attempt["leaked"] == [], attempt
        assert attempt["orphans"] == [], attempt
        if outcome == "structured":
            assert attempt["details"] == {
                "reason": "resource_exhausted",
                "resource": "file_descriptors",
                "limit": 512,
            }, attempt
            assert attempt["retryable"] and attempt["errno"] in (errno.EMFILE, errno.ENFILE)
        assert how in ("spawn", "sandboxed", "sandboxed-network")
    hows = {a["how"] for a in report["attempts"]}
    assert hows == {"spawn", "sandboxed", "sandboxed-network"}
    # The failures struck at different places on the way (pipes, the launcher, the proxy).
    structured = {(a["how"], a["free"]) for a in report["attempts"] if a["outcome"] == "structured"}
    assert ("spawn", 0) in structured and ("spawn", 2) in structured
    assert report["fds_after"] == report["fds_baseline"]


# == the child's side ==========================================================================


def _fds() -> int:
    return len(os.listdir("/proc/self/fd")) - 1


def _free(limit: int) -> int:
    return limit - sum(1 for n in os.listdir("/proc/self/fd") if int(n) < limit) + 1


def _fill(limit: int, leave: int) -> list[int]:
    """Descriptors opened until ``leave`` numbers are free below ``limit`` (counted once: at
    the limit, even listing them needs a descriptor)."""
    missing = _free(limit) - leave
    if missing <= 0:
        return []
    fillers = [os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)]
    fillers.extend(os.dup(fillers[0]) for _ in range(missing - 1))
    return fillers


def _release(fillers: list[int]) -> None:
    for fd in fillers:
        os.close(fd)
    fillers.clear()


HOLDER = r"""
import base64, json, os, socket, sys, urllib.parse
proxy = urllib.parse.urlsplit(os.environ["HTTP_PROXY"])
secret = f"{proxy.username}:{proxy.password}".encode() if proxy.username else b""
auth = b"Proxy-Authorization: Basic " + base64.b64encode(secret) + b"\r\n" if secret else b""
target, count, hold = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "hold"

def head(s):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    return data

held, answers = [], []
for _ in range(count):
    s = socket.create_connection((proxy.hostname, proxy.port), timeout=60)
    s.sendall(b"CONNECT " + target.encode() + b" HTTP/1.1\r\n" + auth + b"\r\n")
    lines = head(s).split(b"\r\n")
    status = lines[0].split(b" ")[1].decode() if b" " in lines[0] else "none"
    why = [
        l.split(b":", 1)[1].strip().decode()
        for l in lines
        if l.lower().startswith(b"x-fastgate-refusal:")
    ]
    answers.append([status, why[0] if why else ""])
    (held if status == "200" else []).append(s)
if hold and held:
    held[0].sendall(b"GET /held HTTP/1.1\r\nHost: x\r\n\r\n")
    head(held[0])
print(json.dumps(answers), flush=True)
if hold and held:
    held[-1].settimeout(None)
    held[-1].recv(1)  # until the upstream lets go
"""


class _Server:
    """A loopback HTTP server that answers each request ``200`` and keeps the connection open
    until ``release``; counts the ``/held`` requests (one per holder that holds)."""

    def __init__(self, expected_held: int = 0) -> None:
        self.held = 0
        self.expected = expected_held
        self.all_held = asyncio.Event()
        self.writers: set[asyncio.StreamWriter] = set()
        self.tasks: set[asyncio.Task[Any]] = set()
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> _Server:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        self.writers.add(writer)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nOK\n")
            await writer.drain()
            if head.split(b" ")[1] == b"/held":
                self.held += 1
                if self.held == self.expected:
                    self.all_held.set()
            await reader.read()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            self.writers.discard(writer)
            self.tasks.discard(task)

    async def release(self) -> None:
        """Close every connection, and return once each is closed."""
        for writer in list(self.writers):
            writer.close()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    async def aclose(self) -> None:
        assert self._server is not None
        self._server.close()
        await self.release()
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self._server.wait_closed()


def _events(result: Any) -> list[list[Any]]:
    return sorted([e.host, e.port, e.allowed, e.reason] for e in result.network)


def _answers(output: str) -> list[list[str]]:
    for line in output.splitlines():
        if line.startswith("["):
            parsed: list[list[str]] = json.loads(line)
            return parsed
    return []


async def _budget(limit: int, mechanism: str) -> dict[str, Any]:
    from fastgate.sandbox import NetworkPolicy, SandboxedShell, SandboxPolicy, _proxy, _support
    from tests.sandbox.confinement_kit import bash, output, sandboxed
    from tests.sandbox.test_confinement_network_audit import MemorySink

    if mechanism == "landlock":
        _support.namespaces_missing = lambda: "simulated: no user namespaces"
        _support.forget_support()
    workspace = Path(tempfile.mkdtemp(prefix="fd-budget-"))
    (workspace / "holder.py").write_text(HOLDER)
    network = NetworkPolicy(allow=("127.0.0.1",), allow_private=True)
    shell = SandboxedShell(SandboxPolicy(network=network))
    plain = SandboxedShell(SandboxPolicy())
    sink = MemorySink()
    executor = sandboxed(workspace, SandboxPolicy(network=network), audit=sink)
    held = await _Server(HOLDERS).start()
    victim = await _Server().start()
    hold = f"{PYTHON} holder.py 127.0.0.1:{held.port} {TUNNELS_EACH} hold"
    once = f"{PYTHON} holder.py 127.0.0.1:{victim.port} 1 once"
    # Warmed up (the resident launcher, the planner's thread) before the baseline is taken.
    await shell.run(once, cwd=str(workspace), timeout=60)
    await plain.run("true", cwd=str(workspace), timeout=60)
    await bash(executor, "true")
    await victim.release()
    baseline = _fds()
    holders = [
        asyncio.ensure_future(shell.run(hold, cwd=str(workspace), timeout=120))
        for _ in range(HOLDERS)
    ]
    await asyncio.wait_for(held.all_held.wait(), 100)
    holding = _fds()
    quiet = await plain.run("echo hi", cwd=str(workspace), timeout=60)
    refused = await bash(executor, once)
    await held.release()
    results = await asyncio.gather(*holders)
    await victim.release()
    after_release = await shell.run(
        f"{PYTHON} holder.py 127.0.0.1:{victim.port} {TUNNELS_EACH} once",
        cwd=str(workspace),
        timeout=60,
    )
    await victim.release()
    await held.release()
    after = _fds()  # the servers' listeners were open at the baseline too
    await held.aclose()
    await victim.aclose()
    return {
        "budget": _proxy.connection_budget(),
        "held_port": held.port,
        "victim_port": victim.port,
        "holders": [
            {
                "exit_code": r.exit_code,
                "answers": _answers(r.output),
                "network": _events(r),
                "output": r.output,
            }
            for r in results
        ],
        "plain": {"exit_code": quiet.exit_code, "output": quiet.output},
        "victim": {
            "ok": refused.ok,
            "answers": _answers(output(refused)),
            "content": output(refused),
            "audit": [[e.host, e.port, e.reason] for e in sink.refusals],
        },
        "after": {"answers": _answers(after_release.output)},
        "fds_baseline": baseline,
        "fds_holding": holding,
        "fds_after": after,
        "budget_held_after": _proxy._BUDGET.held,
    }


def _read_answer(sock: socket.socket) -> list[str]:
    sock.settimeout(30)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    lines = data.split(b"\r\n")
    status = lines[0].split(b" ")[1].decode() if b" " in lines[0] else "none"
    why = [
        line.split(b":", 1)[1].strip().decode()
        for line in lines
        if line.lower().startswith(b"x-fastgate-refusal:")
    ]
    return [status, why[0] if why else ""]


async def _accept(limit: int, mode: str) -> dict[str, Any]:
    from fastgate.sandbox import NetworkPolicy, NetworkProxy, _proxy

    loop = asyncio.get_running_loop()
    connections = limit // 4 + 8
    events: list[Any] = []
    refused_all = asyncio.Event()

    def on_event(event: Any) -> None:
        events.append(event)
        if len(events) == connections - limit // 4:
            refused_all.set()

    baseline = _fds()
    credential = "s3cret" if mode == "credential" else None
    policy = NetworkPolicy(allow=("127.0.0.1",), allow_private=True)
    proxy = NetworkProxy(policy, on_event=on_event, credential=credential, header_timeout=60)
    async with proxy:
        assert proxy.address is not None
        clients = []
        for _ in range(connections):
            client = socket.socket()
            client.setblocking(False)
            await loop.sock_connect(client, proxy.address)
            clients.append(client)
        # Refusals at accept are the last ``connections - share`` (the first take the share).
        refused = []
        for client in clients[limit // 4 :]:
            client.setblocking(True)
            refused.append(await asyncio.to_thread(_read_answer, client))
        accept_events = [[e.host, e.port, e.allowed, e.reason] for e in events]
        if credential is None:
            await asyncio.wait_for(refused_all.wait(), 30)
        pending = proxy.open_connections
        # A request read now: the share is spent, so its upstream is refused, for the call.
        asker = clients[0]
        asker.setblocking(True)
        auth = b""
        if credential is not None:
            import base64

            auth = b"Proxy-Authorization: Basic " + base64.b64encode(b"fastgate:s3cret") + b"\r\n"
        target = f"127.0.0.1:{proxy.address[1]}".encode()
        asker.sendall(b"CONNECT " + target + b" HTTP/1.1\r\n" + auth + b"\r\n")
        upgrade = await asyncio.to_thread(_read_answer, asker)
        upgrade_event = [events[-1].host, events[-1].port, events[-1].allowed, events[-1].reason]
        for client in clients:
            client.close()
        await proxy.wait_idle()
        port = proxy.address[1]
    return {
        "connections": connections,
        "pending": pending,
        "refused": refused,
        "accept_events": accept_events,
        "upgrade": upgrade,
        "upgrade_event": upgrade_event,
        "port": port,
        "budget_held_after": _proxy._BUDGET.held,
        "fds_baseline": baseline,
        "fds_after": _fds(),
    }


async def _emfile_accept(limit: int) -> dict[str, Any]:
    from fastgate.sandbox import NetworkPolicy, NetworkProxy, _proxy

    loop = asyncio.get_running_loop()
    warnings: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.WARNING:
                warnings.append(record)

    logging.getLogger("fastgate.sandbox").addHandler(Keep())
    tries = 0
    accept = loop.sock_accept

    async def counted(sock: socket.socket) -> tuple[socket.socket, Any]:
        nonlocal tries
        tries += 1
        return await accept(sock)

    loop.sock_accept = counted  # type: ignore[method-assign]
    baseline = _fds()
    upstream = await _Server().start()
    policy = NetworkPolicy(allow=("127.0.0.1",), allow_private=True)
    async with NetworkProxy(policy, header_timeout=60) as proxy:
        assert proxy.address is not None
        admitted = asyncio.Event()
        admit = proxy._admit

        def admitting(client: socket.socket) -> None:
            admit(client)
            admitted.set()

        proxy._admit = admitting  # type: ignore[method-assign]
        holder, waiting = socket.socket(), socket.socket()
        holder.connect(proxy.address)
        await asyncio.wait_for(admitted.wait(), 30)  # its request is awaited now
        fillers = _fill(limit, 0)
        tries = 0
        waiting.setblocking(False)
        await loop.sock_connect(waiting, proxy.address)  # in the backlog, not acceptable
        await asyncio.sleep(1.0)  # the window the retries are counted in
        accept_tries, warned = tries, len(warnings)
        # The holder's connection ends: the descriptor the proxy frees is the waiting
        # client's (the one this side frees is taken again at once).
        holder.close()
        fillers.append(os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC))
        waiting.setblocking(True)
        target = f"127.0.0.1:{upstream.port}".encode()
        waiting.sendall(b"CONNECT " + target + b" HTTP/1.1\r\n\r\n")
        answer = await asyncio.to_thread(_read_answer, waiting)
        _release(fillers)
        waiting.close()
        await proxy.wait_idle()
    await upstream.aclose()
    return {
        "warnings": warned,
        "accept_tries": accept_tries,
        "served": answer,
        "event": [[e.host, e.port, e.allowed, e.reason] for e in proxy.events][-1:]
        and [
            proxy.events[-1].host,
            proxy.events[-1].port,
            proxy.events[-1].allowed,
            proxy.events[-1].reason,
        ],
        "upstream_port": upstream.port,
        "budget_held_after": _proxy._BUDGET.held,
        "fds_baseline": baseline,
        "fds_after": _fds(),
    }


def _orphans() -> list[int]:
    """Launchers the resident forked that are still running (not its idle spares), once each
    has had 10 s to end (waited through a pidfd: no polling)."""
    from fastgate.processes import _resident

    left = []
    for resident_pid in _resident.running():
        try:
            with open(f"/proc/{resident_pid}/task/{resident_pid}/children") as file:
                children = [int(pid) for pid in file.read().split()]
        except OSError:
            continue
        spares = _resident._spares(resident_pid)
        for pid in children:
            if pid in spares:
                continue
            try:
                pidfd = os.pidfd_open(pid)
            except OSError:
                continue  # gone already
            try:
                ready, _, _ = select.select([pidfd], [], [], 10)
                if not ready:
                    left.append(pid)
            finally:
                os.close(pidfd)
    return left


async def _spawn(limit: int) -> dict[str, Any]:
    from fastgate import ToolFault
    from fastgate.processes import DEVNULL, PIPE, DescriptorsExhausted, spawn
    from fastgate.sandbox import NetworkPolicy, SandboxedShell, SandboxPolicy

    workspace = tempfile.mkdtemp(prefix="fd-spawn-")
    network = NetworkPolicy(allow=("127.0.0.1",), allow_private=True)
    shells = {
        "sandboxed": SandboxedShell(SandboxPolicy()),
        "sandboxed-network": SandboxedShell(SandboxPolicy(network=network)),
    }
    for shell in shells.values():  # warmed up: the resident, the planner's thread
        await shell.run("true", cwd=workspace, timeout=60)
    baseline = sorted(os.listdir("/proc/self/fd"))
    attempts = []
    for free in FREE:
        for how in ("spawn", "sandboxed", "sandboxed-network"):
            fillers = _fill(limit, free)
            entry: dict[str, Any] = {"free": free, "how": how}
            try:
                if how == "spawn":
                    process = spawn(["true"], stdout=PIPE, stderr=DEVNULL, cwd=workspace)
                    _release(fillers)
                    await process.wait()
                    assert process.stdout is not None
                    process.stdout.close()
                    ok = process.returncode == 0
                else:
                    result = await shells[how].run("echo hi", cwd=workspace, timeout=60)
                    ok = result.exit_code == 0 and result.output == "hi\n"
                entry["outcome"] = "ok" if ok else "failed"
            except DescriptorsExhausted as exc:
                assert isinstance(exc, ToolFault) and isinstance(exc, OSError)
                entry.update(
                    outcome="structured",
                    details=exc.details,
                    retryable=exc.retryable,
                    errno=exc.errno,
                )
            except Exception as exc:
                entry["outcome"] = f"raw {type(exc).__name__}: {exc}"
            _release(fillers)
            now = sorted(os.listdir("/proc/self/fd"))
            entry["leaked"] = sorted(set(now) - set(baseline))
            entry["orphans"] = _orphans()
            attempts.append(entry)
    return {
        "attempts": attempts,
        "fds_baseline": len(baseline),
        "fds_after": len(os.listdir("/proc/self/fd")),
    }


def _main(scenario: str, limit: int, *rest: str) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    scenarios = {
        "budget": lambda: _budget(limit, *rest),
        "accept": lambda: _accept(limit, *rest),
        "emfile_accept": lambda: _emfile_accept(limit),
        "spawn": lambda: _spawn(limit),
    }
    report = asyncio.run(scenarios[scenario]())
    report_to_parent(report)


if __name__ == "__main__":
    _main(sys.argv[1], int(sys.argv[2]), *sys.argv[3:])
