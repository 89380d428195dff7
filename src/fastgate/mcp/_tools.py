"""From an MCP server's raw tool listing to fastgate definitions, and from a ``tools/call``
reply to a canonical value (SPEC §14 names, schemas, kind and policy, results)."""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

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
from fastgate.model import DEFAULT_MAX_CONTENT_CHARS, cut, json_size
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
    # registered name -> the digest of the server's definition of the tool (all of it)
    digests: Mapping[str, bytes] = dataclasses.field(default_factory=dict)


# One tool of a listing (its name, description and schemas, as JSON): a schema compiles to
# about 20 times its size, on the event loop, and the description goes to the model every turn.
MAX_TOOL_BYTES: Final = 1024 * 1024


def build_listing(
    config: MCPServerConfig,
    raw_tools: list[Any],
    call: RemoteCall,
    taken: Callable[[str], bool],
    previous: Listing | None = None,
) -> Listing:
    """Definitions for ``raw_tools`` (the ``tools`` of a ``tools/list`` reply, unparsed).

    ``taken(name)`` says whether a tool that is not this server's already has the name. A tool
    the server defines exactly as in ``previous`` (the listing before) keeps its definition,
    the same object: what was approved for it still stands. Any change to what the server
    says of a tool (description, schemas, annotations, title, ``_meta``) makes a new one.
    """
    definitions: list[ToolDefinition] = []
    quarantined: dict[str, str] = {}
    remote_names: dict[str, str] = {}
    digests: dict[str, bytes] = {}
    before = {d.name: d for d in previous.definitions} if previous is not None else {}
    for index, raw in enumerate(raw_tools):
        remote = raw.get("name") if isinstance(raw, dict) else None
        if not isinstance(remote, str) or not remote:
            quarantined[f"#{index}"] = "the listing entry has no tool name"
            continue
        size = len(msgspec.json.encode(raw))
        if size > MAX_TOOL_BYTES:
            why = f"its definition is {size} bytes, over the {MAX_TOOL_BYTES} a tool may take"
            quarantined[remote] = why  # (status() shows a long name cut, with its hash)
            continue
        digest = _digest(raw)
        name = tool_name(config.name, remote)
        definition = before.get(name)
        if definition is None or previous is None or previous.digests.get(name) != digest:
            try:
                definition = _definition(config, raw, call)
            except (Unusable, TypeError, ValueError) as exc:
                quarantined[remote] = str(exc)
                continue
        if name in remote_names:
            quarantined[remote] = f"its name {name} is already used by {remote_names[name]!r}"
        elif taken(name):
            quarantined[remote] = f"a tool named {name} is already registered"
        else:
            remote_names[name] = remote
            digests[name] = digest
            definitions.append(definition)
    return Listing(tuple(definitions), quarantined, remote_names, digests)


