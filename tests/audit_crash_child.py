"""Child process for tests/test_audit_jsonl.py: records audit events until the parent kills it.

Usage: ``python -m tests.audit_crash_child LOG_PATH``. Event ``n`` has the execution id
``n`` (32 hex digits) and a long reason, so batches span several pages. After every 500 events
it flushes and prints ``{"synced": <count>}`` (flushed at once): the parent knows that many
events were on disk before it sends SIGKILL.
"""

from __future__ import annotations

import json
import sys
import time

from fastgate.model.decision import Decision, DecisionSource
from fastgate.permissions.audit import AuditEvent
from fastgate.permissions.audit_jsonl import JsonlAuditSink

REASON = "a reason long enough that one batch covers several pages " * 40


def event(n: int) -> AuditEvent:
    return AuditEvent(
        execution_id=f"{n:032x}",
        session_id="s1",
        tool_name="bash",
        decision=Decision.ALLOW,
        source=DecisionSource.RULE,
        reason=REASON,
        signature="sig",
        time=time.time(),
    )


def main(path: str) -> None:
    sink = JsonlAuditSink(path, batch_size=16, batch_interval=0.005)
    n = 0
    while True:
        for _ in range(500):
            sink.record(event(n))
            n += 1
        sink.flush()
        print(json.dumps({"synced": sink.synced}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
