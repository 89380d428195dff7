"""The "files" scenario: the built-in file tools through ``execute()`` against doing the same
work directly, in the same run.

- 32 editors (8 sessions x 4 files), each inserting its own marker, through ``read`` + ``edit``
  (re-reading when its read went stale) against a naive read-modify-write of the same files
  (read in a thread, replace, write in a thread: what a tool without locks or a stale check
  does): lost updates of both, and fastgate's calls per second.
- ``read`` of a 1 MiB file through ``execute()`` against the same read done directly (the bytes
  read in a worker thread, decoded, numbered by the same ``cat -n`` function): what the
  pipeline, the seam and the stale-file record cost on top of the read itself.
- ``grep`` (ripgrep) through ``execute()`` over a generated tree of 64 MB against a plain
  Python walk of the same tree with ``re`` (read each file, search it): files with matches.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import statistics
import tempfile
import time
from typing import Any

from fastgate import (
    ConcurrencyScheduler,
    ExecutionContext,
    FileLockManager,
    PermissionMode,
    SchedulerLimits,
    ToolExecutor,
    ToolRegistry,
)
from fastgate.cli.bench.model import BenchConfig, Measurement, Target
from fastgate.runtime import loop_factory

SESSIONS, FILES = 8, 4
READ_BYTES = 1 << 20
TREE_FILES, TREE_FILE_BYTES = 640, 100_000  # 64 MB
GREP_PATTERN = r"(?:deadline|timeout)_exceeded\(\w+\)"
# CI's bounds, with a margin for this machine's noise (see docs/performance.md).
CI_READ = 2.0
CI_GREP = 3.0


def run_files(config: BenchConfig, loop: str) -> list[Measurement]:
    try:
        from fastgate.builtin import find_ripgrep, register_builtins
    except ImportError:
        return []  # the 'builtin' extra is not installed: nothing to measure
    with tempfile.TemporaryDirectory(prefix="fastgate-bench-files-") as workspace:
        registry = ToolRegistry()
        register_builtins(registry)
        limits = SchedulerLimits(global_limit=64, session_limit=16, max_queue=4096)
        executor = ToolExecutor(
            registry,
            mode=PermissionMode.ACCEPT_EDITS,
            scheduler=ConcurrencyScheduler(limits),
            locks=FileLockManager(),
            context_defaults={"workspace_root": workspace},
        )
        with asyncio.Runner(loop_factory=loop_factory(loop)) as runner:
            out = runner.run(_editors(config, executor, workspace))
            out += runner.run(_read(config, executor, workspace))
            if find_ripgrep() is not None:
                out += runner.run(_grep(config, executor, workspace))
        executor.dispose()
        return out


# -- (a) 32 editors ---------------------------------------------------------------------------


def _reset(workspace: str, round_: int) -> list[str]:
    paths = []
    for f in range(FILES):
        path = os.path.join(workspace, "edit", f"r{round_}_f{f}.txt")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as fh:
            fh.write("".join(f"slot-{s}\n" for s in range(SESSIONS)))
        paths.append(path)
    return paths


def _lost(paths: list[str]) -> int:
    lost = 0
    for f, path in enumerate(paths):
        with open(path) as fh:
            content = fh.read()
        lost += sum(f"marker-{s}-{f}\n" not in content for s in range(SESSIONS))
    return lost


async def _fastgate_editors(executor: ToolExecutor, paths: list[str]) -> tuple[int, int]:
    """(calls made, edits that gave up)."""
    calls = 0
    gave_up = 0

    async def editor(session: int, f: int) -> None:
        nonlocal calls, gave_up
        ctx = ExecutionContext(session_id=f"editor-{session}")
        for _ in range(500):
            calls += 2
            await executor.execute("read", {"file_path": paths[f]}, ctx)
            result = await executor.execute(
                "edit",
                {
                    "file_path": paths[f],
                    "old_string": f"slot-{session}\n",
                    "new_string": f"slot-{session} marker-{session}-{f}\n",
                },
                ctx,
            )
            if result.ok:
                return
            if result.error is None or result.error.details.get("code") != "stale_file":
                raise RuntimeError(f"benchmark edit failed: {result.error}")
        gave_up += 1

    await asyncio.gather(*(editor(s, f) for s in range(SESSIONS) for f in range(FILES)))
    return calls, gave_up


async def _naive_editors(paths: list[str]) -> None:
    loop = asyncio.get_running_loop()

    def read(path: str) -> str:
        with open(path) as fh:
            return fh.read()

    def write(path: str, text: str) -> None:
        with open(path, "w") as fh:
            fh.write(text)

    async def editor(session: int, f: int) -> None:
        text = await loop.run_in_executor(None, read, paths[f])
        text = text.replace(f"slot-{session}\n", f"slot-{session} marker-{session}-{f}\n")
        await loop.run_in_executor(None, write, paths[f], text)

    await asyncio.gather(*(editor(s, f) for s in range(SESSIONS) for f in range(FILES)))


async def _editors(config: BenchConfig, executor: ToolExecutor, ws: str) -> list[Measurement]:
    rounds = max(3, config.rounds)
    ours_lost, naive_lost, rates, ratios = [], [], [], []
    for round_ in range(rounds):
        paths = _reset(ws, 2 * round_)
        start = time.perf_counter()
        calls, gave_up = await _fastgate_editors(executor, paths)
        ours = time.perf_counter() - start
        ours_lost.append(_lost(paths) + gave_up)
        rates.append(calls / ours)
        naive_paths = _reset(ws, 2 * round_ + 1)
        start = time.perf_counter()
        await _naive_editors(naive_paths)
        naive = time.perf_counter() - start
        naive_lost.append(_lost(naive_paths))
        ratios.append(ours / naive)
    edits = SESSIONS * FILES
    return [
        Measurement(
            "files",
            f"{edits} editors on {FILES} files: lost updates, execute()",
            float(max(ours_lost)),
            unit="lost",
            target=Target("<=", 0, ci_bound=0),
            detail=f"worst of {rounds} rounds; {statistics.median(rates):,.0f} calls/s "
            "(read + edit, re-read when stale)",
        ),
        Measurement(
            "files",
            f"{edits} editors on {FILES} files: lost updates, naive read-modify-write",
            float(statistics.median(naive_lost)),
            unit="lost",
            detail=f"median of {rounds} rounds (of {edits} edits); range "
            f"{min(naive_lost)}-{max(naive_lost)}",
        ),
        Measurement(
            "files",
            f"{edits} editors: execute() time / naive time",
            statistics.median(ratios),
            reference="naive read-modify-write (loses updates)",
            detail="fastgate reads, locks, checks staleness and re-reads; the naive one does not",
        ),
    ]


# -- (b) read of 1 MiB -----------------------------------------------------------------------


def _write_text_file(path: str, size: int) -> None:
    rng = random.Random(7)
    words = ["alpha", "beta", "gamma", "delta", "return", "value", "self", "def", "import"]
    lines: list[str] = []
    total = 0
    while total < size:
        line = " ".join(rng.choice(words) for _ in range(rng.randint(4, 14)))
        lines.append(line)
        total += len(line) + 1
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")


async def _read(config: BenchConfig, executor: ToolExecutor, ws: str) -> list[Measurement]:
    from fastgate.builtin._files import number_lines

    path = os.path.join(ws, "big.txt")
    _write_text_file(path, READ_BYTES)
    ctx = ExecutionContext(session_id="reader")
    args = {"file_path": path}
    loop = asyncio.get_running_loop()

    def raw_read() -> bytes:
        with open(path, "rb") as fh:
            return fh.read()

    async def direct_read() -> Any:
        # As an async server reads without blocking its loop: the bytes in a worker thread
        # (which also puts both sides' big allocations on the same thread's heap).
        data = await loop.run_in_executor(None, raw_read)
        return number_lines(data.decode("utf-8"), 1, 2000, "big.txt")

    async def ours() -> None:
        result = await executor.execute("read", args, ctx)
        if not result.ok:
            raise RuntimeError(f"benchmark read failed: {result.error}")

    expected = await direct_read()
    check = await executor.execute("read", args, ctx)
    if check.content != expected:
        raise RuntimeError("the read benchmark's two sides do not produce the same text")
    n = max(50, config.ops // 200)
    ratios, raw_ratios, ours_us, direct_us = [], [], [], []
    for _ in range(config.rounds):
        t0 = time.perf_counter()
        for _ in range(n):
            await ours()
        t1 = time.perf_counter()
        for _ in range(n):
            await direct_read()
        t2 = time.perf_counter()
        for _ in range(n):
            raw_read()
        t3 = time.perf_counter()
        ratios.append((t1 - t0) / (t2 - t1))
        raw_ratios.append((t1 - t0) / (t3 - t2))
        ours_us.append((t1 - t0) / n * 1e6)
        direct_us.append((t2 - t1) / n * 1e6)
    return [
        Measurement(
            "files",
            "read 1 MiB: execute() / the same read done directly",
            statistics.median(ratios),
            reference="read in a worker thread, decode and the same cat -n numbering",
            target=Target("<=", 1.5, ci_bound=CI_READ),
            detail=f"{statistics.median(ours_us):,.0f} us vs {statistics.median(direct_us):,.0f}"
            " us per read",
        ),
        Measurement(
            "files",
            "read 1 MiB: execute() / the bytes alone",
            statistics.median(raw_ratios),
            reference="open + read, nothing else",
            detail="for scale: decoding and numbering are most of a read",
        ),
    ]


# -- (c) grep over 64 MB ---------------------------------------------------------------------


def _make_tree(root: str) -> int:
    """Python-looking files; every 40th has one line the pattern matches. Returns the count."""
    rng = random.Random(11)
    names = ["request", "session", "handler", "worker", "queue", "result", "client", "server"]
    matching = 0
    for i in range(TREE_FILES):
        directory = os.path.join(root, f"pkg{i % 16}", f"mod{i % 5}")
        os.makedirs(directory, exist_ok=True)
        lines: list[str] = []
        size = 0
        while size < TREE_FILE_BYTES:
            a, b = rng.choice(names), rng.choice(names)
            line = rng.choice(
                (
                    f"def {a}_{b}(self, {b}):",
                    f"    return self.{a}.get({b!r}, None)",
                    f"    if {a} is None: raise TimeoutError('{b} timeout')",
                    f"# {a} {b} deadline handling and the {b} queue",
                    f"    {a}_{b} = await self.{b}.deadline_check({a})",
                )
            )
            lines.append(line)
            size += len(line) + 1
        if i % 40 == 0:
            lines.insert(len(lines) // 2, "    raise deadline_exceeded(request)")
            matching += 1
        with open(os.path.join(directory, f"file{i}.py"), "w") as fh:
            fh.write("\n".join(lines) + "\n")
    return matching


def _python_walk(root: str, regex: re.Pattern[str]) -> list[str]:
    found = []
    for directory, _, files in os.walk(root):
        for name in files:
            path = os.path.join(directory, name)
            with open(path, encoding="utf-8", errors="replace") as fh:
                if regex.search(fh.read()):
                    found.append(path)
    return found


async def _grep(config: BenchConfig, executor: ToolExecutor, ws: str) -> list[Measurement]:
    root = os.path.join(ws, "tree")
    matching = _make_tree(root)
    regex = re.compile(GREP_PATTERN)
    ctx = ExecutionContext(session_id="searcher")
    args = {"pattern": GREP_PATTERN, "path": root, "head_limit": 0}
    loop = asyncio.get_running_loop()
    check = await executor.execute("grep", args, ctx)
    if not check.ok or f"Found {matching} files" not in str(check.content):
        raise RuntimeError(f"the grep benchmark found the wrong files: {check.content!r:.200}")
    if len(_python_walk(root, regex)) != matching:
        raise RuntimeError("the Python walk found the wrong files")
    ratios, ours_ms, walk_ms = [], [], []
    for _ in range(max(3, config.rounds // 2)):
        t0 = time.perf_counter()
        await executor.execute("grep", args, ctx)
        t1 = time.perf_counter()
        await loop.run_in_executor(None, _python_walk, root, regex)
        t2 = time.perf_counter()
        ratios.append((t2 - t1) / (t1 - t0))
        ours_ms.append((t1 - t0) * 1e3)
        walk_ms.append((t2 - t1) * 1e3)
    megabytes = TREE_FILES * TREE_FILE_BYTES / 1e6
    return [
        Measurement(
            "files",
            f"grep {megabytes:.0f} MB: Python re walk time / execute() time",
            statistics.median(ratios),
            reference="os.walk + read + re.search per file, same files found",
            target=Target(">=", 5.0, ci_bound=CI_GREP),
            detail=f"{statistics.median(ours_ms):,.0f} ms vs {statistics.median(walk_ms):,.0f} ms;"
            f" pattern {GREP_PATTERN}",
        )
    ]
