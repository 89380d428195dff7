"""Limits and bad input: timeouts, memory, budgets, output, cancellation, hostile programs.
Every test checks that nothing it started is left running (the ``env`` fixture, and the pids
the programs print)."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from typing import Any

import pytest

from fastgate import (
    CancelToken,
    ErrorCode,
    ExecutionContext,
    Hooks,
    PermissionConfig,
    PreToolUseEvent,
    RunContext,
    ToolDefinition,
    ToolKind,
    ToolResult,
    define_tool,
    schema,
)
from fastgate.codemode import CodeMode, _pool, _run
from tests.codemode_kit import (
    Env,
    Gate,
    env_fixture,  # noqa: F401  (the fixture "env")
    gone,
    noop_tool,
    pid_of,
    run,
    slow_tool,
    within,
)
from tests.pipeline_kit import assert_idle

PRINT_PID = "import os\nprint('pid', os.getpid(), flush=True)\n"


async def test_a_timeout_ends_the_run_and_its_process_group(env: Env) -> None:
    code_mode = CodeMode(timeout=1.0, pool_size=1)
    executor = env.make(noop_tool(), code_mode=code_mode)
    (taken,) = code_mode.worker_pids()  # the warm worker the run takes
    result = await run(executor, PRINT_PID + "await asyncio.sleep(60)")
    assert result.error is not None and result.error.code == ErrorCode.TIMEOUT
    assert result.error.message == "run_code did not finish within 1s and was stopped."
    assert not result.error.details.get("still_running")
    assert gone(taken) and code_mode.program_pids() == {}
    assert_idle(executor)
    assert len(executor.history()) == 1


async def test_a_busy_loop_is_stopped_by_the_timeout(env: Env) -> None:
    code_mode = CodeMode(timeout=1.0, pool_size=1)
    executor = env.make(noop_tool(), code_mode=code_mode)
    (taken,) = code_mode.worker_pids()
    result = await run(executor, "while True:\n    pass")
    assert result.error is not None and result.error.code == ErrorCode.TIMEOUT
    assert gone(taken) and code_mode.program_pids() == {}


async def test_the_program_is_gone_after_every_ending(env: Env) -> None:
    code_mode = CodeMode(timeout=5.0, pool_size=1)
    executor = env.make(noop_tool(), code_mode=code_mode)
    endings = {
        "done": "",
        "raised": "raise RuntimeError('x')",
        "exit": "import sys\nsys.exit(3)",
        "_exit": "os._exit(0)",
        "a thread printing on": "import threading, time\n"
        "threading.Thread(target=lambda: [print('.') or time.sleep(0.01) for _ in range(10**6)]"
        ").start()",
    }
    for name, body in endings.items():
        result = await run(executor, PRINT_PID + body)
        pid = pid_of(result)
        assert gone(pid), f"{name}: pid {pid} is left"
        assert code_mode.program_pids() == {}, name


async def test_a_memory_hog_fails_within_its_limit(env: Env) -> None:
    executor = env.make(noop_tool(), code_mode=CodeMode(memory_mb=128, pool_size=1))
    code = """
chunks = []
try:
    while True:
        chunks.append(bytearray(1 << 20))
except MemoryError:
    print("got", len(chunks), "MiB", flush=True)
    raise
"""
    result = await run(executor, code)
    assert result.error is not None and result.error.code == ErrorCode.TOOL_FAILURE
    got = int(result.content.split("got ", 1)[1].split()[0])
    assert 0 < got < 128
    assert "MemoryError" in result.content


async def test_max_tool_calls_is_counted_before_dispatch(env: Env) -> None:
    ran: list[int] = []

    async def body(args: object, ctx: object) -> None:
        ran.append(1)

    counted = define_tool("count", "Counts.", schema.Object({}), body, kind=ToolKind.READ_ONLY)
    executor = env.make(counted, code_mode=CodeMode(max_tool_calls=3, pool_size=1))
    code = """
results = await asyncio.gather(*(tools.count() for _ in range(5)), return_exceptions=True)
print([getattr(r, "code", "ok") for r in results])
"""
    result = await run(executor, code)
    assert result.ok, result.content
    assert (
        result.value["stdout"] == "['ok', 'ok', 'ok', 'RESOURCE_EXHAUSTED', 'RESOURCE_EXHAUSTED']\n"
    )
    assert len(ran) == 3
    lines = ["- count: ok"] * 3 + ["- count: RESOURCE_EXHAUSTED"] * 2
    assert "\n".join(lines) in result.content


async def test_a_program_calling_on_after_its_budget_is_stopped(env: Env) -> None:
    executor = env.make(noop_tool(), code_mode=CodeMode(max_tool_calls=2, pool_size=1))
    code = (
        PRINT_PID
        + """
