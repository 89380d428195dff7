"""``Gateway``: fastgate's pipeline behind one MCP endpoint (SPEC §23).

The MCP SDK's low-level ``Server`` speaks both protocol eras (2025-11-25 with sessions, the
2026-07-28 stateless one) over streamable HTTP and stdio; the gateway gives it three handlers:
``tools/list`` (per caller), ``tools/call`` (through a ``ToolExecutor``) and
``subscriptions/listen`` (list changes, 2026 era). Everything else (JSON-RPC framing, sessions,
the ``Mcp-Method``/``Mcp-Name`` cross-check, unknown methods, sealing ``requestState``) is the
SDK's.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any, Final
from urllib.parse import quote

import mcp_types as types
from mcp.server.auth.middleware.bearer_auth import RequireAuthMiddleware
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from fastgate.model import (
    ApprovalRequest,
    ApprovalResponse,
    CancelToken,
    ElicitationRequest,
    ElicitationResponse,
    ErrorCode,
    ExecutionContext,
    PermissionMode,
    ToolResult,
    cut,
    json_preview,
)
from fastgate.permissions import ApprovalStore, PermissionResolver, Refusal
from fastgate.pipeline import ToolExecutor, unknown_tool
from fastgate.serve import _state
from fastgate.serve._answers import QuickAnswers, current_answer
from fastgate.serve._approvals import (
    APPROVAL_FORM,
    APPROVALS_MODES,
    ApprovalsMode,
    KeptSessions,
    PendingApproval,
    PendingApprovals,
    answer_of,
    approval_message,
    too_long_to_ask,
    unanswered,
)
from fastgate.serve._audit import GatewayAudit
from fastgate.serve._callers import (
    LOCAL_CALLER,
    Caller,
    TokenTable,
    clean_client_session,
    session_id,
)
from fastgate.serve._console import PATH as CONSOLE_PATH
from fastgate.serve._console import Console
from fastgate.serve._console_auth import AdminTokens
from fastgate.serve._console_calls import CallRecorder, rule_source
from fastgate.serve._http import (
    OPEN_PATHS,
    AllowedHosts,
    Authenticate,
    BodyDeadline,
    LoopbackOnly,
    RateLimit,
    caller_of,
)
from fastgate.serve._legacy import LegacyRequests
from fastgate.serve._legacy import install as keep_legacy_answers_through_shutdown
from fastgate.serve._listing import (
    fingerprint,
    listed_tool,
    listing,
    output_schema,
    policy_generation,
    runnable_tool,
    shown_names,
)
from fastgate.serve._metrics import CONTENT_TYPE, GatewayMetrics
from fastgate.serve._preview import visible
from fastgate.serve._results import call_result, unknown_tool_result
from fastgate.serve._stdio import checked_stdio_server

log = logging.getLogger("fastgate.serve")

APPROVAL_INPUT: Final = "fastgate/approval"  # the key of the approval in inputRequests
SESSION_META: Final = "fastgate/session"
IDEMPOTENCY_META: Final = "fastgate/idempotency-key"
SESSION_HEADER: Final = "mcp-client-session"
IDEMPOTENCY_HEADER: Final = "idempotency-key"
MAX_BODY: Final = 4 * 1024 * 1024
_MAX_KEY: Final = 256
_LEGACY_SESSIONS_LIMIT: Final = 10_000


class _GatewayServer(Server[Any]):
    """The SDK's server, telling older-era clients that the tool list can change."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True),
            experimental_capabilities,
            extensions,
        )


@dataclass(slots=True)
class _Asking:
    """A 2026-era call stopped to ask its client: the request asked, for ``input_required``."""

    execution_id: str
    request: ApprovalRequest | None = None
    question: str = ""  # what the client is asked, the arguments whole


@dataclass(slots=True)
class _Listen:
    handler: ListenHandler
    bus: InMemorySubscriptionBus
    fingerprint: str | None = None


@dataclass(slots=True)
class _LegacySession:
    caller: Caller
    session: Any  # the SDK's ServerSession: its standalone channel reaches the client
    fingerprint: str | None = None


@dataclass(slots=True)
class _ProgressRoutes:
    """Progress reports of one executor, to the calls whose clients asked for them."""

    routes: dict[str, asyncio.Queue[Any]] = field(default_factory=dict)
    task: asyncio.Task[None] | None = None


