"""``CommandHook``: a hook that is an external command speaking JSON on stdin and stdout.

Protocol (docs/hooks.md has the full shapes): the event is written to the command's stdin as one
JSON object and stdin is closed; the command answers with at most one JSON object on stdout.
Exit 0 with empty (or whitespace-only) stdout is "no opinion". A non-zero exit, a timeout, more
than ``max_output_bytes`` of output, or stdout that is not exactly one valid reply object raises
``HookFailed`` (the runner turns that into a deny for PreToolUse).

The command runs under a launcher that is its parent and the reaper of everything it starts,
daemons that detach included (``fastgate.processes``). Whatever happens (reply, failure,
timeout, cancellation of the awaiting task) every one of those processes gets SIGKILL once the
hook is over and is reaped before the call returns: a hook leaves no process and no zombie
behind (``_process.py``).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Literal, final, overload

import msgspec

from fastgate.hooks._pins import ChangedScript, ScriptPins
from fastgate.hooks._process import run_bounded
from fastgate.hooks._types import (
    PostToolUseEvent,
    PostToolUseFailureEvent,
    PostToolUseResult,
    PreToolUseEvent,
    PreToolUseResult,
)

Answers = Callable[[tuple[str, ...]], bool]
"""A hook's matcher as a predicate on the names a tool or one file of a call answers to."""

DEFAULT_COMMAND_TIMEOUT: Final = 30.0
MAX_OUTPUT_BYTES: Final = 1 << 20
_STDERR_TAIL: Final = 500  # characters of stderr quoted in a failure message


class HookFailed(Exception):
    """A hook did not produce a usable reply; the message says why, for the model and the log."""


class HookExited(HookFailed):
    """A command hook exited with a non-zero ``status``; ``stderr`` is what it wrote there (some
    protocols give a status a meaning: Claude Code's exit 2 blocks with stderr as the reason)."""

    def __init__(self, message: str, *, status: int, stderr: str) -> None:
        super().__init__(message)
        self.status = status
        self.stderr = stderr


def _to_json_default(value: Any) -> Any:
    # Frozen arguments are read-only mappings; everything else non-JSON is an error.
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} cannot be sent to a command hook as JSON")


_encoder = msgspec.json.Encoder(enc_hook=_to_json_default)


def event_payload(event: PreToolUseEvent | PostToolUseEvent | PostToolUseFailureEvent) -> bytes:
    """The JSON document a command hook reads on stdin."""
    ctx = event.context
    payload: dict[str, Any] = {
        "hook_event_name": _event_name(event),
        "tool_name": event.tool_name,
        "tool_input": event.args,
        "session_id": ctx.session_id,
        "cwd": ctx.workspace_root,
        "turn_id": ctx.turn_id,
        "agent_scope": ctx.agent_scope,
    }
    if isinstance(event, PostToolUseEvent):
        # The canonical value never leaves the process (SPEC §10): only the content is sent.
        payload["tool_response"] = {"ok": event.result.ok, "content": event.result.content}
    elif isinstance(event, PostToolUseFailureEvent):
        err = event.error
        payload["error"] = {
            "code": str(err.code),
            "message": err.message,
            "retryable": err.retryable,
            "details": err.details,
        }
    return _encoder.encode(payload) + b"\n"


def _event_name(event: object) -> str:
    if isinstance(event, PreToolUseEvent):
        return "PreToolUse"
    if isinstance(event, PostToolUseEvent):
        return "PostToolUse"
    return "PostToolUseFailure"


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        # {"decision": "deny", "decision": "allow"} must not quietly mean "allow".
        raise ValueError("duplicate key in a JSON object")
    return result


def parse_reply_object(stdout: bytes) -> dict[str, Any] | None:
    """``None`` for empty stdout, else exactly one JSON object (strict: no NaN, no duplicate keys,
    nothing after it). Raises ``HookFailed``."""
    text = stdout.strip()
    if not text:
        return None
    try:
        reply = json.loads(
            text, object_pairs_hook=_no_duplicate_keys, parse_constant=_reject_constant
        )
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError too
        raise HookFailed(f"stdout is not one JSON object ({exc})") from None
    if not isinstance(reply, dict):
        raise HookFailed(f"stdout must be a JSON object, got a JSON {type(reply).__name__}")
    return reply


