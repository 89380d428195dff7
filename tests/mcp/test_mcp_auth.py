"""The bridge signing in to an MCP server behind OAuth 2.1 (``tests/mcp/oauth_server.py``: the
MCP server and its authorization server in one process on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

import httpx2

from fastgate import ErrorCode, ExecutionContext, PermissionMode, ToolExecutor, ToolRegistry
from fastgate.mcp import (
    MCPBridge,
    MCPConfigError,
    MCPServerConfig,
    MCPStartupError,
    OAuthClient,
    TokenStore,
    _auth,
)
from tests.mcp.servers import alive, records, running

# A server process per test and the protocol's flows, none of it the core's: run once in CI,
# on the compiled build.
pytestmark = pytest.mark.slow

SERVER = Path(__file__).parent / "oauth_server.py"
CTX = ExecutionContext(session_id="s1")
SECRET = "s3cret-of-the-client"


class OAuthServer:
    def __init__(self, base: str, record: Path) -> None:
        self.base = base
        self.url = f"{base}/mcp"
        self.record = record

    def events(self, kind: str) -> list[dict[str, Any]]:
        return [r for r in records(self.record) if r["event"] == kind]

    def grants(self) -> list[str]:
        return [r["grant"] for r in self.events("grant")]

    def issued(self) -> list[str]:
        """Every token the server handed out, access and refresh."""
        found = [(r["access"], r["refresh"]) for r in self.events("issued")]
        return [t for pair in found for t in pair if t]

    async def control(self, what: str) -> None:
        async with httpx2.AsyncClient() as http:
            (await http.post(f"{self.base}/control/{what}")).raise_for_status()


@contextlib.contextmanager
def oauth_server(tmp_path: Path, **env: str) -> Iterator[OAuthServer]:
    record = tmp_path / "oauth.jsonl"
    environment = {**os.environ, "OAUTH_RECORD": str(record), **env}
    process = subprocess.Popen(
        [sys.executable, str(SERVER)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=environment,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("PORT "), f"the OAuth fixture did not start: {line!r}"
        yield OAuthServer(f"http://127.0.0.1:{int(line.split()[1])}", record)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        if process.stdout is not None:
            process.stdout.close()
    assert not alive(process.pid)


def clients(**entries: dict[str, Any]) -> str:
    return json.dumps(entries)


def executor(registry: ToolRegistry) -> ToolExecutor:
    return ToolExecutor(registry, mode=PermissionMode.YOLO)


class Clock:
    """The bridge's view of wall-clock time, moved on by the test."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.offset = 0.0
        monkeypatch.setattr(_auth, "_now", lambda: time.time() + self.offset)


# -- discovery and the authorization code flow -------------------------------------------------


async def test_discovery_registration_and_pkce_code_flow_through_the_headless_seam(
    tmp_path: Path,
) -> None:
    store = TokenStore(tmp_path / "tokens")
    with oauth_server(tmp_path) as server:
        registry = ToolRegistry()
        config = MCPServerConfig("sec", url=server.url, auth=OAuthClient(token_store=store))
        async with running(registry, config) as bridge:
            assert bridge.status()["sec"]["state"] == "ready"
            result = await executor(registry).execute("mcp__sec__echo", {"text": "hi"}, CTX)
            assert result.ok and result.value == {"result": "hi"}
        # Discovery: the 401's resource metadata, then the issuer's metadata.
        assert server.events("resource_metadata") and server.events("metadata")
        assert len(server.events("register")) == 1  # no client_id: dynamic registration
        (authorize,) = server.events("authorize")
        assert authorize["code_challenge_method"] == "S256" and authorize["code_challenge"]
        assert authorize["resource"] == server.url  # RFC 8707
        assert server.grants() == ["authorization_code"]  # the server checked the verifier
        denied = [r for r in server.events("mcp") if not r["live"]]
        assert len(denied) == 1 and denied[0]["token"] is None  # only the first, unsigned
    (path,) = (tmp_path / "tokens").iterdir()
    assert _auth.file_mode(path) == 0o600 and _auth.file_mode(path.parent) == 0o700


