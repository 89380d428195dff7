"""``ToolRegistry``: a global layer plus one layer per scope (an agent), SPEC §3.

A scope sees its own tools, then its parent's visible surface, then (at the top) the global
layer; a name registered closer shadows the same name further up. ``allow``/``deny`` filter only
what a scope *inherits*: its own tools are never filtered (a sub-agent keeps its report-back tool).

Every layer is an immutable mapping replaced as a whole under a lock (copy on write), so readers
never lock and a call in flight keeps the definition it resolved, whatever is swapped meanwhile.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterable
from fnmatch import fnmatchcase
from typing import Any

from fastgate.tools import ToolDefinition


@dataclasses.dataclass(frozen=True)
class Scope:
    """One scope. ``allow`` (None = everything) and ``deny`` are names or fnmatch patterns,
    applied to the inherited surface only; ``deny`` wins over ``allow``."""

    name: str
    parent: str | None = None
    allow: frozenset[str] | None = None
    deny: frozenset[str] = frozenset()

    def admits(self, tool_name: str) -> bool:
        if any(fnmatchcase(tool_name, pattern) for pattern in self.deny):
            return False
        if self.allow is None:
            return True
        return any(fnmatchcase(tool_name, pattern) for pattern in self.allow)


_EMPTY: dict[str, ToolDefinition] = {}  # shared: a published layer is never mutated


def _names(value: Iterable[str] | None, what: str) -> frozenset[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        raise TypeError(f"{what} must be a collection of tool names, not a single string")
    names = frozenset(value)
    if not all(isinstance(n, str) for n in names):
        raise TypeError(f"{what} must contain tool names (strings)")
    return names


class ToolRegistry:
    """Tool definitions by layer; see the module docstring for the visibility rules."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Copy-on-write: a layer, once in here, is never mutated (a change publishes a new one),
        # so lookups need no lock and plain dicts are safe to read.
        self._layers: dict[str | None, dict[str, ToolDefinition]] = {None: _EMPTY}
        self._scopes: dict[str, Scope] = {}
        self._pool_limits: dict[str, int] = {}

    # -- scopes ---------------------------------------------------------------------------------

    def scope(
        self,
        name: str,
        parent: str | None = None,
        allow: Iterable[str] | None = None,
        deny: Iterable[str] | None = None,
    ) -> Scope:
        """Create a scope under ``parent`` (None: directly under the global layer)."""
        if not isinstance(name, str) or not name:
            raise TypeError("a scope name must be a non-empty string")
        with self._lock:
            if name in self._scopes:
                raise ValueError(f"scope {name!r} already exists")
            if parent is not None and parent not in self._scopes:
                raise KeyError(f"parent scope {parent!r} does not exist")
            created = Scope(
                name, parent, _names(allow, "allow"), _names(deny, "deny") or frozenset()
            )
            self._scopes = {**self._scopes, name: created}
            self._layers = {**self._layers, name: _EMPTY}
        return created

    def drop_scope(self, name: str) -> None:
        """Remove a scope that has no child scopes, with its own registrations."""
        with self._lock:
            self._require_scope(name)
            if any(s.parent == name for s in self._scopes.values()):
                raise ValueError(f"scope {name!r} still has child scopes")
            self._scopes = {k: v for k, v in self._scopes.items() if k != name}
            self._layers = {k: v for k, v in self._layers.items() if k != name}

    def get_scope(self, name: str) -> Scope | None:
        return self._scopes.get(name)

    # -- registrations --------------------------------------------------------------------------

    def register(self, defn: ToolDefinition, scope: str | None = None) -> None:
        """Add ``defn`` to a layer, replacing a same-named tool of that layer atomically."""
        if not isinstance(defn, ToolDefinition):
            raise TypeError(f"register expects a ToolDefinition, got {type(defn).__name__}")
        with self._lock:
            self._require_scope(scope)
            layer = dict(self._layers[scope])
            layer[defn.name] = defn
            self._layers = {**self._layers, scope: layer}

    def unregister(self, name: str, scope: str | None = None) -> ToolDefinition | None:
        """Remove a tool from one layer; returns it, or None when that layer did not have it."""
        with self._lock:
            self._require_scope(scope)
            layer = dict(self._layers[scope])
            removed = layer.pop(name, None)
            if removed is not None:
                self._layers = {**self._layers, scope: layer}
        return removed

    def replace_layer(
        self, definitions: Iterable[ToolDefinition], scope: str | None = None
    ) -> None:
        """Swap a whole layer in one step (e.g. an MCP server's refreshed tool list)."""
        layer: dict[str, ToolDefinition] = {}
        for defn in definitions:
            if not isinstance(defn, ToolDefinition):
                raise TypeError(f"expected ToolDefinition, got {type(defn).__name__}")
            if defn.name in layer:
                raise ValueError(f"duplicate tool name {defn.name!r} in one layer")
            layer[defn.name] = defn
        with self._lock:
            self._require_scope(scope)
            self._layers = {**self._layers, scope: layer}

    # -- scheduler pools ------------------------------------------------------------------------

    def set_pool_limit(self, pool: object, limit: object) -> None:
        """Ask for ``limit`` concurrent calls in the scheduler pool ``pool`` (SPEC §8.2), e.g. an
        MCP server's ``max_concurrency`` for ``mcp:<server>``. An executor applies it to its
        scheduler when it first runs a tool of that pool."""
        if type(pool) is not str or not pool:
            raise ValueError(f"set_pool_limit: a pool name is a non-empty string, got {pool!r}")
        if type(limit) is not int or limit < 1:
            raise ValueError(f"set_pool_limit: the limit of {pool!r} must be an int >= 1")
        with self._lock:
            self._pool_limits = {**self._pool_limits, pool: limit}

    def pool_limit(self, pool: str) -> int | None:
        """The limit asked for ``pool`` through ``set_pool_limit``, or None."""
        return self._pool_limits.get(pool)

    # -- lookups (lock-free: they read one snapshot of the layers) ------------------------------

    def resolve(self, name: str, scope: str | None = None) -> ToolDefinition | None:
        """The definition ``scope`` sees under ``name``, or None."""
        layers, scopes = self._layers, self._scopes
        current = scope
        while True:
            layer = layers.get(current)
            if layer is None:
                raise KeyError(f"unknown scope {current!r}")
            found = layer.get(name)
            if found is not None:
                return found
            if current is None:
                return None
            info = scopes[current]
            if not info.admits(name):
                return None  # filtered out of what this scope inherits
            current = info.parent

    def visible(self, scope: str | None = None) -> dict[str, ToolDefinition]:
        """Every tool ``scope`` sees, by name."""
        layers, scopes = self._layers, self._scopes
        chain: list[str | None] = []
        current = scope
        while current is not None:
            if current not in scopes:
                raise KeyError(f"unknown scope {current!r}")
            chain.append(current)
            current = scopes[current].parent
        chain.append(None)
        # From the global layer down: each scope filters what it inherits, then adds its own.
        seen: dict[str, ToolDefinition] = dict(layers[None])
        for name in reversed(chain[:-1]):
            info = scopes[name]  # type: ignore[index]
            seen = {k: v for k, v in seen.items() if info.admits(k)}
            seen.update(layers[name])
        return seen

    def definitions(self) -> list[ToolDefinition]:
        """Every registered definition, of every layer (global first, then scopes by name)."""
        layers = self._layers
        order = [None, *sorted(name for name in layers if name is not None)]
        return [defn for layer in order for defn in layers[layer].values()]

    def schemas(self, scope: str | None = None) -> list[dict[str, Any]]:
        """What the model sees: ``{name, description, parameters}`` per tool, by name; nothing
        else (timeout, parallelism, kind and the rest are host metadata)."""
        tools = self.visible(scope)
        return [tools[name].model_schema() for name in sorted(tools)]

    def _require_scope(self, scope: str | None) -> None:
        if scope is not None and scope not in self._scopes:
            raise KeyError(f"unknown scope {scope!r}; create it with registry.scope({scope!r})")