while True:
    try:
        await tools.noop()
    except ToolCallError:
        pass
"""
    )
    result = await run(executor, code)
    assert result.error is not None and result.error.code == ErrorCode.TOOL_FAILURE
    assert "went on calling tools after its budget of 2 calls" in result.content
    assert result.error.details["reason"] == "protocol"
    assert gone(pid_of(result))


async def test_output_is_cut_head_and_tail(env: Env) -> None:
    executor = env.make(noop_tool(), code_mode=CodeMode(max_output_chars=1000, pool_size=1))
    code = """
print("HEAD-MARK")
for i in range(20000):
    print("line", i)
print("TAIL-MARK")
"""
    result = await run(executor, code)
    assert result.ok, result.content
    stdout = result.value["stdout"]
    assert len(stdout) <= 1000
    assert stdout.startswith("HEAD-MARK\nline 0\n")
    assert stdout.endswith("line 19999\nTAIL-MARK\n")
    total = len("HEAD-MARK\n") + sum(len(f"line {i}\n") for i in range(20000)) + 10
    cut = int(stdout.split("[... ", 1)[1].split(" characters cut")[0])
    assert cut == total - (len(stdout) - len(f"\n[... {cut} characters cut ...]\n"))


async def test_megabytes_of_output_and_bytes_that_are_not_text(env: Env) -> None:
    executor = env.make(noop_tool())
    code = """
import sys
sys.stdout.write("x" * 5_000_000)
sys.stdout.flush()
os.write(1, b"\\n\\xff\\xfe end\\n")
"""
    result = await run(executor, "import os\n" + code)
    assert result.ok, result.content
    stdout = result.value["stdout"]
    assert len(stdout) <= 30_000
    assert stdout.endswith("\n\ufffd\ufffd end\n")


async def test_a_flood_of_output_stops_the_program(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_run, "MAX_OUTPUT_BYTES", 1 << 20)
    executor = env.make(noop_tool())
    result = await run(executor, PRINT_PID + "while True:\n    print('y' * 1000)")
    assert result.error is not None and result.error.code == ErrorCode.TOOL_FAILURE
    assert "The program was stopped: it printed more than 1 MiB" in result.content
    assert result.content.startswith("```\npid ")
    assert gone(pid_of(result))


async def test_cancelling_run_code_cancels_its_calls_then_kills_the_program(env: Env) -> None:
    gate = Gate()
    code_mode = CodeMode(pool_size=1)
    executor = env.make(
        slow_tool(gate, kind=ToolKind.READ_ONLY),
        code_mode=code_mode,
        permissions=PermissionConfig(allow=("run_code", "slow")),
    )
    seen: list[ToolResult] = []
    executor.on_result(seen.append)
    token = CancelToken()
    ctx = ExecutionContext(cancel=token)
    program = asyncio.ensure_future(run(executor, "await tools.slow(label='inner')", ctx))
    await within(gate.entered.wait(), program)
    (pid,) = code_mode.program_pids().values()
    token.cancel("user pressed stop")
    result = await program
    assert result.error is not None and result.error.code == ErrorCode.ABORTED
    assert gate.cancelled == ["inner"]
    (nested,) = (r for r in seen if r.meta.parent_execution_id == result.meta.execution_id)
    assert nested.error is not None and nested.error.code == ErrorCode.ABORTED
    assert gone(pid)
    assert_idle(executor)  # neither the run nor its nested call holds anything
    assert len(executor.history()) == 2 and len(seen) == 2


async def test_the_calls_are_cancelled_while_the_program_still_runs(env: Env) -> None:
    gate = Gate()
    seen_alive: list[bool] = []
    program_pid: list[int] = []

    async def body(args: object, ctx: object) -> None:
        try:
            await gate.hold("inner")
        except asyncio.CancelledError:
            seen_alive.append(not gone(program_pid[0]))
            raise

    held = define_tool("hold", "Holds.", schema.Object({}), body, kind=ToolKind.READ_ONLY)
    code_mode = CodeMode(pool_size=1)
    executor = env.make(held, code_mode=code_mode)
    task = asyncio.ensure_future(run(executor, PRINT_PID + "await tools.hold()"))
    await within(gate.entered.wait(), task)
    program_pid.extend(code_mode.program_pids().values())
    task.cancel()  # the caller's own task: execute raises CancelledError
    with pytest.raises(asyncio.CancelledError):
        await task
    # The run cleans up after execute has raised: it ends once the worker's launcher has
    # ended and reaped the worker and all it started.
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    if others:
        await asyncio.wait(others, timeout=30)
    assert gone(program_pid[0])
    assert seen_alive == [True]  # the nested call was cancelled before the program was killed


async def test_a_fork_bomb_gets_nowhere(env: Env) -> None:
    executor = env.make(noop_tool())
    code = (
        PRINT_PID
        + """
