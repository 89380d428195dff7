"""From an MCP server's raw tool listing to fastgate definitions, and from a ``tools/call``
reply to a canonical value (SPEC §14 names, schemas, kind and policy, results)."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import msgspec
from pydantic import TypeAdapter, ValidationError

from fastgate import (
    Failure,
    Output,
    RunContext,
    SchemaError,
    ToolDefinition,
    ToolFault,
    ToolKind,
    define_tool,
)
from fastgate.mcp._config import MCPServerConfig
from fastgate.mcp._names import pool_name, server_rule_name, tool_name
from fastgate.schema import from_json_schema

# execute(remote_name, args, ctx) of the server's link
RemoteCall = Callable[[str, Any, RunContext], Awaitable[Any]]


class Unusable(Exception):
    """A listed tool that cannot be registered; the message says why."""


@dataclasses.dataclass(frozen=True, slots=True)
class Listing:
    """One generation of a server's tools: the definitions to register, and the tools left
    out with the reason (a schema that does not compile, a name that collides, ...)."""

    definitions: tuple[ToolDefinition, ...]
    quarantined: Mapping[str, str]
    remote_names: Mapping[str, str]  # registered name -> the server's own name


def build_listing(
    config: MCPServerConfig, raw_tools: list[Any], call: RemoteCall, taken: Callable[[str], bool]
) -> Listing:
    """Definitions for ``raw_tools`` (the ``tools`` of a ``tools/list`` reply, unparsed).

    ``taken(name)`` says whether a tool that is not this server's already has the name.
    """
    definitions: list[ToolDefinition] = []
    quarantined: dict[str, str] = {}
    remote_names: dict[str, str] = {}
    for index, raw in enumerate(raw_tools):
        remote = raw.get("name") if isinstance(raw, dict) else None
        if not isinstance(remote, str) or not remote:
            quarantined[f"#{index}"] = "the listing entry has no tool name"
            continue
        try:
            definition = _definition(config, raw, call)
        except (Unusable, TypeError, ValueError) as exc:
            quarantined[remote] = str(exc)
            continue
        name = definition.name
        if name in remote_names:
            quarantined[remote] = f"its name {name} is already used by {remote_names[name]!r}"
        elif taken(name):
            quarantined[remote] = f"a tool named {name} is already registered"
        else:
            remote_names[name] = remote
            definitions.append(definition)
    return Listing(tuple(definitions), quarantined, remote_names)


def _definition(config: MCPServerConfig, raw: dict[str, Any], call: RemoteCall) -> ToolDefinition:
    remote: str = raw["name"]
    input_schema = raw.get("inputSchema")
    if not isinstance(input_schema, dict):
        raise Unusable("inputSchema: the tool has no JSON Schema object for its arguments")
    output_schema = raw.get("outputSchema")
    if output_schema is not None:
        if not isinstance(output_schema, (dict, bool)):
            raise Unusable("outputSchema: not a JSON Schema")
        try:
            from_json_schema(output_schema)
        except SchemaError as exc:
            raise Unusable(f"outputSchema: {exc}") from None
    description = raw.get("description")
    if not isinstance(description, str):
        title = raw.get("title")
        description = title if isinstance(title, str) else ""
    read_only = config.trust_annotations and _hint(raw, "readOnlyHint")

    async def execute(args: Any, ctx: RunContext) -> Any:
        return await call(remote, args, ctx)

    try:
        return define_tool(
            tool_name(config.name, remote),
            description,
            input_schema,
            execute,
            output=Output(schema=output_schema, render=render),
            # Untrusted hints count for nothing (SPEC §14): an MCP tool runs code elsewhere.
            kind=ToolKind.READ_ONLY if read_only else ToolKind.EXECUTE,
            parallelism="shared" if read_only else "exclusive",
            is_concurrency_safe=read_only,
            retry_safe=False,
            timeout=None,  # the bridge times the call itself: idle_timeout and call_timeout
            path_args=(),  # the server's paths are its own business, judged by its rules
            rule_names=(server_rule_name(config.name),),  # mcp__<server> rules govern it too
            pool=pool_name(config.name),  # the server's max_concurrency, fair across sessions
        )
    except SchemaError as exc:
        raise Unusable(f"inputSchema: {exc}") from None


def _hint(raw: dict[str, Any], key: str) -> bool:
    annotations = raw.get("annotations")
    return isinstance(annotations, dict) and annotations.get(key) is True


# -- results ----------------------------------------------------------------------------------


class StructuredObject(dict[str, Any]):
    """A tool's ``structuredContent`` object, carrying what the model is shown instead of it."""

    __slots__ = ("shown",)
    shown: Any


class StructuredArray(list[Any]):
    """A tool's ``structuredContent`` array, carrying what the model is shown instead of it."""

    __slots__ = ("shown",)
    shown: Any


