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
    PermissionConfig,
    PermissionMode,
    RunContext,
    ToolKind,
    ToolResult,
    define_tool,
    schema,
)
from fastgate.builtin import LocalShell, ShellResult
from fastgate.model.cancel import CancelToken
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
        roots: Any = None,
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
    # LocalShell: the pids the check records are the server's (a sandbox has its own).
    result = await write_a(verifying(tmp_path, AutoVerify(timeout=1)), shell=LocalShell())
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


# -- trust: the check declared before the first call, and only if the rules let it run ------------

PLANTED = [
    '["rm", "victim.txt"]',
    '["bash", "-c", "rm victim.txt"]',
    '["sh", "-c", "cd . && rm -f victim.txt"]',
    '["find", ".", "-name", "victim.txt", "-delete"]',
    '["python3", "-c", "import os; os.remove(\'victim.txt\')"]',
]


def attack_executor(workspace: Path, av: AutoVerify, **options: Any) -> Any:
    (workspace / "victim.txt").write_text("precious\n")
    options.setdefault("permissions", PermissionConfig(deny=("Bash(rm:*)",)))
    return verifying(workspace, av, **options)


async def write_in(ex: Any, session: str, path: str, content: str, **ctx: Any) -> ToolResult:
    result: ToolResult = await ex.execute(
        "write",
        {"file_path": path, "content": content},
        ExecutionContext(session_id=session, trusted=True, **ctx),
    )
    assert result.ok, result.content
    return result


@pytest.mark.parametrize("verify", PLANTED)
@pytest.mark.parametrize("second_step", ["same session", "other session", "other executor"])
async def test_a_check_a_call_declares_is_not_run(
    tmp_path: Path, verify: str, second_step: str
) -> None:
    av = AutoVerify()
    ex = attack_executor(tmp_path, av)
    planted = f"[tool.fastgate]\nverify = {verify}\n"
    results = [await write_in(ex, "s1", "pyproject.toml", planted)]
    if second_step == "other executor":  # a server with one executor per session
        ex = verifying(tmp_path, av, permissions=PermissionConfig(deny=("Bash(rm:*)",)))
    session = "s1" if second_step == "same session" else "s2"
    results.append(await write_in(ex, session, "src/a.py", "print(x)\n"))
    assert (tmp_path / "victim.txt").read_text() == "precious\n"
    assert av.runs == 0
    for result in results:
        section = verify_section(result)
        assert section is not None
        assert section.startswith("the check was not run: the check this workspace declares")
        assert "then: none; now: `" in section and "in pyproject.toml" in section


@pytest.mark.parametrize(
    ("path", "planted"),
    [
        ("package.json", '{"scripts": {"type-check": "rm victim.txt"}}'),
        ("package.json", '{"scripts": {"type-check": "tsc --noEmit; rm victim.txt"}}'),
        ("pyproject.toml", '[tool.fastgate]\nverify = ["rm", "victim.txt"]\n'),
    ],
)
async def test_a_type_check_script_rewritten_by_a_call_is_not_run(
    tmp_path: Path, path: str, planted: str
) -> None:
    (tmp_path / "package.json").write_text('{"scripts": {"type-check": "tsc --noEmit"}}')
    shell = ScriptedShell("src/a.py:1: error\n", exit_code=1)
    av = AutoVerify()
    ex = attack_executor(tmp_path, av, shell=shell)
    if (tmp_path / path).exists():
        read = await ex.execute("read", {"file_path": path}, ExecutionContext(session_id="s1"))
        assert read.ok
    await write_in(ex, "s1", path, planted)
    result = await write_in(ex, "s2", "src/a.py", "print(x)\n")
    assert shell.commands == [] and av.runs == 0
    section = verify_section(result)
    assert section is not None and "then: `npm run type-check`, script `tsc --noEmit`" in section