import threading
while True:
    os.fork()
"""
    )
    result = await run(executor, code)
    assert result.error is not None and result.error.code == ErrorCode.TOOL_FAILURE
    assert "PermissionError" in result.content
    assert gone(pid_of(result))


async def test_a_program_that_closes_its_channel(env: Env) -> None:
    executor = env.make(noop_tool())
    code = (
        PRINT_PID
        + """
import socket
os.close(3)
try:
    await tools.noop()
except ToolCallError as e:
    print("call:", e.code)
"""
    )
    result = await run(executor, code)
    assert result.error is not None and result.error.code == ErrorCode.TOOL_FAILURE
    assert "call: TOOL_ERROR" in result.content
    assert "closed its tool channel" in result.content
    assert gone(pid_of(result))


def _yielding_tool() -> ToolDefinition:
    async def execute(args: Any, ctx: RunContext) -> None:
        await asyncio.sleep(0)

    return define_tool(
        "yielding", "Waits one turn.", schema.Object({}), execute, kind=ToolKind.READ_ONLY
    )


@pytest.mark.parametrize(
    ("what", "payload", "reason"),
    [
        ("garbage", "b'this is not json\\n'", "it broke the tool channel"),
        ("a list", "b'[1, 2]\\n'", "it broke the tool channel"),
        ("nested too deeply", "b'[' * 10000 + b']' * 10000 + b'\\n'", "it broke the tool channel"),
        ("a reused id", None, "it broke the tool channel"),
        ("a huge line", "b'x' * (3 << 20)", "it sent a message larger than 1 MiB"),
    ],
)
async def test_a_program_that_floods_its_channel_is_stopped(
    env: Env, monkeypatch: pytest.MonkeyPatch, what: str, payload: str | None, reason: str
) -> None:
    monkeypatch.setattr(_run, "MAX_MESSAGE_BYTES", 1 << 20)
    executor = env.make(noop_tool(), _yielding_tool())
    if payload is None:
        # The first call waits a turn of the loop, so its id is still in flight when the same
        # id comes in the same read (an answered call's id is free again, and a call that
        # never waits is answered at once).
        call = b'{"t":"call","id":7,"name":"yielding","args":{}}\n'
        payload = repr(call * 2)
    code = (
        PRINT_PID
        + f"""
