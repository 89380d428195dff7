"""The schema DSL (SPEC §2.2): small frozen nodes that render to JSON Schema.

Every node has ``to_json_schema()`` (iterative, so 10,000 nested nodes render without recursion)
and ``required()`` / ``optional()``, which mark it for the ``Object`` that holds it.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any, Self

from fastgate.errors import SchemaError

JSON = Any
_Children = list[tuple[dict[str, Any] | list[Any], str | int, "SchemaNode"]]


@dataclasses.dataclass(frozen=True, kw_only=True)
class SchemaNode:
    """Base of the DSL nodes. ``is_required`` is None (decided by ``Object(required=...)``)."""

    description: str | None = None
    title: str | None = None
    is_required: bool | None = None

    def required(self) -> Self:
        """This property must be present in the enclosing ``Object``."""
        return self.evolve(is_required=True)

    def optional(self) -> Self:
        """This property may be absent from the enclosing ``Object`` (overrides ``required=``)."""
        return self.evolve(is_required=False)

    def evolve(self, **changes: Any) -> Self:
        """A copy with some fields changed (nodes are frozen)."""
        allowed = {f.name for f in dataclasses.fields(self)}
        unknown = set(changes) - allowed
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field {', '.join(sorted(unknown))}")
        new = copy.copy(self)
        for name, value in changes.items():
            object.__setattr__(new, name, value)
        return new

    def _shallow(self) -> tuple[dict[str, Any], _Children]:
        """This node's JSON Schema without its children, and where each child goes."""
        raise NotImplementedError

    def to_json_schema(self) -> dict[str, Any]:
        """The JSON Schema (draft 2020-12) this node stands for."""
        root, children = self._annotated()
        stack = children
        while stack:
            container, key, child = stack.pop()
            rendered, grandchildren = child._annotated()
            container[key] = rendered  # type: ignore[index]
            stack.extend(grandchildren)
        return root

    def _annotated(self) -> tuple[dict[str, Any], _Children]:
        schema, children = self._shallow()
        if self.title is not None:
            schema["title"] = self.title
        if self.description is not None:
            schema["description"] = self.description
        return schema, children


def _put(schema: dict[str, Any], keyword: str, value: object) -> None:
    if value is not None:
        schema[keyword] = value


