"""Each network connection a sandboxed ``bash`` call is refused is written to the executor's
audit sink, tied to the call (SPEC §22 *Network*): one ``NetworkAuditEvent`` per refusal,
with the call's execution id, session and tool, the host and port as the proxy judged them and
the reason, passed to the sink's ``network_refused``; an allowed connection writes none. Real
sandbox, real proxy, a loopback upstream; the records are there when the call returns."""

from __future__ import annotations

import json
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastgate import AuditEvent, JsonlAuditSink, ToolResult
from fastgate.permissions import NetworkAuditEvent, NetworkAuditSink
from fastgate.sandbox import NetworkPolicy, SandboxPolicy
from tests.sandbox.confinement_kit import (
    PYTHON,
    bash,
    mechanism_fixture,  # noqa: F401  (the fixture "mechanism")
    no_process_outlives_the_test,  # noqa: F401  (autouse)
    output,
    sandboxed,
)
from tests.sandbox.proxy_kit import Upstream

# "localhost" resolves to the loopback, a private address: refused unless allow_private.
STRICT = SandboxPolicy(network=NetworkPolicy(allow=("localhost",)))
OPEN = SandboxPolicy(network=NetworkPolicy(allow=("localhost",), allow_private=True))


class MemorySink:
    """An audit sink that keeps what it hears: decisions, and network refusals."""

    def __init__(self) -> None:
        self.decisions: list[AuditEvent] = []
        self.refusals: list[NetworkAuditEvent] = []

    def record(self, event: AuditEvent) -> None:
        self.decisions.append(event)

    def network_refused(self, event: NetworkAuditEvent) -> None:
        self.refusals.append(event)

    def of(self, result: ToolResult) -> list[tuple[str, int, str]]:
        """(host, port, reason) of each refusal written for ``result``'s call, checking each is
        tied to it (session and tool of the call)."""
        mine = [e for e in self.refusals if e.execution_id == result.meta.execution_id]
        assert all(e.session_id == "s1" and e.tool_name == "bash" for e in mine), mine
        return [(e.host, e.port, e.reason) for e in mine]


class DecisionsOnly:
    """A sink written before network refusals were audited: ``record`` alone."""

    def __init__(self) -> None:
        self.decisions: list[AuditEvent] = []

    def record(self, event: AuditEvent) -> None:
        self.decisions.append(event)


@asynccontextmanager
async def serving() -> AsyncIterator[Upstream]:
    server = await Upstream(body=b"hello through the proxy\n").start()
    try:
        yield server
    finally:
        await server.aclose()


def via_proxy(url: str) -> str:
    return f"curl -sS --max-time 20 -o /dev/null -w '%{{http_code}}\\n' {url}"


# A raw CONNECT per target, to the proxy the sandbox names: curl will not send these hosts.
RAW_CONNECT = textwrap.dedent(
    """\
    import base64, os, socket, sys, urllib.parse
    proxy = urllib.parse.urlsplit(os.environ["HTTP_PROXY"])
    # The call's own credential, where its proxy has one (Landlock only): a request without
    # it is no one's and is recorded for no call.
    secret = f"{proxy.username}:{proxy.password}".encode() if proxy.username else b""
    auth = b"Proxy-Authorization: Basic " + base64.b64encode(secret) + b"\\r\\n" if secret else b""
    for target in sys.argv[1:]:
        raw = target.encode().decode("unicode_escape").encode("latin-1")
        with socket.create_connection((proxy.hostname, proxy.port), timeout=20) as s:
            s.sendall(b"CONNECT " + raw + b" HTTP/1.1\\r\\n" + auth + b"\\r\\n")
            print(s.recv(4096).split(b"\\r\\n")[0].decode())
    """
)


def test_the_memory_sink_is_a_network_audit_sink() -> None:
    assert isinstance(MemorySink(), NetworkAuditSink)
    assert not isinstance(DecisionsOnly(), NetworkAuditSink)


