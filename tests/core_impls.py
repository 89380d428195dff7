"""The pure and (when built) compiled core modules, side by side, for differential tests."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest


def implementations(name: str) -> list[ModuleType]:
    """``[pure]`` or ``[pure, compiled]`` for core module ``name`` (e.g. ``"_sched"``)."""
    found = [importlib.import_module(f"fastgate._core.{name}_py")]
    try:
        compiled = importlib.import_module(f"fastgate._core.{name}_c")
    except ImportError:
        if os.environ.get("FASTGATE_REQUIRE_EXTENSIONS") == "1":
            raise
    else:
        if not str(compiled.__file__).endswith(".py"):
            found.append(compiled)
    return found


def require_compiled(name: str) -> ModuleType:
    impls = implementations(name)
    if len(impls) < 2:
        pytest.skip("compiled core not built")
    return impls[1]
