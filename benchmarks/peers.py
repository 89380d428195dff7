"""Per-call cost of one no-op tool through peer frameworks and through fastgate, in one run.

The tool is ``concat(a: str, b: str) -> str`` returning ``a + b``. It is called through:

- ``openai-agents``: the ``FunctionTool`` built by ``@function_tool``, via ``on_invoke_tool``,
  with the call's own ``ToolContext`` made the way the SDK's runner makes one for every tool
  call (``ToolContext.from_agent_context`` on the run's context): a ``ToolContext`` names one
  call (its id and argument text), so a server cannot reuse one across calls;
- ``pydantic-ai``: ``ToolManager.handle_call`` for a ``FunctionToolset`` holding the function;
- ``langgraph``: ``ToolNode.ainvoke`` on a state holding one ``AIMessage`` with one tool call;
- ``fastgate``: ``ToolExecutor.execute``, the full pipeline, with the session's
  ``ExecutionContext`` (it names a session, not a call, so one serves every call);
- ``fastgate-usual``: the same call spelled as the README and the spec teach it: the tool made
  with ``define_tool`` from a raw JSON Schema (``READ_ONLY``, ``parallelism="shared"``, no
  ``is_concurrency_safe``), the executor given ``context_defaults``, and a new
  ``ExecutionContext(session_id=..., workspace_root=...)`` made inside every timed call;
- ``direct``: ``await asyncio.create_task(concat(a="x", b="y"))``, the reference.

Context rows, never counted as peers in the targets:

- ``openai+one-ctx``: ``on_invoke_tool`` given the same ``ToolContext`` on every call (what
  the SDK's function tool costs by itself);
- ``fastgate+ctx-each``: a new ``ExecutionContext`` for every call;
- ``fastgate+timeout`` and ``openai+own-task``: each body in a task of its own under a 60 s
  deadline on both sides (the tool defined with ``timeout=60``; ``on_invoke_tool`` in
  ``ensure_future`` + ``wait_for``, as the SDK's runner enforces a tool's ``timeout_seconds``).

Every path is measured in this process, in alternating rounds, and reported as the median
per-call time and as ratios to fastgate and to the direct reference. Absolute times only mean
something next to each other, on this machine, in this run (docs/decisions.md, "Benchmarks").

Before a path is timed it must prove that it validates arguments: a call with a missing
argument, and one whose arguments have the wrong type but would still work in the body
(``["x"] + ["y"]``), must both come back as errors through that same path. A path that fails
the check is not measured.

The peers are optional (``pip install -e '.[peers]'``); a missing one is skipped with a message.
Neither the library nor the tests import this script::

    python benchmarks/peers.py [--loop asyncio|uvloop] [--rounds N] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import importlib.metadata
import json
import logging
import os
import platform
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import fastgate

GOOD: dict[str, Any] = {"a": "x", "b": "y"}
TIMEOUT = 60.0  # seconds, for the context rows with a deadline (never reached)
EXPECTED = "xy"
# Both must be rejected by validation. The wrong types would not fail in the body (a list plus a
# list is a list), so an error here can only come from argument validation.
PROBES: dict[str, dict[str, Any]] = {
    "missing argument": {"a": "x"},
    "wrong types": {"a": ["x"], "b": ["y"]},
}


async def concat(a: str, b: str) -> str:
    """Concatenate two strings.

    Args:
        a: The first string.
        b: The second string.
    """
    return a + b


Call = Callable[[], Awaitable[object]]
Outcome = tuple[bool, str]  # (succeeded, the value or the error as text)


@dataclass
class Path:
    """One way of calling the tool. ``call`` is what is timed: the same precomputed input on
    every call. ``outcome`` runs the same path with any arguments and says how it ended."""

    name: str
    how: str
    call: Call
    outcome: Callable[[dict[str, Any]], Awaitable[Outcome]] | None = None
    samples: list[float] = field(default_factory=list)  # seconds per call, one per round
    # A context row: shown for comparison, never counted as a peer in the targets.
    context: bool = False


class Unavailable(Exception):
    """The path cannot be built in this environment (a peer not installed, ...)."""


def _import(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise Unavailable(f"{name} is not importable ({exc})") from exc


def _short(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text[:160]}"


# -- the paths ------------------------------------------------------------------------------------


def direct_path() -> Path:
    return Path(
        "direct",
        "await asyncio.create_task(concat(a=..., b=...))",
        lambda: asyncio.create_task(concat(a="x", b="y")),
    )


def fastgate_path(timeout: float | None = None, context_each_call: bool = False) -> Path:
    try:
        executor_class = fastgate.ToolExecutor  # type: ignore[attr-defined,unused-ignore]
        context_class = fastgate.ExecutionContext  # type: ignore[attr-defined,unused-ignore]
    except AttributeError:
        try:
            executor_class = _import("fastgate.pipeline.executor").ToolExecutor
            context_class = _import("fastgate.model.context").ExecutionContext
        except (Unavailable, AttributeError) as exc:
            raise Unavailable(f"fastgate.ToolExecutor is not available yet ({exc})") from exc
    definition = fastgate.tool(
        kind=fastgate.ToolKind.READ_ONLY,
        parallelism="shared",
        is_concurrency_safe=True,
        timeout=timeout,
    )(concat)
    registry = fastgate.ToolRegistry()
    registry.register(definition)
    executor = executor_class(registry)
    # A server names each session's workspace; without one every call would ask os.getcwd().
    workspace = os.getcwd()
    ctx = context_class(session_id="s1", workspace_root=workspace)
    args = dict(GOOD)

    def call() -> Awaitable[object]:
        return executor.execute("concat", args, ctx)

    def call_with_own_context() -> Awaitable[object]:
        return executor.execute(
            "concat", args, context_class(session_id="s1", workspace_root=workspace)
        )

    async def outcome(arguments: dict[str, Any]) -> Outcome:
        result = await executor.execute("concat", arguments, ctx)
        if result.ok or result.error is None:
            return True, str(result.value if result.value is not None else result.content)
        return False, f"{result.error.code}: {result.error.message}"

    name = f"fastgate{'' if fastgate.COMPILED else ' (pure)'}"
    how = "ToolExecutor.execute (full pipeline), @fastgate.tool READ_ONLY shared"
    if timeout is not None:
        name, how = f"{name}+timeout", f"{how}, timeout={timeout:g} s"
    if context_each_call:
        name, how = f"{name}+ctx-each", f"{how}, a new ExecutionContext per call"
        return Path(name, how, call_with_own_context, outcome, context=True)
    return Path(name, how, call, outcome, context=timeout is not None)


CONCAT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "a": {"type": "string", "description": "The first string."},
        "b": {"type": "string", "description": "The second string."},
    },
    "required": ["a", "b"],
    "additionalProperties": False,
}


def fastgate_usual_path() -> Path:
    """The usual spelling (see the module docstring): a peer row, its context made per call."""

    async def execute(args: Any, ctx: Any) -> str:
        return await concat(args["a"], args["b"])

    definition = fastgate.define_tool(
        "concat",
        "Concatenate two strings.",
        CONCAT_SCHEMA,
        execute,
        kind=fastgate.ToolKind.READ_ONLY,
        parallelism="shared",
    )
    registry = fastgate.ToolRegistry()
    registry.register(definition)
    workspace = os.getcwd()
    executor = fastgate.ToolExecutor(
        registry, context_defaults={"session_id": "default", "workspace_root": workspace}
    )
    context_class = fastgate.ExecutionContext
    args = dict(GOOD)

    def call() -> Awaitable[object]:
        return executor.execute(
            "concat", args, context_class(session_id="s1", workspace_root=workspace)
        )

    async def outcome(arguments: dict[str, Any]) -> Outcome:
        ctx = context_class(session_id="s1", workspace_root=workspace)
        result = await executor.execute("concat", arguments, ctx)
        if result.ok or result.error is None:
            return True, str(result.value if result.value is not None else result.content)
        return False, f"{result.error.code}: {result.error.message}"

    name = f"fastgate-usual{'' if fastgate.COMPILED else ' (pure)'}"
    how = (
        "define_tool(raw JSON Schema) READ_ONLY shared, context_defaults, "
        "a new ExecutionContext(session_id, workspace_root) per call"
    )
    return Path(name, how, call, outcome)


def fastgate_timeout_path() -> Path:
    """Context: the same call with a deadline, to set beside the SDK's own-task path."""
    return fastgate_path(timeout=TIMEOUT)


