"""A call's network is that call's alone: its proxy serves no other process (another call
tunnelling through its own proxy, or anything else on the machine), a command sharing the host's
network cannot take connections that bypass the proxy, and every refusal reaches the audit and
the count in the result, a cancelled call's too."""

from __future__ import annotations

import asyncio
import base64
import os
import socket
import textwrap
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from fastgate import CancelToken, ToolResult
from fastgate.sandbox import NetworkPolicy, SandboxPolicy, _kernel, _support
from tests.sandbox.confinement_kit import (
    PYTHON,
    bash,
    mechanism_fixture,  # noqa: F401  (the fixture "mechanism")
    no_process_outlives_the_test,  # noqa: F401  (autouse)
    output,
    sandboxed,
    unconfined,
)
from tests.sandbox.proxy_kit import Upstream
from tests.sandbox.test_confinement_network_audit import MemorySink

OPEN = SandboxPolicy(network=NetworkPolicy(allow=("localhost",), allow_private=True))
STRICT = SandboxPolicy(network=NetworkPolicy(allow=("localhost",)))

LISTENERS = {
    "ipv4, unbound": "s = socket.socket(); s.listen(1)",
    "ipv6, unbound": "s = socket.socket(socket.AF_INET6); s.listen(1)",
    "ipv4, bound to port 0": "s = socket.socket(); s.bind(('0.0.0.0', 0)); s.listen(1)",
}


