"""Code mode and the pipeline: every call a program makes goes through every stage, exactly like
a direct call; direct calls are refused before any policy stage; the result and the store."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from fastgate import (
    ApprovalRequest,
    ApprovalResponse,
    ConcurrencyScheduler,
    ErrorCode,
    ExecutionContext,
    FileLockManager,
    Hooks,
    PermissionConfig,
    PreToolUseEvent,
    PreToolUseResult,
    SchedulerLimits,
    SqliteToolUseStore,
    ToolCallView,
    ToolKind,
    ToolResult,
)
from fastgate.codemode import RUN_CODE, CodeMode
from tests.codemode_kit import (
    Env,
    Gate,
    env_fixture,  # noqa: F401  (the fixture "env")
    noop_tool,
    read_tool,
    run,
    slow_tool,
    value_tool,
    within,
)


def nested_results(results: list[ToolResult], parent: ToolResult) -> list[ToolResult]:
    return [r for r in results if r.meta.parent_execution_id == parent.meta.execution_id]


async def test_a_program_calls_tools_by_keyword_and_at_once(env: Env) -> None:
    (env.workspace / "a.txt").write_text("alpha")
    (env.workspace / "b.txt").write_text("beta")
    executor = env.make(read_tool(), noop_tool())
    seen: list[ToolResult] = []
    executor.on_result(seen.append)
    code = """
text = await tools.read(file_path="a.txt")
both = await asyncio.gather(tools.read(file_path="a.txt"), tools.read(file_path="b.txt"))
print(text, both)
"""
    result = await run(executor, code)
    assert result.ok, result.content
    assert result.value["stdout"] == "alpha ['alpha', 'beta']\n"
    assert [c["name"] for c in result.value["calls"]] == ["read", "read", "read"]
    assert all(c["ok"] and c["code"] is None for c in result.value["calls"])
    calls = "\n".join(["- read: ok"] * 3)
    assert result.content == f"```\nalpha ['alpha', 'beta']\n```\n\nTool calls:\n{calls}"
    nested = nested_results(seen, result)
    assert len(nested) == 3 and all(r.meta.tool_name == "read" for r in nested)
    assert {r.meta.execution_id for r in nested} == {
        c["execution_id"] for c in result.value["calls"]
    }
    assert result.meta.parent_execution_id is None
    assert all(r.meta.session_id == "s1" for r in nested)


async def test_a_denied_call_raises_in_the_program_which_goes_on(env: Env) -> None:
    (env.workspace / "a.txt").write_text("alpha")
    executor = env.make(
        read_tool(), permissions=PermissionConfig(allow=("run_code",), deny=("read(./a.txt)",))
    )
    code = """
try:
    await tools.read(file_path="a.txt")
except ToolCallError as e:
    print("denied:", e.code, "|", e.message)
print("went on")
"""
    result = await run(executor, code)
    assert result.ok, result.content
    lines = result.value["stdout"].splitlines()
    assert lines[0].startswith("denied: PERMISSION_DENIED | Not permitted")
    assert lines[1] == "went on"
    assert result.value["calls"][0]["code"] == "PERMISSION_DENIED"
    assert "- read: PERMISSION_DENIED" in result.content


async def test_an_ask_blocks_the_program_until_the_approver_answers(env: Env) -> None:
    (env.workspace / "a.txt").write_text("alpha")
    gate = Gate()
    asked: list[ApprovalRequest] = []
    asking, answer = asyncio.Event(), asyncio.Event()

    async def approver(request: ApprovalRequest) -> ApprovalResponse:
        asked.append(request)
        asking.set()
        await answer.wait()
        return ApprovalResponse(True)

    executor = env.make(
        read_tool(),
        slow_tool(gate, "mark", kind=ToolKind.READ_ONLY),
        permissions=PermissionConfig(allow=("run_code", "mark"), ask=("read",)),
    )
    code = """
await tools.mark(label="before")
print(await tools.read(file_path="a.txt"))
"""
    ctx = ExecutionContext(approver=approver)
    task = asyncio.ensure_future(run(executor, code, ctx))
    await within(gate.entered.wait(), task)
    gate.release.set()  # the program goes on to the read, which asks
    await within(asking.wait(), task)
    assert not task.done()  # the program waits for the answer (no replay, no timeout)
    assert asked[0].tool_name == "read" and asked[0].args["file_path"] == "a.txt"
    answer.set()
    result = await task
    assert result.ok, result.content
    assert result.value["stdout"] == "alpha\n"
    assert [c["name"] for c in result.value["calls"]] == ["mark", "read"]


async def test_hooks_and_guards_see_every_call_from_code(env: Env) -> None:
    seen: list[PreToolUseEvent] = []

    def hook(event: PreToolUseEvent) -> PreToolUseResult | None:
        seen.append(event)
        if event.args.get("n") == 2:
            return PreToolUseResult(decision="deny", reason="two is not allowed")
        return None

    def guard(view: ToolCallView) -> str | None:
        return "three is guarded" if view.args.get("n") == 3 else None

    hooks = Hooks()
    hooks.add_pre_tool_use(hook, matcher="value")
    executor = env.make(value_tool(), hooks=hooks, guards=(guard,))
    code = """
