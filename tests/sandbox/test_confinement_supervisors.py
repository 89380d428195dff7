"""A sandboxed command cannot end its supervisors (SPEC §22 "One supervisor", *The server*):
its launcher and the process that started the launcher (the resident, or the server) refuse
its signals by pid, by process group and by thread, under both mechanisms and both launchers,
also where Landlock does not scope signals (ABI < 6, simulated; a pidfd's signal is refused
there by the plan's own filter). Were the launcher killed, what the command detached
(``setsid``, a double fork) would outlive the call."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fastgate.sandbox import SandboxedShell, _kernel, _support
from tests.processes_kit import (
    compiled_launcher_fixture,  # noqa: F401  (the fixture "compiled_launcher")
    launcher_fixture,  # noqa: F401  (the fixture "launcher")
)
from tests.sandbox.confinement_kit import (
    PYTHON,
    kill,
    mechanism_fixture,  # noqa: F401  (the fixture "mechanism")
    no_process_outlives_the_test,  # noqa: F401  (autouse)
    unique,
    until_none,
    with_marker,
)

# Kernel and process mechanisms, the same in both builds: run once, in the compiled build.
pytestmark = pytest.mark.slow


@pytest.fixture(params=["as the kernel has it", "landlock abi 5"], name="signals")
def signals_fixture(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """Landlock as this kernel has it (ABI 6 on: it scopes signals), and as a kernel whose
    Landlock does not (ABI 5, as Ubuntu 24.04's 6.8 has: seccomp alone refuses them)."""
    if request.param != "as the kernel has it":
        if _kernel.landlock_abi() < 5:
            pytest.skip("Landlock ABI 5 is not available here")
        monkeypatch.setattr(_kernel, "landlock_abi", lambda: 5)
    _support.forget_support()
    try:
        yield str(request.param)
    finally:
        _support.forget_support()


# Each spelling is tried on the launcher (the command's parent) and on the launcher's parent.
SPELLINGS = {
    "kill": "os.kill(target, signal.SIGKILL)",
    "killpg": "os.killpg(target, signal.SIGKILL)",
    "stop": "os.kill(target, signal.SIGSTOP)",
    "term": "os.kill(target, signal.SIGTERM)",
    "tgkill": (
        "ctypes.CDLL(None, use_errno=True).syscall(234 if os.uname().machine == 'x86_64' "
        "else 131, target, target, signal.SIGKILL) == 0 or refused(ctypes.get_errno())"
    ),
}
ATTEMPT = """
import ctypes, os, signal, sys
def refused(code): raise OSError(code, os.strerror(code))
launcher = int(sys.argv[1])  # the command's parent
with open(f"/proc/{{launcher}}/stat") as f:
    parent = int(f.read().rsplit(")", 1)[1].split()[1])
for target in (launcher, parent):
    if target <= 1:
        continue  # the init of a pid namespace, or none: nothing outside it can be named
    try:
        {spelling}
        print("signalled", target)
    except OSError as exc:
        print("refused", target, exc.errno)
"""


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
async def test_the_command_cannot_signal_its_supervisors(
    launcher: list[str], mechanism: str, signals: str, tmp_path: Path, spelling: str
) -> None:
    marker = unique("fastgate-supervised")
    attempt = tmp_path / "attempt.py"
    attempt.write_text(ATTEMPT.format(spelling=SPELLINGS[spelling]))
    script = (
        f"setsid -f bash -c 'exec -a {marker} sleep 300' > /dev/null 2>&1\n"
        f'until pgrep -f "^{marker} " > /dev/null; do sleep 0.01; done\n'
        f"{PYTHON} attempt.py $PPID; sleep 0.3; echo still-here"
    )
    try:
        result = await SandboxedShell().run(script, cwd=str(tmp_path), timeout=60)
        assert result.sandboxed, result
        assert "signalled" not in result.output, result.output
        assert result.exit_code == 0 and "still-here" in result.output, result
        assert await until_none(lambda: with_marker(marker)) == []
    finally:
        kill(with_marker(marker))
