"""Programs that run another program: their options, and how to find the command they run.

A wrapper entry says which options take an argument, which ones we cannot follow (the command
then counts as unknown, fail closed), whether allow rules may see through it (``transparent``:
same command, same privileges), and whether it runs a script given as a string (``su -c``).
"""

from __future__ import annotations

from dataclasses import dataclass

from fastgate.permissions.shell import Word


@dataclass(frozen=True, slots=True)
class Wrapper:
    flags: frozenset[str] = frozenset()  # options without an argument
    with_arg: frozenset[str] = frozenset()  # options taking the next word (or ``--opt=x``)
    positionals: int = 0  # words to skip before the command (``timeout 5 cmd``)
    assignments: bool = False  # ``env A=1 cmd``, ``sudo A=1 cmd``
    transparent: bool = False  # same command, same privileges: allow rules see through it
    numeric_flags: bool = False  # ``nice -10 cmd``
    stop_flags: frozenset[str] = frozenset()  # options after which nothing runs (command -v)
    opaque_flags: frozenset[str] = frozenset()  # options whose effect we cannot follow
    script_flags: frozenset[str] = frozenset()  # options whose argument is a script (su -c)
    needs_script: bool = False  # without a script option it runs an unknown shell (su)
    joins_script: bool = False  # the remaining words joined are a script (watch)
    any_long: bool = False  # every ``--opt``/``--opt=x`` is a flag (valgrind)


def _w(**kw: object) -> Wrapper:
    sets = {k: frozenset(str(v).split()) for k, v in kw.items() if isinstance(v, str)}
    rest = {k: v for k, v in kw.items() if not isinstance(v, str)}
    return Wrapper(**sets, **rest)  # type: ignore[arg-type]


WRAPPERS: dict[str, Wrapper] = {
    "env": _w(
        flags="-i - -0 --null --ignore-environment -v --debug",
        with_arg="-u --unset -C --chdir",
        opaque_flags="-S --split-string",
        assignments=True,
    ),
    "command": _w(flags="-p", stop_flags="-v -V", transparent=True),
    "builtin": _w(transparent=True),
    "exec": _w(flags="-c -l", with_arg="-a", transparent=True),
    "nohup": _w(transparent=True),
    "nice": _w(with_arg="-n --adjustment", numeric_flags=True, transparent=True),
    # ``time`` times the command without changing it.
    "time": _w(
        flags="-p -v -a -q --verbose --portability",
        with_arg="-f -o --format --output",
        transparent=True,
    ),
    "timeout": _w(
        flags="--preserve-status --foreground -v --verbose",
        with_arg="-k -s --kill-after --signal",
        positionals=1,
        transparent=True,
    ),
    "stdbuf": _w(with_arg="-i -o -e --input --output --error", transparent=True),
    "ionice": _w(flags="-t --ignore", with_arg="-c -n --class --classdata", transparent=True),
    "setsid": _w(flags="-c -f -w --ctty --fork --wait", transparent=True),
    "sudo": _w(
        flags="-A -b -E -H -n -P -S -k -K --askpass --background --preserve-env --set-home "
        "--non-interactive --preserve-groups --stdin --reset-timestamp --",
        with_arg="-C -D -g -h -p -R -r -T -t -U -u --close-from --chdir --group --host --prompt "
        "--chroot --role --type --command-timeout --other-user --user",
        opaque_flags="-e --edit -s --shell -i --login -l --list -v --validate -V --version",
        assignments=True,
    ),
    "doas": _w(flags="-n", with_arg="-u -C", opaque_flags="-s"),
    "xargs": _w(
        flags="-0 -r -t -p -x -o -i --null --no-run-if-empty --verbose --interactive --exit "
        "--open-tty --replace --eof",
        with_arg="-I -L -n -P -s -d -E -a --max-args --max-procs --delimiter --arg-file "
        "--max-lines --max-chars",
    ),
    "busybox": _w(transparent=True),
    "su": _w(
        flags="- -l --login -m -p --preserve-environment -P --pty -f --fast",
        with_arg="-s --shell -g --group -G --supp-group -w --whitelist-environment",
        script_flags="-c --command --session-command",
        needs_script=True,
    ),
    "script": _w(
        flags="-a --append -e --return -f --flush -q --quiet -E --echo",
        with_arg="-t --timing -T --log-timing -I --log-in -O --log-out -B --log-io -m "
        "--logging-format -o --output-limit",
        script_flags="-c --command",
        needs_script=True,
    ),
    "watch": _w(
        flags="-b --beep -e --errexit -g --chgexit -t --no-title -c --color -p --precise -d",
        with_arg="-n --interval -q --equexit",
        opaque_flags="-x --exec",
        joins_script=True,
    ),
    "flock": _w(
        flags="-s --shared -x -e --exclusive -u --unlock -n --nb --nonblock -o --close -F "
        "--no-fork --verbose",
        with_arg="-w --timeout -E --conflict-exit-code",
        script_flags="-c --command",
        positionals=1,
    ),
    "chroot": _w(with_arg="--userspec --groups", flags="--skip-chdir", positionals=1),
    "unshare": _w(
        flags="-m -u -i -n -p -U -C -T -f -r -c --fork --map-root-user --map-current-user "
        "--mount --uts --ipc --net --pid --user --cgroup --time --kill-child --mount-proc",
        with_arg="--propagation --setgroups -R --root -w --wd -S --setuid -G --setgid",
    ),
    "strace": _w(
        flags="-f -ff -c -C -d -D -i -k -q -qq -r -t -tt -ttt -T -v -w -x -xx -y -yy -z -Z",
        with_arg="-e -o -p -s -u -E -a -b -I -O -S -X -P",
    ),
    "ltrace": _w(flags="-f -c -C -i -r -S -t -tt -ttt -T", with_arg="-e -o -p -s -u -a -n -l"),
    "valgrind": _w(any_long=True),
    "fakeroot": _w(with_arg="-l --lib --faked -s -i", flags="-u --unknown-is-real"),
    "proxychains": _w(flags="-q", with_arg="-f"),
    "proxychains4": _w(flags="-q", with_arg="-f"),
    "torsocks": _w(flags="-q --quiet -i --isolate", with_arg="-u -p -a -P"),
    "unbuffer": _w(flags="-p", transparent=True),
    "caffeinate": _w(flags="-d -i -m -s -u", with_arg="-t -w", transparent=True),
}