async def test_a_redirect_callable_signs_in_sync_or_async(tmp_path: Path) -> None:
    seen: list[str] = []

    def browser(url: str) -> str:  # what a person's browser would do: follow, come back
        seen.append(url)
        response = httpx2.get(url, follow_redirects=False)
        return response.headers["location"]

    async def async_browser(url: str) -> str:
        seen.append(url)
        async with httpx2.AsyncClient() as http:
            return (await http.get(url)).headers["location"]

    with oauth_server(tmp_path) as server:
        for seam in (browser, async_browser):
            registry = ToolRegistry()
            oauth = OAuthClient(redirect=seam, token_store=TokenStore.in_memory())
            async with running(registry, MCPServerConfig("sec", url=server.url, auth=oauth)):
                assert (await executor(registry).execute("mcp__sec__whoami", {}, CTX)).ok
    assert len(seen) == 2
    for url in seen:
        query = parse_qs(urlsplit(url).query)
        assert url.startswith(f"{server.base}/authorize?")
        assert query["code_challenge_method"] == ["S256"] and query["state"]


@pytest.mark.parametrize("answer", ["refused", "tampered", "nonsense", "raises"])
async def test_a_sign_in_that_does_not_come_back_right_is_unauthorized(
    tmp_path: Path, answer: str
) -> None:
    def browser(url: str) -> str:
        back = httpx2.get(url, follow_redirects=False).headers["location"]
        if answer == "refused":
            return "http://127.0.0.1/callback?error=access_denied&error_description=no"
        if answer == "tampered":  # another sign-in's state: a forged callback
            return back.replace("state=", "state=x")
        if answer == "raises":
            raise RuntimeError("the browser could not be opened")
        return "not a url"

    with oauth_server(tmp_path) as server:
        oauth = OAuthClient(redirect=browser, token_store=TokenStore.in_memory())
        config = MCPServerConfig("sec", url=server.url, auth=oauth, required=True)
        with pytest.raises(MCPStartupError) as raised:
            async with running(ToolRegistry(), config):
                pass
        message = str(raised.value)
        assert "'sec'" in message and "unauthorized" in message
        assert "protocol" not in message and "-32603" not in message
        assert server.grants() == []  # no code was ever exchanged


async def test_a_sign_in_page_without_a_redirect_seam_says_a_person_must_sign_in(
    tmp_path: Path,
) -> None:
    with oauth_server(tmp_path, OAUTH_MODE="login") as server:
        config = MCPServerConfig(
            "sec", url=server.url, auth=OAuthClient(token_store=TokenStore.in_memory())
        )
        async with running(ToolRegistry(), config) as bridge:
            status = bridge.status()["sec"]
            assert status["state"] == "restarting"
            assert status["last_error"].startswith("unauthorized:")
            assert "a person has to sign in" in status["last_error"]
            assert "OAuthClient(redirect=" in status["last_error"]


# -- client credentials -------------------------------------------------------------------------


def ec_key() -> tuple[str, str]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    return private, public


async def test_client_credentials_with_a_secret_and_with_a_private_key(tmp_path: Path) -> None:
    private, public = ec_key()
    registered = clients(svc={"secret": SECRET}, signer={"public_key": public})
    with oauth_server(tmp_path, OAUTH_CLIENTS=registered) as server:
        for oauth in (
            OAuthClient(
                client_id="svc",
                client_secret=SECRET,
                grant="client_credentials",
                token_store=TokenStore.in_memory(),
            ),
            OAuthClient(
                client_id="signer", private_key_pem=private, token_store=TokenStore.in_memory()
            ),
        ):
            registry = ToolRegistry()
            async with running(registry, MCPServerConfig("sec", url=server.url, auth=oauth)):
                assert (await executor(registry).execute("mcp__sec__whoami", {}, CTX)).ok
        fields = [r["fields"] for r in server.events("grant")]
        assert server.grants() == ["client_credentials", "client_credentials"]
        assert "client_assertion" not in fields[0] and "client_assertion" in fields[1]
        assert server.events("authorize") == [] and server.events("register") == []


async def test_a_wrong_client_secret_is_unauthorized_naming_the_server(tmp_path: Path) -> None:
    with oauth_server(tmp_path, OAUTH_CLIENTS=clients(svc={"secret": SECRET})) as server:
        oauth = OAuthClient(
            client_id="svc",
            client_secret="not-" + SECRET,
            grant="client_credentials",
            token_store=TokenStore.in_memory(),
        )
        config = MCPServerConfig("sec", url=server.url, auth=oauth, required=True)
        with pytest.raises(MCPStartupError) as raised:
            async with running(ToolRegistry(), config):
                pass
        assert raised.value.server == "sec" and "unauthorized" in raised.value.reason
        assert "not-" + SECRET not in str(raised.value)


# -- expiry, refresh, the store ----------------------------------------------------------------


