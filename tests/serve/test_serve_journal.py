"""The journal behind the gateway: a re-sent call gets the recorded result and its body runs
once (the older era by session and request id, either era by the client's key), keys are the
principal's own, and a call whose gateway died mid-call is never run a second time."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import fastgate
from fastgate import SqliteToolUseStore, ToolKind
from fastgate.serve import Gateway
from tests.serve.kit import (
    client,
    executor,
    legacy_session,
    post_modern,
    registry,
    rpc_result,
    serving,
    text_of,
    tokens_file,
)

RUNS: list[str] = []


@fastgate.tool(kind=ToolKind.EXECUTE)
async def charge(order: str) -> str:
    """Charge an order (records each run).

    Args:
        order: which.
    """
    RUNS.append(order)
    return f"charged {order} (run {len(RUNS)})"


@contextlib.asynccontextmanager
async def journaled(tmp_path: Path, **options: Any) -> AsyncIterator[tuple[Gateway, str]]:
    RUNS.clear()
    store = await SqliteToolUseStore.open(tmp_path / "journal.db")
    served = executor(
        registry(charge), store=store, permissions=fastgate.PermissionConfig(allow=["charge"])
    )
    gateway = Gateway(served, rate_limit=None, **options)
    try:
        async with serving(gateway) as url:
            yield gateway, url
    finally:
        served.dispose()
        await store.close()


def _meta_of(response: httpx.Response) -> dict[str, Any]:
    found: dict[str, Any] = rpc_result(response)["_meta"]["fastgate"]
    return found


async def test_a_request_re_sent_on_its_session_gets_the_recorded_result(tmp_path: Path) -> None:
    async with journaled(tmp_path) as (_, url), httpx.AsyncClient() as http:
        session = await legacy_session(http, url)
        call = {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "tools/call",
            "params": {"name": "charge", "arguments": {"order": "A"}},
        }
        first = await http.post(url, json=call, headers=session)
        again = await http.post(url, json=call, headers=session)  # the stream broke: re-sent
        other = await http.post(url, json={**call, "id": 8}, headers=session)  # a new request
    assert RUNS == ["A", "A"]  # request 7 ran once, request 8 once
    assert _meta_of(first)["replayed"] is False and _meta_of(again)["replayed"] is True
    assert _meta_of(first)["execution_id"] == _meta_of(again)["execution_id"]
    assert rpc_result(first)["content"] == rpc_result(again)["content"]
    assert _meta_of(other)["execution_id"] != _meta_of(first)["execution_id"]


@pytest.mark.parametrize("where", ["header", "meta"])
async def test_the_client_s_key_makes_a_modern_retry_recognisable(
    tmp_path: Path, where: str
) -> None:
    async with journaled(tmp_path, tokens=tokens_file(tmp_path / "t.json")) as (_, url):
        async with httpx.AsyncClient() as http:

            async def send(
                token: str, order: str, request_id: int, key: str = "k-1"
            ) -> httpx.Response:
                params: dict[str, Any] = {"name": "charge", "arguments": {"order": order}}
                headers = {}
                if where == "header":
                    headers["idempotency-key"] = key
                else:
                    params["_meta"] = {"fastgate/idempotency-key": key}
                return await post_modern(
                    http,
                    url,
                    "tools/call",
                    params,
                    token=token,
                    request_id=request_id,
                    headers=headers,
                )

            first = await send("alice-secret-token", "A", 1)
            retry = await send("alice-secret-token", "A", 2)  # a new JSON-RPC id, the same key
            bobs = await send("bob-secret-token", "A", 3)  # another principal's key: its own
            reused = await send("alice-secret-token", "B", 4)  # the key with other arguments
            unkeyed = await post_modern(
                http,
                url,
                "tools/call",
                {"name": "charge", "arguments": {"order": "C"}},
                token="alice-secret-token",
                request_id=5,
            )
            again = await post_modern(
                http,
                url,
                "tools/call",
                {"name": "charge", "arguments": {"order": "C"}},
                token="alice-secret-token",
                request_id=6,
            )
    assert RUNS == ["A", "A", "C", "C"]  # alice's A once, bob's A once; unkeyed C twice
    assert _meta_of(retry)["replayed"] is True
    assert _meta_of(retry)["execution_id"] == _meta_of(first)["execution_id"]
    assert _meta_of(bobs)["replayed"] is False
    assert _meta_of(reused)["code"] == "INVALID_ARGS"
    assert _meta_of(reused)["reason"] == "idempotency_key_reused"
    assert rpc_result(reused)["isError"] is True
    assert _meta_of(unkeyed)["replayed"] is False and _meta_of(again)["replayed"] is False


async def test_a_key_is_the_principal_s_across_client_sessions(tmp_path: Path) -> None:
    """A client that comes back under another client session (a restart, a new connection) and
    re-sends its call with the same key gets the recorded result; the key stays its
    principal's."""
    async with journaled(tmp_path, tokens=tokens_file(tmp_path / "t.json")) as (_, url):
        async with httpx.AsyncClient() as http:

            async def send(
                token: str, order: str, request_id: int, session: str | None, by_meta: bool
            ) -> httpx.Response:
                params: dict[str, Any] = {"name": "charge", "arguments": {"order": order}}
                headers = {"idempotency-key": "k-9"}
                if session is not None and by_meta:
                    params["_meta"] = {"fastgate/session": session}
                elif session is not None:
                    headers["mcp-client-session"] = session
                return await post_modern(
                    http, url, "tools/call", params, token=token, request_id=request_id,
                    headers=headers,
                )  # fmt: skip

            alice = "alice-secret-token"
            first = await send(alice, "A", 1, "laptop", by_meta=False)
            repeats = [
                await send(alice, "A", 2, "laptop-restarted", by_meta=False),
                await send(alice, "A", 3, "phone", by_meta=True),
                await send(alice, "A", 4, None, by_meta=False),
            ]
            reused = await send(alice, "B", 5, "tablet", by_meta=False)
            bobs = await send("bob-secret-token", "A", 6, "laptop", by_meta=False)
    assert RUNS == ["A", "A"]  # alice's once, bob's once
    for repeat in repeats:
        assert _meta_of(repeat)["replayed"] is True
        assert _meta_of(repeat)["execution_id"] == _meta_of(first)["execution_id"]
    assert _meta_of(reused)["reason"] == "idempotency_key_reused"
    assert _meta_of(bobs)["replayed"] is False