for n in (1, 2, 3):
    try:
        v = await tools.value(n=n)
        print(n, "ok", v["n"], v["items"], v["nested"])
    except ToolCallError as e:
        print(n, e.code, e.message)
"""
    result = await run(executor, code)
    assert result.ok, result.content
    assert result.value["stdout"].splitlines() == [
        "1 ok 1 [1, 2, 3] {'ok': True}",
        "2 PERMISSION_DENIED Not permitted: two is not allowed",
        "3 PERMISSION_DENIED Not permitted: three is guarded",
    ]
    assert [e.args["n"] for e in seen] == [1, 2, 3]
    assert all(e.context.session_id == "s1" for e in seen)


async def test_a_file_lock_is_shared_with_a_concurrent_direct_call(env: Env) -> None:
    gate = Gate()
    locks = FileLockManager()
    coded = env.make(
        slow_tool(gate), locks=locks, permissions=PermissionConfig(allow=("run_code", "slow"))
    )
    direct = env.plain(slow_tool(gate), locks=locks, permissions=PermissionConfig(allow=("slow",)))
    program = asyncio.ensure_future(run(coded, 'await tools.slow(file_path="x.txt", label="code")'))
    await within(gate.entered.wait(), program)
    assert locks.locked(str(env.workspace / "x.txt"))
    other = asyncio.ensure_future(direct.execute("slow", {"file_path": "x.txt", "label": "direct"}))
    for _ in range(20):  # give the direct call every chance to (wrongly) get in
        await asyncio.sleep(0)
    assert gate.entries == ["code"]
    gate.release.set()
    first, second = await program, await other
    assert first.ok and second.ok, (first.content, second.content)
    assert gate.entries == ["code", "direct"] and gate.most_inside == 1


async def test_the_session_limit_holds_for_calls_from_code(env: Env) -> None:
    gate = Gate()
    arrived = asyncio.Event()
    arrivals: list[str] = []

    def count(event: PreToolUseEvent) -> None:  # stage 7: each call is on its way to a slot
        arrivals.append(event.args["label"])
        if len(arrivals) == 4:
            arrived.set()

    hooks = Hooks()
    hooks.add_pre_tool_use(count, matcher="slow")
    scheduler = ConcurrencyScheduler(SchedulerLimits(session_limit=1))
    tool = slow_tool(gate, kind=ToolKind.READ_ONLY, parallelism="shared")  # the gate lets all in
    coded = env.make(tool, scheduler=scheduler, hooks=hooks)
    direct = env.plain(
        tool, scheduler=scheduler, hooks=hooks, permissions=PermissionConfig(allow=("slow",))
    )
    code = "await asyncio.gather(*(tools.slow(label=f'code{i}') for i in range(3)))"
    program = asyncio.ensure_future(run(coded, code))
    other = asyncio.ensure_future(direct.execute("slow", {"label": "direct"}))
    await within(arrived.wait(), program)
    await asyncio.sleep(0)  # from the hook to the scheduler's queue: no await in between
    stats = scheduler.stats()
    assert stats.in_flight_by_session["s1"] == 1 and stats.queued_by_session["s1"] == 3
    assert gate.inside == 1
    gate.release.set()
    first, second = await program, await other
    assert first.ok and second.ok, (first.content, second.content)
    assert gate.most_inside == 1 and sorted(gate.entries) == ["code0", "code1", "code2", "direct"]


async def test_direct_calls_are_refused_before_any_policy_stage(env: Env) -> None:
    called: list[str] = []

    def hook(event: PreToolUseEvent) -> None:
        called.append(f"hook:{event.tool_name}")

    def guard(view: ToolCallView) -> None:
        called.append(f"guard:{view.tool_name}")

    async def approver(request: ApprovalRequest) -> ApprovalResponse:
        called.append(f"approver:{request.tool_name}")
        return ApprovalResponse(True)

    hooks = Hooks()
    hooks.add_pre_tool_use(hook)
    audit: list[Any] = []

    class Audit:
        def record(self, event: Any) -> None:
            audit.append(event)

    executor = env.make(
        read_tool(),
        noop_tool(),
        code_mode=CodeMode(allowed=("read",), pool_size=0),
        permissions=PermissionConfig(ask=("read", "noop")),
        hooks=hooks,
        guards=(guard,),
        audit=Audit(),
    )
    ctx = ExecutionContext(approver=approver)
    for name in ("read", "noop"):
        result = await executor.execute(name, {"file_path": "a.txt"}, ctx)
        assert result.error is not None
        assert result.error.code == ErrorCode.PERMISSION_DENIED
        assert result.error.details == {"reason": "code_mode"}
        assert "run_code" in result.error.message
        assert result.meta.decision_source is None
    refused = await executor.execute("read", {}, ctx)
    assert refused.error is not None and "await tools.read(...)" in refused.error.message
    assert called == [] and audit == []
    unknown = await executor.execute("nope", {}, ctx)
    assert unknown.error is not None and unknown.error.code == ErrorCode.UNKNOWN_TOOL


async def test_a_call_claiming_a_program_that_is_not_running_is_refused(env: Env) -> None:
    executor = env.make(noop_tool(), code_mode=CodeMode(pool_size=0))
    result = await executor.execute_nested("not-a-run", "noop", {}, ExecutionContext())
    assert result.error is not None and result.error.code == ErrorCode.PERMISSION_DENIED
    assert result.error.details == {"reason": "code_mode"}


async def test_unknown_tools_and_bad_arguments_raise_tool_call_errors(env: Env) -> None:
    executor = env.make(
        read_tool(), noop_tool(), noop_tool("hidden"), code_mode=CodeMode(allowed=("read", "noop"))
    )
    code = """
