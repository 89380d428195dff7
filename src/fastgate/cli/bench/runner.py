"""``fastgate bench``: run every scenario on each core and loop, each in a fresh subprocess.

Each (core, loop, scenario) unit runs in its own interpreter (``python -m fastgate bench --unit``),
so the pure core is really pure (``FASTGATE_NO_EXTENSIONS=1``) and the parent's progress display
never shares a GIL with a measurement.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import msgspec

from fastgate.cli.bench.model import BenchConfig, Measurement

# name -> (module, function, loop-dependent)
SCENARIOS: dict[str, tuple[str, str, bool]] = {
    "uncontended": ("fastgate.cli.bench.admission", "run_uncontended", True),
    "contended": ("fastgate.cli.bench.admission", "run_contended", True),
    "fairness": ("fastgate.cli.bench.admission", "run_fairness", True),
    "multi-lock": ("fastgate.cli.bench.admission", "run_multilock", True),
    "validators": ("fastgate.cli.bench.validators", "run_validators", False),
    "pipeline": ("fastgate.cli.bench.pipeline", "run_pipeline", True),
    "durability": ("fastgate.cli.bench.durability", "run_durability", True),
    "files": ("fastgate.cli.bench.files", "run_files", True),
    "mcp": ("fastgate.cli.bench.mcp", "run_mcp", True),
    "telemetry": ("fastgate.cli.bench.telemetry", "run_telemetry", True),
    "code": ("fastgate.cli.bench.codemode", "run_code_scenario", True),
    "shell": ("fastgate.cli.bench.shell", "run_shell", True),
    "proxy": ("fastgate.cli.bench.proxy", "run_proxy", True),
    "cluster": ("fastgate.cli.bench.cluster", "run_cluster", False),
    "serve": ("fastgate.cli.bench.serve", "run_serve", False),
}

PROFILES = {
    "smoke": BenchConfig(rounds=5, ops=20_000, fairness_runs=1),
    "quick": BenchConfig(rounds=9, ops=50_000, fairness_runs=3),
    "full": BenchConfig(rounds=25, ops=100_000, fairness_runs=7),
}


@dataclass(frozen=True)
class Unit:
    core: str  # "compiled" | "pure"
    loop: str  # "uvloop" | "asyncio"
    scenario: str

    @property
    def label(self) -> str:
        return f"{self.scenario} · {self.core} · {self.loop}"


def scenario_function(name: str) -> Callable[[BenchConfig, str], list[Measurement]] | None:
    module_name, function, _ = SCENARIOS[name]
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return None  # a scenario whose module is not part of this build
    fn: Callable[[BenchConfig, str], list[Measurement]] = getattr(module, function)
    return fn


def plan(cores: Iterable[str], loops: Iterable[str], scenarios: Iterable[str]) -> list[Unit]:
    loops = list(loops)
    return [
        Unit(core, loop, name)
        for core in cores
        for name in scenarios
        for loop in (loops if SCENARIOS[name][2] else loops[:1])
    ]


def run_unit_here(unit: Unit, config: BenchConfig) -> list[Measurement]:
    """Run one unit in this process (the subprocess side of ``run_unit``)."""
    fn = scenario_function(unit.scenario)
    if fn is None:
        return []
    return [
        msgspec.structs.replace(m, core=unit.core, loop=unit.loop) for m in fn(config, unit.loop)
    ]


class UnitFailed(RuntimeError):
    pass


def run_unit(unit: Unit, profile: str) -> list[Measurement]:
    """Run one unit in a fresh interpreter with the environment its core needs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTGATE_")}
    env["FASTGATE_NO_EXTENSIONS" if unit.core == "pure" else "FASTGATE_REQUIRE_EXTENSIONS"] = "1"
    cmd = [
        sys.executable,
        "-m",
        "fastgate",
        "bench",
        "--unit",
        f"{unit.core}:{unit.loop}:{unit.scenario}",
        "--profile",
        profile,
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, timeout=600)
    if proc.returncode != 0:
        raise UnitFailed(f"{unit.label} failed:\n{proc.stderr.decode(errors='replace')[-2000:]}")
    return msgspec.json.decode(proc.stdout, type=list[Measurement])
