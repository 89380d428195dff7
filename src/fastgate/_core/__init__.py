"""Select the compiled or the pure-Python build, once, at import time.

Two kinds of module are compiled (setup.py): the core's hot paths, ``_<name>_c`` built by Cython
from the very same source as ``_<name>_py``, and the pipeline's modules (``PIPELINE_MODULES``),
built by mypyc as they are, their extension sitting beside their source.

``FASTGATE_NO_EXTENSIONS=1`` forces the pure modules (for debugging): the pure core, and the
pipeline modules loaded from their source even where a compiled build sits beside it.
``FASTGATE_REQUIRE_EXTENSIONS=1`` turns a missing or broken compiled module into an ImportError,
so a run that is meant to test the compiled build can never silently test the pure one.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import stat
import sys
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from importlib.machinery import EXTENSION_SUFFIXES
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

NO_EXTENSIONS = os.environ.get("FASTGATE_NO_EXTENSIONS", "") not in ("", "0")
REQUIRE_EXTENSIONS = os.environ.get("FASTGATE_REQUIRE_EXTENSIONS", "") not in ("", "0")
MODULES = ("_wait", "_gate", "_sched", "_locks", "_validate", "_task")
#: Compiled by mypyc as they are (setup.py reads this list from here).
PIPELINE_MODULES = (
    "pipeline.executor",
    "pipeline.invocation",
    "pipeline.body",
    "pipeline.history",
    "pipeline.journal",
    "pipeline.tracing",
    "pipeline.progress",
    "pipeline.refusals",
    "admission.holds",
    "admission.locks",
    "admission.deadlines",
    "model.context",
    "model.construction",
    "pipeline.run_context",
    "model.cancel",
    "model.rendering",
    "paths.canonical",
    "paths.worktree",
    "permissions.resolver",
    "permissions.rules",
    "permissions.settings",
    "permissions.subjects",
    "permissions.matching",
    "permissions.merge",
    "tools.registry",
)

if NO_EXTENSIONS and REQUIRE_EXTENSIONS:
    raise ImportError("FASTGATE_NO_EXTENSIONS and FASTGATE_REQUIRE_EXTENSIONS are both set")


def _is_extension(module: ModuleType) -> bool:
    return str(getattr(module, "__file__", "")).endswith(tuple(EXTENSION_SUFFIXES))


def _load(name: str) -> tuple[ModuleType, bool]:
    """Return (module, compiled) for one core module, honouring the two switches."""
    if not NO_EXTENSIONS:
        try:
            module = importlib.import_module(f"{__name__}.{name}_c")
        except ImportError as exc:
            if REQUIRE_EXTENSIONS:
                raise ImportError(
                    f"fastgate: compiled module {name}_c is required but failed to load: {exc}"
                ) from exc
        else:
            if _is_extension(module):
                return module, True
            if REQUIRE_EXTENSIONS:
                raise ImportError(f"fastgate: {name}_c is not a compiled extension")
    return importlib.import_module(f"{__name__}.{name}_py"), False


class _SourceFirst(importlib.abc.MetaPathFinder):
    """Loads the pipeline modules from their ``.py`` source, never from the compiled extension
    beside it (installed only under ``FASTGATE_NO_EXTENSIONS=1``)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        package, _, name = fullname.partition(".")
        if package != "fastgate" or name not in PIPELINE_MODULES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not str(spec.origin).endswith(tuple(EXTENSION_SUFFIXES)):
            return spec
        source = os.path.join(os.path.dirname(str(spec.origin)), fullname.rpartition(".")[2])
        return importlib.util.spec_from_file_location(fullname, source + ".py")


def _pipeline_compiled(name: str) -> bool:
    """Whether ``fastgate.<name>`` will load compiled: an extension beside its source is found
    first by Python's own finder (looked up, not imported: the package is being imported)."""
    if NO_EXTENSIONS:
        return False
    stem = os.path.join(os.path.dirname(os.path.dirname(__file__)), *name.split("."))
    compiled = any(os.path.exists(stem + suffix) for suffix in EXTENSION_SUFFIXES)
    if REQUIRE_EXTENSIONS and not compiled:
        raise ImportError(f"fastgate: the mypyc build of fastgate.{name} is required but missing")
    return compiled


