"""``ExecutionContext`` (what the caller says about a call) and ``ToolCall`` (one call of a
batch). SPEC §7, §11; what a tool body gets is ``fastgate.pipeline.run_context.RunContext``."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, final

import msgspec

from fastgate.model.cancel import CancelToken

if TYPE_CHECKING:
    from fastgate.model.approvals import ApprovalRequest, ApprovalResponse
    from fastgate.model.elicitation import ElicitationRequest, ElicitationResponse

# async or plain: a plain function runs in a thread of its own (fastgate.permissions.asking)
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
_IDEMPOTENCY_KEY: Final = 2048
_IDEMPOTENCY_SCOPE: Final = 4096
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
    "idempotency_key": _IDEMPOTENCY_KEY,
    "idempotency_scope": _IDEMPOTENCY_SCOPE,
}


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
    # The call's journal key (SPEC §24): a repeat with the same key in its scope runs nothing
    # again; it gets the recorded result, waits for the running call, or is told it is ambiguous.
    idempotency_key: Any = None  # checked by the journal, so a bad key is a refused call
    # Whose keys they are: the same key in the same scope names the same call. None: the session
    # (a gateway scopes its callers' keys by principal, across their client sessions).
    idempotency_scope: str | None = None

    def __init__(
        self,
        session_id: str | None = None,
        workspace_root: str | os.PathLike[str] | None = None,
        cancel: CancelToken | None = None,
        approver: Approver | None = None,
        agent_scope: str | None = None,
        turn_id: str | None = None,
        trusted: bool | None = None,
        metadata: Mapping[str, Any] = _EMPTY,
        fs: Any = None,
        shell: Any = None,
        elicitor: Elicitor | None = None,
        idempotency_key: Any = None,
        idempotency_scope: str | None = None,
    ) -> None:
        # Compiled, rather than the interpreted one dataclasses would generate. Each field is set
        # past the frozen __setattr__ by object.__setattr__ with the field's name written out:
        # mypyc turns that into a store in the instance's own struct (a context is made per call).
        object.__setattr__(self, "session_id", session_id)
        if workspace_root is not None and (
            type(workspace_root) is not str or workspace_root[:1] != "/" or "\x00" in workspace_root
        ):
            workspace_root = _absolute(workspace_root)  # "." means where the caller is now
        object.__setattr__(self, "workspace_root", workspace_root)
        object.__setattr__(self, "cancel", cancel)
        object.__setattr__(self, "approver", approver)
        object.__setattr__(self, "agent_scope", agent_scope)
        object.__setattr__(self, "turn_id", turn_id)
        object.__setattr__(self, "trusted", trusted)
        object.__setattr__(self, "metadata", metadata)
        object.__setattr__(self, "fs", fs)
        object.__setattr__(self, "shell", shell)
        object.__setattr__(self, "elicitor", elicitor)
        object.__setattr__(self, "idempotency_key", idempotency_key)
        object.__setattr__(self, "idempotency_scope", idempotency_scope)

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
            self.idempotency_key if self.idempotency_key is not None else get("idempotency_key"),
            self.idempotency_scope
            if self.idempotency_scope is not None
            else get("idempotency_scope"),
        )

    def lacks_any(self, fields: int) -> bool:
        """Whether a default for one of ``fields`` (a ``field_mask``) would fill an unset field:
        when none would, ``merged`` would only copy this context."""
        # One test a line, each a plain bool: compiled, an ``and``/``or`` chain of an int and a
        # bool would box every operand.
        if fields & _SESSION_ID and self.session_id is None:
            return True
        if fields & _WORKSPACE_ROOT and self.workspace_root is None:
            return True
        if fields & _CANCEL and self.cancel is None:
            return True
        if fields & _APPROVER and self.approver is None:
            return True
        if fields & _AGENT_SCOPE and self.agent_scope is None:
            return True
        if fields & _TURN_ID and self.turn_id is None:
            return True
        if fields & _TRUSTED and self.trusted is None:
            return True
        if fields & _METADATA and not self.metadata:
            return True
        if fields & _FS and self.fs is None:
            return True
        if fields & _SHELL and self.shell is None:
            return True
        if fields & _ELICITOR and self.elicitor is None:
            return True
        if fields & _IDEMPOTENCY_KEY and self.idempotency_key is None:
            return True
        return bool(fields & _IDEMPOTENCY_SCOPE) and self.idempotency_scope is None

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
        if defaults.get("idempotency_key") is not None:
            raise ValueError(
                "context_defaults: idempotency_key names one call, so it cannot be a default "
                "(every call would share it); pass it in each call's ExecutionContext"
            )
        out = dict(defaults)
        if out.get("workspace_root") is not None:
            out["workspace_root"] = _absolute(out["workspace_root"])
        return out


def _absolute(root: Any) -> str:
    """A workspace root as an absolute path (a relative one is taken from the working
    directory when the context is made, not when a tool later runs). No path holds a NUL:
    one that does is refused here rather than by the first system call given it."""
    path = str(os.path.abspath(os.fspath(root)))
    if "\x00" in path:
        raise ValueError("workspace_root: a path cannot hold a NUL character")
    return path


class ToolCall(msgspec.Struct, frozen=True):
    """One tool call as the model emitted it. ``idempotency_key``: the call's own journal key
    in a batch (SPEC §24), which one ``ExecutionContext`` for the whole batch cannot carry."""

    id: str
    name: str
    args: Any
    idempotency_key: str | None = None


def with_idempotency_key(ctx: ExecutionContext | None, key: str | None) -> ExecutionContext | None:
    """``ctx`` with ``idempotency_key=key`` (``ctx`` itself when ``key`` is None)."""
    if key is None:
        return ctx
    return dataclasses.replace(ctx or ExecutionContext(), idempotency_key=key)
