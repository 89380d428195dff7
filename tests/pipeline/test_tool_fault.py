"""``ToolFault``: a body chooses its failure's code, words, details and retryability."""

from __future__ import annotations

from typing import Any

import pytest

from fastgate import ErrorCode, Hooks, PostToolUseFailureEvent, ToolFault
from tests.pipeline_kit import executor, tool


async def test_a_tool_fault_becomes_its_own_error() -> None:
    def body(args: Any, ctx: Any) -> Any:
        raise ToolFault(
            "the server is gone; try again",
            retryable=True,
            details={"reason": "server_unavailable"},
        )

    result = await executor(tool("remote", body)).execute("remote", {"text": "x"})
    assert not result.ok and result.error is not None
    assert result.error.code is ErrorCode.TOOL_ERROR
    assert result.error.message == result.content == "the server is gone; try again"
    assert result.error.retryable is True
    assert result.error.details == {"reason": "server_unavailable"}


async def test_a_tool_fault_can_be_a_timeout_and_failure_hooks_see_it() -> None:
    seen: list[Any] = []

    def on_failure(event: PostToolUseFailureEvent) -> None:
        seen.append(event.error)

    hooks = Hooks()
    hooks.add_post_tool_use_failure(on_failure)

    def body(args: Any, ctx: Any) -> Any:
        raise ToolFault("no progress for 5s", code=ErrorCode.TIMEOUT, details={"limit": "idle"})

    result = await executor(tool("remote", body), hooks=hooks).execute("remote", {"text": "x"})
    assert result.error is not None and result.error.code is ErrorCode.TIMEOUT
    assert result.error.retryable is False and result.error.details == {"limit": "idle"}
    assert [e.code for e in seen] == [ErrorCode.TIMEOUT]


async def test_a_failure_hook_is_given_the_failed_result() -> None:
    seen: list[PostToolUseFailureEvent] = []

    def on_failure(event: PostToolUseFailureEvent) -> str:
        seen.append(event)
        return "check the server"

    hooks = Hooks()
    hooks.add_post_tool_use_failure(on_failure)

    def body(args: Any, ctx: Any) -> Any:
        raise RuntimeError("boom")

    ex = executor(tool("t", body), hooks=hooks)
    final = await ex.execute("t", {"text": "x"})
    (event,) = seen
    failed = event.result
    assert failed is not None and not failed.ok and failed.error == event.error
    assert failed.content == final.content and failed.error == final.error
    assert failed.meta.execution_id == final.meta.execution_id
    # The hooks' context goes to the final result only; the history holds that one alone.
    assert final.meta.additional_context == ("check the server",)
    assert failed.meta.additional_context == ()
    assert [r.meta.execution_id for r in ex.history()] == [final.meta.execution_id]


async def test_an_ordinary_exception_is_still_a_tool_error_and_not_retryable() -> None:
    def body(args: Any, ctx: Any) -> Any:
        raise RuntimeError("boom")

    result = await executor(tool("t", body)).execute("t", {"text": "x"})
    assert result.error is not None and result.error.code is ErrorCode.TOOL_ERROR
    assert result.error.retryable is False and result.error.details == {"type": "RuntimeError"}


@pytest.mark.parametrize(
    "code",
    [
        ErrorCode.PERMISSION_DENIED,
        ErrorCode.USER_REJECTED,
        ErrorCode.INVALID_ARGS,
        ErrorCode.ABORTED_BEFORE_DISPATCH,
        ErrorCode.DISPOSED,
    ],
)
def test_a_tool_fault_cannot_claim_a_policy_code(code: ErrorCode) -> None:
    """Nor one that says nothing ran before the body did (which would free a keyed call's
    key): ``RESOURCE_EXHAUSTED`` is the one such code a body may give, for a remote refusal."""
    with pytest.raises(ValueError, match="TOOL_ERROR, TIMEOUT or RESOURCE_EXHAUSTED"):
        ToolFault("sneaky", code=code)


async def test_a_tool_fault_can_say_the_remote_side_is_busy_and_when_to_try_again() -> None:
    """``RESOURCE_EXHAUSTED`` with ``retry_after`` (a remote service rate limiting): the result
    and the failure hooks carry the code, retryability and wait as raised."""
    seen: list[Any] = []
    hooks = Hooks()
    hooks.add_post_tool_use_failure(lambda event: seen.append(event.error))

    def busy(args: Any, ctx: Any) -> None:
        raise ToolFault(
            "the service is busy",
            code=ErrorCode.RESOURCE_EXHAUSTED,
            retryable=True,
            retry_after=2.5,
            details={"reason": "quota"},
        )

    result = await executor(tool("busy", busy), hooks=hooks).execute("busy", {"text": "x"})
    error = result.error
    assert error is not None and error.code is ErrorCode.RESOURCE_EXHAUSTED
    assert (error.retryable, error.retry_after, error.message) == (True, 2.5, "the service is busy")
    assert error.details["reason"] == "quota"
    assert [(e.code, e.retry_after) for e in seen] == [(ErrorCode.RESOURCE_EXHAUSTED, 2.5)]


def test_a_wait_is_seconds_or_words() -> None:
    fault = ToolFault("busy", code=ErrorCode.RESOURCE_EXHAUSTED, retryable=True, retry_after=3)
    assert fault.code is ErrorCode.RESOURCE_EXHAUSTED and fault.retry_after == 3.0
    assert ToolFault("x", retry_after="retry next turn").retry_after == "retry next turn"
    with pytest.raises(TypeError):
        ToolFault("x", retry_after=True)
    with pytest.raises(TypeError):
        ToolFault("x", retry_after=[1])  # type: ignore[arg-type]
