"""``RunContext``: what a tool body gets (SPEC §9, §13, §16): its signal, progress, file locks,
the call's file system and shell, and what the call changed.

The file system and shell default to the local ones of ``fastgate.builtin`` for the call's
workspace, chosen when a body first asks (``_local_seam``): the one place the pipeline reaches up
to a capability, so nothing depends on what was imported before.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from fastgate._mypyc import mypyc_attr
from fastgate.model.cancel import CancelToken
from fastgate.model.context import ExecutionContext


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

    def audit_network_refusal(self, host: str, port: int, reason: str) -> None:
        """Write one network connection this call's sandboxed command was refused (a
        ``NetworkEvent`` that is not ``allowed``: its ``host``, ``port`` and ``reason``) to the
        executor's audit sink, tied to this call (SPEC §22): a ``NetworkAuditEvent`` passed to
        the sink's ``network_refused``. A sink without that method, or no executor: nothing."""

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
        """The local seam ``name`` for this call's workspace, made by ``fastgate.builtin``
        (imported here, when first needed: a seam passed in never needs it)."""
        try:
            builtin = importlib.import_module("fastgate.builtin")
        except ImportError as exc:
            raise RuntimeError(
                f"this call has no {what}: pass ExecutionContext({name}=...), or install the "
                f"'builtin' extra for the local one ({exc})"
            ) from exc
        root = self.workspace_root or os.getcwd()
        return builtin.local_seam(name, root, self.additional_dirs)

    def checked_path(self, path: str) -> str:
        """``path`` (a path argument of this call, as given) as the executor resolved it when it
        checked the call (stage 5): absolute, every symlink followed. Writers change the file
        there, following no symlink from there, so one that appeared since (while the user
        decided, say) cannot redirect them. Outside an executor, or for a path the call did not
        name: its canonical form now."""
        from fastgate.paths.canonical import absolute_path, canonical_path

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
        from fastgate.paths.canonical import canonical_path

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