class Gateway:
    """Serve ``executor``'s tools over MCP.

    ``tokens``: a ``TokenTable``, a tokens file, or its mapping; None serves only loopback
    connections, as principal ``local``. ``approvals``: who answers a call that asks:
    ``"client"`` (the calling client, by elicitation; a client that cannot falls back to the
    console when ``console`` is on, else nobody), ``"console"`` (``pending``, the registry a
    console serves), ``"deny"`` (nobody: ``PERMISSION_DENIED``, ``no_approver``).
    ``executors``: an executor per permission mode callers' tokens name (made from
    ``executor``'s parts when missing). ``bridge``: the ``MCPBridge`` whose tools are served
    (watched for list changes, its servers' states in ``/metrics``). ``audit``: a
    ``GatewayAudit`` (also every executor's audit sink). ``state_keys``: the keys sealing
    ``requestState`` (the first seals; replicas share them; None: a key of this process).
    ``rate_limit``: ``(requests per second, burst)`` per principal, None for no limit.
    ``state_ttl``: how long an approval asked through ``input_required`` may be answered.
    ``approval_timeout``: how long a call waits for its approval, from a client asked during
    the call or from the console; then it is refused (``PERMISSION_DENIED``, reason
    ``approval_timeout``: nobody answered, which is not a rejection).
    ``console``: serve the console (``/console``, SPEC §25) and answer there what a client
    cannot be asked; ``console_tokens``: its admins, an ``AdminTokens``, a file of token
    digests (one per line) or the digests (None: one token for this process,
    ``console_token``).
    """

    def __init__(
        self,
        executor: ToolExecutor,
        *,
        tokens: TokenTable | str | os.PathLike[str] | Mapping[str, Any] | None = None,
        approvals: ApprovalsMode = "client",
        console: bool = False,
        console_tokens: AdminTokens | str | os.PathLike[str] | Sequence[str] | None = None,
        executors: Mapping[PermissionMode | str, ToolExecutor] | None = None,
        bridge: Any = None,
        audit: GatewayAudit | None = None,
        workspace: str | None = None,
        state_keys: Sequence[bytes] | None = None,
        rate_limit: tuple[float, int] | None = (100.0, 200),
        max_body: int = MAX_BODY,
        read_timeout: float = 30.0,
        approval_timeout: float = 300.0,
        state_ttl: float = _state.STATE_TTL,
        session_idle_timeout: float = 1800.0,
        allowed_hosts: Sequence[str] | None = None,
        name: str = "fastgate",
    ) -> None:
        if not isinstance(executor, ToolExecutor):
            raise TypeError(f"executor: expected a ToolExecutor, got {type(executor).__name__}")
        if approvals not in APPROVALS_MODES:
            raise ValueError(f"approvals: expected one of {', '.join(APPROVALS_MODES)}")
        if type(max_body) is not int or max_body < 1024:
            raise ValueError(f"max_body: expected bytes >= 1024, got {max_body!r}")
        self.executor = executor
        self.tokens = _token_table(tokens)
        self.approvals: ApprovalsMode = approvals
        self.console = console
        self.pending = PendingApprovals(approval_timeout)
        self.kept_sessions = KeptSessions()  # whose session approvals the stores keep
        self.bridge = bridge
        self.audit = audit
        self.workspace = workspace
        self.rate_limit = rate_limit
        self.max_body = max_body
        self.read_timeout = read_timeout
        self.session_idle_timeout = session_idle_timeout
        self.state_ttl = state_ttl
        self.allowed_hosts = list(allowed_hosts) if allowed_hosts is not None else None
        self.name = name
        self.metrics = GatewayMetrics()
        self.metrics.watch(executor.scheduler.stats, bridge.status if bridge is not None else None)
        self._executors = self._executors_by_mode(executor, executors)
        self.calls: CallRecorder | None = None
        self._console: Console | None = None
        if console:
            self.calls = CallRecorder(workspace=workspace)
            self._console = Console(
                self.pending,
                self.calls,
                executor.scheduler.stats,
                bridge.status if bridge is not None else None,
                _admin_tokens(console_tokens),
                self.allowed_hosts,
            )
        self._resolvers: dict[int, PermissionResolver] = {}
        for each in {id(e): e for e in self._executors.values()}.values():
            each.set_tracer(self.metrics.tracer(each.tracer, each.registry))
            if self.calls is not None:
                each.set_tracer(self.calls.tracer(each, each.tracer))
        self._scopes = self._caller_scopes()
        self._codec = _state.HmacStateCodec(
            list(state_keys) if state_keys else [_state.state_key(None)]
        )
        self._nonces = _state.UsedNonces()
        self._listens: dict[Caller, _Listen] = {}
        self._legacy: OrderedDict[str, _LegacySession] = OrderedDict()
        self._progress: dict[int, _ProgressRoutes] = {}
        self._watchers: list[asyncio.Task[None]] = []
        self._stdio_session: str | None = None
        self._app: Starlette | None = None
        self.server = self._build_server()

    # -- the MCP server -------------------------------------------------------------------------

    def _build_server(self) -> Server[Any]:
        import fastgate

        server = _GatewayServer(
            self.name,
            version=fastgate.__version__,
            instructions="Tools served through fastgate: every call is validated, judged by "
            "policy, admitted fairly, journaled and audited.",
            get_tool_input_schema=self._input_schema,
        )
        server.add_request_handler("tools/list", types.PaginatedRequestParams, self._list_tools)
        server.add_request_handler("tools/call", types.CallToolRequestParams, self._call_tool)
        server.add_request_handler(
            "subscriptions/listen", types.SubscriptionsListenRequestParams, self._listen
        )
        security = RequestStateSecurity(
            codec=self._codec, ttl=self.state_ttl, bind_principal=self._principal_of
        )
        server.middleware.append(_ArgumentsOfAnyType())
        server.middleware.append(_StateRefusals(self))
        server.middleware.append(RequestStateBoundary(security, default_audience=self.name))
        return server

    def _input_schema(self, name: str) -> Mapping[str, Any] | None:
        """The schema the SDK checks a call's ``Mcp-Param-*`` headers against: only a tool the
        caller is listed; for any other name None, as for a name no tool has (the call is then
        refused as unknown, its headers unchecked)."""
        caller = _HTTP_CALLER.get()
        if caller is None:
            return None
        executor = self._executor_for(caller)
        try:
            tool = listed_tool(
                executor.registry, self._scope_of(caller), executor.permissions, executor.mode, name
            )
        except KeyError:  # a scope the registry no longer has: the pipeline refuses the call
            return None
        return None if tool is None else tool.input_schema

    # -- callers --------------------------------------------------------------------------------

    def _caller(self, ctx: ServerRequestContext[Any, Any]) -> Caller:
        request = ctx.request
        if request is None:
            return LOCAL_CALLER  # stdio: whoever started the gateway
        caller = caller_of(request.scope)
        if caller is None:  # the app's middleware authenticates every request first
            raise MCPError(types.INVALID_REQUEST, "unauthenticated request")
        return caller

    def _principal_of(self, ctx: ServerRequestContext[Any, Any]) -> str | None:
        return self._caller(ctx).principal

    def _executor_for(self, caller: Caller) -> ToolExecutor:
        if caller.mode is None:
            return self.executor
        return self._executors[caller.mode]

    def _scope_of(self, caller: Caller) -> str | None:
        scope = caller.scope
        if scope is None or isinstance(scope, str):
            return scope
        return self._scopes[scope]

    def _executors_by_mode(
        self,
        executor: ToolExecutor,
        given: Mapping[PermissionMode | str, ToolExecutor] | None,
    ) -> dict[PermissionMode, ToolExecutor]:
        out = {executor.mode: executor}
        for mode, each in (given or {}).items():
            out[PermissionMode.parse(mode)] = each
        wanted = {c.mode for c in self.tokens.callers()} if self.tokens is not None else set()
        for mode in sorted(m for m in wanted if m is not None and m not in out):
            if executor.registry.resolve("run_code") is not None:
                raise ValueError(
                    f"a token names mode {mode}, and code mode serves one executor: pass "
                    "executors={mode: ToolExecutor(...)} with a code mode of its own"
                )
            out[mode] = ToolExecutor(
                executor.registry,
                permissions=executor.permissions,
                mode=mode,
                approval_store=executor.approvals,
                hooks=executor.hooks,
                guards=executor.guards,
                scheduler=executor.scheduler,
                locks=executor.locks,
                store=executor.store,
                auto_verify=executor.auto_verify,
                context_defaults={"workspace_root": self.workspace} if self.workspace else None,
                audit=self.audit,
            )
        return out

    def _caller_scopes(self) -> dict[tuple[str, ...], str]:
        """A registry scope for every tool list a token names (fnmatch patterns)."""
        out: dict[tuple[str, ...], str] = {}
        if self.tokens is None:
            return out
        registry = self.executor.registry
        for caller in self.tokens.callers():
            scope = caller.scope
            if isinstance(scope, str):
                if registry.get_scope(scope) is None:
                    raise ValueError(
                        f"the token of {caller.principal} names scope {scope!r}, which the "
                        "registry does not have"
                    )
            elif scope is not None and scope not in out:
                name = f"serve:{len(out)}:{'|'.join(scope)[:80]}"
                if registry.get_scope(name) is None:
                    registry.scope(name, allow=scope)
                out[scope] = name
        return out

    # -- tools/list -----------------------------------------------------------------------------

    def tools_for(self, caller: Caller, *, modern: bool = True) -> list[dict[str, Any]]:
        """What ``caller`` is shown by ``tools/list`` (``modern``: the 2026 era, where an
        output schema need not be an object)."""
        executor = self._executor_for(caller)
        return listing(
            executor.registry,
            self._scope_of(caller),
            executor.permissions,
            executor.mode,
            object_outputs_only=not modern,
        )

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams
    ) -> HandlerResult:
        caller = self._caller(ctx)
        modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        tools = self.tools_for(caller, modern=modern)
        if not modern:
            self._remember_legacy_session(ctx, caller, fingerprint(tools))
            return {"tools": tools}
        # A caller's own list ("private"), never to be served from a cache: it changes with
        # the upstream servers.
        return {"tools": tools, "ttlMs": 0, "cacheScope": "private", "resultType": "complete"}

    def _remember_legacy_session(
        self, ctx: ServerRequestContext[Any, Any], caller: Caller, listed: str
    ) -> None:
        key = self._legacy_key(ctx)
        if key is None:
            return
        known = self._legacy.pop(key, None)
        if known is None and len(self._legacy) >= _LEGACY_SESSIONS_LIMIT:
            self._legacy.popitem(last=False)
        self._legacy[key] = _LegacySession(caller, ctx.session, listed)

    def _legacy_key(self, ctx: ServerRequestContext[Any, Any]) -> str | None:
        request = ctx.request
        if request is None:
            return self._stdio_session
        found: str | None = request.headers.get("mcp-session-id")
        return found

    async def _listen(
        self, ctx: ServerRequestContext[Any, Any], params: types.SubscriptionsListenRequestParams
    ) -> HandlerResult:
        caller = self._caller(ctx)
        listen = self._listens.get(caller)
        if listen is None:
            bus = InMemorySubscriptionBus()
            listen = self._listens[caller] = _Listen(ListenHandler(bus, max_subscriptions=64), bus)
        if listen.fingerprint is None:
            listen.fingerprint = fingerprint(self.tools_for(caller))
        return await listen.handler(ctx, params)

    async def tools_changed(self) -> None:
        """Tell every client whose tool list changed (``notifications/tools/list_changed``; in
        the 2026 era on its ``subscriptions/listen`` stream). The gateway calls it when an
        upstream server's tools change; call it after changing the registry yourself."""
        for key, known in list(self._legacy.items()):
            now = fingerprint(self.tools_for(known.caller, modern=False))
            if now == known.fingerprint:
                continue
            known.fingerprint = now
            try:
                await known.session.send_tool_list_changed()
            except Exception:  # a session that ended: forget it
                log.debug("tools/list_changed not delivered to session %s", key, exc_info=True)
                self._legacy.pop(key, None)
        for caller, listen in list(self._listens.items()):
            now = fingerprint(self.tools_for(caller))
            if now != listen.fingerprint:
                listen.fingerprint = now
                await listen.bus.publish(ToolsListChanged())

    # -- tools/call -----------------------------------------------------------------------------

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> HandlerResult:
        caller = self._caller(ctx)
        modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        raw = ctx.params or {}
        meta = raw.get("_meta")
        meta = meta if isinstance(meta, dict) else {}
        request = ctx.request
        headers = request.headers if request is not None else None
        client_session = self._client_session(ctx, meta, headers, modern)
        session = session_id(caller.principal, client_session)
        executor = self._executor_for(caller)
        name = params.name
        sent = _SENT_ARGUMENTS.get()
        arguments: Any = sent.value if sent is not None else params.arguments or {}
        execution_id = executor.new_execution_id()
        canonical = _state.canonical_arguments(arguments)
        digest = _state.digest_of(canonical)
        if self.calls is not None:  # the console keeps the head of the same encoding
            self.calls.begin(execution_id, canonical)
        if self.audit is not None:
            self.audit.begin(execution_id, caller.principal, digest, arguments, session)
        scope = self._scope_of(caller)
        key = _idempotency_key(meta, headers, client_session, ctx.request_id, modern)
        if isinstance(key, _Problem):
            return self._refused(executor, name, session, scope, execution_id, key, modern)
        asking = _Asking(execution_id)
        answered: ApprovalResponse | None = None
        if modern and params.request_state is not None:
            claims = self._check_state(
                caller, executor, name, digest, params.request_state, session, key
            )
            if isinstance(claims, _Problem):
                return self._refused(executor, name, session, scope, execution_id, claims, modern)
            if key is None and _state.keeps_journal(executor.store):
                key = _state.approval_key(claims)  # one journal entry per state, on any replica
            answered = _answer_in(params.input_responses)
        approver, cancel = self._approver(ctx, caller, modern, asking, answered)
        if approver is not None:
            approver = self._keeping_sessions(approver, caller, executor)
        context = ExecutionContext(
            session_id=session,
            workspace_root=self.workspace,
            cancel=cancel,
            approver=approver,
            agent_scope=scope,
            elicitor=self._elicitor(ctx, modern),
            idempotency_key=key,
            # A key is its principal's across client sessions: a client that comes back under
            # another session and re-sends its call gets the recorded result.
            idempotency_scope=caller.principal,
        )
        if self._hidden_from(caller, executor, name):
            return self._unknown(executor, name, context, scope, modern, execution_id)
        progress = await self._progress_route(ctx, executor, execution_id, meta)
        try:
            result = await executor.execute(name, arguments, context, execution_id=execution_id)
        except asyncio.CancelledError:  # the client cancelled, or went away
            self.metrics.calls.labels(name, "ABORTED").inc()
            if self.audit is not None:
                self.audit.cancelled(execution_id, name, session)
            raise
        finally:
            if progress is not None:
                progress.stop()
        if asking.request is not None and _stopped_to_ask(result):
            return self._input_required(
                caller, executor, name, digest, asking.question, session, key, execution_id
            )
        return self._answer(result, executor, scope, modern, call_id=execution_id)

    def _hidden_from(self, caller: Caller, executor: ToolExecutor, name: str) -> bool:
        """Whether policy hides tool ``name`` from ``caller`` (scope, a deny rule naming the whole
        tool, the caller's mode): its call is then refused as a call of a name no tool has,
        before the pipeline validates the arguments against the tool's schema."""
        scope = self._scope_of(caller)
        try:
            found = runnable_tool(
                executor.registry, scope, executor.permissions, executor.mode, name
            )
        except KeyError:  # a scope the registry no longer has: the pipeline refuses the call
            return False
        return found is None and executor.registry.resolve(name, scope) is not None

    def _unknown(
        self,
        executor: ToolExecutor,
        name: str,
        context: ExecutionContext,
        scope: str | None,
        modern: bool,
        execution_id: str,
    ) -> dict[str, Any]:
        """The refusal of a call of a tool hidden from the caller: that of a name no tool has."""
        shown = shown_names(executor.registry, scope, executor.permissions, executor.mode)
        message, details = unknown_tool(name, shown)
        result = executor.refuse(
            name,
            ErrorCode.UNKNOWN_TOOL,
            message,
            context,
            details=details,
            execution_id=execution_id,
        )
        return self._answer(result, executor, scope, modern, call_id=execution_id)

    def _answer(
        self,
        result: ToolResult,
        executor: ToolExecutor,
        scope: str | None,
        modern: bool,
        reason: str | None = None,
        call_id: str | None = None,
    ) -> dict[str, Any]:
        name = result.meta.tool_name
        unknown = result.error is not None and result.error.code is ErrorCode.UNKNOWN_TOOL
        if unknown:
            shown = shown_names(executor.registry, scope, executor.permissions, executor.mode)
            result = unknown_tool_result(result, shown)  # names only what the caller sees
        # Counted under an unknown name's label: a tool's own series would tell /metrics
        # readers that a tool hidden from the caller exists.
        self.metrics.count("" if unknown else name, result)
        if self.audit is not None:
            self.audit.result(result, reason, call_id)
        tool = executor.registry.resolve(name, scope) if result.ok else None
        structured = tool is not None and output_schema(tool) is not None
        return call_result(result, structured=structured, object_only=not modern, modern=modern)

    def _refused(
        self,
        executor: ToolExecutor,
        name: str,
        session: str,
        scope: str | None,
        execution_id: str,
        problem: _Problem,
        modern: bool,
    ) -> dict[str, Any]:
        context = ExecutionContext(
            session_id=session, workspace_root=self.workspace, agent_scope=scope
        )
        result = executor.refuse(
            name,
            problem.code,
            problem.message,
            context,
            details={"reason": problem.reason},
            execution_id=execution_id,
        )
        return self._answer(result, executor, scope, modern, call_id=execution_id)

    def refuse_state(self, ctx: ServerRequestContext[Any, Any]) -> dict[str, Any]:
        """The answer to a call whose ``requestState`` the SDK's boundary did not verify."""
        caller = self._caller(ctx)
        executor = self._executor_for(caller)
        raw = ctx.params or {}
        name = raw.get("name")
        problem = _Problem(
            ErrorCode.PERMISSION_DENIED,
            "Not permitted: the approval state sent back does not verify (altered, expired, "
            "another caller's or another call's); call the tool again to be asked afresh.",
            "invalid_request_state",
        )
        modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        execution_id = executor.new_execution_id()
        if self.audit is not None:
            arguments = raw.get("arguments")
            digest = _state.arguments_digest(arguments if arguments is not None else {})
            self.audit.begin(execution_id, caller.principal, digest, arguments, caller.principal)
        return self._refused(
            executor,
            name if isinstance(name, str) else "",
            caller.principal,
            self._scope_of(caller),
            execution_id,
            problem,
            modern,
        )

    # -- approvals ------------------------------------------------------------------------------

    def _approver(
        self,
        ctx: ServerRequestContext[Any, Any],
        caller: Caller,
        modern: bool,
        asking: _Asking,
        answered: ApprovalResponse | None,
    ) -> tuple[Any, CancelToken | None]:
        """Who answers this call's approval if it needs one, and (2026 era, asking the client)
        the token that stops the call at its approval to return ``input_required``."""
        if self.approvals == "deny":
            return None, None
        if self.approvals == "console":
            return self._console_approver(caller, ctx, modern), None
        if answered is not None:  # the 2026 era's retry, carrying the client's answer
            reply = answered

            async def answered_already(request: ApprovalRequest) -> ApprovalResponse | Refusal:
                if request.execution_id != asking.execution_id:
                    return await self._fallback(caller, request)
                return reply

            return answered_already, None
        if not self._client_elicits(ctx) or not _asks_forms(ctx):
            return (self._console_approver(caller, ctx, modern) if self.console else None), None
        if modern:
            stop = CancelToken()

            async def ask_client(request: ApprovalRequest) -> ApprovalResponse | Refusal:
                if request.execution_id != asking.execution_id:  # a call from code
                    return await self._fallback(caller, request)
                question = approval_message(request, caller.principal)
                if question is None:  # too long to be shown whole in the question
                    return await self._fallback(caller, request, too_long=True)
                asking.request, asking.question = request, question
                stop.cancel("input_required")
                await asyncio.Event().wait()  # the cancellation ends the wait for an answer
                raise AssertionError("unreachable")

            return ask_client, stop
        session = ctx.session
        related = ctx.request_id
        timeout = self.pending.timeout
        at_console = self._console_approver(caller, ctx, modern) if self.console else None

        async def elicit(request: ApprovalRequest) -> ApprovalResponse | Refusal:
            question = approval_message(request, caller.principal)
            if question is None:  # too long to be shown whole in the question
                if at_console is not None:
                    answer: ApprovalResponse | Refusal = await at_console(request)
                    return answer
                return too_long_to_ask(request)
            # Bounded as the console's wait is: a client that never answers must not hold the
            # call, nor the session's prompt lock and so its other calls, forever.
            deadline = asyncio.timeout(timeout)
            try:
                async with deadline:
                    reply = await session.elicit_form(
                        question, APPROVAL_FORM, related_request_id=related
                    )
            except TimeoutError:
                if not deadline.expired():
                    raise
                return unanswered("the client", timeout)
            return answer_of(reply.action, reply.content)

        return elicit, None

    def _keeping_sessions(self, approver: Any, caller: Caller, executor: ToolExecutor) -> Any:
        """``approver``, noting each session approval it gives in ``kept_sessions`` (which
        forgets a principal's least recently approved sessions beyond its bound)."""
        kept, store = self.kept_sessions, executor.approvals

        async def keeping(request: ApprovalRequest) -> ApprovalResponse | Refusal:
            answer: ApprovalResponse | Refusal = await approver(request)
            if isinstance(answer, ApprovalResponse) and answer.approved and answer.scope != "once":
                kept.approved(caller.principal, request.session_id, store)
            return answer

        return keeping

    def _console_approver(
        self, caller: Caller, ctx: ServerRequestContext[Any, Any] | None = None, modern: bool = True
    ) -> Any:
        """Wait for the console's answer; a client of the older era that can open a URL is
        pointed at the approval's page (URL-mode elicitation) meanwhile."""
        pending = self.pending
        console_url = None if ctx is None or modern else self._console_url(ctx)

        async def at_console(request: ApprovalRequest) -> ApprovalResponse | Refusal:
            rule, source = self._asking_rule(caller, request)
            if console_url is None or ctx is None:
                return await pending.ask(request, caller.principal, rule=rule, rule_source=source)
            pointing: list[asyncio.Task[None]] = []

            def point(approval: PendingApproval) -> None:
                url = f"{console_url}/approvals/{quote(approval.id, safe='')}"
                sent = self._point_at_console(ctx, caller, request, approval, url)
                pointing.append(asyncio.ensure_future(sent))

            try:
                return await pending.ask(
                    request, caller.principal, rule=rule, rule_source=source, on_added=point
                )
            finally:
                for task in pointing:
                    task.cancel()
                await asyncio.gather(*pointing, return_exceptions=True)

        return at_console

    def _console_url(self, ctx: ServerRequestContext[Any, Any]) -> str | None:
        """The console's address as this client reached the gateway, when the console is
        served and the client can be sent to a URL (URL-mode elicitation, older era)."""
        request = ctx.request
        capabilities = ctx.session.client_capabilities
        if self._console is None or request is None or not ctx.session.can_send_request:
            return None
        if capabilities is None or capabilities.elicitation is None:
            return None
        if capabilities.elicitation.url is None:
            return None
        return str(request.base_url).rstrip("/") + CONSOLE_PATH

    async def _point_at_console(
        self,
        ctx: ServerRequestContext[Any, Any],
        caller: Caller,
        request: ApprovalRequest,
        approval: PendingApproval,
        url: str,
    ) -> None:
        """Send the client to the approval's page; a user who declines to go rejects it."""
        message = visible(
            f"fastgate: {request.tool_name} for {caller.principal} waits for an approval in "
            f"the console: {request.reason or request.source}"
        )
        try:
            reply = await ctx.session.elicit_url(
                message, url, approval.id, related_request_id=ctx.request_id
            )
        except Exception:  # the client could not be asked: the console still can
            log.debug("URL elicitation for %s failed", approval.id, exc_info=True)
            return
        if reply.action != "accept":
            verb = "declined" if reply.action == "decline" else "dismissed"
            self.pending.answer(
                approval.id,
                ApprovalResponse(False, feedback=f"The user {verb} the approval in the console."),
            )

    def _asking_rule(
        self, caller: Caller, request: ApprovalRequest
    ) -> tuple[str | None, str | None]:
        """The rule that asked for ``request`` and its settings file (None, None when the mode,
        a hook or a sensitive path asked)."""
        if request.source != "rule":
            return None, None
        executor = self._executor_for(caller)
        tool = executor.registry.resolve(request.tool_name, self._scope_of(caller))
        if tool is None:
            return None, None
        resolver = self._resolvers.get(id(executor))
        if resolver is None:  # its own store: a session approval must not hide the rule
            resolver = PermissionResolver(executor.permissions, executor.mode, ApprovalStore())
            self._resolvers[id(executor)] = resolver
        context = ExecutionContext(session_id=request.session_id, workspace_root=self.workspace)
        try:
            rule = resolver.decide(tool, request.args, context).matched_rule
        except Exception:  # shown without its rule rather than not asked
            log.debug("the rule asking for %s was not found", request.tool_name, exc_info=True)
            return None, None
        if rule is None:
            return None, None
        return rule, rule_source(executor, rule, self.workspace)

    async def _fallback(
        self, caller: Caller, request: ApprovalRequest, *, too_long: bool = False
    ) -> ApprovalResponse | Refusal:
        """A question the client cannot be asked (a call from code in the 2026 era, or
        ``too_long`` arguments to be shown whole in a question): the console's, else nobody's,
        the refusal of a call no approver can answer, not a user's rejection."""
        if self.console:
            rule, source = self._asking_rule(caller, request)
            return await self.pending.ask(request, caller.principal, rule=rule, rule_source=source)
        if too_long:
            return too_long_to_ask(request)
        return Refusal(
            ErrorCode.PERMISSION_DENIED,
            f"This call needs approval ({request.reason or request.source}), and no approver is "
            "available (the client cannot be asked during a program's call, and no console is "
            "served).",
            {"reason": "no_approver"},
        )

    @staticmethod
    def _client_elicits(ctx: ServerRequestContext[Any, Any]) -> bool:
        capabilities = ctx.session.client_capabilities
        if capabilities is None or capabilities.elicitation is None:
            return False
        modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        return modern or ctx.session.can_send_request

    def _check_state(
        self,
        caller: Caller,
        executor: ToolExecutor,
        name: str,
        digest: str,
        state: str,
        session: str,
        key: str | None,
    ) -> _Problem | _state.ApprovalClaims:
        tool = executor.registry.resolve(name, self._scope_of(caller))
        generation = policy_generation(tool, executor.permissions, executor.mode)
        try:
            claims = _state.check(
                state,
                principal=caller.principal,
                tool=name,
                arguments=digest,
                generation=generation,
                session=session,
                key=key,
            )
        except _state.StateProblem as exc:
            return _Problem(
                ErrorCode.PERMISSION_DENIED, f"Not permitted: {exc.message}.", exc.reason
            )
        # Taken again only for the journal entry that answers a repeat of the first use.
        entry = (session, key) if key is not None and _state.keeps_journal(executor.store) else None
        if not self._nonces.take(claims.nonce, claims.expires, entry):
            return _Problem(
                ErrorCode.PERMISSION_DENIED,
                "Not permitted: this approval was already used; call the tool again to be asked "
                "afresh.",
                "invalid_request_state",
            )
        return claims

    def _input_required(
        self,
        caller: Caller,
        executor: ToolExecutor,
        name: str,
        digest: str,
        question: str,
        session: str,
        key: str | None,
        execution_id: str,
    ) -> HandlerResult:
        if self.audit is not None:
            self.audit.forget(execution_id)
        tool = executor.registry.resolve(name, self._scope_of(caller))
        generation = policy_generation(tool, executor.permissions, executor.mode)
        state = _state.mint(
            caller.principal, name, digest, generation, self.state_ttl, session=session, key=key
        )
        ask = types.ElicitRequest(
            params=types.ElicitRequestFormParams(
                message=question,
                requested_schema=APPROVAL_FORM,
            )
        )
        return types.InputRequiredResult(input_requests={APPROVAL_INPUT: ask}, request_state=state)

    # -- what else a call carries ---------------------------------------------------------------

    def _client_session(
        self,
        ctx: ServerRequestContext[Any, Any],
        meta: Mapping[str, Any],
        headers: Mapping[str, str] | None,
        modern: bool,
    ) -> str | None:
        if not modern:
            if headers is None:
                return self._stdio_session
            return clean_client_session(headers.get("mcp-session-id"))
        named = headers.get(SESSION_HEADER) if headers is not None else None
        return clean_client_session(named if named is not None else meta.get(SESSION_META))

    def _elicitor(self, ctx: ServerRequestContext[Any, Any], modern: bool) -> Any:
        """An upstream server's question during a call goes to the calling client, when it
        can be asked (the older era's elicitation/create)."""
        if modern or not self._client_elicits(ctx):
            return None
        session = ctx.session
        related = ctx.request_id

        async def forward(question: ElicitationRequest) -> ElicitationResponse:
            if question.mode == "url" and question.url is not None:
                reply = await session.elicit_url(
                    question.message, question.url, uuid.uuid4().hex, related_request_id=related
                )
            else:
                reply = await session.elicit_form(
                    question.message,
                    question.requested_schema or {"type": "object", "properties": {}},
                    related_request_id=related,
                )
            return ElicitationResponse(reply.action, reply.content)

        return forward

    async def _progress_route(
        self,
        ctx: ServerRequestContext[Any, Any],
        executor: ToolExecutor,
        execution_id: str,
        meta: Mapping[str, Any],
    ) -> _ProgressForwarder | None:
        if meta.get("progressToken") is None:
            return None
        routes = self._progress.get(id(executor))
        if routes is None:
            routes = self._progress[id(executor)] = _ProgressRoutes()
        if routes.task is None or routes.task.done():
            routes.task = asyncio.get_running_loop().create_task(_route_progress(executor, routes))
            # Let it subscribe before the call starts: the body's first step runs inside
            # execute(), and what it reports before anyone listens to every call is not kept.
            await asyncio.sleep(0)
        answer = current_answer()
        report: _Report = ctx.session.report_progress
        if answer is not None:  # a 2026-era call on the quick path: its own stream
            report = functools.partial(answer.progress, meta["progressToken"])
        return _ProgressForwarder(routes, execution_id, report)

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Watch the bridge's servers for tool changes (the ASGI app's lifespan and
        ``run_stdio`` call it)."""
        if self._watchers or self.bridge is None:
            return
        for server in self.bridge.status():
            self._watchers.append(asyncio.create_task(self._watch_upstream(server)))

    async def aclose(self) -> None:
        tasks = [*self._watchers]
        tasks += [r.task for r in self._progress.values() if r.task is not None]
        self._watchers.clear()
        self._progress.clear()
        for listen in self._listens.values():
            listen.handler.close()
        self.close_streams()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _watch_upstream(self, server: str) -> None:
        bridge = self.bridge
        generation = int(bridge.status()[server].get("generation", 0))
        while True:
            try:
                await bridge.wait_for(server, state=None, generation=generation + 1)
            except RuntimeError:  # the server was closed
                return
            generation = int(bridge.status()[server].get("generation", generation + 1))
            try:
                await self.tools_changed()
            except Exception:
                log.exception("telling clients of %s's new tools failed", server)

    async def run_stdio(self) -> None:
        """Serve one client over this process's stdin and stdout (as principal ``local``)."""
        self._stdio_session = uuid.uuid4().hex
        await self.start()
        try:
            async with checked_stdio_server() as (read, write):
                await self.server.run(read, write, self.server.create_initialization_options())
        finally:
            await self.aclose()

    # -- HTTP -----------------------------------------------------------------------------------

    @property
    def console_token(self) -> str | None:
        """The console's admin token made for this process (no ``console_tokens`` given)."""
        return self._console.generated_token if self._console is not None else None

    def close_streams(self) -> None:
        """End the console's live streams: a server shutting down then need not wait for the
        browsers (``fastgate serve`` calls it on SIGTERM and SIGINT)."""
        if self._console is not None:
            self._console.close()

    def asgi(self) -> Starlette:
        """The ASGI app: ``/mcp`` (both eras), ``/healthz``, ``/metrics``, and ``/console``
        with ``console``. Its lifespan runs the session manager and ``start``/``aclose``."""
        if self._app is None:
            self._app = self._build_app()
        return self._app

    def _build_app(self) -> Starlette:
        security = None
        if self.allowed_hosts is not None:
            security = TransportSecuritySettings(
                enable_dns_rebinding_protection=True,
                allowed_hosts=self.allowed_hosts,
                allowed_origins=[
                    f"{s}://{h}" for s in ("http", "https") for h in self.allowed_hosts
                ],
            )
        manager = StreamableHTTPSessionManager(
            app=self.server,
            security_settings=security,
            max_request_body_size=self.max_body,
            session_idle_timeout=self.session_idle_timeout,
        )
        reject = self._count_rejection
        keep_legacy_answers_through_shutdown()
        legacy = LegacyRequests(StreamableHTTPASGIApp(manager), self.max_body, reject)
        mcp_app: Any = QuickAnswers(manager, legacy)
        if self.rate_limit is not None:
            mcp_app = RateLimit(mcp_app, self.rate_limit[0], self.rate_limit[1], reject)
        mcp_app = _require_caller(mcp_app, reject)
        metrics_app: Any = _require_caller(_MetricsApp(self), reject)
        # In front of every route: the Host check; without tokens, this machine only (all but
        # /healthz: the console too); a deadline for every request body (the console's forms
        # too).
        middleware = [Middleware(AllowedHosts, hosts=self.allowed_hosts)]
        if self.tokens is None:
            middleware.append(Middleware(LoopbackOnly, on_reject=reject, open_paths=OPEN_PATHS))
        middleware += [
            Middleware(Authenticate, tokens=self.tokens),
            Middleware(BodyDeadline, timeout=self.read_timeout, on_reject=reject),
        ]

        @contextlib.asynccontextmanager
        async def lifespan(app: Starlette) -> AsyncIterator[None]:
            async with manager.run():
                await self.start()
                try:
                    yield
                finally:
                    await self.aclose()

        return Starlette(
            routes=[
                Route("/mcp", endpoint=mcp_app, methods=["GET", "POST", "DELETE"]),
                Route("/healthz", endpoint=_healthz, methods=["GET"]),
                Route("/metrics", endpoint=metrics_app, methods=["GET"]),
                *(self._console.routes() if self._console is not None else ()),
            ],
            middleware=middleware,
            lifespan=lifespan,
        )

    def _count_rejection(self, status: int) -> None:
        self.metrics.http_rejections.labels(str(status)).inc()