_PRE_KEYS: Final = frozenset({"decision", "reason", "updated_args", "additional_context"})
_POST_KEYS: Final = frozenset({"value", "content", "block", "additional_context"})
_FAILURE_KEYS: Final = frozenset({"additional_context"})


def _check_keys(reply: Mapping[str, Any], allowed: frozenset[str], event_name: str) -> None:
    # Unknown keys fail closed: a reply in another dialect may have meant "deny".
    unknown = sorted(set(reply) - allowed)
    if unknown:
        raise HookFailed(
            f"unknown key(s) {', '.join(map(repr, unknown))} in a {event_name} reply "
            f"(allowed: {', '.join(sorted(allowed))})"
        )


def pre_reply(reply: dict[str, Any] | None) -> PreToolUseResult | None:
    if reply is None:
        return None
    _check_keys(reply, _PRE_KEYS, "PreToolUse")
    try:
        return PreToolUseResult(**reply)
    except (TypeError, ValueError) as exc:
        raise HookFailed(f"invalid PreToolUse reply: {exc}") from None


def post_reply(reply: dict[str, Any] | None) -> PostToolUseResult | None:
    if reply is None:
        return None
    _check_keys(reply, _POST_KEYS, "PostToolUse")
    try:
        return PostToolUseResult(**reply)
    except (TypeError, ValueError) as exc:
        raise HookFailed(f"invalid PostToolUse reply: {exc}") from None


def failure_reply(reply: dict[str, Any] | None) -> str | None:
    if reply is None:
        return None
    _check_keys(reply, _FAILURE_KEYS, "PostToolUseFailure")
    context = reply.get("additional_context")
    if context is not None and not isinstance(context, str):
        raise HookFailed("invalid PostToolUseFailure reply: additional_context must be a string")
    return context