import socket
channel = socket.socket(fileno=3)
channel.sendall({payload})
await asyncio.sleep(30)
"""
    )
    result = await run(executor, code)
    assert result.error is not None and result.error.code == ErrorCode.TOOL_FAILURE, what
    assert "The program was stopped: " + reason in result.content, result.content
    assert result.error.details["reason"] == "protocol"
    assert gone(pid_of(result))


@pytest.mark.parametrize(
    ("code", "line", "column", "kind"),
    [
        ("x = = 1", 1, 5, "SyntaxError"),
        ("print('a')\nif True:\nprint('b')", 3, 1, "IndentationError"),
        ("def f(:\n    pass", 1, 7, "SyntaxError"),
    ],
)
async def test_syntax_errors_say_where(
    env: Env, code: str, line: int, column: int, kind: str
) -> None:
    executor = env.make(noop_tool())
    result = await run(executor, code)
    assert result.error is not None and result.error.code == ErrorCode.TOOL_FAILURE
    assert result.content.startswith(f"```\n{kind} at line {line}, column {column}: ")
    assert result.error.details["reason"] == "syntax_error"
    assert (result.error.details["line"], result.error.details["column"]) == (line, column)


async def test_code_that_cannot_be_compiled_at_all(env: Env) -> None:
    executor = env.make(noop_tool())
    result = await run(executor, "print(1)\x00")
    assert result.error is not None and result.error.code == ErrorCode.TOOL_FAILURE
    assert "null bytes" in result.content
    empty = await run(executor, "")
    assert empty.error is not None and empty.error.code == ErrorCode.INVALID_ARGS


async def test_a_program_that_exits_with_a_status(env: Env) -> None:
    executor = env.make(noop_tool())
    failed = await run(executor, "import sys\nprint('bye')\nsys.exit(3)")
    assert failed.error is not None and failed.error.code == ErrorCode.TOOL_FAILURE
    assert failed.content == "```\nbye\n```\n\nThe program exited with status 3."
    fine = await run(executor, "import sys\nsys.exit(0)")
    assert fine.ok, fine.content


async def test_warm_and_cold_starts_both_work_and_the_pool_refills(env: Env) -> None:
    code_mode = CodeMode(pool_size=2)
    executor = env.make(noop_tool(), code_mode=code_mode)
    assert code_mode.idle_workers() == 2
    warm = code_mode.worker_pids()
    results = await asyncio.gather(*(run(executor, PRINT_PID) for _ in range(4)))
    pids = [pid_of(r) for r in results]
    assert all(r.ok for r in results)
    assert set(warm) <= set(pids) and len(set(pids)) == 4  # two warm, two started on demand
    assert all(gone(pid) for pid in pids)
    cold = CodeMode(pool_size=0)
    executor = env.make(noop_tool(), code_mode=cold)
    assert cold.idle_workers() == 0
    result = await run(executor, "print(1 + 1)")
    assert result.content == "```\n2\n```"


def test_dispose_stops_the_warm_workers(env: Env) -> None:
    code_mode = CodeMode(pool_size=2)
    executor = env.make(noop_tool(), code_mode=code_mode)
    pids = code_mode.worker_pids()
    assert len(pids) == 2 and not any(gone(p) for p in pids)
    executor.dispose()
    assert all(gone(p) for p in pids) and code_mode.idle_workers() == 0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"timeout": 0}, "timeout"),
        ({"timeout": float("inf")}, "timeout"),
        ({"memory_mb": 8}, "memory_mb"),
        ({"memory_mb": 1.5}, "memory_mb"),
        ({"max_tool_calls": -1}, "max_tool_calls"),
        ({"max_output_chars": 10}, "max_output_chars"),
        ({"pool_size": True}, "pool_size"),
        ({"allowed": "read"}, "allowed"),
        ({"allowed": ("read", 3)}, "allowed"),
    ],
)
def test_bad_settings_are_refused_when_made(options: dict[str, object], message: str) -> None:
    with pytest.raises((TypeError, ValueError), match=message):
        CodeMode(**options)  # type: ignore[arg-type]


async def test_the_server_holds_a_bounded_amount_of_a_programs_arguments(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_run, "MAX_IN_FLIGHT_BYTES", 100_000)
    gate = Gate()
    arrived: list[int] = []
    three = asyncio.Event()

    def count(event: PreToolUseEvent) -> None:
        arrived.append(len(event.args["label"]))
        if len(arrived) == 3:
            three.set()

    hooks = Hooks()
    hooks.add_pre_tool_use(count, matcher="slow")
    tool = slow_tool(gate, kind=ToolKind.READ_ONLY, parallelism="shared")
    executor = env.make(tool, hooks=hooks)
    code = "await asyncio.gather(*(tools.slow(label=str(i) * 40_000) for i in range(10)))"
    program = asyncio.ensure_future(run(executor, code))
    await within(three.wait(), program)
    for _ in range(50):  # the program's further calls would arrive now if it were read on
        await asyncio.sleep(0)
    assert len(arrived) == 3  # 3 x 40 kB in flight: past 100 kB the channel is not read
    gate.release.set()
    result = await program
    assert result.ok, result.content
    assert len(arrived) == 10


async def test_a_cold_start_cancelled_midway_leaves_no_process(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    starting, go_on = threading.Event(), threading.Event()

    class HeldWorker(_pool.Worker):
        def __init__(self, spec: _pool.WorkerSpec) -> None:
            starting.set()
            go_on.wait(30)  # the run is cancelled while its worker is being started
            super().__init__(spec)

    monkeypatch.setattr(_pool, "Worker", HeldWorker)
    executor = env.make(noop_tool(), code_mode=CodeMode(pool_size=0))
    task = asyncio.ensure_future(run(executor, "print('never')"))
    assert await asyncio.to_thread(starting.wait, 30)
    (thread,) = [t for t in threading.enumerate() if t.name == "fastgate-codemode-start"]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    go_on.set()
    await asyncio.to_thread(thread.join)
    for _ in range(3):
        await asyncio.sleep(0)  # its delivery, then the clean-up, run on the loop
    # (the fixture checks that the worker started after the cancellation is gone)


async def test_a_warm_worker_killed_while_idle_is_replaced(env: Env) -> None:
    code_mode = CodeMode(pool_size=1)
    executor = env.make(noop_tool(), code_mode=code_mode)
    (idle,) = code_mode.worker_pids()
    os.kill(idle, signal.SIGKILL)
    result = await run(executor, PRINT_PID)
    assert result.ok, result.content
    assert pid_of(result) != idle
    assert gone(idle)


async def test_a_scratch_file_cannot_grow_past_its_limit(env: Env) -> None:
    executor = env.make(noop_tool())
    code = """
import resource
print(resource.getrlimit(resource.RLIMIT_FSIZE)[0] // 2**20)
with open("big.bin", "wb") as f:
    try:
        for _ in range(100):
            f.write(b"x" * 2**20)
            f.flush()
    except OSError as e:
        print("stopped", type(e).__name__)
"""
    result = await run(executor, code)
    assert result.ok, result.content
    assert result.value["stdout"].splitlines() == ["64", "stopped OSError"]
