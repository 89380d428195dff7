"""``CodeMode``: the reserved ``run_code`` tool and the rules of code mode (SPEC §15)."""

from __future__ import annotations

import asyncio
import difflib
import fnmatch
import keyword
import logging
import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from fastgate import schema
from fastgate.codemode import _sandbox
from fastgate.codemode._admission import Programs, limits_of
from fastgate.codemode._pool import Pool, WorkerSpec
from fastgate.codemode._run import Run, WorkerExited, render
from fastgate.model import ErrorCode, ExecutionContext, ToolKind
from fastgate.pipeline import RunContext
from fastgate.tools import Output, ToolDefinition, define_tool

if TYPE_CHECKING:
    from fastgate.pipeline import ToolExecutor

log = logging.getLogger("fastgate.codemode")

RUN_CODE = "run_code"
_DESCRIPTION = " ".join(
    """
Run a Python program that calls tools. Top-level `await` works; each tool is an async function
of the `tools` object, called with keyword arguments:
`text = await tools.read(file_path="a.txt")`. A call returns the tool's value, or raises
`ToolCallError` (`.code`, `.message`) when it did not succeed; catch it to go on. Run calls at
once with `asyncio.gather(...)`. Print what you want to see: the result is the program's output
and one line per tool call. The program has no file system (but a scratch directory), no
network and no environment of its own: everything goes through the tools, each call checked
like a direct one.
""".split()
)
_JSON_TYPES = {
    "string": "str",
    "integer": "int",
    "number": "float",
    "boolean": "bool",
    "array": "list",
    "object": "dict",
    "null": "None",
}


class SandboxUnavailable(RuntimeError):
    """This host cannot confine a program as code mode requires (``require_sandbox=True``)."""


