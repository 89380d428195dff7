"""Every ErrorCode through ``execute()``, with messages a model can act on (SPEC §10, §18)."""

from __future__ import annotations

import ast
import asyncio
import math
from pathlib import Path
from typing import Any

import pytest

from fastgate import (
    ApprovalResponse,
    CancelToken,
    ConcurrencyScheduler,
    ErrorCode,
    ExecutionContext,
    Failure,
    Hooks,
    Output,
    PermissionConfig,
    PostToolUseResult,
    SchedulerLimits,
    ToolKind,
    schema,
)
from tests.pipeline_kit import NOTHING, PATH, assert_idle, echo, executor, tool


def expect(result: Any, code: ErrorCode) -> Any:
    assert not result.ok, result
    assert result.error.code is code, result.error
    assert result.error.message and isinstance(result.content, (str, tuple))
    return result.error


async def test_success_result_is_frozen_and_complete() -> None:
    ex = executor(echo())
    result = await ex.execute("echo", {"text": "hi"}, call_id="c1")
    assert result.ok and result.content == "hi" and result.value == "hi" and result.error is None
    meta = result.meta
    assert meta.tool_name == "echo" and meta.call_id == "c1" and meta.session_id == "s1"
    assert meta.attempts == 1 and not meta.aborted_before_launch
    assert meta.completed_at >= meta.started_at and meta.duration_ms >= 0
    with pytest.raises(AttributeError):
        result.ok = False  # type: ignore[misc]
    assert ex.history() == [result]
    assert_idle(ex)


async def test_unknown_tool_suggests_close_names() -> None:
    ex = executor(echo())
    error = expect(await ex.execute("ecko", {"text": "x"}), ErrorCode.UNKNOWN_TOOL)
    assert "echo" in error.message and error.details["suggestions"] == ["echo"]


@pytest.mark.parametrize("length", [150, 10_000, 1_000_000])
@pytest.mark.parametrize("start", ["echo", "ecko", "x"])
async def test_a_long_unknown_name_is_not_compared_and_is_quoted_cut(
    monkeypatch: pytest.MonkeyPatch, start: str, length: int
) -> None:
    # difflib's time grows with the square of the name: a name past what could come close to a
    # tool's (at most 64 characters) is not compared, and only its head is quoted back.
    import difflib

    compared: list[int] = []
    close_matches = difflib.get_close_matches

    def counted(word: str, *args: Any, **kwargs: Any) -> list[str]:
        compared.append(len(word))
        return close_matches(word, *args, **kwargs)

    monkeypatch.setattr(difflib, "get_close_matches", counted)
    name = (start + "o" * length)[:length]
    error = expect(await executor(echo()).execute(name, {"text": "x"}), ErrorCode.UNKNOWN_TOOL)
    assert compared == [] and error.details["suggestions"] == []
    assert len(error.message) < 400 and f"({length} characters)" in error.message
    expect(await executor(echo()).execute("ecko", {"text": "x"}), ErrorCode.UNKNOWN_TOOL)
    assert compared == [4]  # a name that may come close still is


@pytest.mark.parametrize("args", [None, [1, 2], "text", 3, 2.5, True])
async def test_arguments_that_are_not_an_object(args: Any) -> None:
    error = expect(await executor(echo()).execute("echo", args), ErrorCode.INVALID_ARGS)
    assert "JSON object" in error.message


async def test_every_schema_issue_is_reported_with_its_field() -> None:
    definition = tool(
        "pair",
        lambda a, c: "ok",
        schema.Object({"a": schema.String(), "b": schema.Integer()}, required=("a", "b")),
    )
    error = expect(
        await executor(definition).execute("pair", {"a": 1, "c": True}), ErrorCode.INVALID_ARGS
    )
    paths = sorted(tuple(issue["path"]) for issue in error.details["issues"])
    assert len(paths) >= 3  # a wrong type, b missing, c not allowed
    assert "a" in error.message and "b" in error.message


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
async def test_non_finite_numbers_are_invalid(value: float) -> None:
    definition = tool(
        "num", lambda a, c: "ok", schema.Object({"x": schema.Number()}, required=("x",))
    )
    expect(await executor(definition).execute("num", {"x": value}), ErrorCode.INVALID_ARGS)