def write_only_executor(workspace: Path, av: AutoVerify, **options: Any) -> Any:
    """No bash tool at all: the check is still judged as a bash call would be."""
    from fastgate import ToolRegistry
    from fastgate.builtin import register_builtins

    ex = attack_executor(workspace, av, **options)
    ex.registry = ToolRegistry()
    register_builtins(ex.registry, include=("write",))
    return ex


@pytest.mark.parametrize(
    ("rules", "verify", "why"),
    [
        ({"deny": ("Bash(rm:*)",)}, '["rm", "victim.txt"]', "rule Bash(rm:*) denies"),
        ({"deny": ("Bash(rm:*)",)}, '["/bin/rm", "victim.txt"]', "rule Bash(rm:*) denies"),
        ({"deny": ("Bash(rm:*)",)}, '["env", "rm", "victim.txt"]', "rule Bash(rm:*) denies"),
        ({"deny": ("Bash(rm:*)",)}, '["bash", "-c", "rm victim.txt"]', "rule Bash(rm:*) denies"),
        ({"deny": ("Bash(rm:*)",)}, '["sh", "-c", "cd . && rm victim.txt"]', "denies"),
        ({"ask": ("Bash(rm:*)",)}, '["rm", "victim.txt"]', "rule Bash(rm:*) asks before it"),
        ({"ask": ("Bash(rm *)",)}, '["bash", "-c", "rm victim.txt"]', "asks before it"),
        ({}, '["bash", "-c", "cat .env > victim.txt"]', "touches sensitive file"),
    ],
)
@pytest.mark.parametrize("tools", ["built-ins", "write only"])
async def test_a_declared_check_the_rules_refuse_is_not_run(
    tmp_path: Path, rules: dict[str, Any], verify: str, why: str, tools: str
) -> None:
    declare(tmp_path, verify)  # declared before the first call: trusted, but not above the rules
    (tmp_path / ".env").write_text("SECRET=1\n")
    av = AutoVerify()
    make = attack_executor if tools == "built-ins" else write_only_executor
    ex = make(tmp_path, av, permissions=PermissionConfig(**rules))
    result = await write_in(ex, "s1", "src/a.py", "print(x)\n")
    assert (tmp_path / "victim.txt").read_text() == "precious\n"
    assert av.runs == 0
    section = verify_section(result)
    assert section is not None and section.startswith("the check `"), section
    assert "was not run: " in section and why in section, section


async def test_a_declared_check_the_rules_allow_runs_beside_deny_rules(tmp_path: Path) -> None:
    declare(tmp_path, '["echo", "src/a.py:1: checked"]')
    av = AutoVerify()
    ex = attack_executor(tmp_path, av)
    result = await write_in(ex, "s1", "src/a.py", "print(x)\n")
    assert verify_section(result) == "src/a.py:1: checked" and av.runs == 1


async def test_a_check_changed_between_sessions_is_refused_for_the_later_one(
    tmp_path: Path,
) -> None:
    """Read once per workspace, not per session: a session cannot plant a check for another,
    whatever it wrote the declaration with (here bash, which reports no changed file)."""
    declare(tmp_path, '["echo", "src/a.py:1: first"]')
    av = AutoVerify()
    ex = attack_executor(tmp_path, av)
    first = await write_in(ex, "s1", "src/a.py", "print(x)\n")
    assert verify_section(first) == "src/a.py:1: first"
    rewrite = (
        'printf \'[tool.fastgate]\\nverify = ["echo", "src/b.py:1: planted"]\\n\' > pyproject.toml'
    )
    ran = await ex.execute("bash", {"command": rewrite}, ExecutionContext(session_id="s1"))
    assert ran.ok, ran.content
    later = await write_in(ex, "s2", "src/b.py", "print(y)\n")
    section = verify_section(later)
    assert section is not None and section.startswith("the check was not run")
    assert "src/b.py:1: planted" not in section.splitlines()  # what the planted check says
    assert "then: `echo 'src/a.py:1: first'` in pyproject.toml; now: `echo" in section
    assert av.runs == 1