class CodeMode:
    """The model writes a program; each tool call in it goes through the executor's pipeline.

    Give it to ``ToolExecutor(code_mode=CodeMode(...))``, which plugs it in as its call
    interceptor (``fastgate.pipeline.interceptor``): it adds ``run_code`` and refuses direct
    calls of every other tool. ``allowed`` are the names (shell-style patterns) a program may
    call. One ``CodeMode`` serves one executor.
    """

    def __init__(
        self,
        allowed: Iterable[str] = ("*",),
        timeout: float = 30.0,
        memory_mb: int = 512,
        max_tool_calls: int = 100,
        max_output_chars: int = 30_000,
        pool_size: int = 2,
        require_sandbox: bool = True,
    ) -> None:
        if isinstance(allowed, str):
            raise TypeError("allowed: expected a sequence of tool-name patterns, not one string")
        self.allowed = tuple(allowed)
        for pattern in self.allowed:
            if not isinstance(pattern, str) or not pattern:
                raise TypeError(f"allowed: {pattern!r} is not a tool-name pattern")
        self.timeout = _positive(timeout, "timeout", float)
        self.memory_mb = _positive(memory_mb, "memory_mb", int)
        if self.memory_mb < 64:
            raise ValueError("memory_mb: the interpreter needs at least 64 MiB")
        self.max_tool_calls = _at_least_zero(max_tool_calls, "max_tool_calls")
        self.max_output_chars = _positive(max_output_chars, "max_output_chars", int)
        if self.max_output_chars < 200:
            raise ValueError("max_output_chars: at least 200 (room for the cut marker)")
        self.pool_size = _at_least_zero(pool_size, "pool_size")
        self.require_sandbox = bool(require_sandbox)
        self._executor: ToolExecutor | None = None
        self._tool: ToolDefinition | None = None
        self._pool: Pool | None = None
        self._live: dict[str, Run] = {}  # running programs, by their run_code execution id
        self._programs = Programs()  # how many run at once (the scheduler's caps)
        self._specs: dict[ToolDefinition, dict[str, Any]] = {}
        self._allowed: dict[str, bool] = {}

    # -- what the executor calls ----------------------------------------------------------------

    def attach(self, executor: ToolExecutor) -> Sequence[ToolDefinition]:
        """Bind to ``executor``: check the sandbox, start the warm workers, and return
        ``run_code`` for its registry. Raises ``SandboxUnavailable`` where programs cannot be
        confined and ``require_sandbox`` is set."""
        if self._executor is not None:
            raise ValueError("this CodeMode already serves an executor; make one per executor")
        if executor.registry.resolve(RUN_CODE) is not None:
            raise ValueError(f"{RUN_CODE!r} is reserved for code mode; the registry has one")
        spec = WorkerSpec(
            memory_mb=self.memory_mb,
            cpu_seconds=math.ceil(self.timeout) + 1,  # a backstop: the timeout stops it first
            landlock_abi=_sandbox.landlock_abi(),
            seccomp_arch=_sandbox.seccomp_arch(),
        )
        lacks = _sandbox.missing() if not (spec.landlock_abi and spec.seccomp_arch) else []
        if lacks and self.require_sandbox:
            raise SandboxUnavailable(
                "code mode cannot confine programs on this host: "
                + "; ".join(lacks)
                + ". Pass CodeMode(require_sandbox=False) to run them with process limits only."
            )
        if lacks:
            log.warning("code mode runs programs with process limits only: %s", "; ".join(lacks))
        self._tool = define_tool(
            RUN_CODE,
            _DESCRIPTION,
            schema.Object({"code": schema.String(min_length=1)}, required=("code",)),
            self._run,
            output=Output(render=render),
            kind=ToolKind.EXECUTE,
            timeout=self.timeout,
            path_args=(),
        )
        self._pool = Pool(spec, self.pool_size)
        self._pool.refill()
        self._executor = executor
        return (self._tool,)

    def judge(
        self,
        name: str,
        tool: ToolDefinition | None,
        parent_execution_id: str | None,
        ctx: ExecutionContext,
    ) -> tuple[ErrorCode, str, dict[str, Any]] | None:
        """Stage 2: a direct call of any tool but ``run_code``, or a program's call of a tool it
        may not call, is refused; ``None`` lets the call go on to the policy stages."""
        if parent_execution_id is None:  # a direct call
            if tool is None or tool is self._tool:
                return None
            if self._allows(name):
                message = (
                    f"Code mode is on: call {name} from a program, with {RUN_CODE} and "
                    f"`await tools.{_attr(name)}(...)` in its code."
                )
            else:
                message = (
                    f"Code mode is on: tools are called from {RUN_CODE} programs only, and "
                    f"{name} is not available to them."
                )
            return ErrorCode.PERMISSION_DENIED, message, {"reason": "code_mode"}
        if parent_execution_id not in self._live:
            message = f"{name} was called for a program that is not running."
            return ErrorCode.PERMISSION_DENIED, message, {"reason": "code_mode"}
        if tool is None or tool is self._tool or not self._allows(name):
            names = sorted(self._visible(ctx.agent_scope))
            close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
            if close:
                hint = "Did you mean " + " or ".join(repr(c) for c in close) + "?"
            else:
                hint = "Available: " + (", ".join(names[:30]) or "none") + "."
            message = f"There is no tool named {name!r} for programs. {hint}"
            return ErrorCode.UNKNOWN_TOOL, message, {"suggestions": close}
        return None

    def close(self) -> None:
        """Stop the warm workers; programs running finish. Idempotent."""
        if self._pool is not None:
            self._pool.close()

    async def aclose(self) -> None:
        self.close()

    # -- for the server -------------------------------------------------------------------------

    def describe(self, scope: str | None = None) -> str:
        """The tools a program may call in ``scope``, as Python stubs for the model's prompt."""
        stubs = []
        for definition in self._visible(scope).values():
            spec = self._spec(definition)
            stubs.append(f"async def {spec['attr']}({spec['signature']}) -> Any:")
            summary = definition.description.strip().split("\n\n")[0].replace('"""', "'''")
            if summary:
                stubs.append(f'    """{summary}"""')
        return "\n".join(stubs) or "# no tool is available to programs"

    def schemas(self, scope: str | None = None) -> list[dict[str, Any]]:
        """What a model in code mode is shown: ``run_code``, its description ending with the
        stubs of the tools it can call (current: tools registered later appear)."""
        if self._tool is None:
            raise RuntimeError("give this CodeMode to a ToolExecutor first")
        projected = self._tool.model_schema()
        projected["description"] += "\n\nTools:\n" + self.describe(scope)
        return [projected]

    def idle_workers(self) -> int:
        """Warm workers ready to take a program now."""
        return self._pool.idle() if self._pool is not None else 0

    def warm_workers(self) -> int:
        """Idle workers already confined and waiting: a run taking one starts at once."""
        return self._pool.confined_idle() if self._pool is not None else 0

    def worker_pids(self) -> list[int]:
        """The process ids of the warm workers (each is its process group's id)."""
        return self._pool.idle_pids() if self._pool is not None else []

    def waiting_runs(self) -> int:
        """Runs waiting for a program of their session, or of the executor, to end."""
        return self._programs.waiting()

    def program_pids(self) -> dict[str, int]:
        """The process of each program running now, by its run_code call's execution id."""
        return {execution_id: run.worker.pid for execution_id, run in self._live.items()}

    # -- one run ---------------------------------------------------------------------------------

    async def _run(self, args: Any, ctx: RunContext) -> Any:
        # A program is a process of up to memory_mb that takes no scheduler slot: how many run
        # at once is bounded by the scheduler's caps all the same (past them, a run waits).
        assert self._executor is not None
        session = ctx.context.session_id
        await self._programs.enter(session, *limits_of(self._executor.scheduler))
        try:
            return await self._run_program(args, ctx)
        finally:
            self._programs.leave(session)

    async def _run_program(self, args: Any, ctx: RunContext) -> Any:
        run = await self._ready_run(ctx)
        self._live[ctx.execution_id] = run
        try:
            run.send_program(args["code"], self._specs_for(ctx.context.agent_scope))
            assert self._pool is not None
            self._pool.refill_soon()  # its successor starts meanwhile
            try:
                await run.finish()
            except asyncio.CancelledError:  # timeout or the caller: calls first, then the program
                await run.cancel_calls()
                raise
            return run.outcome()
        finally:
            del self._live[ctx.execution_id]
            await _close(run)

    async def _ready_run(self, ctx: RunContext) -> Run:
        """A run on a confined worker: a warm one, or one started now (also when the warm one
        turns out to have died while it waited)."""
        executor, pool = self._executor, self._pool
        assert executor is not None and pool is not None
        warm = pool.take_idle()
        while True:
            worker = warm if warm is not None else await pool.start()
            run = Run(
                worker,
                executor,
                ctx.context,
                ctx.execution_id,
                self.max_tool_calls,
                self.max_output_chars,
            )
            try:
                run.start()
                report = await run.ready()
                self._check_sandbox(report)
                if report.get("threads") == "supervised" and run.worker.listener is None:
                    raise SandboxUnavailable(
                        "the code-mode worker's ready message came without the listener of "
                        "its new threads; the program was not run"
                    )
                return run
            except WorkerExited:
                await _close(run)
                if warm is None:
                    raise
                warm = None  # start one instead
            except BaseException:
                await _close(run)
                raise

    def _check_sandbox(self, report: dict[str, Any]) -> None:
        errors = report.get("errors") or []
        if errors:
            log.warning("code-mode worker could not confine itself fully: %s", errors)
        if not self.require_sandbox:
            return
        missing = [
            layer
            for layer in ("no_new_privs", "capabilities", "landlock", "seccomp")
            if not report.get(layer)
        ]
        if missing or errors:
            raise SandboxUnavailable(
                "the code-mode worker could not confine itself ("
                + "; ".join([*map(str, errors), *(f"no {layer}" for layer in missing)])
                + "); the program was not run"
            )

    def _allows(self, name: str) -> bool:
        allowed = self._allowed.get(name)  # asked on every call from a program: remembered
        if allowed is None:
            if len(self._allowed) > 4096:
                self._allowed.clear()
            allowed = name != RUN_CODE and any(fnmatch.fnmatchcase(name, p) for p in self.allowed)
            self._allowed[name] = allowed
        return allowed

    def _visible(self, scope: str | None) -> dict[str, ToolDefinition]:
        assert self._executor is not None
        visible = self._executor.registry.visible(scope)
        return {n: d for n, d in sorted(visible.items()) if d is not self._tool and self._allows(n)}

    def _specs_for(self, scope: str | None) -> list[dict[str, Any]]:
        specs = []
        for definition in self._visible(scope).values():
            spec = self._spec(definition)
            specs.append({"name": spec["name"], "attr": spec["attr"], "doc": spec["doc"]})
        return specs

    def _spec(self, definition: ToolDefinition) -> dict[str, Any]:
        spec = self._specs.get(definition)  # definitions are frozen: worked out once
        if spec is None:
            if len(self._specs) > 4096:
                self._specs.clear()
            signature = _signature(definition.input_schema)
            attr = _attr(definition.name)
            doc = f"{attr}({signature})\n\n{definition.description}".rstrip()
            spec = {"name": definition.name, "attr": attr, "signature": signature, "doc": doc}
            self._specs[definition] = spec
        return spec