async def test_non_json_arguments_are_invalid_not_a_crash() -> None:
    expect(await executor(echo()).execute("echo", {"text": {1, 2}}), ErrorCode.INVALID_ARGS)
    expect(await executor(echo()).execute("echo", {1: "x"}), ErrorCode.INVALID_ARGS)


async def test_deeply_nested_arguments_do_not_overflow() -> None:
    deep: Any = "leaf"
    for _ in range(10_000):
        deep = [deep]
    definition = tool("any", lambda a, c: "ok", schema.Object({"v": schema.Array(schema.Null())}))
    result = await executor(definition).execute("any", {"v": deep})
    expect(result, ErrorCode.INVALID_ARGS)


async def test_huge_string_argument_is_handled() -> None:
    result = await executor(echo(), max_content_chars=1000).execute(
        "echo", {"text": "x" * 5_000_000}
    )
    assert result.ok and len(result.content) <= 1000 and "characters cut" in result.content


async def test_callers_arguments_are_never_mutated_and_tool_cannot_mutate() -> None:
    seen: list[str] = []

    def body(args: Any, ctx: Any) -> str:
        try:
            args["text"] = "changed"
        except TypeError:
            seen.append("refused")
        return "ok"

    args = {"text": "original", "extra_list": None}
    args.pop("extra_list")
    result = await executor(tool("mut", body)).execute("mut", args)
    assert result.ok and seen == ["refused"] and args == {"text": "original"}


async def test_worktree_violation_names_the_argument(tmp_path: Path) -> None:
    definition = tool("read", lambda a, c: "ok", PATH)
    error = expect(
        await executor(definition, workspace=tmp_path).execute(
            "read", {"file_path": "/etc/passwd"}
        ),
        ErrorCode.WORKTREE_VIOLATION,
    )
    assert "file_path" in error.message


async def test_permission_denied_by_rule_no_approver_and_guard(tmp_path: Path) -> None:
    cmd = tool(
        "shell",
        lambda a, c: "ran",
        schema.Object({"command": schema.String()}, required=("command",)),
        kind=ToolKind.EXECUTE,
    )
    ex = executor(cmd, permissions=PermissionConfig(deny=("shell(rm:*)",)), workspace=tmp_path)
    error = expect(await ex.execute("shell", {"command": "rm -rf /"}), ErrorCode.PERMISSION_DENIED)
    assert "rm" in error.message
    error = expect(await ex.execute("shell", {"command": "ls"}), ErrorCode.PERMISSION_DENIED)
    assert error.details["reason"] == "no_approver"
    ex2 = executor(echo(), guards=[lambda view: "owner says no"])
    error = expect(await ex2.execute("echo", {"text": "x"}), ErrorCode.PERMISSION_DENIED)
    assert "owner says no" in error.message


async def test_an_async_guard_decides_as_a_sync_one() -> None:
    async def no_secrets(view: Any) -> str | None:
        await asyncio.sleep(0)  # it may look something up
        return "no secrets here" if "secret" in view.args["text"] else None

    ex = executor(echo(), guards=[no_secrets])
    assert (await ex.execute("echo", {"text": "hello"})).ok
    error = expect(await ex.execute("echo", {"text": "secret"}), ErrorCode.PERMISSION_DENIED)
    assert "no secrets here" in error.message and error.details["source"] == "guard"
    assert_idle(ex)


async def test_user_rejection_carries_the_feedback() -> None:
    async def reject(request: Any) -> ApprovalResponse:
        return ApprovalResponse(False, feedback="use the staging database instead")

    definition = tool("deploy", lambda a, c: "deployed", NOTHING, kind=ToolKind.EXECUTE)
    result = await executor(definition).execute("deploy", {}, ExecutionContext(approver=reject))
    expect(result, ErrorCode.USER_REJECTED)
    assert result.content == "use the staging database instead"


