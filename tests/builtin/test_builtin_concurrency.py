"""No lost update: 32 concurrent edits from 8 sessions on 4 files (SPEC §16).

Each editor reads its file and inserts its own marker; a read that went stale before its edit
is refused (``stale_file``) and the editor reads again. Afterwards every marker whose edit
succeeded is in its file: the file lock serializes the writers and the stale check refuses an
edit of a version the session did not see.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.builtin_kit import builtin_executor, call, failure_code

SESSIONS, FILES = 8, 4


async def test_thirty_two_concurrent_editors_lose_nothing(tmp_path: Path) -> None:
    for f in range(FILES):
        (tmp_path / f"f{f}.txt").write_text("".join(f"slot-{s}\n" for s in range(SESSIONS)))
    ex = builtin_executor(tmp_path)
    outcomes: dict[tuple[int, int], str] = {}
    stale_retries = 0

    async def editor(session: int, f: int) -> None:
        nonlocal stale_retries
        name, sid = f"f{f}.txt", f"session-{session}"
        marker = f"slot-{session} marker-{session}-{f}"
        for _ in range(200):
            read = await call(ex, "read", {"file_path": name}, session=sid)
            assert read.ok, read.content
            result = await call(
                ex,
                "edit",
                {"file_path": name, "old_string": f"slot-{session}\n", "new_string": marker + "\n"},
                session=sid,
            )
            if result.ok:
                outcomes[session, f] = "ok"
                return
            assert failure_code(result) == "stale_file", result.content  # a clean failure
            stale_retries += 1
        outcomes[session, f] = "gave up"

    await asyncio.gather(*(editor(s, f) for s in range(SESSIONS) for f in range(FILES)))
    assert len(outcomes) == SESSIONS * FILES
    succeeded = [key for key, outcome in outcomes.items() if outcome == "ok"]
    assert len(succeeded) == SESSIONS * FILES  # all of them, after re-reading when stale
    for f in range(FILES):
        lines = (tmp_path / f"f{f}.txt").read_text().split("\n")
        for session in range(SESSIONS):
            assert lines.count(f"slot-{session} marker-{session}-{f}") == 1, (f, session)
    assert len(ex.locks) == 0
