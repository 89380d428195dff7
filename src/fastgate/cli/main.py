"""The ``fastgate`` command: ``info`` (build, loop, sandbox), ``bench`` (ratios against references
measured in the same run), ``call`` (one tool call through the whole pipeline) and ``serve``
(the MCP gateway)."""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

if TYPE_CHECKING:
    from fastgate.cli.bench.runner import Unit


def _loops() -> list[str]:
    return ["uvloop", "asyncio"] if importlib.util.find_spec("uvloop") else ["asyncio"]


def cmd_info(_: argparse.Namespace) -> int:
    import fastgate
    from fastgate.runtime import loop_factory

    loop = loop_factory("auto")()
    try:
        loop_name = "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"
    finally:
        loop.close()
    print(f"fastgate {fastgate.__version__}")
    print(f"build: {'compiled' if fastgate.COMPILED else 'pure'}")
    for module, impl in sorted(fastgate.IMPLEMENTATION.items()):
        print(f"  {module.lstrip('_')}: {impl}")
    print(f"loop: {loop_name}")
    print(f"python: {platform.python_implementation()} {platform.python_version()}")
    _print_sandbox()
    return 0


def _print_sandbox() -> None:
    from fastgate.processes import supervision
    from fastgate.sandbox import sandbox_support

    support = sandbox_support()
    print(f"processes: {supervision()}")
    network = "yes" if support.network else "no"
    if support.available:
        print(f"sandbox: {support.mechanism} (network policies: {network})")
    else:
        print("sandbox: unavailable (commands run unconfined)")
    if support.reason:
        print(f"  {support.reason}")


def cmd_bench(args: argparse.Namespace) -> int:
    from fastgate.cli.bench import runner

    if args.unit:
        out = runner.run_unit_here(args.unit, runner.PROFILES[args.profile])
        sys.stdout.buffer.write(msgspec.json.encode(out))
        return 0

    from fastgate.cli.bench.report import run_and_report

    profile = "full" if args.full else "smoke" if args.smoke else args.profile
    return run_and_report(
        profile=profile,
        cores=args.core or ["compiled", "pure"],
        loops=args.loop or _loops(),
        scenarios=args.scenario or list(runner.SCENARIOS),
        json_path=None if args.json is None else Path(args.json),
        check=args.check,
        markdown_path=Path(args.markdown) if args.markdown else None,
    )


def _unit(text: str) -> Unit:
    """``--unit CORE:LOOP:SCENARIO`` (what ``fastgate bench`` hands each child interpreter),
    checked here so that a bad one is a usage error, not a traceback."""
    from fastgate.cli.bench import runner

    parts = text.split(":")
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"expected CORE:LOOP:SCENARIO, got {text!r}")
    core, loop, scenario = parts
    for what, value, valid in (
        ("core", core, ("compiled", "pure")),
        ("loop", loop, ("uvloop", "asyncio")),
        ("scenario", scenario, tuple(runner.SCENARIOS)),
    ):
        if value not in valid:
            raise argparse.ArgumentTypeError(
                f"unknown {what} {value!r} (choose from {', '.join(valid)})"
            )
    return runner.Unit(core, loop, scenario)


def build_parser() -> argparse.ArgumentParser:
    from fastgate.cli.bench import runner

    parser = argparse.ArgumentParser(prog="fastgate", description=__doc__)
    parser.add_argument("--version", action="store_true", help="print version and core, then exit")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("info", help="version, compiled or pure core, event loop, command sandbox")
    bench = sub.add_parser("bench", help="run the load scenarios (ratios against references)")
    bench.add_argument("--full", action="store_true", help="more rounds (several minutes)")
    bench.add_argument("--smoke", action="store_true", help="fewest rounds (the CI smoke run)")
    bench.add_argument(
        "--profile", default="quick", choices=["smoke", "quick", "full"], help=argparse.SUPPRESS
    )
    bench.add_argument(
        "--json",
        nargs="?",
        const="-",
        metavar="FILE",
        help="also write every measurement as JSON to FILE; without FILE, JSON alone on stdout "
        "(the table then goes to stderr)",
    )
    bench.add_argument("--markdown", metavar="FILE", help="also write the table as markdown")
    bench.add_argument(
        "--check",
        action="store_true",
        help="exit 1 if a figure misses its CI bound (targets with a noise margin)",
    )
    bench.add_argument("--core", action="append", choices=["compiled", "pure"])
    bench.add_argument("--loop", action="append", choices=["uvloop", "asyncio"])
    bench.add_argument(
        "--scenario",
        action="append",
        metavar="NAME",
        # choices: a name that is not a scenario is a usage error, on stderr, naming them all
        choices=list(runner.SCENARIOS),
        help=", ".join(runner.SCENARIOS),
    )
    bench.add_argument("--unit", type=_unit, help=argparse.SUPPRESS)
    from fastgate.cli.call import add_arguments

    call = sub.add_parser(
        "call",
        help="run one call through the pipeline with the built-in tools, and explain the decision",
        description="Run one tool call through the whole pipeline (validation, rules, mode, "
        "sensitive paths, approval, admission) with the built-in tools on a workspace, and "
        "print how each stage decided, the result and its timings. Exit status: 0 ran ok "
        "(--dry-run: would run), 1 ran and failed, 2 bad usage or configuration, 3 refused "
        "before running, 4 would ask (--dry-run).",
    )
    add_arguments(call)
    from fastgate.cli.serve import add_arguments as add_serve_arguments

    serve = sub.add_parser(
        "serve",
        help="serve the tools over MCP (streamable HTTP or stdio): the gateway",
        description="Serve the built-in tools, the upstream MCP servers and code mode to MCP "
        "clients, every call validated, judged by policy, admitted fairly, journaled and "
        "audited. Exit status: 0 after a clean shutdown, 2 bad usage or configuration.",
    )
    add_serve_arguments(serve)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _dispatch(argv)
    except BrokenPipeError:
        # The reader went away (``fastgate call ... | head``): stop quietly, as other CLIs do;
        # stdout is pointed at /dev/null so that flushing it at exit raises nothing more.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


def _dispatch(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    if args.version:
        return cmd_info(args)
    if args.command == "bench":
        return cmd_bench(args)
    if args.command == "info":
        return cmd_info(args)
    if args.command == "call":
        from fastgate.cli.call import run_call

        return run_call(args)
    if args.command == "serve":
        from fastgate.cli.serve import run_serve

        return run_serve(args)
    build_parser().print_help(sys.stderr)  # no command is a usage error: stdout stays clean
    return 2
