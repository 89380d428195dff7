"""``MCPBridge``: MCP servers' tools in a ``ToolRegistry``, called through the full pipeline."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
from collections.abc import Iterable
from types import TracebackType
from typing import Any

from fastgate import FastgateError, ToolRegistry
from fastgate.mcp._config import MCPServerConfig
from fastgate.mcp._names import pool_name
from fastgate.mcp._server import CLOSED, READY, ServerLink
from fastgate.mcp._text import printable, shown
from fastgate.mcp._tools import Listing
from fastgate.permissions import withdraw_approvals

log = logging.getLogger("fastgate.mcp")


class MCPStartupError(FastgateError):
    """A server marked ``required=True`` did not start; ``server`` names it."""

    def __init__(self, server: str, reason: str) -> None:
        super().__init__(f"MCP server {server!r} did not start: {reason}")
        self.server = server
        self.reason = reason


class MCPBridge:
    """Registers the tools of ``servers`` in ``registry`` (each in its config's ``scope``) and
    keeps them current: ``tools/list_changed`` swaps a server's tools by generation, a server
    that dies is restarted with backoff. ``async with bridge:`` starts and stops it all;
    ``aclose()`` stops every server process, leaving none behind.
    """

    def __init__(self, registry: ToolRegistry, servers: Iterable[MCPServerConfig]) -> None:
        if not isinstance(registry, ToolRegistry):
            raise TypeError(f"registry: expected a ToolRegistry, got {type(registry).__name__}")
        configs = list(servers)
        for config in configs:
            if not isinstance(config, MCPServerConfig):
                raise TypeError(f"servers: expected MCPServerConfig, got {type(config).__name__}")
        names = [c.name for c in configs]
        duplicate = next((n for n in names if names.count(n) > 1), None)
        if duplicate is not None:
            raise ValueError(f"servers: the name {duplicate!r} is used twice")
        self.registry = registry
        for config in configs:
            registry.set_pool_limit(pool_name(config.name), config.max_concurrency)
        self._links = {c.name: ServerLink(c, self._install, self._taken) for c in configs}
        self._started = False
        self._closed = False

    async def __aenter__(self) -> MCPBridge:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def start(self, *, wait: float | None = None) -> None:
        """Connect to every server and register its tools. Returns once each server is ready
        or has failed its first attempt (a failed one keeps retrying in the background);
        ``MCPStartupError`` if a ``required`` server failed. ``wait``: at most how many seconds
        to wait for the servers that are not ``required`` (``None``: until each has made its
        first attempt, up to its ``startup_timeout``); one still connecting then goes on in
        the background, and its tools are registered (a new generation) once it is ready."""
        if wait is not None and not wait >= 0:
            raise ValueError(f"wait: expected seconds >= 0 or None, got {wait!r}")
        if self._started:
            raise RuntimeError("this MCPBridge was already started")
        if self._closed:
            raise RuntimeError("this MCPBridge is closed")
        self._started = True
        for config in self._configs():
            if config.scope is not None and self.registry.get_scope(config.scope) is None:
                raise ValueError(
                    f"MCP server {config.name!r}: scope {config.scope!r} does not exist"
                )
        for link in self._links.values():
            link.start()
        try:
            await self._first_attempts(wait)
        except BaseException:
            await self.aclose()
            raise
        for link in self._links.values():
            if link.config.required and link.state != READY:
                reason = link.last_error or "unknown"
                await self.aclose()
                raise MCPStartupError(link.config.name, reason)

    async def _first_attempts(self, wait: float | None) -> None:
        """Every required server's first attempt, and the others' within ``wait`` seconds of
        the start."""
        links = self._links.values()
        required = [link.first_attempt.wait() for link in links if link.config.required]
        others = [link.first_attempt.wait() for link in links if not link.config.required]
        loop = asyncio.get_running_loop()
        deadline = None if wait is None else loop.time() + wait
        optional = asyncio.ensure_future(asyncio.gather(*others))
        try:
            await asyncio.gather(*required)
            left = None if deadline is None else max(0.0, deadline - loop.time())
            await asyncio.wait((optional,), timeout=left)
        finally:
            optional.cancel()  # only the waiting: each server's own task goes on
            await asyncio.gather(optional, return_exceptions=True)

    async def aclose(self) -> None:
        """Unregister every tool of the bridge and stop every server (its whole process group)."""
        if self._closed:
            return
        self._closed = True
        for link in self._links.values():
            self._install(link, Listing((), {}, {}))
        await asyncio.gather(*(link.close() for link in self._links.values()))

    def status(self) -> dict[str, dict[str, Any]]:
        """Per server: ``state`` (starting, ready, restarting, closed: a server whose process
        has exited is never ``ready``, even before the bridge has reacted), ``transport``, ``tools``
        (count), ``generation``, ``quarantined`` (tool -> reason), ``last_error``,
        ``stderr_tail``, ``pid``, ``restarts``, ``protocol_version``."""
        return {
            name: {
                "state": link.current_state() if not self._closed else CLOSED,
                "transport": link.transport,
                "tools": len(link.tools),
                "tool_names": sorted(link.tools),
                "generation": link.generation,
                "quarantined": dict(link.quarantined),
                "last_error": link.last_error or link.lost_reason(),
                "stderr_tail": link.stderr.text(),
                "pid": link.pid,
                "pids": list(link.pids),
                "restarts": link.restarts,
                "protocol_version": link.protocol_version,
            }
            for name, link in self._links.items()
        }

    async def wait_for(
        self, server: str, *, state: str | None = READY, generation: int = 0
    ) -> None:
        """Wait until ``server`` is in ``state`` (None: any) with its tools at ``generation`` or
        later: after a restart, or a ``tools/list_changed`` the host wants to see applied.
        Bound it with ``asyncio.timeout``."""
        link = self._links[server]
        while not (
            (state is None or link.current_state() == state) and link.generation >= generation
        ):
            if link.state == CLOSED:
                raise RuntimeError(f"MCP server {server!r} is closed")
            await link.changed()

    def _configs(self) -> list[MCPServerConfig]:
        return [link.config for link in self._links.values()]

    # -- the registry ---------------------------------------------------------------------------

    def _taken(self, link: ServerLink, name: str) -> bool:
        """Whether ``name`` belongs to a tool that is not ``link``'s (another server's, or the
        host's own): an MCP tool never replaces it."""
        found = self.registry.resolve(name, link.config.scope)
        return found is not None and link.tools.get(name) is not found

    def _install(self, link: ServerLink, listing: Listing) -> None:
        """Swap ``link``'s tools for ``listing``'s in one step: no ``await`` in between, so no
        call on this loop sees half a generation. Calls in flight keep the definitions they
        resolved. A tool whose definition changed or that is gone takes its session approvals
        with it (a person approved what they were shown, not what the server says now); one
        the server lists unchanged keeps its definition, and so its approvals."""
        registry, scope = self.registry, link.config.scope
        new = {d.name: d for d in listing.definitions}
        for name, old in link.tools.items():
            if name not in new and registry.resolve(name, scope) is old:
                registry.unregister(name, scope)
        for definition in listing.definitions:
            registry.register(definition, scope)
        withdrawn = [old for name, old in link.tools.items() if new.get(name) is not old]
        link.tools = new
        for old in withdrawn:
            withdraw_approvals(old)
        # The names and reasons quote the server (its names, its schemas): escaped and cut
        # for the operator, and only the first few logged one by one.
        link.quarantined = {
            _shown_name(tool): shown(why, _REASON_CHARS)
            for tool, why in listing.quarantined.items()
        }
        for tool, reason in itertools.islice(link.quarantined.items(), _LOGGED):
            log.warning("MCP server %s: tool %r not registered: %s", link.config.name, tool, reason)
        if len(link.quarantined) > _LOGGED:
            log.warning(
                "MCP server %s: %d more tools not registered (bridge.status() names them)",
                link.config.name,
                len(link.quarantined) - _LOGGED,
            )


_NAME_CHARS = 200  # of a quarantined tool's name, as status() shows it
_REASON_CHARS = 1_000
_LOGGED = 20  # quarantined tools logged one by one, per listing


def _shown_name(name: str) -> str:
    """A server's tool name as ``status()`` shows it: escaped; a long one cut, with 8 hex digits
    of its SHA-256 so that two long names stay apart."""
    if len(name) <= _NAME_CHARS:
        return printable(name)
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{printable(name[:_NAME_CHARS])}…{digest}"
