"""``fastgate bench``'s command line: the scenarios a user picks from, and ``--json``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fastgate.cli.bench.runner import SCENARIOS
from fastgate.cli.main import build_parser


def test_the_scenario_help_lists_every_registered_scenario(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "--help"])
    shown = " ".join(capsys.readouterr().out.split())  # argparse wraps the help
    for name in SCENARIOS:
        assert name in shown.split("--scenario NAME", 1)[1], name


def test_the_validator_scenario_finds_the_schemas_beside_the_checkout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from fastgate.cli.bench.model import BenchConfig
    from fastgate.cli.bench.validators import locate_bench_schemas, run_validators

    beside = Path(__file__).resolve().parents[3] / "shared" / "data" / "bench_schemas.json"
    if not beside.is_file():
        pytest.skip("bench_schemas.json is not beside this checkout")
    monkeypatch.delenv("FASTGATE_BENCH_SCHEMAS", raising=False)
    assert locate_bench_schemas() == beside
    rows = run_validators(BenchConfig(rounds=1, ops=200, fairness_runs=1), "asyncio")
    measured = {row.metric.split("/")[0] for row in rows if "/" in row.metric}
    assert measured == {"bash", "edit", "deploy"}


def test_the_validator_scenario_says_when_it_has_no_schemas(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from fastgate.cli.bench.model import BenchConfig
    from fastgate.cli.bench.validators import run_validators

    monkeypatch.setenv("FASTGATE_BENCH_SCHEMAS", f"{tmp_path}/absent.json")
    (row,) = run_validators(BenchConfig(rounds=1, ops=200, fairness_runs=1), "asyncio")
    assert row.metric.startswith("skipped: no bench schemas")


@pytest.mark.parametrize(
    ("argv", "expected"), [(["--json"], "-"), (["--json", "out.json"], "out.json"), ([], None)]
)
def test_json_takes_an_optional_file(argv: list[str], expected: str | None) -> None:
    assert build_parser().parse_args(["bench", *argv]).json == expected


def test_json_without_a_file_is_alone_on_stdout(tmp_path: Path) -> None:
    """``fastgate bench --json`` for CI: stdout is one JSON document, the table is on stderr."""
    command = [sys.executable, "-m", "fastgate", "bench", "--smoke", "--json"]
    unit = ["--scenario", "uncontended", "--core", "pure", "--loop", "asyncio"]
    done = subprocess.run([*command, *unit], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert {m["metric"] for m in report["measurements"]} >= {"slot / Semaphore"}
    assert "slot / Semaphore" in done.stderr  # the table, where it does not spoil the JSON
