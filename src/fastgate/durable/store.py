"""Durable tool-use records (SPEC §12): the ``ToolUseStore`` protocol and its records.

A tool-use record is written before the side effect; the result record after it. After a crash,
a tool-use without a result is reported as interrupted (outcome unknown) and never re-run.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, runtime_checkable

import msgspec

from fastgate.model.results import DurableResult


class ToolUseRecord(msgspec.Struct, frozen=True):
    execution_id: str
    call_id: str | None
    session_id: str | None
    turn_id: str | None
    epoch: int
    seq: int
    tool_name: str
    args: Any


class StoredCall(msgspec.Struct, frozen=True):
    """One recovered call: ``result`` is the durable part (content, error, meta) or None."""

    call_id: str | None
    execution_id: str
    tool_name: str
    args: Any
    status: Literal["completed", "interrupted"]
    result: DurableResult | None
    turn_id: str | None
    epoch: int
    seq: int


@runtime_checkable
class ToolUseStore(Protocol):
    async def record_tool_use(self, record: ToolUseRecord) -> None: ...

    async def record_result(self, execution_id: str, result: DurableResult) -> None: ...

    async def load(self, session_id: str) -> list[StoredCall]: ...

    async def close(self) -> None: ...
