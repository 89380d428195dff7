"""AutoVerify (SPEC §13): after a trusted local edit in YOLO mode, the workspace's declared
check runs through the call's shell and its lines about the edited files come back."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from fastgate import (
    AutoVerify,
    ExecutionContext,
    PermissionMode,
    RunContext,
    ToolKind,
    ToolResult,
    define_tool,
    schema,
)
from fastgate.builtin import ShellResult
from fastgate.cancel import CancelToken
from tests.builtin_kit import MemoryFileSystem, builtin_executor, gone, real, text

CHECK = """\
echo "src/a.py:1: error: Name 'x' is not defined"
echo "src/data.py:3: error: not about a.py"
echo "./src/a.py:2: note: the same file, spelled ./"
echo "Found 2 errors in 2 files"
exit 1
"""


def declare(workspace: Path, verify: str, script: str | None = None) -> None:
    (workspace / "pyproject.toml").write_text(f"[tool.fastgate]\nverify = {verify}\n")
    if script is not None:
        (workspace / "check.sh").write_text(script)


def verifying(workspace: Path, av: AutoVerify, **options: Any) -> Any:
    options.setdefault("mode", PermissionMode.YOLO)
    return builtin_executor(workspace, auto_verify=av, **options)


async def write_a(ex: Any, trusted: bool = True, **ctx: Any) -> ToolResult:
    args = {"file_path": "src/a.py", "content": "print(x)\n"}
    result: ToolResult = await ex.execute(
        "write", args, ExecutionContext(session_id="s1", trusted=trusted, **ctx)
    )
    return result


def verify_section(result: ToolResult) -> str | None:
    content = text(result)
    marker = "\n\nAutoVerify:\n"
    return content.split(marker, 1)[1] if marker in content else None


class ScriptedShell:
    """A server's shell seam: records commands; each run may wait for ``release``."""

    def __init__(self, output: str = "", exit_code: int = 0) -> None:
        self.commands: list[tuple[str, str, float | None]] = []
        self.output, self.exit_code = output, exit_code
        self.release: asyncio.Event | None = None
        self.started = asyncio.Event()
        self.running = self.most_at_once = 0

    async def run(
        self,
        command: str,
        *,
        cwd: str,
        env: Any = None,
        timeout: float | None = None,  # noqa: ASYNC109 -- the seam's signature
        max_output: int = 30_000,
        signal: CancelToken | None = None,
    ) -> ShellResult:
        self.commands.append((command, cwd, timeout))
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        self.started.set()
        try:
            if self.release is not None:
                await self.release.wait()
        finally:
            self.running -= 1
        return ShellResult(self.exit_code, self.output, False, False)


# -- what comes back ------------------------------------------------------------------------------


async def test_lines_naming_the_changed_file_are_appended(tmp_path: Path) -> None:
    declare(tmp_path, '["bash", "check.sh"]', CHECK)
    av = AutoVerify()
    result = await write_a(verifying(tmp_path, av))
    assert result.ok
    assert verify_section(result) == (
        "src/a.py:1: error: Name 'x' is not defined\n./src/a.py:2: note: the same file, spelled ./"
    )
    assert text(result).startswith("Created src/a.py")  # the tool's own content comes first
    assert av.runs == 1


@pytest.mark.parametrize(
    ("mode", "trusted", "fs"),
    [
        (PermissionMode.ACCEPT_EDITS, True, None),
        (PermissionMode.YOLO, False, None),
        (PermissionMode.YOLO, True, "memory"),
    ],
)
async def test_it_acts_only_for_yolo_trusted_and_the_local_file_system(
    tmp_path: Path, mode: PermissionMode, trusted: bool, fs: str | None
) -> None:
    declare(tmp_path, '["bash", "check.sh"]', CHECK)
    av = AutoVerify()
    ctx: dict[str, Any] = {}
    if fs == "memory":
        ctx["fs"] = MemoryFileSystem({str(tmp_path / "pyproject.toml"): b""})
    result = await write_a(verifying(tmp_path, av, mode=mode), trusted=trusted, **ctx)
    assert result.ok
    assert verify_section(result) is None
    assert av.runs == 0


