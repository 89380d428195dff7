"""``AutoVerify``: after a trusted local edit, the workspace's own declared check runs and what
it says about the edited files comes back with the result (SPEC §13).

It acts only when the executor's mode is YOLO, ``ctx.trusted`` is true and the call's file
system is the local one. The check is what the workspace declares, never a guess:
``[tool.fastgate] verify = ["cmd", "arg", ...]`` in ``pyproject.toml``, else the
``type-check`` script of ``package.json`` (run as ``npm run type-check``). It runs through the
call's shell seam, in the workspace, with its own timeout. One check runs at a time per
workspace; concurrent calls whose changed files have the same contents share one run.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import sys
import weakref
from collections.abc import Sequence
from typing import Any

import xxhash

from fastgate.cancel import CancelToken
from fastgate.context import RunContext
from fastgate.paths import canonical_path

_CHECK_OUTPUT = 1_000_000  # characters of the check's output searched for the changed files
_NOT_RUNNABLE = (126, 127)  # the shell could not execute the program, or found none


class AutoVerify:
    """``timeout``: seconds the check may run; ``max_output_chars``: at most this much of its
    output is appended to a result."""

    def __init__(self, timeout: float = 120.0, max_output_chars: int = 8000) -> None:
        if type(timeout) not in (int, float) or not timeout > 0:
            raise ValueError(f"AutoVerify: timeout must be a positive number, got {timeout!r}")
        if type(max_output_chars) is not int or max_output_chars < 1:
            raise ValueError(
                f"AutoVerify: max_output_chars must be a positive int, got {max_output_chars!r}"
            )
        self.timeout = float(timeout)
        self.max_output_chars = max_output_chars
        self.runs = 0  # checks started (a shared run counts once)
        self.shared = 0  # calls that joined a check already queued or running
        self.waiting = 0  # checks waiting now for the one running in their workspace
        # Per event loop (its futures belong to it), per workspace: the queue of checks.
        self._queues: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[str, _Workspace]
        ] = weakref.WeakKeyDictionary()

    def __repr__(self) -> str:
        return f"AutoVerify(timeout={self.timeout:g}, max_output_chars={self.max_output_chars})"

    async def report(self, changed: Sequence[str], ctx: RunContext, content: Any) -> Any:
        """``content`` with what the check said about ``changed`` (canonical paths) appended,
        or ``content`` unchanged (not a local file system, nothing declared, nothing said)."""
        fs = ctx.fs
        if not _is_local(fs):
            return content
        root = _canonical(ctx.workspace_root or os.getcwd())
        declared = await _declared_check(fs, root)
        if declared is None:
            return content
        if isinstance(declared, _Misdeclared):
            return _appended(content, [declared.message])
        fingerprint = await _fingerprint(fs, changed)
        outcome = await self._shared_run(root, fingerprint, declared, ctx.shell)
        lines = self._lines(declared, outcome, root, changed)
        return _appended(content, lines) if lines else content

    # -- one check at a time per workspace, shared by equal fingerprints ---------------------

    async def _shared_run(self, root: str, fingerprint: str, argv: list[str], shell: Any) -> Any:
        loop = asyncio.get_running_loop()
        queues = self._queues.setdefault(loop, {})
        workspace = queues.get(root)
        if workspace is None:
            workspace = queues[root] = _Workspace()
        task = workspace.runs.get(fingerprint)
        if task is not None:
            self.shared += 1
        else:
            task = loop.create_task(self._run_in_turn(workspace, argv, root, shell))
            workspace.runs[fingerprint] = task
            task.add_done_callback(lambda done: workspace.forget(fingerprint, done))
        return await asyncio.shield(task)  # a caller that gives up leaves it to the others

    async def _run_in_turn(
        self, workspace: _Workspace, argv: list[str], root: str, shell: Any
    ) -> Any:
        self.waiting += 1
        try:
            await workspace.lock.acquire()
        finally:
            self.waiting -= 1
        try:
            self.runs += 1
            try:
                return await shell.run(
                    shlex.join(argv),
                    cwd=root,
                    env=None,
                    timeout=self.timeout,
                    max_output=_CHECK_OUTPUT,
                    signal=CancelToken(),
                )
            except Exception as exc:  # a crashing seam never fails the call
                return exc
        finally:
            workspace.lock.release()

    # -- what is appended ----------------------------------------------------------------------

    def _lines(self, argv: list[str], outcome: Any, root: str, changed: Sequence[str]) -> list[str]:
        shown = shlex.join(argv)
        if isinstance(outcome, Exception):
            return [f"the check `{shown}` could not run: {outcome}"]
        output = outcome.output if isinstance(outcome.output, str) else ""
        naming = _naming(root, changed)
        lines = [line for line in output.splitlines() if naming.search(line)]
        kept = _capped(lines, self.max_output_chars)
        code = outcome.exit_code
        if outcome.timed_out:
            kept.append(
                f"the check `{shown}` did not finish within {self.timeout:g}s and was stopped"
            )
        elif code in _NOT_RUNNABLE:
            last = output.strip().splitlines()[-1:] or [f"exit code {code}"]
            kept.append(f"the check `{shown}` could not run: {last[0]}")
        elif code is not None and code > 128:
            kept.append(f"the check `{shown}` crashed (exit code {code})")
        return kept


class _Workspace:
    __slots__ = ("lock", "runs")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.runs: dict[str, asyncio.Task[Any]] = {}

    def forget(self, fingerprint: str, task: asyncio.Task[Any]) -> None:
        if self.runs.get(fingerprint) is task:
            del self.runs[fingerprint]


class _Misdeclared:
    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message


def _is_local(fs: Any) -> bool:
    # The local file system exists only once fastgate.builtin is imported: no import here.
    module = sys.modules.get("fastgate.builtin._fs")
    return module is not None and isinstance(fs, module.LocalFileSystem)


def _canonical(path: str) -> str:
    try:
        return canonical_path(path)
    except (OSError, ValueError):
        return os.path.normpath(path)


async def _read(fs: Any, path: str) -> bytes | None:
    try:
        data: bytes = await fs.read_bytes(path)
    except OSError:
        return None
    return data


async def _declared_check(fs: Any, root: str) -> list[str] | _Misdeclared | None:
    """The check the workspace declares, as argv; None when it declares none."""
    pyproject = await _read(fs, os.path.join(root, "pyproject.toml"))
    if pyproject is not None:
        import tomllib

        try:
            document = tomllib.loads(pyproject.decode("utf-8"))
        except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            return _Misdeclared(
                f"pyproject.toml does not parse, so its check cannot be read: {exc}"
            )
        tool = document.get("tool")
        section = tool.get("fastgate") if isinstance(tool, dict) else None
        verify = section.get("verify") if isinstance(section, dict) else None
        if verify is not None:
            if (
                not isinstance(verify, list)
                or not verify
                or not all(isinstance(word, str) and word for word in verify)
            ):
                return _Misdeclared(
                    "[tool.fastgate] verify in pyproject.toml must be a non-empty list of "
                    f'strings, e.g. ["mypy", "src"]; got {verify!r}'
                )
            return list(verify)
    package = await _read(fs, os.path.join(root, "package.json"))
    if package is not None:
        try:
            manifest = json.loads(package)
        except (UnicodeDecodeError, ValueError):
            return None  # not ours to judge: npm will say so when it runs
        scripts = manifest.get("scripts") if isinstance(manifest, dict) else None
        if isinstance(scripts, dict) and isinstance(scripts.get("type-check"), str):
            return ["npm", "run", "type-check"]
    return None


async def _fingerprint(fs: Any, changed: Sequence[str]) -> str:
    """xxh3-128 of the changed files' paths and current contents (a deleted file: its path)."""
    digest = xxhash.xxh3_128()
    for path in sorted(changed):
        data = await _read(fs, path)
        digest.update(path.encode("utf-8", "surrogatepass") + b"\x00")
        if data is None:
            digest.update(b"\x01")
        else:
            digest.update(len(data).to_bytes(8, "little") + data)
    return digest.hexdigest()


