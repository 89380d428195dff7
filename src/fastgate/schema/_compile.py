"""Compile a raw JSON Schema (draft 2020-12 subset, SPEC §2.3) into the validation program.

Compilation is a worklist over schema locations: each subschema becomes one ``Node``;
subschemas are queued rather than recursed into, so a 100,000-level schema compiles with constant
Python stack. ``$ref`` points at the node of its target (created on demand), so recursive schemas
are graphs. A cycle of edges that never move into the instance (``$ref``, ``allOf``, ``anyOf``,
``oneOf``, ``not``, ``if``/``then``/``else``, ``dependentSchemas``) would loop forever at
validation: it is a ``SchemaError``.

Memory and time stay linear in the schema's size, whatever its depth: a node is found by the
identity of its subschema (one subschema object, one node), and its JSON pointer is not stored
whole but as the step from the node it was found under (``Node.pointer``, e.g.
``/properties/a``) plus a parent link; the full pointer is spelled out only for an error.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any, Final
from urllib.parse import unquote

from fastgate._core import validate as core
from fastgate.errors import SchemaError
from fastgate.schema._pattern import for_schema

#: Issues reported by ``Validator.validate`` before it stops (the rest are not computed).
DEFAULT_MAX_ISSUES = 50

_TYPE_KINDS: dict[str, int] = core.TYPE_KINDS
_BIT: dict[str, int] = core.CHECK_BITS
C_STR, C_NUM, C_ENUM, C_CONST = _BIT["string"], _BIT["number"], _BIT["enum"], _BIT["const"]
C_OBJ, C_ARR, C_APPLY, C_FALSE = _BIT["object"], _BIT["array"], _BIT["apply"], _BIT["false"]
C_COND = _BIT["conditional"]
# The annotation keywords of JSON Schema 2020-12 (meta-data, format, content): they describe,
# they never change validity. ``x-`` keywords are extensions and are ignored the same way.
_ANNOTATIONS = frozenset(
    (
        "title",
        "description",
        "default",
        "examples",
        "$comment",
        "format",
        "deprecated",
        "readOnly",
        "writeOnly",
        "contentMediaType",
        "contentEncoding",
        "contentSchema",
    )
)
_EXTENSION_PREFIX = "x-"
_COUNTS = {
    "minLength": "min_length",
    "maxLength": "max_length",
    "minItems": "min_items",
    "maxItems": "max_items",
    "minProperties": "min_properties",
    "maxProperties": "max_properties",
}
_BOUNDS = {
    "minimum": "minimum",
    "maximum": "maximum",
    "exclusiveMinimum": "exclusive_minimum",
    "exclusiveMaximum": "exclusive_maximum",
}
_SCHEMA_LISTS = {"allOf": "all_of", "anyOf": "any_of", "oneOf": "one_of"}
_STRUCTURE = C_OBJ | C_ARR | C_APPLY | C_COND


# JSON Schema 2020-12's plain-name fragment: what "$anchor" declares and "#name" refers to.
_ANCHOR = re.compile(r"[A-Za-z_][-A-Za-z0-9._]*")


def escape_token(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _is_extension(keyword: Any) -> bool:
    return type(keyword) is str and keyword.startswith(_EXTENSION_PREFIX)


def _where(pointer: str) -> str:
    return "#" + pointer


def _is_number(value: object) -> bool:
    return type(value) in (int, float) and (type(value) is int or math.isfinite(value))  # type: ignore[arg-type]


class _Compiler:
    def __init__(self, document: Any, engine: Any) -> None:
        self.document = document
        self.engine = engine
        # id(subschema) -> its node; the document keeps every subschema alive meanwhile.
        self.nodes: dict[int, core.Node] = {}
        self.parents: dict[int, core.Node] = {}  # id(node) -> the node it was found under
        self.pending: list[tuple[core.Node, Any]] = []
        self.root: core.Node | None = None
        # "$anchor" name -> its node; "#name" references are resolved once every location has
        # been filled (an anchor may be declared after the reference that uses it).
        self.anchors: dict[str, core.Node] = {}
        self.anchor_refs: list[tuple[core.Node, str]] = []

    def node_for(self, parent: core.Node | None, step: str, schema: Any) -> core.Node:
        """The node of ``schema``, found at ``step`` (a pointer suffix) below ``parent`` (None:
        ``step`` is a whole pointer from the root)."""
        node = self.nodes.get(id(schema))
        if node is None:
            if type(schema) is not dict and type(schema) is not bool:
                raise SchemaError(
                    f"a schema must be an object or a boolean, got {type(schema).__name__}",
                    pointer=_where(self.pointer_of(parent) + step),
                )
            node = self.engine.Node(step)
            self.nodes[id(schema)] = node
            if parent is not None:
                self.parents[id(node)] = parent
            self.pending.append((node, schema))
        return node

    def pointer_of(self, node: core.Node | None) -> str:
        """The JSON pointer of ``node`` (its steps from the root joined; for errors only)."""
        steps: list[str] = []
        while node is not None:
            steps.append(node.pointer)
            node = self.parents.get(id(node))
        return "".join(reversed(steps))

    def run(self) -> core.Node:
        root = self.root = self.node_for(None, "", self.document)
        while self.pending:
            node, schema = self.pending.pop()
            self.fill(node, schema)
        for node, name in self.anchor_refs:
            target = self.anchors.get(name)
            if target is None:
                raise self.bad(node, "$ref", f"$ref '#{name}' names no $anchor of this schema")
            node.ref = target
        for node in self.nodes.values():
            self.engine.finish_node(node, _STRUCTURE)
            _find_discriminator(node)
        _reject_stationary_cycles(root, self.pointer_of)
        return root

    # -- one location ---------------------------------------------------------------------------

    def fill(self, node: core.Node, schema: Any) -> None:
        if schema is True:
            return
        if schema is False:
            node.checks |= C_FALSE
            return
        for keyword, value in schema.items():
            if keyword in _ANNOTATIONS:
                continue
            if keyword == "$schema":
                _check_dialect(self, node, value)
                continue
            handler = _HANDLERS.get(keyword)
            if handler is None:
                if (keyword == "$id" and node is self.root) or _is_extension(keyword):
                    continue
                reason = "unsupported" if keyword in _KNOWN_UNSUPPORTED else "unknown"
                raise SchemaError(
                    f"{reason} keyword {keyword!r}: fastgate does not implement it, so the schema "
                    "cannot be enforced as written",
                    pointer=_where(self.pointer_of(node)),
                    keyword=keyword,
                )
            handler(self, node, keyword, value)

    def child(
        self, node: core.Node, keyword: str, schema: Any, name: str | None = None
    ) -> core.Node:
        """The node of ``schema``, found under ``node``'s ``keyword`` (at ``name`` inside it)."""
        step = "/" + escape_token(keyword)
        if name is not None:
            step += "/" + escape_token(name)
        return self.node_for(node, step, schema)

    def bad(self, node: core.Node, keyword: str, reason: str) -> SchemaError:
        return SchemaError(reason, pointer=_where(self.pointer_of(node)), keyword=keyword)

    def resolve(self, ref: Any, node: core.Node) -> core.Node:
        if type(ref) is not str:
            raise self.bad(node, "$ref", "$ref must be a string")
        if ref != "#" and not ref.startswith("#/"):
            raise self.bad(
                node,
                "$ref",
                f"only local references ('#', '#/...' or '#anchor') are supported, got {ref!r}",
            )
        tokens = [] if ref == "#" else unquote(ref[2:]).split("/")
        target = self.document
        for raw in tokens:
            token = raw.replace("~1", "/").replace("~0", "~")
            if type(target) is dict and token in target:
                target = target[token]
            elif type(target) is list and token.isdigit() and int(token) < len(target):
                target = target[int(token)]
            else:
                raise self.bad(node, "$ref", f"$ref {ref!r} does not resolve")
        pointer = "".join(
            "/" + escape_token(t.replace("~1", "/").replace("~0", "~")) for t in tokens
        )
        return self.node_for(None, pointer, target)


