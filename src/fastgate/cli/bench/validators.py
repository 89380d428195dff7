"""Validator scenario: fastgate's compiled validator against other validators, in one run.

For every case of ``bench_schemas.json`` (bash, edit, deploy; a valid and an invalid input) the
per-call cost of ``Validator.validate`` is measured in alternating rounds beside
``msgspec.convert`` into equivalent Structs (the reference), ``fastjsonschema`` and
``jsonschema-rs`` when they are importable (benchmark-only dependencies, the ``bench`` extra).
Figures are ratios within this run; absolute nanoseconds are kept in ``detail``.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from fastgate.cli.bench.model import BenchConfig, Measurement, Target
from fastgate.cli.bench.timing import no_gc
from fastgate.schema import from_json_schema

SCENARIO = "validators"
CASES = ("bash", "edit", "deploy")
_MSGSPEC_TARGET = Target("<=", 1.0, ci_bound=1.3)
_FASTJSONSCHEMA_TARGET = Target(">=", 3.0, ci_bound=2.5)
# The Rust validator on valid instances (1.2-1.4x on a quiet machine): CI, where the bench
# extra installed it, allows for a busy one.
_RUST_TARGET = Target(">=", 1.0, ci_bound=0.7)
_COMPILE_TARGET = Target("<=", 100.0, ci_bound=150.0)


# -- msgspec Structs equivalent to the three schemas ------------------------------------------


class Bash(msgspec.Struct, forbid_unknown_fields=True):
    command: str
    timeout_ms: int | msgspec.UnsetType = msgspec.UNSET
    workdir: str | msgspec.UnsetType = msgspec.UNSET
    env: dict[str, str] | msgspec.UnsetType = msgspec.UNSET


class Edit1(msgspec.Struct, forbid_unknown_fields=True):
    old_string: str
    new_string: str
    replace_all: bool | msgspec.UnsetType = msgspec.UNSET


class Edit(msgspec.Struct, forbid_unknown_fields=True):
    file_path: str
    edits: Annotated[list[Edit1], msgspec.Meta(min_length=1)]


class Zone(msgspec.Struct, tag_field="kind", tag="zone", forbid_unknown_fields=True):
    zone: Annotated[str, msgspec.Meta(min_length=1)]


class Label(msgspec.Struct, tag_field="kind", tag="label", forbid_unknown_fields=True):
    key: Annotated[str, msgspec.Meta(pattern="^[a-z][a-z0-9_.-]*$")]
    value: str


class Capacity(msgspec.Struct, tag_field="kind", tag="capacity", forbid_unknown_fields=True):
    min_cpu: Annotated[float, msgspec.Meta(ge=0)]
    min_mem_gb: Annotated[int, msgspec.Meta(ge=1)]


class Placement(msgspec.Struct, forbid_unknown_fields=True):
    pool: str
    constraints: Annotated[list[Zone | Label | Capacity], msgspec.Meta(max_length=16)]


class DeployTarget(msgspec.Struct, forbid_unknown_fields=True):
    cluster: str
    region: Literal["us-east-1", "us-west-2", "eu-west-1", "ap-south-1"]
    placement: Placement


class Spec(msgspec.Struct, forbid_unknown_fields=True):
    strategy: Literal["rolling", "blue_green", "canary"]
    target: DeployTarget
    replicas: Annotated[int, msgspec.Meta(ge=1, le=100)] | msgspec.UnsetType = msgspec.UNSET


class Deploy(msgspec.Struct, forbid_unknown_fields=True):
    service: Annotated[str, msgspec.Meta(max_length=64)]
    spec: Spec
    dry_run: bool | msgspec.UnsetType = msgspec.UNSET


STRUCTS: dict[str, type[msgspec.Struct]] = {"bash": Bash, "edit": Edit, "deploy": Deploy}


# -- locating the data and the competitors ------------------------------------------------------


def locate_bench_schemas() -> Path | None:
    """``$FASTGATE_BENCH_SCHEMAS``, else ``../shared/data/bench_schemas.json`` beside the repo."""
    env = os.environ.get("FASTGATE_BENCH_SCHEMAS")
    if env:
        return Path(env) if Path(env).is_file() else None
    here = Path(__file__).resolve()
    # The checkout's root is the first directory above this file that holds pyproject.toml.
    repo = next((d for d in here.parents if (d / "pyproject.toml").is_file()), None)
    if repo is None:
        return None
    candidate = repo.parent / "shared" / "data" / "bench_schemas.json"
    return candidate if candidate.is_file() else None


def load_cases() -> dict[str, dict[str, Any]] | None:
    path = locate_bench_schemas()
    if path is None:
        return None
    data = json.loads(path.read_text())
    return {name: data[name] for name in CASES if name in data}


Call = Callable[[Any], object]


def _msgspec_call(struct: type[msgspec.Struct]) -> Call:
    def call(value: Any) -> object:
        try:
            return msgspec.convert(value, struct)
        except msgspec.ValidationError as exc:
            return exc

    return call


def _competitors(schema: dict[str, Any]) -> dict[str, Call]:
    found: dict[str, Call] = {}
    try:
        import fastjsonschema
    except ImportError:
        pass
    else:
        check = fastjsonschema.compile(schema)

        def fjs(value: Any) -> object:
            try:
                return check(value)
            except fastjsonschema.JsonSchemaException as exc:
                return exc

        found["fastjsonschema"] = fjs
    try:
        import jsonschema_rs
    except ImportError:
        pass
    else:
        rs_validator = jsonschema_rs.validator_for(schema)

        def rs(value: Any) -> object:
            return list(rs_validator.iter_errors(value))  # every error, like validate()

        found["jsonschema-rs"] = rs
    return found


def _is_valid_rows(
    name: str, schema: Any, ours: Call, valid: Any, config: BenchConfig, core: str, loop: str
) -> list[Measurement]:
    """``is_valid`` of a valid instance against jsonschema-rs's own ``is_valid`` (where it is
    installed): the yes/no question a caller asks most, without building any error."""
    try:
        import jsonschema_rs
    except ImportError:
        return []
    ratio, ours_ns, ref_ns = _paired(
        ours, jsonschema_rs.validator_for(schema).is_valid, valid, config
    )
    return [
        Measurement(
            scenario=SCENARIO,
            metric=f"{name}/valid is_valid speedup vs jsonschema-rs is_valid",
            value=round(1.0 / ratio, 3),
            reference="jsonschema-rs",
            target=_RUST_TARGET if core == "compiled" else None,
            detail=f"fastgate {ours_ns:.0f} ns, jsonschema-rs {ref_ns:.0f} ns per call",
            core=core,
            loop=loop,
        )
    ]


# -- timing -------------------------------------------------------------------------------------


def _per_call_ns(call: Call, value: Any, ops: int) -> float:
    t0 = time.perf_counter()
    for _ in range(ops):
        call(value)
    return (time.perf_counter() - t0) / ops * 1e9


def _paired(ours: Call, other: Call, value: Any, config: BenchConfig) -> tuple[float, float, float]:
    """Median of per-round ratios ours/other (alternating rounds), and the two medians in ns."""
    ops = max(config.ops // 10, 100)  # one validation is ~1 us: a tenth of ``ops`` is plenty
    _per_call_ns(ours, value, ops // 10)
    _per_call_ns(other, value, ops // 10)
    ratios, ours_ns, other_ns = [], [], []
    with no_gc():
        for _ in range(max(config.rounds, 3)):
            a = _per_call_ns(ours, value, ops)
            b = _per_call_ns(other, value, ops)
            ratios.append(a / b)
            ours_ns.append(a)
            other_ns.append(b)
    return statistics.median(ratios), statistics.median(ours_ns), statistics.median(other_ns)


def _compile_us(schema: dict[str, Any], repeat: int) -> float:
    samples = []
    for _ in range(max(repeat, 5)):
        t0 = time.perf_counter()
        from_json_schema(schema)
        samples.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(samples)


def _core() -> str:
    from fastgate import IMPLEMENTATION

    return IMPLEMENTATION["_validate"]


def run_validators(config: BenchConfig, loop: str) -> list[Measurement]:
    """The validator scenario; ``loop`` is unused (validation is synchronous)."""
    cases = load_cases()
    if not cases:
        missing = "skipped: no bench schemas (set FASTGATE_BENCH_SCHEMAS to bench_schemas.json)"
        return [Measurement("validators", missing, 0.0, unit="")]
    core = _core()
    compiled = core == "compiled"
    out: list[Measurement] = []
    for name, case in cases.items():
        schema = case["schema"]
        validator = from_json_schema(schema)
        ours: Call = validator.validate
        references: dict[str, Call] = {"msgspec.convert": _msgspec_call(STRUCTS[name])}
        references.update(_competitors(schema))
        for which in ("valid", "invalid"):
            value = case[which]
            for ref_name, ref_call in references.items():
                ratio, ours_ns, ref_ns = _paired(ours, ref_call, value, config)
                if ref_name == "msgspec.convert":
                    metric, shown = f"{name}/{which} vs msgspec.convert", ratio
                    target = _MSGSPEC_TARGET if compiled else None
                else:
                    metric, shown = f"{name}/{which} speedup vs {ref_name}", 1.0 / ratio
                    target = _FASTJSONSCHEMA_TARGET if ref_name == "fastjsonschema" else None
                    target = target if compiled else None
                out.append(
                    Measurement(
                        scenario=SCENARIO,
                        metric=metric,
                        value=round(shown, 3),
                        reference=ref_name,
                        target=target,
                        detail=f"fastgate {ours_ns:.0f} ns, {ref_name} {ref_ns:.0f} ns per call",
                        core=core,
                        loop=loop,
                    )
                )
        out += _is_valid_rows(name, schema, validator.is_valid, case["valid"], config, core, loop)
    bash = cases.get("bash")
    if bash is not None:
        us = _compile_us(bash["schema"], config.rounds * 20)
        out.append(
            Measurement(
                scenario=SCENARIO,
                metric="compile bash schema",
                value=round(us, 1),
                unit="us",
                target=_COMPILE_TARGET,
                detail="median of from_json_schema(bash schema)",
                core=core,
                loop=loop,
            )
        )
    return out
