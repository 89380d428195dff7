"""Commands that leave code to run later, outside the call: cron's and at's jobs, systemd's
units. What they run starts after the call has ended, beyond its supervisor (which ends every
process of the call) and its sandbox, so each is a write of what later runs: the job's file
where the system keeps it (protected, as ``/etc`` is), or a word only the run knows."""

from __future__ import annotations

import os

from fastgate.permissions.arguments import (
    option_values,
    short_letters,
    unknown_below,
)
from fastgate.permissions.shell import Word

#: Where cron and at keep the jobs they will run (Debian's layout; others keep them below it).
CRON_SPOOL = "/var/spool/cron"

# crontab's and at's options that only read or remove jobs; anything else installs one.
_CRONTAB_READS = frozenset("lr")
_AT_READS = frozenset("lcrd")
# systemctl's commands that make a unit start later (at boot, at login, on a timer), or change
# what one runs.
_SYSTEMCTL_INSTALLS = frozenset(
    {"enable", "reenable", "link", "edit", "preset", "preset-all", "add-wants", "add-requires",
     "set-property", "revert", "import-environment", "set-environment"}
)  # fmt: skip
# systemctl's options that take the next word as their value (``-H HOST``, ``--root DIR``): that
# word is not the command.
_SYSTEMCTL_VALUED = frozenset(
    {"-H", "--host", "-M", "--machine", "-t", "--type", "--state", "-p", "--property", "-P",
     "-n", "--lines", "-o", "--output", "--root", "--image", "--image-policy", "--kill-whom",
     "--kill-value", "-s", "--signal", "--job-mode", "--preset-mode", "--what", "--when",
     "--timestamp", "--message", "--reboot-argument", "--boot-loader-menu",
     "--boot-loader-entry", "--check-inhibitors", "--drop-in", "--marked"}
)  # fmt: skip


def scheduled_words(name: str, args: tuple[Word, ...]) -> list[Word]:
    """The files a command changes to have code run later: ``crontab FILE`` (or stdin) and
    ``at``/``batch`` write the spool; ``systemctl enable`` and kin write units (the user's
    under ``~/.config/systemd/user``, the system's under ``/etc/systemd``); ``systemd-run``
    starts a unit of its own, named only when it runs."""
    if name == "crontab":
        if any(set(short_letters(w.value)) & _CRONTAB_READS for w in args):
            return []
        named = option_values(args, ("-u",))
        user = named[-1].value if named and not named[-1].dynamic else _user()
        return [Word(f"{CRON_SPOOL}/crontabs/{os.path.basename(user) or 'user'}", "a crontab")]
    if name in ("at", "batch"):
        if any(set(short_letters(w.value)) & _AT_READS for w in args):
            return []
        return [Word(f"{CRON_SPOOL}/atjobs/job", f"a job {name} will run")]
    if name == "systemd-run":
        return [unknown_below("/run/systemd/transient", "the unit systemd-run starts")]
    if name == "systemctl":
        verb = _systemctl_verb(args)
        if verb is None:
            return []  # it lists the units
        if verb.dynamic:  # a command only the run knows
            return _unit(args, verb.raw)
        return _unit(args, verb.value) if verb.value in _SYSTEMCTL_INSTALLS else []
    return []


def _systemctl_verb(args: tuple[Word, ...]) -> Word | None:
    """systemctl's command: its first operand that is not an option's value (``-H host``,
    ``--root DIR``, ``-p Name``); an option known only at run time may take the next word."""
    skip = False
    for index, word in enumerate(args):
        if skip:
            skip = False
            continue
        if word.value == "--" and not word.dynamic:
            return args[index + 1] if index + 1 < len(args) else None
        if word.dynamic or not word.value.startswith("-") or word.value == "-":
            return word
        skip = word.value in _SYSTEMCTL_VALUED
    return None


def _user() -> str:
    """The name of the user the server runs as, whose crontab a plain ``crontab`` writes."""
    try:
        import pwd  # POSIX only, as cron is

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):  # no user database, or a uid without a name
        return "user"


def _unit(args: tuple[Word, ...], command: str) -> list[Word]:
    if any(w.value == "--user" for w in args):
        return [Word("~/.config/systemd/user/unit", f"a user unit (systemctl {command})")]
    return [Word("/etc/systemd/system/unit", f"a system unit (systemctl {command})")]
