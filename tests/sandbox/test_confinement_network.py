"""A sandboxed call with a ``NetworkPolicy`` reaches the network through fastgate's proxy only
(SPEC §22 *Network*): an allowed host answers, a host not allowed is refused, and each decision
is the call's (``ShellResult.network``, a line per refusal in the content); a connection that
bypasses the proxy fails. The proxy's own refusals are tested in test_network_*.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastgate.sandbox import NetworkPolicy, SandboxedShell, SandboxPolicy
from tests.sandbox.confinement_kit import (
    PYTHON,
    mechanism_fixture,  # noqa: F401  (the fixture "mechanism")
    no_process_outlives_the_test,  # noqa: F401  (autouse)
)
from tests.sandbox.proxy_kit import Upstream


@asynccontextmanager
async def serving() -> AsyncIterator[Upstream]:
    server = await Upstream(body=b"hello through the proxy\n").start()
    try:
        yield server
    finally:
        await server.aclose()


def shell() -> SandboxedShell:
    # "localhost" resolves to the loopback: a private address, allowed here on purpose.
    network = NetworkPolicy(allow=("localhost",), allow_private=True)
    return SandboxedShell(SandboxPolicy(network=network))


async def test_an_allowed_host_answers_through_the_proxy(tmp_path: Path, mechanism: str) -> None:
    async with serving() as upstream:
        await allowed_host_answers(tmp_path, upstream)


async def allowed_host_answers(tmp_path: Path, upstream: Upstream) -> None:
    fetch = f"curl -sS --max-time 20 http://localhost:{upstream.port}/"
    result = await shell().run(fetch, cwd=str(tmp_path), timeout=60)
    assert result.exit_code == 0 and "hello through the proxy" in result.output, result
    assert result.sandboxed
    assert [(e.host, e.port, e.allowed, e.reason) for e in result.network] == [
        ("localhost", upstream.port, True, "allowed")
    ]
    script = (
        "import os, urllib.request; "
        f"print(urllib.request.urlopen('http://localhost:{upstream.port}/', timeout=20).read())"
    )
    by_python = await shell().run(f'{PYTHON} -c "{script}"', cwd=str(tmp_path), timeout=60)
    assert "hello through the proxy" in by_python.output, by_python


async def test_a_host_not_allowed_is_refused_and_said(tmp_path: Path, mechanism: str) -> None:
    async with serving() as upstream:
        await not_allowed_is_refused(tmp_path, upstream)


async def not_allowed_is_refused(tmp_path: Path, upstream: Upstream) -> None:
    fetch = (
        f"curl -sS --max-time 20 http://127.0.0.2:{upstream.port}/ -o /dev/null -w '%{{http_code}}'"
    )
    result = await shell().run(fetch, cwd=str(tmp_path), timeout=60)
    assert "hello" not in result.output
    refused = [e for e in result.network if not e.allowed]
    assert [(e.host, e.port) for e in refused] == [("127.0.0.2", upstream.port)]
    assert f"[sandbox] Network refused: 127.0.0.2:{upstream.port} ({refused[0].reason})" in (
        result.output
    )


async def test_a_connection_that_bypasses_the_proxy_fails(tmp_path: Path, mechanism: str) -> None:
    async with serving() as upstream:
        await bypass_fails(tmp_path, upstream)


async def bypass_fails(tmp_path: Path, upstream: Upstream) -> None:
    direct = [
        f"curl -sS --noproxy '*' --max-time 5 http://127.0.0.1:{upstream.port}/",
        f"exec 3<>/dev/tcp/127.0.0.1/{upstream.port}",
        f"{PYTHON} -c \"import socket; socket.create_connection(('127.0.0.1', {upstream.port}))\"",
        f"echo x > /dev/udp/127.0.0.1/{upstream.port}",
    ]
    for command in direct:
        result = await shell().run(command, cwd=str(tmp_path), timeout=60)
        assert result.exit_code != 0 and "hello" not in result.output, (command, result)
    assert upstream.accepted == 0