# Dialects whose meaning of the supported keywords is the one implemented here (older drafts
# spell the differing keywords, e.g. array-form ``items``, in forms that are rejected anyway).
_DIALECT = re.compile(
    r"https?://json-schema\.org/(draft/2020-12|draft/2019-09|draft-0[4-7])/schema#?"
)


def _check_dialect(c: _Compiler, node: core.Node, value: Any) -> None:
    if type(value) is not str or not _DIALECT.fullmatch(value):
        raise c.bad(
            node,
            "$schema",
            f"unknown dialect {value!r}: only the published JSON Schema meta-schemas are known",
        )


def _type(c: _Compiler, node: core.Node, keyword: str, value: Any) -> None:
    names = [value] if type(value) is str else value
    if type(names) is not list or not names:
        raise c.bad(node, keyword, "type must be a type name or a non-empty list of them")
    mask = 0
    for name in names:
        if type(name) is not str or name not in _TYPE_KINDS:
            raise c.bad(
                node, keyword, f"unknown type {name!r}; expected one of {sorted(_TYPE_KINDS)}"
            )
        mask |= _TYPE_KINDS[name]
    if len(set(names)) != len(names):
        raise c.bad(node, keyword, "type names must be unique")
    node.types = mask
    node.type_names = tuple(names)