async def test_a_token_is_refreshed_before_it_expires(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock(monkeypatch)
    store = TokenStore(tmp_path / "tokens")
    with oauth_server(tmp_path, OAUTH_TTL="100") as server:
        registry = ToolRegistry()
        config = MCPServerConfig("sec", url=server.url, auth=OAuthClient(token_store=store))
        async with running(registry, config):
            run = executor(registry)
            clock.offset = 50.0  # half its life: used as it is
            assert (await run.execute("mcp__sec__whoami", {}, CTX)).ok
            assert server.grants() == ["authorization_code"]
            clock.offset = 95.0  # 5 s left (the server would still take it): renewed first
            assert (await run.execute("mcp__sec__whoami", {}, CTX)).ok
            assert server.grants() == ["authorization_code", "refresh_token"]
        first, renewed = [r["access"] for r in server.events("issued")]
        used = [r["token"] for r in server.events("mcp") if r["live"]]
        assert used[-1] == renewed and first in used
        assert [r for r in server.events("mcp") if not r["live"]][1:] == []  # never refused
        assert server.events("authorize")[1:] == []  # no second sign-in
    (path,) = (tmp_path / "tokens").iterdir()
    assert renewed in path.read_text() and _auth.file_mode(path) == 0o600


async def test_client_credentials_are_renewed_before_they_expire(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock(monkeypatch)
    oauth = OAuthClient(
        client_id="svc",
        client_secret=SECRET,
        grant="client_credentials",
        token_store=TokenStore.in_memory(),
    )
    with oauth_server(
        tmp_path, OAUTH_TTL="100", OAUTH_CLIENTS=clients(svc={"secret": SECRET})
    ) as server:
        registry = ToolRegistry()
        async with running(registry, MCPServerConfig("sec", url=server.url, auth=oauth)):
            clock.offset = 95.0
            assert (await executor(registry).execute("mcp__sec__whoami", {}, CTX)).ok
        assert server.grants() == ["client_credentials", "client_credentials"]
        assert [r for r in server.events("mcp") if not r["live"]][1:] == []


async def test_stored_tokens_outlive_the_bridge_and_a_stale_one_is_refreshed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock(monkeypatch)
    directory = tmp_path / "tokens"
    with oauth_server(tmp_path, OAUTH_TTL="100") as server:
        for offset in (0.0, 10.0, 95.0):
            clock.offset = offset
            registry = ToolRegistry()
            oauth = OAuthClient(token_store=TokenStore(directory))  # a new process, say
            async with running(registry, MCPServerConfig("sec", url=server.url, auth=oauth)):
                assert (await executor(registry).execute("mcp__sec__whoami", {}, CTX)).ok
        # One sign-in; the second bridge used the stored token; the third refreshed it.
        assert len(server.events("authorize")) == 1 and len(server.events("register")) == 1
        assert server.grants() == ["authorization_code", "refresh_token"]


async def test_a_revoked_token_is_replaced_by_signing_in_again(tmp_path: Path) -> None:
    with oauth_server(tmp_path) as server:
        registry = ToolRegistry()
        oauth = OAuthClient(token_store=TokenStore.in_memory())
        async with running(registry, MCPServerConfig("sec", url=server.url, auth=oauth)):
            await server.control("revoke")
            assert (await executor(registry).execute("mcp__sec__whoami", {}, CTX)).ok
        assert len(server.events("authorize")) == 2


async def test_the_token_store_writes_0600_files_atomically_and_survives_bad_ones(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    directory = tmp_path / "deep" / "tokens"
    store = TokenStore(directory)
    previous = os.umask(0)  # even a permissive umask gets 0600 files
    try:
        await store.save("srv-1", {"tokens": {"access_token": "a"}})
        await store.save("srv-1", {"tokens": {"access_token": "b"}})
    finally:
        os.umask(previous)
    path = directory / "srv-1.json"
    assert _auth.file_mode(path) == 0o600 and _auth.file_mode(directory) == 0o700
    assert sorted(p.name for p in directory.iterdir()) == ["srv-1.json"]  # no temp left
    assert (await store.load("srv-1") or {})["tokens"] == {"access_token": "b"}
    caplog.set_level(logging.WARNING, logger="fastgate.mcp")
    for bad in (b"{not json", b"[1, 2]", b'{"version": 99}', b"\xff" * 10):
        path.write_bytes(bad)
        assert await store.load("srv-1") is None  # signs in afresh
    (directory / "elsewhere.json").write_text('{"version": 1, "tokens": {"access_token": "x"}}')
    path.unlink()
    path.symlink_to(directory / "elsewhere.json")
    assert await store.load("srv-1") is None  # a planted link is not followed
    assert all("not json" not in r.getMessage() for r in caplog.records)
    assert await store.load("missing") is None
    memory = TokenStore.in_memory()
    await memory.save("k", {"tokens": {"access_token": "m"}})
    loaded = await memory.load("k")
    assert loaded is not None and loaded["tokens"] == {"access_token": "m"}
    loaded["tokens"]["access_token"] = "changed"  # a copy: the store keeps its own
    assert (await memory.load("k") or {})["tokens"] == {"access_token": "m"}


# -- 401 / 403: unauthorized, naming the server --------------------------------------------------


async def test_a_server_that_wants_a_token_is_unauthorized_at_connect(tmp_path: Path) -> None:
    with oauth_server(tmp_path) as server:
        required = MCPServerConfig("sec", url=server.url, required=True)
        with pytest.raises(MCPStartupError) as raised:
            async with running(ToolRegistry(), required):
                pass
        assert str(raised.value).startswith("MCP server 'sec' did not start: unauthorized:")
        assert "HTTP 401" in str(raised.value) and "auth=OAuthClient" in str(raised.value)
        for transport in ("http", "sse", "auto"):
            config = MCPServerConfig("sec", url=server.url, transport=transport)
            async with running(ToolRegistry(), config) as bridge:
                status = bridge.status()["sec"]
                assert status["last_error"].startswith("unauthorized:"), status["last_error"]
                assert "-32603" not in status["last_error"]


async def test_a_refused_call_is_unauthorized_never_a_protocol_error(tmp_path: Path) -> None:
    with oauth_server(tmp_path) as server:
        registry = ToolRegistry()
        oauth = OAuthClient(token_store=TokenStore.in_memory())
        async with running(registry, MCPServerConfig("sec", url=server.url, auth=oauth)):
            run = executor(registry)
            # 403 insufficient_scope, also after the step-up sign-in.
            await server.control("mode?to=scope")
            scoped = await run.execute("mcp__sec__whoami", {}, CTX)
            # 401 and the authorization server refusing every grant.
            await server.control("mode?to=deny")
            await server.control("revoke")
            denied = await run.execute("mcp__sec__whoami", {}, CTX)
            await server.control("mode?to=")
            afterwards = await run.execute("mcp__sec__whoami", {}, CTX)
        for result in (scoped, denied):
            assert result.error is not None and result.error.code is ErrorCode.TOOL_ERROR
            assert result.error.details["reason"] == "unauthorized"
            assert result.error.details["server"] == "sec"
            assert "MCP server sec" in result.error.message
        assert scoped.error is not None and "insufficient_scope" in scoped.error.message
        assert denied.error is not None and "invalid_grant" in denied.error.message
        # A failed sign-in holds for its connection only; the bridge keeps no bad state.
        assert afterwards.error is not None and afterwards.error.details["reason"] == "unauthorized"


@pytest.mark.parametrize("mode", ["deny", "garbage"])
async def test_an_authorization_server_that_refuses_or_babbles_is_unauthorized(
    tmp_path: Path, mode: str
) -> None:
    with oauth_server(tmp_path, OAUTH_MODE=mode) as server:
        config = MCPServerConfig(
            "sec",
            url=server.url,
            auth=OAuthClient(token_store=TokenStore.in_memory()),
            startup_timeout=20.0,
        )
        async with running(ToolRegistry(), config) as bridge:
            error = bridge.status()["sec"]["last_error"]
            assert error.startswith("unauthorized: the authorization failed:"), error
            assert len(error) < 2000


# -- secrets stay secret --------------------------------------------------------------------------


async def test_no_token_or_secret_reaches_logs_errors_results_or_status(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.DEBUG)
    clock = Clock(monkeypatch)
    seen: list[str] = []
    registered = clients(app={"secret": SECRET, "redirect_uris": []})
    with oauth_server(tmp_path, OAUTH_TTL="100", OAUTH_CLIENTS=registered) as server:
        registry = ToolRegistry()
        oauth = OAuthClient(
            client_id="app", client_secret=SECRET, token_store=TokenStore.in_memory()
        )
        config = MCPServerConfig("sec", url=server.url, auth=oauth)
        seen.append(repr(config))
        async with running(registry, config) as bridge:
            run = executor(registry)
            seen.append(repr(await run.execute("mcp__sec__echo", {"text": "x"}, CTX)))
            clock.offset = 95.0
            seen.append(repr(await run.execute("mcp__sec__echo", {"text": "y"}, CTX)))
            await server.control("mode?to=deny")
            await server.control("revoke")
            seen.append(repr(await run.execute("mcp__sec__echo", {"text": "z"}, CTX)))
            seen.append(json.dumps(bridge.status()))
        required = MCPServerConfig("sec", url=server.url, auth=oauth, required=True)
        with pytest.raises(MCPStartupError) as raised:
            async with running(ToolRegistry(), required):
                pass
        seen.append(str(raised.value))
        tokens = server.issued()
    assert len(tokens) >= 4  # a first token and its refresh, each with a refresh token
    seen += [r.getMessage() for r in caplog.records]
    seen += [str(r.exc_info[1]) for r in caplog.records if r.exc_info]
    everything = "\n".join(seen)
    assert "unauthorized" in everything  # the failures were exercised
    assert "not accepted: [redacted]" in everything  # ... and the server quoted the tokens
    for secret in [*tokens, SECRET]:
        assert secret not in everything


# -- configuration ---------------------------------------------------------------------------------


def test_oauth_configuration_is_checked_when_it_is_made() -> None:
    private, _ = ec_key()
    bad: list[dict[str, Any]] = [
        {"client_secret": "s"},  # a secret without its client
        {"grant": "client_credentials"},  # client credentials without a client
        {"grant": "client_credentials", "client_id": "c"},  # ... or a credential
        {"client_id": "c", "client_secret": "s", "private_key_pem": private},  # both
        {"client_id": "c", "private_key_pem": "not a key"},
        {"client_id": "c", "private_key_pem": private, "grant": "authorization_code"},
        {"client_metadata_url": "http://example.com/client.json"},  # not https
        {"client_metadata_url": "https://example.com/"},  # no path
        {"grant": "password"},
        {"redirect": "https://example.com"},
        {"redirect_uri": "not a url"},
        {"token_store": "/tmp/tokens"},
        {"identity_assertion": lambda a, r: "jag", "client_id": "c"},  # no secret, no issuer
        {"identity_assertion": lambda a, r: "jag", "grant": "client_credentials"},
        {"scope": ""},
    ]
    for fields in bad:
        with pytest.raises(ValueError, match="OAuthClient"):
            OAuthClient(**fields)
    with pytest.raises(ValueError) as raised:
        OAuthClient(client_id="c", private_key_pem="-----BEGIN PRIVATE KEY-----\nsecretbits\n")
    assert "secretbits" not in str(raised.value)
    oauth = OAuthClient(client_id="c", client_secret=SECRET, grant="client_credentials")
    assert SECRET not in repr(oauth) and "private_key_pem" not in repr(oauth)
    assert OAuthClient(client_id="c", private_key_pem=private).effective_grant == (
        "client_credentials"
    )


def test_auth_belongs_to_an_https_or_local_url_without_a_static_authorization_header() -> None:
    oauth = OAuthClient()
    for fields in (
        {"command": ["server"]},
        {"url": "http://mcp.example.com/mcp"},  # tokens in clear across the network
        {"url": "https://mcp.example.com/mcp", "headers": {"authorization": "Bearer t"}},
    ):
        with pytest.raises(MCPConfigError) as raised:
            MCPServerConfig("s", auth=oauth, **fields)
        assert raised.value.field == "auth"
    with pytest.raises(MCPConfigError):
        MCPServerConfig("s", url="https://mcp.example.com/mcp", auth="token")  # type: ignore[arg-type]
    for url in ("https://mcp.example.com/mcp", "http://127.0.0.1:8000/mcp", "http://localhost/m"):
        assert MCPServerConfig("s", url=url, auth=oauth).auth is oauth


async def test_the_bridge_waits_for_nothing_after_closing(tmp_path: Path) -> None:
    """Connections that failed to sign in leave no task or connection behind."""
    with oauth_server(tmp_path, OAUTH_MODE="deny") as server:
        config = MCPServerConfig(
            "sec", url=server.url, auth=OAuthClient(token_store=TokenStore.in_memory())
        )
        bridge = MCPBridge(ToolRegistry(), [config])
        async with asyncio.timeout(30):
            await bridge.start()
            await bridge.aclose()
        assert bridge.status()["sec"]["state"] == "closed"
