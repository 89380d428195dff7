"""OpenAI's strict function schemas, only where they say the same as the tool's own schema.

Strict mode (Structured Outputs) accepts a subset of JSON Schema and wants every object closed
(``additionalProperties: false``) with every property required. A tool's schema converts when:

- every keyword is one strict mode supports, and every object is already closed. Annotations
  are dropped, ``format`` among them: the validator ignores it, strict mode enforces it, so
  keeping it would refuse values the tool accepts (``"ops-team"`` for an ``email``);
- every ``pattern`` means one set of strings in every regex dialect (``_portable``), and every
  ``multipleOf`` is a whole number (fastgate divides exactly, on the decimal value; a provider
  may divide in floating point and refuse ``0.0075`` as a multiple of ``0.0001``);
- every optional property either rejects ``null`` (it becomes required and nullable, and a
  ``null`` from the model is read back as "absent", so the tool sees what it would have seen) or
  declares ``"default": null`` (absent and ``null`` mean the same by the schema's own word).

An optional property that accepts ``null`` without saying absent means ``null`` cannot be made
required without changing what the tool can be sent, so such a tool (like one using ``oneOf``,
``minLength``, an open object, ...) stays non-strict. ``strict_form`` answers ``None`` then.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from fastgate.adapters._portable import portable_pattern
from fastgate.tools import ToolDefinition

# Strict mode's limits (OpenAI's Structured Outputs guide): past them the API refuses the schema.
MAX_OBJECT_DEPTH: Final = 10
MAX_PROPERTIES: Final = 5000
MAX_ENUM_VALUES: Final = 1000
# Ignored by fastgate's validator: dropping them changes nothing the tool accepts (strict mode
# would enforce ``format``, so it must go).
_DROPPED: Final = frozenset(
    {
        "$schema",
        "format",
        "$comment",
        "$id",
        "default",
        "examples",
        "deprecated",
        "readOnly",
        "writeOnly",
        "contentMediaType",
        "contentEncoding",
    }
)
_KEPT: Final = frozenset(
    {
        "title",
        "description",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minItems",
        "maxItems",
    }
)
# Kept only where strict mode reads them as fastgate does (``_checked``).
_CHECKED: Final = frozenset({"pattern", "multipleOf"})
_STRUCTURE: Final = frozenset(
    {"type", "properties", "required", "additionalProperties", "items", "enum", "const"}
    | {"anyOf", "$ref", "$defs", "definitions", "uniqueItems"}
)
_JSON_TYPES: Final = {
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
    type(None): "null",
    list: "array",
    dict: "object",
}


class _NotStrict(Exception):
    """The schema cannot be said in strict mode without changing its meaning."""


class _Plan:
    """Where a ``null`` from the model means "absent" in the arguments (None where nowhere)."""

    __slots__ = ("absent_if_null", "items", "props", "ref")

    def __init__(self) -> None:
        self.absent_if_null: frozenset[str] = frozenset()
        self.props: dict[str, _Plan] = {}
        self.items: _Plan | None = None
        self.ref: str | None = None  # a definition's plan (``"#"`` for the root's)

    def empty(self) -> bool:
        return not (self.absent_if_null or self.props or self.items or self.ref)


class StrictForm:
    """A tool's strict schema, and how to read the model's strict arguments back."""

    __slots__ = ("_defs", "_plan", "schema")

    def __init__(self, schema: dict[str, Any], plan: _Plan | None, defs: dict[str, _Plan]) -> None:
        self.schema = schema
        self._plan = plan
        self._defs = defs

    def decode(self, args: Any) -> Any:
        """The arguments with every "absent" ``null`` removed; ``args`` itself is never changed
        (nor copied when nothing in it needs removing)."""
        if self._plan is None:
            return args
        return _decode(args, self._plan, self._defs, 0)


_DECODE_DEPTH: Final = 64  # deeper (recursive schemas only) is left as sent: validation decides


def _decode(value: Any, plan: _Plan, defs: dict[str, _Plan], depth: int) -> Any:
    hops = 0
    while plan.ref is not None:  # a $ref: the definition's plan applies
        target = defs.get(plan.ref)
        hops += 1
        if target is None or hops > len(defs):  # unknown, or a chain of refs that loops
            return value
        plan = target
    if depth > _DECODE_DEPTH:
        return value
    if isinstance(value, list) and plan.items is not None:
        items = plan.items
        decoded = [_decode(item, items, defs, depth + 1) for item in value]
        return value if all(a is b for a, b in zip(decoded, value, strict=True)) else decoded
    if not isinstance(value, Mapping):
        return value
    changed = False
    out: dict[str, Any] = {}
    for key, item in value.items():
        if item is None and key in plan.absent_if_null:
            changed = True
            continue
        sub = plan.props.get(key)
        if sub is not None:
            new = _decode(item, sub, defs, depth + 1)
            changed = changed or new is not item
            item = new
        out[key] = item
    return out if changed else value


class _Converter:
    def __init__(self, root: Mapping[str, Any]) -> None:
        self.root = root
        self.properties = 0
        self.enum_values = 0
        defs = root.get("$defs", {})
        legacy = root.get("definitions", {})
        if not isinstance(defs, Mapping) or not isinstance(legacy, Mapping):
            raise _NotStrict("definitions must be objects")
        if set(defs) & set(legacy):
            raise _NotStrict("a name in both $defs and definitions")
        self.defs: dict[str, Any] = {**legacy, **defs}
        self.def_plans: dict[str, _Plan] = {}

    def convert_root(self) -> StrictForm:
        schema, plan = self.node(self.root, 0, root=True)
        if self.defs:
            converted: dict[str, Any] = {}
            for name, definition in self.defs.items():
                converted[name], def_plan = self.node(definition, 0)
                self.def_plans[name] = def_plan
            schema["$defs"] = converted
        self.def_plans["#"] = plan
        has_plan = not plan.empty() or any(not p.empty() for p in self.def_plans.values())
        return StrictForm(schema, plan if has_plan else None, self.def_plans)

    def node(self, node: Any, depth: int, *, root: bool = False) -> tuple[dict[str, Any], _Plan]:
        if not isinstance(node, Mapping):
            raise _NotStrict("a boolean schema")
        plan = _Plan()
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in _DROPPED or (root and key in ("$defs", "definitions")):
                continue
            if key in _CHECKED:
                out[key] = _checked(key, value)
            elif key == "uniqueItems":
                if value is not False:
                    raise _NotStrict("uniqueItems")
            elif key in _KEPT:
                out[key] = value
            elif key not in _STRUCTURE:
                raise _NotStrict(f"keyword {key}")
        if "$ref" in node:
            if set(node) - {"$ref", "description", "title"} - _DROPPED:
                raise _NotStrict("keywords beside $ref")
            ref, plan.ref = self.ref(node["$ref"])
            if not out or plan.ref == "#":  # strict mode allows nothing beside a $ref
                return {"$ref": ref}, plan
            # A description or title beside it: the definition inline, its text overridden.
            inline, plan = self.node(self.defs[plan.ref], depth)
            return {**inline, **out}, plan
        if "anyOf" in node:
            branches = node["anyOf"]
            if root or not isinstance(branches, list) or not branches:
                raise _NotStrict("anyOf at the root, or not a list")
            converted = []
            for branch in branches:
                schema, branch_plan = self.node(branch, depth)
                if not branch_plan.empty():  # which branch a null belongs to is unknowable
                    raise _NotStrict("optional properties inside anyOf")
                converted.append(schema)
            if set(node) - {"anyOf"} - _KEPT - _CHECKED - _DROPPED:
                raise _NotStrict("keywords beside anyOf")
            out["anyOf"] = converted
            return out, plan
        if "enum" in node or "const" in node:
            values = list(node["enum"]) if "enum" in node else [node["const"]]
            self.enum_values += len(values)
            if self.enum_values > MAX_ENUM_VALUES:
                raise _NotStrict("too many enum values")
            if "const" in node:
                out["const"] = node["const"]
            else:
                out["enum"] = values
            if "type" not in node:
                out["type"] = _types_of(values)
        types = node.get("type")
        if types is None:
            if "enum" in node or "const" in node:
                return out, plan
            raise _NotStrict("a schema without a type")
        names = [types] if isinstance(types, str) else list(types)
        out["type"] = types if isinstance(types, str) else names
        if "object" in names:
            self.object(node, out, plan, depth)
        elif {"properties", "required", "additionalProperties"} & set(node):
            raise _NotStrict("object keywords on a non-object")
        if "array" in names:
            items = node.get("items")
            if items is None:
                raise _NotStrict("an array without items")
            out["items"], item_plan = self.node(items, depth)
            plan.items = None if item_plan.empty() else item_plan
        elif "items" in node:
            raise _NotStrict("items on a non-array")
        return out, plan

    def object(self, node: Mapping[str, Any], out: dict[str, Any], plan: _Plan, depth: int) -> None:
        if depth >= MAX_OBJECT_DEPTH:
            raise _NotStrict("objects nested too deep")
        if node.get("additionalProperties", True) is not False:
            raise _NotStrict("an open object")
        properties = node.get("properties", {})
        required = set(node.get("required", ()))
        if not isinstance(properties, Mapping) or required - set(properties):
            raise _NotStrict("required names a property that is not listed")
        self.properties += len(properties)
        if self.properties > MAX_PROPERTIES:
            raise _NotStrict("too many properties")
        converted: dict[str, Any] = {}
        absent: set[str] = set()
        for name, prop in properties.items():
            schema, prop_plan = self.node(prop, depth + 1)
            if name not in required:
                if self.admits_null(prop):
                    if not (isinstance(prop, Mapping) and "default" in prop):
                        raise _NotStrict(f"optional {name} accepts null: absent and null differ")
                    if prop["default"] is not None:
                        raise _NotStrict(f"optional {name} accepts null and defaults to a value")
                else:
                    schema = _nullable(schema)
                    absent.add(name)
            if not prop_plan.empty():
                plan.props[name] = prop_plan
            converted[name] = schema
        out["properties"] = converted
        out["required"] = list(properties)
        out["additionalProperties"] = False
        plan.absent_if_null = frozenset(absent)

    def ref(self, ref: Any) -> tuple[str, str]:
        """(the strict $ref, the name of the plan it follows)."""
        if ref == "#":
            return "#", "#"
        for prefix in ("#/$defs/", "#/definitions/"):
            if isinstance(ref, str) and ref.startswith(prefix):
                name = ref[len(prefix) :]
                if name in self.defs and "/" not in name and "~" not in name:
                    return "#/$defs/" + name, name
        raise _NotStrict(f"$ref {ref!r}")

    def admits_null(self, schema: Any, seen: frozenset[str] = frozenset()) -> bool:
        """Whether the tool's own (unconverted) ``schema`` accepts ``null``."""
        if not isinstance(schema, Mapping):
            return schema is not False
        if "$ref" in schema:
            ref = schema["$ref"]
            name = "#" if ref == "#" else str(ref).rsplit("/", 1)[-1]
            if name in seen:  # a cycle that consumes nothing accepts nothing more
                return False
            target = self.root if name == "#" else self.defs.get(name)
            return self.admits_null(target, seen | {name})
        if "anyOf" in schema and not any(self.admits_null(b, seen) for b in schema["anyOf"]):
            return False
        if "const" in schema and schema["const"] is not None:
            return False
        if "enum" in schema and None not in schema["enum"]:
            return False
        types = schema.get("type")
        if types is None:
            return True
        return types == "null" or (isinstance(types, list) and "null" in types)


