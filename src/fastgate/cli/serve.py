"""``fastgate serve``: the MCP gateway on the command line, in front of any MCP client.

It reads the workspace's settings as ``fastgate call`` does (rules, hooks, mode, the
``.mcp.json`` servers), builds the executors, the journal, the audit and the gateway, and serves
streamable HTTP with uvicorn (or stdio with ``--stdio``) until SIGINT or SIGTERM, then stops
every upstream server process before it exits. Exit status: 0 after a clean shutdown, 2 for bad
usage or configuration.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

USAGE = 2
DEFAULT_LISTEN = "127.0.0.1:8765"
# Seconds serving waits for upstream servers that are not required: a server that hangs while
# starting delays nobody longer than this; its tools join when it is ready (clients are told).
UPSTREAM_WAIT = 5.0
STORE_FILE = "serve.db"  # under <workspace>/.fastgate/


class UsageError(Exception):
    """Bad usage or configuration: exit status 2, the message on stderr."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workspace", metavar="DIR", help="default: the current directory")
    parser.add_argument(
        "--settings",
        action="append",
        default=[],
        metavar="FILE",
        help="a settings file in Claude Code's shape (repeatable, merged in order)",
    )
    parser.add_argument(
        "--mcp-config",
        metavar="FILE",
        help="upstream MCP servers ({mcpServers}; default: the workspace's .mcp.json)",
    )
    parser.add_argument(
        "--upstream-wait",
        type=float,
        default=UPSTREAM_WAIT,
        metavar="SECONDS",
        help="how long serving waits for upstream servers not marked required; one still "
        f"starting then joins when ready (default {UPSTREAM_WAIT:g})",
    )
    parser.add_argument(
        "--builtin",
        default="all",
        metavar="NAMES",
        help="built-in tools to serve: a comma list (read,grep,...), all or none (default all)",
    )
    parser.add_argument(
        "--code-mode", action="store_true", help="serve run_code (tools called from a program)"
    )
    parser.add_argument(
        "--mode",
        help="permission mode (default, accept_edits, plan, yolo, dont_ask or Claude Code's "
        "names); default: the settings' defaultMode",
    )
    parser.add_argument(
        "--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT", help=f"default {DEFAULT_LISTEN}"
    )
    parser.add_argument(
        "--stdio", action="store_true", help="serve one client over stdin/stdout instead"
    )
    parser.add_argument(
        "--tokens",
        metavar="FILE",
        help='callers: {"<sha256 of a token>": {"principal", "mode", "scope"}}; without it '
        "only this machine is served, as principal local",
    )
    parser.add_argument(
        "--store",
        metavar="URL",
        help="the journal: sqlite:///PATH or postgresql://... "
        f"(default sqlite under <workspace>/.fastgate/{STORE_FILE})",
    )
    parser.add_argument(
        "--lease-ttl",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how long a journaled call's claim outlives a gateway that died (default 10)",
    )
    parser.add_argument("--redis", metavar="URL", help="share admission limits with replicas")
    parser.add_argument(
        "--approvals",
        choices=["client", "console", "deny"],
        default="client",
        help="who answers a call that asks (default client)",
    )
    parser.add_argument(
        "--console",
        action="store_true",
        help="serve the console at /console: approvals and live state (docs/console.md)",
    )
    parser.add_argument(
        "--console-token-file",
        metavar="FILE",
        help="the console's admins: one SHA-256 hex digest of an admin token per line "
        "(default: a token for this run, printed at start)",
    )
    parser.add_argument("--audit", metavar="FILE", help="append one JSON line per decision/result")
    parser.add_argument(
        "--no-discover",
        action="store_true",
        help="read only the --settings given, not the workspace's and the user's files",
    )
    parser.add_argument(
        "--rate-limit",
        type=float,
        default=100.0,
        metavar="N",
        help="requests a second per principal before 429 (bursts of 2N; 0: no limit)",
    )
    parser.add_argument(
        "--max-body", type=int, default=4 * 1024 * 1024, metavar="BYTES", help="default 4 MiB"
    )
    parser.add_argument(
        "--read-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="a request's head (from the connection or its first byte) and its body must "
        "each arrive within this (default 30)",
    )
    parser.add_argument(
        "--forwarded-allow-ips",
        metavar="ADDRESSES",
        help="trust X-Forwarded-For/-Proto only from these proxy addresses (a comma list, "
        "or *); default: trust no forwarding header",
    )
    parser.add_argument(
        "--state-key-file",
        metavar="FILE",
        help="the key sealing approval state (hex); replicas must share one",
    )
    parser.add_argument(
        "--allowed-host",
        action="append",
        metavar="HOST",
        help="accept only these Host headers (DNS-rebinding protection; default for a "
        "loopback --listen: localhost and 127.0.0.1 only)",
    )


