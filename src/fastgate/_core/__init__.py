"""Select the compiled or the pure-Python core, once, at import time.

``FASTGATE_NO_EXTENSIONS=1`` forces the pure modules (for debugging);
``FASTGATE_REQUIRE_EXTENSIONS=1`` turns a missing or broken compiled module into an ImportError,
so a run that is meant to test the compiled build can never silently test the pure one. The
compiled module ``_<name>_c`` is built from the very same source as ``_<name>_py`` (setup.py).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Awaitable, Callable
from importlib.machinery import EXTENSION_SUFFIXES
from types import ModuleType
from typing import TYPE_CHECKING, cast

NO_EXTENSIONS = os.environ.get("FASTGATE_NO_EXTENSIONS", "") not in ("", "0")
REQUIRE_EXTENSIONS = os.environ.get("FASTGATE_REQUIRE_EXTENSIONS", "") not in ("", "0")
MODULES = ("_wait", "_gate", "_sched", "_locks", "_validate")

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


_loaded = {name: _load(name) for name in MODULES}

#: module name -> "compiled" | "pure": what `fastgate info` reports.
IMPLEMENTATION = {name: ("compiled" if c else "pure") for name, (_, c) in _loaded.items()}
COMPILED = all(compiled for _, compiled in _loaded.values())

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

#: The completed awaitable the admission fast paths return (see _wait_py).
READY: Awaitable[None] = cast(
    "Awaitable[None]", wait.Ready() if _loaded["_wait"][1] else wait.InterpretedReady()
)
#: The awaitable type of queued requests (see _wait_py).
WAIT: Callable[..., Awaitable[None]] = wait.Wait if _loaded["_wait"][1] else wait.InterpretedWait

__all__ = ("COMPILED", "IMPLEMENTATION", "READY", "WAIT", "gate", "locks", "sched", "wait")