def _digest(raw: dict[str, Any]) -> bytes:
    """SHA-256 of everything the server says of a tool, its keys sorted at every depth (the
    same definition sent again in another key order is the same)."""
    return hashlib.sha256(msgspec.json.encode(raw, order="sorted")).digest()


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
    besides the structured content, else the JSON of the value (never both). Content blocks
    are bounded here (``bounded_blocks``); text the executor cuts itself."""
    if isinstance(value, (StructuredObject, StructuredArray)) and value.shown is not None:
        shown = value.shown
        return bounded_blocks(shown) if isinstance(shown, tuple) else shown
    if isinstance(value, tuple):
        return bounded_blocks(value)
    if isinstance(value, str):
        return value
    return msgspec.json.encode(value).decode()


# The server's content blocks, all together, are held to the executor's default content budget:
# the executor cuts text content and text blocks, never the fields of a block (an image's
# base64, a resource's text), so a server could otherwise hand the model any amount.
MAX_BLOCK_CHARS: Final = DEFAULT_MAX_CONTENT_CHARS
_LABEL_CHARS: Final = 1_000  # of a block's uri, name, mimeType, description, type
_BINARY: Final = frozenset({"data", "blob"})  # base64: kept whole or left out, never cut
_NESTING: Final = 64  # levels a nested value kept in a block may have
_MIN_LEFT: Final = 256  # below this much budget, the blocks that remain are left out
_FIELD_OVERHEAD: Final = 6  # quotes, colon, comma of a field (and braces of a block), as JSON


def bounded_blocks(blocks: tuple[Any, ...], budget: int = MAX_BLOCK_CHARS) -> tuple[Any, ...]:
    """``blocks`` holding at most about ``budget`` characters in all: text (a text block's, an
    embedded resource's) is cut head and tail, base64 data that does not fit whole is left out
    with a text block saying so, labels are clipped, and once the budget is spent the blocks
    left are replaced by one text block counting them."""
    out: list[Any] = []
    left = budget
    for index, block in enumerate(blocks):
        if left < _MIN_LEFT:
            more = len(blocks) - index
            out.append(_note(f"[... {more} more content block(s) left out: over the budget ...]"))
            break
        bounded, used = _bounded_block(block, left)
        out.append(bounded)
        left -= used
    return tuple(out)


def _bounded_block(block: Any, left: int) -> tuple[Any, int]:
    """One block within ``left`` characters, and how many it takes."""
    if not isinstance(block, dict):
        text = block if isinstance(block, str) else msgspec.json.encode(block).decode()
        text = cut(text, left)
        return text, len(text)
    kind = str(block.get("type"))[:_LABEL_CHARS]
    out: dict[str, Any] = {}
    used = 0
    for key, value in block.items():
        if key == "resource" and isinstance(value, dict):
            value, size = _bounded_fields(value, left - used, kind)
        else:
            value, size = _bounded_field(key, value, left - used)
        if value is _TOO_BIG:
            return _left_out(kind, key, size)
        out[key] = value
        used += size + len(key) + _FIELD_OVERHEAD
    return out, used + _FIELD_OVERHEAD


_TOO_BIG: Final = object()


def _bounded_fields(fields: dict[str, Any], left: int, kind: str) -> tuple[Any, int]:
    out: dict[str, Any] = {}
    used = 0
    for key, value in fields.items():
        value, size = _bounded_field(key, value, left - used)
        if value is _TOO_BIG:
            return _TOO_BIG, size
        out[key] = value
        used += size + len(key) + _FIELD_OVERHEAD
    return out, used + _FIELD_OVERHEAD


def _bounded_field(key: str, value: Any, left: int) -> tuple[Any, int]:
    """A field within ``left`` characters and its size; ``_TOO_BIG`` and the field's size
    when it cannot be cut and does not fit."""
    if isinstance(value, str):
        if key in _BINARY:
            return (value, len(value)) if len(value) <= left else (_TOO_BIG, len(value))
        limit = left if key == "text" else min(left, _LABEL_CHARS)
        kept = cut(value, max(limit, 0)) if len(value) > limit else value
        return kept, len(kept)
    if value is None or isinstance(value, (bool, int, float)):
        return value, 8
    # A nested value of the server's: whole or not at all. Measured first without encoding
    # (a lower bound, work bounded by ``left``), so that only a value that may fit is encoded.
    least = json_size(value, max(left, 0), _NESTING)
    if least > left:
        return _TOO_BIG, least
    encoded = len(msgspec.json.encode(value))
    return (value, encoded) if encoded <= left else (_TOO_BIG, encoded)


def _left_out(kind: str, key: str, size: int) -> tuple[dict[str, Any], int]:
    note = _note(
        f"[... a {kind!r} block left out: its {key!r} of {size} characters is over the budget ...]"
    )
    return note, len(note["text"])


def _note(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


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
    return tuple(
        _checked_binary({k: v for k, v in b.items() if k in kept})
        for b in blocks
        if isinstance(b, dict)
    )


# The blocks whose payload is base64, and where it is: (the block's key, the nested key).
_BASE64_FIELDS: Final[dict[str, tuple[str, str | None]]] = {
    "image": ("data", None),
    "audio": ("data", None),
    "resource": ("resource", "blob"),
}


def _checked_binary(block: dict[str, Any]) -> dict[str, Any]:
    """``block``, or a text note in its place when its base64 payload (an image's or audio's
    ``data``, an embedded resource's ``blob``) is not valid base64: the model's API, or whoever
    decodes it next, would fail on it or read garbage, far from the server that sent it. The
    other blocks of the result are kept."""
    kind = block.get("type")
    where = _BASE64_FIELDS.get(kind) if isinstance(kind, str) else None
    if where is None:
        return block
    key, nested = where
    holder: Any = block
    if nested is not None:
        holder = block.get(key)
        if not isinstance(holder, dict) or nested not in holder:
            return block  # a text resource: nothing encoded
        key = nested
    if _is_base64(holder.get(key)):
        return block
    return _note(f"[... a {kind!r} block left out: its {key!r} is not valid base64 ...]")


def _is_base64(value: Any) -> bool:
    """Whether ``value`` is base64 as MCP means it: RFC 4648's standard alphabet, padded, with
    no line breaks or other characters (what a model's API accepts for an image)."""
    return isinstance(value, str) and _BASE64.fullmatch(value) is not None


_BASE64: Final = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")


def _text_of(shown: Any) -> str:
    if not shown:
        return ""
    return "\n".join(b["text"] for b in shown if isinstance(b.get("text"), str))