def run_serve(args: argparse.Namespace) -> int:
    from fastgate.runtime import run

    try:
        return run(_serve(args))
    except UsageError as exc:
        print(f"fastgate serve: {exc}", file=sys.stderr)
        return USAGE
    except KeyboardInterrupt:
        return 0


# The journal's and the audit's writer threads take the GIL between their disk writes; handing
# it back to the event loop after 0.5 ms rather than Python's 5 ms cuts a call's latency by a
# third when every call is journaled (measured with the serve benchmark).
SWITCH_INTERVAL = 0.0005


def freeze_startup_heap() -> None:
    """Put what startup left alive out of the garbage collector's reach.

    A full collection walks every object the collector tracks. Once the gateway is up, about
    100,000 of them are modules, classes and schemas (the SDK's, Starlette's, pydantic's,
    OpenTelemetry's, ours) that no call frees, and each full collection walked them all: 50 ms
    with every caller waiting. Frozen, full collections walk only what calls made since."""
    gc.collect()
    gc.freeze()


async def _serve(args: argparse.Namespace) -> int:
    setup = _Setup(args)
    sys.setswitchinterval(SWITCH_INTERVAL)
    async with setup.running() as gateway:
        freeze_startup_heap()
        if args.stdio:
            await _serve_stdio(gateway)
        else:
            await _serve_http(gateway, setup)
    return 0