def _naming(root: str, changed: Sequence[str]) -> re.Pattern[str]:
    """Matches a line naming one of ``changed``: by its workspace-relative path (or its absolute
    one), not as the tail of a longer name (``a.py`` is not ``data.py`` nor ``src/a.py``)."""
    names: list[str] = []
    prefix = root.rstrip("/") + "/"
    for path in changed:
        if path.startswith(prefix):
            names.append(re.escape(path[len(prefix) :]))
        names.append(re.escape(path))
    body = "|".join(sorted(set(names), key=len, reverse=True))
    return re.compile(rf"(?:^|(?<=[\s'\"(\[=:,]))(?:\./)?(?:{body})(?![\w/-]|\.\w)")


def _capped(lines: list[str], limit: int) -> list[str]:
    kept: list[str] = []
    used = 0
    for index, line in enumerate(lines):
        if used + len(line) + 1 > limit:
            line = line[: max(limit - used - 1, 0)]
            if line:
                kept.append(line)
            kept.append(f"({len(lines) - index} more lines not shown)")
            break
        kept.append(line)
        used += len(line) + 1
    return kept


def _appended(content: Any, lines: list[str]) -> Any:
    text = "AutoVerify:\n" + "\n".join(lines)
    if isinstance(content, str):
        return f"{content}\n\n{text}" if content else text
    if isinstance(content, tuple):
        return (*content, {"type": "text", "text": text})
    return content
