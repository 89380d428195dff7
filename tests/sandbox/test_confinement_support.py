"""Where the sandbox comes from and where it is missing (SPEC §22 *Mechanism*, *Default*): the
built-ins run confined by default; a host without the mechanism (simulated as code mode's tests
do) fails every call of a required sandbox with ``sandbox_unavailable`` naming what is missing,
and runs an optional one unconfined with a single warning; both launchers confine alike; a
setup that fails never runs the command unconfined; ``fastgate call --sandbox`` and ``fastgate
info``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import pytest

from fastgate import ErrorCode, PermissionMode
from fastgate.processes import Op, PlanFailed, Step, spawn
from fastgate.sandbox import (
    NetworkPolicy,
    SandboxedShell,
    SandboxPolicy,
    SandboxUnavailableWarning,
    _kernel,
    _support,
    sandbox_support,
)
from tests.builtin_kit import builtin_executor
from tests.processes_kit import (
    compiled_launcher_fixture,  # noqa: F401  (the fixture "compiled_launcher")
    launcher_fixture,  # noqa: F401  (the fixture "launcher")
)
from tests.sandbox.confinement_kit import (
    bash,
    no_process_outlives_the_test,  # noqa: F401  (autouse)
    outside_fixture,  # noqa: F401  (the fixture "outside")
    sandboxed,
)

FASTGATE = str(Path(sys.executable).with_name("fastgate"))


@pytest.fixture(autouse=True)
def probe_again() -> object:
    """Each test sees the host as it (or its monkeypatches) says, and warns afresh."""
    _support.forget_support()
    _support._warned.clear()
    yield
    _support.forget_support()


async def test_the_builtins_bash_is_confined_by_default(tmp_path: Path, outside: Path) -> None:
    ex = builtin_executor(tmp_path, mode=PermissionMode.YOLO)  # no shell given
    result = await ex.execute("bash", {"command": f"touch {outside}/x; touch inside"})
    assert (tmp_path / "inside").exists() and not (outside / "x").exists(), result.content


MISSING = {
    "seccomp": ("seccomp_arch", None, "seccomp"),
    "landlock and user namespaces": ("landlock_abi", 0, "Landlock is not available"),
}


def simulate(monkeypatch: pytest.MonkeyPatch, missing: str) -> str:
    name, value, says = MISSING[missing]
    monkeypatch.setattr(_kernel, name, lambda: value)
    monkeypatch.setattr(_support, "namespaces_missing", lambda: "simulated: no user namespaces")
    _support.forget_support()
    return says


@pytest.mark.parametrize("missing", list(MISSING))
async def test_a_required_sandbox_fails_every_call_where_it_is_missing(
    tmp_path: Path, outside: Path, monkeypatch: pytest.MonkeyPatch, missing: str
) -> None:
    says = simulate(monkeypatch, missing)
    assert not sandbox_support().available and says in sandbox_support().reason
    ex = sandboxed(tmp_path, SandboxPolicy(require=True))
    result = await bash(ex, f"touch {outside}/x")
    assert result.error is not None and result.error.code == ErrorCode.TOOL_ERROR
    assert result.error.details["reason"] == "sandbox_unavailable"
    assert says in result.error.details["missing"] and says in result.error.message
    assert not (outside / "x").exists()  # nothing ran


@pytest.mark.parametrize("missing", list(MISSING))
async def test_an_optional_sandbox_warns_once_and_says_it_ran_unconfined(
    tmp_path: Path, outside: Path, monkeypatch: pytest.MonkeyPatch, missing: str
) -> None:
    simulate(monkeypatch, missing)
    shell = SandboxedShell(SandboxPolicy())
    with pytest.warns(SandboxUnavailableWarning) as caught:
        first = await shell.run(f"touch {outside}/x", cwd=str(tmp_path))
        second = await shell.run("true", cwd=str(tmp_path))
    assert len(caught) == 1
    assert first.sandboxed is False and second.sandboxed is False
    assert (outside / "x").exists()  # unconfined, as said
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert (await SandboxedShell().run("true", cwd=str(tmp_path))).exit_code == 0


async def test_a_network_policy_needs_a_host_that_can_enforce_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_kernel, "landlock_abi", lambda: 3)  # no TCP rules
    monkeypatch.setattr(_support, "namespaces_missing", lambda: "simulated: no user namespaces")
    support = sandbox_support()
    assert support.available and not support.network and "no NetworkPolicy" in support.reason
    policy = SandboxPolicy(network=NetworkPolicy(allow=("pypi.org",)), require=True)
    result = await bash(sandboxed(tmp_path, policy), "true")
    assert result.error is not None and result.error.details["reason"] == "sandbox_unavailable"


def test_without_user_namespaces_what_is_not_enforced_is_said(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if _kernel.landlock_abi() < 1:
        pytest.skip("no Landlock here")
    monkeypatch.setattr(_support, "namespaces_missing", lambda: "simulated: no user namespaces")
    support = sandbox_support()
    assert support.available and support.mechanism == "landlock+seccomp"
    for gap in ("hidden files inside the roots", "protected", "command lines"):
        assert gap in support.reason


async def test_a_setup_that_fails_never_runs_the_command_unconfined(
    tmp_path: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A step the launcher cannot make (here: every plan gets a lock on a missing directory).
    from fastgate.sandbox import _planner

    real = _planner.namespace_steps

    def broken(*args: object, **kwargs: object) -> list[Step]:
        return [Step(Op.LOCK, ("/nonexistent/fastgate",)), *real(*args, **kwargs)]  # type: ignore[arg-type]

    monkeypatch.setattr(_planner, "namespace_steps", broken)
    result = await bash(sandboxed(tmp_path), f"touch {outside}/x")
    assert result.error is not None and result.error.code == ErrorCode.TOOL_ERROR
    assert result.error.details["reason"] == "sandbox_failed"
    assert "/nonexistent/fastgate" in result.error.details["step"]
    assert not (outside / "x").exists()


# -- the launchers ------------------------------------------------------------------------------

NEW_USER, NEW_NS, NEW_PID = 0x10000000, 0x00020000, 0x20000000


async def test_namespaces_without_a_pid_namespace_are_refused(
    launcher: list[str], tmp_path: Path
) -> None:
    # The command's init ends every process of its namespace; outside a pid namespace of its
    # own that would be every process of the user: such a plan never starts anything.
    process = spawn(
        ["touch", str(tmp_path / "ran")],
        plan=[Step(Op.NAMESPACES, (NEW_USER | NEW_NS,))],
    )
    with pytest.raises(PlanFailed) as failed:
        await process.wait()
    assert failed.value.step is not None and failed.value.step.op == Op.NAMESPACES
    assert not (tmp_path / "ran").exists()


async def test_both_launchers_confine_alike(
    launcher: list[str], tmp_path: Path, outside: Path
) -> None:
    _support.forget_support()  # probed again with this launcher
    (tmp_path / ".env").write_text("SECRET")
    script = (
        f"touch {outside}/x; echo e > .mcp.json; cat .env; cat /proc/{os.getpid()}/environ; "
        f"kill -0 {os.getpid()} && echo signalled; touch ok; echo $TMPDIR"
    )
    result = await SandboxedShell().run(script, cwd=str(tmp_path), timeout=60)
    assert result.sandboxed, result
    assert "SECRET" not in result.output and "signalled" not in result.output
    assert "PATH=" not in result.output  # the server's environment
    assert sorted(os.listdir(tmp_path)) == [".env", "ok"] and os.listdir(outside) == []
    bounded = SandboxedShell(SandboxPolicy(max_processes=16))
    bomb = await bounded.run("for i in $(seq 100); do sleep 30 & done; wait", cwd=str(tmp_path))
    assert "more than 16 processes" in bomb.output


# -- the command line ---------------------------------------------------------------------------


def fastgate(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [FASTGATE, *argv], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )


def call(workspace: Path, command: str, *options: str) -> tuple[int, dict[str, object]]:
    done = fastgate(
        "call", "bash", json.dumps({"command": command}), "--workspace", str(workspace),
        "--no-discover", "--mode", "yolo", "--json", *options,
    )  # fmt: skip
    return done.returncode, json.loads(done.stdout.splitlines()[-1])


def test_fastgate_call_chooses_the_sandbox(tmp_path: Path, outside: Path) -> None:
    command = f"touch {outside}/x; touch here"
    status, _ = call(tmp_path, command)  # the default: workspace-write
    assert status == 0 and (tmp_path / "here").exists() and not (outside / "x").exists()
    (tmp_path / "here").unlink()
    call(tmp_path, command, "--sandbox", "read-only")
    assert not (tmp_path / "here").exists() and not (outside / "x").exists()
    status, _ = call(tmp_path, command, "--sandbox", "off")
    assert status == 0 and (outside / "x").exists()
    done = fastgate("call", "bash", '{"command": "true"}', "--workspace", str(tmp_path),
                    "--sandbox", "off", "--allow-domain", "pypi.org")  # fmt: skip
    assert done.returncode == 2 and "--allow-domain" in done.stderr
    done = fastgate("call", "bash", '{"command": "true"}', "--workspace", str(tmp_path),
                    "--allow-domain", "bad\x01host")  # fmt: skip
    assert done.returncode == 2 and "--allow-domain" in done.stderr


def test_fastgate_info_names_the_sandbox() -> None:
    done = fastgate("info")
    support = sandbox_support()
    assert done.returncode == 0
    assert f"sandbox: {support.mechanism}" in done.stdout
    assert "processes: compiled launcher" in done.stdout or "processes:" in done.stdout


def test_the_warning_is_said_once_per_process_across_threads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.warns(SandboxUnavailableWarning) as caught:
        threads = [
            threading.Thread(target=_support.warn_unconfined, args=("simulated",)) for _ in range(8)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert len(caught) == 1 and _support._warned.is_set()


def test_bad_policies_are_refused() -> None:
    with pytest.raises(TypeError):
        SandboxPolicy(writable="/tmp")
    with pytest.raises(ValueError, match="max_processes"):
        SandboxPolicy(max_processes=0)
    with pytest.raises(ValueError, match="max_tmp_bytes"):
        SandboxPolicy(max_tmp_bytes=10)
    with pytest.raises(ValueError, match="hidden"):
        SandboxPolicy(hidden=("",))
    with pytest.raises(ValueError, match="writable"):
        SandboxPolicy(writable=("a\x00b",))
    with pytest.raises(TypeError, match="network"):
        SandboxPolicy(network="pypi.org")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="policy"):
        SandboxedShell("workspace-write")  # type: ignore[arg-type]


async def test_output_names_a_bound_once_even_when_cut(tmp_path: Path) -> None:
    shell = SandboxedShell(SandboxPolicy(max_tmp_bytes=2 << 20))
    result = await shell.run(
        'yes filler | head -c 200000; head -c 8M /dev/zero > "$TMPDIR/f"; sleep 5',
        cwd=str(tmp_path),
        max_output=1000,
    )
    assert result.truncated and result.output.count("[sandbox] The command was ended") == 1
    assert result.output.rstrip().endswith("bytes, max_tmp_bytes).")