# -- helpers ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Problem:
    code: ErrorCode
    message: str
    reason: str


def _admin_tokens(given: Any) -> AdminTokens | None:
    if given is None or isinstance(given, AdminTokens):
        return given
    if isinstance(given, (str, os.PathLike)):
        return AdminTokens.load(given)
    return AdminTokens(list(given))


def _asks_forms(ctx: ServerRequestContext[Any, Any]) -> bool:
    """The client takes form-mode elicitations (an elicitation capability naming no mode is
    the form mode of the older clients)."""
    capabilities = ctx.session.client_capabilities
    elicitation = capabilities.elicitation if capabilities is not None else None
    if elicitation is None:
        return False
    return elicitation.form is not None or elicitation.url is None


def _token_table(tokens: Any) -> TokenTable | None:
    if tokens is None or isinstance(tokens, TokenTable):
        return tokens
    if isinstance(tokens, Mapping):
        return TokenTable.from_mapping(dict(tokens))
    return TokenTable.load(tokens)


def _idempotency_key(
    meta: Mapping[str, Any],
    headers: Mapping[str, str] | None,
    client_session: str | None,
    request_id: Any,
    modern: bool,
) -> str | _Problem | None:
    """The client's own key, else (older era, on a session) ``<session>/<JSON-RPC id>``."""
    given = headers.get(IDEMPOTENCY_HEADER) if headers is not None else None
    if given is None:
        given = meta.get(IDEMPOTENCY_META)
    if given is not None:
        if not isinstance(given, str) or not 0 < len(given) <= _MAX_KEY or not given.isprintable():
            return _Problem(
                ErrorCode.INVALID_ARGS,
                f"The idempotency key must be 1 to {_MAX_KEY} printable characters.",
                "invalid_idempotency_key",
            )
        return f"client:{given}"
    if modern or client_session is None or request_id is None:
        return None
    # The id as JSON: an integer id (the usual kind) is its own digits, without the encoder.
    spelled = str(request_id) if type(request_id) is int else json.dumps(request_id)
    return f"rpc:{client_session}/{spelled}"


