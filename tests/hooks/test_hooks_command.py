"""``CommandHook``: the JSON protocol, fail-closed replies, and the end of every process a hook
started (its group, and daemons that detached from it)."""

from __future__ import annotations

import asyncio
import json
import os
import select
import sys
from pathlib import Path
from typing import Any

import pytest

from fastgate.hooks import (
    UNSET,
    CommandHook,
    Hooks,
    PostToolUseEvent,
    PostToolUseFailureEvent,
    PreToolUseEvent,
    run_post_tool_use,
    run_post_tool_use_failure,
    run_pre_tool_use,
)
from fastgate.model.context import ExecutionContext
from fastgate.model.decision import Decision
from fastgate.model.freeze import freeze
from fastgate.model.results import ErrorCode, ResultMeta, ToolError, ToolResult
from tests.processes_kit import (
    DAEMONS,
    alive,
    compiled_launcher_fixture,  # noqa: F401  (the fixture "compiled_launcher")
    daemon_script,
    kill_all,
    launcher_fixture,  # noqa: F401  (the fixture "launcher")
    recorded,
)

CTX = ExecutionContext(session_id="s1", turn_id="t1", agent_scope="main")

# Echo a fixed reply, given in hex so that any bytes (invalid UTF-8 too) survive argv.
REPLY_SCRIPT = (
    "import sys; sys.stdin.buffer.read(); sys.stdout.buffer.write(bytes.fromhex(sys.argv[1]))"
)


def python_hook(code: str, *args: str, timeout: float = 10.0, **kwargs: Any) -> CommandHook:
    return CommandHook([sys.executable, "-c", code, *args], timeout=timeout, **kwargs)


def replying(reply: bytes, **kwargs: Any) -> CommandHook:
    return python_hook(REPLY_SCRIPT, reply.hex(), **kwargs)


def pre_event(ctx: ExecutionContext = CTX, **args: Any) -> PreToolUseEvent:
    return PreToolUseEvent("Bash", freeze(args or {"command": "ls"}), ctx)


async def run_one(hook: CommandHook, event: PreToolUseEvent | None = None, **kwargs: Any) -> Any:
    hooks = Hooks()
    hooks.add_pre_tool_use(hook, **kwargs)
    return await run_pre_tool_use(hooks, event or pre_event())


# -- the protocol --------------------------------------------------------------------------------


async def test_the_event_arrives_as_json_on_stdin(tmp_path: Path) -> None:
    echo = python_hook(
        "import sys, json; text = sys.stdin.read(); "
        "print(json.dumps({'decision': 'ask', 'additional_context': text}))"
    )
    ctx = ExecutionContext(session_id="s1", workspace_root=str(tmp_path), turn_id="t1")
    outcome = await run_one(echo, pre_event(ctx, command="ls", opts={"a": [1, 2]}))
    assert outcome.decision is Decision.ASK
    assert json.loads(outcome.additional_context[0]) == {
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "ls", "opts": {"a": [1, 2]}},
        "session_id": "s1",
        "cwd": str(tmp_path),
        "turn_id": "t1",
        "agent_scope": None,
    }


@pytest.fixture
def workspace(tmp_path: Path) -> str:
    return str(tmp_path.resolve())


async def test_the_hook_runs_in_the_workspace(workspace: str) -> None:
    hook = python_hook(
        "import os, json; print(json.dumps({'decision': 'ask', 'reason': os.getcwd()}))"
    )
    ctx = ExecutionContext(session_id="s1", workspace_root=workspace)
    outcome = await run_one(hook, pre_event(ctx))
    assert outcome.reason == workspace


@pytest.mark.parametrize(
    ("reply", "decision"),
    [
        (b"", None),
        (b"  \n\t\n", None),
        (b"{}", None),
        (b'{"decision": null, "reason": null}', None),
        (b'{"decision": "allow"}', Decision.ALLOW),
        (b'\n{"decision": "ASK", "reason": "look first"}\n', Decision.ASK),
        (b'{"decision": "deny", "reason": "no"}', Decision.DENY),
    ],
)
async def test_valid_replies(reply: bytes, decision: Decision | None) -> None:
    outcome = await run_one(replying(reply))
    assert outcome.decision is decision
    assert outcome.failures == ()


