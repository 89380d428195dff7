"""Which core loaded must be exactly what the environment asked for: no silent fallback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import fastgate
from fastgate import _core


def test_required_extensions_are_really_compiled() -> None:
    if os.environ.get("FASTGATE_REQUIRE_EXTENSIONS") != "1":
        pytest.skip("checked in the run that requires extensions")
    assert fastgate.COMPILED is True
    assert set(fastgate.IMPLEMENTATION.values()) == {"compiled"}
    for module in (_core.gate, _core.sched, _core.locks, _core.wait, _core.validate):
        assert module.__name__.endswith("_c"), module
        assert not str(module.__file__).endswith(".py"), module.__file__


def test_no_extensions_forces_pure() -> None:
    if os.environ.get("FASTGATE_NO_EXTENSIONS") != "1":
        pytest.skip("checked in the run that forbids extensions")
    assert fastgate.COMPILED is False
    assert set(fastgate.IMPLEMENTATION.values()) == {"pure"}
    assert _core.sched.__name__.endswith("_py")


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FASTGATE_")}
    return subprocess.run(
        [sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True
    )


def test_both_switches_together_are_refused() -> None:
    proc = _run("import fastgate", FASTGATE_NO_EXTENSIONS="1", FASTGATE_REQUIRE_EXTENSIONS="1")
    assert proc.returncode != 0
    assert "both set" in proc.stderr


def test_switch_off_in_a_subprocess_gives_pure() -> None:
    proc = _run("import fastgate; print(fastgate.COMPILED)", FASTGATE_NO_EXTENSIONS="1")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


def test_public_names_are_exported_as_a_tuple() -> None:
    assert isinstance(fastgate.__all__, tuple)
    for name in fastgate.__all__:
        assert hasattr(fastgate, name), name
    for name in ("SchedulerClosed", "ResourceExhausted", "GateClosed", "ToolKind"):
        assert name in fastgate.__all__
