"""An elicitor (``ExecutionContext.elicitor``) that asks at a terminal: what ``fastgate call``
uses when an MCP server asks its user for input in the middle of a call.

A form is asked one field at a time (its title, type, choices, default), each answer checked as
it is typed; a URL is shown, with its domain, for consent (it is never opened). Nothing is sent
until the person agrees to answer; end of input or Ctrl-C dismisses the question (``cancel``).
The terminal is read as ``TerminalApprover`` reads it: through the loop's reader callbacks, one
prompt at a time, type-ahead discarded, everything shown escaped.
"""

from __future__ import annotations

import asyncio
import math
import urllib.parse
from typing import Any, Final

import msgspec

from fastgate.model.elicitation import ElicitationRequest, ElicitationResponse
from fastgate.permissions.terminal_approver import (
    _CTRL_C,
    MAX_TRIES,
    _bounded,
    _note,
    _printable,
    _prompt_mode,
    _read_line,
    _write,
)
from fastgate.schema import SchemaError, Validator, from_json_schema

_YES: Final = frozenset({"y", "yes"})
_NO: Final = frozenset({"n", "no"})
_TRUE: Final = frozenset({"y", "yes", "true", "t", "1", "on"})
_FALSE: Final = frozenset({"n", "no", "false", "f", "0", "off"})
_MESSAGE_CHARS: Final = 2000
_SHOWN_CHOICES: Final = 50


class _Dismissed(Exception):
    """End of input, Ctrl-C, or no valid answer after ``MAX_TRIES``: the question is cancelled."""


class TerminalElicitor:
    """Asks at the terminal ``input`` / ``output`` (file descriptors). Use from one event loop."""

    def __init__(self, *, input: int, output: int) -> None:
        self._in, self._out = input, output
        self._lock = asyncio.Lock()  # one question at a time on the terminal
        self._pending = bytearray()

    async def __call__(self, request: ElicitationRequest) -> ElicitationResponse:
        async with self._lock:
            with _prompt_mode(self._in) as terminal:
                if terminal:
                    self._pending.clear()  # typed before the question was shown
                try:
                    return await self._ask(request)
                except _Dismissed as exc:
                    _note(self._out, f"({exc}) dismissed\n")
                    return ElicitationResponse("cancel")
                except asyncio.CancelledError:
                    _note(self._out, "\n(the call was cancelled; no answer is needed)\n")
                    raise

    async def _ask(self, request: ElicitationRequest) -> ElicitationResponse:
        tool = f" for {_printable(request.tool_name)}" if request.tool_name else ""
        lines = [
            "",
            f"── fastgate: MCP server {_printable(request.server)} asks{tool} ──",
            _bounded(request.message, _MESSAGE_CHARS),
        ]
        if request.mode == "url":
            return await self._consent(request, lines)
        fields = _fields(request.requested_schema)
        if fields is None:
            lines.append("(this form cannot be answered at a terminal: declined)\n")
            _write(self._out, "\n".join(lines))
            return ElicitationResponse("decline")
        lines.append(
            f"Your answers go to the server {_printable(request.server)}, not to the model."
        )
        lines.append("[y] answer   [n] decline   (Ctrl-C: dismiss)\n")
        _write(self._out, "\n".join(lines))
        if not await self._yes_or_no():
            return ElicitationResponse("decline")
        content: dict[str, Any] = {}
        for field in fields:
            value = await self._field(field)
            if value is not _SKIPPED:
                content[field.name] = value
        return ElicitationResponse("accept", content)

    async def _consent(self, request: ElicitationRequest, lines: list[str]) -> ElicitationResponse:
        url = request.url or ""
        host = urllib.parse.urlsplit(url).hostname or "?"
        lines += [
            "It asks you to open this address in your browser (fastgate does not open it):",
            f"  {_printable(url)}",
            f"  domain: {_printable(host)}",
            "[y] I will open it   [n] decline   (Ctrl-C: dismiss)\n",
        ]
        _write(self._out, "\n".join(lines))
        agreed = await self._yes_or_no()
        return ElicitationResponse("accept" if agreed else "decline")

    async def _yes_or_no(self) -> bool:
        for _ in range(MAX_TRIES):
            word = (await self._line("> ")).strip().lower()
            if word in _YES:
                return True
            if word in _NO:
                return False
            _write(self._out, "Answer y or n.\n")
        raise _Dismissed(f"no valid answer after {MAX_TRIES} tries")

    async def _field(self, field: _Field) -> Any:
        _write(self._out, field.describe())
        for _ in range(MAX_TRIES):
            text = (await self._line(f"{_printable(field.name)}> ")).strip()
            if not text:
                if field.has_default or not field.required:
                    return _SKIPPED  # the server's default, or nothing for an optional field
                _write(self._out, "An answer is required.\n")
                continue
            value, problem = field.parse(text)
            if problem is None:
                problem = field.problem(value)
            if problem is None:
                return value
            _write(self._out, f"{_printable(problem)}\n")
        raise _Dismissed(f"no valid answer after {MAX_TRIES} tries")

    async def _line(self, prompt: str) -> str:
        _write(self._out, prompt)
        line = await _read_line(self._in, self._pending)
        if line is None:
            raise _Dismissed("no answer: end of input")
        if _CTRL_C in line:
            raise _Dismissed("Ctrl-C")
        return line.decode("utf-8", "replace").rstrip("\r\n")