@pytest.mark.parametrize(
    "initial",
    [
        '[tool.fastgate]\nverify = ["echo", "src/a.py:1: x"]\n',
        "[tool.fastgate]\nverify = 'not a list'\n",
        "not toml at all [",
    ],
)
async def test_a_removed_or_repaired_declaration_is_not_run_either(
    tmp_path: Path, initial: str
) -> None:
    (tmp_path / "pyproject.toml").write_text(initial)
    shell = ScriptedShell()
    av = AutoVerify()
    ex = verifying(tmp_path, av, shell=shell)
    read = await ex.execute("read", {"file_path": "pyproject.toml"}, ExecutionContext())
    assert read.ok
    changed = '[tool.fastgate]\nverify = ["echo", "other"]\n'
    if "echo" in initial:
        changed = "[project]\nname = 'x'\n"  # the declaration removed
    await write_in(ex, "s1", "pyproject.toml", changed)
    result = await write_in(ex, "s1", "src/a.py", "print(x)\n")
    assert shell.commands == []
    section = verify_section(result)
    assert section is not None and "changed after its first call" in section


# -- the call lets go of its slot and locks before its check ---------------------------------------


class GatedShell:
    """The local shell, each run held until ``release`` is set."""

    def __init__(self) -> None:
        from fastgate.builtin import LocalShell

        self.local = LocalShell()
        self.release = asyncio.Event()
        self.started = asyncio.Event()

    async def run(self, command: str, **options: Any) -> ShellResult:
        self.started.set()
        await self.release.wait()
        result: ShellResult = await self.local.run(command, **options)
        return result


def unblocking(event: asyncio.Event) -> Any:
    """An exclusive tool that sets ``event``: it passes the executor's gate only after every
    call before it has let go of its passage."""

    async def unblock(args: Any, ctx: RunContext) -> str:
        event.set()
        return "unblocked"

    return define_tool("unblock", "", schema.Object({}), unblock, kind=ToolKind.READ_ONLY)


async def test_two_writes_of_one_file_in_flight_share_one_check_run(tmp_path: Path) -> None:
    script = 'echo $$ >> runs.log\necho "src/a.py:1: finding"\nexit 1\n'
    declare(tmp_path, '["bash", "check.sh"]', script)
    shell = GatedShell()
    av = AutoVerify()
    ex = verifying(tmp_path, av)
    # The check is held until `unblock` runs, which passes the gate only after the second write
    # has let go of it: so the second write reaches its check while the first one is running.
    ex.registry.register(unblocking(shell.release))
    ctx = ExecutionContext(session_id="s1", trusted=True, shell=shell)
    args = {"file_path": "src/a.py", "content": "print(x)\n"}
    async with asyncio.timeout(30):  # with locks kept through the check: a deadlock
        first, second, unblocked = await asyncio.gather(
            ex.execute("write", args, ctx),
            ex.execute("write", args, ctx),
            ex.execute("unblock", {}, ctx),
        )
    assert unblocked.ok and first.ok and second.ok
    assert text(first).startswith("Created") and text(second).startswith("Overwrote")
    runs = (tmp_path / "runs.log").read_text().split()
    assert len(runs) == 1 and gone(int(runs[0]))
    assert av.runs == 1 and av.shared == 1
    assert verify_section(first) == verify_section(second) == "src/a.py:1: finding"
    assert len(ex.locks) == 0


async def test_the_call_holds_no_slot_lock_or_gate_while_its_check_runs(tmp_path: Path) -> None:
    declare(tmp_path, '["check"]')
    shell = ScriptedShell("src/a.py:1: late\n", exit_code=1)
    shell.release = asyncio.Event()
    ex = verifying(tmp_path, AutoVerify())
    call = asyncio.ensure_future(write_a(ex, shell=shell))
    await shell.started.wait()
    assert len(ex.locks) == 0
    assert ex.scheduler.stats().in_flight == 0
    for gate in (g.statistics() for g in ex._gates.values()):
        assert not gate.exclusive_running and gate.shared_running == 0
    shell.release.set()
    assert verify_section(await call) == "src/a.py:1: late"
