"""Which core loaded must be exactly what the environment asked for: no silent fallback."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from fnmatch import fnmatch
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

import fastgate
import fastgate.pipeline
from fastgate import _core


def test_required_extensions_are_really_compiled() -> None:
    if os.environ.get("FASTGATE_REQUIRE_EXTENSIONS") != "1":
        pytest.skip("checked in the run that requires extensions")
    assert fastgate.COMPILED is True
    assert set(fastgate.IMPLEMENTATION.values()) == {"compiled"}
    for module in (_core.gate, _core.sched, _core.locks, _core.wait, _core.validate):
        assert module.__name__.endswith("_c"), module
        assert not str(module.__file__).endswith(".py"), module.__file__
    for name in _core.PIPELINE_MODULES:
        loaded = importlib.import_module(f"fastgate.{name}")
        assert str(loaded.__file__).endswith(tuple(EXTENSION_SUFFIXES)), loaded.__file__


def test_no_extensions_forces_pure() -> None:
    if os.environ.get("FASTGATE_NO_EXTENSIONS") != "1":
        pytest.skip("checked in the run that forbids extensions")
    assert fastgate.COMPILED is False
    assert set(fastgate.IMPLEMENTATION.values()) == {"pure"}
    assert _core.sched.__name__.endswith("_py")
    for name in _core.PIPELINE_MODULES:  # from source, even with a compiled build beside it
        loaded = importlib.import_module(f"fastgate.{name}")
        assert str(loaded.__file__).endswith(".py"), loaded.__file__


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


def test_the_pure_build_finder_touches_only_fastgate_modules() -> None:
    finder = _core._SourceFirst()
    assert finder.find_spec("otherpkg.executor", None) is None
    assert finder.find_spec("executor", None) is None
    spec = finder.find_spec("fastgate.pipeline.executor", list(fastgate.pipeline.__path__))
    assert spec is not None and str(spec.origin).endswith("executor.py")


def test_the_sdist_manifest_carries_every_cython_source() -> None:
    """The compiled build needs each core module's .pxd and the openat2 .pyx; setuptools puts
    only Python packages in an sdist unless MANIFEST.in names the rest."""
    root = Path(__file__).resolve().parent.parent
    if not (root / "MANIFEST.in").exists():
        pytest.skip("not run from a source checkout")
    patterns = [
        line.split(None, 1)[1].strip()
        for line in (root / "MANIFEST.in").read_text().splitlines()
        if line.startswith("include ")
    ]
    sources = [
        p.relative_to(root) for p in (root / "src").rglob("*") if p.suffix in (".pxd", ".pyx")
    ]
    assert sources  # there are some to carry
    missing = [str(s) for s in sources if not any(fnmatch(str(s), p) for p in patterns)]
    assert missing == []
