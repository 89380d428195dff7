"""The journal across processes (SPEC §24), on SQLite and on PostgreSQL: a call running in another
process is waited for; an owner SIGKILLed mid-call leaves its key interrupted (a retry-safe
tool runs again, any other is ambiguous until resolved); and under load from three processes
each key's body runs exactly once. Children are steered through their stdin and stdout
(tests/journal_child.py), never by sleeping, and are checked gone at the end.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import IO, Any

import pytest

from fastgate import ExecutionContext, ToolResult, schema
from fastgate.cli.bench.redis_server import pid_alive
from fastgate.model.results import ErrorCode, ResultMeta
from tests.durable.conftest import Backend, child_env
from tests.pipeline_kit import executor, tool

CHILD = Path(__file__).parents[1] / "journal_child.py"
ARGS = schema.Object({"n": schema.Integer()}, required=("n",))
KEYED = ExecutionContext(session_id="s", idempotency_key="k")

pytestmark = [
    pytest.mark.skipif(sys.platform == "win32", reason="needs SIGKILL"),
    pytest.mark.timeout(300),
]


class Child:
    """A journal_child.py process and its event lines."""

    def __init__(self, backend: Backend, mode: str, lease_ttl: float, workdir: Path, *extra: str):
        argv = [mode, *backend.argv(), str(lease_ttl), str(workdir), *extra]
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD), *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=child_env(),
        )

    async def expect(self, name: str) -> dict[str, Any]:
        stdout: IO[str] | None = self.proc.stdout
        assert stdout is not None
        line = await asyncio.to_thread(stdout.readline)
        assert line, f"the child ended early (exit code {self.proc.wait()})"
        event: dict[str, Any] = json.loads(line)
        assert event["event"] == name, event
        return event

    def tell(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        assert self.proc.wait() == -signal.SIGKILL
        self.close()

    def finish(self) -> None:
        assert self.proc.wait() == 0
        self.close()

    def close(self) -> None:
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()
        if self.proc.returncode is None:
            self.proc.kill()
            self.proc.wait()
        assert not pid_alive(self.proc.pid), f"child {self.proc.pid} outlived its test"


def markers(workdir: Path, name: str) -> list[Path]:
    return sorted(workdir.glob(f"{name}.*"))


def effect(ran: list[int], **options: Any) -> Any:
    async def body(args: Any, ctx: Any) -> str:
        ran.append(args["n"])
        return "done here"

    return tool("effect", body, ARGS, **options)


async def test_a_call_running_in_another_process_is_waited_for(
    backend: Backend, tmp_path: Path
) -> None:
    child = Child(backend, "hold", 10.0, tmp_path, "0")
    try:
        started = await child.expect("started")
        ran: list[int] = []
        async with backend.open() as store:
            impatient = executor(effect(ran, timeout=0.5), store=store)
            busy = await impatient.execute("effect", {"n": 1}, KEYED)
            patient = executor(effect(ran), store=store)
            repeat = asyncio.create_task(patient.execute("effect", {"n": 1}, KEYED))
            child.tell()
            finished = await child.expect("result")
            waited = await repeat
        child.finish()
    finally:
        child.close()
    assert busy.error is not None and busy.error.code is ErrorCode.RESOURCE_EXHAUSTED
    assert busy.error.details["reason"] == "in_progress" and busy.error.retryable
    assert busy.error.details["execution_id"] == started["execution_id"]
    assert finished["ok"] and not finished["replayed"]
    assert waited.ok and waited.meta.replayed and waited.content == finished["content"]
    assert waited.meta.execution_id == started["execution_id"] == finished["execution_id"]
    assert ran == [] and len(markers(tmp_path, "effect")) == 1


@pytest.mark.parametrize("retry_safe", [False, True], ids=["plain", "retry-safe"])
async def test_an_owner_killed_mid_call_leaves_the_key_interrupted(
    backend: Backend, tmp_path: Path, retry_safe: bool
) -> None:
    child = Child(backend, "hold", 1.0, tmp_path, "1" if retry_safe else "0")
    try:
        started = await child.expect("started")
        child.kill()  # after its claim, before its side effect: the outcome is unknown
    finally:
        child.close()
    interrupted = started["execution_id"]
    ran: list[int] = []
    async with backend.open() as store:
        ex = executor(effect(ran, retry_safe=retry_safe), store=store)
        repeat = await ex.execute("effect", {"n": 1}, KEYED)  # waits out the dead owner's lease
        again = await ex.execute("effect", {"n": 1}, KEYED)
        if not retry_safe:
            await store.resolve(interrupted, _reconciled(interrupted))
        resolved = await ex.execute("effect", {"n": 1}, KEYED)
        calls = await store.load("s")
    assert markers(tmp_path, "effect") == []
    if retry_safe:
        assert repeat.ok and not repeat.meta.replayed and repeat.content == "done here"
        assert repeat.meta.execution_id != interrupted
        assert again.meta.replayed and resolved.meta.replayed and ran == [1]
        assert [(c.execution_id, c.status) for c in calls] == [
            (interrupted, "interrupted"),
            (repeat.meta.execution_id, "completed"),
        ]
        return
    for refused in (repeat, again):
        assert refused.error is not None and refused.error.code is ErrorCode.TOOL_ERROR
        assert refused.error.details["reason"] == "ambiguous_outcome"
        assert refused.error.details["execution_id"] == interrupted
    assert resolved.ok and resolved.meta.replayed and resolved.content == "reconciled"
    assert resolved.meta.execution_id == interrupted
    assert ran == [] and [(c.execution_id, c.status) for c in calls] == [(interrupted, "completed")]


@pytest.mark.slow
async def test_each_key_runs_exactly_once_under_load_from_three_processes(
    backend: Backend, tmp_path: Path
) -> None:
    calls, keys = 50, 20
    async with backend.open():  # the journal exists before the children race for it
        pass
    children = [Child(backend, "load", 10.0, tmp_path, str(calls), str(keys)) for _ in range(3)]
    try:
        for child in children:
            await child.expect("ready")
        for child in children:
            child.tell()
        reports = [await child.expect("results") for child in children]
        for child in children:
            child.finish()
    finally:
        for child in children:
            child.close()
    results = [r for report in reports for r in report["results"]]
    assert len(results) == 3 * calls
    assert all(r["ok"] for r in results), [r for r in results if not r["ok"]][:3]
    runs = Counter(path.name.split(".")[0] for path in markers(tmp_path, "k*"))
    assert runs == {f"k{n}": 1 for n in range(keys)}  # each key's body ran exactly once
    by_key: dict[str, set[str]] = {}
    for r in results:
        by_key.setdefault(r["key"], set()).add(r["content"])
    assert all(len(answers) == 1 for answers in by_key.values())  # one answer per key
    assert sum(not r["replayed"] for r in results) == keys


def _reconciled(execution_id: str) -> ToolResult:
    meta = ResultMeta(execution_id, None, "effect", "s", 0.0, 0.0, 0.0)
    return ToolResult(True, "reconciled", None, meta)
