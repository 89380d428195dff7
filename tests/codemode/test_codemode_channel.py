"""The worker's end of the tool channel: a lone call waits for its reply without the event loop,
yet whatever else the program waits for (a timer, another file descriptor, a timeout around the
call) still happens while the call is in flight; messages encode and decode as ``json`` does."""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from fastgate import PermissionConfig, RunContext, ToolKind, define_tool, schema
from fastgate.codemode import CodeMode
from fastgate.codemode import _worker as worker
from fastgate.tools import ToolDefinition
from tests.codemode_kit import Env, env_fixture, noop_tool, run  # noqa: F401  (the fixture "env")


def gate_tools() -> tuple[ToolDefinition, ToolDefinition]:
    """``wait_gate`` returns once ``open_gate`` has been called: a call that can only end if
    something else of the program runs while it is in flight."""
    opened = asyncio.Event()

    async def wait_gate(args: Any, ctx: RunContext) -> str:
        await opened.wait()
        return "opened"

    async def open_gate(args: Any, ctx: RunContext) -> None:
        opened.set()

    def tool(name: str, execute: Any) -> ToolDefinition:
        return define_tool(
            name,
            "A gate.",
            schema.Object({}),
            execute,
            kind=ToolKind.READ_ONLY,
            parallelism="shared",
            is_concurrency_safe=True,
        )

    return tool("wait_gate", wait_gate), tool("open_gate", open_gate)


def gate_executor(env: Env) -> Any:
    # A short timeout: should a lone call's wait ignore what else the program waits for, the
    # program hangs and fails with TIMEOUT instead of printing.
    return env.make(*gate_tools(), code_mode=CodeMode(pool_size=1, timeout=20))


async def test_a_timer_of_the_program_fires_while_a_lone_call_waits(env: Env) -> None:
    code = """
async def later():
    await asyncio.sleep(0.01)
    await tools.open_gate()

opener = asyncio.create_task(later())
await asyncio.sleep(0)  # later() now waits for its timer: the call below is all that is ready
print(await tools.wait_gate())
await opener
"""
    result = await run(gate_executor(env), code)
    assert result.ok, result.content
    assert result.value["stdout"] == "opened\n"
    assert [c["name"] for c in result.value["calls"]] == ["wait_gate", "open_gate"]


async def test_a_timeout_around_a_call_fires_and_the_program_goes_on(env: Env) -> None:
    code = """
try:
    await asyncio.wait_for(tools.wait_gate(), 0.05)
except asyncio.TimeoutError:
    print("timed out")
await tools.open_gate()
print(await tools.wait_gate())
"""
    result = await run(gate_executor(env), code)
    assert result.ok, result.content
    assert result.value["stdout"] == "timed out\nopened\n"
    assert [c["name"] for c in result.value["calls"]] == ["wait_gate", "open_gate", "wait_gate"]


async def test_another_file_descriptor_of_the_loop_is_served_while_a_lone_call_waits(
    env: Env,
) -> None:
    code = """
import os
loop = asyncio.get_running_loop()
readable, writable = os.pipe()
opening = []

def on_readable():
    loop.remove_reader(readable)
    os.read(readable, 1)
    opening.append(asyncio.ensure_future(tools.open_gate()))

loop.add_reader(readable, on_readable)
os.write(writable, b"x")  # ready now, but only the loop's next select would see it
print(await tools.wait_gate())
await opening[0]
"""
    result = await run(gate_executor(env), code)
    assert result.ok, result.content
    assert result.value["stdout"] == "opened\n"


async def test_arguments_json_cannot_carry_are_refused_and_the_next_call_goes(env: Env) -> None:
    code = """
looped = []
looped.append(looped)
for bad in ({"x": looped}, {"x": float("nan")}, {"x": object()}):
    try:
        await tools.open_gate(**bad)
    except ToolCallError as e:
        print(e.code)
await tools.open_gate()
print(await tools.wait_gate())
"""
    result = await run(gate_executor(env), code)
    assert result.ok, result.content
    assert result.value["stdout"] == "INVALID_ARGS\n" * 3 + "opened\n"
    assert [c["name"] for c in result.value["calls"]] == ["open_gate", "wait_gate"]