async def test_an_unusable_key_is_refused_before_anything_runs(tmp_path: Path) -> None:
    async with journaled(tmp_path) as (_, url), httpx.AsyncClient() as http:
        for key in ("x" * 300, "tab\there"):
            params = {
                "name": "charge",
                "arguments": {"order": "A"},
                "_meta": {"fastgate/idempotency-key": key},
            }
            answer = rpc_result(await post_modern(http, url, "tools/call", params))
            assert answer["isError"] is True
            assert answer["_meta"]["fastgate"]["reason"] == "invalid_idempotency_key"
    assert RUNS == []


async def test_an_approval_retry_is_the_same_call_for_the_journal(tmp_path: Path) -> None:
    """2026 era: the question stops the call before it runs; the retry carrying the answer
    runs it under the client's key; that retry re-sent gets the recorded result."""
    RUNS.clear()
    store = await SqliteToolUseStore.open(tmp_path / "journal.db")
    served = executor(registry(charge), store=store)  # DEFAULT mode: charge asks
    gateway = Gateway(served, rate_limit=None)
    key = {"idempotency-key": "order-42"}
    arguments = {"order": "42"}
    try:
        async with serving(gateway) as url, httpx.AsyncClient() as http:
            asked = rpc_result(
                await post_modern(
                    http, url, "tools/call", {"name": "charge", "arguments": arguments}, headers=key
                )
            )
            assert asked["resultType"] == "input_required" and RUNS == []
            retry = {
                "name": "charge",
                "arguments": arguments,
                "inputResponses": {
                    "fastgate/approval": {"action": "accept", "content": {"decision": "once"}}
                },
                "requestState": asked["requestState"],
            }
            done = rpc_result(
                await post_modern(http, url, "tools/call", retry, headers=key, request_id=2)
            )
            resent = rpc_result(
                await post_modern(http, url, "tools/call", retry, headers=key, request_id=3)
            )
            stolen = rpc_result(  # the state under another key: one approval, one call
                await post_modern(
                    http,
                    url,
                    "tools/call",
                    retry,
                    headers={"idempotency-key": "other"},
                    request_id=4,
                )
            )
    finally:
        served.dispose()
        await store.close()
    assert done["isError"] is False and RUNS == ["42"]
    assert resent["_meta"]["fastgate"]["replayed"] is True
    assert resent["_meta"]["fastgate"]["execution_id"] == done["_meta"]["fastgate"]["execution_id"]
    assert (
        stolen["isError"] is True
        and stolen["_meta"]["fastgate"]["reason"] == "invalid_request_state"
    )
    assert RUNS == ["42"]


