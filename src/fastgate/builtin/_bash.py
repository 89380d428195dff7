"""``bash``: one command through the call's shell seam, in the workspace (SPEC §16)."""

from __future__ import annotations

import asyncio
import errno
from typing import Any

from fastgate.builtin._common import root_of
from fastgate.builtin._shell import ShellResult
from fastgate.model import ErrorCode, Failure, ToolFault
from fastgate.pipeline import RunContext

DEFAULT_TIMEOUT = 120.0
MAX_TIMEOUT = 600.0
MAX_CONTENT = 30_000  # the whole content: output, the cut note and the exit code line
_LAST_LINE_ROOM = 256  # kept for the last line (the exit code, or the timeout)
MAX_COMMAND = 32_768  # characters: the OS refuses a longer single argument (128 KiB in bytes)


async def bash(args: Any, ctx: RunContext) -> Any:
    command: str = args["command"]
    if "\x00" in command:
        return Failure("The command contains a NUL character; remove it.", code="bad_command")
    timeout = args.get("timeout")
    seconds = DEFAULT_TIMEOUT if timeout is None else float(timeout)
    root = root_of(ctx)
    try:
        result: ShellResult = await ctx.shell.run(
            command,
            cwd=root,
            env=None,
            timeout=seconds,
            max_output=MAX_CONTENT - _LAST_LINE_ROOM,
            signal=ctx.signal,
            roots=(root, *ctx.additional_dirs),
        )
    except OSError as exc:
        if isinstance(exc, ToolFault):  # out of descriptors: retryable, with its details
            raise
        return _not_started(exc, root)
    except asyncio.CancelledError as stopped:  # the refusals made before it count too
        _audit_refusals(ctx, getattr(stopped, "network", ()))
        raise
    _audit_refusals(ctx, result.network)
    if result.timed_out:  # the command's own limit: a TIMEOUT, with what it printed so far
        raise ToolFault(
            _with_last_line(
                result.output,
                f"Timed out after {seconds:g}s: the command was stopped, and every process it "
                "started was ended. Run long jobs with a larger timeout (at most 600), or in "
                "smaller steps.",
            ),
            code=ErrorCode.TIMEOUT,
            details={"timeout": seconds, "truncated": result.truncated},
        )
    code = result.exit_code
    if code is None:  # stopped by the call's signal: the executor reports the cancellation
        return Failure(_with_last_line(result.output, "The command was stopped."), code="stopped")
    if code == 0:
        return {"exit_code": 0, "output": result.output, "truncated": result.truncated}
    return Failure(
        _with_last_line(result.output, exit_line(code)),
        code="exit_status",
        details={"exit_code": code, "truncated": result.truncated},
    )


def _audit_refusals(ctx: RunContext, network: Any) -> None:
    """A sandbox's proxy refusals, each to the audit sink (SPEC §22)."""
    for event in network:
        if not event.allowed:
            ctx.audit_network_refusal(event.host, event.port, event.reason)


def render_bash(value: Any) -> str:
    """The content of a successful run: the output, then the exit code line."""
    return _with_last_line(value["output"], exit_line(value["exit_code"]))


def exit_line(code: int) -> str:
    if code > 128:
        try:
            import signal

            name = signal.Signals(code - 128).name
        except ValueError:
            return f"Exit code: {code}"
        return f"Exit code: {code} (killed by {name})"
    return f"Exit code: {code}"


def _with_last_line(output: str, line: str) -> str:
    if not output:
        return f"(no output)\n{line}"
    return f"{output}{'' if output.endswith(chr(10)) else chr(10)}{line}"


def _not_started(exc: OSError, root: str) -> Failure:
    if exc.errno == errno.ENOENT and exc.filename == root:
        message = f"The command could not start: the workspace directory {root} does not exist."
    elif exc.errno == errno.ENOENT:
        message = "The command could not start: bash is not installed on the server."
    elif exc.errno == errno.E2BIG:
        message = "The command is too long for the operating system; write it to a script first."
    else:
        message = f"The command could not start: {exc.strerror or exc}."
    return Failure(message, code="not_started")
