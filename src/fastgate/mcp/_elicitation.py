"""What an MCP server asks the user during a call, answered through the call's elicitor (SPEC §14
"Input requests").

Both protocol eras reach the same ``CallInputs.ask``:

- 2025-11-25: the server sends ``elicitation/create`` while the call runs. The SDK hands it to
  one callback per connection (``Router.on_elicit``), which finds the call it belongs to: the
  call whose progress token the request's ``_meta.progressToken`` names, else the only call in
  flight; a request that names no call of ours, or that could be any of several, is declined.
  A server may also answer the call with error -32042, naming URLs the user must visit first:
  each is put to the elicitor (URL mode) and, all accepted, the call is sent again.
- 2026-07-28: the call's result is ``input_required``; ``complete_call`` answers its input
  requests and retries the call (a new JSON-RPC id, the answers, the server's ``requestState``
  as it came), at most ``MAX_ROUNDS`` times.

An accepted form answer keeps only the fields the server asked for, takes the schema's defaults
for the ones it leaves out, and must then match the requested schema; an answer that does not is
never sent: the server gets a decline. Whatever is not an accepted, valid answer (no elicitor, a
decline, a cancel, a wrong answer, a question fastgate does not take) fails the call with
``TOOL_FAILURE``, ``details.reason = "input_required"``: never an empty success. The answers go
to the server, not to the model; the call stays the one call the policy admitted.
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import dataclasses
import inspect
import logging
import math
import threading
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import Any, Final

import msgspec
from mcp.shared.exceptions import MCPError
from mcp_types import URL_ELICITATION_REQUIRED

from fastgate import ElicitationRequest, ElicitationResponse, Failure, RunContext, SchemaError
from fastgate.model import ElicitationMode
from fastgate.schema import Validator, from_json_schema

log = logging.getLogger("fastgate.mcp")

MAX_ROUNDS: Final = 8  # 2026: input_required rounds of one call before it is stopped
# Questions one call may put to its elicitor, in all (an older-era server's elicitation/create
# requests; a 2026 round's input requests; the URLs of error -32042), so that no server can
# make a person answer an unbounded number of prompts for one call admitted once.
MAX_QUESTIONS: Final = 8
# A requested schema is a flat object of primitive fields (MCP restricts it so): a form of
# thousands of fields is no question for a person, and it is compiled on the event loop.
MAX_SCHEMA_BYTES: Final = 256 * 1024
MAX_MESSAGE_CHARS: Final = 8_000  # of a question's message, as the elicitor is shown it
_STATE_ONLY_FIRST: Final = 0.05  # seconds before retrying a round that asked nothing; doubled
_STATE_ONLY_CAP: Final = 0.25
_PROMPT_CHARS: Final = 300  # of the server's question, quoted in a failure
_SAID_CHARS: Final = 500  # of what the server answered after a refusal, quoted in a failure
_ISSUES_SHOWN: Final = 5
_MAX_URL: Final = 8192
_ELICIT: Final = "elicitation/create"
# Annotations of elicitation schemas that JSON Schema does not define (the titles of an older
# enum form): shown to the elicitor, left out of validation.
_ELICITATION_ANNOTATIONS: Final = frozenset({"enumNames"})


@dataclasses.dataclass(frozen=True, slots=True)
class Asked:
    """One question and what became of it: ``answer`` is what the server is sent (an
    ``ElicitResult``); ``refused`` is None when the call may go on, else why it cannot
    (``no_elicitor``, ``declined``, ``cancelled``, ``invalid``, ``unsupported``, ``failed``,
    ``rounds_exceeded``), ``why`` saying it in words."""

    answer: dict[str, Any]
    prompt: str
    refused: str | None = None
    why: str = ""


class CallInputs:
    """One call's questions: its elicitor, the answers it gave, the first refusal (older era:
    the call fails once the server's reply comes), and the elicitor prompts still open (older
    era: each runs in a task of its own, cancelled when the call ends)."""

    __slots__ = (
        "_closed",
        "_elicitor",
        "_hold",
        "_open",
        "asked",
        "execution_id",
        "refusal",
        "remote",
        "server",
        "session_id",
        "tool_name",
    )

    def __init__(
        self, server: str, remote: str, tool_name: str, ctx: RunContext, hold: Callable[[int], None]
    ) -> None:
        self.server = server
        self.remote = remote
        self.tool_name = tool_name
        self.session_id = ctx.session_id
        self.execution_id = ctx.execution_id or None
        self._elicitor = ctx.context.elicitor
        self._hold = hold  # +1 while a prompt is open (the idle clock waits for people), -1 after
        self.asked = 0
        self.refusal: Asked | None = None
        self._open: set[asyncio.Task[Asked]] = set()
        self._closed = False

    # -- one question --------------------------------------------------------------------------

    async def ask(self, params: Any) -> Asked:
        """The answer to one ``elicitation/create`` (its params, as on the wire)."""
        prompt = _prompt_of(params)
        made = self._request(params)
        if isinstance(made, str):
            return _decline(prompt, "unsupported", made)
        request, schema, validator = made
        elicitor = self._elicitor
        if elicitor is None:
            why = "this call has no elicitor to answer it (ExecutionContext.elicitor)"
            return _decline(prompt, "no_elicitor", why)
        self._hold(1)
        try:
            response = await _run(elicitor, request)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
            return _cancel(prompt, "failed", "the elicitor raised CancelledError")
        except Exception as exc:
            return _cancel(prompt, "failed", f"the elicitor failed ({type(exc).__name__})")
        finally:
            self._hold(-1)
        return _judged(response, request, schema, validator, prompt)

    def _request(
        self, params: Any
    ) -> tuple[ElicitationRequest, dict[str, Any] | None, Validator | None] | str:
        """The elicitor's request, the requested schema and its validator; or why the question
        cannot be put to anyone."""
        if not isinstance(params, dict):
            return "the request had no parameters"
        message = params.get("message")
        if not isinstance(message, str):
            return "the request had no message"
        message = _clip(message, MAX_MESSAGE_CHARS)  # a question, not a document
        mode = params.get("mode", "form")
        if mode == "url":
            url = params.get("url")
            if not isinstance(url, str) or not _web_address(url):
                return "URL mode needs an http or https address, and the server sent none"
            return self._elicitation(message, url=url, mode="url"), None, None
        if mode != "form":
            return f"the request's mode {str(mode)[:40]!r} is neither form nor url"
        schema = params.get("requestedSchema")
        if not isinstance(schema, dict):
            return "the request had no requestedSchema object"
        size = len(msgspec.json.encode(schema))
        if size > MAX_SCHEMA_BYTES:  # it is compiled on the event loop and copied for the elicitor
            limit = MAX_SCHEMA_BYTES
            return f"its requested schema is {size} bytes, over the {limit} a question may take"
        try:
            validator = from_json_schema(_for_validation(schema))
            # The elicitor gets a copy: whatever it does to it, answers are checked against ours.
            shown = copy.deepcopy(schema)
        except (SchemaError, RecursionError) as exc:
            return f"its requested schema cannot be checked: {exc}"
        return self._elicitation(message, requested_schema=shown), schema, validator

    def _elicitation(
        self,
        message: str,
        *,
        requested_schema: dict[str, Any] | None = None,
        url: str | None = None,
        mode: ElicitationMode = "form",
    ) -> ElicitationRequest:
        return ElicitationRequest(
            self.server,
            self.tool_name,
            message,
            requested_schema,
            url,
            mode,
            session_id=self.session_id,
            execution_id=self.execution_id,
        )

    def take(self, questions: int) -> bool:
        """Count ``questions`` more put to the elicitor (2026: one round's input requests; a
        -32042 error's URLs); False, counting none, when the call would ask more than
        ``MAX_QUESTIONS`` in all. The older era counts its ``elicitation/create`` requests
        against the same bound."""
        if self.asked + questions > MAX_QUESTIONS:
            return False
        self.asked += questions
        return True

    # -- the older era: a request of the server's, answered in a task of its own --------------

    async def answer_request(self, params: dict[str, Any]) -> dict[str, Any]:
        """What the server is sent for its ``elicitation/create``. The prompt runs in a task the
        call cancels when it ends; the first refusal is kept for the call's result."""
        if self._closed:
            return {"action": "cancel"}
        self.asked += 1
        if self.asked > MAX_QUESTIONS:  # one call, one question after another
            why = f"the server asked more than {MAX_QUESTIONS} times"
            asked = _decline(_prompt_of(params), "rounds_exceeded", why)
            self.refusal = self.refusal or asked
            return asked.answer
        task = asyncio.get_running_loop().create_task(self.ask(params))
        self._open.add(task)
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:  # the server (or the connection) gave up the question
            task.cancel()
            raise
        finally:
            self._open.discard(task)
        if task.cancelled():  # the call ended while its question was open
            return {"action": "cancel"}
        asked = task.result()
        if asked.refused is not None and self.refusal is None:
            self.refusal = asked
        return asked.answer

    async def aclose(self) -> None:
        """The call has ended: prompts still open are cancelled (and their tasks gone)."""
        self._closed = True
        tasks = set(self._open)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    # -- the failure ---------------------------------------------------------------------------

    def failure(
        self, asked: Asked, *, said: str = "", requests: list[str] | None = None
    ) -> Failure:
        """``TOOL_FAILURE`` (``input_required``) for a question that got no usable answer;
        ``said``: what the server answered the call with afterwards (older era)."""
        quoted = f" ({asked.prompt!r})" if asked.prompt else ""
        message = (
            f"The tool {self.remote} of MCP server {self.server} asked for input{quoted} before "
            f"it could complete, and {asked.why}, so the call did not complete."
        )
        if said:
            message += f" The server then answered: {_clip(said, _SAID_CHARS)!r}"
        details: dict[str, Any] = {
            "reason": "input_required",
            "server": self.server,
            "tool": self.remote,
            "answer": asked.refused,
        }
        if requests is not None:
            details["requests"] = requests
        return Failure(message, code="input_required", details=details)


def _judged(
    response: Any,
    request: ElicitationRequest,
    schema: dict[str, Any] | None,
    validator: Validator | None,
    prompt: str,
) -> Asked:
    """What the elicitor's response makes of the question."""
    if not isinstance(response, ElicitationResponse):
        return _cancel(prompt, "failed", "the elicitor gave no ElicitationResponse")
    if response.action == "decline":
        return _decline(prompt, "declined", "the user declined to answer")
    if response.action == "cancel":
        return _cancel(prompt, "cancelled", "the question was dismissed (cancel)")
    if request.mode == "url":
        return Asked({"action": "accept"}, prompt)  # consent only: a URL answer has no content
    assert schema is not None and validator is not None
    content = checked_content(response.content, schema, validator)
    if isinstance(content, str):
        why = f"the answer did not match what the server asked for ({content}); it was not sent"
        return _decline(prompt, "invalid", why)
    return Asked({"action": "accept", "content": content}, prompt)


def _decline(prompt: str, refused: str, why: str) -> Asked:
    return Asked({"action": "decline"}, prompt, refused, why)


def _cancel(prompt: str, refused: str, why: str) -> Asked:
    return Asked({"action": "cancel"}, prompt, refused, why)


# -- the 2026 era: input_required results ----------------------------------------------------------


async def complete_call(
    send: Callable[[dict[str, Any]], Awaitable[Any]], params: dict[str, Any], inputs: CallInputs
) -> Any:
    """The final reply of a ``tools/call`` (``send(params)`` makes one request, with a new id
    each time), its ``input_required`` rounds answered through ``inputs``; a ``Failure`` when
    a round cannot be answered or the server asks more than ``MAX_ROUNDS`` times."""
    reply = await _sent_after_urls(send, params, inputs)
    rounds = 0
    delay = _STATE_ONLY_FIRST
    while isinstance(reply, dict) and reply.get("resultType") == "input_required":
        requests = reply.get("inputRequests")
        requests = requests if isinstance(requests, dict) else {}
        keys = sorted(str(key)[:_PROMPT_CHARS] for key in requests)[:30]
        if rounds == MAX_ROUNDS:
            prompt = next((p for p in map(_prompt_of_request, requests.values()) if p), "")
            why = f"the server asked more than {MAX_ROUNDS} times"
            return inputs.failure(_decline(prompt, "rounds_exceeded", why), requests=keys)
        rounds += 1
        retry = dict(params)
        if requests:
            if not inputs.take(len(requests)):  # one round of many questions: refused whole
                prompt = next((p for p in map(_prompt_of_request, requests.values()) if p), "")
                return inputs.failure(_too_many(prompt), requests=keys)
            answers: dict[str, Any] = {}
            for key, request in requests.items():
                asked = await _ask_embedded(inputs, request)
                if asked.refused is not None:
                    return inputs.failure(asked, requests=keys)
                answers[key] = asked.answer
            retry["inputResponses"] = answers
            delay = _STATE_ONLY_FIRST
        else:  # only state: the server wants the call again, later
            await asyncio.sleep(delay)
            delay = min(delay * 2, _STATE_ONLY_CAP)
        state = reply.get("requestState")
        if state is not None:
            retry["requestState"] = state  # as it came: opaque, never read or rewritten
        reply = await send(retry)
    return reply


async def _sent_after_urls(
    send: Callable[[dict[str, Any]], Awaitable[Any]], params: dict[str, Any], inputs: CallInputs
) -> Any:
    """``send(params)``; an older-era server's error -32042 (URL elicitations to complete
    first) has each of its URLs put to the elicitor and the request sent again, at most
    ``MAX_ROUNDS`` times; a ``Failure`` when one is not accepted."""
    for _ in range(MAX_ROUNDS):
        try:
            return await send(params)
        except MCPError as exc:
            data = exc.error.data
            wanted = data.get("elicitations") if isinstance(data, dict) else None
            if exc.code != URL_ELICITATION_REQUIRED or not isinstance(wanted, list) or not wanted:
                raise
        if not inputs.take(len(wanted)):
            return inputs.failure(_too_many(""))
        for elicitation in wanted:
            if not isinstance(elicitation, dict) or elicitation.get("mode", "url") != "url":
                asked = _decline("", "unsupported", "error -32042 named an elicitation not by URL")
            else:
                asked = await inputs.ask({**elicitation, "mode": "url"})
            if asked.refused is not None:
                return inputs.failure(asked)
    why = f"the server asked for URLs more than {MAX_ROUNDS} times"
    return inputs.failure(_decline("", "rounds_exceeded", why))


def _too_many(prompt: str) -> Asked:
    why = f"the server asked more than {MAX_QUESTIONS} questions in one call"
    return _decline(prompt, "rounds_exceeded", why)


async def _ask_embedded(inputs: CallInputs, request: Any) -> Asked:
    method = request.get("method") if isinstance(request, dict) else None
    if method != _ELICIT:
        what = str(method)[:60] if isinstance(method, str) else "an input of no known kind"
        why = f"it asked for {what}, which fastgate does not provide (only elicitation)"
        return _decline("", "unsupported", why)
    return await inputs.ask(request.get("params"))


# -- the older era: the connection's one callback -------------------------------------------------


class Router:
    """The SDK's elicitation callback for one connection, routing each request to its call."""

    __slots__ = ("_calls", "_server")

    def __init__(self, server: str) -> None:
        self._server = server
        self._calls: dict[str, CallInputs] = {}  # progress token (the request id) -> the call

    def open(self, token: str, inputs: CallInputs) -> None:
        self._calls[token] = inputs

    def close(self, token: str) -> None:
        self._calls.pop(token, None)

    async def on_elicit(self, context: Any, params: Any) -> Any:
        """``elicitation/create`` from the server (``ElicitationFnT`` of the SDK)."""
        import mcp_types

        wire = params.model_dump(by_alias=True, mode="json", exclude_none=True)
        inputs = self._route(wire)
        if inputs is None:
            log.warning(
                "MCP server %s asked for input outside any call it named (%d in flight): declined",
                self._server,
                len(self._calls),
            )
            return mcp_types.ElicitResult(action="decline")
        answer = await inputs.answer_request(wire)
        return mcp_types.ElicitResult(**answer)

    def _route(self, wire: dict[str, Any]) -> CallInputs | None:
        meta = wire.get("_meta")
        token = meta.get("progressToken") if isinstance(meta, dict) else None
        if token is not None:
            return self._calls.get(str(token))
        if len(self._calls) == 1:
            return next(iter(self._calls.values()))
        return None


# -- answers ---------------------------------------------------------------------------------------


def checked_content(
    content: Any, schema: dict[str, Any], validator: Validator
) -> dict[str, Any] | str:
    """The content to send for an accepted form answer: the fields the schema names, the
    defaults of those left out (SEP-1034), each a primitive (or a list of strings), the whole
    valid against the schema. Else a short account of what is wrong."""
    if content is None:
        content = {}
    if not isinstance(content, dict):
        return "the answer is not an object of fields"
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    kept = {name: value for name, value in content.items() if name in properties}
    for name, field in properties.items():
        if name not in kept and isinstance(field, dict) and "default" in field:
            default = field["default"]
            kept[name] = list(default) if isinstance(default, list) else default
    wrong = [name for name, value in kept.items() if not _primitive(value)]
    if wrong:
        return "; ".join(
            f"{name}: not a string, number, boolean or list of strings" for name in wrong
        )
    issues = validator.validate(kept)
    if issues:
        return "; ".join(issue.message for issue in issues[:_ISSUES_SHOWN])
    return kept


def _primitive(value: Any) -> bool:
    if value is None or isinstance(value, (str, bool, int)):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _for_validation(schema: dict[str, Any]) -> dict[str, Any]:
    """The requested schema without the elicitation-only annotations of its fields."""
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return schema
    cleaned = {
        name: {k: v for k, v in field.items() if k not in _ELICITATION_ANNOTATIONS}
        if isinstance(field, dict)
        else field
        for name, field in properties.items()
    }
    return {**schema, "properties": cleaned}


def _web_address(url: str) -> bool:
    if len(url) > _MAX_URL or any(ch.isspace() or ord(ch) < 32 for ch in url):
        return False
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return False
    return parts.scheme in ("https", "http") and bool(parts.hostname)


def _prompt_of(params: Any) -> str:
    message = params.get("message") if isinstance(params, dict) else None
    return _clip(message, _PROMPT_CHARS) if isinstance(message, str) else ""


def _prompt_of_request(request: Any) -> str:
    return _prompt_of(request.get("params") if isinstance(request, dict) else None)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


# -- running an elicitor ---------------------------------------------------------------------------


async def _run(elicitor: Any, request: ElicitationRequest) -> Any:
    """The elicitor's answer. An async one is awaited; a plain one runs in a daemon thread of its
    own (it may wait for a person, and must hold back neither the loop nor its worker threads);
    cancelled, the call stops waiting for it."""
    if _is_async(elicitor):
        return await elicitor(request)
    answer = await asyncio.shield(_in_thread(elicitor, request))
    if inspect.isawaitable(answer):  # a plain function that handed back a coroutine
        answer = await answer
    return answer


def _is_async(function: Any) -> bool:
    return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(
        getattr(function, "__call__", None)  # noqa: B004 - the method, not callability
    )


def _in_thread(function: Callable[[ElicitationRequest], Any], request: ElicitationRequest) -> Any:
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def settle(ok: bool, value: Any) -> None:
        if future.done():
            return
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)

    def run() -> None:
        try:
            outcome: tuple[bool, Any] = (True, context.run(function, request))
        except BaseException as exc:  # the thread must not die with it: the answer is a failure
            outcome = (False, exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
        try:
            loop.call_soon_threadsafe(settle, *outcome)
        except RuntimeError:
            pass  # the loop is closed: nobody waits any more

    threading.Thread(target=run, name="fastgate-elicitor", daemon=True).start()
    return future