_SKIPPED: Final = object()
_KINDS: Final = frozenset({"string", "integer", "number", "boolean", "array"})


class _Field:
    """One property of a form: how it is shown, parsed and checked."""

    def __init__(self, name: str, schema: dict[str, Any], required: bool) -> None:
        self.name = name
        self.schema = schema
        self.kind: str = schema["type"]
        self.required = required
        self.has_default = "default" in schema
        self.choices = _choices(schema["items"] if self.kind == "array" else schema)
        cleaned = {k: v for k, v in schema.items() if k != "enumNames"}
        self._validator: Validator = from_json_schema(cleaned)

    def describe(self) -> str:
        schema = self.schema
        title = schema.get("title")
        title = title if isinstance(title, str) else self.name
        what = "one or more, comma separated" if self.kind == "array" else self.kind
        notes = [what, "required" if self.required else "optional"]
        if self.has_default:
            notes.append(f"Enter for {_json(schema['default'])}")
        lines = [f"{_printable(title)} ({', '.join(notes)})"]
        description = schema.get("description")
        if isinstance(description, str) and description:
            lines.append(f"  {_bounded(description, 500)}")
        for number, (value, label) in enumerate(self.choices[:_SHOWN_CHOICES], 1):
            shown = f"{_printable(str(value))}" + (f" — {_printable(label)}" if label else "")
            lines.append(f"  {number}) {shown}")
        if len(self.choices) > _SHOWN_CHOICES:
            lines.append(f"  … {len(self.choices) - _SHOWN_CHOICES} more (type the value)")
        return "\n".join(lines) + "\n"

    def parse(self, text: str) -> tuple[Any, str | None]:
        if self.kind == "array":
            values = []
            for part in (p.strip() for p in text.split(",")):
                value, problem = self._choice(part)
                if problem is not None:
                    return None, problem
                values.append(value)
            return values, None
        if self.choices:
            return self._choice(text)
        if self.kind == "boolean":
            word = text.lower()
            if word in _TRUE or word in _FALSE:
                return word in _TRUE, None
            return None, "Answer yes or no."
        if self.kind == "integer":
            try:
                return int(text), None
            except ValueError:
                return None, "Answer a whole number."
        if self.kind == "number":
            try:
                number = float(text)
            except ValueError:
                return None, "Answer a number."
            if not math.isfinite(number):
                return None, "Answer a finite number."
            return (int(number) if number.is_integer() and "." not in text else number), None
        return text, None

    def _choice(self, text: str) -> tuple[Any, str | None]:
        if text.isdigit() and 1 <= int(text) <= len(self.choices):
            return self.choices[int(text) - 1][0], None
        for value, _ in self.choices:
            if text == str(value):
                return value, None
        if self.choices:
            return None, f"Choose one of 1-{len(self.choices)}, or type a value shown."
        return text, None

    def problem(self, value: Any) -> str | None:
        issues = self._validator.validate(value)
        return issues[0].message if issues else None


def _fields(schema: dict[str, Any] | None) -> list[_Field] | None:
    """The form's fields, or None when one cannot be asked at a terminal (not a flat object of
    strings, numbers, booleans and lists of choices, or a schema fastgate cannot check)."""
    if not isinstance(schema, dict):
        return None
    properties = schema.get("properties")
    required = schema.get("required")
    required = set(required) if isinstance(required, list) else set()
    if not isinstance(properties, dict):
        return None
    fields = []
    for name, field in properties.items():
        if not isinstance(field, dict) or field.get("type") not in _KINDS:
            return None
        if field["type"] == "array" and not (
            isinstance(field.get("items"), dict) and _choices(field["items"])
        ):
            return None
        try:
            fields.append(_Field(name, field, name in required))
        except (SchemaError, RecursionError):
            return None
    return fields


def _choices(schema: dict[str, Any]) -> list[tuple[Any, str]]:
    """A field's choices, each with its title: ``enum`` (titled by ``enumNames``), or
    ``oneOf`` / ``anyOf`` of ``const`` with ``title``."""
    enum = schema.get("enum")
    if isinstance(enum, list):
        names = schema.get("enumNames")
        titles = names if isinstance(names, list) and len(names) == len(enum) else [""] * len(enum)
        return [(value, str(title)) for value, title in zip(enum, titles, strict=True)]
    for keyword in ("oneOf", "anyOf"):
        options = schema.get(keyword)
        if isinstance(options, list) and all(isinstance(o, dict) and "const" in o for o in options):
            return [(o["const"], str(o.get("title") or "")) for o in options]
    return []


def _json(value: Any) -> str:
    try:
        return _printable(msgspec.json.encode(value).decode())
    except (TypeError, msgspec.EncodeError):
        return _printable(repr(value))