def fastgate_context_each_call_path() -> Path:
    """Context: the same call with a new ``ExecutionContext`` each time."""
    return fastgate_path(context_each_call=True)


def _agents_error_text(ctx: Any, error: Exception) -> str:
    return f"error: {_short(error)}"


class _AgentsTool:
    """The SDK's function tool for ``concat``, and each call's ``ToolContext`` for it."""

    def __init__(self, timeout: float | None = None) -> None:
        agents = _import("agents")
        self._tool_context = _import("agents.tool_context").ToolContext
        # The SDK logs a tool error without an active trace as a warning; the probes make a few.
        logging.getLogger("openai.agents").setLevel(logging.ERROR)
        # Failures come back as the failure_error_function's text. The default one hides the
        # cause; this one names it, so the probes can show the error is a validation error.
        # Only a failure calls it: the timed call runs exactly the default path.
        options: dict[str, Any] = {"failure_error_function": _agents_error_text}
        if timeout is not None:
            options["timeout"] = timeout
        self.tool = agents.function_tool(concat, **options)
        self.run_context = agents.RunContextWrapper(context=None)  # one per run
        self.payload = json.dumps(GOOD)

    def context_of(self, call_id: str, text: str) -> Any:
        """A call's own ``ToolContext``, made as the runner makes it for every tool call."""
        return self._tool_context.from_agent_context(
            self.run_context, call_id, tool_name=self.tool.name, tool_arguments=text
        )

    async def outcome(self, arguments: dict[str, Any]) -> Outcome:
        text = json.dumps(arguments)
        value = await self.tool.on_invoke_tool(self.context_of("call_2", text), text)
        return value == EXPECTED, str(value)