def _count(c: _Compiler, node: core.Node, keyword: str, value: Any) -> None:
    if type(value) is float and value.is_integer() and value >= 0:
        value = int(value)
    if type(value) is not int or value < 0:
        raise c.bad(node, keyword, f"{keyword} must be a non-negative integer, got {value!r}")
    setattr(node, _COUNTS[keyword], value)
    node.checks |= {"L": C_STR, "I": C_ARR, "P": C_OBJ}[keyword[3]]


def _bound(c: _Compiler, node: core.Node, keyword: str, value: Any) -> None:
    if not _is_number(value):
        raise c.bad(node, keyword, f"{keyword} must be a finite number, got {value!r}")
    setattr(node, _BOUNDS[keyword], value)
    node.checks |= C_NUM


def _multiple_of(c: _Compiler, node: core.Node, keyword: str, value: Any) -> None:
    if not _is_number(value) or value <= 0:
        raise c.bad(node, keyword, f"multipleOf must be a number greater than 0, got {value!r}")
    node.multiple_of = value
    node.checks |= C_NUM


def _pattern(c: _Compiler, node: core.Node, keyword: str, value: Any) -> None:
    if type(value) is not str:
        raise c.bad(node, keyword, "pattern must be a string")
    try:
        pattern = for_schema(value)
    except ValueError as exc:
        shown = value if len(value) <= 200 else value[:197] + "..."
        raise c.bad(node, keyword, f"pattern {shown!r} cannot be used: {exc}") from None
    node.pattern = pattern
    node.pattern_source = value
    node.pattern_runs = pattern.runs
    node.checks |= C_STR


def _enum(c: _Compiler, node: core.Node, keyword: str, value: Any) -> None:
    if type(value) is not list:
        raise c.bad(node, keyword, "enum must be a list of values")
    node.enum_values = list(value)
    node.enum_keys = frozenset(c.engine.canonical(v) for v in value)
    node.checks |= C_ENUM


def _const(c: _Compiler, node: core.Node, keyword: str, value: Any) -> None:
    node.const_value = value
    node.const_key = c.engine.canonical(value)
    node.checks |= C_CONST


def _properties(c: _Compiler, node: core.Node, keyword: str, value: Any) -> None:
    if type(value) is not dict:
        raise c.bad(node, keyword, "properties must be an object mapping names to schemas")
    node.properties = {name: c.child(node, keyword, sub, name) for name, sub in value.items()}
    node.checks |= C_OBJ