async def _serve_stdio(gateway: Any) -> None:
    """Until the client closes stdin, or SIGTERM/SIGINT: then the upstream servers are
    stopped like after any other shutdown."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    try:
        await gateway.run_stdio()
    except asyncio.CancelledError:
        if task.cancelling() == 0:
            raise
        task.uncancel()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


# -- setting up -------------------------------------------------------------------------------


class _Setup:
    """Everything the gateway needs, checked before anything starts."""

    def __init__(self, args: argparse.Namespace) -> None:
        from fastgate import Hooks, PermissionConfig, PermissionMode
        from fastgate.permissions import config, discovery

        self.args = args
        workspace = Path(args.workspace or os.getcwd())
        if not workspace.is_dir():
            raise UsageError(f"the workspace {workspace} is not a directory")
        self.workspace = str(workspace.resolve())
        discovered = [] if args.no_discover else discovery.settings_files(self.workspace)
        self.settings_files: list[str] = [*discovered, *args.settings]
        try:
            self.permissions = PermissionConfig.load(*self.settings_files, workspace=self.workspace)
            self.hooks = Hooks.load(*self.settings_files, workspace=self.workspace)
            if args.mode is not None:
                self.mode = PermissionMode.parse(args.mode)
            else:
                self.mode = self.permissions.default_mode or PermissionMode.DEFAULT
        except (OSError, ValueError) as exc:
            raise UsageError(str(exc)) from None
        if self.mode is PermissionMode.YOLO and self.permissions.bypass_disabled:
            raise UsageError(config.BYPASS_DISABLED)
        self.mcp_config: str | None = args.mcp_config
        self.disabled_servers: frozenset[str] = frozenset()
        if self.mcp_config is None and not args.no_discover:
            self.mcp_config = discovery.mcp_config_file(self.workspace)
            self.disabled_servers = discovery.disabled_mcp_servers(self.settings_files)
        self.builtins = _builtin_names(args.builtin)
        self.host, self.port = _listen(args.listen)
        if args.stdio and args.tokens:
            raise UsageError("--tokens is for HTTP callers; a --stdio client is its launcher")
        self.tokens = _tokens(args.tokens)
        if args.stdio and (args.console or args.console_token_file):
            raise UsageError("--console: the console is served over HTTP, which --stdio is not")
        # Approvals answered at the console need the console's pages.
        self.console = bool(args.console or args.approvals == "console") and not args.stdio
        if args.console_token_file and not self.console:
            raise UsageError("--console-token-file: the console is served with --console")
        self.console_tokens = _console_tokens(args.console_token_file)
        self.state_keys = _state_keys(args.state_key_file)
        if not args.lease_ttl > 0:
            raise UsageError("--lease-ttl: expected seconds > 0")
        if not args.upstream_wait >= 0:
            raise UsageError("--upstream-wait: expected seconds >= 0")
        if not args.read_timeout > 0:  # (nan is not)
            raise UsageError("--read-timeout: expected seconds > 0")
        if not args.rate_limit >= 0:
            raise UsageError("--rate-limit: expected requests a second >= 0 (0: no limit)")

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Any]:
        """The gateway, with its store, scheduler, bridge and audit open; all closed after."""
        from fastgate import ToolRegistry
        from fastgate.serve import Gateway

        registry = ToolRegistry()
        self._register_builtins(registry)
        async with contextlib.AsyncExitStack() as stack:
            store = await self._store()
            stack.push_async_callback(_close_store, store)
            scheduler = self._scheduler()
            stack.push_async_callback(scheduler.close)
            audit = self._audit()
            if audit is not None:
                stack.push_async_callback(audit.aclose)
            bridge = await self._bridge(registry)
            if bridge is not None:
                stack.push_async_callback(bridge.aclose)
            executors = self._executors(registry, store, scheduler, audit)
            stack.callback(_dispose, executors)
            _instrument(executors)
            try:
                gateway = Gateway(
                    executors[self.mode],
                    tokens=self.tokens,
                    approvals=self.args.approvals,
                    console=self.console,
                    console_tokens=self.console_tokens,
                    executors=executors,
                    bridge=bridge,
                    audit=audit,
                    workspace=self.workspace,
                    state_keys=self.state_keys,
                    rate_limit=self._rate_limit(),
                    max_body=self.args.max_body,
                    read_timeout=self.args.read_timeout,
                    allowed_hosts=self._allowed_hosts(),
                )
            except (TypeError, ValueError) as exc:
                raise UsageError(str(exc)) from None
            yield gateway

    def _register_builtins(self, registry: Any) -> None:
        if not self.builtins:
            return
        try:
            from fastgate.builtin import register_builtins
        except ImportError as exc:
            raise UsageError(f"--builtin: {exc}") from None
        try:
            register_builtins(registry, include=None if self.builtins == "all" else self.builtins)
        except ValueError as exc:
            raise UsageError(f"--builtin: {exc}") from None

    async def _store(self) -> Any:
        url = self.args.store
        if url is None:
            folder = Path(self.workspace) / ".fastgate"
            folder.mkdir(exist_ok=True)
            url = f"sqlite:///{folder / STORE_FILE}"
        if url.startswith("sqlite:///"):
            from fastgate import SqliteToolUseStore, StoreError

            try:
                # SQLAlchemy's spelling: sqlite:///relative/path, sqlite:////absolute/path
                return await SqliteToolUseStore.open(
                    url[len("sqlite:///") :], lease_ttl=self.args.lease_ttl
                )
            except (StoreError, OSError, ValueError) as exc:
                raise UsageError(f"--store: {exc}") from None
        if url.startswith(("postgresql://", "postgres://")):
            from fastgate import PostgresToolUseStore

            try:
                return PostgresToolUseStore(url, lease_ttl=self.args.lease_ttl)
            except (ImportError, ValueError) as exc:
                raise UsageError(f"--store: {exc}") from None
        raise UsageError(f"--store: expected sqlite:///PATH or postgresql://..., got {url!r}")

    def _scheduler(self) -> Any:
        from fastgate import ConcurrencyScheduler, SchedulerLimits

        cluster = None
        if self.args.redis:
            try:
                from fastgate.cluster import RedisCluster

                cluster = RedisCluster(self.args.redis)
            except (ImportError, ValueError) as exc:
                raise UsageError(f"--redis: {exc}") from None
        return ConcurrencyScheduler(SchedulerLimits(), cluster=cluster)

    def _audit(self) -> Any:
        if not self.args.audit:
            return None
        from fastgate.serve import GatewayAudit

        try:
            return GatewayAudit(self.args.audit)
        except OSError as exc:
            raise UsageError(f"--audit: {exc}") from None

    async def _bridge(self, registry: Any) -> Any:
        if self.mcp_config is None:
            return None
        try:
            from fastgate.mcp import MCPBridge, MCPStartupError, load_mcp_config
        except ImportError as exc:
            raise UsageError(f"--mcp-config needs the MCP bridge: {exc}") from None
        try:
            configured = load_mcp_config(self.mcp_config)
        except (OSError, ValueError) as exc:
            raise UsageError(str(exc)) from None
        servers = [server for server in configured if server.name not in self.disabled_servers]
        bridge = MCPBridge(registry, servers)
        try:
            await bridge.start(wait=self.args.upstream_wait)
        except MCPStartupError as exc:
            await bridge.aclose()
            raise UsageError(str(exc)) from None
        return bridge

    def _executors(self, registry: Any, store: Any, scheduler: Any, audit: Any) -> dict[Any, Any]:
        """One executor per permission mode in use: the gateway's, and each token's."""
        from fastgate import FileLockManager, ToolExecutor

        modes = {self.mode}
        if self.tokens is not None:
            modes |= {c.mode for c in self.tokens.callers() if c.mode is not None}
        if self.args.code_mode and len(modes) > 1:
            raise UsageError("--code-mode serves one permission mode: the tokens name others")
        locks = FileLockManager()
        shared: dict[str, Any] = {
            "permissions": self.permissions,
            "hooks": self.hooks,
            "scheduler": scheduler,
            "locks": locks,
            "store": store,
            "require_persistence": True,  # every call is journaled, or it does not run
            "context_defaults": {"workspace_root": self.workspace},
            "audit": audit,
        }
        code_mode = self._code_mode() if self.args.code_mode else None
        try:
            base = ToolExecutor(registry, mode=self.mode, code_mode=code_mode, **shared)
        except Exception as exc:  # code mode refusing a machine that cannot confine programs
            raise UsageError(str(exc)) from None
        executors: dict[Any, Any] = {self.mode: base}
        for mode in modes - {self.mode}:  # one store of session approvals for every mode
            executors[mode] = ToolExecutor(
                registry, mode=mode, approval_store=base.approvals, **shared
            )
        return executors

    def _code_mode(self) -> Any:
        try:
            from fastgate.codemode import CodeMode
        except ImportError as exc:
            raise UsageError(f"--code-mode: {exc}") from None
        return CodeMode()

    def _rate_limit(self) -> tuple[float, int] | None:
        rate = float(self.args.rate_limit)
        if rate == 0:
            return None
        return rate, max(1, int(rate * 2))

    def _allowed_hosts(self) -> list[str] | None:
        if self.args.allowed_host:
            return list(self.args.allowed_host)
        # Without tokens only this machine is served, whatever the address listened on: a
        # page a browser here loaded from another name (DNS rebinding) is refused too.
        if self.host in ("127.0.0.1", "localhost", "::1") or not self.tokens:
            return ["127.0.0.1:*", "localhost:*", "[::1]:*"]
        return None


def _builtin_names(value: str) -> str | list[str]:
    if value == "all":
        return "all"
    if value == "none":
        return []
    names = [n.strip() for n in value.split(",") if n.strip()]
    if not names:
        raise UsageError("--builtin: expected a comma list of tool names, all or none")
    return names


def _listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise UsageError(f"--listen: expected HOST:PORT, got {value!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def _tokens(path: str | None) -> Any:
    if path is None:
        return None
    from fastgate.serve import TokensError, TokenTable

    try:
        return TokenTable.load(path)
    except TokensError as exc:
        raise UsageError(f"--tokens: {exc}") from None


def _console_tokens(path: str | None) -> Any:
    if path is None:
        return None
    from fastgate.serve import AdminTokens, ConsoleTokensError

    try:
        return AdminTokens.load(path)
    except ConsoleTokensError as exc:
        raise UsageError(f"--console-token-file: {exc}") from None


def _state_keys(path: str | None) -> list[bytes] | None:
    if path is None:
        return None
    from fastgate.serve import state_key

    try:
        with open(path, "rb") as f:
            return [state_key(f.read())]
    except (OSError, ValueError) as exc:
        raise UsageError(f"--state-key-file: {exc}") from None


async def _close_store(store: Any) -> None:
    close = getattr(store, "close", None)
    if close is not None:
        await close()


def _instrument(executors: dict[Any, Any]) -> None:
    """An OpenTelemetry span per call where the OpenTelemetry API is installed; without an SDK
    configured its no-op tracer makes this nearly free."""
    try:
        from fastgate.telemetry import instrument
    except ImportError:
        return
    for executor in executors.values():
        instrument(executor)


def _dispose(executors: dict[Any, Any]) -> None:
    for executor in executors.values():
        executor.dispose()


# -- serving ----------------------------------------------------------------------------------


def listening_socket(host: str, port: int) -> socket.socket:
    """The gateway's TCP socket, listening before its address is announced (a client that
    connects at once waits in the backlog). Made with ``IPPROTO_TCP`` named: asyncio sets
    ``TCP_NODELAY`` only on connections of a socket that says it is TCP, and without it a reply
    written in two parts waits for the client's delayed ACK (about 40 ms)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    return sock