def openai_agents_path() -> Path:
    sdk = _AgentsTool()
    tool, payload = sdk.tool, sdk.payload
    return Path(
        "openai-agents",
        "@function_tool -> FunctionTool.on_invoke_tool(the call's ToolContext, json)",
        lambda: tool.on_invoke_tool(sdk.context_of("call_1", payload), payload),
        sdk.outcome,
    )


def openai_agents_one_context_path() -> Path:
    """Context: the function tool alone, handed the same ``ToolContext`` on every call. Not a
    peer for the targets: a ``ToolContext`` carries one call's id and arguments, so the SDK
    makes one per call (the peer row)."""
    sdk = _AgentsTool()
    tool, payload = sdk.tool, sdk.payload
    ctx = sdk.context_of("call_1", payload)
    return Path(
        "openai+one-ctx",
        "on_invoke_tool with one ToolContext made once and reused for every call",
        lambda: tool.on_invoke_tool(ctx, payload),
        sdk.outcome,
        context=True,
    )


def openai_agents_own_task_path() -> Path:
    """Context: ``on_invoke_tool`` run the way the SDK's runner enforces a tool's
    ``timeout_seconds`` (``agents.tool.invoke_function_tool``: ``ensure_future`` then
    ``wait_for``), its only way of running a tool body in a task of its own, as SPEC 9.1 has
    fastgate do for every call. The runner's function itself is not timed: it adds far more than
    the task (43 us against 5 us for ``on_invoke_tool`` handed a ready ``ToolContext``, in a
    quick check). Not a peer for the targets: the peer is the default ``on_invoke_tool``
    path."""
    sdk = _AgentsTool(timeout=TIMEOUT)
    tool, payload = sdk.tool, sdk.payload

    async def own_task(call_ctx: Any, text: str) -> Any:
        body = asyncio.ensure_future(tool.on_invoke_tool(call_ctx, text))
        return await asyncio.wait_for(body, timeout=TIMEOUT)

    async def outcome(arguments: dict[str, Any]) -> Outcome:
        text = json.dumps(arguments)
        value = await own_task(sdk.context_of("call_2", text), text)
        return value == EXPECTED, str(value)

    return Path(
        "openai+own-task",
        f"on_invoke_tool in ensure_future + wait_for({TIMEOUT:g} s), as the SDK's runner does",
        lambda: own_task(sdk.context_of("call_1", payload), payload),
        outcome,
        context=True,
    )