for attempt in (
    lambda: tools.reed(file_path="a.txt"),
    lambda: tools.read(),
    lambda: tools.read(file_path=1),
    lambda: tools.read(file_path="a.txt", mode="x"),
    lambda: tools.read("a.txt"),
    lambda: tools.hidden(),
    lambda: tools.run_code(code="1"),
    lambda: tools.noop(x={1, 2}),
):
    try:
        await attempt()
    except ToolCallError as e:
        print(e.code, "|", e.message.splitlines()[0])
"""
    result = await run(executor, code)
    assert result.ok, result.content
    lines = result.value["stdout"].splitlines()
    assert (
        lines[0]
        == "UNKNOWN_TOOL | There is no tool named 'reed' for programs. Did you mean 'read'?"
    )
    assert lines[1].startswith("INVALID_ARGS | Invalid arguments for read")
    assert lines[2].startswith("INVALID_ARGS")
    assert lines[3].startswith("INVALID_ARGS")
    assert lines[4] == "INVALID_ARGS | read takes keyword arguments only: tools.read(name=value)"
    assert lines[5].startswith("UNKNOWN_TOOL | There is no tool named 'hidden'")
    assert lines[6].startswith("UNKNOWN_TOOL | There is no tool named 'run_code'")
    assert lines[7].startswith("INVALID_ARGS | noop: arguments must be JSON values")
    # The refused calls went through the pipeline (recorded); the local ones never left.
    codes = [c["code"] for c in result.value["calls"]]
    assert codes == ["UNKNOWN_TOOL", *["INVALID_ARGS"] * 3, "UNKNOWN_TOOL", "UNKNOWN_TOOL"]


async def test_values_come_back_as_json_and_others_as_their_content(env: Env) -> None:
    executor = env.make(value_tool())
    code = """
v = await tools.value(n=7)
print(type(v).__name__, v["n"], type(v["items"]).__name__)
print(repr(await tools.value(kind="opaque")))
"""
    result = await run(executor, code)
    assert result.ok, result.content
    assert result.value["stdout"].splitlines() == ["dict 7 list", "'a value'"]


async def test_a_program_that_raises_is_a_tool_failure_with_its_traceback(env: Env) -> None:
    executor = env.make(noop_tool())
    code = """
print("before")
await tools.noop()
def inner():
    raise ValueError("bad value")
