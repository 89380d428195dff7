"""``ToolExecutor``: a model's tool call becomes a controlled side effect (SPEC §4).

``_pipeline`` is the whole story, in the fixed stage order, as one function. Each stage either
passes the call on or ends it with a ``ToolResult``; every result, refusal or not, goes through
stage 15 (``_finalize``). ``execute`` raises only for the caller's programming errors (wrong
types) and for ``CancelledError`` when the awaiting task itself is cancelled.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import msgspec

from fastgate._mypyc import mypyc_attr
from fastgate.admission.gate import ToolConcurrencyGate
from fastgate.admission.holds import Aborted, Holds, until_cancelled
from fastgate.admission.locks import FileLockManager, default_lock_manager
from fastgate.admission.protocol import AsyncHold
from fastgate.admission.scheduler import ConcurrencyScheduler, default_scheduler
from fastgate.durable.store import ToolUseRecord, ToolUseStore, unrecordable
from fastgate.errors import USER_CODE_ERRORS, GateClosed, ResourceExhausted, SchedulerClosed
from fastgate.hooks import (
    UNSET,
    Hooks,
    PostToolUseEvent,
    PostToolUseFailureEvent,
    PreToolUseEvent,
    run_post_tool_use,
    run_post_tool_use_failure,
    run_pre_tool_use,
)
from fastgate.model.approvals import ApprovalRequest
from fastgate.model.context import ExecutionContext, ToolCall, with_idempotency_key
from fastgate.model.decision import Decision, DecisionSource, PermissionMode
from fastgate.model.freeze import SCALAR_TYPES, FrozenDict, NotJSON, freeze
from fastgate.model.kinds import ToolKind
from fastgate.model.rendering import (
    DEFAULT_MAX_CONTENT_CHARS,
    RenderError,
    bounded_blocks,
    bounded_details,
    cut,
    exception_line,
    render,
)
from fastgate.model.results import ErrorCode, ResultMeta, ToolError, ToolResult
from fastgate.paths.canonical import (
    DeclaredPathsError,
    absolute_path,
    canonical_path,
    consistent_paths,
    declared_paths,
    given_paths,
    lock_key,
    names_any,
)
from fastgate.paths.worktree import check_given_paths
from fastgate.permissions import (
    AuditEvent,
    AuditSink,
    NetworkAuditEvent,
    PermissionConfig,
    PermissionResolver,
    RuleDecision,
)
from fastgate.permissions.approval_store import ApprovalStore
from fastgate.permissions.asking import Refusal, ask_approval, remember_approval
from fastgate.permissions.guards import Guard, ToolCallView, run_guards
from fastgate.permissions.merge import merge_decision
from fastgate.pipeline import refusals as _refusals
from fastgate.pipeline.autoverify import AutoVerify
from fastgate.pipeline.body import BodyContext
from fastgate.pipeline.history import History, ToolStats
from fastgate.pipeline.invocation import (
    ABORTED,
    ERROR,
    FAILURE,
    TIMEOUT,
    VALUE,
    Outcome,
    invoke,
    is_async_tool,
)
from fastgate.pipeline.journal import KeyLease, RecordPlace, claim_key
from fastgate.pipeline.progress import ProgressEvent, ProgressHub
from fastgate.pipeline.refusals import failure_of
from fastgate.pipeline.tracing import CallTrace, CallTracer
from fastgate.schema import compile as compile_schema
from fastgate.tools import ToolDefinition
from fastgate.tools._definition import admitted_names
from fastgate.tools.registry import ToolRegistry

if TYPE_CHECKING:
    from fastgate.pipeline.interceptor import CallInterceptor

log = logging.getLogger("fastgate.pipeline.executor")

TURN_LIMIT = 64
_TRACKED_TURNS = 4096  # turns whose call counts are remembered (oldest forgotten first)
_IDS_PER_READ = 128  # execution ids drawn from one read of the OS's random source
_CACHE_LIMIT = 1024  # entries of the per-executor caches before they are cleared
_GATE_SWEEP_MIN = 256  # session gates kept before idle ones are first swept
_NO_CONTEXT: Final = ExecutionContext()  # what a call without a context gets (frozen: shared)
_DISPOSED: Final = "this executor has been disposed"
# Read on every call, so bound once: compiled, a Final is a C static. A clock is otherwise two
# lookups (module, attribute); an Enum member is a slow one (EnumType defines __getattr__).
_wall_clock: Final = time.time
_perf_clock: Final = time.perf_counter
_DENY: Final = Decision.DENY
_ASK: Final = Decision.ASK
_YOLO: Final = PermissionMode.YOLO
_READ_ONLY: Final = ToolKind.READ_ONLY
_RESULT_META: Final = ResultMeta
_TOOL_RESULT: Final = ToolResult
_FROZEN_DICT: Final = FrozenDict
_SCALAR_TYPES: Final = SCALAR_TYPES


# Pauses before a failed result write is tried again (None: given up), while the call's claim
# is held: a completed call whose result is lost is an ambiguous outcome for every repeat.
_RESULT_RETRY_PAUSES: Final = (0.05, 0.25, 1.0, None)
UNKNOWN_TOOLS: Final = "(unknown tools)"
"""The ``stats()`` entry of the calls of names no tool has."""
_LONGEST_TOOL_NAME: Final = 64  # a registered name is at most this long


class _Call:
    """The state of one execution as it moves through the stages."""

    __slots__ = (
        "aborted_before_launch",
        "additional_context",
        "args",
        "attempts",
        "call_id",
        "checked_paths",
        "ctx",
        "decision",
        "decision_reason",
        "decision_source",
        "execution_id",
        "hook_decision",
        "hook_reason",
        "launched",
        "lease",
        "lock_keys",
        "name",
        "parent_execution_id",
        "place",
        "plan",
        "recorded",
        "rule",
        "started_at",
        "t0",
        "trace",
        "unknown",
    )

    rule: RuleDecision  # stage 6's (after a hook's rewrite, the stricter); read from stage 8 on

    def __init__(
        self, execution_id: str, name: str, call_id: str | None, ctx: ExecutionContext
    ) -> None:
        self.execution_id = execution_id
        self.name = name
        self.call_id = call_id
        self.ctx = ctx
        self.started_at = _wall_clock()
        self.t0 = _perf_clock()
        self.plan: _Plan | None = None  # once the tool is known
        self.args: Any = None
        self.attempts = 0
        self.aborted_before_launch = False
        self.launched = False  # the body may have run: its task started and took a step
        self.unknown = False  # the lookup (stage 2) found no tool of this name
        self.decision: Decision | None = None
        self.decision_source: DecisionSource | None = None
        self.decision_reason = ""  # the merged decision's reason (stage 8), for an approval
        self.hook_decision: Decision | None = None  # what the PreToolUse hooks said (stage 7)
        self.hook_reason: str | None = None
        self.additional_context: tuple[str, ...] = ()  # rarely added to: a tuple is cheaper
        self.lock_keys: tuple[str, ...] = ()
        # (path as given made absolute, canonical) from stage 5: where the writers write.
        self.checked_paths: tuple[tuple[str, str], ...] = ()
        self.recorded = False  # its tool-use record is in the store
        self.trace: CallTrace | None = None  # only when the executor has a tracer
        self.parent_execution_id: str | None = None  # the call whose body made it (nested)
        # A keyed call's claim (``journal.KeyLease``): renewed until its result is recorded.
        self.lease: KeyLease | None = None
        # A streamed call's epoch and position; its stream wrote its record (or its claim will).
        self.place: RecordPlace | None = None

    def elapsed_ms(self) -> float:
        return (_perf_clock() - self.t0) * 1000.0


def _drop_lease(call: _Call) -> None:
    """The result is recorded (or never will be): the claim need not outlive the body now."""
    lease = call.lease
    if lease is not None:
        call.lease = None
        lease.recorded()


class _Plan:
    """What the pipeline needs to know about one definition, worked out once (definitions are
    frozen)."""

    __slots__ = (
        "_has_post",
        "_has_post_failure",
        "_has_pre",
        "_hooks",
        "_hooks_generation",
        "_safe",
        "_shared",
        "admitted",
        "finalize_content",
        "is_async",
        "kind",
        "output_checker",
        "path_names",
        "paths_of",
        "pool",
        "renderer",
        "resolved_names",
        "task_name",
        "timeout",
        "tool",
        "validator",
    )

    def __init__(self, tool: ToolDefinition) -> None:
        self.tool = tool
        # Read on every call: native attributes here, rather than lookups on the definition.
        self.validator = tool.validator
        self.kind = tool.kind
        self.pool = tool.pool
        self.timeout = tool.timeout
        self.renderer = tool.output.render
        self.finalize_content = tool.finalize_content
        self.is_async = is_async_tool(tool)
        self.task_name = f"fastgate:{tool.name}"  # the body task's, for asyncio's task dumps
        schema = tool.output.schema
        self.output_checker: Any = compile_schema(schema) if schema is not None else None
        # True or False for every call, None when a function of the arguments decides.
        static = not callable(tool.parallelism)
        self._shared = tool.classify_parallelism(None) == "shared" if static else None
        static = not callable(tool.is_concurrency_safe)
        self._safe = tool.concurrency_safe(None) if static else None
        self.path_names = tool.path_args
        self.paths_of = tool.paths  # declared paths beyond the path arguments (apply_patch)
        # The arguments stages 5 and 6 resolve to paths: the path arguments and a command, those
        # of them that validated arguments can have (often none: nothing to look up per call).
        self.resolved_names = admitted_names(tool.input_schema, (*tool.path_args, "command"))
        # What the hooks registry answers for this tool, asked again once it has changed.
        self._hooks: Hooks | None = None
        self._hooks_generation = -1
        self._has_pre = self._has_post = self._has_post_failure = False
        # Passes the gate and takes a scheduler slot: every tool but an interceptor's (whose
        # nested calls do, and would wait forever behind a slot it held).
        self.admitted = True

    def is_shared(self, args: Any) -> bool:
        if self._shared is None:
            return self.tool.classify_parallelism(args) == "shared"
        return self._shared

    def is_concurrency_safe(self, args: Any) -> bool:
        if self._safe is None:
            return self.tool.concurrency_safe(args)
        return self._safe

    def has_pre(self, hooks: Hooks) -> bool:
        self._ask(hooks)
        return self._has_pre

    def has_post(self, hooks: Hooks) -> bool:
        self._ask(hooks)
        return self._has_post

    def has_post_failure(self, hooks: Hooks) -> bool:
        self._ask(hooks)
        return self._has_post_failure

    def _ask(self, hooks: Hooks) -> None:
        generation = hooks.generation  # read first: a registration meanwhile means asking again
        if hooks is not self._hooks or generation != self._hooks_generation:
            tool = self.tool  # matched by its name and its rule_names
            self._has_pre = hooks.has_pre(tool)
            self._has_post = hooks.has_post(tool)
            self._has_post_failure = hooks.has_post_failure(tool)
            self._hooks, self._hooks_generation = hooks, generation


@mypyc_attr(allow_interpreted_subclasses=True)  # a public class: subclasses work in both builds
class ToolExecutor:
    """Runs tool calls through validation, policy, fair admission, invocation and hooks."""

    def __init__(
        self,
        registry: ToolRegistry,
        permissions: PermissionConfig | None = None,
        mode: PermissionMode | str = PermissionMode.DEFAULT,
        approval_store: ApprovalStore | None = None,
        hooks: Hooks | None = None,
        guards: Iterable[Guard] = (),
        scheduler: ConcurrencyScheduler | None = None,
        locks: FileLockManager | None = None,
        store: ToolUseStore | None = None,
        auto_verify: AutoVerify | None = None,
        code_mode: CallInterceptor | None = None,
        context_defaults: Mapping[str, Any] | None = None,
        history_limit: int = 1000,
        *,
        audit: AuditSink | None = None,
        require_persistence: bool = False,
        cancel_grace: float = 5.0,
        max_content_chars: int = DEFAULT_MAX_CONTENT_CHARS,
    ) -> None:
        if not isinstance(registry, ToolRegistry):
            raise TypeError(f"registry: expected a ToolRegistry, got {type(registry).__name__}")
        if auto_verify is not None and not isinstance(auto_verify, AutoVerify):
            raise TypeError(
                f"auto_verify: expected an AutoVerify, got {type(auto_verify).__name__}"
            )
        if store is not None and not isinstance(store, ToolUseStore):
            raise TypeError(f"store: expected a ToolUseStore, got {type(store).__name__}")
        self.registry = registry
        self.permissions = permissions if permissions is not None else PermissionConfig()
        self.mode = PermissionMode.parse(mode)
        self.approvals = approval_store if approval_store is not None else ApprovalStore()
        self.hooks = hooks if hooks is not None else Hooks()
        self.guards = tuple(guards)
        for guard in self.guards:
            if not callable(guard):
                raise TypeError(f"guards: {guard!r} is not callable")
        self.scheduler = scheduler if scheduler is not None else default_scheduler()
        self.locks = locks if locks is not None else default_lock_manager()
        self._defaults = ExecutionContext.check_defaults(context_defaults or {})
        self._default_fields = ExecutionContext.field_mask(self._defaults)
        self._history = History(history_limit)
        self._audit = audit
        self.store = store
        self.auto_verify = auto_verify
        self._require_persistence = require_persistence
        self._store_seq = _positions()
        self._cancel_grace = cancel_grace
        self._max_content_chars = max_content_chars
        self._resolver = PermissionResolver(self.permissions, self.mode, self.approvals)
        # One gate per session: it orders one agent's calls (the model's batch), so one
        # session's exclusive call never waits behind another session's, nor its prompt.
        self._gates: dict[str | None, ToolConcurrencyGate] = {}
        self._gates_swept_at = _GATE_SWEEP_MIN
        self._progress = ProgressHub()
        self._turns: OrderedDict[str, int] = OrderedDict()
        self._result_observers: list[Callable[[ToolResult], Any]] = []
        self._file_observers: list[Callable[[tuple[str, ...]], Any]] = []
        self._plans: dict[ToolDefinition, _Plan] = {}
        # Per caller context, by id (checked): the context merged with context_defaults.
        self._merged: dict[int, tuple[ExecutionContext, ExecutionContext]] = {}
        self._background: set[asyncio.Future[None]] = set()
        self._tracer: CallTracer | None = None
        self._disposed = False
        # ``code_mode`` (SPEC §15) is known by the seam it plugs into, and by nothing else.
        self._interceptor = code_mode
        self._interceptor_tools: frozenset[ToolDefinition] = frozenset()
        if code_mode is not None:
            self._attach(code_mode)

    # -- public API -----------------------------------------------------------------------------

    async def execute(
        self,
        name: str,
        args: Any,
        ctx: ExecutionContext | None = None,
        *,
        call_id: str | None = None,
        execution_id: str | None = None,
    ) -> ToolResult:
        """Run one call through every stage; see the module docstring for what raises.

        ``execution_id``: an id from ``new_execution_id()``, for a caller that recorded the call
        under it before running it (the streaming executor); by default a new one."""
        if not isinstance(name, str):
            raise TypeError(f"name: expected the tool name as str, got {type(name).__name__}")
        if ctx is None:
            ctx = _NO_CONTEXT  # one for every such call: its merge with the defaults is cached
        elif not isinstance(ctx, ExecutionContext):
            raise TypeError(f"ctx: expected an ExecutionContext, got {type(ctx).__name__}")
        if execution_id is None:
            execution_id = _new_execution_id()
        call = _Call(execution_id, name, call_id, self._merge_defaults(ctx))
        if self._tracer is not None:
            return await self._execute_traced(self._tracer, call, args)
        try:
            result = await self._pipeline(call, args)
        except asyncio.CancelledError:
            self._caller_cancelled(call)
            raise
        except Exception:
            _drop_lease(call)  # a bug: no result to record
            raise
        if call.recorded:
            await self._record_result(call, result)
        return result

    async def execute_nested(
        self, parent_execution_id: str, name: str, args: Any, ctx: ExecutionContext
    ) -> ToolResult:
        """A call made by the body of the call ``parent_execution_id`` (a tool the interceptor
        added, SPEC §15): every stage as ``execute``, the interceptor told of the parent, the
        turn's count untouched, and ``meta.parent_execution_id`` set."""
        if not isinstance(parent_execution_id, str) or not isinstance(name, str):
            raise TypeError("execute_nested: the parent's execution id and the name are str")
        if not isinstance(ctx, ExecutionContext):
            raise TypeError(f"ctx: expected an ExecutionContext, got {type(ctx).__name__}")
        call = _Call(_new_execution_id(), name, None, self._merge_defaults(ctx))
        call.parent_execution_id = parent_execution_id
        return await self._execute_call(call, args)

    async def _execute_streamed(
        self,
        place: RecordPlace,
        name: str,
        args: Any,
        ctx: ExecutionContext,
        *,
        call_id: str | None,
        execution_id: str,
    ) -> ToolResult:
        """A call of a stream over this executor when it has a store (SPEC §12): every stage
        as ``execute``, recorded at the epoch and position its stream gave it (``place``). The
        stream wrote its tool-use record already (``place.recorded``), or its claim writes it.
        Not a keyword of ``execute``, so subclasses overriding ``execute`` keep working."""
        call = _Call(execution_id, name, call_id, self._merge_defaults(ctx))
        call.place = place
        call.recorded = place.recorded
        return await self._execute_call(call, args)

    async def _execute_call(self, call: _Call, args: Any) -> ToolResult:
        """The call through the pipeline, then its result recorded."""
        if self._tracer is not None:
            return await self._execute_traced(self._tracer, call, args)
        try:  # as in execute (not shared through one more coroutine: execute is the hot path)
            result = await self._pipeline(call, args)
        except asyncio.CancelledError:
            self._caller_cancelled(call)
            raise
        except Exception:
            _drop_lease(call)
            raise
        if call.recorded:
            await self._record_result(call, result)
        return result

    async def execute_all(
        self, calls: Iterable[ToolCall], ctx: ExecutionContext | None = None
    ) -> list[ToolResult]:
        """One call after another; results in input order."""
        return [
            await self.execute(
                c.name, c.args, with_idempotency_key(ctx, c.idempotency_key), call_id=c.id
            )
            for c in calls
        ]

    async def execute_parallel(
        self,
        calls: Sequence[ToolCall],
        ctx: ExecutionContext | None = None,
        max_parallel: int = 10,
        on_commit: Callable[[ToolResult], Any] | None = None,
    ) -> list[ToolResult]:
        """Shared calls in a rolling pool, exclusive calls as barriers, commits in model order."""
        from fastgate.pipeline.batches import run_parallel

        return await run_parallel(self, list(calls), ctx, max_parallel, on_commit)

    def new_execution_id(self) -> str:
        """A fresh execution id (unique across executors, processes and hosts), for a caller
        that records a call before passing it to ``execute(..., execution_id=)``."""
        return _new_execution_id()

    def _next_position(self) -> int:
        """The next tool-use record's position (``seq``); a stream takes one per call as the
        model streams it, so its calls sort in model order among this executor's records."""
        return next(self._store_seq)

    def set_tracer(self, tracer: CallTracer | None) -> CallTracer | None:
        """Install ``tracer`` (``None`` removes it) for the calls that start from now on;
        returns the one it replaces. See ``fastgate.pipeline.tracing``."""
        previous, self._tracer = self._tracer, tracer
        return previous

    @property
    def tracer(self) -> CallTracer | None:
        return self._tracer

    def history(self) -> list[ToolResult]:
        return self._history.results()

    def stats(self) -> dict[str, ToolStats]:
        return self._history.stats()

    def progress(self, execution_id: str | None = None) -> AsyncIterator[ProgressEvent]:
        """Progress reports of one execution (until it ends) or of all (until disposal)."""
        return self._progress.subscribe(execution_id)

    def on_result(self, callback: Callable[[ToolResult], Any]) -> None:
        """Call ``callback(result)`` synchronously with every final, frozen result."""
        self._result_observers.append(callback)

    def on_files_changed(self, callback: Callable[[tuple[str, ...]], Any]) -> None:
        """Call ``callback(paths)`` after a successful call that may have written ``paths``."""
        self._file_observers.append(callback)

    def refuse(
        self,
        name: str,
        code: ErrorCode,
        message: str,
        ctx: ExecutionContext | None = None,
        *,
        call_id: str | None = None,
        details: dict[str, Any] | None = None,
        execution_id: str | None = None,
    ) -> ToolResult:
        """The result of a call that will not run at all (recorded in history, observers told).

        For callers that decide before ``execute`` (e.g. a streaming batch whose record could not
        be saved): the result still has an execution id and goes through stage 15.
        """
        if execution_id is None:
            execution_id = _new_execution_id()
        call = _Call(execution_id, name, call_id, self._merge_defaults(ctx or _NO_CONTEXT))
        call.aborted_before_launch = True
        tracer = self._tracer
        if tracer is None:
            return self._refused(call, code, message, details)
        token = _started(tracer, call)
        trace = call.trace = CallTrace()
        result = self._refused(call, code, message, details)
        _ended(tracer, token, result, call, trace)
        return result

    def _refused(
        self, call: _Call, code: ErrorCode, message: str, details: dict[str, Any] | None
    ) -> ToolResult:
        """``refuse``'s result: a call refused before ``execute`` is still one of its turn's
        calls (a turn past its limit answers it as it answers any later call)."""
        turn_id = call.ctx.turn_id
        if turn_id is not None and not self._admit_turn(turn_id):
            return self._turn_exhausted(call)
        return self._finalize(call, code, message, details=details)

    def classify(self, name: str, args: Any, ctx: ExecutionContext | None = None) -> str:
        """``"shared"`` or ``"exclusive"`` for this call now (unknown tools are exclusive)."""
        scope = self._merge_defaults(ctx or _NO_CONTEXT).agent_scope
        try:
            tool = self.registry.resolve(name, scope) if isinstance(name, str) else None
        except KeyError:  # an unknown scope: the call will be refused
            tool = None
        return "exclusive" if tool is None else tool.classify_parallelism(args)

    def dispose(self) -> None:
        """Close the gate, withdraw this executor's queued scheduler requests, refuse new calls
        (``DISPOSED``). Calls already running finish normally. Idempotent."""
        if self._disposed:
            return
        self._disposed = True
        for gate in self._gates.values():
            gate.close()
        self.scheduler.cancel_owner(self)
        self._progress.close()
        if self._interceptor is not None:
            self._interceptor.close()

    @property
    def disposed(self) -> bool:
        return self._disposed

    def _new_gate(self, session_id: str | None) -> ToolConcurrencyGate:
        """The session's gate, made on its first call. Idle gates are dropped whenever the map
        has doubled since the last sweep, so memory follows the sessions active at once."""
        gates = self._gates
        if len(gates) >= self._gates_swept_at:
            for session in [k for k, g in gates.items() if _gate_idle(g)]:
                del gates[session]
            self._gates_swept_at = max(_GATE_SWEEP_MIN, 2 * len(gates))
        gate = gates[session_id] = ToolConcurrencyGate()
        if self._disposed:  # a call that passed the disposal check just before it
            gate.close()
        return gate

    # -- the pipeline ---------------------------------------------------------------------------

    async def _pipeline(self, call: _Call, raw_args: Any) -> ToolResult:
        ctx = call.ctx
        cancel = ctx.cancel
        trace = call.trace  # None unless a tracer listens: then each stage is recorded as entered
        holds = Holds()
        try:
            # 1. identity: snapshot and freeze the arguments; a cancelled caller stops here.
            refusal = self._identify(call, raw_args)
            if refusal is not None:
                return refusal
            args = call.args

            # 2. lookup in the registry, as the calling agent's scope sees it; the interceptor, if
            #    any, judges the call before any policy stage does.
            if trace is not None:
                trace.enter("lookup")
            try:
                tool = self.registry.resolve(call.name, ctx.agent_scope)
            except KeyError:
                return self._unknown_scope(call)
            call.unknown = tool is None
            if self._interceptor is not None:
                refusal = self._intercepted(call, tool)
                if refusal is not None:
                    return refusal
            if tool is None:
                return self._unknown_tool(call)
            plan = call.plan = self._plan(tool)

            # 3. validation against the tool's schema (every issue reported).
            if trace is not None:
                trace.enter("validation")
            refusal = self._validate(call, plan, args)
            if refusal is not None:
                return refusal
            # 3b. a keyed call claims its key before any hook, guard or approver is asked; a
            #     repeat is answered from the journal (SPEC §24).
            if ctx.idempotency_key is not None:
                refusal = await claim_key(self, call, tool, args, holds)
                if refusal is not None:
                    return refusal

            # 4. the executor's gate: shared calls overlap, exclusive ones are barriers.
            if trace is not None:
                trace.enter("gate")
            shared: AsyncHold | None = None  # the passage, when shared
            if plan.admitted:
                gate = self._gates.get(ctx.session_id) or self._new_gate(ctx.session_id)
                is_shared = plan.is_shared(args)
                passage = gate.shared() if is_shared else gate.exclusive()
                try:
                    await holds.enter(passage, cancel)
                except GateClosed:
                    return self._finalize(call, ErrorCode.DISPOSED, _DISPOSED)
                if is_shared:
                    shared = passage

            # Stages 5 to 10 resolve each path once, so the worktree check, the rules and the
            # lock keys agree (no window between them), and nothing is cached beyond the call.
            named = plan.paths_of is not None or names_any(plan.resolved_names, args)
            with consistent_paths(named):
                # 5. worktree isolation: every path argument must stay inside the allowed roots.
                if trace is not None:
                    trace.enter("worktree")
                refusal = self._check_paths(call, tool, args, plan) if named else None
                if refusal is not None:
                    return refusal

                # 6. rule permission: rules, mode, session approvals, sensitive paths.
                if trace is not None:
                    trace.enter("rules")
                call.rule = self._resolver.decide(tool, args, ctx)

                # 7. PreToolUse hooks; arguments they rewrite go through stages 3, 5 and 6 again.
                if trace is not None:
                    trace.enter("hooks")
                if plan.has_pre(self.hooks):
                    refusal = await self._pre_tool_use(call, plan, tool)
                    if refusal is not None:
                        return refusal
                    if call.args is not args:  # rewritten: it may have to run alone now
                        args = call.args
                        if shared is not None and not plan.is_shared(args):
                            refusal = await self._gate_alone(call, holds, shared)
                            if refusal is not None:
                                return refusal

                # 8. decision merge: the strictest of rule and hook; a hook tightens, never loosens.
                if trace is not None:
                    trace.enter("merge")
                refusal = self._merge(call)
                if refusal is not None:
                    return refusal

                # 9. guards: deny-only owner policy, order-free.
                if trace is not None:
                    trace.enter("guards")
                if self.guards:
                    refusal = await self._guard(call, tool, args)
                    if refusal is not None:
                        return refusal

                # 10. approval, when the merged decision is ASK.
                if trace is not None:
                    trace.enter("approval")
                if call.decision is _ASK:
                    refusal = await self._approve(call, tool, args)
                    if refusal is not None:
                        return refusal

            # 11. admission: a scheduler slot, then the file locks of a non-concurrency-safe tool.
            if trace is not None:
                trace.enter("admission")
            refusal = await self._admit(call, plan, args, holds)
            if refusal is not None:
                return refusal

            # 11b. the durable tool-use record, before any side effect.
            if trace is not None:
                trace.enter("record")
            # (a keyed call's claim wrote it; a streamed call's stream did, or tried to)
            if self.store is not None and not call.recorded and call.place is None:
                refusal = await self._record_tool_use(call, tool, args)
                if refusal is not None:
                    return refusal

            # 12. invocation: its own task, deadline, cancellation, safe retries.
            body = BodyContext(self, call, holds)
            if self.auto_verify is not None:  # the workspace's check is read before any tool runs
                pinning = self.auto_verify.pin(body)
                if pinning is not None:
                    await pinning
            if trace is not None:
                trace.enter("invocation")
            outcome = await self._invoke(call, tool, args, plan, body, holds)

            # 13-15. hooks after the call, file-change observers, then the final result; at once
            #        (no coroutine) for a value when no hook, observer or check waits for it.
            if outcome.kind == VALUE and not self._concludes_later(plan):
                return self._conclude_value(call, plan, outcome.value)
            return await self._conclude(call, tool, args, outcome, plan, body)
        except Aborted:
            return self._aborted_before_launch(call)
        finally:
            holds.release()

    async def _execute_traced(self, tracer: CallTracer, call: _Call, args: Any) -> ToolResult:
        """``execute`` with the tracer told of the call's start and end (see ``tracing``)."""
        token = _started(tracer, call)
        trace = call.trace = CallTrace()
        result: ToolResult | None = None
        try:
            try:
                result = await self._pipeline(call, args)
            except asyncio.CancelledError:
                result = self._caller_cancelled(call)
                raise
            except Exception:
                _drop_lease(call)
                raise
            trace.settle(result)  # the stage it ended in ends now, before the store's write
            if call.recorded:
                await self._record_result(call, result)
            return result
        finally:
            _ended(tracer, token, result, call, trace)

    def _caller_cancelled(self, call: _Call) -> ToolResult:
        """The ABORTED result of a call whose awaiting task was cancelled: in history, and in the
        store once the background can write it."""
        if call.launched:
            aborted = self._finalize(call, ErrorCode.ABORTED, "the caller cancelled the call")
        else:  # nothing ran: a keyed call's key is free again
            call.aborted_before_launch = True
            message = "the caller cancelled the call before it started; nothing was run"
            aborted = self._finalize(call, ErrorCode.ABORTED_BEFORE_DISPATCH, message)
        if call.recorded:  # we cannot await here: record it in the background
            task = asyncio.ensure_future(self._record_result(call, aborted))
            self._background.add(task)
            task.add_done_callback(self._background.discard)
        return aborted

    # -- stages in detail -----------------------------------------------------------------------

    def _identify(self, call: _Call, raw_args: Any) -> ToolResult | None:
        """Stage 1: ``call.args``, a frozen snapshot of ``raw_args``; or why the call ends here
        (the executor disposed, arguments that are not JSON, the caller's token cancelled, the
        turn's calls used up)."""
        if self._disposed:
            return self._finalize(call, ErrorCode.DISPOSED, _DISPOSED)
        ctx = call.ctx
        try:
            call.args = _snapshot(raw_args)
        except NotJSON as exc:
            message = f"Tool arguments must be JSON values: {exc}."
            if ctx.turn_id is not None and call.parent_execution_id is None:
                if not self._admit_turn(ctx.turn_id):  # a call of its turn all the same
                    return self._turn_exhausted(call)
            return self._finalize(call, ErrorCode.INVALID_ARGS, message)
        cancel = ctx.cancel
        if cancel is not None and cancel.cancelled:
            return self._aborted_before_launch(call)
        if ctx.turn_id is not None and call.parent_execution_id is None:  # nested: their own
            if not self._admit_turn(ctx.turn_id):
                return self._turn_exhausted(call)
        return None

    def _turn_exhausted(self, call: _Call) -> ToolResult:
        """Stage 1: the turn has made its ``TURN_LIMIT`` calls."""
        return self._finalize(
            call,
            ErrorCode.RESOURCE_EXHAUSTED,
            f"This turn already made {TURN_LIMIT} tool calls; retry in the next turn.",
            retryable=True,
            retry_after="retry next turn",
            details={"reason": "turn_limit"},
        )

    def _intercepted(self, call: _Call, tool: ToolDefinition | None) -> ToolResult | None:
        """Stage 2: the interceptor's refusal of the call, if it refuses it."""
        assert self._interceptor is not None
        verdict = self._interceptor.judge(call.name, tool, call.parent_execution_id, call.ctx)
        if verdict is None:
            return None
        code, message, details = verdict
        return self._finalize(call, code, message, details=details)

    def _unknown_scope(self, call: _Call) -> ToolResult:
        """Stage 2: the context names an agent scope the registry does not have (a host's
        mistake, not the model's: no tool is visible there)."""
        call.unknown = True
        scope = call.ctx.agent_scope
        message = (
            f"{call.name!r} was called in the agent scope {scope!r}, which is not registered "
            f"(create it with registry.scope({scope!r}))"
        )
        details = {"reason": "unknown_scope", "scope": scope}
        return self._finalize(call, ErrorCode.UNKNOWN_TOOL, message, details=details)

    def _unknown_tool(self, call: _Call) -> ToolResult:
        """Stage 2: no tool answers to the name, in the calling agent's scope."""
        visible = self.registry.visible(call.ctx.agent_scope)
        message, details = _refusals.unknown_tool(call.name, visible)
        return self._finalize(call, ErrorCode.UNKNOWN_TOOL, message, details=details)

    def _validate(self, call: _Call, plan: _Plan, args: Any) -> ToolResult | None:
        """Stage 3."""
        if type(args) is not _FROZEN_DICT and not isinstance(args, Mapping):
            return self._finalize(call, ErrorCode.INVALID_ARGS, _refusals.not_an_object(args))
        issues = plan.validator.validate(args)
        if issues:
            limit = getattr(plan.validator, "max_issues", None)
            message, details = _refusals.invalid_args(call.name, issues, limit)
            return self._finalize(call, ErrorCode.INVALID_ARGS, message, details=details)
        return None

    async def _pre_tool_use(
        self, call: _Call, plan: _Plan, tool: ToolDefinition
    ) -> ToolResult | None:
        """Stage 7: the PreToolUse hooks say what they think (``call.hook_decision``,
        ``hook_reason``). Arguments they rewrite (unless one denies: that stands whatever it
        rewrote) rebuild the call: validated and checked again, and ``call.rule`` becomes the
        stricter of the decisions for the old and the new arguments, so a deny stands."""
        ctx, cancel = call.ctx, call.ctx.cancel
        hooks = run_pre_tool_use(self.hooks, PreToolUseEvent(tool.name, call.args, ctx, tool))
        outcome = await (until_cancelled(hooks, cancel) if cancel is not None else hooks)
        call.hook_decision, call.hook_reason = outcome.decision, outcome.reason
        call.additional_context += tuple(outcome.additional_context)
        trace = call.trace
        if trace is not None:
            trace.hooks_ran = True
            trace.hook_decision, trace.hook_reason = outcome.decision, outcome.reason
        if outcome.updated_args is None or outcome.decision is _DENY:
            return None
        args = call.args = outcome.updated_args  # already a frozen snapshot
        refusal = self._validate(call, plan, args) or self._check_paths(call, tool, args, plan)
        if refusal is not None:
            return refusal
        call.rule = _rebuilt_rule(call.rule, self._resolver.decide(tool, args, ctx))
        return None

    async def _gate_alone(self, call: _Call, holds: Holds, shared: AsyncHold) -> ToolResult | None:
        """Stage 7: arguments a hook rewrote into a call the tool runs alone take the gate
        exclusively (the shared passage of stage 4 is let go first: held, it would wait for
        itself)."""
        holds.leave(shared)
        ctx = call.ctx
        gate = self._gates.get(ctx.session_id) or self._new_gate(ctx.session_id)
        try:
            await holds.enter(gate.exclusive(), ctx.cancel)
        except GateClosed:
            return self._finalize(call, ErrorCode.DISPOSED, _DISPOSED)
        return None

    def _merge(self, call: _Call) -> ToolResult | None:
        """Stage 8: ``call.decision``, the strictest of the rule's and the hooks' (audited), and
        the refusal when it is DENY."""
        rule = call.rule
        decision, source, reason = merge_decision(rule, call.hook_decision, call.hook_reason)
        call.decision, call.decision_source, call.decision_reason = decision, source, reason
        self._audit_decision(call, decision, source, reason)
        trace = call.trace
        if trace is not None:
            trace.rule, trace.merged = rule, (decision, source, reason)
        if decision is _DENY:
            return self._denied(call, reason, source)
        return None

    async def _guard(self, call: _Call, tool: ToolDefinition, args: Any) -> ToolResult | None:
        """Stage 9: the first guard's reason to deny the call, as its refusal."""
        guards = run_guards(self.guards, ToolCallView(tool.name, args, call.ctx))
        cancel = call.ctx.cancel
        reason = await (until_cancelled(guards, cancel) if cancel is not None else guards)
        if reason is None:
            return None
        if call.trace is not None:
            call.trace.guard_reason = reason
        call.decision, call.decision_source = _DENY, DecisionSource.GUARD
        self._audit_decision(call, _DENY, DecisionSource.GUARD, reason)
        return self._denied(call, reason, DecisionSource.GUARD)

    async def _approve(self, call: _Call, tool: ToolDefinition, args: Any) -> ToolResult | None:
        """Stage 10: the approver's answer to an ASK (``None``: approved, and remembered for
        the session when it said so), or why no answer counted."""
        ctx, rule, reason = call.ctx, call.rule, call.decision_reason
        source = call.decision_source
        assert source is not None
        request = ApprovalRequest(
            tool.name, args, rule.signature, reason, str(source), ctx.session_id, call.execution_id
        )
        answer = await ask_approval(self.approvals, ctx, request, rule, reason, self.mode)
        if call.trace is not None:
            call.trace.approval = answer
        if isinstance(answer, Refusal):
            return self._finalize(call, answer.code, answer.message, details=answer.details)
        verdict = Decision.ALLOW if answer.approved else _DENY
        call.decision, call.decision_source = verdict, DecisionSource.USER
        self._audit_decision(call, verdict, DecisionSource.USER, answer.feedback or "")
        if not answer.approved:
            feedback = answer.feedback or "The user rejected this call."
            return self._finalize(call, ErrorCode.USER_REJECTED, feedback, content=feedback)
        note = remember_approval(answer, self.approvals, self._resolver, tool, args, ctx, rule)
        if note is not None:
            call.additional_context += (note,)
        return None

    def _denied(self, call: _Call, reason: str, source: DecisionSource) -> ToolResult:
        """Stages 8 and 9: the call is not permitted."""
        message = f"Not permitted: {reason}"
        return self._finalize(
            call, ErrorCode.PERMISSION_DENIED, message, details={"source": source}
        )

    def _busy(self, call: _Call, exc: ResourceExhausted) -> ToolResult:
        """Stage 11: the scheduler's queue for the call is full."""
        return self._finalize(
            call,
            ErrorCode.RESOURCE_EXHAUSTED,
            f"The tool is busy ({exc}); retry in the next turn.",
            retryable=True,
            retry_after="retry next turn",
            details={"reason": "tool_busy", "cause": exc.reason},
        )

    async def _admit(self, call: _Call, plan: _Plan, args: Any, holds: Holds) -> ToolResult | None:
        """Stage 11: a scheduler slot, then the file locks of a call that is not concurrency
        safe, each held in ``holds``; or why the call got neither."""
        cancel = call.ctx.cancel
        if cancel is not None and cancel.cancelled:
            return self._aborted_before_launch(call)
        try:
            if plan.admitted:
                slot = self.scheduler.slot(call.ctx.session_id, plan.kind, self, plan.pool)
                await holds.enter(slot, cancel)
            if call.lock_keys and not plan.is_concurrency_safe(args):
                locks = self.locks.acquire_keys(call.lock_keys, call.execution_id)
                await holds.enter(locks, cancel)
        except ResourceExhausted as exc:
            return self._busy(call, exc)
        except SchedulerClosed:
            return self._finalize(call, ErrorCode.DISPOSED, "the scheduler has been closed")
        return None

    async def _invoke(
        self,
        call: _Call,
        tool: ToolDefinition,
        args: Any,
        plan: _Plan,
        body: BodyContext,
        holds: Holds,
    ) -> Outcome:
        """Stage 12: the body in its own task, under its deadline and the caller's token,
        retried where that is safe; its progress followed meanwhile."""
        self._progress.start(call.execution_id)
        call.launched = True
        try:
            outcome = await invoke(
                tool,
                args,
                body,
                task_name=plan.task_name,
                is_async=plan.is_async,
                time_budget=plan.timeout,
                cancel=call.ctx.cancel,
                cancel_grace=self._cancel_grace,
                on_runaway=holds.release_when_done,
            )
        except asyncio.CancelledError:
            if body.attempt == 0:  # the body's task never took its first step: nothing ran
                call.launched = False
            raise
        finally:
            self._progress.finish(call.execution_id)
        call.attempts = outcome.attempts
        return outcome

    def _check_paths(
        self, call: _Call, tool: ToolDefinition, args: Any, plan: _Plan
    ) -> ToolResult | None:
        """Stage 5, and the lock keys of the path arguments (and declared paths) for stage 11."""
        given = given_paths(plan.path_names, args)
        if plan.paths_of is not None:
            try:
                given += declared_paths(plan.paths_of, args)
            except DeclaredPathsError as exc:
                return self._finalize(
                    call,
                    ErrorCode.INVALID_ARGS,
                    str(exc),  # the tool's own words (apply_patch: the patch format's errors)
                    details={"reason": "paths", "cause": str(exc)},
                )
        if not given:
            call.lock_keys = ()
            return None
        root = call.ctx.workspace_root or os.getcwd()
        violation = check_given_paths(given, root, self.permissions.additional_dirs)
        if violation is not None:
            details = {
                "argument": violation.argument,
                "resolved": violation.resolved,
                "reason": violation.reason,
                "allowed_roots": list(violation.allowed_roots),
            }
            return self._finalize(
                call, ErrorCode.WORKTREE_VIOLATION, violation.message, details=details
            )
        absolutes = [absolute_path(root, value) for _, value in given if isinstance(value, str)]
        keys = [lock_key(path) for path in absolutes]
        call.lock_keys = tuple(keys) if len(keys) == 1 else tuple(sorted(set(keys)))
        # Resolved once above (the memo of consistent_paths): no system call here.
        call.checked_paths = tuple([(path, canonical_path(path)) for path in absolutes])
        return None

    async def _conclude(
        self,
        call: _Call,
        tool: ToolDefinition,
        args: Any,
        outcome: Outcome,
        plan: _Plan,
        body: BodyContext,
    ) -> ToolResult:
        """Stages 13 to 15 for a call whose body ran."""
        ctx = call.ctx
        trace = call.trace
        if outcome.kind == FAILURE:
            failure = outcome.failure
            assert failure is not None
            details = dict(failure.details or {})
            if failure.code is not None:
                details["code"] = failure.code
            return self._finalize(call, ErrorCode.TOOL_FAILURE, failure.message, details=details)
        if outcome.kind in (ERROR, TIMEOUT, ABORTED):
            code, message, details, retryable, retry_after = failure_of(tool, outcome)
            error = ToolError(code, message, retryable, retry_after, details)
            if plan.has_post_failure(self.hooks):
                if trace is not None:
                    trace.enter("post_hooks")
                # The result as it stands (the hooks' context is added to the final one).
                failed = self._result(
                    call,
                    call.elapsed_ms(),
                    code,
                    message,
                    retryable=retryable,
                    retry_after=retry_after,
                    details=details,
                )
                event = PostToolUseFailureEvent(tool.name, args, ctx, error, tool, failed)
                extra = await run_post_tool_use_failure(self.hooks, event)
                call.additional_context += tuple(extra)
            return self._finalize(
                call, code, message, retryable=retryable, retry_after=retry_after, details=details
            )
        # 13. the value checked against the output schema and rendered; then the PostToolUse
        #     hooks: accept, replace the value (checked and rendered again), replace the content,
        #     or block.
        if trace is not None:
            trace.enter("post_hooks")
        value = outcome.value
        content, refusal = self._content_of(call, plan, value)
        if refusal is not None:
            return refusal
        if plan.has_post(self.hooks):
            provisional = self._result(
                call, call.elapsed_ms(), None, "", content=content, value=value
            )
            post = await run_post_tool_use(
                self.hooks,
                PostToolUseEvent(tool.name, args, ctx, provisional, tool),
                max_content_chars=self._max_content_chars,  # a hook's content: bounded alike
            )
            call.additional_context += tuple(post.additional_context)
            if post.block is not None:
                return self._finalize(
                    call, ErrorCode.BLOCKED_BY_HOOK, post.block, content=post.block
                )
            if post.value is not UNSET:  # a new value: checked and rendered again
                value = post.value
                content, refusal = self._content_of(call, plan, value)
                if refusal is not None:
                    return refusal
            if post.content is not UNSET:  # new content (after a new value, it wins)
                content = post.content
        # 14. file-change observers (the LSP seam): the paths the tool reported changing, else
        #     the paths of a call that may have written them; then AutoVerify (YOLO, trusted).
        if trace is not None:
            trace.enter("observers")
        verify = self.auto_verify
        if verify is not None and (self.mode is not _YOLO or not ctx.trusted):
            verify = None
        if self._file_observers or verify is not None:
            changed = _changed_paths(call, tool, args, body)
            if changed:
                for observer in self._file_observers:
                    _isolated(observer, changed, "file-change observer")
                if verify is not None:  # the call lets go of its slot and locks before the check
                    content = await verify.report(
                        changed, body, content, resolver=self._resolver, release=body._holds.release
                    )
        # 15. finalize.
        if trace is not None:
            trace.enter("finalize")
        return self._finalize(call, None, "", content=content, value=value)

    def _concludes_later(self, plan: _Plan) -> bool:
        """Whether stages 13 to 15 may have to wait or report changed files: PostToolUse hooks,
        file-change observers or AutoVerify."""
        return bool(
            self._file_observers or self.auto_verify is not None or plan.has_post(self.hooks)
        )

    def _conclude_value(self, call: _Call, plan: _Plan, value: Any) -> ToolResult:
        """Stages 13 to 15 for a value when ``_concludes_later`` is False: ``_conclude`` with
        nothing to await."""
        trace = call.trace
        if trace is not None:
            trace.enter("post_hooks")
        content, refusal = self._content_of(call, plan, value)
        if refusal is not None:
            return refusal
        if trace is not None:
            trace.enter("observers")
            trace.enter("finalize")
        return self._finalize(call, None, "", content=content, value=value)

    async def _record_tool_use(
        self, call: _Call, tool: ToolDefinition, args: Any
    ) -> ToolResult | None:
        assert self.store is not None
        ctx = call.ctx
        record = ToolUseRecord(
            call.execution_id,
            call.call_id,
            ctx.session_id,
            ctx.turn_id,
            0,
            self._next_position(),
            tool.name,
            args,
            tool.kind is _READ_ONLY,
        )
        why = unrecordable(record)
        if why is not None:
            return self._finalize(
                call,
                ErrorCode.INVALID_ARGS,
                f"The call was not run: {why}, so it cannot be recorded.",
                details={"reason": "unrecordable"},
            )
        try:
            await self.store.record_tool_use(record)
        except Exception as exc:
            if self._require_persistence:
                return self._finalize(
                    call,
                    ErrorCode.PERSISTENCE_FAILED,
                    f"The call was not run: its record could not be saved ({exc}).",
                    retryable=True,
                )
            log.warning("tool-use record of %s not saved: %s", call.execution_id, exc)
            return None
        call.recorded = True
        return None

    async def _record_result(self, call: _Call, result: ToolResult) -> None:
        """Save the result; a keyed call's claim is renewed until then (a repeat waits for it
        rather than taking the key over), and a failed write is tried again while it is."""
        assert self.store is not None
        try:
            for pause in _RESULT_RETRY_PAUSES:
                try:
                    await self.store.record_result(call.execution_id, result.durable())
                    return
                except Exception as exc:
                    if call.lease is None or pause is None:
                        log.warning("result record of %s not saved: %s", call.execution_id, exc)
                        return
                    log.warning(
                        "result record of %s not saved (%s); trying again", call.execution_id, exc
                    )
                await asyncio.sleep(pause)
        finally:
            _drop_lease(call)

    def _content_of(self, call: _Call, plan: _Plan, value: Any) -> tuple[Any, ToolResult | None]:
        """(content, None) for a value that matches the output schema (when the tool has one)
        and renders, else (None, the OUTPUT_INVALID result)."""
        checker = plan.output_checker
        if checker is not None:
            issues = checker.validate(value)
            if issues:
                listed = "; ".join(issue.message for issue in issues)
                message = (
                    f"The tool returned a value that does not match its output schema: {listed}"
                )
                return None, self._finalize(call, ErrorCode.OUTPUT_INVALID, message)
        try:
            return render(plan.renderer, value, self._max_content_chars), None
        except RenderError as exc:
            return None, self._finalize(call, ErrorCode.OUTPUT_INVALID, str(exc))

    # -- results ----------------------------------------------------------------------------------

    def _aborted_before_launch(self, call: _Call) -> ToolResult:
        call.aborted_before_launch = True
        return self._finalize(
            call,
            ErrorCode.ABORTED_BEFORE_DISPATCH,
            "The call was cancelled before it started; nothing was run.",
        )

    def _result(
        self,
        call: _Call,
        elapsed_ms: float,
        code: ErrorCode | None,
        message: str,
        content: Any = None,
        value: Any = None,
        retryable: bool = False,
        retry_after: Any = None,
        details: dict[str, Any] | None = None,
    ) -> ToolResult:
        now = _wall_clock()
        meta = _RESULT_META(  # positional (the field order of ResultMeta): the hot path
            call.execution_id,
            call.call_id,
            call.name,
            call.ctx.session_id,
            call.started_at,
            now,
            elapsed_ms,
            call.attempts,
            call.aborted_before_launch,
            call.decision_source,
            call.additional_context,
            call.parent_execution_id,
        )
        if code is None:
            return _TOOL_RESULT(True, content, None, meta, value)
        if details:
            details = bounded_details(details, self._max_content_chars)
        error = ToolError(code, message, retryable, retry_after, details or {})
        return ToolResult(False, message if content is None else content, error, meta)

    def _finalize(
        self,
        call: _Call,
        code: ErrorCode | None,
        message: str,
        *,
        content: Any = None,
        value: Any = None,
        retryable: bool = False,
        retry_after: Any = None,
        details: dict[str, Any] | None = None,
    ) -> ToolResult:
        """Stage 15: finalize_content (once), freeze, record, notify. Every result passes here."""
        elapsed_ms = call.elapsed_ms()
        if len(message) > self._max_content_chars:  # a tool's own failure or exception text
            message = cut(message, self._max_content_chars)
        plan = call.plan
        stats_name = call.name if plan is not None else self._stats_name(call)
        result = self._result(
            call, elapsed_ms, code, message, content, value, retryable, retry_after, details
        )
        if plan is not None and plan.finalize_content is not None:
            try:
                changed = self._content_checked(plan.finalize_content(result), call.name)
            except USER_CODE_ERRORS as exc:
                log.warning("finalize_content of %s failed: %s", call.name, exception_line(exc))
                changed = None
            if changed is not None:
                result = ToolResult(result.ok, changed, result.error, result.meta, result.value)
        self._history.add(result, stats_name, code, elapsed_ms)
        for observer in self._result_observers:
            _isolated(observer, result, "result observer")
        return result

    # -- small helpers --------------------------------------------------------------------------

    def _stats_name(self, call: _Call) -> str:
        """The name a call refused before its tool was found is counted under in ``stats()``:
        its own if a tool has it, else one shared name (a model inventing names must not grow
        the counters without bound). A name too long to be a tool's is also cut in the result."""
        known = False
        if not call.unknown:  # refused before the lookup (stage 2): is the name a tool's?
            try:
                known = call.name in self.registry.visible(call.ctx.agent_scope)
            except KeyError:  # an unknown scope
                pass
        if len(call.name) > _LONGEST_TOOL_NAME:
            call.name = f"{call.name[:_LONGEST_TOOL_NAME]}... ({len(call.name)} characters)"
        return call.name if known else UNKNOWN_TOOLS

    def _content_checked(self, content: Any, tool_name: str) -> Any:
        """What ``finalize_content`` returned, bounded as rendered content is; ``None`` (the
        content stays as it was) for anything but text or content blocks."""
        if content is None:
            return None
        if isinstance(content, str):
            return cut(content, self._max_content_chars)
        if isinstance(content, (list, tuple)):
            return bounded_blocks(content, self._max_content_chars)
        log.warning(
            "finalize_content of %s returned %s, not text or content blocks; the content is "
            "unchanged",
            tool_name,
            type(content).__name__,
        )
        return None

    def _plan(self, tool: ToolDefinition) -> _Plan:
        plan = self._plans.get(tool)  # by identity: definitions compare by identity
        if plan is None:
            if len(self._plans) >= _CACHE_LIMIT:
                self._plans.clear()
            plan = self._plans[tool] = _Plan(tool)
            if plan.pool is not None:
                self._adopt_pool_limit(plan.pool)
            if tool in self._interceptor_tools:
                plan.admitted = False
        return plan

    def _adopt_pool_limit(self, pool: str) -> None:
        """The limit the registry's provider asked for ``pool`` (an MCP server's
        ``max_concurrency``) becomes the scheduler's, before the first slot of the pool."""
        wanted = self.registry.pool_limit(pool)
        if wanted is not None and self.scheduler.limits.pool_limits.get(pool) != wanted:
            self.scheduler.set_pool_limit(pool, wanted)

    def _attach(self, interceptor: CallInterceptor) -> None:
        """Register the interceptor's tools; on a clash with a registered name, close it."""
        tools = frozenset(interceptor.attach(self))
        try:
            for tool in tools:
                if self.registry.resolve(tool.name) is not None:
                    raise ValueError(f"{tool.name!r}: the registry already has a tool by that name")
            for tool in tools:
                self.registry.register(tool)
        except BaseException:
            interceptor.close()
            raise
        self._interceptor_tools = tools

    def _merge_defaults(self, ctx: ExecutionContext) -> ExecutionContext:
        """``ctx`` with ``context_defaults`` filled in; cached, since callers reuse contexts."""
        if not self._defaults:  # nothing to fill in: no cache to keep contexts made per call
            return ctx
        if not ctx.lacks_any(self._default_fields):
            return ctx  # it names everything the defaults would (a context made per call, say)
        cached = self._merged.get(id(ctx))
        if cached is not None and cached[0] is ctx:
            return cached[1]
        if len(self._merged) >= _CACHE_LIMIT:
            self._merged.clear()
        merged = ctx.merged(self._defaults)
        self._merged[id(ctx)] = (ctx, merged)
        return merged

    def _admit_turn(self, turn_id: str) -> bool:
        count = self._turns.pop(turn_id, 0) + 1
        self._turns[turn_id] = count
        if len(self._turns) > _TRACKED_TURNS:
            self._turns.popitem(last=False)
        return count <= TURN_LIMIT

    def _audit_decision(
        self, call: _Call, decision: Decision, source: DecisionSource, reason: str
    ) -> None:
        if self._audit is None:
            return
        rule = call.rule  # for its signature
        event = AuditEvent(
            execution_id=call.execution_id,
            session_id=call.ctx.session_id,
            tool_name=call.name,
            decision=decision,
            source=source,
            reason=reason,
            signature=rule.signature,
            time=time.time(),
        )
        _isolated(self._audit.record, event, "audit sink")

    def _audit_network_refusal(self, call: _Call, host: str, port: int, reason: str) -> None:
        """A connection the call's sandboxed command was refused, to the sink's optional
        ``network_refused`` (``NetworkAuditSink``; a sink without it hears decisions only)."""
        refused = getattr(self._audit, "network_refused", None)
        if refused is None:
            return
        event = NetworkAuditEvent(
            execution_id=call.execution_id,
            session_id=call.ctx.session_id,
            tool_name=call.name,
            host=host,
            port=port,
            reason=reason,
            time=time.time(),
        )
        _isolated(refused, event, "audit sink")