def _required(c: _Compiler, node: core.Node, keyword: str, value: Any) -> None:
    if type(value) is not list or any(type(name) is not str for name in value):
        raise c.bad(node, keyword, "required must be a list of property names (strings)")
    if len(set(value)) != len(value):
        raise c.bad(node, keyword, "required must not repeat a name")
    node.required = tuple(value)
    node.checks |= C_OBJ


def _additional(c: _Compiler, node: core.Node, keyword: str, value: Any) -> None:
    if value is False:
        node.additional_false = True
    else:
        node.additional = c.child(node, keyword, value)
    node.checks |= C_OBJ


def _items(c: _Compiler, node: core.Node, keyword: str, value: Any) -> None:
    if value is False:
        node.items_false = True
    else:
        node.items = c.child(node, keyword, value)
    node.checks |= C_ARR


def _prefix_items(c: _Compiler, node: core.Node, keyword: str, value: Any) -> None:
    if type(value) is not list or not value:
        raise c.bad(node, keyword, "prefixItems must be a non-empty list of schemas")
    node.prefix = [c.child(node, keyword, sub, str(i)) for i, sub in enumerate(value)]
    node.checks |= C_ARR


def _unique(c: _Compiler, node: core.Node, keyword: str, value: Any) -> None:
    if type(value) is not bool:
        raise c.bad(node, keyword, "uniqueItems must be true or false")
    node.unique = value
    if value:
        node.checks |= C_ARR


def _schema_list(c: _Compiler, node: core.Node, keyword: str, value: Any) -> None:
    if type(value) is not list or not value:
        raise c.bad(node, keyword, f"{keyword} must be a non-empty list of schemas")
    branches = [c.child(node, keyword, sub, str(i)) for i, sub in enumerate(value)]
    setattr(node, _SCHEMA_LISTS[keyword], branches)
    node.checks |= C_APPLY


def _not(c: _Compiler, node: core.Node, keyword: str, value: Any) -> None:
    node.not_ = c.child(node, keyword, value)
    node.checks |= C_APPLY


def _ref(c: _Compiler, node: core.Node, keyword: str, value: Any) -> None:
    if type(value) is str and value[:1] == "#" and _ANCHOR.fullmatch(value[1:]):
        c.anchor_refs.append((node, value[1:]))  # resolved when every anchor is known
    else:
        node.ref = c.resolve(value, node)
    node.checks |= C_APPLY


def _anchor(c: _Compiler, node: core.Node, keyword: str, value: Any) -> None:
    """A name for this location, for ``$ref: "#name"``; it checks nothing itself."""
    if type(value) is not str or not _ANCHOR.fullmatch(value):
        raise c.bad(node, keyword, f"$anchor must be a name like 'address-v1', got {value!r}")
    if c.anchors.setdefault(value, node) is not node:
        raise c.bad(node, keyword, f"$anchor {value!r} is declared twice in this schema")


def _conditional(c: _Compiler, node: core.Node, keyword: str, value: Any) -> None:
    # Compiled even when alone (errors surface); ``finish_node`` marks the node conditional
    # only when ``if`` has a ``then`` or an ``else`` to choose.
    setattr(node, keyword + "_", c.child(node, keyword, value))


def _names(value: Any) -> bool:
    return (
        type(value) is list and all(type(n) is str for n in value) and len(set(value)) == len(value)
    )


def _dependent_required(c: _Compiler, node: core.Node, keyword: str, value: Any) -> None:
    if type(value) is not dict or not all(
        type(name) is str and _names(needed) for name, needed in value.items()
    ):
        raise c.bad(
            node, keyword, "dependentRequired must map property names to lists of unique names"
        )
    node.dependent_required = tuple(
        [(name, tuple(needed)) for name, needed in value.items() if needed]
    )
    if node.dependent_required:
        node.checks |= C_APPLY | C_COND