async def _pydantic_ai_manager() -> Any:
    pai = _import("pydantic_ai")
    toolsets = _import("pydantic_ai.toolsets")
    tool_manager = _import("pydantic_ai.tool_manager")
    test_model = _import("pydantic_ai.models.test")
    usage = _import("pydantic_ai.usage")
    # max_retries=1 is an Agent's default: a validation error becomes a retry prompt.
    toolset = toolsets.FunctionToolset([concat], max_retries=1)
    run_ctx = pai.RunContext(deps=None, model=test_model.TestModel(), usage=usage.RunUsage())
    return await tool_manager.ToolManager(toolset).for_run_step(run_ctx)


async def pydantic_ai_path() -> Path:
    messages = _import("pydantic_ai.messages")
    manager = await _pydantic_ai_manager()
    part = messages.ToolCallPart("concat", json.dumps(GOOD), "call_1")

    async def outcome(arguments: dict[str, Any]) -> Outcome:
        # A fresh manager: a failed call is counted against the step's retry budget.
        probe_manager = await _pydantic_ai_manager()
        probe = messages.ToolCallPart("concat", json.dumps(arguments), "call_2")
        try:
            return True, str(await probe_manager.handle_call(probe))
        except Exception as exc:
            return False, _short(exc)

    return Path(
        "pydantic-ai",
        "ToolManager(FunctionToolset).for_run_step(RunContext).handle_call(ToolCallPart)",
        lambda: manager.handle_call(part),
        outcome,
    )


def langgraph_path() -> Path:
    prebuilt = _import("langgraph.prebuilt")
    runtime_module = _import("langgraph.runtime")
    lc_messages = _import("langchain_core.messages")
    lc_tools = _import("langchain_core.tools")
    node = prebuilt.ToolNode([lc_tools.tool(concat)])
    # Outside a graph ToolNode needs the runtime a graph would inject; an empty one is enough.
    runtime = runtime_module.Runtime()

    def state(arguments: dict[str, Any], call_id: str) -> dict[str, Any]:
        call = {"name": "concat", "args": arguments, "id": call_id, "type": "tool_call"}
        return {"messages": [lc_messages.AIMessage(content="", tool_calls=[call])]}

    good = state(dict(GOOD), "call_1")

    async def outcome(arguments: dict[str, Any]) -> Outcome:
        try:
            reply = await node.ainvoke(state(arguments, "call_2"), runtime=runtime)
        except Exception as exc:
            return False, _short(exc)
        message = reply["messages"][0]
        ok = getattr(message, "status", "success") != "error"
        return ok, str(message.content)

    return Path(
        "langgraph",
        "ToolNode([tool]).ainvoke({'messages': [AIMessage(tool_calls=[...])]})",
        lambda: node.ainvoke(good, runtime=runtime),
        outcome,
    )


async def build_paths() -> tuple[list[Path], list[str]]:
    """Every path that can be built and passes its checks, and a note for each one that can't."""
    builders: list[tuple[str, Callable[[], Path | Coroutine[Any, Any, Path]]]] = [
        ("fastgate", fastgate_path),
        ("fastgate-usual", fastgate_usual_path),
        ("openai-agents", openai_agents_path),
        ("pydantic-ai", pydantic_ai_path),
        ("langgraph", langgraph_path),
        ("direct", direct_path),
        ("openai+one-ctx", openai_agents_one_context_path),
        ("fastgate+ctx-each", fastgate_context_each_call_path),
        ("fastgate+timeout", fastgate_timeout_path),
        ("openai+own-task", openai_agents_own_task_path),
    ]
    paths: list[Path] = []
    notes: list[str] = []
    for label, build in builders:
        try:
            built = build()
            path = await built if asyncio.iscoroutine(built) else built
            assert isinstance(path, Path)
            problem = await check(path)
        except Unavailable as exc:
            notes.append(f"{label}: skipped, {exc}")
            continue
        except Exception as exc:
            notes.append(f"{label}: skipped, building or checking it failed: {_short(exc)}")
            continue
        if problem is not None:
            notes.append(f"{label}: NOT MEASURED, {problem}")
            continue
        paths.append(path)
    return paths, notes


