"""Snapshots of tool arguments that nobody can mutate (SPEC §4 stage 1).

``freeze(value)`` copies a JSON-like value into ``FrozenDict`` / ``FrozenList``: subclasses of
``dict`` and ``list`` (so ``json.dumps``, ``isinstance`` and the validators see what they expect)
whose mutating methods raise ``TypeError``. The copy is iterative, so a 100,000-deep value
neither overflows the C stack nor raises ``RecursionError``; the caller's object is never touched,
and the tool and the hooks get the snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn


def _refuse(self: object, *args: object, **kwargs: object) -> NoReturn:
    raise TypeError(f"read-only snapshot ({type(self).__name__}): copy() gives a mutable one")


class FrozenDict(dict[str, Any]):
    """A ``dict`` that refuses mutation; ``copy()`` returns a plain, mutable ``dict``."""

    __slots__ = ()
    __setitem__ = __delitem__ = _refuse
    clear = pop = popitem = setdefault = update = __ior__ = _refuse

    def copy(self) -> dict[str, Any]:
        return dict(self)

    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return thaw(self)  # type: ignore[no-any-return]

    def __reduce__(self) -> tuple[Any, ...]:
        return (dict, (dict(self),))

    def __hash__(self) -> int:  # type: ignore[override]
        raise TypeError("unhashable type: 'FrozenDict'")


class FrozenList(list[Any]):
    """A ``list`` that refuses mutation; ``copy()`` returns a plain, mutable ``list``."""

    __slots__ = ()
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    append = extend = insert = pop = remove = clear = sort = reverse = _refuse

    def copy(self) -> list[Any]:
        return list(self)

    def __copy__(self) -> list[Any]:
        return list(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Any]:
        return thaw(self)  # type: ignore[no-any-return]

    def __reduce__(self) -> tuple[Any, ...]:
        return (list, (list(self),))


_SCALARS = (str, int, float, bool, type(None))
SCALAR_TYPES = frozenset(_SCALARS)  # exact types, for the executor's check; others go to freeze()
MAX_VALUES = 1_000_000  # arguments beyond this are refused: far past any real tool call


class NotJSON(TypeError):
    """A value that is not JSON-like (a set, bytes, an arbitrary object, a non-string key)."""


def freeze(value: Any) -> Any:
    """Deep, iterative copy of a JSON-like value into frozen containers (scalars are shared).
    The executor checks the usual arguments, an object of scalars, in compiled code first."""
    return _convert(value, FrozenDict, FrozenList)


def freeze_loosely(value: Any) -> Any:
    """``freeze`` for what a result carries (an error's details, content blocks): plain dicts
    and lists become frozen (a tuple's items too), any other object is kept as it is, and
    there is no size bound (a tool
    may put anything there; it is frozen so that nobody changes the result after the fact, the
    history's copy included). Iterative."""
    if type(value) in SCALAR_TYPES or type(value) is FrozenDict:
        return value
    root: list[Any] = [None]
    stack: list[tuple[Any, list[Any], int]] = [(value, root, 0)]
    found: list[tuple[type, list[Any], list[Any] | None, list[Any], int]] = []
    while stack:
        source, into, index = stack.pop()
        kind_of = type(source)
        if kind_of is not dict and kind_of is not list and kind_of is not tuple:
            # A scalar, frozen already, or an object of the tool's own (a dict subclass too:
            # its type may be what it means).
            into[index] = source
            continue
        keys = list(source.keys()) if kind_of is dict else None
        items = [source[key] for key in keys] if keys is not None else list(source)
        # A tuple stays a tuple (of frozen items): it was immutable, and equal to tuples.
        kind = FrozenDict if keys is not None else tuple if kind_of is tuple else FrozenList
        found.append((kind, items, keys, into, index))
        for i, item in enumerate(items):
            if type(item) not in SCALAR_TYPES:
                stack.append((item, items, i))
    for kind, children, keys, into, index in reversed(found):
        into[index] = kind(children) if keys is None else kind(zip(keys, children, strict=True))
    return root[0]


def thaw(value: Any) -> Any:
    """Deep, iterative copy into plain ``dict``/``list`` (for code that wants to mutate)."""
    return _convert(value, dict, list)


def _convert(value: Any, make_dict: type, make_list: type) -> Any:
    if isinstance(value, _SCALARS):
        return value
    # Explicit stack of (source, destination list, index). Containers are found parents first
    # and built children first, so each is made once from finished children. Every value is
    # counted once, when its container is reached (before its children are looked at). Plain
    # dicts and lists (what JSON decoders make) are told apart by their exact type first, and
    # their scalars placed at once: the ABC check of ``Mapping`` and a trip through the stack
    # per scalar cost more than the rest of the work.
    root: list[Any] = [None]
    stack: list[tuple[Any, list[Any], int]] = [(value, root, 0)]
    found: list[tuple[list[Any], list[str] | None, list[Any], int]] = []
    push = stack.append
    budget = MAX_VALUES - 1  # the root
    while stack:
        source, into, index = stack.pop()
        kind = type(source)
        if kind is dict or (kind is not list and isinstance(source, Mapping)):
            keys = list(source.keys())
            for key in keys:
                if type(key) is not str:
                    raise NotJSON(f"object keys must be strings, got {type(key).__name__} {key!r}")
            items = [source[key] for key in keys]
        elif kind is list or isinstance(source, (list, tuple)):
            keys = None
            items = list(source)
        elif isinstance(source, _SCALARS):  # a subclass of a scalar type
            into[index] = source
            continue
        else:
            raise NotJSON(f"not a JSON value: {type(source).__name__}")
        budget -= len(items)
        if budget < 0:
            raise NotJSON(f"more than {MAX_VALUES:,} values (or a value that contains itself)")
        found.append((items, keys, into, index))
        for i, item in enumerate(items):
            if type(item) not in SCALAR_TYPES:
                push((item, items, i))
    for children, keys, into, index in reversed(found):
        into[index] = (
            make_list(children) if keys is None else make_dict(zip(keys, children, strict=True))
        )
    return root[0]
