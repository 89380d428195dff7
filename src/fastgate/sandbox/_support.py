"""``sandbox_support()``: which mechanism confines commands on this host, probed once."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import threading
import warnings
from dataclasses import dataclass

from fastgate.processes import Op, Step, encode, launcher_command
from fastgate.sandbox import _kernel, _planner

log = logging.getLogger("fastgate.sandbox")
NAMESPACES = "namespaces"
LANDLOCK = "landlock"
_PROBE_TIMEOUT = 10.0


@dataclass(frozen=True, slots=True)
class SandboxSupport:
    """How commands are confined here. ``available``: whether ``SandboxedShell`` confines them
    at all. ``mechanism``: ``"namespaces+landlock+seccomp"``, ``"namespaces+seccomp"`` (user,
    mount, pid and ipc namespaces; Landlock too where the kernel has it), ``"landlock+seccomp"``
    (no user namespaces: what it cannot do is in ``reason``) or ``"none"``. ``network``: whether
    a ``NetworkPolicy`` can be enforced. ``reason``: what is missing, or what the mechanism
    cannot do."""

    available: bool
    mechanism: str
    network: bool
    reason: str

    @property
    def namespaces(self) -> bool:
        return self.mechanism.startswith(NAMESPACES)


_lock = threading.Lock()
_support: SandboxSupport | None = None
_LANDLOCK_GAPS = (
    "without user namespaces: hidden files inside the roots and protected or read-only paths "
    "inside writable roots are not enforced by the OS (the permission rules still are), other "
    "processes' command lines stay readable, and the bounds on processes and temporary bytes "
    "are checked every 100 ms instead of enforced"
)


def sandbox_support() -> SandboxSupport:
    """What this host offers (probed on the first call: a short command is started in the
    namespaces the sandbox uses)."""
    global _support
    support = _support
    if support is None:
        with _lock:
            if _support is None:
                _support = _probe()
            support = _support
    return support


def forget_support() -> None:
    """Probe again at the next ``sandbox_support()`` (tests that simulate a missing
    mechanism)."""
    global _support, _host
    with _lock:
        _support = None
        _host = None


_host: tuple[str | None, int] | None = None


def host() -> tuple[str | None, int]:
    """The seccomp architecture and the Landlock ABI of this host (read once)."""
    global _host
    found = _host
    if found is None:
        found = _host = (_kernel.seccomp_arch(), _kernel.landlock_abi())
    return found


def _probe() -> SandboxSupport:
    if not sys.platform.startswith("linux"):
        return SandboxSupport(
            False, "none", False, f"commands are confined on Linux only ({sys.platform})"
        )
    arch = _kernel.seccomp_arch()
    if arch is None:
        import platform

        return SandboxSupport(
            False,
            "none",
            False,
            "no seccomp filter for this host (needs seccomp filters on x86_64 or aarch64; "
            f"this is {platform.machine()})",
        )
    abi = _kernel.landlock_abi()
    unable = launcher_missing()
    if unable is not None:
        return SandboxSupport(False, "none", False, unable)
    missing = namespaces_missing()
    if missing is None:
        mechanism = "namespaces+landlock+seccomp" if abi else "namespaces+seccomp"
        return SandboxSupport(True, mechanism, True, "")
    if abi >= 1:
        network = abi >= 4
        reason = f"{missing}; {_LANDLOCK_GAPS}"
        if not network:
            reason += f"; Landlock ABI {abi} has no TCP rules, so no NetworkPolicy"
        elif abi < 6:
            reason += (
                f"; Landlock ABI {abi} does not scope signals: they are refused only to the "
                "server and its process group and to the command's supervisors (its launcher "
                "and the process that started it: the resident launcher, or the server), by "
                "pid or process group"
            )
        return SandboxSupport(True, "landlock+seccomp", network, reason)
    return SandboxSupport(
        False,
        "none",
        False,
        f"{missing}, and Landlock is not available (Linux >= 5.13 with landlock in the "
        "kernel's LSM list)",
    )


def launcher_missing() -> str | None:
    """Why no launcher here can take a plan (none built for this platform, or one built before
    the sandbox), or ``None``."""
    try:
        launcher = launcher_command()
    except OSError as exc:
        return f"no launcher ({exc})"
    if launcher is None:
        return "no launcher on this platform"
    failed = _run_probe(launcher, [], shutil.which("true") or "/bin/true")
    if failed is None:
        return None
    return f"the process launcher cannot confine commands ({failed}; rebuild fastgate)"


def namespaces_missing() -> str | None:
    """Why the namespace mechanism cannot run here (the probe's failing step), or ``None``."""
    try:
        launcher = launcher_command()
    except OSError as exc:
        return f"no launcher ({exc})"
    if launcher is None:
        return "no launcher on this platform"
    program = shutil.which("true") or "/bin/true"
    flags = (
        _planner.CLONE_NEWUSER
        | _planner.CLONE_NEWNS
        | _planner.CLONE_NEWPID
        | _planner.CLONE_NEWIPC
        | _planner.CLONE_NEWNET
    )
    steps = [
        Step(Op.NAMESPACES, (flags,)),
        Step(Op.PRIVATE),
        Step(Op.SEAL, ("/",)),
        Step(Op.TMPFS, ("/tmp", 1 << 20, 64, 0o1777)),
        Step(Op.PROC, ("/proc",)),
        Step(Op.LOOPBACK),
        Step(Op.CAPS),
    ]
    return _run_probe(launcher, steps, program)


def _run_probe(launcher: list[str], steps: list[Step], program: str) -> str | None:
    plan = os.memfd_create("fastgate-probe", os.MFD_CLOEXEC)
    control_r, control_w = os.pipe()
    report_r, report_w = os.pipe()
    try:
        os.write(plan, encode(steps))
        os.lseek(plan, 0, os.SEEK_SET)
        argv = [*launcher, "--plan", str(plan), "0", str(control_r), str(report_w)]
        try:
            process = subprocess.Popen(
                [*argv, program, "true"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=(plan, control_r, report_w),
                start_new_session=True,
            )
        except OSError as exc:
            return f"the launcher cannot start ({exc})"
        os.close(report_w)
        report_w = -1
        try:
            process.wait(_PROBE_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            return "the namespace probe did not finish"
        report = _read_all(report_r)
    finally:
        for fd in (plan, control_r, control_w, report_r, report_w):
            if fd >= 0:
                os.close(fd)
    for line in report.decode("ascii", "replace").splitlines():
        kind, _, value = line.partition(" ")
        if kind == "S":
            return None
        if kind == "F":
            index, _, code = value.partition(" ")
            step = steps[int(index)] if index.isdigit() and int(index) < len(steps) else None
            what = step.describe() if step is not None else "enter namespaces"
            reason = os.strerror(int(code)) if code.lstrip("-").isdigit() else code
            return f"user namespaces are not usable here (could not {what}: {reason})"
        if kind == "E":
            return f"the namespace probe could not start ({value})"
    return "the namespace probe reported nothing (an older launcher?)"


def _read_all(fd: int) -> bytes:
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


class SandboxUnavailableWarning(UserWarning):
    """A sandbox with ``require=False`` ran a command unconfined (said once a process)."""


_warned = threading.Event()
_warning = threading.Lock()


def warn_unconfined(why: str) -> None:
    """Say once per process that commands run unconfined, and why."""
    with _warning:
        if _warned.is_set():
            return
        _warned.set()
    message = f"fastgate.sandbox: commands run unconfined: {why}"
    log.warning("%s", message)
    warnings.warn(message, SandboxUnavailableWarning, stacklevel=3)