async def check(path: Path) -> str | None:
    """``None`` when the path returns the right value and rejects every probe."""
    value = await path.call()
    if value is None:
        return "the timed call returned nothing"
    if path.outcome is None:  # the direct reference: nothing to validate
        return None if value == EXPECTED else f"returned {value!r}"
    ok, text = await path.outcome(dict(GOOD))
    if not ok or EXPECTED not in text:
        return f"a good call did not return {EXPECTED!r}: {text}"
    for probe, arguments in PROBES.items():
        ok, text = await path.outcome(arguments)
        if ok:
            return f"it does not validate arguments ({probe} gave {text!r})"
        print(f"  check {path.name:<14} {probe:<17} -> {' '.join(text.split())[:90]}")
    return None


# -- measurement ----------------------------------------------------------------------------------


async def timed(call: Call, n: int) -> float:
    """Seconds per call over ``n`` back-to-back calls."""
    start = time.perf_counter()
    for _ in range(n):
        await call()
    return (time.perf_counter() - start) / n


async def calibrate(call: Call, seconds: float) -> float:
    """Warm the path up for about ``seconds``; the per-call time of the last stretch."""
    per_call = await timed(call, 10)
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        n = max(10, int(min(seconds / 4, 0.05) / max(per_call, 1e-7)))
        per_call = await timed(call, n)
    return per_call


async def measure(paths: list[Path], rounds: int, round_seconds: float, warmup: float) -> None:
    counts: dict[str, int] = {}
    for path in paths:
        per_call = await calibrate(path.call, warmup)
        counts[path.name] = max(20, int(round_seconds / per_call))
    # Everything built so far (the peers' imports are large) is left out of later collections,
    # so the collection between two batches only walks the garbage the batches made.
    gc.collect()
    gc.freeze()
    for index in range(rounds):
        shift = index % len(paths)  # rotate the order so no path always runs first or last
        for path in paths[shift:] + paths[:shift]:
            gc.collect()  # nobody pays for another path's garbage
            path.samples.append(await timed(path.call, counts[path.name]))


# -- report ---------------------------------------------------------------------------------------


def _quartiles(samples: list[float]) -> tuple[float, float, float]:
    if len(samples) < 2:
        return samples[0], samples[0], samples[0]
    q1, q2, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    return q1, q2, q3


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def report(paths: list[Path], notes: list[str], loop_name: str) -> dict[str, Any]:
    medians = {p.name: _quartiles(p.samples)[1] for p in paths}
    compared = {p.name: medians[p.name] for p in paths if not p.context}
    fg = next((m for name, m in compared.items() if name.startswith("fastgate")), None)
    direct = medians.get("direct")
    rows: list[dict[str, Any]] = []
    for path in sorted(paths, key=lambda p: medians[p.name]):
        q1, q2, q3 = _quartiles(path.samples)
        rows.append(
            {
                "path": path.name,
                "how": path.how,
                "median_us": q2 * 1e6,
                "iqr_us": [q1 * 1e6, q3 * 1e6],
                "vs_fastgate": q2 / fg if fg else None,
                "vs_direct": q2 / direct if direct else None,
                "rounds": len(path.samples),
                "context": path.context,
            }
        )
    versions = {
        d: _version(d)
        for d in ("fastgate", "openai-agents", "pydantic-ai-slim", "langgraph", "langchain-core")
    }
    print()
    print(
        f"Python {platform.python_version()}, loop {loop_name}, fastgate "
        f"{'compiled' if fastgate.COMPILED else 'pure'}; "
        + ", ".join(f"{d} {v}" for d, v in versions.items() if d != "fastgate")
    )
    print(f"{'path':<18}{'us/call':>10}{'IQR (us)':>18}{'/ fastgate':>12}{'/ direct':>10}")

    def ratio(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}x"

    for row in rows:
        low, high = row["iqr_us"]
        print(
            f"{row['path']:<18}{row['median_us']:>10.2f}{f'{low:.2f}-{high:.2f}':>18}"
            f"{ratio(row['vs_fastgate']):>12}{ratio(row['vs_direct']):>10}"
        )
    print("(medians over alternating rounds; absolute times only compare within this run)")
    for row in rows:
        print(f"  {row['path']:<18} {row['how']}")
    targets = _targets(compared, fg) + _own_task_context(medians)
    for line in targets:
        print(line)
    for note in notes:
        print(note)
    return {
        "python": platform.python_version(),
        "loop": loop_name,
        "fastgate_compiled": fastgate.COMPILED,
        "versions": versions,
        "rows": rows,
        "targets": targets,
        "notes": notes,
    }


