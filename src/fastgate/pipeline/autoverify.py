"""``AutoVerify``: after a trusted local edit, the workspace's own declared check runs and what
it says about the edited files comes back with the result (SPEC §13).

It acts only when the executor's mode is YOLO, ``ctx.trusted`` is true and the call's file
system is the local one. The check is what the workspace declares, never a guess:
``[tool.fastgate] verify = ["cmd", "arg", ...]`` in ``pyproject.toml``, else the
``type-check`` script of ``package.json`` (run as ``npm run type-check``). For npm the
declaration is all npm runs then: the script, its ``pretype-check`` and ``posttype-check``
hooks (or their absence) and the workspace's ``.npmrc`` (which can name the shell scripts run
in, or preload code into node).

Trust: the declaration is read once per workspace, before the first call's tool runs in it
(``pin``); a declaration made or changed later, by a tool call or anyone, is not run. The
command must also pass the permission rules as a ``bash`` call of it would, with nobody to ask.
It runs through the call's shell seam, in the workspace, with its own timeout, after the call
has let go of its slot and file locks. One check runs at a time per workspace; concurrent
calls whose changed files have the same contents share one run.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import sys
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import xxhash

from fastgate import schema
from fastgate.model.cancel import CancelToken
from fastgate.model.context import ExecutionContext
from fastgate.model.decision import Decision, DecisionSource
from fastgate.model.kinds import ToolKind
from fastgate.paths.canonical import canonical_path
from fastgate.pipeline.run_context import RunContext
from fastgate.tools import define_tool

if TYPE_CHECKING:
    from fastgate.permissions import PermissionResolver

_CHECK_OUTPUT = 1_000_000  # characters of the check's output searched for the changed files
_NOT_RUNNABLE = (126, 127)  # the shell could not execute the program, or found none
_MAX_WORKSPACES = 10_000  # declarations remembered; a workspace beyond them gets no check
_ROOT_CACHE = 1024  # workspace roots as given -> canonical, cleared when full
_SHOWN = 200  # characters of a declaration quoted in a note


class AutoVerify:
    """``timeout``: seconds the check may run; ``max_output_chars``: at most this much of its
    output is appended to a result.

    One instance remembers the check each workspace declared when it first saw a call there:
    share one between the executors of a server, and a check planted by one session is not run
    for another."""

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
        # Per canonical workspace root: what it declared before the first call's tool ran.
        self._pinned: dict[str, _Declared] = {}
        self._roots: dict[str, str] = {}  # absolute roots as given -> canonical
        # Per event loop (its futures belong to it), per workspace: the queue of checks.
        self._queues: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[str, _Workspace]
        ] = weakref.WeakKeyDictionary()

    def __repr__(self) -> str:
        return f"AutoVerify(timeout={self.timeout:g}, max_output_chars={self.max_output_chars})"

    def pin(self, ctx: RunContext) -> Awaitable[None] | None:
        """The executor calls this before each call's tool runs: the first time a workspace is
        seen, its declared check is read and becomes the only one AutoVerify runs there. None
        when there is nothing to wait for."""
        root = self._root(ctx.workspace_root)
        if root in self._pinned or len(self._pinned) >= _MAX_WORKSPACES:
            return None
        try:
            fs = ctx.fs
        except RuntimeError:  # no file system at all: nothing AutoVerify could act on
            return None
        if not _is_local(fs):
            return None  # read at the first call on the local file system, the only one checked
        workspace = self._workspace(root)
        if workspace.pinning is None:
            workspace.pinning = asyncio.get_running_loop().create_task(self._pin(fs, root))
        return asyncio.shield(workspace.pinning)  # a caller that gives up leaves it to the others

    async def _pin(self, fs: Any, root: str) -> None:
        declared = await _declared_check(fs, root)
        self._pinned.setdefault(root, declared)  # another event loop may have read it first

    async def report(
        self,
        changed: Sequence[str],
        ctx: RunContext,
        content: Any,
        *,
        resolver: PermissionResolver,
        release: Callable[[], None] | None = None,
    ) -> Any:
        """``content`` with what the check said about ``changed`` (canonical paths) appended,
        or ``content`` unchanged (not a local file system, nothing declared, nothing said).

        ``resolver`` judges the check's command as a ``bash`` call; ``release`` lets go of the
        call's slot and file locks once its files' contents are fingerprinted, before the
        check, so calls that wrote the same contents share one run."""
        fs = ctx.fs
        if not _is_local(fs):
            return content
        root = self._root(ctx.workspace_root)
        current = await _declared_check(fs, root)
        pinned = self._pinned.get(root, _UNREAD)
        if pinned is _UNREAD:
            if current is None:
                return content
            return _appended(content, [_NOT_PINNED])
        if current != pinned:
            return _appended(content, [_changed_note(pinned, current)])
        if pinned is None:
            return content
        if isinstance(pinned, _Misdeclared):
            return _appended(content, [pinned.message])
        assert isinstance(pinned, _Check)
        command = shlex.join(pinned.argv)
        refusal = _refusal(resolver, command, ctx.context)
        if refusal is not None:
            return _appended(content, [f"the check `{_shown(command)}` was not run: {refusal}"])
        fingerprint = await _fingerprint(fs, changed)
        if release is not None:
            release()
        outcome = await self._shared_run(root, fingerprint, command, ctx.shell)
        lines = self._lines(command, outcome, root, changed)
        return _appended(content, lines) if lines else content

    def _root(self, given: str | None) -> str:
        given = given or os.getcwd()
        if not os.path.isabs(given):  # relative to a working directory that may move
            return _canonical(given)
        root = self._roots.get(given)
        if root is None:
            if len(self._roots) >= _ROOT_CACHE:
                self._roots.clear()
            root = self._roots[given] = _canonical(given)
        return root

    def _workspace(self, root: str) -> _Workspace:
        queues = self._queues.setdefault(asyncio.get_running_loop(), {})
        workspace = queues.get(root)
        if workspace is None:
            workspace = queues[root] = _Workspace()
        return workspace

    # -- one check at a time per workspace, shared by equal fingerprints ---------------------

    async def _shared_run(self, root: str, fingerprint: str, command: str, shell: Any) -> Any:
        workspace = self._workspace(root)
        task = workspace.runs.get(fingerprint)
        if task is not None:
            self.shared += 1
        else:
            loop = asyncio.get_running_loop()
            task = loop.create_task(self._run_in_turn(workspace, command, root, shell))
            workspace.runs[fingerprint] = task
            task.add_done_callback(lambda done: workspace.forget(fingerprint, done))
        return await asyncio.shield(task)  # a caller that gives up leaves it to the others

    async def _run_in_turn(self, workspace: _Workspace, command: str, root: str, shell: Any) -> Any:
        self.waiting += 1
        try:
            await workspace.lock.acquire()
        finally:
            self.waiting -= 1
        try:
            self.runs += 1
            try:
                return await shell.run(
                    command,
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

    def _lines(self, shown: str, outcome: Any, root: str, changed: Sequence[str]) -> list[str]:
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
    __slots__ = ("lock", "pinning", "runs")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.runs: dict[str, asyncio.Task[Any]] = {}
        self.pinning: asyncio.Task[None] | None = None

    def forget(self, fingerprint: str, task: asyncio.Task[Any]) -> None:
        if self.runs.get(fingerprint) is task:
            del self.runs[fingerprint]


class _Check(NamedTuple):
    """A declared check: where, its argv, and for package.json what npm would run with it."""

    origin: str
    argv: tuple[str, ...]
    script: str | None = None
    # npm runs ``pre<name>`` and ``post<name>`` around ``npm run <name>``: (hook, its script),
    # also when absent (None), so a hook added later changes the declaration.
    hooks: tuple[tuple[str, str | None], ...] = ()
    npmrc: str | None = None  # digest of the workspace's .npmrc (script-shell, node-options)


class _Misdeclared(NamedTuple):
    message: str


_Declared = _Check | _Misdeclared | None
_UNREAD: Any = object()  # no declaration was read for the workspace
_NOT_PINNED = (
    "the check was not run: AutoVerify had not read this workspace's declared check before a "
    f"call ran in it (it keeps {_MAX_WORKSPACES:,} workspaces), so it is not trusted"
)


def _changed_note(then: _Declared, now: _Declared) -> str:
    return (
        "the check was not run: the check this workspace declares changed after its first call "
        f"(then: {_described(then)}; now: {_described(now)}). A check declared or changed while "
        "the workspace is in use is not trusted; it is read again when AutoVerify is made anew "
        "(a server restart)."
    )


def _described(declared: _Declared) -> str:
    if declared is None:
        return "none"
    if isinstance(declared, _Misdeclared):
        return "a declaration that cannot be read"
    command = f"`{_shown(shlex.join(declared.argv))}`"
    if declared.script is None:
        return f"{command} in {declared.origin}"
    hooks = "".join(
        f", {hook} `{_shown(script)}`" for hook, script in declared.hooks if script is not None
    )
    npmrc = f", with .npmrc {declared.npmrc}" if declared.npmrc is not None else ""
    return f"{command}, script `{_shown(declared.script)}`{hooks} in {declared.origin}{npmrc}"


def _shown(text: str) -> str:
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def _never_run(args: Any, ctx: Any) -> Any:
    raise RuntimeError("AutoVerify's check is judged as a bash call, never run as one")


# What the rules see of a check: a `bash` call of its command, whether or not the executor
# offers the bash built-in.
_CHECK_AS_BASH = define_tool(
    "bash",
    "AutoVerify's check, judged as the bash call of its command.",
    schema.Object({"command": schema.String()}, required=("command",)),
    _never_run,
    kind=ToolKind.EXECUTE,
    path_args=(),
    rule_names=("Bash",),
)


def _refusal(resolver: PermissionResolver, command: str, ctx: ExecutionContext) -> str | None:
    """Why the rules do not let the check run (None: they do). Nobody is asked for a check,
    so what would ask refuses it, also the ask rules that YOLO lets through for a call."""
    try:
        decided = resolver.decide(_CHECK_AS_BASH, {"command": command}, ctx)
    except Exception as exc:  # fail closed
        return f"its permission could not be decided ({exc})"
    if decided.decision is Decision.DENY:
        return decided.reason
    if decided.decision is Decision.ASK:
        return f"{decided.reason}, and nobody is asked for a check"
    if decided.source is DecisionSource.MODE and decided.matched_rule is not None:
        return f"rule {decided.matched_rule} asks before it, and nobody is asked for a check"
    return None


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


async def _declared_check(fs: Any, root: str) -> _Declared:
    """The check the workspace declares; None when it declares none."""
    try:
        return await _read_declaration(fs, root)
    except Exception as exc:  # whatever the files hold, the call goes on
        return _Misdeclared(f"the declared check could not be read: {exc}")


async def _read_declaration(fs: Any, root: str) -> _Declared:
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
            return _Check("pyproject.toml", tuple(verify))
    package = await _read(fs, os.path.join(root, "package.json"))
    if package is not None:
        try:
            manifest = json.loads(package)
        except (UnicodeDecodeError, ValueError):
            return None  # not ours to judge: npm will say so when it runs
        scripts = manifest.get("scripts") if isinstance(manifest, dict) else None
        script = scripts.get("type-check") if isinstance(scripts, dict) else None
        if isinstance(script, str):
            assert isinstance(scripts, dict)
            return await _npm_check(fs, root, scripts, script)
    return None


_NPM_SCRIPT = "type-check"
_NPM_HOOKS = (f"pre{_NPM_SCRIPT}", f"post{_NPM_SCRIPT}")


async def _npm_check(fs: Any, root: str, scripts: dict[str, Any], script: str) -> _Check:
    """``npm run type-check`` as declared: npm runs whatever the script and its hooks say then,
    in the shell and with the node options the workspace's .npmrc names, so all of it is the
    declaration (a hook that is not a string is kept as is: npm's to judge, but a change)."""
    hooks = tuple((hook, _hook_text(scripts.get(hook))) for hook in _NPM_HOOKS)
    npmrc = await _read(fs, os.path.join(root, ".npmrc"))
    digest = None if npmrc is None else xxhash.xxh3_64_hexdigest(npmrc)
    return _Check("package.json", ("npm", "run", _NPM_SCRIPT), script, hooks, digest)


def _hook_text(value: Any) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value)


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