@final
class CommandHook:
    """An external command as a hook: ``CommandHook(["python3", "check.py"], timeout=10)``.

    ``argv`` is run without a shell (use ``["sh", "-c", "..."]`` explicitly for one). ``cwd``
    defaults to the call's ``workspace_root`` (the server's working directory when unset); ``env``
    defaults to the server's environment. ``protocol="claude"`` speaks Claude Code's hook
    protocol instead of fastgate's (docs/hooks.md; ``CLAUDE_PROJECT_DIR`` is set to the
    workspace root). Awaiting the hook is cancellation-safe: the process group is killed and
    reaped before ``CancelledError`` propagates.
    """

    __slots__ = (
        "argv",
        "cwd",
        "env",
        "max_output_bytes",
        "pins",
        "protocol",
        "sandbox",
        "timeout",
    )

    def __init__(
        self,
        argv: Sequence[str],
        *,
        timeout: float = DEFAULT_COMMAND_TIMEOUT,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        max_output_bytes: int = MAX_OUTPUT_BYTES,
        protocol: Literal["fastgate", "claude"] = "fastgate",
        sandbox: Any = None,
        pins: ScriptPins | None = None,
    ) -> None:
        if isinstance(argv, (str, bytes)) or not isinstance(argv, Sequence):
            raise TypeError(
                "CommandHook: argv must be a list of strings (no shell is involved; "
                'use ["sh", "-c", "..."] explicitly if you need one)'
            )
        if not argv or not all(isinstance(a, str) for a in argv):
            raise TypeError("CommandHook: argv must be a non-empty list of strings")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise TypeError("CommandHook: timeout must be a number of seconds")
        if not (math.isfinite(timeout) and timeout > 0):
            raise ValueError(f"CommandHook: timeout must be positive and finite, got {timeout}")
        if isinstance(max_output_bytes, bool) or not isinstance(max_output_bytes, int):
            raise TypeError("CommandHook: max_output_bytes must be an int")
        if max_output_bytes <= 0:
            raise ValueError("CommandHook: max_output_bytes must be positive")
        self.argv: tuple[str, ...] = tuple(argv)
        self.timeout = float(timeout)
        self.cwd = cwd
        self.env = dict(env) if env is not None else None
        self.max_output_bytes = max_output_bytes
        if protocol not in ("fastgate", "claude"):
            raise ValueError(
                f"CommandHook: protocol must be 'fastgate' or 'claude', got {protocol!r}"
            )
        self.protocol = protocol
        self.sandbox = sandbox  # a fastgate.sandbox.SandboxPolicy confining the command
        self.pins = pins  # the files the command names, as they were (settings hooks)

    def __repr__(self) -> str:
        return f"CommandHook({list(self.argv)!r}, timeout={self.timeout})"

    @overload
    async def __call__(
        self, event: PreToolUseEvent, *, answers: Answers | None = None
    ) -> PreToolUseResult | None: ...
    @overload
    async def __call__(
        self, event: PostToolUseEvent, *, answers: Answers | None = None
    ) -> PostToolUseResult | None: ...
    @overload
    async def __call__(
        self, event: PostToolUseFailureEvent, *, answers: Answers | None = None
    ) -> str | None: ...

    async def __call__(
        self,
        event: PreToolUseEvent | PostToolUseEvent | PostToolUseFailureEvent,
        *,
        answers: Answers | None = None,
    ) -> PreToolUseResult | PostToolUseResult | str | None:
        """Run the command for ``event`` and return its typed reply. Raises ``HookFailed``.

        ``answers``: the matcher the hook is registered with, given names (the runners pass
        it). In Claude Code's protocol a call shown file by file is shown only the files whose
        names it matches; ``None`` shows every file."""
        if self.pins is None:
            return await self._reply(event, answers)
        root = event.context.workspace_root or os.getcwd()
        try:
            self.pins.check(root)
        except ChangedScript as changed:
            raise HookFailed(str(changed)) from None
        try:
            return await self._reply(event, answers)
        finally:
            self.pins.settle(root)  # what the run wrote of the files it does not run

    async def _reply(
        self,
        event: PreToolUseEvent | PostToolUseEvent | PostToolUseFailureEvent,
        answers: Answers | None,
    ) -> PreToolUseResult | PostToolUseResult | str | None:
        if self.protocol == "claude":
            from fastgate.hooks._claude import call_claude_hook  # it builds on this module

            return await call_claude_hook(self, event, answers)
        try:
            payload = event_payload(event)
        except (TypeError, ValueError) as exc:
            raise HookFailed(f"the event cannot be encoded as JSON: {exc}") from None
        cwd = self.cwd if self.cwd is not None else event.context.workspace_root
        reply = parse_reply_object(await self.run(payload, cwd=cwd))
        if isinstance(event, PreToolUseEvent):
            return pre_reply(reply)
        if isinstance(event, PostToolUseEvent):
            return post_reply(reply)
        return failure_reply(reply)

    async def run(
        self, stdin: bytes, *, cwd: str | None = None, env: Mapping[str, str] | None = None
    ) -> bytes:
        """Run the command with ``stdin`` (and ``env`` instead of its own); the stdout of a clean
        exit, else ``HookFailed`` (``HookExited`` for a non-zero exit)."""
        try:
            async with asyncio.timeout(self.timeout):
                out = await run_bounded(
                    self.argv,
                    stdin,
                    limit=self.max_output_bytes,
                    cwd=cwd,
                    env=env if env is not None else self.env,
                    sandbox=self.sandbox,
                )
        except TimeoutError:
            raise HookFailed(
                f"timed out after {self.timeout:g} s (every process it started was killed)"
            ) from None
        except OSError as exc:
            raise HookFailed(f"cannot start {self.argv[0]!r}: {exc}") from None
        if out.stdout_overflow:
            raise HookFailed(f"wrote more than {self.max_output_bytes} bytes to stdout")
        if out.returncode != 0:
            raise HookExited(
                f"exited with status {out.returncode}{_stderr_note(out.stderr)}",
                status=-1 if out.returncode is None else out.returncode,
                stderr=out.stderr.decode("utf-8", "replace").strip(),
            )
        return bytes(out.stdout)


def _stderr_note(stderr: bytearray) -> str:
    text = stderr.decode("utf-8", "replace").strip()
    if not text:
        return ""
    if len(text) > _STDERR_TAIL:
        text = "..." + text[-_STDERR_TAIL:]
    return f": {text}"
