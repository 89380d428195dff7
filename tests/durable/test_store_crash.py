"""Crash safety with real processes: a child writing to the store is SIGKILLed, this process
recovers. Synchronisation is by the child's stdout lines and our writes to its stdin, never by
sleeping. Recovery reports calls without a result as interrupted and never re-runs them.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

import pytest

from fastgate.durable.projector import ToolResultProjector
from fastgate.durable.sqlite import SqliteToolUseStore, StoreError
from fastgate.durable.store import StoredCall

CHILD = Path(__file__).parents[1] / "store_crash_child.py"

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs SIGKILL")


class Child:
    """The child process and its event lines."""

    def __init__(self, mode: str, *args: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD), mode, *map(str, args)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def next_event(self) -> dict[str, Any]:
        stdout: IO[str] | None = self.proc.stdout
        assert stdout is not None
        line = stdout.readline()
        assert line, f"the child ended early (exit code {self.proc.wait()})"
        event: dict[str, Any] = json.loads(line)
        return event

    def expect(self, name: str) -> dict[str, Any]:
        event = self.next_event()
        assert event["event"] == name, event
        return event

    def tell(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        assert self.proc.wait() == -signal.SIGKILL
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()

    def finish(self) -> None:
        assert self.proc.wait() == 0
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


def recover(db: Path, session_id: str) -> list[StoredCall]:
    """A fresh store and projector in this process, as a restarted server would do."""

    async def main() -> list[StoredCall]:
        async with SqliteToolUseStore(db) as store:
            return await ToolResultProjector(store).recover(session_id)

    return asyncio.run(main())


def count(counter: Path) -> int:
    return len(counter.read_text()) if counter.exists() else 0


def wal(db: Path) -> Path:
    return db.with_name(db.name + "-wal")


@pytest.mark.parametrize("kill_at", ["before the side effect", "after the side effect"])
def test_a_killed_call_is_interrupted_and_never_rerun(tmp_path: Path, kill_at: str) -> None:
    db, counter = tmp_path / "calls.db", tmp_path / "effects"
    child = Child("effect", db, counter)
    first = child.expect("completed")
    assert first["ok"]
    child.expect("started")  # its tool-use record is committed: the executor awaited it
    if kill_at == "after the side effect":
        child.tell("go")
        child.expect("effect-done")
    child.kill()
    effects = count(counter)
    assert effects == (0 if kill_at == "before the side effect" else 1)

    for _ in range(2):  # recovering twice changes nothing and runs nothing
        calls = recover(db, "s1")
        summary = [(c.call_id, c.tool_name, c.status) for c in calls]
        assert summary == [("c1", "echo", "completed"), ("c2", "effect", "interrupted")]
        assert calls[0].execution_id == first["execution_id"]
        assert calls[0].result is not None and calls[0].result.content == "hello"
        assert calls[1].result is None and calls[1].args == {"text": "go"}
        assert count(counter) == effects


def test_no_acknowledged_record_is_lost_under_group_commit(tmp_path: Path) -> None:
    db = tmp_path / "calls.db"
    child = Child("flood", db)
    acked = [child.expect("acked") for _ in range(400)]
    child.kill()  # mid-flood: other transactions were in flight
    by_session: dict[str, dict[str, StoredCall]] = {}
    for event in acked:
        session = event["session_id"]
        if session not in by_session:
            by_session[session] = {c.execution_id: c for c in recover(db, session)}
        call = by_session[session].get(event["execution_id"])
        assert call is not None, f"acknowledged {event['execution_id']} was lost"
        assert call.status == "completed"


def _torn(db: Path, mode: str) -> None:
    child = Child(mode, db)
    child.expect("done")
    child.kill()
    assert wal(db).stat().st_size > 0


def test_a_torn_last_wal_frame_hides_only_the_last_transaction(tmp_path: Path) -> None:
    db = tmp_path / "calls.db"
    _torn(db, "sequential")
    size = wal(db).stat().st_size
    os.truncate(wal(db), size - 1000)  # the last frame was only partly written
    ids = [c.execution_id for c in recover(db, "s1")]
    assert ids == [f"e{i}" for i in range(19)]


def test_garbage_after_the_last_wal_frame_hides_nothing(tmp_path: Path) -> None:
    db = tmp_path / "calls.db"
    _torn(db, "sequential")
    with open(wal(db), "ab") as fh:
        fh.write(os.urandom(3000))  # a frame that was being appended when the power went
    assert [c.execution_id for c in recover(db, "s1")] == [f"e{i}" for i in range(20)]


def test_checkpointed_rows_survive_losing_the_whole_wal(tmp_path: Path) -> None:
    db = tmp_path / "calls.db"
    _torn(db, "checkpoint")
    wal(db).unlink()
    assert [c.execution_id for c in recover(db, "s1")] == [f"c{i}" for i in range(10)]


def test_a_truncated_database_file_is_an_error_never_a_silent_loss(tmp_path: Path) -> None:
    db = tmp_path / "calls.db"
    _torn(db, "checkpoint")
    wal(db).unlink()
    size = db.stat().st_size
    os.truncate(db, size // 2)
    try:
        ids = [c.execution_id for c in recover(db, "s1")]
    except StoreError as exc:
        assert str(db) in str(exc)
    else:
        assert ids == [f"c{i}" for i in range(10)]


def test_a_write_failure_fails_the_caller_and_loses_nothing_earlier(tmp_path: Path) -> None:
    db = tmp_path / "calls.db"
    child = Child("full", db)
    refused = child.expect("refused")
    child.expect("exit")
    child.finish()
    assert str(db) in refused["message"]
    assert "I/O error" in refused["message"] or "full" in refused["message"]
    ids = [c.execution_id for c in recover(db, "s1")]
    assert ids == refused["acked"]
    assert refused["execution_id"] not in ids
