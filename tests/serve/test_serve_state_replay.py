"""One sealed approval state (2026 era) runs its call at most once: the retry counts only in
the session and under the idempotency key of the call that asked, a re-sent retry is answered
by the journal, and replicas sharing the journal run a state's call once even without a key."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import fastgate
from fastgate import SqliteToolUseStore, ToolKind
from fastgate.serve import Gateway
from tests.serve.kit import executor, post_modern, registry, rpc_result, serving, tokens_file

RUNS: list[str] = []
ALICE = "alice-secret-token"
ANSWER = {"fastgate/approval": {"action": "accept", "content": {"decision": "once"}}}


@fastgate.tool(kind=ToolKind.EXECUTE)
async def release(version: str) -> str:
    """Release a version (asks in the default mode; records each run).

    Args:
        version: which.
    """
    RUNS.append(version)
    return f"released {version}"


@contextlib.asynccontextmanager
async def gateways(
    tmp_path: Path, count: int = 1, *, journal: bool = True
) -> AsyncIterator[list[str]]:
    """``count`` gateways sharing a state key and (``journal``) one SQLite journal."""
    RUNS.clear()
    stores = [
        await SqliteToolUseStore.open(tmp_path / "journal.db")
        for _ in range(count if journal else 0)
    ]
    served = [
        Gateway(
            executor(registry(release), store=stores[n] if journal else None),
            tokens=tokens_file(tmp_path / "t.json"),
            state_keys=[b"s" * 32],
            rate_limit=None,
        )
        for n in range(count)
    ]
    try:
        async with contextlib.AsyncExitStack() as stack:
            yield [await stack.enter_async_context(serving(g)) for g in served]
    finally:
        for gateway in served:
            gateway.executor.dispose()
        for store in stores:
            await store.close()


def _headers(session: str | None, key: str | None, where: str) -> dict[str, str]:
    headers = {}
    if where == "header":
        if session is not None:
            headers["mcp-client-session"] = session
        if key is not None:
            headers["idempotency-key"] = key
    return headers


def _meta(session: str | None, key: str | None, where: str) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    if where == "meta":
        if session is not None:
            meta["fastgate/session"] = session
        if key is not None:
            meta["fastgate/idempotency-key"] = key
    return meta


async def _call(
    http: httpx.AsyncClient,
    url: str,
    session: str | None,
    key: str | None,
    where: str,
    state: str | None = None,
    request_id: int = 1,
) -> dict[str, Any]:
    params: dict[str, Any] = {"name": "release", "arguments": {"version": "1.0"}}
    if state is not None:
        params["requestState"] = state
        params["inputResponses"] = ANSWER
    meta = _meta(session, key, where)
    if meta:
        params["_meta"] = meta
    answer = await post_modern(
        http,
        url,
        "tools/call",
        params,
        token=ALICE,
        request_id=request_id,
        headers=_headers(session, key, where),
    )
    return rpc_result(answer)


def _refused(result: dict[str, Any]) -> bool:
    meta = result["_meta"]["fastgate"]
    return (
        result["isError"] is True
        and meta["code"] == "PERMISSION_DENIED"
        and meta["reason"] == "invalid_request_state"
    )


@pytest.mark.parametrize("where", ["header", "meta"])
async def test_a_state_runs_once_whatever_the_session_or_key_of_its_retries(
    tmp_path: Path, where: str
) -> None:
    async with gateways(tmp_path) as (url,), httpx.AsyncClient(timeout=30) as http:
        asked = await _call(http, url, "s1", "K", where)
        assert asked["resultType"] == "input_required" and RUNS == []
        state = asked["requestState"]
        others = [  # the same state, in another session or under another key: refused
            await _call(http, url, "s2", "K", where, state, 2),
            await _call(http, url, None, "K", where, state, 3),
            await _call(http, url, "s1", "L", where, state, 4),
            await _call(http, url, "s1", None, where, state, 5),
            await _call(http, url, "S1", "K", where, state, 6),
        ]
        assert all(_refused(r) for r in others), others
        assert RUNS == []
        done = await _call(http, url, "s1", "K", where, state, 7)
        again = await _call(http, url, "s1", "K", where, state, 8)  # re-sent: the journal's
        later = [  # after it ran, every other spelling still refused
            await _call(http, url, "s2", "K", where, state, 9),
            await _call(http, url, "s3", "K", where, state, 10),
            await _call(http, url, None, "K", where, state, 11),
            await _call(http, url, "s1", "K2", where, state, 12),
        ]
    assert done["isError"] is False and RUNS == ["1.0"]
    assert again["_meta"]["fastgate"]["replayed"] is True
    assert again["_meta"]["fastgate"]["execution_id"] == done["_meta"]["fastgate"]["execution_id"]
    assert all(_refused(r) for r in later), later


async def test_a_state_asked_without_a_key_runs_once_across_replicas(tmp_path: Path) -> None:
    """Two replicas sharing the state key and the journal: the state's retry sent to both (and
    again to each) runs the call once; the same retry from another session is refused."""
    async with gateways(tmp_path, 2) as (one, two), httpx.AsyncClient(timeout=30) as http:
        asked = await _call(http, one, "s1", None, "header")
        state = asked["requestState"]
        first = await _call(http, one, "s1", None, "header", state, 2)
        there = await _call(http, two, "s1", None, "header", state, 3)
        elsewhere = [
            await _call(http, two, "s2", None, "header", state, 4),
            await _call(http, two, None, None, "header", state, 5),
            await _call(http, one, "s1", "K", "header", state, 6),
        ]
    assert first["isError"] is False and RUNS == ["1.0"]
    assert there["isError"] is False and there["_meta"]["fastgate"]["replayed"] is True
    assert there["_meta"]["fastgate"]["execution_id"] == first["_meta"]["fastgate"]["execution_id"]
    assert all(_refused(r) for r in elsewhere), elsewhere
    assert RUNS == ["1.0"]


@pytest.mark.parametrize("key", [None, "K"])
async def test_without_a_journal_a_state_is_taken_once_even_under_its_key(
    tmp_path: Path, key: str | None
) -> None:
    """No store keeps a journal to answer a repeat: the state's second use is refused, keyed
    or not, in its own session."""
    async with gateways(tmp_path, journal=False) as (url,), httpx.AsyncClient(timeout=30) as http:
        state = (await _call(http, url, "s1", key, "header"))["requestState"]
        first = await _call(http, url, "s1", key, "header", state, 2)
        second = await _call(http, url, "s1", key, "header", state, 3)
        third = await _call(http, url, "s2", key, "header", state, 4)
    assert first["isError"] is False
    assert _refused(second) and _refused(third)
    assert RUNS == ["1.0"]