inner()
"""
    result = await run(executor, code)
    assert result.error is not None and result.error.code == ErrorCode.TOOL_FAILURE
    content = result.content
    assert content.startswith("```\nbefore\n```\n\n```\nTraceback (most recent call last):")
    assert 'File "<program>", line 6, in <module>' in content
    assert 'File "<program>", line 5, in inner' in content
    assert "ValueError: bad value" in content
    assert content.endswith("Tool calls:\n- noop: ok")
    assert "_worker.py" not in content  # the worker's own frames are not shown
    assert result.error.details["reason"] == "exception"
    assert result.error.details["type"] == "ValueError"
    assert result.error.details["calls"][0]["name"] == "noop"


async def test_nested_calls_do_not_use_up_the_turn(env: Env) -> None:
    executor = env.make(noop_tool(), code_mode=CodeMode(max_tool_calls=200, pool_size=1))
    ctx = ExecutionContext(turn_id="t1")
    result = await run(executor, "for _ in range(100):\n    await tools.noop()", ctx)
    assert result.ok, result.content
    assert result.content == "Tool calls:\n" + "\n".join(["- noop: ok"] * 100)


async def test_the_store_records_run_code_and_every_nested_call(env: Env, tmp_path: Path) -> None:
    (env.workspace / "a.txt").write_text("alpha")
    store = SqliteToolUseStore(tmp_path / "calls.db")
    try:
        executor = env.make(read_tool(), noop_tool(), store=store)
        result = await run(executor, 'await tools.read(file_path="a.txt")\nawait tools.noop()')
        assert result.ok, result.content
        stored = await store.load("s1")
    finally:
        await store.close()
    by_id = {s.execution_id: s for s in stored}
    assert [s.tool_name for s in stored] == ["run_code", "read", "noop"]
    run_record = by_id[result.meta.execution_id]
    assert run_record.status == "completed"
    assert run_record.args == {"code": 'await tools.read(file_path="a.txt")\nawait tools.noop()'}
    for call in result.value["calls"]:
        nested = by_id[call["execution_id"]]
        assert nested.status == "completed" and nested.result is not None
        assert nested.result.meta.parent_execution_id == result.meta.execution_id
    assert by_id[result.value["calls"][0]["execution_id"]].args == {"file_path": "a.txt"}


async def test_the_model_is_shown_run_code_with_the_tools_it_can_call(env: Env) -> None:
    code_mode = CodeMode(allowed=("read", "no*"), pool_size=0)
    env.make(read_tool(), noop_tool(), value_tool(), code_mode=code_mode)
    (projected,) = code_mode.schemas()
    assert projected["name"] == "run_code"
    assert projected["parameters"]["required"] == ["code"]
    stubs = projected["description"].split("Tools:\n", 1)[1]
    assert "async def read(*, file_path: str, offset: int = ...) -> Any:" in stubs
    assert "async def noop() -> Any:" in stubs
    assert "value" not in stubs


def test_one_code_mode_per_executor_and_run_code_is_reserved(env: Env) -> None:
    code_mode = CodeMode(pool_size=0)
    env.make(noop_tool(), code_mode=code_mode)
    try:
        env.make(noop_tool(), code_mode=code_mode)
    except ValueError as exc:
        assert "already serves an executor" in str(exc)
    else:
        raise AssertionError("a second executor was accepted")
    executor = env.make(noop_tool(), code_mode=CodeMode(pool_size=0))
    assert executor.registry.resolve(RUN_CODE) is not None
    again = CodeMode(pool_size=0)
    try:
        again.attach(executor)
    except ValueError as exc:
        assert "reserved" in str(exc)
    else:
        raise AssertionError("a second run_code was registered")


async def test_a_program_calls_as_its_agent_scope_sees_the_tools(env: Env) -> None:
    executor = env.make(noop_tool(), value_tool())
    executor.registry.scope("sub", allow=("noop", "run_code"))
    executor.registry.register(noop_tool("own"), scope="sub")
    code = """
print(sorted(dir(tools)))
await tools.noop()
await tools.own()
try:
    await tools.value(n=1)
except ToolCallError as e:
    print(e.code)
"""
    result = await run(executor, code, ExecutionContext(agent_scope="sub"))
    assert result.ok, result.content
    assert result.value["stdout"].splitlines() == ["['noop', 'own']", "UNKNOWN_TOOL"]
    outside = await run(executor, "await tools.own()")
    assert outside.error is not None and "UNKNOWN_TOOL" in outside.content


async def test_plain_code_may_run_a_loop_of_its_own_and_odd_names_are_reached(env: Env) -> None:
    executor = env.make(noop_tool("read-file"), value_tool())
    code = """
import asyncio

async def main():
    await tools["read-file"]()
    await tools.read_file()
    return (await tools.value(n=3))["n"]

print(asyncio.run(main()))
"""
    result = await run(executor, code)
    assert result.ok, result.content
    assert result.value["stdout"] == "3\n"
    assert [c["name"] for c in result.value["calls"]] == ["read-file", "read-file", "value"]
