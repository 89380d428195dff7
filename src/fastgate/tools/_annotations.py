"""Turn Python annotations into schema nodes for ``@tool`` (SPEC §2.1).

Supported: ``str int float bool None``, ``list[T]``, ``dict[str, T]``, ``Literal[...]``,
``X | None`` and other unions, ``Annotated[T, Meta(...)]`` (fastgate's or msgspec's), and nested
msgspec.Struct / dataclass / TypedDict classes (inlined). Anything else is a ``TypeError`` at
definition time, naming the parameter.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints, is_typeddict

import msgspec

from fastgate.schema import (
    AnyOf,
    Array,
    Boolean,
    Enum,
    Integer,
    Meta,
    Null,
    Number,
    Object,
    SchemaNode,
    String,
)

_MSGSPEC_META = {
    "ge": "minimum",
    "le": "maximum",
    "gt": "exclusive_minimum",
    "lt": "exclusive_maximum",
    "multiple_of": "multiple_of",
    "pattern": "pattern",
    "description": "description",
    "title": "title",
}


def node_for(annotation: Any, where: str) -> SchemaNode:
    """The schema node of one annotation; ``where`` names it in error messages."""
    return _Converter(where).convert(annotation)


def class_fields(cls: type) -> list[tuple[str, Any, bool]]:
    """(name, annotation, required) of a msgspec.Struct, dataclass or TypedDict."""
    hints = get_type_hints(cls, include_extras=True)
    if isinstance(cls, type) and issubclass(cls, msgspec.Struct):
        return [(f.encode_name, hints[f.name], f.required) for f in msgspec.structs.fields(cls)]
    if dataclasses.is_dataclass(cls):
        return [
            (
                f.name,
                hints[f.name],
                f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
            )
            for f in dataclasses.fields(cls)
        ]
    if is_typeddict(cls):
        required = cls.__required_keys__  # type: ignore[attr-defined]
        return [(name, hint, name in required) for name, hint in hints.items()]
    raise TypeError(f"{cls!r} is not a msgspec.Struct, dataclass or TypedDict")


def is_record_class(annotation: Any) -> bool:
    return isinstance(annotation, type) and (
        issubclass(annotation, msgspec.Struct)
        or dataclasses.is_dataclass(annotation)
        or is_typeddict(annotation)
    )


class _Converter:
    def __init__(self, where: str) -> None:
        self.where = where
        self.active: list[type] = []  # classes being expanded: a repeat means recursion

    def convert(self, annotation: Any) -> SchemaNode:
        origin = get_origin(annotation)
        if origin is typing.Annotated:
            base, *extras = get_args(annotation)
            node = self.convert(base)
            for extra in extras:
                node = _apply_meta(node, extra)
            return node
        if annotation is str:
            return String()
        if annotation is bool:
            return Boolean()
        if annotation is int:
            return Integer()
        if annotation is float:
            return Number()
        if annotation is None or annotation is type(None):
            return Null()
        if annotation is Any:
            raise TypeError(f"{self.where}: Any gives the model no schema; use a concrete type")
        if origin is Literal:
            return Enum(list(get_args(annotation)))
        if origin in (Union, types.UnionType):
            options = [self.convert(arg) for arg in get_args(annotation)]
            return AnyOf(*options)
        if origin in (list, tuple) and origin is list:
            (item,) = get_args(annotation) or (None,)
            if item is None:
                raise TypeError(f"{self.where}: list needs an item type (list[T])")
            return Array(self.convert(item))
        if origin is dict:
            key, value = get_args(annotation) or (None, None)
            if key is not str:
                raise TypeError(f"{self.where}: dict keys must be str (dict[str, T])")
            return Object({}, additional=self.convert(value))
        if is_record_class(annotation):
            return self._record(annotation)
        raise TypeError(f"{self.where}: unsupported annotation {annotation!r}")

    def _record(self, cls: type) -> SchemaNode:
        if cls in self.active:
            raise TypeError(f"{self.where}: recursive type {cls.__name__} is not supported")
        self.active.append(cls)
        try:
            props: dict[str, SchemaNode] = {}
            required: list[str] = []
            for name, hint, is_required in class_fields(cls):
                props[name] = self.convert(hint)
                if is_required:
                    required.append(name)
        finally:
            self.active.pop()
        doc = (
            cls.__doc__ if cls.__doc__ and not cls.__doc__.startswith(cls.__name__ + "(") else None
        )
        return Object(props, required=tuple(required), description=doc.strip() if doc else None)


def _apply_meta(node: SchemaNode, extra: Any) -> SchemaNode:
    if isinstance(extra, Meta):
        updates = {k: v for k, v in dataclasses.asdict(extra).items() if v is not None}
    elif isinstance(extra, msgspec.Meta):
        updates = {}
        for attr, name in _MSGSPEC_META.items():
            value = getattr(extra, attr)
            if value is not None:
                updates[name] = value
        for attr in ("min_length", "max_length"):
            value = getattr(extra, attr)
            if value is not None:
                updates[
                    ("min_items" if attr == "min_length" else "max_items")
                    if isinstance(node, Array)
                    else attr
                ] = value
    else:
        return node  # other Annotated metadata is not ours to interpret
    updates.pop("examples", None)
    try:
        return node.evolve(**updates)
    except TypeError as exc:
        raise TypeError(f"Meta does not apply here: {exc}") from None