async def test_the_sdk_client_in_the_older_era_is_journaled_per_request(tmp_path: Path) -> None:
    async with journaled(tmp_path) as (gateway, url):
        async with client(url, "legacy") as mcp:
            for order in ("A", "B"):
                result = await mcp.call_tool("charge", {"order": order})
                assert not result.is_error, text_of(result)
        store = gateway.executor.store
        assert store is not None
        (session,) = {r.meta.session_id or "" for r in gateway.executor.history()}
        calls = await store.load(session)
    assert [c.tool_name for c in calls] == ["charge", "charge"]
    assert all(c.status == "completed" and c.result is not None for c in calls)


async def test_sigkill_mid_call_then_restart_is_ambiguous_never_a_second_run(
    tmp_path: Path,
) -> None:
    """The gateway dies (SIGKILL, its whole process group) while a keyed call runs; a new
    gateway on the same store answers the re-sent call ``ambiguous_outcome`` and runs nothing."""
    from tests.processes_kit import kill_all
    from tests.serve.kit import gateway_process

    runs = tmp_path / "runs.txt"
    started = tmp_path / "started.fifo"
    os.mkfifo(started)
    marker = "31.25"  # a sleep only this test starts
    command = {"command": f"echo run >> {runs} && echo started > {started} && sleep {marker}"}
    args = (
        "--no-discover", "--builtin", "bash", "--mode", "yolo",
        "--store", f"sqlite:///{tmp_path / 'journal.db'}", "--lease-ttl", "1",
    )  # fmt: skip
    key = {"idempotency-key": "deploy-7"}
    params = {"name": "bash", "arguments": command}
    with gateway_process(*args, cwd=tmp_path) as first:
        async with httpx.AsyncClient(timeout=60) as http:
            call = asyncio.create_task(
                post_modern(http, first.url, "tools/call", params, headers=key)
            )
            try:
                async with asyncio.timeout(30):
                    # The command says it started through a FIFO: read in a thread (it blocks).
                    assert await asyncio.to_thread(started.read_text) == "started\n"
            finally:
                _release(started)
            first.kill()
            with contextlib.suppress(httpx.HTTPError):
                await call
    started.unlink()  # a second run (there must be none) would find a plain file, not block
    try:
        with gateway_process(*args, cwd=tmp_path) as second:
            async with httpx.AsyncClient(timeout=60) as http:
                answer = rpc_result(
                    await post_modern(
                        http, second.url, "tools/call", params, headers=key, request_id=2
                    )
                )
                unkeyed = rpc_result(
                    await post_modern(
                        http,
                        second.url,
                        "tools/call",
                        {"name": "bash", "arguments": {"command": "true"}},
                        request_id=3,
                    )
                )
    finally:
        import psutil

        kill_all(
            [
                p.pid
                for p in psutil.process_iter(["cmdline"])
                if marker in " ".join(p.info["cmdline"] or [])
            ]
        )
    assert answer["isError"] is True, answer
    assert answer["_meta"]["fastgate"]["code"] == "TOOL_ERROR"
    assert answer["_meta"]["fastgate"]["reason"] == "ambiguous_outcome"
    assert runs.read_text() == "run\n"  # never a second run
    assert unkeyed["isError"] is False  # the gateway serves on


def _release(fifo: Path) -> None:
    """Whatever happened, the reading thread is not left blocked on the FIFO: a writer opened
    and closed gives it an end of file (a reader gone: nothing to release)."""
    with contextlib.suppress(OSError):
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
