"""The one place fastgate starts and ends processes.

``spawn(argv, *, cwd, env, stdin, stdout, stderr, executable, grace)`` starts a command and
returns a ``Process`` at once; ``await process.wait()`` returns when the command and every
process it started are gone, ``await process.terminate_all(grace)`` ends them all (SIGTERM,
then SIGKILL after the grace). No process started through it outlives its ``Process``: when
the command exits, whatever it left running is ended too.

How (Linux): each command's parent is a launcher (``_launcher.c``, built by setup.py as
``fastgate-launcher`` with the compiled core; ``_launcher.py`` is the same program in Python,
used where it was not built, at the cost of an interpreter's start per command). The launcher
makes itself a child subreaper before it forks the command, so a daemon that detaches
(``setsid``, a double fork, ``nohup ... &``) is re-parented to it rather than to init, and is
found among its descendants; it ends them all, reaps them, and only then exits. The compiled
launcher is forked by a resident copy of itself (``_resident.py``: one per server process,
started with an empty environment, keeping the next command's launcher forked ahead), the pure
one is started for each command with the command's environment: either way
``/proc/$PPID/environ`` read by the command shows nothing it could not already see. The launcher
is not dumpable (a process of its user may not ptrace it or read its ``/proc`` files: its
environment, memory, descriptors). Elsewhere the command's process group is what is ended.

With a plan (``spawn(..., plan=...)``, made by ``fastgate.sandbox``), the launcher also confines
the command before its exec: new namespaces whose first process is the command's init (every
process of the namespace ends with it), mounts, Landlock, seccomp, capabilities, limits.

What escapes it without a plan (the command sandbox closes these): a process that kills its
launcher with SIGKILL (same user), whose detached descendants are then re-parented to init; a
process
this user may not signal (a set-user-id program), reported in ``Process.left``; anything
started through another service (``systemd-run``, ``at``, ``ssh``), which is not a
descendant at all.
"""

from fastgate.processes._descriptors import OUT_OF_DESCRIPTORS as OUT_OF_DESCRIPTORS
from fastgate.processes._descriptors import DescriptorsExhausted as DescriptorsExhausted
from fastgate.processes._descriptors import ensure_free as ensure_free
from fastgate.processes._descriptors import soft_limit as soft_limit
from fastgate.processes._environment import DEFAULT_ENV_DENY as DEFAULT_ENV_DENY
from fastgate.processes._environment import without_secrets as without_secrets
from fastgate.processes._plan import BIND_DEVICES as BIND_DEVICES
from fastgate.processes._plan import BIND_OPTIONAL as BIND_OPTIONAL
from fastgate.processes._plan import BIND_READONLY as BIND_READONLY
from fastgate.processes._plan import BIND_RECURSIVE as BIND_RECURSIVE
from fastgate.processes._plan import Op as Op
from fastgate.processes._plan import Plan as Plan
from fastgate.processes._plan import Step as Step
from fastgate.processes._plan import encode as encode
from fastgate.processes._spawn import DEVNULL as DEVNULL
from fastgate.processes._spawn import PIPE as PIPE
from fastgate.processes._spawn import STDOUT as STDOUT
from fastgate.processes._spawn import PlanFailed as PlanFailed
from fastgate.processes._spawn import Process as Process
from fastgate.processes._spawn import launcher_command as launcher_command
from fastgate.processes._spawn import spawn as spawn
from fastgate.processes._spawn import supervision as supervision

__all__ = (
    "BIND_DEVICES",
    "BIND_OPTIONAL",
    "BIND_READONLY",
    "BIND_RECURSIVE",
    "DEFAULT_ENV_DENY",
    "DEVNULL",
    "OUT_OF_DESCRIPTORS",
    "PIPE",
    "STDOUT",
    "DescriptorsExhausted",
    "Op",
    "Plan",
    "PlanFailed",
    "Process",
    "Step",
    "encode",
    "ensure_free",
    "launcher_command",
    "soft_limit",
    "spawn",
    "supervision",
    "without_secrets",
)