def sized_tool() -> ToolDefinition:
    """Returns ``"<n>:"`` then ``size`` letters, after yielding to the loop ``turns`` times (so
    calls made at once end in different turns of the parent's loop)."""

    async def sized(args: Any, ctx: RunContext) -> str:
        for _ in range(args["turns"]):
            await asyncio.sleep(0)
        return f"{args['n']}:" + "x" * int(args["size"])

    return define_tool(
        "sized",
        "A string of a given size.",
        schema.Object(
            {"n": schema.Integer(), "size": schema.Integer(), "turns": schema.Integer()},
            required=("n", "size", "turns"),
        ),
        sized,
        kind=ToolKind.READ_ONLY,
        parallelism="shared",
        is_concurrency_safe=True,
    )


async def test_calls_made_at_once_each_get_their_own_reply(env: Env) -> None:
    """The calls of one gather leave in one write and their replies come back in batches of
    those that ended in the same turn, some larger than the socket's buffer: each call still
    gets its own value, and the denied ones their error."""
    executor = env.make(
        sized_tool(),
        noop_tool("forbidden"),
        code_mode=CodeMode(pool_size=1, max_tool_calls=500),
        permissions=PermissionConfig(allow=("run_code", "sized"), deny=("forbidden",)),
    )
    code = """
async def denied():
    try:
        await tools.forbidden()
    except ToolCallError as e:
        return e.code

calls = [tools.sized(n=i, size=(300_000 if i % 10 == 0 else i), turns=i % 4) for i in range(120)]
values = await asyncio.gather(*calls, *(denied() for _ in range(5)))
for i, value in enumerate(values[:120]):
    size = 300_000 if i % 10 == 0 else i
    assert value == f"{i}:" + "x" * size, (i, value[:20])
print(values[120:])
"""
    result = await run(executor, code)
    assert result.ok, result.content
    assert result.value["stdout"] == str(["PERMISSION_DENIED"] * 5) + "\n"
    assert len(result.value["calls"]) == 125


async def test_a_call_the_program_did_not_wait_for_still_runs(env: Env) -> None:
    ran = asyncio.Event()

    async def mark(args: Any, ctx: RunContext) -> None:
        ran.set()

    marker = define_tool("mark", "Marks.", schema.Object({}), mark, kind=ToolKind.READ_ONLY)
    executor = env.make(marker, code_mode=CodeMode(pool_size=1))
    # The loop stops in the turn the call is made, before the callback that would send it.
    code = """
import asyncio

async def main():
    asyncio.get_running_loop().create_task(tools.mark())

loop = asyncio.new_event_loop()
loop.run_until_complete(main())
"""
    result = await run(executor, code)
    assert result.ok, result.content
    assert ran.is_set()
    assert [c["name"] for c in result.value["calls"]] == ["mark"]


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_the_worker_encodes_and_decodes_as_json_does(value: Any) -> None:
    line = worker.encode({"t": "call", "value": value})
    expected = json.dumps({"t": "call", "value": value}, separators=(",", ":"), ensure_ascii=False)
    assert line == (expected + "\n").encode()
    assert worker.decode(line[:-1]) == json.loads(expected)


def test_a_failed_encoding_leaves_the_encoder_as_new() -> None:
    looped: list[Any] = []
    looped.append(looped)
    for bad in ({"x": looped}, {"x": math.inf}, {"x": {1, 2}}):
        try:
            worker.encode(bad)
        except (TypeError, ValueError):
            pass
        else:
            raise AssertionError(f"{bad!r} was encoded")
    shared = [1]
    assert worker.encode({"a": shared, "b": shared}) == b'{"a":[1],"b":[1]}\n'


def test_decoding_refuses_what_is_not_one_json_value() -> None:
    for line in (b'{"t":"result"} x', b'{"t":', b""):
        try:
            worker.decode(line)
        except json.JSONDecodeError:
            continue
        raise AssertionError(f"{line!r} was decoded")
    assert worker.decode(b' {"id": 1} ') == {"id": 1}


def test_a_lone_calls_poll_sees_a_reply_already_there_and_gives_up_when_none_comes() -> None:
    """The poll before a lone call sleeps: it reports a reply that is there, and one that does
    not come within its limit (then the call waits asleep on the loop's selector)."""
    import socket
    import time

    ours, theirs = socket.socketpair()
    with ours, theirs:
        channel = worker.Channel(theirs)
        start = time.perf_counter()
        assert channel._poll(0.001) is False
        assert time.perf_counter() - start < 0.5  # bounded by the limit (and the yields)
        ours.sendall(b'{"t":"result","id":1,"ok":true,"value":null}\n')
        assert channel._poll(0.001) is True
        assert theirs.recv(4096).endswith(b"\n")  # polling read nothing: the reply is intact