async def _close(run: Run) -> None:
    """Stop the run's worker and wait until it is reaped (its ends released then)."""
    run.detach()
    run.stop()
    try:
        await run.reaped()
    finally:
        run.release_when_reaped()


def _attr(name: str) -> str:
    """The attribute of ``tools`` for a tool name (``-`` becomes ``_``; keywords get a ``_``)."""
    attr = name.replace("-", "_")
    if not attr.isidentifier():
        attr = "_" + attr
    return attr + "_" if keyword.iskeyword(attr) else attr


def _signature(input_schema: dict[str, Any]) -> str:
    properties = input_schema.get("properties")
    if not isinstance(properties, dict) or not properties:
        return "**kwargs" if input_schema.get("additionalProperties") is not False else ""
    required = set(input_schema.get("required") or ())
    params = []
    for pname, pschema in properties.items():
        kind = pschema.get("type") if isinstance(pschema, dict) else None
        if isinstance(kind, list):
            hint = " | ".join(_JSON_TYPES.get(k, "Any") for k in kind)
        else:
            hint = _JSON_TYPES.get(kind, "Any") if isinstance(kind, str) else "Any"
        params.append(f"{pname}: {hint}" + ("" if pname in required else " = ..."))
    params.sort(key=lambda p: p.endswith("= ..."))  # required ones first
    return "*, " + ", ".join(params)


def _positive(value: Any, name: str, kind: type) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{name}: expected a positive number, got {value!r}")
    if kind is int and not isinstance(value, int):
        raise ValueError(f"{name}: expected a whole number, got {value!r}")
    if kind is float and not math.isfinite(value):
        raise ValueError(f"{name}: expected a finite number, got {value!r}")
    return kind(value)


def _at_least_zero(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name}: expected a whole number >= 0, got {value!r}")
    return value
