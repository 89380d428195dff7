"""Deep, frozen snapshots of JSON values (the arguments a hook rewrote).

A hook may keep a reference to the dict it returned and go on mutating it; the runner therefore
copies it at once into read-only mappings and tuples. The walk is iterative (no ``RecursionError``
on deep values) and bounded in nodes (a self-referencing value is an error, not a hang).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

MAX_NODES = 1_000_000


class NotJSONError(ValueError):
    """The value is not a JSON value (or is too large / cyclic)."""


def _where(path: list[str | int]) -> str:
    return "".join(f"[{p!r}]" for p in path) or "(top level)"


def freeze_json_object(value: object, *, max_nodes: int = MAX_NODES) -> Mapping[str, Any]:
    """A frozen deep copy of ``value``, which must be a JSON object.

    Objects become ``MappingProxyType`` over fresh dicts, arrays become tuples; leaves must be
    ``str``, ``int``, ``float``, ``bool`` or ``None``. Raises ``NotJSONError`` naming the first
    offending location.
    """
    if not isinstance(value, Mapping):
        raise NotJSONError(f"expected a JSON object, got {type(value).__name__}")
    budget = max_nodes
    root: dict[str, Any] = {}
    # Each pending entry: (source container, destination container, path of the source).
    pending: list[tuple[Any, Any, list[str | int]]] = [(value, root, [])]
    # Arrays are filled into lists first and turned into tuples once complete (children first).
    to_tuple: list[tuple[Any, Any, Any]] = []
    while pending:
        source, dest, path = pending.pop()
        items: Any = source.items() if isinstance(dest, dict) else enumerate(source)
        for key, item in items:
            budget -= 1
            if budget < 0:
                raise NotJSONError(f"more than {max_nodes} values (or a cycle)")
            if isinstance(dest, dict) and not isinstance(key, str):
                raise NotJSONError(f"non-string key {key!r} at {_where(path)}")
            if item is None or isinstance(item, (str, int, float)):  # bool is an int
                copy: Any = item
            elif isinstance(item, Mapping):
                copy = {}
                pending.append((item, copy, [*path, key]))
            elif isinstance(item, (list, tuple)):
                copy = []
                pending.append((item, copy, [*path, key]))
            else:
                raise NotJSONError(
                    f"{type(item).__name__} is not a JSON value, at {_where([*path, key])}"
                )
            if isinstance(dest, dict):
                dest[key] = copy
            else:
                dest.append(copy)
            if isinstance(copy, (dict, list)):
                to_tuple.append((dest, key if isinstance(dest, dict) else len(dest) - 1, copy))
    # Freeze bottom-up: children were registered after their parents.
    for parent, slot, child in reversed(to_tuple):
        parent[slot] = MappingProxyType(child) if isinstance(child, dict) else tuple(child)
    return MappingProxyType(root)