# A fastgate row's time over the fastest peer's: the bar for a compiled core sold as faster.
PEER_BOUND = 0.67


def _targets(medians: dict[str, float], fg: float | None) -> list[str]:
    """The peer targets, read off this run: every fastgate row at most ``PEER_BOUND`` of the
    fastest peer's time and at least 20x faster than LangGraph."""
    peers = {n: m for n, m in medians.items() if not n.startswith("fastgate") and n != "direct"}
    ours = {n: m for n, m in medians.items() if n.startswith("fastgate")}
    if fg is None or not peers:
        return []
    fastest = min(peers, key=peers.__getitem__)
    lines = [
        f"target: {name} <= {PEER_BOUND}x the fastest peer ({fastest}): "
        f"{'met' if time <= PEER_BOUND * peers[fastest] else 'NOT met'} ({time * 1e6:.2f} vs "
        f"{peers[fastest] * 1e6:.2f} us, {time / peers[fastest]:.2f}x)"
        for name, time in ours.items()
    ]
    direct = medians.get("direct")
    if direct is not None:
        # Not the target, which counts the whole call: what the pipeline adds to the body's own
        # task (SPEC 9.1 runs every body in one; the peers call it inline), for comparison.
        lines.append(
            f"context: fastgate minus the direct task = {(fg - direct) * 1e6:.2f} us vs "
            f"{fastest} {peers[fastest] * 1e6:.2f} us"
        )
    if "langgraph" in peers:
        for name, time in ours.items():
            factor = peers["langgraph"] / time
            lines.append(
                f"target: langgraph >= 20x {name}: {'met' if factor >= 20 else 'NOT met'} "
                f"({factor:.1f}x)"
            )
    return lines


def _own_task_context(medians: dict[str, float]) -> list[str]:
    """Both sides running the body in a task of its own under a deadline (context, no target)."""
    ours = next((m for name, m in medians.items() if name.endswith("+timeout")), None)
    theirs = medians.get("openai+own-task")
    if ours is None or theirs is None:
        return []
    return [
        f"context: with a {TIMEOUT:g} s timeout, each body in its own task: fastgate "
        f"{ours * 1e6:.2f} us vs openai-agents {theirs * 1e6:.2f} us ({ours / theirs:.2f}x)"
    ]


# -- entry point ----------------------------------------------------------------------------------


def _loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    if name == "asyncio":
        return None
    import uvloop

    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def _default_loop() -> str:
    try:
        importlib.import_module("uvloop")
    except ImportError:
        return "asyncio"
    return "uvloop"


async def run(args: argparse.Namespace) -> tuple[dict[str, Any], bool]:
    print("checking that every path validates its arguments:")
    paths, notes = await build_paths()
    if not paths:
        print("\n".join(notes))
        return {"notes": notes}, False
    await measure(paths, args.rounds, args.round_ms / 1000, args.warmup_ms / 1000)
    data = report(paths, notes, args.loop)
    return data, not any("NOT MEASURED" in note for note in notes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--loop", choices=("asyncio", "uvloop"), default=_default_loop())
    parser.add_argument("--rounds", type=int, default=20, help="alternating rounds (20)")
    parser.add_argument("--round-ms", type=float, default=25.0, help="time per path per round")
    parser.add_argument("--warmup-ms", type=float, default=200.0, help="warm-up per path")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.round_ms <= 0 or args.warmup_ms < 0:
        parser.error("--rounds must be >= 1, --round-ms > 0 and --warmup-ms >= 0")
    if args.loop == "uvloop" and _default_loop() != "uvloop":
        parser.error("uvloop is not installed")
    with asyncio.Runner(loop_factory=_loop_factory(args.loop)) as runner:
        data, clean = runner.run(run(args))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(data, out, indent=2)
            out.write("\n")
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