async def test_nothing_declared_nothing_runs_and_no_toolchain_is_guessed(tmp_path: Path) -> None:
    (tmp_path / "mypy.ini").write_text("[mypy]\n")
    (tmp_path / "tsconfig.json").write_text("{}")
    (tmp_path / "package.json").write_text('{"scripts": {"test": "jest"}}')
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    shell = ScriptedShell()
    av = AutoVerify()
    result = await write_a(verifying(tmp_path, av), shell=shell)
    assert verify_section(result) is None
    assert shell.commands == [] and av.runs == 0


async def test_package_json_type_check_runs_through_npm_in_the_workspace(tmp_path: Path) -> None:
    (tmp_path / "package.json").write_text('{"scripts": {"type-check": "tsc --noEmit"}}')
    shell = ScriptedShell("src/a.py(1,1): error TS2304: Cannot find name 'x'.\n", exit_code=2)
    av = AutoVerify(timeout=42)
    result = await write_a(verifying(tmp_path, av), shell=shell)
    assert shell.commands == [("npm run type-check", real(tmp_path), 42.0)]
    assert verify_section(result) == "src/a.py(1,1): error TS2304: Cannot find name 'x'."


async def test_pyproject_wins_over_package_json(tmp_path: Path) -> None:
    declare(tmp_path, '["mypy", "--strict", "src dir"]')
    (tmp_path / "package.json").write_text('{"scripts": {"type-check": "tsc"}}')
    shell = ScriptedShell()
    await write_a(verifying(tmp_path, AutoVerify()), shell=shell)
    assert [c[0] for c in shell.commands] == ["mypy --strict 'src dir'"]


async def test_bash_and_autoverify_both_use_the_callers_shell(tmp_path: Path) -> None:
    declare(tmp_path, '["make", "check"]')
    shell = ScriptedShell("src/a.py:1: bad\n", exit_code=1)
    ex = verifying(tmp_path, AutoVerify())
    await ex.execute("bash", {"command": "ls"}, ExecutionContext(shell=shell))
    result = await write_a(ex, shell=shell)
    assert [c[0] for c in shell.commands] == ["ls", "make check"]
    assert verify_section(result) == "src/a.py:1: bad"


async def test_a_check_with_nothing_to_say_about_the_file_appends_nothing(tmp_path: Path) -> None:
    declare(tmp_path, '["bash", "check.sh"]', "echo 'src/data.py:1: error'; echo 'a.py ok'; exit 1")
    result = await write_a(verifying(tmp_path, AutoVerify()))
    assert result.ok and verify_section(result) is None


# -- a check that fails to be a check -------------------------------------------------------------


@pytest.mark.parametrize(
    ("verify", "script", "said"),
    [
        ('["no-such-checker-xyz"]', None, "could not run: bash: line 1: no-such-checker-xyz"),
        ('["./check.sh"]', "echo hi", "could not run: bash: line 1: ./check.sh: Permission denied"),
        ('["bash", "check.sh"]', "kill -SEGV $$", "crashed (exit code 139)"),
        ('"mypy src"', None, "verify in pyproject.toml must be a non-empty list of strings"),
        ("[]", None, "verify in pyproject.toml must be a non-empty list of strings"),
    ],
)
async def test_a_broken_check_never_fails_the_call_and_says_so(
    tmp_path: Path, verify: str, script: str | None, said: str
) -> None:
    declare(tmp_path, verify, script)
    result = await write_a(verifying(tmp_path, AutoVerify()))
    assert result.ok
    section = verify_section(result)
    assert section is not None and said in section, section
    assert (tmp_path / "src" / "a.py").read_text() == "print(x)\n"


async def test_a_hanging_check_is_stopped_and_the_call_succeeds(tmp_path: Path) -> None:
    script = (
        "sleep 300 & echo $! > check.pids; echo $$ >> check.pids; echo 'src/a.py:1: first'; wait"
    )
    declare(tmp_path, '["bash", "check.sh"]', script)
    result = await write_a(verifying(tmp_path, AutoVerify(timeout=1)))
    assert result.ok
    assert verify_section(result) == (
        "src/a.py:1: first\nthe check `bash check.sh` did not finish within 1s and was stopped"
    )
    pids = [int(p) for p in (tmp_path / "check.pids").read_text().split()]
    assert len(pids) == 2 and all(gone(pid) for pid in pids)


