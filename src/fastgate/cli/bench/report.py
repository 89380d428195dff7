"""Run the benchmark units with a progress bar, print the table, write JSON, check targets."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import msgspec
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from fastgate.cli.bench import runner
from fastgate.cli.bench.model import Measurement


class Report(msgspec.Struct, frozen=True):
    profile: str
    fastgate_version: str
    measurements: list[Measurement]
    failures: list[str]
    seconds: float


def _verdict(m: Measurement) -> str:
    ok, ok_ci = m.passed(), m.passed(ci=True)
    if ok is None:
        return ""
    if ok:
        return "[green]yes[/green]"
    return "[yellow]CI ok[/yellow]" if ok_ci else "[red]no[/red]"


def _value(m: Measurement) -> str:
    unit = {"x": "x", "service": " svc", "": ""}.get(m.unit, f" {m.unit}")
    return f"{m.value:.3f}{unit}" if m.unit in ("", "x") else f"{m.value:.2f}{unit}"


def render(measurements: list[Measurement], console: Console) -> None:
    table = Table(title="fastgate bench: ratios against a reference measured in the same run")
    for column in ("scenario", "figure", "core", "loop", "value", "target", "met", "detail"):
        table.add_column(column, no_wrap=column not in ("detail", "figure"))
    ordered = sorted(measurements, key=lambda m: (m.scenario, m.metric, m.core, m.loop))
    for m in ordered:
        table.add_row(
            m.scenario,
            m.metric,
            m.core,
            m.loop,
            _value(m),
            str(m.target) if m.target else "",
            _verdict(m),
            m.detail,
        )
    console.print(table)


def markdown(measurements: list[Measurement]) -> str:
    """The table as GitHub markdown (for docs/performance.md)."""
    rows = [
        "| scenario | figure | core | loop | value | target | met | detail |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for m in sorted(measurements, key=lambda m: (m.scenario, m.metric, m.core, m.loop)):
        met = {True: "yes", False: "no", None: ""}[m.passed()]
        value = _value(m)
        rows.append(
            f"| {m.scenario} | {m.metric} | {m.core} | {m.loop} | {value} | "
            f"{m.target or ''} | {met} | {m.detail} |"
        )
    return "\n".join(rows) + "\n"


def run_and_report(
    *,
    profile: str,
    cores: list[str],
    loops: list[str],
    scenarios: list[str],
    json_path: Path | None,
    check: bool,
    markdown_path: Path | None = None,
) -> int:
    import fastgate

    to_stdout = json_path is not None and str(json_path) == "-"  # JSON alone on stdout
    console = Console(stderr=to_stdout)
    if not console.is_terminal:  # logs and CI: do not squeeze the table into 80 columns
        console = Console(width=160, stderr=to_stdout)
    unknown = [s for s in scenarios if s not in runner.SCENARIOS]
    if unknown:
        console.print(f"[red]unknown scenario(s): {', '.join(unknown)}[/red]")
        return 2
    if "compiled" in cores and not fastgate.COMPILED:
        console.print("[yellow]compiled core not built here: measuring the pure core only[/yellow]")
        cores = [c for c in cores if c != "compiled"]
    units = runner.plan(cores, loops, scenarios)
    measurements: list[Measurement] = []
    failures: list[str] = []
    start = time.perf_counter()
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task("starting", total=len(units))
        for unit in units:
            bar.update(task, description=unit.label)
            try:
                measurements.extend(runner.run_unit(unit, profile))
            except (runner.UnitFailed, OSError) as exc:
                failures.append(str(exc))
            bar.advance(task)
    seconds = time.perf_counter() - start
    render(measurements, console)
    console.print(
        f"profile {profile}: {len(units)} runs in {seconds:.0f} s "
        f"(each in a fresh interpreter; pure = FASTGATE_NO_EXTENSIONS=1)"
    )
    for failure in failures:
        console.print(f"[red]{failure}[/red]")
    if json_path is not None:
        report = Report(profile, fastgate.__version__, measurements, failures, seconds)
        encoded = msgspec.json.format(msgspec.json.encode(report))
        if to_stdout:
            sys.stdout.buffer.write(encoded + b"\n")
            sys.stdout.flush()
        else:
            json_path.parent.mkdir(parents=True, exist_ok=True)
            json_path.write_bytes(encoded)
    if markdown_path is not None:
        markdown_path.parent.mkdir(parents=True, exist_ok=True)
        markdown_path.write_text(markdown(measurements))
    missed = [m for m in measurements if m.passed(ci=True) is False]
    if check:
        for m in missed:
            console.print(
                f"[red]CI bound missed: {m.scenario} / {m.metric} ({m.core}, {m.loop}):"
                f" {m.value:.3f} vs {m.target.op if m.target else ''} "
                f"{m.target.ci_bound if m.target else ''}[/red]"
            )
        if missed or failures:
            return 1
    return 1 if failures else 0