@dataclasses.dataclass(frozen=True, kw_only=True)
class Meta:
    """Constraints and annotations for ``Annotated[T, Meta(...)]`` in ``@tool`` signatures."""

    description: str | None = None
    title: str | None = None
    examples: tuple[JSON, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: float | None = None
    exclusive_maximum: float | None = None
    multiple_of: float | None = None
    min_length: int | None = None
    max_length: int | None = None
    pattern: str | None = None
    min_items: int | None = None
    max_items: int | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class String(SchemaNode):
    min_length: int | None = None
    max_length: int | None = None
    pattern: str | None = None
    enum: tuple[str, ...] | None = None

    def _shallow(self) -> tuple[dict[str, Any], _Children]:
        schema: dict[str, Any] = {"type": "string"}
        _put(schema, "minLength", self.min_length)
        _put(schema, "maxLength", self.max_length)
        _put(schema, "pattern", self.pattern)
        if self.enum is not None:
            schema["enum"] = list(self.enum)
        return schema, []


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Numeric(SchemaNode):
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: float | None = None
    exclusive_maximum: float | None = None
    multiple_of: float | None = None
    _type = "number"

    def _shallow(self) -> tuple[dict[str, Any], _Children]:
        schema: dict[str, Any] = {"type": self._type}
        _put(schema, "minimum", self.minimum)
        _put(schema, "maximum", self.maximum)
        _put(schema, "exclusiveMinimum", self.exclusive_minimum)
        _put(schema, "exclusiveMaximum", self.exclusive_maximum)
        _put(schema, "multipleOf", self.multiple_of)
        return schema, []


@dataclasses.dataclass(frozen=True, kw_only=True)
class Integer(_Numeric):
    _type = "integer"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Number(_Numeric):
    _type = "number"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Boolean(SchemaNode):
    def _shallow(self) -> tuple[dict[str, Any], _Children]:
        return {"type": "boolean"}, []


@dataclasses.dataclass(frozen=True, kw_only=True)
class Null(SchemaNode):
    def _shallow(self) -> tuple[dict[str, Any], _Children]:
        return {"type": "null"}, []


@dataclasses.dataclass(frozen=True)
class Array(SchemaNode):
    items: SchemaNode | None = None
    min_items: int | None = dataclasses.field(default=None, kw_only=True)
    max_items: int | None = dataclasses.field(default=None, kw_only=True)
    unique_items: bool = dataclasses.field(default=False, kw_only=True)

    def _shallow(self) -> tuple[dict[str, Any], _Children]:
        schema: dict[str, Any] = {"type": "array"}
        _put(schema, "minItems", self.min_items)
        _put(schema, "maxItems", self.max_items)
        if self.unique_items:
            schema["uniqueItems"] = True
        children: _Children = []
        if self.items is not None:
            children.append((schema, "items", self.items))
        return schema, children


@dataclasses.dataclass(frozen=True)
class Object(SchemaNode):
    """``properties`` name -> node; ``required`` names (or mark nodes with ``.required()``);
    ``additional``: False (default: no other property), True (any), or a node for the others."""

    properties: Mapping[str, SchemaNode] = dataclasses.field(default_factory=dict)
    required_names: tuple[str, ...] = dataclasses.field(default=(), kw_only=True)
    additional: bool | SchemaNode = dataclasses.field(default=False, kw_only=True)

    def __init__(
        self,
        properties: Mapping[str, SchemaNode] | None = None,
        required: tuple[str, ...] | list[str] = (),
        additional: bool | SchemaNode = False,
        *,
        description: str | None = None,
        title: str | None = None,
        is_required: bool | None = None,
    ) -> None:
        props = dict(properties or {})
        for name, node in props.items():
            if not isinstance(node, SchemaNode):
                raise SchemaError(
                    f"property {name!r} must be a schema node, got {type(node).__name__}",
                    pointer=f"#/properties/{name}",
                )
        object.__setattr__(self, "properties", props)
        object.__setattr__(self, "required_names", tuple(required))
        object.__setattr__(self, "additional", additional)
        object.__setattr__(self, "description", description)
        object.__setattr__(self, "title", title)
        object.__setattr__(self, "is_required", is_required)

    def required_properties(self) -> list[str]:
        names = [
            name
            for name, node in self.properties.items()
            if node.is_required or (node.is_required is None and name in self.required_names)
        ]
        names += [n for n in self.required_names if n not in self.properties]
        return names

    def _shallow(self) -> tuple[dict[str, Any], _Children]:
        props: dict[str, Any] = dict.fromkeys(self.properties)  # keeps declaration order
        schema: dict[str, Any] = {"type": "object", "properties": props}
        required = self.required_properties()
        if required:
            schema["required"] = required
        children: _Children = [(props, name, node) for name, node in self.properties.items()]
        if isinstance(self.additional, SchemaNode):
            children.append((schema, "additionalProperties", self.additional))
        elif self.additional is False:
            schema["additionalProperties"] = False
        return schema, children


@dataclasses.dataclass(frozen=True, kw_only=True)
class Enum(SchemaNode):
    values: tuple[JSON, ...] = ()

    def __init__(self, values: tuple[JSON, ...] | list[JSON], **kw: Any) -> None:
        object.__setattr__(self, "values", tuple(values))
        for name in ("description", "title", "is_required"):
            object.__setattr__(self, name, kw.get(name))

    def _shallow(self) -> tuple[dict[str, Any], _Children]:
        return {"enum": list(self.values)}, []


@dataclasses.dataclass(frozen=True, kw_only=True)
class Const(SchemaNode):
    value: JSON = None

    def __init__(self, value: JSON, **kw: Any) -> None:
        object.__setattr__(self, "value", value)
        for name in ("description", "title", "is_required"):
            object.__setattr__(self, name, kw.get(name))

    def _shallow(self) -> tuple[dict[str, Any], _Children]:
        return {"const": self.value}, []


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Choice(SchemaNode):
    options: tuple[SchemaNode, ...] = ()
    _keyword = "anyOf"

    def __init__(self, *options: SchemaNode, **kw: Any) -> None:
        if not options:
            raise SchemaError(f"{type(self).__name__} needs at least one schema")
        object.__setattr__(self, "options", options)
        for name in ("description", "title", "is_required"):
            object.__setattr__(self, name, kw.get(name))

    def _shallow(self) -> tuple[dict[str, Any], _Children]:
        members: list[Any] = [None] * len(self.options)
        return {self._keyword: members}, [(members, i, o) for i, o in enumerate(self.options)]


class OneOf(_Choice):
    """Exactly one option matches (options told apart by a ``Const`` field report per branch)."""

    _keyword = "oneOf"


class AnyOf(_Choice):
    """At least one option matches."""

    _keyword = "anyOf"


def Nullable(node: SchemaNode) -> AnyOf:
    """``node`` or null."""
    return AnyOf(node, Null(), is_required=node.is_required, description=node.description)