async def test_megabytes_of_check_output_are_capped(tmp_path: Path) -> None:
    script = "yes 'src/a.py:1: error: again' | head -c 5000000; exit 1"
    declare(tmp_path, '["bash", "check.sh"]', script)
    result = await write_a(verifying(tmp_path, AutoVerify(max_output_chars=500)))
    section = verify_section(result)
    assert section is not None
    lines = section.splitlines()
    assert lines[0] == "src/a.py:1: error: again"
    assert lines[-1].endswith("more lines not shown)")
    assert len(section) <= 500 + len(lines[-1]) + 1


async def test_a_seam_that_raises_is_reported_not_raised(tmp_path: Path) -> None:
    class Exploding(ScriptedShell):
        async def run(self, command: str, **_: Any) -> ShellResult:
            raise RuntimeError("sandbox is gone")

    declare(tmp_path, '["make"]')
    result = await write_a(verifying(tmp_path, AutoVerify()), shell=Exploding())
    assert result.ok
    assert verify_section(result) == "the check `make` could not run: sandbox is gone"


def test_bad_settings_are_refused_when_made() -> None:
    with pytest.raises(ValueError, match="timeout"):
        AutoVerify(timeout=0)
    with pytest.raises(ValueError, match="max_output_chars"):
        AutoVerify(max_output_chars=0)
    with pytest.raises(TypeError, match="AutoVerify"):
        from fastgate import ToolExecutor, ToolRegistry

        ToolExecutor(ToolRegistry(), auto_verify=object())  # type: ignore[arg-type]


# -- one check at a time per workspace ------------------------------------------------------------


def reporter(workspace: Path) -> Any:
    """A tool that reports src/a.py changed without touching it (shared, no lock), so calls
    run concurrently with one fingerprint."""

    async def report(args: Any, ctx: RunContext) -> str:
        ctx.files_changed([str(workspace / "src" / "a.py")])
        return "reported"

    return define_tool(
        "report",
        "",
        schema.Object({"n": schema.Integer()}),
        report,
        kind=ToolKind.WRITE,
        parallelism="shared",
        path_args=(),
    )


async def until(condition: Any) -> None:
    """Let the loop run until ``condition()`` holds (bounded)."""
    async with asyncio.timeout(30):
        for _ in iter(int, 1):
            if condition():
                return
            await asyncio.sleep(0.001)


async def test_concurrent_checks_with_one_fingerprint_share_one_run(tmp_path: Path) -> None:
    declare(tmp_path, '["check"]')
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_text("x = 1\n")
    shell = ScriptedShell("src/a.py:1: shared finding\n", exit_code=1)
    shell.release = asyncio.Event()
    av = AutoVerify()
    ex = verifying(tmp_path, av)
    ex.registry.register(reporter(tmp_path))
    ctx = ExecutionContext(trusted=True, shell=shell)
    calls = [asyncio.ensure_future(ex.execute("report", {"n": n}, ctx)) for n in range(5)]
    await until(lambda: av.shared == 4)
    shell.release.set()
    results = await asyncio.gather(*calls)
    assert av.runs == 1 and len(shell.commands) == 1
    assert [verify_section(r) for r in results] == ["src/a.py:1: shared finding"] * 5


async def test_a_different_fingerprint_waits_for_the_running_check(tmp_path: Path) -> None:
    declare(tmp_path, '["check"]')
    (tmp_path / "src").mkdir()
    target = tmp_path / "src" / "a.py"
    target.write_text("x = 1\n")
    shell = ScriptedShell("src/a.py:1: finding\n", exit_code=1)
    shell.release = asyncio.Event()
    av = AutoVerify()
    ex = verifying(tmp_path, av)
    ex.registry.register(reporter(tmp_path))
    ctx = ExecutionContext(trusted=True, shell=shell)
    first = asyncio.ensure_future(ex.execute("report", {"n": 1}, ctx))
    await shell.started.wait()
    target.write_text("x = 2\n")  # the same file, other contents: another fingerprint
    second = asyncio.ensure_future(ex.execute("report", {"n": 2}, ctx))
    await until(lambda: av.waiting == 1)
    assert len(shell.commands) == 1  # queued, not running beside the first
    shell.release.set()
    await asyncio.gather(first, second)
    assert av.runs == 2 and av.shared == 0
    assert shell.most_at_once == 1
