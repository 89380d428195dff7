"""Shared by the adapters' tests: a registry of typical tools, a check that a value fits an SDK's
TypedDict exactly, and a scripted model served over an in-process HTTP transport."""

from __future__ import annotations

import asyncio
import collections.abc
import importlib
import json
import types
import typing
from collections.abc import Callable
from typing import Any

from pydantic import TypeAdapter

from fastgate import Output, ToolKind, ToolRegistry, define_tool, schema
from fastgate.tools import ToolDefinition

# The HTTP library the SDKs are built on (httpx2 in the SDKs this suite installs, httpx before).
try:
    http: Any = importlib.import_module("httpx2")
except ImportError:  # pragma: no cover - older SDKs
    http = importlib.import_module("httpx")

READ = ToolKind.READ_ONLY
PNG = "iVBORw0KGgo="  # base64 of the PNG signature: a stand-in image payload


async def _echo(args: Any, ctx: Any) -> str:
    return str(args["text"])


async def _search(args: Any, ctx: Any) -> dict[str, Any]:
    # Says what it was given, so a test sees absent and null apart.
    return {"query": args["query"], "limit": args.get("limit", "absent")}


async def _note(args: Any, ctx: Any) -> str:
    return f"body={args['body']!r}" if "body" in args else "body absent"


async def _picture(args: Any, ctx: Any) -> tuple[Any, ...]:
    return ("a chart", {"type": "image", "data": PNG, "mimeType": "image/png"})


def _blocks(value: Any) -> Any:
    return value


async def _boom(args: Any, ctx: Any) -> str:
    raise RuntimeError("the disk is on fire")


async def _run(args: Any, ctx: Any) -> str:
    return f"ran {args['command']}"


SEARCH = schema.Object(
    {"query": schema.String(), "limit": schema.Integer(minimum=1)}, required=("query",)
)
# body is optional and accepts null: strict mode cannot say "absent" apart from null ...
NOTE = {
    "type": "object",
    "properties": {"title": {"type": "string"}, "body": {"type": ["string", "null"]}},
    "required": ["title"],
    "additionalProperties": False,
}
# ... unless the schema says absent means null.
NOTE_DEFAULT_NULL = {
    **NOTE,
    "properties": {
        "title": {"type": "string"},
        "body": {"type": ["string", "null"], "default": None},
    },
}


def registry(*extra: ToolDefinition) -> ToolRegistry:
    text = schema.Object({"text": schema.String()}, required=("text",))
    command = schema.Object({"command": schema.String()}, required=("command",))
    reg = ToolRegistry()
    for tool in (
        define_tool("echo", "Say the text back.", text, _echo, kind=READ, parallelism="shared"),
        define_tool(
            "search", "Search the notes.", SEARCH, _search, kind=READ, parallelism="shared"
        ),
        define_tool("note", "Write a note.", NOTE, _note, kind=ToolKind.WRITE),
        define_tool("note_null", "Write a note.", NOTE_DEFAULT_NULL, _note, kind=ToolKind.WRITE),
        define_tool(
            "picture",
            "Draw a chart.",
            schema.Object({}),
            _picture,
            kind=READ,
            output=Output(render=_blocks),  # content blocks as they are
        ),
        define_tool("boom", "Always fails.", schema.Object({}), _boom, kind=READ),
        define_tool("run", "Run a command.", command, _run, kind=ToolKind.EXECUTE),
        *extra,
    ):
        reg.register(tool)
    return reg


# -- exact fit to an SDK's TypedDict ------------------------------------------------------------


def assert_fits(tp: Any, value: Any) -> None:
    """``value`` validates as ``tp`` (pydantic, from the SDK's own types) and has no key the
    TypedDicts on its path do not declare (pydantic alone ignores unknown keys)."""
    TypeAdapter(tp).validate_python(value)
    _declared_keys_only(tp, value, "$")


def _strip(tp: Any) -> Any:
    while True:
        origin = typing.get_origin(tp)
        if origin in (typing.Annotated,) or str(origin) in (
            "typing_extensions.Required",
            "typing_extensions.NotRequired",
            "typing.Required",
            "typing.NotRequired",
        ):
            tp = typing.get_args(tp)[0]
        else:
            return tp


def _declared_keys_only(tp: Any, value: Any, where: str) -> None:
    tp = _strip(tp)
    origin = typing.get_origin(tp)
    if typing.is_typeddict(tp):
        assert isinstance(value, dict), f"{where}: expected an object"
        hints = typing.get_type_hints(tp, include_extras=True)
        extra = set(value) - set(hints)
        assert not extra, f"{where}: keys {sorted(extra)} are not in {tp.__name__}"
        for key, item in value.items():
            _declared_keys_only(hints[key], item, f"{where}.{key}")
    elif origin in (typing.Union, types.UnionType):
        members = [m for m in typing.get_args(tp) if _accepts(m, value)]
        assert members, f"{where}: no member of {tp} accepts {value!r}"
        errors = []
        for member in members:  # the value must fit one member exactly
            try:
                _declared_keys_only(member, value, where)
                return
            except AssertionError as exc:
                errors.append(str(exc))
        raise AssertionError("; ".join(errors))
    elif origin in (list, collections.abc.Iterable, collections.abc.Sequence) and not isinstance(
        value, (str, bytes)
    ):
        (item_type,) = typing.get_args(tp)
        for i, item in enumerate(value):
            TypeAdapter(item_type).validate_python(item)
            _declared_keys_only(item_type, item, f"{where}[{i}]")


def _accepts(tp: Any, value: Any) -> bool:
    try:
        TypeAdapter(tp).validate_python(value)
    except Exception:
        return False
    return True


# -- a scripted model behind the SDK's HTTP client ------------------------------------------------


class ScriptedServer:
    """Answers each request with the next scripted JSON body and keeps the requests it saw.

    Runs in process (the HTTP library's mock transport): no socket is opened.
    """

    def __init__(self, replies: list[dict[str, Any] | Callable[[dict[str, Any]], Any]]) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []

    def handle(self, request: Any) -> Any:
        body = json.loads(request.content)
        self.requests.append({"path": request.url.path, "body": body})
        reply = self.replies.pop(0)
        payload = reply(body) if callable(reply) else reply
        return http.Response(200, json=payload)

    def client(self) -> Any:
        return http.AsyncClient(transport=http.MockTransport(self.handle))


async def wait_all(*events: asyncio.Event) -> None:
    """Wait for events with a bound, so a missing overlap fails instead of hanging."""
    async with asyncio.timeout(10.0):
        for event in events:
            await event.wait()
