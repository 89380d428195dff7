"""``ToolDefinition`` (frozen), ``Output``, ``define_tool`` and ``@tool`` (SPEC §2.1).

Everything about a definition is checked when it is made: a bad name, a non-callable execute, an
unknown parallelism, a schema that does not compile or does not describe an object, or options
that contradict each other fail here with a message, never at the first call.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import re
import types
from collections.abc import Callable
from typing import Any, Union, get_args, get_origin, get_type_hints, overload

import msgspec

from fastgate.errors import USER_CODE_ERRORS
from fastgate.model.kinds import ToolKind
from fastgate.schema import SchemaNode, Validator, compile
from fastgate.tools._annotations import is_record_class, node_for
from fastgate.tools._docstrings import parse_docstring

NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
DEFAULT_PATH_ARGS = ("file_path", "notebook_path")
_PLAIN = (str, int, float, bool, type(None))


def admitted_names(schema: Any, names: tuple[str, ...]) -> tuple[str, ...]:
    """Those of ``names`` that arguments valid for ``schema`` can have as keys: every one, unless
    the schema closes its object (``additionalProperties: false`` and no ``patternProperties``),
    and then only the properties it declares beside that keyword."""
    if (
        not isinstance(schema, dict)
        or schema.get("additionalProperties") is not False
        or "patternProperties" in schema
    ):
        return names
    declared = schema.get("properties") or {}
    return tuple(name for name in names if name in declared)


@dataclasses.dataclass(frozen=True, slots=True)
class Output:
    """How a canonical value becomes model-visible content (``render``; default ``str``/JSON)."""

    schema: Any = None
    render: Callable[[Any], Any] | None = None

    def __post_init__(self) -> None:
        if self.render is not None and not callable(self.render):
            raise TypeError("Output.render must be callable")
        if self.schema is not None:
            object.__setattr__(self, "schema", _as_node_or_schema(self.schema, "Output.schema"))


@dataclasses.dataclass(frozen=True, eq=False, slots=True, weakref_slot=True)
class ToolDefinition:
    """One tool. ``parameters`` is what was given; ``input_schema`` its JSON Schema and
    ``validator`` the compiled validator (built once, here). Host metadata (``timeout``,
    ``parallelism``, ...) is never projected to the model: see ``ToolRegistry.schemas``."""

    name: str
    description: str
    parameters: Any
    execute: Callable[..., Any]
    output: Output = dataclasses.field(default_factory=Output)
    kind: ToolKind = ToolKind.EXECUTE
    parallelism: str | Callable[[Any], str] = "exclusive"
    is_concurrency_safe: bool | Callable[[Any], bool] = False
    retry_safe: bool = False
    timeout: float | None = None
    path_args: tuple[str, ...] = DEFAULT_PATH_ARGS
    finalize_content: Callable[[Any], Any] | None = None
    present_call: Callable[[Any], Any] | None = None
    present_result: Callable[[Any, Any], Any] | None = None
    permission_key: Callable[[Any], str] | None = None
    paths: Callable[[Any], Any] | None = None
    rule_names: tuple[str, ...] = ()
    pool: str | None = None
    input_schema: dict[str, Any] = dataclasses.field(init=False, repr=False)
    validator: Validator = dataclasses.field(init=False, repr=False)

    def __post_init__(self) -> None:
        _check_definition(self)
        schema = _to_json_schema(self.parameters, self.name)
        object.__setattr__(self, "input_schema", schema)
        object.__setattr__(self, "validator", compile(schema))

    def model_schema(self) -> dict[str, Any]:
        """The only projection the model ever sees: ``{name, description, parameters}``."""
        # A fresh copy: what is handed out can never alter the definition's own schema.
        parameters = msgspec.json.decode(msgspec.json.encode(self.input_schema))
        return {"name": self.name, "description": self.description, "parameters": parameters}

    def classify_parallelism(self, args: Any) -> str:
        """``"shared"`` only for an exact ``"shared"``; anything else, or an error, is exclusive."""
        value = self.parallelism
        if callable(value):
            try:
                value = value(args)
            except USER_CODE_ERRORS:
                return "exclusive"
        return "shared" if value == "shared" and type(value) is str else "exclusive"

    def concurrency_safe(self, args: Any) -> bool:
        """Only an exact ``True`` counts; errors mean not safe (fail closed)."""
        value = self.is_concurrency_safe
        if callable(value):
            try:
                value = value(args)
            except USER_CODE_ERRORS:
                return False
        return value is True


def _check_definition(d: ToolDefinition) -> None:
    if type(d.name) is not str or not NAME_PATTERN.fullmatch(d.name):
        raise ValueError(f"invalid tool name {d.name!r}: 1 to 64 characters from A-Z a-z 0-9 _ -")
    if type(d.description) is not str:
        raise TypeError(f"tool {d.name}: description must be a string")
    if not callable(d.execute):
        raise TypeError(f"tool {d.name}: execute must be callable, got {type(d.execute).__name__}")
    object.__setattr__(d, "kind", ToolKind.parse(d.kind))
    if not callable(d.parallelism) and d.parallelism not in ("shared", "exclusive"):
        raise ValueError(
            f"tool {d.name}: parallelism must be 'shared', 'exclusive' or a classifier, "
            f"got {d.parallelism!r}"
        )
    if not callable(d.is_concurrency_safe) and type(d.is_concurrency_safe) is not bool:
        raise TypeError(f"tool {d.name}: is_concurrency_safe must be a bool or a classifier")
    if type(d.retry_safe) is not bool:
        raise TypeError(f"tool {d.name}: retry_safe must be a bool")
    if d.timeout is not None:
        if type(d.timeout) not in (int, float) or not math.isfinite(d.timeout) or d.timeout <= 0:
            raise ValueError(f"tool {d.name}: timeout must be a positive number of seconds")
    path_args: object = d.path_args
    if not isinstance(path_args, (tuple, list)) or not all(isinstance(p, str) for p in path_args):
        raise TypeError(f"tool {d.name}: path_args must be a tuple of argument names")
    object.__setattr__(d, "path_args", tuple(d.path_args))
    if d.pool is not None:
        if type(d.pool) is not str:
            raise TypeError(f"tool {d.name}: pool must be a scheduler pool name or None")
        if not d.pool:
            raise ValueError(f"tool {d.name}: pool must be a non-empty name or None")
    if not isinstance(d.output, Output):
        raise TypeError(f"tool {d.name}: output must be an Output(...)")
    rule_names: object = d.rule_names
    if isinstance(rule_names, str) or not isinstance(rule_names, (tuple, list)):
        raise TypeError(f"tool {d.name}: rule_names must be a tuple of rule tool names")
    for rule_name in rule_names:
        if type(rule_name) is not str or not NAME_PATTERN.fullmatch(rule_name):
            raise ValueError(f"tool {d.name}: invalid rule name {rule_name!r}")
    object.__setattr__(d, "rule_names", tuple(rule_names))
    for hook in ("finalize_content", "present_call", "present_result", "permission_key", "paths"):
        value = getattr(d, hook)
        if value is not None and not callable(value):
            raise TypeError(f"tool {d.name}: {hook} must be callable")


def _as_node_or_schema(parameters: Any, where: str) -> Any:
    if isinstance(parameters, (SchemaNode, dict, bool)):
        return parameters
    if is_record_class(parameters):
        return node_for(parameters, where)
    raise TypeError(
        f"{where}: expected a fastgate.schema node, a JSON Schema dict, or a msgspec.Struct / "
        f"dataclass / TypedDict class, got {parameters!r}"
    )


def _to_json_schema(parameters: Any, name: str) -> dict[str, Any]:
    parameters = _as_node_or_schema(parameters, f"tool {name}: parameters")
    schema = parameters.to_json_schema() if isinstance(parameters, SchemaNode) else parameters
    if type(schema) is not dict or schema.get("type") != "object":
        raise TypeError(
            f"tool {name}: parameters must describe a JSON object (type 'object'): tool "
            "arguments are always an object"
        )
    return schema


def define_tool(
    name: str,
    description: str,
    parameters: Any,
    execute: Callable[..., Any],
    **options: Any,
) -> ToolDefinition:
    """Build a ``ToolDefinition``; options are the other fields of SPEC §2.1."""
    unknown = set(options) - {f.name for f in dataclasses.fields(ToolDefinition) if f.init}
    if unknown:
        raise TypeError(f"define_tool: unknown option(s) {', '.join(sorted(unknown))}")
    return ToolDefinition(name, description, parameters, execute, **options)


@overload
def tool(fn: Callable[..., Any], /) -> ToolDefinition: ...


@overload
def tool(
    *, name: str | None = None, **options: Any
) -> Callable[[Callable[..., Any]], ToolDefinition]: ...


def tool(
    fn: Callable[..., Any] | None = None, /, *, name: str | None = None, **options: Any
) -> ToolDefinition | Callable[[Callable[..., Any]], ToolDefinition]:
    """Decorator: a ``ToolDefinition`` from an annotated function (SPEC §2.1).

    Parameters come from the signature (a ``ctx: RunContext`` parameter is injected, never
    shown to the model); the description and per-parameter descriptions from the docstring
    (Google or NumPy style) unless ``description=`` is given.
    """

    def build(func: Callable[..., Any]) -> ToolDefinition:
        if "parameters" in options or "execute" in options:
            raise TypeError("@tool derives parameters and execute from the function itself")
        return _from_function(func, name or func.__name__, options)

    return build if fn is None else build(fn)


def _from_function(func: Callable[..., Any], name: str, options: dict[str, Any]) -> ToolDefinition:
    if not callable(func):
        raise TypeError(f"@tool needs a function, got {type(func).__name__}")
    summary, param_docs = parse_docstring(func.__doc__)
    description = options.pop("description", None) or summary
    try:
        hints = get_type_hints(func, include_extras=True)
    except Exception as exc:  # a NameError from a forward reference, typically
        raise TypeError(f"tool {name}: cannot resolve the annotations: {exc}") from exc
    properties: dict[str, SchemaNode] = {}
    required: list[str] = []
    ctx_name: str | None = None
    converters: dict[str, Any] = {}
    for param in inspect.signature(func).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise TypeError(f"tool {name}: parameter {param.name} must be a named parameter")
        hint = hints.get(param.name, inspect.Parameter.empty)
        if hint is inspect.Parameter.empty:
            raise TypeError(f"tool {name}: parameter {param.name} needs a type annotation")
        if _is_context(hint):
            ctx_name = param.name
            continue
        node = node_for(hint, f"tool {name}: parameter {param.name}")
        if param.name in param_docs and node.description is None:
            node = node.evolve(description=param_docs[param.name])
        properties[param.name] = node
        if param.default is inspect.Parameter.empty:
            required.append(param.name)
        if hint not in _PLAIN:
            converters[param.name] = hint
    from fastgate.schema import Object

    parameters = Object(properties, required=tuple(required))
    execute = _make_execute(func, ctx_name, converters)
    return ToolDefinition(name, description, parameters, execute, **options)


def _is_context(hint: Any) -> bool:
    """``RunContext`` (or ``RunContext | None``, or a subclass): injected, never a parameter."""
    candidates = get_args(hint) if get_origin(hint) in (Union, types.UnionType) else (hint,)
    from fastgate.pipeline.run_context import RunContext  # the one tool-to-pipeline edge

    return any(isinstance(c, type) and issubclass(c, RunContext) for c in candidates)


def _make_execute(
    func: Callable[..., Any], ctx_name: str | None, converters: dict[str, Any]
) -> Callable[..., Any]:
    """``execute(args, ctx)`` calling ``func(**args)``: records become their classes."""

    def arguments(args: Any, ctx: Any) -> dict[str, Any]:
        kwargs = dict(args)
        for key, hint in converters.items():
            if key in kwargs:
                kwargs[key] = msgspec.convert(kwargs[key], hint)
        if ctx_name is not None:
            kwargs[ctx_name] = ctx
        return kwargs

    # Plain arguments and no context parameter (the usual tool): the frozen arguments are passed
    # as they are; the call binds them to fresh names, so the function cannot change them.
    direct = not converters and ctx_name is None
    if inspect.iscoroutinefunction(func):

        async def execute_async(args: Any, ctx: Any) -> Any:
            return await func(**(args if direct else arguments(args, ctx)))

        execute_async.__wrapped__ = func  # type: ignore[attr-defined]
        return execute_async

    def execute(args: Any, ctx: Any) -> Any:
        return func(**(args if direct else arguments(args, ctx)))

    execute.__wrapped__ = func  # type: ignore[attr-defined]
    return execute