async def test_rewritten_arguments_from_a_command() -> None:
    reply = b'{"updated_args": {"command": "ls -la", "n": [1, {"x": null}]}}'
    outcome = await run_one(replying(reply))
    assert outcome.decision is None
    assert outcome.updated_args == {"command": "ls -la", "n": [1, {"x": None}]}
    with pytest.raises(TypeError):
        outcome.updated_args["command"] = "rm"


MALFORMED = [
    b"not json",
    b'{"decision": "allow"} {"decision": "allow"}',
    b'{"decision": "allow"}\n{"decision": "deny"}',
    b"[]",
    b'[{"decision": "allow"}]',
    b'"allow"',
    b"null",
    b'{"decision": 1}',
    b'{"decision": "maybe"}',
    b'{"reason": 5}',
    b'{"additional_context": ["a"]}',
    b'{"updated_args": ["ls"]}',
    b'{"updated_args": "ls"}',
    b'{"decision": "allow", "extra": true}',
    b'{"hookSpecificOutput": {"permissionDecision": "allow"}}',
    b'{"decision": "deny", "decision": "allow"}',
    b'{"decision": "allow", "reason": NaN}',
    b'{"decision": "allow"',
    b"\xff\xfe",
    b"[" * 100_000,
]


@pytest.mark.parametrize("reply", MALFORMED, ids=lambda r: repr(r[:40]))
async def test_malformed_replies_deny(reply: bytes) -> None:
    outcome = await run_one(replying(reply))
    assert outcome.decision is Decision.DENY
    assert outcome.reason is not None and "command" in outcome.reason
    assert len(outcome.failures) == 1


@pytest.mark.parametrize("reply", MALFORMED[:3], ids=lambda r: repr(r[:40]))
async def test_malformed_reply_with_on_error_ignore(reply: bytes) -> None:
    outcome = await run_one(replying(reply), on_error="ignore")
    assert outcome.decision is None
    assert len(outcome.failures) == 1 and "ignored" in outcome.failures[0]


async def test_non_zero_exit_denies_even_with_a_valid_reply() -> None:
    hook = python_hook(
        "import sys; print('{\"decision\": \"allow\"}'); sys.stderr.write('policy crashed'); "
        "sys.exit(3)"
    )
    outcome = await run_one(hook)
    assert outcome.decision is Decision.DENY
    assert "status 3" in outcome.reason and "policy crashed" in outcome.reason


async def test_a_missing_command_denies() -> None:
    outcome = await run_one(CommandHook(["/nonexistent/fastgate-hook"]))
    assert outcome.decision is Decision.DENY
    assert "cannot start" in outcome.reason


async def test_an_event_that_is_not_json_denies() -> None:
    event = PreToolUseEvent("Bash", {"command": object()}, CTX)
    outcome = await run_one(replying(b""), event)
    assert outcome.decision is Decision.DENY
    assert "encoded" in outcome.reason


async def test_oversized_stdout_fails_at_once() -> None:
    hook = python_hook(
        "import sys, time; sys.stdout.write('x' * 300_000); sys.stdout.flush(); time.sleep(60)",
        max_output_bytes=100_000,
        timeout=30,
    )
    outcome = await run_one(hook)
    assert outcome.decision is Decision.DENY
    assert "more than 100000 bytes" in outcome.reason


async def test_stderr_floods_are_drained_and_bounded() -> None:
    hook = python_hook(
        "import sys; sys.stdin.read(); sys.stderr.write('e' * 3_000_000); sys.stderr.flush(); "
        'print(\'{"decision": "ask"}\')'
    )
    outcome = await run_one(hook)
    assert outcome.decision is Decision.ASK


async def test_a_hook_that_ignores_a_large_stdin_is_fine() -> None:
    outcome = await run_one(python_hook("pass"), pre_event(command="x" * 4_000_000))
    assert outcome.decision is None and outcome.failures == ()