@pytest.fixture(name="landlock_only")
def landlock_only_fixture(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The mechanism without namespaces, as where user namespaces are blocked (simulated)."""
    if _kernel.landlock_abi() < 4:
        pytest.skip("Landlock with TCP rules (ABI 4) is not available here")
    monkeypatch.setattr(_support, "namespaces_missing", lambda: "simulated: no user namespaces")
    _support.forget_support()
    try:
        yield
    finally:
        _support.forget_support()


@pytest.mark.usefixtures("landlock_only")
@pytest.mark.parametrize("spelling", list(LISTENERS))
async def test_a_command_sharing_the_hosts_network_cannot_listen(
    tmp_path: Path, spelling: str
) -> None:
    script = f"import socket\n{LISTENERS[spelling]}\nprint('LISTENING', s.getsockname()[1])\n"
    (tmp_path / "listen.py").write_text(script)
    result = await bash(sandboxed(tmp_path, OPEN), f"{PYTHON} listen.py")
    assert "LISTENING" not in output(result), output(result)
    assert "LISTENING" in output(await bash(unconfined(tmp_path), f"{PYTHON} listen.py"))


def loopback_listeners() -> set[int]:
    """The ports this process listens on (TCP, IPv4 loopback or any address)."""
    ours = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            ours.add(target[8:-1])
    ports = set()
    with open("/proc/self/net/tcp") as table:
        for line in table.readlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in ours:  # listening, and ours
                ports.add(int(fields[1].split(":")[1], 16))
    return ports


async def message_from(fifo: Path, call: asyncio.Task[ToolResult]) -> str:
    """What the sandboxed command of ``call`` writes to ``fifo`` (the test waits on the FIFO,
    not on time); the call's output if it ended without writing."""
    reading = asyncio.ensure_future(asyncio.to_thread(fifo.read_text))
    finished, _ = await asyncio.wait({reading, call}, return_when=asyncio.FIRST_COMPLETED)
    if reading not in finished:
        await asyncio.to_thread(fifo.write_text, "")  # the reader waits for a writer: be it
        await reading
        raise AssertionError(output(call.result()))
    return reading.result()


@asynccontextmanager
async def running_call(workspace: Path, policy: SandboxPolicy) -> AsyncIterator[str]:
    """A sandboxed call that waits, once it has said its proxy URL (yielded), until the test is
    done with it."""
    os.mkfifo(workspace / "url")
    os.mkfifo(workspace / "done")
    command = 'echo "$HTTP_PROXY" > url; cat done > /dev/null'
    call = asyncio.create_task(bash(sandboxed(workspace, policy), command))
    try:
        yield (await message_from(workspace / "url", call)).strip()
    finally:
        if not call.done():
            await asyncio.to_thread((workspace / "done").write_text, "")
        await call


def ask(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=20) as conn:
        conn.sendall(request)
        answer = b""
        while chunk := conn.recv(4096):
            answer += chunk
    return answer


async def test_a_calls_proxy_serves_no_one_else(tmp_path: Path, mechanism: str) -> None:
    upstream = await Upstream(body=b"the other call's upstream\n").start()
    answers: list[bytes] = []
    try:
        (tmp_path / "b").mkdir()
        (tmp_path / "a").mkdir()
        before = loopback_listeners()
        async with running_call(tmp_path / "b", OPEN) as b_url:
            async with running_call(tmp_path / "a", OPEN) as a_url:
                new = await asyncio.to_thread(loopback_listeners) - before
                b, a = urllib.parse.urlsplit(b_url), urllib.parse.urlsplit(a_url)
                if mechanism == "landlock":
                    # B's proxy from outside B: with no secret, and with A's (what A's command
                    # sends when it tunnels to B's port through its own proxy).
                    a_secret = base64.b64encode(f"{a.username}:{a.password}".encode()).decode()
                    assert b.port is not None and a.port is not None
                    for authorization in ("", f"Proxy-Authorization: Basic {a_secret}\r\n"):
                        for head in (
                            f"GET http://localhost:{upstream.port}/ HTTP/1.1",
                            f"CONNECT localhost:{upstream.port} HTTP/1.1",
                        ):
                            request = f"{head}\r\nHost: localhost\r\n{authorization}\r\n"
                            answers.append(await asyncio.to_thread(ask, b.port, request.encode()))
                    # A's own secret opens A's own proxy: the check is of the secret, not a
                    # refusal of everyone.
                    own = f"GET http://localhost:{upstream.port}/ HTTP/1.1\r\nHost: x\r\n"
                    own += f"Proxy-Authorization: Basic {a_secret}\r\nConnection: close\r\n\r\n"
                    served = await asyncio.to_thread(ask, a.port, own.encode())
    finally:
        await upstream.aclose()
    if mechanism == "namespaces":
        # Each call's proxy listens only inside the call's own network namespace.
        assert new == set()
        assert upstream.accepted == 0
        return
    assert {b.port, a.port} == new and b.password and a.password and b.password != a.password
    assert len(answers) == 4
    for answer in answers:
        assert answer.startswith(b"HTTP/1.1 407 "), answer[:200]
    assert served.startswith(b"HTTP/1.1 200 ") and b"the other call's upstream" in served
    assert upstream.accepted == 1


async def test_a_cancelled_calls_refusals_are_audited(tmp_path: Path, mechanism: str) -> None:
    sink = MemorySink()
    ex = sandboxed(tmp_path, STRICT, audit=sink)
    token = CancelToken()
    os.mkfifo(tmp_path / "started")
    command = (
        "curl -sS --max-time 20 -o /dev/null http://example.com/; curl -sS --max-time 20 "
        "-o /dev/null http://127.0.0.2:9/; echo > started; sleep 60"
    )
    call = asyncio.create_task(bash(ex, command, cancel=token, session_id="s1"))
    await message_from(tmp_path / "started", call)
    token.cancel("the user stopped it")
    result = await call
    assert result.error is not None and not result.ok
    assert sink.of(result) == [
        ("example.com", 80, "not_in_allow_list"),
        ("127.0.0.2", 9, "ip_literal"),
    ]


MANY_REFUSED = textwrap.dedent(
    """\
    import os, socket, sys, urllib.parse
    proxy = urllib.parse.urlsplit(os.environ["HTTP_PROXY"])
    for n in range(int(sys.argv[1])):
        with socket.create_connection((proxy.hostname, proxy.port), timeout=20) as s:
            s.sendall(b"CONNECT example.com:443 HTTP/1.1\\r\\n\\r\\n")
            s.recv(4096)
    """
)


async def test_the_result_counts_every_refusal(tmp_path: Path) -> None:
    (tmp_path / "many.py").write_text(MANY_REFUSED)
    result = await bash(sandboxed(tmp_path, STRICT), f"{PYTHON} many.py 1100", seconds=120)
    lines = [line for line in output(result).splitlines() if line.startswith("[sandbox]")]
    assert len(lines) == 21, lines
    assert lines[-1] == "[sandbox] ... and 1080 more refused"  # 1,000 kept, 100 counted