def _answer_in(responses: Mapping[str, Any] | None) -> ApprovalResponse:
    reply = (responses or {}).get(APPROVAL_INPUT)
    action = getattr(reply, "action", None)
    content = getattr(reply, "content", None)
    if not isinstance(action, str):
        return ApprovalResponse(False, feedback="The retry carried no answer to the approval.")
    return answer_of(action, content if isinstance(content, Mapping) else None)


def _stopped_to_ask(result: ToolResult) -> bool:
    error = result.error
    return error is not None and error.code is ErrorCode.ABORTED_BEFORE_DISPATCH


PROGRESS_CHARS: Final = 1_000  # of a progress message sent on to the client
_Report = Callable[[float, float | None, str | None], Awaitable[None]]
"""Sends one progress report to a call's client: progress, total, message."""


class _ProgressForwarder:
    """Sends one call's progress reports to its client, in order, until the call ends."""

    def __init__(self, routes: _ProgressRoutes, execution_id: str, report: _Report) -> None:
        self._routes = routes
        self._execution_id = execution_id
        queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=256)
        routes.routes[execution_id] = queue
        self._task = asyncio.get_running_loop().create_task(self._send(queue, report))

    @staticmethod
    async def _send(queue: asyncio.Queue[Any], report: _Report) -> None:
        step = 0.0
        while True:
            data = await queue.get()
            step += 1.0
            progress, total, message = step, None, None
            if isinstance(data, Mapping) and isinstance(data.get("progress"), (int, float)):
                progress = float(data["progress"])
                total = data.get("total") if isinstance(data.get("total"), (int, float)) else None
                said = data.get("message")
                message = cut(said, PROGRESS_CHARS) if isinstance(said, str) else None
            elif isinstance(data, str):
                message = cut(data, PROGRESS_CHARS)
            elif data is not None:  # written only as far as it is shown
                message = json_preview(data, PROGRESS_CHARS, indent=None, sort_keys=False)[0]
            try:
                await report(progress, total, message)
            except Exception:
                return

    def stop(self) -> None:
        self._routes.routes.pop(self._execution_id, None)
        self._task.cancel()


