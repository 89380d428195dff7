"""A server for the confinement tests that must run without capabilities (a server with
CAP_SYS_NICE or CAP_IPC_OWNER would hide what an unprivileged one lets a program do).

It holds what a program could reach of a server's own state: a System V shared memory segment,
a semaphore and a message queue (holding one message of the server's) under known keys; its CPU
affinity, nice level, scheduling policy and I/O priority; its signal handlers. It runs one
program in code mode, then prints that state before and after, and what the program printed,
as one JSON object on stdout.

Run as ``python -m tests.codemode_server`` (cwd: the repository) by
``tests/test_codemode_confinement.py``, with every capability dropped; stdin: ``{"code": ...,
"key": int, "landlock_abi": int | null}`` (``landlock_abi``: pretend the kernel's Landlock is
that version, as on an older kernel). In the code, ``SERVER_PID``, ``IPC_KEY``, ``SHM_ID``,
``SEM_ID`` and ``MSG_ID`` are replaced by the server's values.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import platform
import signal
import struct
import sys
from typing import Any

IPC_CREAT, IPC_NOWAIT, IPC_RMID = 0o1000, 0o4000, 0
GETVAL, SETVAL = 12, 16
SEGMENT = b"the server's own bytes".ljust(64, b".")
MESSAGE = b"the server's message"
IOPRIO_GET = {"x86_64": 252, "aarch64": 31}[platform.machine()]
WATCHED_SIGNALS = (signal.SIGIO, signal.SIGUSR1, signal.SIGURG)


class SharedState:
    """What the server shares with whoever runs as its user."""

    def __init__(self, key: int) -> None:
        libc = self.libc = ctypes.CDLL(None, use_errno=True)
        libc.shmat.restype = ctypes.c_void_p
        libc.shmat.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_int)
        libc.shmdt.argtypes = (ctypes.c_void_p,)
        libc.syscall.restype = ctypes.c_long
        self.key = key
        self.shm = self._check(libc.shmget(key, 4096, IPC_CREAT | 0o600), "shmget")
        self.address = libc.shmat(self.shm, None, 0)
        ctypes.memmove(self.address, SEGMENT, len(SEGMENT))
        self.sem = self._check(libc.semget(key, 1, IPC_CREAT | 0o600), "semget")
        self._check(libc.semctl(self.sem, 0, SETVAL, 1), "semctl")
        self.msg = self._check(libc.msgget(key, IPC_CREAT | 0o600), "msgget")
        own = ctypes.create_string_buffer(struct.pack("l", 1) + MESSAGE)
        self._check(libc.msgsnd(self.msg, own, len(MESSAGE), IPC_NOWAIT), "msgsnd")
        self.signals: dict[str, int] = {}
        for sig in WATCHED_SIGNALS:
            signal.signal(sig, self._count)

    def _check(self, value: int, what: str) -> int:
        if value < 0:
            raise OSError(ctypes.get_errno(), f"{what} failed")
        return value

    def _count(self, number: int, _: Any) -> None:
        name = signal.Signals(number).name
        self.signals[name] = self.signals.get(name, 0) + 1

    def messages(self) -> list[str]:
        """Every message in the queue (taken out of it)."""
        found = []
        buffer = ctypes.create_string_buffer(64)
        while (size := self.libc.msgrcv(self.msg, buffer, 56, 0, IPC_NOWAIT)) >= 0:
            found.append(buffer.raw[8 : 8 + size].decode("latin-1"))
        return found

    def snapshot(self) -> dict[str, Any]:
        libc = self.libc
        pending = signal.sigpending()
        return {
            "segment": ctypes.string_at(self.address, len(SEGMENT)).decode("latin-1"),
            "segment_key_alive": libc.shmget(self.key, 0, 0) == self.shm,
            "semaphore": libc.semctl(self.sem, 0, GETVAL),
            "affinity": sorted(os.sched_getaffinity(0)),
            "nice": os.getpriority(os.PRIO_PROCESS, 0),
            "scheduler": os.sched_getscheduler(0),
            "ioprio": libc.syscall(IOPRIO_GET, 1, 0),
            "signals": dict(self.signals),
            "pending": sorted(signal.Signals(s).name for s in pending if s in WATCHED_SIGNALS),
        }

    def remove(self) -> None:
        libc = self.libc
        libc.shmdt(self.address)
        libc.shmctl(self.shm, IPC_RMID, None)
        libc.semctl(self.sem, 0, IPC_RMID)
        libc.msgctl(self.msg, IPC_RMID, None)


def capabilities() -> dict[str, str]:
    with open("/proc/self/status") as status:
        return {
            line.split(":")[0]: line.split()[1]
            for line in status
            if line.startswith(("CapEff", "CapPrm", "CapBnd", "CapAmb"))
        }


async def run_program(code: str, landlock_abi: int | None) -> str:
    from fastgate import (
        ConcurrencyScheduler,
        FileLockManager,
        PermissionConfig,
        SchedulerLimits,
        ToolExecutor,
        ToolKind,
        ToolRegistry,
        define_tool,
        schema,
    )
    from fastgate.codemode import CodeMode, _sandbox

    if landlock_abi is not None:
        _sandbox.landlock_abi = lambda: landlock_abi

    async def noop(args: Any, ctx: Any) -> None:
        return None

    registry = ToolRegistry()
    registry.register(
        define_tool("noop", "Does nothing.", schema.Object({}), noop, kind=ToolKind.READ_ONLY)
    )
    executor = ToolExecutor(
        registry,
        permissions=PermissionConfig(allow=("run_code",)),
        code_mode=CodeMode(pool_size=0),
        scheduler=ConcurrencyScheduler(SchedulerLimits()),
        locks=FileLockManager(),
        context_defaults={"session_id": "s1", "workspace_root": os.getcwd()},
    )
    try:
        result = await executor.execute("run_code", {"code": code})
    finally:
        executor.dispose()
    if not result.ok:
        return f"FAILED {result.error}: {result.content}"
    return str(result.value["stdout"])


def main() -> None:
    request = json.load(sys.stdin)
    state = SharedState(request["key"])
    # What an attacker could learn or guess (ids are small numbers, pids are listed in /proc).
    code = request["code"]
    for name, value in (
        ("SERVER_PID", os.getpid()),
        ("IPC_KEY", state.key),
        ("SHM_ID", state.shm),
        ("SEM_ID", state.sem),
        ("MSG_ID", state.msg),
    ):
        code = code.replace(name, str(value))
    try:
        before = state.snapshot()
        output = asyncio.run(run_program(code, request["landlock_abi"]))
        after = state.snapshot()
        after["messages"] = state.messages()
    finally:
        state.remove()
    report = {
        "capabilities": capabilities(),
        "uid": os.getuid(),
        "pid": os.getpid(),
        "before": before,
        "after": after,
        "output": output,
    }
    json.dump(report, sys.stdout)


if __name__ == "__main__":
    main()