# -- timeouts and cancellation end every process ------------------------------------------------

# The hook forks a child, which forks a grandchild; all three report their pids through a FIFO
# and then sleep. Child and grandchild inherit stdout, so none of them may survive the hook.
FAMILY_SCRIPT = """
import os, sys, time
read_end, write_end = os.pipe()
child = os.fork()
if child == 0:
    grandchild = os.fork()
    if grandchild == 0:
        time.sleep(60)
        os._exit(0)
    os.write(write_end, b"%d\\n" % grandchild)
    time.sleep(60)
    os._exit(0)
grandchild = int(os.read(read_end, 64))
with open(sys.argv[1], "w") as fifo:
    fifo.write("%d %d %d\\n" % (os.getpid(), child, grandchild))
time.sleep(60)
"""


async def _read_pids(fd: int) -> list[int]:
    loop = asyncio.get_running_loop()
    data = bytearray()
    ready = asyncio.Event()
    loop.add_reader(fd, ready.set)
    try:
        async with asyncio.timeout(10):
            while not data.endswith(b"\n"):
                await ready.wait()
                ready.clear()
                chunk = os.read(fd, 256)
                assert chunk, "the hook died before reporting its pids"
                data += chunk
    finally:
        loop.remove_reader(fd)
    return [int(p) for p in data.split()]


def _assert_all_gone(pids: list[int], leader: int) -> None:
    pidfds = []
    for pid in pids:
        try:
            pidfds.append(os.pidfd_open(pid))
        except ProcessLookupError:
            continue  # already gone entirely
    try:
        pending = set(pidfds)
        while pending:
            # A pidfd turns readable when its process has terminated (zombie or reaped).
            readable, _, _ = select.select(list(pending), [], [], 5.0)
            assert readable, f"processes still running: {pids}"
            pending -= set(readable)
    finally:
        for fd in pidfds:
            os.close(fd)
    with pytest.raises(ChildProcessError):  # our direct child was reaped: no zombie left
        os.waitpid(leader, os.WNOHANG)


@pytest.fixture
def pid_fifo(tmp_path: Path) -> Any:
    if not hasattr(os, "pidfd_open"):
        pytest.skip("needs pidfd_open (Linux)")
    path = tmp_path / "pids"
    os.mkfifo(path)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    yield str(path), fd
    os.close(fd)


async def test_timeout_kills_the_process_group(pid_fifo: tuple[str, int]) -> None:
    path, fd = pid_fifo
    hook = python_hook(FAMILY_SCRIPT, path, timeout=0.5)
    task = asyncio.create_task(run_one(hook))
    pids = await _read_pids(fd)
    outcome = await task
    assert outcome.decision is Decision.DENY and "timed out" in outcome.reason
    _assert_all_gone(pids, leader=pids[0])


async def test_registration_timeout_also_kills_the_group(pid_fifo: tuple[str, int]) -> None:
    path, fd = pid_fifo
    hook = python_hook(FAMILY_SCRIPT, path, timeout=60)
    task = asyncio.create_task(run_one(hook, timeout=0.5))
    pids = await _read_pids(fd)
    outcome = await task
    assert outcome.decision is Decision.DENY and "timed out" in outcome.reason
    _assert_all_gone(pids, leader=pids[0])


async def test_cancellation_kills_the_process_group(pid_fifo: tuple[str, int]) -> None:
    path, fd = pid_fifo
    task = asyncio.create_task(run_one(python_hook(FAMILY_SCRIPT, path, timeout=60)))
    pids = await _read_pids(fd)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    _assert_all_gone(pids, leader=pids[0])