def render(value: Any) -> Any:
    """What the model sees of a canonical value: the server's own content when it sent some
    besides the structured content, else the JSON of the value (never both)."""
    if isinstance(value, (StructuredObject, StructuredArray)) and value.shown is not None:
        return value.shown
    if isinstance(value, (str, tuple)):
        return value
    return msgspec.json.encode(value).decode()


def value_of(reply: dict[str, Any], server: str, remote: str) -> Any:
    """The canonical value of a ``tools/call`` reply, or a ``Failure`` for ``isError`` and for
    a server that asks for input first. A reply without ``resultType`` is complete."""
    result_type = reply.get("resultType", "complete")
    if result_type == "input_required":
        return _input_required(reply, server, remote)
    if result_type != "complete":
        raise ToolFault(
            f"MCP server {server} answered the call of {remote} with a result of type "
            f"{str(result_type)[:80]!r}, which fastgate does not know: the call's outcome is "
            "unknown and it is not repeated automatically.",
            details={"reason": "protocol_error", "server": server},
        )
    blocks = reply.get("content")
    shown = _shown(blocks if isinstance(blocks, list) else [])
    if _is_error(reply):
        text = shown if isinstance(shown, str) else _text_of(shown)
        message = text or f"the tool {remote} of MCP server {server} failed and said nothing"
        return Failure(message, details={"server": server, "tool": remote})
    if "structuredContent" in reply and reply["structuredContent"] is not None:
        structured = reply["structuredContent"]
        if isinstance(structured, dict):
            value: Any = StructuredObject(structured)
        elif isinstance(structured, list):
            value = StructuredArray(structured)
        else:
            return structured
        value.shown = shown if shown else None
        return value
    return shown if shown is not None else ""


_BOOL: TypeAdapter[bool] = TypeAdapter(bool)


def _is_error(reply: dict[str, Any]) -> bool:
    """Whether a reply's ``isError`` says the call failed: whatever the SDK's own validation of
    a result reads as true (``true``, ``1``, ``"yes"``, ``"true"``, ...) does, and so, failing
    closed, does a value it cannot read as a boolean at all (``"maybe"``, ``2``, an object).
    Only an absent or null ``isError``, or one read as false, is a success."""
    flag = reply.get("isError")
    if flag is None or flag is False:
        return False
    try:
        return _BOOL.validate_python(flag)
    except ValidationError:
        return True


def said_by(reply: Any) -> str:
    """The text a ``tools/call`` reply carries (quoted when the call fails anyway)."""
    blocks = reply.get("content") if isinstance(reply, dict) else None
    shown = _shown(blocks if isinstance(blocks, list) else [])
    return shown if isinstance(shown, str) else _text_of(shown)


_SHOWN_PROMPTS = 3  # the server's questions quoted in the failure, each clipped
_PROMPT_CHARS = 300


def _input_required(reply: dict[str, Any], server: str, remote: str) -> Failure:
    """An ``input_required`` result left unanswered (the bridge answers them through the
    call's elicitor before a reply gets here): the call fails, saying what was asked, never
    succeeds empty."""
    requests = reply.get("inputRequests")
    requests = requests if isinstance(requests, dict) else {}
    asked = [_prompt_of(request) for request in requests.values()]
    prompts = [p for p in asked if p][:_SHOWN_PROMPTS]
    quoted = "".join(f" It asked: {p!r}." for p in prompts)
    return Failure(
        f"The tool {remote} of MCP server {server} needs more input before it can run, and "
        f"no answer could be given, so the call did not complete.{quoted}",
        code="input_required",
        details={
            "reason": "input_required",
            "server": server,
            "tool": remote,
            "requests": sorted(str(k)[:_PROMPT_CHARS] for k in requests)[: _SHOWN_PROMPTS * 10],
        },
    )


def _prompt_of(request: Any) -> str:
    params = request.get("params") if isinstance(request, dict) else None
    message = params.get("message") if isinstance(params, dict) else None
    return message[:_PROMPT_CHARS] if isinstance(message, str) else ""


def _shown(blocks: list[Any]) -> str | tuple[Any, ...] | None:
    """Text blocks as one string; content with other blocks (images, resources) as a tuple of
    MCP blocks; None for no content."""
    if not blocks:
        return None
    texts = [b.get("text") for b in blocks if isinstance(b, dict) and b.get("type") == "text"]
    if len(texts) == len(blocks) and all(isinstance(t, str) for t in texts):
        return "\n".join(texts)  # type: ignore[arg-type]
    kept = ("type", "text", "data", "mimeType", "uri", "name", "resource", "description")
    return tuple({k: v for k, v in b.items() if k in kept} for b in blocks if isinstance(b, dict))


def _text_of(shown: Any) -> str:
    if not shown:
        return ""
    return "\n".join(b["text"] for b in shown if isinstance(b.get("text"), str))