async def test_resource_exhausted_when_the_queue_is_full() -> None:
    gate = asyncio.Event()

    async def hold(args: Any, ctx: Any) -> str:
        await gate.wait()
        return "done"

    limits = SchedulerLimits(global_limit=1, max_queue=0)
    ex = executor(
        tool("hold", hold, NOTHING, parallelism="shared"), scheduler=ConcurrencyScheduler(limits)
    )
    first = asyncio.create_task(ex.execute("hold", {}))
    await asyncio.sleep(0.01)
    error = expect(await ex.execute("hold", {}), ErrorCode.RESOURCE_EXHAUSTED)
    assert error.details["reason"] == "tool_busy" and error.retryable
    assert error.retry_after == "retry next turn"
    gate.set()
    assert (await first).ok
    assert_idle(ex)


async def test_turn_limit_is_64_calls() -> None:
    ex = executor(echo())
    ctx = ExecutionContext(turn_id="t1")
    results = [await ex.execute("echo", {"text": "x"}, ctx) for _ in range(66)]
    assert all(r.ok for r in results[:64])
    for result in results[64:]:
        error = expect(result, ErrorCode.RESOURCE_EXHAUSTED)
        assert error.details["reason"] == "turn_limit"
    assert (await ex.execute("echo", {"text": "x"}, ExecutionContext(turn_id="t2"))).ok


async def test_aborted_before_dispatch_runs_nothing() -> None:
    ran: list[int] = []
    token = CancelToken()
    token.cancel()
    result = await executor(tool("t", lambda a, c: ran.append(1))).execute(
        "t", {"text": "x"}, ExecutionContext(cancel=token)
    )
    expect(result, ErrorCode.ABORTED_BEFORE_DISPATCH)
    assert result.meta.aborted_before_launch and ran == []


async def test_tool_failure_keeps_the_tools_code() -> None:
    definition = tool(
        "f", lambda a, c: Failure("file is locked", code="EBUSY_LOCK", details={"path": "x"})
    )
    error = expect(await executor(definition).execute("f", {"text": "x"}), ErrorCode.TOOL_FAILURE)
    assert error.message == "file is locked" and error.details == {
        "path": "x",
        "code": "EBUSY_LOCK",
    }


async def test_tool_error_has_type_and_message_without_traceback() -> None:
    def boom(args: Any, ctx: Any) -> str:
        raise ValueError("bad input line 3")

    result = await executor(tool("boom", boom)).execute("boom", {"text": "x"})
    error = expect(result, ErrorCode.TOOL_ERROR)
    assert "ValueError" in error.message and "bad input line 3" in error.message
    assert "Traceback" not in result.content


async def test_blocked_by_post_hook_uses_the_feedback_as_content() -> None:
    hooks = Hooks()
    hooks.add_post_tool_use(lambda event: PostToolUseResult(block="output contained a secret"))
    result = await executor(echo(), hooks=hooks).execute("echo", {"text": "x"})
    expect(result, ErrorCode.BLOCKED_BY_HOOK)
    assert result.content == "output contained a secret"


async def test_output_invalid_for_schema_mismatch_and_unserializable_values() -> None:
    typed = tool(
        "typed",
        lambda a, c: {"n": "not a number"},
        output=Output(schema=schema.Object({"n": schema.Integer()}, required=("n",))),
    )
    expect(await executor(typed).execute("typed", {"text": "x"}), ErrorCode.OUTPUT_INVALID)
    weird = tool("weird", lambda a, c: object())
    expect(await executor(weird).execute("weird", {"text": "x"}), ErrorCode.OUTPUT_INVALID)


async def test_disposed_executor_refuses_calls() -> None:
    ex = executor(echo())
    ex.dispose()
    expect(await ex.execute("echo", {"text": "x"}), ErrorCode.DISPOSED)


async def test_timeout_and_aborted() -> None:
    async def slow(args: Any, ctx: Any) -> str:
        await asyncio.sleep(10)
        return "late"

    ex = executor(tool("slow", slow, timeout=0.05))
    result = await ex.execute("slow", {"text": "x"})
    expect(result, ErrorCode.TIMEOUT)
    assert not result.meta.aborted_before_launch
    token = CancelToken()
    ex2 = executor(tool("slow", slow))
    task = asyncio.create_task(ex2.execute("slow", {"text": "x"}, ExecutionContext(cancel=token)))
    await asyncio.sleep(0.02)
    token.cancel("user pressed stop")
    result = await task
    expect(result, ErrorCode.ABORTED)
    assert not result.meta.aborted_before_launch
    assert_idle(ex)
    assert_idle(ex2)