async def _route_progress(executor: ToolExecutor, routes: _ProgressRoutes) -> None:
    async for event in executor.progress(None):
        queue = routes.routes.get(event.execution_id)
        if queue is not None:
            with contextlib.suppress(asyncio.QueueFull):
                queue.put_nowait(event.data)


@dataclass(frozen=True, slots=True)
class _Sent:
    value: Any


# The arguments of the ``tools/call`` this task serves, when they are not a JSON object (the
# SDK's params model would make them a JSON-RPC error before the handler sees them).
_SENT_ARGUMENTS: ContextVar[_Sent | None] = ContextVar("fastgate_sent_arguments", default=None)


class _ArgumentsOfAnyType:
    """Server middleware: ``tools/call`` arguments that are not a JSON object (a list, a
    string, a number) reach the pipeline, which refuses them as ``INVALID_ARGS``: a refused call
    is an ``isError`` result the model can act on, never a JSON-RPC error."""

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        params = ctx.params
        if ctx.method != "tools/call" or not isinstance(params, Mapping):
            return await call_next(ctx)
        arguments = params.get("arguments")
        if arguments is None or isinstance(arguments, dict):
            return await call_next(ctx)
        token = _SENT_ARGUMENTS.set(_Sent(arguments))
        try:  # the SDK checks an object in their place; the handler takes them from here
            return await call_next(replace(ctx, params={**params, "arguments": {}}))
        finally:
            _SENT_ARGUMENTS.reset(token)