def _dependent_schemas(c: _Compiler, node: core.Node, keyword: str, value: Any) -> None:
    if type(value) is not dict or not all(type(name) is str for name in value):
        raise c.bad(node, keyword, "dependentSchemas must map property names to schemas")
    node.dependent_schemas = tuple(
        [(name, c.child(node, keyword, sub, name)) for name, sub in value.items()]
    )
    if node.dependent_schemas:
        node.checks |= C_APPLY | C_COND


def _defs(c: _Compiler, node: core.Node, keyword: str, value: Any) -> None:
    if type(value) is not dict:
        raise c.bad(node, keyword, f"{keyword} must be an object mapping names to schemas")
    for name, sub in value.items():
        c.child(node, keyword, sub, name)  # compiled so that errors surface now


_HANDLERS: dict[str, Any] = {
    "$anchor": _anchor,
    "type": _type,
    "properties": _properties,
    "required": _required,
    "additionalProperties": _additional,
    "items": _items,
    "prefixItems": _prefix_items,
    "enum": _enum,
    "const": _const,
    "allOf": _schema_list,
    "anyOf": _schema_list,
    "oneOf": _schema_list,
    "not": _not,
    "multipleOf": _multiple_of,
    "pattern": _pattern,
    "uniqueItems": _unique,
    "$ref": _ref,
    "if": _conditional,
    "then": _conditional,
    "else": _conditional,
    "dependentRequired": _dependent_required,
    "dependentSchemas": _dependent_schemas,
    "$defs": _defs,
    "definitions": _defs,
    **dict.fromkeys(_COUNTS, _count),
    **dict.fromkeys(_BOUNDS, _bound),
}
_KNOWN_UNSUPPORTED = frozenset(
    (
        "$id",
        "$dynamicRef",
        "$dynamicAnchor",
        "$recursiveRef",
        "$recursiveAnchor",
        "$vocabulary",
        "patternProperties",
        "unevaluatedProperties",
        "unevaluatedItems",
        "contains",
        "minContains",
        "maxContains",
        "dependencies",
        "propertyNames",
    )
)


def _find_discriminator(node: core.Node) -> None:
    """Detect ``oneOf``/``anyOf`` branches told apart by a string ``const`` on one property."""
    if bool(node.one_of) == bool(node.any_of):
        return
    branches = [_through_refs(b) for b in (node.one_of or node.any_of)]
    first = branches[0].properties
    for name in first:
        mapping: dict[str, core.Node] = {}
        required = True
        for original, branch in zip(node.one_of or node.any_of, branches, strict=True):
            prop = branch.properties.get(name)
            if prop is None or not prop.checks & C_CONST or type(prop.const_value) is not str:
                break
            if prop.const_value in mapping:
                break
            mapping[prop.const_value] = original
            required = required and name in branch.required
        else:
            node.disc_key = name
            node.disc_map = mapping
            node.disc_required = required
            return


def _through_refs(node: core.Node) -> core.Node:
    """A branch that is only a ``$ref`` stands for its target (bounded: cycles were rejected)."""
    seen = 0
    while node.ref is not None and node.checks == C_APPLY and not node.properties and seen < 64:
        if node.all_of or node.any_of or node.one_of or node.not_ is not None:
            break
        node = node.ref
        seen += 1
    return node


def _stationary_edges(node: core.Node) -> list[core.Node]:
    """Subschemas applied to the same instance location as ``node``."""
    edges = [*node.all_of, *node.any_of, *node.one_of]
    if node.not_ is not None:
        edges.append(node.not_)
    if node.ref is not None:
        edges.append(node.ref)
    if node.if_ is not None:  # set only when it has a then or an else (``finish_node``)
        edges.append(node.if_)
        edges.extend(n for n in (node.then_, node.else_) if n is not None)
    edges.extend(sub for _, sub in node.dependent_schemas)
    return edges


