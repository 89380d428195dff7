"""``SandboxedShell``: ``LocalShell`` whose every command runs confined (SPEC §22)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence

from fastgate import CancelToken, ErrorCode, ToolFault
from fastgate.builtin import DEFAULT_ENV_DENY, LocalShell, ShellResult, check_shell_arguments
from fastgate.processes import PlanFailed
from fastgate.sandbox._launch import Confinement
from fastgate.sandbox._network import NetworkEvent
from fastgate.sandbox._policy import SandboxPolicy
from fastgate.sandbox._support import SandboxSupport, sandbox_support
from fastgate.sandbox._support import warn_unconfined as _warn_unconfined

#: What a line of the result says when a bound ended the command.
BOUND_LINES = {
    "processes": "more than {max_processes} processes and threads at once (max_processes)",
    "tmp": "its temporary directory is full ({max_tmp_bytes} bytes, max_tmp_bytes)",
}
_MAX_NETWORK_LINES = 20


def setup_fault(exc: PlanFailed) -> ToolFault:
    return ToolFault(
        f"The command was not run: the sandbox could not be set up ({exc.strerror}).",
        code=ErrorCode.TOOL_ERROR,
        details={"reason": "sandbox_failed", "step": exc.step.describe() if exc.step else None},
    )


def unavailable_fault(why: str) -> ToolFault:
    return ToolFault(
        f"The command was not run: the sandbox is required but unavailable ({why}).",
        code=ErrorCode.TOOL_ERROR,
        details={"reason": "sandbox_unavailable", "missing": why},
    )


class SandboxedShell(LocalShell):
    """Each command in ``bash -c``, confined by ``policy`` (SPEC §22): it writes only in the
    call's roots, ``policy.writable`` and a private temporary directory; protected paths stay
    read-only and hidden ones unreadable; it cannot reach the server (memory, environment,
    signals, ptrace, IPC, Unix sockets) nor the network but through fastgate's proxy when
    ``policy.network`` allows. Everything else is ``LocalShell``'s (the environment without
    secrets, every process ended with the call).
    """

    def __init__(
        self,
        policy: SandboxPolicy | None = None,
        *,
        env_allow: Iterable[str] = (),
        env_deny: Iterable[str] = DEFAULT_ENV_DENY,
        kill_grace: float = 1.0,
        read_grace: float = 2.0,
        executable: str = "bash",
    ) -> None:
        super().__init__(
            env_allow=env_allow,
            env_deny=env_deny,
            kill_grace=kill_grace,
            read_grace=read_grace,
            executable=executable,
        )
        if policy is None:
            policy = SandboxPolicy()
        if not isinstance(policy, SandboxPolicy):
            raise TypeError(f"policy: expected a SandboxPolicy, got {type(policy).__name__}")
        self.policy = policy

    def __repr__(self) -> str:
        return f"SandboxedShell({self.policy!r})"

    async def run(
        self,
        command: str,
        *,
        cwd: str,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 -- the seam's signature (SPEC §16)
        max_output: int = 30_000,
        signal: CancelToken | None = None,
        roots: Sequence[str] | None = None,
    ) -> ShellResult:
        check_shell_arguments(command, timeout)
        support = sandbox_support()
        why = _unsupported(support, self.policy)
        if why is not None:
            if self.policy.require:
                raise unavailable_fault(why)
            _warn_unconfined(why)
            return await super().run(
                command, cwd=cwd, env=env, timeout=timeout, max_output=max_output, signal=signal
            )
        for attempt in (1, 2):
            confinement = await Confinement.open(self.policy, support, roots=roots, cwd=cwd)
            try:
                extra = {**(env or {}), **confinement.environment}
                result, process = await self.supervised(
                    command,
                    cwd,
                    extra,
                    timeout,
                    max_output,
                    signal,
                    plan=confinement.steps,
                    pass_fds=confinement.pass_fds,
                    on_start=confinement.started,
                )
            except PlanFailed as exc:
                # The tree changed while the plan was made (a directory removed meanwhile):
                # once more with a fresh plan; never unconfined, which a command could provoke.
                if attempt == 1:
                    continue
                raise setup_fault(exc) from None
            except asyncio.CancelledError as stopped:
                # No result to carry them: the network's decisions so far ride on the error,
                # so that the call's audit still hears of every refusal (see ``Shell``).
                stopped.network = confinement.network  # type: ignore[attr-defined]
                raise
            finally:
                await confinement.close()
            return self._result(
                result, process.bound, confinement.network, confinement.refusals_dropped
            )
        raise AssertionError("unreachable")

    def _result(
        self,
        result: ShellResult,
        bound: str | None,
        network: tuple[NetworkEvent, ...],
        refusals_dropped: int = 0,
    ) -> ShellResult:
        lines = []
        if bound is not None:
            limit = BOUND_LINES.get(bound, bound).format(
                max_processes=self.policy.max_processes, max_tmp_bytes=self.policy.max_tmp_bytes
            )
            # Ended by the supervisor (a signal's status), or it gave up on its own first.
            ended = result.exit_code is None or result.exit_code > 128
            happened = "was ended" if ended else "reached a bound"
            lines.append(f"[sandbox] The command {happened}: {limit}.")
        refused = [event for event in network if not event.allowed]
        for event in refused[:_MAX_NETWORK_LINES]:
            where = f"{event.host}:{event.port}" if event.host else "(no host)"
            lines.append(f"[sandbox] Network refused: {where} ({event.reason})")
        more = len(refused) + refusals_dropped - _MAX_NETWORK_LINES
        if more > 0:
            lines.append(f"[sandbox] ... and {more} more refused")
        output = result.output
        if lines:
            joined = "\n".join(lines)
            output = f"{output}{'' if not output or output.endswith(chr(10)) else chr(10)}{joined}"
        return ShellResult(
            result.exit_code,
            output,
            result.truncated,
            result.timed_out,
            sandboxed=True,
            network=network,
        )


def _unsupported(support: SandboxSupport, policy: SandboxPolicy) -> str | None:
    """Why ``policy`` cannot be enforced here, or ``None``."""
    if not support.available:
        return support.reason
    if policy.network is not None and not support.network:
        return f"a NetworkPolicy cannot be enforced here: {support.reason}"
    return None