# Execution ids are 128 bits from the OS's random source, so they stay unique across executors,
# processes and hosts sharing one store (SPEC §10). They are read in batches (one read costs
# more than a whole id from the pool) and handed out by list.pop, atomic for threads; a forked
# child forgets its parent's pool, or both would hand out the same ids.
_id_pool: list[str] = []


def _new_execution_id() -> str:
    global _id_pool
    try:
        return _id_pool.pop()
    except IndexError:
        fresh = _fresh_ids()
        taken = fresh.pop()  # from our own list: another thread may be refilling too
        _id_pool = fresh
        return taken


def _fresh_ids() -> list[str]:
    digits = os.urandom(16 * _IDS_PER_READ).hex()
    return [digits[start : start + 32] for start in range(0, len(digits), 32)]


def _forget_id_pool() -> None:
    global _id_pool
    _id_pool = []


os.register_at_fork(after_in_child=_forget_id_pool)


def _positions() -> Iterator[int]:
    """The positions (``seq``) of this executor's tool-use records: increasing, and from the
    wall clock's nanoseconds, so that a session's calls recorded by a later process (a restart,
    another replica) come after its earlier ones."""
    last = 0
    while True:
        last = max(last + 1, time.time_ns())
        yield last


def _rebuilt_rule(original: RuleDecision, rewritten: RuleDecision) -> RuleDecision:
    """Stage 7's decision for arguments a hook rewrote: the stricter of the two decisions, but
    always naming the rewritten arguments, which are what runs, what an approver is shown and
    all that a session approval may cover (the original's signature would let one approval of
    the rewrite cover later calls the user never saw)."""
    if rewritten.decision.strictness >= original.decision.strictness:
        return rewritten
    return msgspec.structs.replace(
        original,
        signature=rewritten.signature,
        sensitive=original.sensitive or rewritten.sensitive,
    )