def _checked(keyword: str, value: Any) -> Any:
    """A ``pattern`` or ``multipleOf`` as strict mode is sent it, where it reads it as fastgate
    does."""
    if keyword == "pattern":
        portable = portable_pattern(value)
        if portable is None:
            raise _NotStrict(f"pattern {value!r} may mean other strings to other dialects")
        return portable
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value % 1 != 0:
        raise _NotStrict(f"multipleOf {value!r} is not a whole number")
    return value


def _types_of(values: list[Any]) -> str | list[str]:
    names: list[str] = []
    for value in values:
        name = _JSON_TYPES.get(type(value))
        if name is None:
            raise _NotStrict("an enum value that is not JSON")
        if name == "integer" and "number" in names:
            continue
        if name not in names:
            names.append(name)
    return names[0] if len(names) == 1 else names


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` that also accepts ``null``."""
    types = schema.get("type")
    if types is None or "anyOf" in schema or "$ref" in schema:
        text: dict[str, Any] = {k: schema[k] for k in ("description", "title") if k in schema}
        inner = {k: v for k, v in schema.items() if k not in text}
        return {**text, "anyOf": [inner, {"type": "null"}]}
    out = dict(schema)
    out["type"] = [types, "null"] if isinstance(types, str) else [*types, "null"]
    if "enum" in out:
        out["enum"] = [*out["enum"], None]
    elif "const" in out:
        out["enum"] = [out.pop("const"), None]
    return out


def strict_form(parameters: Mapping[str, Any]) -> StrictForm | None:
    """The strict form of a tool's parameters schema, or None where none says the same."""
    try:
        return _Converter(parameters).convert_root()
    except (_NotStrict, RecursionError, TypeError, KeyError):
        return None


_CACHE_LIMIT: Final = 1024
_forms: dict[ToolDefinition, StrictForm | None] = {}


def strict_form_of(tool: ToolDefinition) -> StrictForm | None:
    """``strict_form`` of a definition's schema, worked out once per definition."""
    try:
        return _forms[tool]
    except KeyError:
        pass
    if len(_forms) >= _CACHE_LIMIT:
        _forms.clear()
    form = _forms[tool] = strict_form(tool.input_schema)
    return form


def decoder_for(tool: ToolDefinition | None) -> Callable[[Any], Any]:
    """How to read a strict call's arguments for ``tool`` (unchanged for non-strict tools)."""
    form = strict_form_of(tool) if tool is not None else None
    return form.decode if form is not None else _unchanged


def _unchanged(args: Any) -> Any:
    return args
