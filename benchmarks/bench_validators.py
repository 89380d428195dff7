"""pytest-benchmark: per-call cost of fastgate's validator beside msgspec.convert (and
fastjsonschema when installed) on ``bench_schemas.json``. Compare runs on the same machine with
``--benchmark-compare``; ratios in one run come from ``fastgate bench`` (validators scenario).

Run: ``pytest benchmarks/bench_validators.py --benchmark-group-by=param:case``
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from fastgate.cli.bench.validators import STRUCTS, load_cases
from fastgate.schema import from_json_schema

CASES = load_cases() or {}
PARAMS = [(name, which) for name in CASES for which in ("valid", "invalid")]
pytestmark = pytest.mark.skipif(not CASES, reason="bench_schemas.json not found")

Benchmark = Callable[..., Any]


@pytest.mark.parametrize(("name", "which"), PARAMS)
def test_fastgate_validate(benchmark: Benchmark, name: str, which: str) -> None:
    validator = from_json_schema(CASES[name]["schema"])
    value = CASES[name][which]
    issues = benchmark(validator.validate, value)
    assert (issues == []) is (which == "valid")


@pytest.mark.parametrize(("name", "which"), PARAMS)
def test_msgspec_convert(benchmark: Benchmark, name: str, which: str) -> None:
    struct, value = STRUCTS[name], CASES[name][which]

    def convert() -> object:
        try:
            return msgspec.convert(value, struct)
        except msgspec.ValidationError as exc:
            return exc

    benchmark(convert)


@pytest.mark.parametrize(("name", "which"), PARAMS)
def test_fastjsonschema(benchmark: Benchmark, name: str, which: str) -> None:
    fastjsonschema = pytest.importorskip("fastjsonschema")
    check = fastjsonschema.compile(CASES[name]["schema"])
    value = CASES[name][which]

    def run() -> object:
        try:
            return check(value)
        except fastjsonschema.JsonSchemaException as exc:
            return exc

    benchmark(run)


def test_compile_bash_schema(benchmark: Benchmark) -> None:
    if "bash" not in CASES:
        pytest.skip("no bash case")
    benchmark(from_json_schema, CASES["bash"]["schema"])