def _snapshot(raw_args: Any) -> Any:
    """Stage 1's frozen copy. The usual arguments, an object of scalars, are checked here in a
    compiled loop; anything else is copied by ``freeze``."""
    if type(raw_args) is dict:
        for key, value in raw_args.items():
            kind = type(value)  # text first: the usual argument, and no set lookup
            if type(key) is not str or (kind is not str and kind not in _SCALAR_TYPES):
                return freeze(raw_args)
        return _FROZEN_DICT(raw_args)
    return freeze(raw_args)


def _changed_paths(
    call: _Call, tool: ToolDefinition, args: Any, body: BodyContext
) -> tuple[str, ...]:
    """Stage 14's paths: canonical, sorted, without repeats."""
    if body._changed is not None:
        return tuple(sorted(set(body.changed_files)))
    if call.lock_keys and not tool.concurrency_safe(args):
        return call.lock_keys
    return ()


def _started(tracer: CallTracer, call: _Call) -> Any:
    try:
        return tracer.call_started(call.name, call.ctx)
    except Exception:
        log.exception("tracer %r failed at the start of a call; the call goes on", tracer)
        return None


def _ended(
    tracer: CallTracer, token: Any, result: ToolResult | None, call: _Call, trace: CallTrace
) -> None:
    trace.settle(result)  # (refuse's, a cancelled call's, and one whose execute raised)
    trace.decision, trace.source = call.decision, call.decision_source
    trace.ended = _perf_clock()
    try:
        tracer.call_ended(token, result, trace)
    except Exception:
        log.exception("tracer %r failed at the end of a call; the result is unchanged", tracer)


def _isolated(callback: Callable[..., Any], argument: Any, what: str) -> None:
    try:
        callback(argument)
    except USER_CODE_ERRORS:
        log.exception("%s %r failed; the result is unchanged", what, callback)


def _gate_idle(gate: ToolConcurrencyGate) -> bool:
    stats = gate.statistics()
    return not (stats.shared_running or stats.exclusive_running or stats.queued)