async def test_persistence_failed_when_the_record_cannot_be_saved() -> None:
    ran: list[int] = []

    class BrokenStore:
        async def record_tool_use(self, record: Any) -> None:
            raise OSError(28, "No space left on device")

        async def record_result(self, execution_id: str, result: Any) -> None:
            raise AssertionError("never reached")

        async def load(self, session_id: str) -> list[Any]:
            return []

        async def close(self) -> None:
            return None

    definition = tool("side_effect", lambda a, c: ran.append(1))
    ex = executor(definition, store=BrokenStore(), require_persistence=True)
    error = expect(await ex.execute("side_effect", {"text": "x"}), ErrorCode.PERSISTENCE_FAILED)
    assert "No space left" in error.message and ran == []
    assert_idle(ex)


def test_every_error_code_has_a_test_through_execute() -> None:
    tree = ast.parse(Path(__file__).read_text())
    expected = {
        call.args[1].attr
        for call in ast.walk(tree)
        if isinstance(call, ast.Call)
        and isinstance(call.func, ast.Name)
        and call.func.id == "expect"
        and len(call.args) == 2
        and isinstance(call.args[1], ast.Attribute)
    }
    assert {code.name for code in ErrorCode} - expected == set()


@pytest.mark.parametrize(
    ("options", "error", "fragment"),
    [
        ({"mode": "reckless"}, ValueError, "permission mode"),
        ({"context_defaults": {"sesion_id": "s"}}, ValueError, "sesion_id"),
        ({"guards": ["not callable"]}, TypeError, "guards"),
        ({"history_limit": -1}, ValueError, "history_limit"),
    ],
)
def test_bad_executor_configuration_is_refused_at_construction(
    options: dict[str, Any], error: type[Exception], fragment: str
) -> None:
    with pytest.raises(error, match=fragment):
        executor(echo(), **options)


def test_malformed_rules_are_refused_whole() -> None:
    with pytest.raises(ValueError, match=r"Bash\(npm test"):
        PermissionConfig(allow=("echo", "Bash(npm test"))


@pytest.mark.parametrize("how", ["failure", "exception"])
async def test_a_tools_own_huge_failure_text_is_cut_to_the_content_budget(how: str) -> None:
    from fastgate import Failure

    huge = "x" * 3_000_000

    def body(args: Any, ctx: Any) -> Any:
        if how == "failure":
            return Failure(huge)
        raise RuntimeError(huge)

    ex = executor(tool("fails", body), max_content_chars=10_000)
    result = await ex.execute("fails", {"text": "t"})
    assert result.error is not None
    assert len(result.error.message) <= 10_000 and "characters cut" in result.error.message
    assert isinstance(result.content, str) and len(result.content) <= 10_000
    assert_idle(ex)


async def test_a_refusals_details_never_echo_huge_keys_or_deep_paths() -> None:
    from fastgate import schema as s

    closed = s.Object({"a": s.String()}, required=("a",))
    node = {
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/n"}},
        "additionalProperties": {"type": "integer"},
    }
    deep_schema = {**node, "$defs": {"n": node}}
    ex = executor(
        tool("closed", lambda a, c: "ran", closed), tool("deep", lambda a, c: "ran", deep_schema)
    )
    huge_key = "k" * 1_000_000
    refused = await ex.execute("closed", {"a": "x", huge_key: 1})
    deep: dict[str, Any] = {"b": "not an integer"}
    for _ in range(30_000):
        deep = {"a": deep}
    nested = await ex.execute("deep", deep)
    for result in (refused, nested):
        assert result.error is not None and result.error.code is ErrorCode.INVALID_ARGS
        assert len(repr(result.error.details)) < 10_000
        assert len(result.error.message) < 10_000
        for issue in result.error.details["issues"]:
            assert len(issue["path"]) <= 11
            assert all(len(step) <= 60 for step in issue["path"] if isinstance(step, str))
    assert nested.error is not None
    (issue,) = nested.error.details["issues"]
    assert issue["path"][:4] == ["a"] * 4 and issue["path"][-1] == "b"
    assert issue["path"][4] == f"…({30_000 + 1 - 10} more)…"
    assert_idle(ex)