class _StateRefusals:
    """Server middleware: a ``requestState`` the SDK's boundary refuses is a refused call (an
    ``isError`` result), not a JSON-RPC error."""

    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if ctx.method != "tools/call":
            return await call_next(ctx)
        try:
            return await call_next(ctx)
        except MCPError as exc:
            data = exc.error.data
            if isinstance(data, dict) and data.get("reason") == "invalid_request_state":
                return self._gateway.refuse_state(ctx)
            raise


# The caller of the HTTP request this task serves.
_HTTP_CALLER: ContextVar[Caller | None] = ContextVar("fastgate_http_caller", default=None)


class _require_caller:
    """The SDK's ``RequireAuthMiddleware`` (401 with ``WWW-Authenticate``), counted. A request
    with a caller goes straight on: the SDK's middleware, asking for no scopes, would pass it."""

    def __init__(self, app: Any, on_reject: Callable[[int], None]) -> None:
        self._app = app
        self._required = RequireAuthMiddleware(app, required_scopes=[])
        self._on_reject = on_reject

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        caller = caller_of(scope)
        if caller is not None:
            token = _HTTP_CALLER.set(caller)  # for the SDK's schema lookup, which gets a name only
            try:
                await self._app(scope, receive, send)
            finally:
                _HTTP_CALLER.reset(token)
            return
        self._on_reject(401)
        await self._required(scope, receive, send)


async def _healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


class _MetricsApp:
    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        body = self._gateway.metrics.render()
        await Response(body, media_type=CONTENT_TYPE)(scope, receive, send)
