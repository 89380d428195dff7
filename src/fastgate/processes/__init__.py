"""The one place fastgate starts and ends processes (SPEC §22 "One supervisor").

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
found among its descendants; it ends them all, reaps them, and only then exits. It is started
with the command's environment (``/proc/$PPID/environ`` read by the command shows nothing it
could not already see) and is not dumpable (a process of its user may not ptrace it or read
its ``/proc`` files: its environment, memory, descriptors). Elsewhere the command's process
group is what is ended.

What escapes it (the command sandbox closes these): a process that kills its launcher with
SIGKILL (same user), whose detached descendants are then re-parented to init; a process
this user may not signal (a set-user-id program), reported in ``Process.left``; anything
started through another service (``systemd-run``, ``at``, ``ssh``), which is not a
descendant at all.
"""

from fastgate.processes._spawn import DEVNULL as DEVNULL
from fastgate.processes._spawn import PIPE as PIPE
from fastgate.processes._spawn import STDOUT as STDOUT
from fastgate.processes._spawn import Process as Process
from fastgate.processes._spawn import launcher_command as launcher_command
from fastgate.processes._spawn import spawn as spawn
from fastgate.processes._spawn import supervision as supervision

__all__ = ("DEVNULL", "PIPE", "STDOUT", "Process", "launcher_command", "spawn", "supervision")