async def test_stragglers_are_killed_after_a_clean_reply(pid_fifo: tuple[str, int]) -> None:
    path, fd = pid_fifo
    # The leader exits cleanly with no reply; the child and grandchild it leaves behind closed
    # their copies of stdout and stderr, so nothing makes us wait for them.
    script = FAMILY_SCRIPT.replace(
        "if child == 0:\n", "if child == 0:\n    os.close(1)\n    os.close(2)\n"
    ).removesuffix("time.sleep(60)\n")
    assert script.count("os.close") == 2 and script.endswith("grandchild))\n")
    task = asyncio.create_task(run_one(python_hook(script, path, timeout=10)))
    pids = await _read_pids(fd)
    outcome = await task
    assert outcome.decision is None and outcome.failures == ()
    _assert_all_gone(pids, leader=pids[0])


@pytest.mark.parametrize("case", list(DAEMONS))
@pytest.mark.parametrize("how", ["exit", "timeout", "cancel"])
async def test_no_daemon_outlives_a_hook(
    tmp_path: Path, case: str, how: str, launcher: list[str]
) -> None:
    # The daemon leaves the hook's session and lets go of its stdio: only its ancestry ties it
    # to the hook. The hook then exits, times out, or its caller is cancelled.
    os.mkfifo(tmp_path / "ready")
    then = "exit 0" if how == "exit" else "sleep 300"
    script = daemon_script(case, then, announce=how == "cancel")
    hook = CommandHook(
        ["bash", "-c", script], cwd=str(tmp_path), timeout=1 if how == "timeout" else 60
    )
    task = asyncio.create_task(run_one(hook))
    if how == "cancel":
        await asyncio.to_thread((tmp_path / "ready").read_bytes)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    else:
        outcome = await task
        if how == "exit":
            assert outcome.decision is None and outcome.failures == ()
        else:
            assert outcome.decision is Decision.DENY and "timed out" in outcome.reason
    pids = recorded(tmp_path)
    try:
        assert len(pids) == 2
        assert [pid for pid in pids if alive(pid)] == []
    finally:
        kill_all(pids)


# -- PostToolUse and PostToolUseFailure ----------------------------------------------------------


def _post_event() -> PostToolUseEvent:
    meta = ResultMeta("e1", None, "Bash", "s1", 0.0, 0.0, 0.0)
    result = ToolResult(ok=True, content="secret=42", error=None, meta=meta, value={"n": 42})
    return PostToolUseEvent("Bash", freeze({"command": "env"}), CTX, result)


async def test_post_command_hook_rewrites_content_and_never_sees_the_value() -> None:
    hook = python_hook(
        "import sys, json; e = json.load(sys.stdin); "
        "print(json.dumps({'content': e['tool_response']['content'].replace('42', '**'), "
        "'additional_context': ','.join(sorted(e['tool_response']))}))"
    )
    hooks = Hooks()
    hooks.add_post_tool_use(hook)
    outcome = await run_post_tool_use(hooks, _post_event())
    assert outcome.content == "secret=**" and outcome.value is UNSET
    assert outcome.additional_context == ("content,ok",)


@pytest.mark.parametrize(
    ("reply", "block"),
    [
        (b'{"block": "contains a secret"}', "contains a secret"),
        (b'{"value": 1, "content": "1"}', "not both"),
        (b'{"content": 5}', "content"),
        (b'{"deny": true}', "unknown key"),
        (b"[]", "JSON object"),
    ],
)
async def test_post_command_hook_blocks(reply: bytes, block: str) -> None:
    hooks = Hooks()
    hooks.add_post_tool_use(replying(reply))
    outcome = await run_post_tool_use(hooks, _post_event())
    assert outcome.block is not None and block in outcome.block


async def test_failure_command_hook_adds_context() -> None:
    hook = python_hook(
        "import sys, json; e = json.load(sys.stdin); "
        "print(json.dumps({'additional_context': e['hook_event_name'] + ':' + e['error']['code']}))"
    )
    hooks = Hooks()
    hooks.add_post_tool_use_failure(hook)
    hooks.add_post_tool_use_failure(replying(b'{"decision": "deny"}'))  # malformed: ignored
    event = PostToolUseFailureEvent(
        "Bash", freeze({}), CTX, ToolError(ErrorCode.TIMEOUT, "took too long")
    )
    assert await run_post_tool_use_failure(hooks, event) == ("PostToolUseFailure:TIMEOUT",)