def _reject_stationary_cycles(root: core.Node, pointer_of: Callable[[core.Node], str]) -> None:
    """Run a cycle search from every node reachable from the root (each node searched once),
    counting on the way the checks a value meets at each node's place (see ``_reject_blowup``)."""
    state: dict[int, int] = {}  # id(node) -> 1 while on a DFS path, 2 when finished
    walk = _Walk()
    seen = {id(root)}
    todo = [root]
    while todo:
        node = todo.pop()
        if id(node) not in state:
            _reject_from(node, state, walk, pointer_of)
        for nxt in (
            *_stationary_edges(node),
            *node.properties.values(),
            *node.prefix,
            *(n for n in (node.items, node.additional) if n is not None),
        ):
            if id(nxt) not in seen:
                seen.add(id(nxt))
                todo.append(nxt)
    _reject_blowup(walk, len(seen), pointer_of)


class _Walk:
    """What the cycle search counts: per node, the checks a value at its place meets (its own
    and, through its same-place edges, theirs), and the edges."""

    __slots__ = ("checks", "links", "nodes")

    def __init__(self) -> None:
        self.checks: dict[int, int] = {}
        self.nodes: dict[int, core.Node] = {}
        self.links = 0


def _reject_from(
    start: core.Node, state: dict[int, int], walk: _Walk, pointer_of: Callable[[core.Node], str]
) -> None:
    """Iterative three-colour DFS over same-location edges: a back edge is a stationary cycle.
    A node's count is made when it is finished, from its edges' (finished before it)."""
    state[id(start)] = 1
    first = _stationary_edges(start)
    stack: list[tuple[core.Node, list[core.Node], list[core.Node]]] = [(start, list(first), first)]
    checks = walk.checks
    while stack:
        node, edges, every = stack[-1]
        if not edges:
            state[id(node)] = 2
            stack.pop()
            total = 1
            for edge in every:
                total += checks[id(edge)]
            checks[id(node)] = min(total, _SATURATED)
            walk.nodes[id(node)] = node
            walk.links += len(every)
            continue
        nxt = edges.pop()
        mark = state.get(id(nxt), 0)
        if mark == 1:
            raise SchemaError(
                "this $ref cycle never moves into the value, so validation could not terminate",
                pointer=_where(pointer_of(nxt)),
                keyword="$ref",
            )
        if mark == 0:
            state[id(nxt)] = 1
            following = _stationary_edges(nxt)
            stack.append((nxt, list(following), following))


# Subschemas one instance location may be checked against, counting each time a shared one
# (a $ref target) is reached again: `allOf: [$ref a, $ref a]` nested n deep is 2**n checks of
# every value, however small the schema text (a few KB could hold the loop for hours). Without
# shared targets a value meets each subschema once per edge leading to it, so the bound grows
# with the schema (its subschemas and their edges).
MAX_CHECKS_AT_ONE_PLACE: Final = 100_000
_SATURATED: Final = 1 << 62


def _reject_blowup(walk: _Walk, nodes: int, pointer_of: Callable[[core.Node], str]) -> None:
    """Refuse a schema under which one value would be checked against more subschemas than
    ``MAX_CHECKS_AT_ONE_PLACE`` or the schema's own subschemas and edges together."""
    limit = max(MAX_CHECKS_AT_ONE_PLACE, nodes + walk.links)
    for key, total in walk.checks.items():
        if total > limit:
            raise SchemaError(
                f"a value here would be checked against more than {limit:,} subschemas "
                "($ref targets reached again and again through allOf/anyOf/oneOf): "
                "validation could take hours",
                pointer=_where(pointer_of(walk.nodes[key])),
                keyword="$ref",
            )


def compile_json_schema(
    schema: Any, max_issues: int = DEFAULT_MAX_ISSUES, engine: Any = None
) -> core.Validator:
    """Compile a raw JSON Schema (dict or bool) into a ``Validator``; ``SchemaError`` if not.

    ``engine`` picks the core module explicitly (the tests compare the pure and compiled ones);
    by default it is the one ``fastgate._core`` selected.
    """
    if type(max_issues) is not int or max_issues < 1:
        raise ValueError("max_issues must be a positive integer")
    module = core if engine is None else engine
    root = _Compiler(schema, module).run()
    return module.Validator(root, schema, max_issues)  # type: ignore[no-any-return]