async def _serve_http(gateway: Any, setup: _Setup) -> None:
    import importlib.util

    import uvicorn

    from fastgate.serve import http_protocol

    try:
        sock = listening_socket(setup.host, setup.port)
    except OSError as exc:
        raise UsageError(f"--listen {setup.args.listen}: {exc.strerror or exc}") from None
    port = sock.getsockname()[1]
    implementation = "httptools" if importlib.util.find_spec("httptools") else "h11"
    forwarded = setup.args.forwarded_allow_ips
    config = uvicorn.Config(
        gateway.asgi(),
        http=http_protocol(
            implementation,
            setup.args.read_timeout,
            lambda status: gateway.metrics.http_rejections.labels(str(status)).inc(),
        ),
        lifespan="on",
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=5,
        server_header=False,
        # A client's address is the connection's unless the operator names the proxies whose
        # X-Forwarded-For is true (uvicorn would trust any from 127.0.0.1 by default).
        proxy_headers=bool(forwarded),
        forwarded_allow_ips=forwarded or "",
    )
    server = _server(config, gateway)
    shown = f"[{setup.host}]" if ":" in setup.host else setup.host
    who = "callers of --tokens" if setup.tokens is not None else "this machine only (local)"
    print(
        f"fastgate serve: listening on http://{shown}:{port}/mcp for {who}; "
        f"approvals: {setup.args.approvals}",
        file=sys.stderr,
        flush=True,
    )
    _announce_console(gateway, setup, f"http://{shown}:{port}")
    # uvicorn shuts down gracefully on SIGTERM/SIGINT, then raises the signal again for the
    # previous handler: let that one be a no-op, so the upstream servers are stopped before the
    # process exits (with status 0).
    quiet = {sig: signal.signal(sig, _ignore) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        await server.serve(sockets=[sock])
    finally:
        sock.close()
        for sig, handler in quiet.items():
            signal.signal(sig, handler)


def _server(config: Any, gateway: Any) -> Any:
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server, ending the console's live streams as it begins to shut down
        (a graceful shutdown waits for open responses, and a stream never ends by itself)."""

        def __init__(self, config: Any, gateway: Any) -> None:
            super().__init__(config)
            self._gateway = gateway

        def handle_exit(self, sig: int, frame: Any) -> None:
            self._gateway.close_streams()
            super().handle_exit(sig, frame)

    return Server(config, gateway)


def _announce_console(gateway: Any, setup: _Setup, origin: str) -> None:
    if not setup.console:
        return
    how = "with an admin token of --console-token-file"
    if gateway.console_token is not None:
        how = f"with the admin token {gateway.console_token} (this run only)"
    print(
        f"fastgate serve: console at {origin}/console: sign in {how}",
        file=sys.stderr,
        flush=True,
    )


def _ignore(signum: int, frame: Any) -> None:
    return None