def is_assignment(word: Word) -> bool:
    """An argument ``env`` or ``sudo`` takes as ``NAME=VALUE`` before the command: like them,
    any argument (as the program receives it) with an ``=`` in it, whatever the NAME."""
    return not word.dynamic and "=" in word.value


def unwrap(
    words: tuple[Word, ...], wrapper: Wrapper
) -> tuple[tuple[Word, ...], Word | None] | None:
    """The words after a wrapper's options (``()`` when nothing runs) and the argument of a
    script option (``su -c SCRIPT``); None when an option cannot be followed."""
    i = 1
    while i < len(words):
        word = words[i]
        if word.dynamic:
            return None
        arg = word.value
        if arg == "--":
            i += 1
            break
        if wrapper.assignments and is_assignment(word):
            return words[i:], None
        if not arg.startswith("-") or (arg == "-" and "-" not in wrapper.flags):
            break
        if arg in wrapper.stop_flags:
            return (), None
        option = arg.split("=", 1)[0] if arg.startswith("--") else arg
        if option in wrapper.opaque_flags:
            return None
        if option in wrapper.script_flags or arg[:2] in wrapper.script_flags:
            return _script_argument(words, i, arg, option)
        if arg.startswith("--"):
            if option in wrapper.flags or wrapper.any_long:
                i += 1
            elif option in wrapper.with_arg:
                i += 1 if "=" in arg else 2
            else:
                return None
            continue
        if wrapper.numeric_flags and arg[1:].isdigit():
            i += 1
            continue
        consumed = _short_options(arg, wrapper)
        if consumed is None:
            return None
        i += consumed
    i += wrapper.positionals
    if i < len(words) and wrapper.script_flags:  # ``flock FILE -c SCRIPT``
        arg = words[i].value
        option = arg.split("=", 1)[0] if arg.startswith("--") else arg[:2]
        if option in wrapper.script_flags and not words[i].dynamic:
            return _script_argument(words, i, arg, option)
    return (words[i:] if i <= len(words) else ()), None


def _script_argument(
    words: tuple[Word, ...], i: int, arg: str, option: str
) -> tuple[tuple[Word, ...], Word | None] | None:
    """``-c SCRIPT``, ``-cSCRIPT``, ``--command=SCRIPT`` or ``--command SCRIPT``."""
    if arg.startswith("--") and "=" in arg:
        value = arg.split("=", 1)[1]
        return (), Word(value, value)
    if not arg.startswith("--") and len(arg) > 2:
        return (), Word(arg[2:], arg[2:])
    if i + 1 >= len(words):
        return None
    return (), words[i + 1]


def _short_options(arg: str, wrapper: Wrapper) -> int | None:
    """How many words a ``-abc`` cluster consumes (1 or 2); None for an unknown option."""
    if arg in wrapper.flags:
        return 1
    for k in range(1, len(arg)):
        option = "-" + arg[k]
        if option in wrapper.stop_flags or option in wrapper.opaque_flags:
            return None
        if option in wrapper.with_arg:
            return 1 if k + 1 < len(arg) else 2
        if option not in wrapper.flags:
            return None
    return 1