if NO_EXTENSIONS and not any(isinstance(f, _SourceFirst) for f in sys.meta_path):
    sys.meta_path.insert(0, _SourceFirst())


def _load_own(module: str, name: str) -> object | None:
    """``name`` from the compiled module ``module`` that has no pure twin (its own .pyx), or
    None: in the pure build, or where it failed to build and extensions are not required."""
    if NO_EXTENSIONS:
        return None
    try:
        found: object = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    except ImportError as exc:
        if REQUIRE_EXTENSIONS:
            raise ImportError(
                f"fastgate: compiled module {module} is required but failed to load: {exc}"
            ) from exc
        return None
    return found


_loaded = {name: _load(name) for name in MODULES}
_pipeline = {name: _pipeline_compiled(name) for name in PIPELINE_MODULES}
#: ``open_no_symlinks(path, directory) -> errno`` (0: opened, no symlink on the way), or None:
#: without it ``fastgate.paths`` takes the /proc route for every path (see _openat2.pyx).
open_no_symlinks = cast(
    "Callable[[str, bool], int] | None", _load_own("_openat2", "open_no_symlinks")
)
#: ``route_construction(cls, factory)``: calls of ``cls`` go to ``factory`` (see
#: _construct.pyx); None when pure, whose classes are plain Python.
route_construction = cast(
    "Callable[[type, Callable[..., object]], None] | None",
    _load_own("_construct", "route_construction"),
)


def _regular_file_links(path: str) -> int:
    """The pure build's ``regular_file_links`` (see _links.pyx)."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return 0
    return info.st_nlink if stat.S_ISREG(info.st_mode) else 0


_compiled_links = cast("Callable[[str], int] | None", _load_own("_links", "regular_file_links"))
#: ``regular_file_links(path) -> int``: the link count of the regular file ``path`` names, or 0.
regular_file_links: Callable[[str], int] = _compiled_links or _regular_file_links

#: module name -> "compiled" | "pure": what `fastgate info` reports.
IMPLEMENTATION = {name: ("compiled" if c else "pure") for name, (_, c) in _loaded.items()}
IMPLEMENTATION.update(
    {f"fastgate.{name}": ("compiled" if c else "pure") for name, c in _pipeline.items()}
)
IMPLEMENTATION["_openat2"] = "compiled" if open_no_symlinks is not None else "pure"
IMPLEMENTATION["_construct"] = "compiled" if route_construction is not None else "pure"
IMPLEMENTATION["_links"] = "compiled" if _compiled_links is not None else "pure"
COMPILED = all(compiled == "compiled" for compiled in IMPLEMENTATION.values())

if TYPE_CHECKING:
    from fastgate._core import _gate_py as gate
    from fastgate._core import _locks_py as locks
    from fastgate._core import _sched_py as sched
    from fastgate._core import _validate_py as validate
    from fastgate._core import _wait_py as wait
else:
    wait = _loaded["_wait"][0]
    gate = _loaded["_gate"][0]
    sched = _loaded["_sched"][0]
    locks = _loaded["_locks"][0]
    validate = _loaded["_validate"][0]

#: ``start_body(coro, loop, name)``: the body's own task, its first step run at once (see
#: _task_py).
start_body: Callable[[Coroutine[Any, Any, Any], asyncio.AbstractEventLoop, str], asyncio.Task[Any]]
start_body = _loaded["_task"][0].start_body

#: The completed awaitable the admission fast paths return (see _wait_py).
READY: Awaitable[None] = cast(
    "Awaitable[None]", wait.Ready() if _loaded["_wait"][1] else wait.interpreted_ready()
)
#: The awaitable type of queued requests (see _wait_py).
WAIT: Callable[..., Awaitable[None]] = wait.Wait if _loaded["_wait"][1] else wait.InterpretedWait

__all__ = (
    "COMPILED",
    "IMPLEMENTATION",
    "READY",
    "WAIT",
    "gate",
    "locks",
    "open_no_symlinks",
    "regular_file_links",
    "route_construction",
    "sched",
    "start_body",
    "wait",
)