async def test_each_refusal_is_one_record_of_the_call(tmp_path: Path, mechanism: str) -> None:
    sink = MemorySink()
    ex = sandboxed(tmp_path, STRICT, audit=sink)
    (tmp_path / "connect.py").write_text(RAW_CONNECT)
    async with serving() as upstream:
        port = upstream.port
        not_allowed = await bash(ex, via_proxy("http://example.com/"))
        ip_literal = await bash(ex, via_proxy(f"http://127.0.0.2:{port}/"))
        private = await bash(ex, via_proxy(f"http://localhost:{port}/"))
        control = await bash(
            ex, f"{PYTHON} connect.py 'evil.example\\x00.localhost:443' 'a\\x01b.localhost:443'"
        )
        direct = await bash(ex, f"curl -sS --noproxy '*' --max-time 5 http://127.0.0.1:{port}/")
    assert sink.of(not_allowed) == [("example.com", 80, "not_in_allow_list")]
    assert sink.of(ip_literal) == [("127.0.0.2", port, "ip_literal")]
    assert sink.of(private) == [("localhost", port, "private_address")]
    assert sink.of(control) == [
        ("evil.example\\x00.localhost", 443, "invalid_host"),
        ("a\\x01b.localhost", 443, "invalid_host"),
    ]
    assert output(control).count("403 Forbidden") == 2, output(control)
    # Each is also a line of the content, as the sink has it.
    for result in (not_allowed, ip_literal, private, control):
        for host, at, reason in sink.of(result):
            assert f"[sandbox] Network refused: {host}:{at} ({reason})" in output(result)
    # A direct connection never reaches fastgate (the kernel refuses it): it fails, and the
    # proxy has nothing to judge, so nothing is written.
    assert not direct.ok and sink.of(direct) == [], output(direct)
    assert upstream.accepted == 0
    assert len(sink.refusals) == 5
    # Decisions are heard as before, one per call.
    assert len({e.execution_id for e in sink.decisions}) == 5


async def test_an_allowed_request_writes_no_refusal(tmp_path: Path, mechanism: str) -> None:
    sink = MemorySink()
    ex = sandboxed(tmp_path, OPEN, audit=sink)
    async with serving() as upstream:
        result = await bash(ex, f"curl -sS --max-time 20 http://localhost:{upstream.port}/")
        assert result.ok and "hello through the proxy" in output(result), output(result)
        # One call, an allowed request and a refused one: only the refusal is written.
        mixed = await bash(
            ex,
            f"curl -sS --max-time 20 http://localhost:{upstream.port}/; "
            + via_proxy("http://example.com/"),
        )
    assert "hello through the proxy" in output(mixed)
    assert sink.of(result) == []
    assert sink.of(mixed) == [("example.com", 80, "not_in_allow_list")]
    assert [e.execution_id for e in sink.decisions] == [
        result.meta.execution_id,
        mixed.meta.execution_id,
    ]


async def test_a_sink_without_network_refused_keeps_working(tmp_path: Path, mechanism: str) -> None:
    sink = DecisionsOnly()
    ex = sandboxed(tmp_path, STRICT, audit=sink)
    result = await bash(ex, via_proxy("http://example.com/"))
    assert result.ok, output(result)  # curl printed the 403 and exited 0
    assert "[sandbox] Network refused: example.com:80 (not_in_allow_list)" in output(result)
    assert [e.execution_id for e in sink.decisions] == [result.meta.execution_id]


class Failing(MemorySink):
    def network_refused(self, event: NetworkAuditEvent) -> None:
        raise OSError("the audit disk is full")


async def test_a_sink_that_fails_leaves_the_call_unchanged(tmp_path: Path, mechanism: str) -> None:
    sink = Failing()
    ex = sandboxed(tmp_path, STRICT, audit=sink)
    result = await bash(ex, via_proxy("http://example.com/"))
    assert result.ok and "403" in output(result), output(result)
    assert "[sandbox] Network refused: example.com:80 (not_in_allow_list)" in output(result)
    assert [e.execution_id for e in sink.decisions] == [result.meta.execution_id]


async def test_jsonl_audit_sink_writes_one_line_per_refusal(tmp_path: Path, mechanism: str) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    path = tmp_path / "audit.jsonl"
    with JsonlAuditSink(path) as sink:
        ex = sandboxed(workspace, STRICT, audit=sink)
        refused = await bash(
            ex, via_proxy("http://example.com/") + "; " + via_proxy("http://127.0.0.2:9/")
        )
        calm = await bash(ex, "true")
        await sink.aflush()
        lines = [json.loads(line) for line in path.read_text().splitlines()]
    network = [line for line in lines if line.get("event") == "network_refused"]
    expected: list[dict[str, Any]] = [
        {"host": "example.com", "port": 80, "reason": "not_in_allow_list"},
        {"host": "127.0.0.2", "port": 9, "reason": "ip_literal"},
    ]
    assert [{k: line[k] for k in ("host", "port", "reason")} for line in network] == expected
    for line in network:
        assert line["execution_id"] == refused.meta.execution_id
        assert line["session_id"] == "s1" and line["tool_name"] == "bash"
        assert isinstance(line["time"], float)
        assert next(iter(line)) == "event"  # a reader tells the kinds apart by the first key
    # The decision lines are unchanged (no "event" key), one per call.
    decisions = [line for line in lines if "event" not in line]
    assert [line["execution_id"] for line in decisions] == [
        refused.meta.execution_id,
        calm.meta.execution_id,
    ]
