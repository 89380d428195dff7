"""``JsonlAuditSink``: one JSON line per decision, batched fsync off the event loop, and a file
that is never left with a torn line, a SIGKILLed writer included."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fastgate import (
    ApprovalResponse,
    AuditSink,
    ExecutionContext,
    JsonlAuditSink,
    PermissionConfig,
    ToolKind,
)
from fastgate.permissions.audit_jsonl import AuditSinkClosed
from tests.audit_crash_child import event
from tests.pipeline_kit import assert_idle, executor, tool

ROOT = Path(__file__).resolve().parents[2]
FIELDS = {"execution_id", "session_id", "tool_name", "decision", "source", "reason", "signature"}


def lines(path: Path) -> list[dict[str, Any]]:
    text = path.read_bytes()
    assert text == b"" or text.endswith(b"\n"), "the file ends in a cut line"
    return [json.loads(line) for line in text.splitlines()]


def count_syncs(
    monkeypatch: pytest.MonkeyPatch, then: Callable[[], None] = lambda: None
) -> list[int]:
    """Thread ids of every fdatasync from now on (``then`` runs after each one)."""
    real = os.fdatasync
    threads: list[int] = []

    def fdatasync(fd: int) -> None:
        real(fd)
        threads.append(threading.get_ident())
        then()

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    return threads


def test_it_is_an_audit_sink_and_writes_one_line_per_event(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    with JsonlAuditSink(path) as sink:
        assert isinstance(sink, AuditSink)
        for n in range(3):
            sink.record(event(n))
    written = lines(path)
    assert [w["execution_id"] for w in written] == [f"{n:032x}" for n in range(3)]
    assert set(written[0]) == FIELDS | {"time"} and isinstance(written[0]["time"], float)
    assert (written[0]["decision"], written[0]["source"]) == ("allow", "rule")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sink.synced == 3


async def test_the_executors_decisions_reach_it(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    sink = JsonlAuditSink(path)
    ran: list[str] = []
    ex = executor(
        tool("look", lambda a, c: "seen"),
        tool("deploy", lambda a, c: ran.append("deploy"), kind=ToolKind.EXECUTE),
        tool("wipe", lambda a, c: ran.append("wipe"), kind=ToolKind.EXECUTE),
        permissions=PermissionConfig(deny=["wipe"]),
        audit=sink,
    )

    async def approve(request: Any) -> ApprovalResponse:
        return ApprovalResponse(True)

    ctx = ExecutionContext(session_id="s7", approver=approve)
    results = [
        await ex.execute("look", {"text": "a"}, ctx),
        await ex.execute("deploy", {"text": "b"}, ctx),
        await ex.execute("wipe", {"text": "c"}, ctx),
    ]
    await sink.aclose()
    assert ran == ["deploy"]
    written = lines(path)
    ids = [r.meta.execution_id for r in results]
    seen = [(w["execution_id"], w["tool_name"], w["decision"], w["source"]) for w in written]
    assert seen == [
        (ids[0], "look", "allow", "mode"),
        (ids[1], "deploy", "ask", "mode"),
        (ids[1], "deploy", "allow", "user"),
        (ids[2], "wipe", "deny", "rule"),
    ]
    assert {w["session_id"] for w in written} == {"s7"}
    assert_idle(ex)


async def test_recording_never_touches_the_disk_on_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    syncs = count_syncs(monkeypatch)
    real_write = os.write
    writers: list[int] = []

    def write(fd: int, data: Any) -> int:
        writers.append(threading.get_ident())
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    sink = JsonlAuditSink(tmp_path / "audit.jsonl", batch_size=100, batch_interval=30.0)
    for n in range(1000):
        sink.record(event(n))
    await sink.aflush()
    await sink.aclose()
    loop_thread = threading.get_ident()
    assert syncs and loop_thread not in syncs and loop_thread not in writers
    assert len(syncs) <= 1000 // 100 + 1  # batched: never one sync per event
    assert len(lines(tmp_path / "audit.jsonl")) == 1000


def test_a_lone_event_is_synced_within_the_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced = threading.Event()
    count_syncs(monkeypatch, synced.set)
    path = tmp_path / "audit.jsonl"
    with JsonlAuditSink(path, batch_size=1000, batch_interval=0.02) as sink:
        sink.record(event(0))
        assert synced.wait(10)  # no flush, no full batch: the interval wrote it
        assert len(lines(path)) == 1


def test_a_cut_last_line_is_removed_before_anything_is_appended(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    with JsonlAuditSink(path) as sink:
        sink.record(event(0))
        sink.record(event(1))
    whole = path.read_bytes()
    path.write_bytes(whole + whole.splitlines(keepends=True)[0][:37])  # a write cut short
    with JsonlAuditSink(path) as sink:
        sink.record(event(2))
    assert [w["execution_id"][-1] for w in lines(path)] == ["0", "1", "2"]

    path.write_bytes(b'{"execution_id": "only part of one')  # nothing complete at all
    JsonlAuditSink(path).close()
    assert path.read_bytes() == b""


def test_an_existing_file_keeps_its_mode_and_one_sink_holds_it(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_bytes(b"")
    path.chmod(0o640)
    with JsonlAuditSink(path):
        with pytest.raises(OSError, match="held by another JsonlAuditSink"):
            JsonlAuditSink(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    JsonlAuditSink(path).close()  # free again once closed


def test_a_failing_disk_stops_the_sink_loudly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fdatasync", full)
    sink = JsonlAuditSink(tmp_path / "audit.jsonl")
    sink.record(event(0))
    with pytest.raises(OSError, match="could not be written"):
        sink.flush()
    assert sink.error is not None and sink.error.errno == 28
    with pytest.raises(AuditSinkClosed, match="a write failed"):
        sink.record(event(1))
    sink.close()
    sink.close()  # idempotent


def test_a_closed_sink_refuses_events(tmp_path: Path) -> None:
    sink = JsonlAuditSink(tmp_path / "audit.jsonl")
    sink.close()
    with pytest.raises(AuditSinkClosed, match="is closed"):
        sink.record(event(0))
    sink.flush()  # nothing pending: returns


@pytest.mark.parametrize(
    "options",
    [{"batch_size": 0}, {"batch_interval": 0}, {"batch_interval": "1"}, {"max_pending": 1}],
)
def test_bad_options_are_refused(tmp_path: Path, options: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        JsonlAuditSink(tmp_path / "audit.jsonl", **options)
    assert not (tmp_path / "audit.jsonl").exists()


@pytest.mark.skipif(sys.platform == "win32", reason="needs SIGKILL")
def test_a_sigkilled_writer_leaves_whole_lines_and_loses_nothing_synced(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.audit_crash_child", str(path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        synced = 0
        for _ in range(4):  # kill after the 4th sync point, while the next batches are written
            report = child.stdout.readline()
            assert report, f"the child ended early ({child.wait()})"
            synced = json.loads(report)["synced"]
        child.send_signal(signal.SIGKILL)
        assert child.wait() == -signal.SIGKILL
    finally:
        child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()

    # Whatever the kill interrupted, the file is whole lines, in order, and possibly one cut
    # last line without its newline (a write the kernel stopped part way).
    raw = path.read_bytes()
    *complete, tail = raw.split(b"\n")
    numbers = [int(json.loads(line)["execution_id"], 16) for line in complete]
    assert numbers == list(range(len(numbers))) and len(numbers) >= synced
    assert tail == b"" or b'{"execution_id":"'.startswith(tail[:17])  # a cut line, if any

    # Opened again, the cut line (if any) is gone and appending goes on after whole lines.
    with JsonlAuditSink(path) as sink:
        sink.record(event(len(numbers)))
    again = [int(w["execution_id"], 16) for w in lines(path)]
    assert again == list(range(len(numbers) + 1))
