"""Contexts: ``ExecutionContext`` (what the caller says about a call), ``RunContext`` (what the tool
body gets) and ``ToolCall`` (one call of a batch). SPEC §7, §9, §11, §13."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, final

import msgspec

from fastgate._mypyc import mypyc_attr
from fastgate.cancel import CancelToken

if TYPE_CHECKING:
    from fastgate.approvals import ApprovalRequest, ApprovalResponse
    from fastgate.elicitation import ElicitationRequest, ElicitationResponse

# async or plain: a plain function runs in a thread of its own (fastgate._approval)
Approver = Callable[["ApprovalRequest"], "Awaitable[ApprovalResponse] | ApprovalResponse"]
# async or plain, as approvers: what an MCP server asks the user during a call (SPEC §14)
Elicitor = Callable[["ElicitationRequest"], "Awaitable[ElicitationResponse] | ElicitationResponse"]

_EMPTY: Mapping[str, Any] = MappingProxyType({})
# One bit per field a default can fill (see ``lacks_any``).
_SESSION_ID: Final = 1
_WORKSPACE_ROOT: Final = 2
_CANCEL: Final = 4
_APPROVER: Final = 8
_AGENT_SCOPE: Final = 16
_TURN_ID: Final = 32
_TRUSTED: Final = 64
_METADATA: Final = 128
_FS: Final = 256
_SHELL: Final = 512
_ELICITOR: Final = 1024
_FIELD_BITS: Final = {
    "session_id": _SESSION_ID,
    "workspace_root": _WORKSPACE_ROOT,
    "cancel": _CANCEL,
    "approver": _APPROVER,
    "agent_scope": _AGENT_SCOPE,
    "turn_id": _TURN_ID,
    "trusted": _TRUSTED,
    "metadata": _METADATA,
    "fs": _FS,
    "shell": _SHELL,
    "elicitor": _ELICITOR,
}
# name -> factory(workspace_root, additional_dirs) of the local seam used when a context sets
# none ("fs": fastgate.builtin installs LocalFileSystem's). The core never imports a capability;
# a capability registers itself here when it is imported.
_LOCAL_SEAMS: dict[str, Callable[[str, tuple[str, ...]], Any]] = {}


def set_local_seam(name: str, factory: Callable[[str, tuple[str, ...]], Any]) -> None:
    """Make ``factory(workspace_root, additional_dirs)`` the seam ``name`` (``"fs"``,
    ``"shell"``) a call gets when neither its context nor ``context_defaults`` sets one."""
    _LOCAL_SEAMS[name] = factory


@final
@dataclasses.dataclass(frozen=True, slots=True, init=False)
class ExecutionContext:
    """Who is calling and under which conditions. ``None`` fields are filled from the executor's
    ``context_defaults`` (see ``merged``)."""

    session_id: str | None = None
    workspace_root: str | None = None
    cancel: CancelToken | None = None
    approver: Approver | None = None
    agent_scope: str | None = None
    turn_id: str | None = None
    trusted: bool | None = None
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=lambda: _EMPTY)
    fs: Any = None  # a fastgate.builtin.FileSystem; None: the local one for the workspace
    shell: Any = None  # a fastgate.builtin.Shell; None: the local one
    elicitor: Elicitor | None = None  # answers an MCP server's questions during a call

    def __init__(
        self,
        session_id: str | None = None,
        workspace_root: str | None = None,
        cancel: CancelToken | None = None,
        approver: Approver | None = None,
        agent_scope: str | None = None,
        turn_id: str | None = None,
        trusted: bool | None = None,
        metadata: Mapping[str, Any] = _EMPTY,
        fs: Any = None,
        shell: Any = None,
        elicitor: Elicitor | None = None,
    ) -> None:
        # Compiled, rather than the interpreted one dataclasses would generate, and each field
        # set through its own slot descriptor (past the frozen __setattr__) rather than by
        # name through object.__setattr__: half the cost, for a server making a context per call.
        _set_session_id(self, session_id)
        _set_workspace_root(self, workspace_root)
        _set_cancel(self, cancel)
        _set_approver(self, approver)
        _set_agent_scope(self, agent_scope)
        _set_turn_id(self, turn_id)
        _set_trusted(self, trusted)
        _set_metadata(self, metadata)
        _set_fs(self, fs)
        _set_shell(self, shell)
        _set_elicitor(self, elicitor)

    def __copy__(self) -> ExecutionContext:
        # Frozen: a copy would equal it in every way. (Compiled, copying field by field also
        # ran into the frozen __setattr__, so copy.copy failed in that build only.)
        return self

    def __init_subclass__(cls, **options: Any) -> None:
        # The compiled build never allowed it; both builds now say so the same way.
        raise TypeError("ExecutionContext cannot be subclassed; carry extra data in metadata")

    def merged(self, defaults: Mapping[str, Any]) -> ExecutionContext:
        """This context with every unset field taken from ``defaults`` (its keys checked by
        ``check_defaults``); a new context unless ``defaults`` is empty."""
        if not defaults:
            return self
        # Field by field, not dataclasses.replace (half the cost): a server making a context per
        # call pays this on every call.
        get = defaults.get
        return ExecutionContext(
            self.session_id if self.session_id is not None else get("session_id"),
            self.workspace_root if self.workspace_root is not None else get("workspace_root"),
            self.cancel if self.cancel is not None else get("cancel"),
            self.approver if self.approver is not None else get("approver"),
            self.agent_scope if self.agent_scope is not None else get("agent_scope"),
            self.turn_id if self.turn_id is not None else get("turn_id"),
            self.trusted if self.trusted is not None else get("trusted"),
            self.metadata if self.metadata else get("metadata", self.metadata),
            self.fs if self.fs is not None else get("fs"),
            self.shell if self.shell is not None else get("shell"),
            self.elicitor if self.elicitor is not None else get("elicitor"),
        )

    def lacks_any(self, fields: int) -> bool:
        """Whether a default for one of ``fields`` (a ``field_mask``) would fill an unset field:
        when none would, ``merged`` would only copy this context."""
        return bool(
            (fields & _SESSION_ID and self.session_id is None)
            or (fields & _WORKSPACE_ROOT and self.workspace_root is None)
            or (fields & _CANCEL and self.cancel is None)
            or (fields & _APPROVER and self.approver is None)
            or (fields & _AGENT_SCOPE and self.agent_scope is None)
            or (fields & _TURN_ID and self.turn_id is None)
            or (fields & _TRUSTED and self.trusted is None)
            or (fields & _METADATA and not self.metadata)
            or (fields & _FS and self.fs is None)
            or (fields & _SHELL and self.shell is None)
            or (fields & _ELICITOR and self.elicitor is None)
        )

    @staticmethod
    def field_mask(names: Iterable[str]) -> int:
        """The ``lacks_any`` mask of the fields ``names``."""
        mask = 0
        for name in names:
            mask |= _FIELD_BITS[name]
        return mask

    @staticmethod
    def check_defaults(defaults: Mapping[str, Any]) -> dict[str, Any]:
        fields = {f.name for f in dataclasses.fields(ExecutionContext)}
        unknown = set(defaults) - fields
        if unknown:
            raise ValueError(
                f"context_defaults: unknown field(s) {', '.join(sorted(unknown))} "
                f"(known: {', '.join(sorted(fields))})"
            )
        return dict(defaults)


def _slot_setter(name: str) -> Callable[[ExecutionContext, Any], None]:
    """The setter of a field's slot descriptor: it sets the field past the frozen
    ``__setattr__`` (see ``ExecutionContext.__init__``)."""
    setter: Callable[[ExecutionContext, Any], None] = vars(ExecutionContext)[name].__set__
    return setter


_set_session_id: Final = _slot_setter("session_id")
_set_workspace_root: Final = _slot_setter("workspace_root")
_set_cancel: Final = _slot_setter("cancel")
_set_approver: Final = _slot_setter("approver")
_set_agent_scope: Final = _slot_setter("agent_scope")
_set_turn_id: Final = _slot_setter("turn_id")
_set_trusted: Final = _slot_setter("trusted")
_set_metadata: Final = _slot_setter("metadata")
_set_fs: Final = _slot_setter("fs")
_set_shell: Final = _slot_setter("shell")
_set_elicitor: Final = _slot_setter("elicitor")


class ToolCall(msgspec.Struct, frozen=True):
    """One tool call as the model emitted it."""

    id: str
    name: str
    args: Any


@mypyc_attr(allow_interpreted_subclasses=True)  # a public class: subclasses work in both builds
class RunContext:
    """Handed to ``execute(args, ctx)``. Tools declare ``ctx: RunContext`` to receive it.

    ``signal`` is cancelled when the caller cancels or the deadline passes; a sync tool (run in a
    worker thread) can only poll it: Python cannot stop a thread. ``lock_paths`` takes the file
    locks of a multi-path tool for the rest of the invocation; ``report_progress`` feeds
    ``executor.progress()``.
    """

    __slots__ = (
        "_changed",
        "_fs",
        "_lock_paths",
        "_progress",
        "_shell",
        "_signal",
        "additional_dirs",
        "attempt",
        "context",
        "execution_id",
        "session_id",
        "tool_name",
        "workspace_root",
    )

    def __init__(
        self,
        *,
        execution_id: str = "",
        tool_name: str = "",
        context: ExecutionContext | None = None,
        signal: CancelToken | None = None,
        progress: Callable[[Any], None] | None = None,
        lock_paths: Callable[[Iterable[str]], Awaitable[None]] | None = None,
        additional_dirs: tuple[str, ...] = (),
    ) -> None:
        """Every argument is optional, so a tool can be called directly in a unit test."""
        context = context if context is not None else ExecutionContext()
        self.execution_id = execution_id
        self.tool_name = tool_name
        self.context = context
        self.session_id = context.session_id
        self.workspace_root = context.workspace_root
        self._signal = signal
        self.attempt = 1
        self._progress = progress
        self._lock_paths = lock_paths
        self.additional_dirs = additional_dirs  # roots besides the workspace (PermissionConfig)
        self._fs: Any = None
        self._shell: Any = None
        self._changed: list[str] | None = None

    @property
    def signal(self) -> CancelToken:
        # Made on first use when nothing can cancel the call but its own awaiting task (most
        # bodies never look at it).
        signal = self._signal
        if signal is None:
            signal = self._signal = CancelToken()
        return signal

    @property
    def signal_fired(self) -> bool:
        """``signal.cancelled``, without making a signal that was never asked for."""
        return self._signal is not None and self._signal.cancelled

    def report_progress(self, data: Any) -> None:
        """Publish progress (bounded: the oldest entries are dropped past 256)."""
        if self._progress is not None:
            self._progress(data)

    async def lock_paths(self, paths: Iterable[str]) -> None:
        """Take the file locks of ``paths`` (sorted, de-duplicated) until the invocation ends."""
        if self._lock_paths is None:
            raise RuntimeError("lock_paths is only available inside an executor invocation")
        await self._lock_paths(paths)

    @property
    def fs(self) -> Any:
        """The call's file system: the context's ``fs``, else the local one for the workspace
        (``fastgate.builtin.LocalFileSystem``, once that package is imported)."""
        fs = self._fs
        if fs is None:
            fs = self.context.fs
            self._fs = fs = self._local_seam("fs", "file system") if fs is None else fs
        return fs

    @property
    def shell(self) -> Any:
        """The call's shell: the context's ``shell``, else the local one
        (``fastgate.builtin.LocalShell``, once that package is imported)."""
        shell = self._shell
        if shell is None:
            shell = self.context.shell
            self._shell = shell = self._local_seam("shell", "shell") if shell is None else shell
        return shell

    def _local_seam(self, name: str, what: str) -> Any:
        """The local seam ``name`` for this call's workspace, made by ``fastgate.builtin``."""
        factory = _LOCAL_SEAMS.get(name)
        if factory is None:
            raise RuntimeError(
                f"this call has no {what}: pass ExecutionContext({name}=...), or import "
                "fastgate.builtin for the local one"
            )
        return factory(self.workspace_root or os.getcwd(), self.additional_dirs)

    def checked_path(self, path: str) -> str:
        """``path`` (a path argument of this call, as given) as the executor resolved it when it
        checked the call (stage 5): absolute, every symlink followed. Writers change the file
        there, following no symlink from there, so one that appeared since (while the user
        decided, say) cannot redirect them. Outside an executor, or for a path the call did not
        name: its canonical form now."""
        from fastgate.paths import absolute_path, canonical_path

        if not isinstance(path, str) or not path or "\x00" in path:
            raise ValueError(f"not a usable path: {path!r}")
        return canonical_path(absolute_path(self.workspace_root or os.getcwd(), path))

    def files_changed(self, paths: Iterable[str]) -> None:
        """Report paths this call wrote, created or deleted: they reach the executor's
        ``on_files_changed`` observers (as canonical paths) once the call succeeds."""
        changed = self._changed
        if changed is None:
            changed = self._changed = []
        changed.extend(_checked_paths(paths))

    @property
    def changed_files(self) -> tuple[str, ...]:
        """What ``files_changed`` reported so far, canonical, in report order."""
        from fastgate.paths import canonical_path

        root = self.workspace_root or os.getcwd()
        reported = self._changed or ()
        return tuple(dict.fromkeys(canonical_path(os.path.join(root, p)) for p in reported))

    def may_read(self, path: str) -> bool:
        """Whether rules and the sensitive list let ``read`` show ``path`` without asking: no
        deny or ask rule of ``read`` (or of this tool) covers it and it is not sensitive. Search
        tools withhold the results it refuses. Outside an executor: the default sensitive list."""
        from fastgate.permissions.resolver import default_read_check

        return default_read_check(path, self.workspace_root or os.getcwd())


def _checked_paths(paths: Iterable[str]) -> list[str]:
    if isinstance(paths, (str, bytes)):
        raise TypeError("files_changed takes a list of paths, not a single string")
    out: list[str] = []
    for path in paths:
        if type(path) is not str or not path or "\x00" in path:
            raise ValueError(f"files_changed: not a usable path: {path!r}")
        out.append(path)
    return out
