"""Programs that run another program: their options, and how to find the command they run.

A wrapper entry says which options take an argument, which ones we cannot follow (the command
then counts as unknown, fail closed), whether allow rules may see through it (``transparent``:
same command, same privileges), and whether it runs a script given as a string (``su -c``).

Options are read as the program's getopt reads them: options come before the command (and
before ``NAME=VALUE`` assignments: ``env -S=x`` is an option, not an assignment); a long option
may be abbreviated to any unambiguous prefix (``--split-s``, ``--sig KILL``), its argument
joined with ``=`` or in the next word; short options may be clustered, the last one taking the
rest of the word or the next word as its argument (``-iS'rm x'``, ``-k5``).
"""

from __future__ import annotations

from dataclasses import dataclass

from fastgate.permissions.shell import Word


@dataclass(frozen=True, slots=True)
class Wrapper:
    flags: frozenset[str] = frozenset()  # options without an argument
    with_arg: frozenset[str] = frozenset()  # options taking the next word (or ``--opt=x``)
    positionals: int = 0  # words to skip before the command (``timeout 5 cmd``)
    positionals_first: int = 0  # words to skip before the options (``setarch ARCH -R cmd``)
    assignments: bool = False  # ``env A=1 cmd``, ``sudo A=1 cmd``
    transparent: bool = False  # same command, same privileges: allow rules see through it
    numeric_flags: bool = False  # ``nice -10 cmd``
    stop_flags: frozenset[str] = frozenset()  # options after which nothing runs (command -v)
    opaque_flags: frozenset[str] = frozenset()  # options whose effect we cannot follow
    script_flags: frozenset[str] = frozenset()  # options whose argument is a script (su -c)
    needs_script: bool = False  # without a script option it runs an unknown shell (su)
    joins_script: bool = False  # the remaining words joined are a script (watch)
    any_long: bool = False  # every ``--opt``/``--opt=x`` is a flag (valgrind)
    chdir: frozenset[str] = frozenset()  # options naming the directory the command runs in

    def long_options(self) -> frozenset[str]:
        return frozenset(
            o
            for group in (
                self.flags,
                self.with_arg,
                self.stop_flags,
                self.opaque_flags,
                self.script_flags,
            )
            for o in group
            if o.startswith("--") and len(o) > 2
        )


@dataclass(frozen=True, slots=True)
class Unwrapped:
    """What a wrapper runs: the command's words (``()`` when nothing runs), the script of a
    script option (``su -c SCRIPT``), and the directory of a ``--chdir`` option."""

    inner: tuple[Word, ...]
    script: Word | None = None
    chdir: Word | None = None


def _w(**kw: object) -> Wrapper:
    sets = {k: frozenset(str(v).split()) for k, v in kw.items() if isinstance(v, str)}
    rest = {k: v for k, v in kw.items() if not isinstance(v, str)}
    return Wrapper(**sets, **rest)  # type: ignore[arg-type]


WRAPPERS: dict[str, Wrapper] = {
    "env": _w(
        # The signal options take an optional argument: only ``--opt=SIG``, never the next word.
        flags="-i - -0 --null --ignore-environment -v --debug --default-signal --ignore-signal "
        "--block-signal --list-signal-handling",
        with_arg="-u --unset -C --chdir",
        opaque_flags="-S --split-string --help --version",
        assignments=True,
        chdir="-C --chdir",
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
        flags="-A -b -E -H -n -P -S -k -K -N --askpass --background --preserve-env --set-home "
        "--non-interactive --preserve-groups --stdin --reset-timestamp --remove-timestamp "
        "--no-update --",
        with_arg="-C -D -g -p -R -r -T -t -U -u --close-from --chdir --group --prompt "
        "--chroot --role --type --command-timeout --other-user --user",
        # ``-h`` is help alone and a host with an argument: not followed.
        opaque_flags="-e --edit -s --shell -i --login -l --list -v --validate -V --version "
        "-h --help --host",
        assignments=True,
        chdir="-D --chdir",
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
        flags="-a --append -e --return -f --flush -q --quiet -E --echo -t --timing",
        with_arg="-T --log-timing -I --log-in -O --log-out -B --log-io -m "
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
        chdir="-w --wd",
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
    # Affinity, scheduling and I/O-free wrappers: the same command, the same privileges.
    "taskset": _w(
        flags="-a --all-tasks -c --cpu-list",
        opaque_flags="-p --pid -h --help -V --version",
        positionals=1,
        transparent=True,
    ),
    "chrt": _w(
        flags="-a --all-tasks -b --batch -d --deadline -f --fifo -i --idle -o --other -r --rr "
        "-R --reset-on-fork -v --verbose -e --ext",
        with_arg="-T --sched-runtime -P --sched-period -D --sched-deadline",
        opaque_flags="-p --pid -m --max -h --help -V --version",
        positionals=1,
        transparent=True,
    ),
    "eatmydata": _w(transparent=True),
    "dumb-init": _w(flags="-c --single-child -v --verbose", with_arg="-r --rewrite"),
    "tini": _w(flags="-s -v -g -w -l", with_arg="-p -e", opaque_flags="-h --version"),
    # Other users or privileges.
    "runuser": _w(
        flags="- -l --login -m -p --preserve-environment -P --pty -f --fast",
        with_arg="-s --shell -g --group -G --supp-group -w --whitelist-environment",
        script_flags="-c --command --session-command",
        needs_script=True,  # ``runuser -u user cmd`` too: not followed, so never allowed
    ),
    "setpriv": _w(
        flags="--nnp --no-new-privs --clear-groups --keep-groups --init-groups --reset-env",
        with_arg="--reuid --regid --ruid --rgid --euid --egid --groups --inh-caps "
        "--ambient-caps --bounding-set --securebits --pdeathsig --selinux-label "
        "--apparmor-profile",
        opaque_flags="-d --dump -h --help -V --version --landlock-access --landlock-rule "
        "--seccomp-filter",
    ),
    "prlimit": _w(any_long=True, opaque_flags="-p --pid -h --help -V --version"),
    "pkexec": _w(
        flags="--disable-internal-agent --keep-cwd",
        with_arg="--user",
        opaque_flags="--version --help",
    ),
    # ``sg GROUP [-c] COMMAND``: the command is a string the shell runs.
    "sg": _w(flags="-", positionals=1, script_flags="-c", joins_script=True),
    "caffeinate": _w(flags="-d -i -m -s -u", with_arg="-t -w", transparent=True),
    "numactl": _w(
        flags="-l --localalloc -a --all -b --balancing",
        with_arg="-N --cpunodebind -m --membind -C --physcpubind -i --interleave -p --preferred "
        "-P --preferred-many -w --weighted-interleave",
        stop_flags="-s --show -H --hardware",
        opaque_flags="-h --help -V --version",
        transparent=True,
    ),
    # Namespaces, control groups, containers and sandboxes: the command runs with other mounts,
    # users or limits, so allow rules never see through them (deny and ask rules do). Where
    # the options are many or take more than one word (bwrap's ``--bind SRC DEST``), none is
    # followed: any option makes the command unknown (refused where deny rules exist).
    "nsenter": _w(
        flags="-a --all -m --mount -u --uts -i --ipc -n --net -p --pid -C --cgroup -U --user "
        "-T --time -F --no-fork -Z --follow-context --preserve-credentials --user-parent "
        "-e --env -c --join-cgroup -r --root -w --wd",
        with_arg="-t --target -S --setuid -G --setgid -W --wdns -N --net-socket",
        opaque_flags="-h --help -V --version",
    ),
    "systemd-run": _w(
        flags="--user --system --scope -r --remain-after-exit -t --pty -T --pty-late -P --pipe "
        "-q --quiet -v --verbose -G --collect --wait -d --same-dir --no-block "
        "--no-ask-password --send-sighup --ignore-failure --on-clock-change "
        "--on-timezone-change --slice-inherit",
        with_arg="-H --host -M --machine -u --unit -p --property --description --slice "
        "-E --setenv --uid --gid --nice --working-directory --service-type --on-active "
        "--on-boot --on-startup --on-unit-active --on-unit-inactive --on-calendar "
        "--path-property --socket-property --timer-property",
        opaque_flags="-S --shell -h --help --version",
        chdir="--working-directory",
    ),
    "cgexec": _w(flags="--sticky", with_arg="-g", opaque_flags="-h --help"),
    "daemonize": _w(flags="-a -v", with_arg="-c -e -o -p -l -u -E", chdir="-c"),
    "bwrap": _w(),
    "firejail": _w(),
    "nsjail": _w(),
    "systemd-nspawn": _w(),
    "capsh": _w(),  # ``capsh -- -c SCRIPT``: what follows ``--`` is bash's
    "start-stop-daemon": _w(),
    "chpst": _w(),
    "setarch": _w(
        flags="-R --addr-no-randomize -3 --3gb -v --verbose -B --32bit -F --fdpic-funcptrs "
        "-I --short-inode -L --addr-compat-layout -S --whole-seconds -T --sticky-timeouts "
        "-X --read-implies-exec -Z --mmap-page-zero --4gb --uname-2.6",
        stop_flags="--list",
        opaque_flags="-h --help -V --version",
        positionals_first=1,
        transparent=True,
    ),
    "linux32": _w(flags="-R --addr-no-randomize -3 --3gb -v --verbose", transparent=True),
    "linux64": _w(flags="-R --addr-no-randomize -3 --3gb -v --verbose", transparent=True),
    # Programs that run the command their remaining words name, in another security context,
    # session, display, lock, clock or under a watchdog: deny and ask rules see through them,
    # allow rules do not. Where the options vary (``runcon CONTEXT`` or ``runcon -t T``), any
    # option is unknown.
    "toybox": _w(transparent=True),  # ``toybox rm x``, as ``busybox``
    "runcon": _w(positionals=1),
    "ssh-agent": _w(flags="-c -s -D -d", with_arg="-a -E -O -P -t", stop_flags="-k"),
    "dbus-run-session": _w(with_arg="--config-file --dbus-daemon", opaque_flags="--help --version"),
    "dbus-launch": _w(
        flags="--sh-syntax --csh-syntax --auto-syntax --exit-with-session --exit-with-x11 "
        "--binary-syntax --close-stderr",
        with_arg="--config-file --autolaunch",
        opaque_flags="--help --version",
    ),
    "xvfb-run": _w(
        flags="-a --auto-servernum -l --listen-tcp",
        with_arg="-e --error-file -f --auth-file -n --server-num -p --xauth-protocol "
        "-s --server-args -w --wait",
        opaque_flags="-h --help",
    ),
    "sshpass": _w(flags="-e -v", with_arg="-f -d -p -P", opaque_flags="-h -V"),
    "chronic": _w(flags="-e -v"),
    "ifne": _w(flags="-n"),
    "nocache": _w(with_arg="-n"),
    "faketime": _w(flags="-m -f", with_arg="-p", positionals=1),
    "catchsegv": _w(),
    "rlwrap": _w(),
    "aa-exec": _w(
        flags="-i -v -d --immediate --verbose --debug",
        with_arg="-p -n --profile --namespace",
        opaque_flags="-h --help",
    ),
    "systemd-inhibit": _w(
        flags="--no-pager --no-legend",
        with_arg="--what --who --why --mode",
        opaque_flags="--list -h --help --version",
    ),
    "flatpak-spawn": _w(),
    "lckdo": _w(flags="-w -q", with_arg="-W", positionals=1),
    "trickle": _w(flags="-v -V -s", with_arg="-d -u -w -t -l -n", opaque_flags="-h"),
    "cpulimit": _w(
        flags="-v --verbose -z --lazy -i --include-children -q --quiet -k --kill -r --restore",
        with_arg="-l --limit",
        opaque_flags="-p --pid -e --exe -P --path -h --help",
    ),
    # ``entr -s 'cmd'`` and ``watchexec 'cmd'`` hand a string to a shell.
    "entr": _w(flags="-a -c -d -n -p -r -z", script_flags="-s"),
    "watchexec": _w(joins_script=True),
}


def is_assignment(word: Word) -> bool:
    """An argument ``env`` or ``sudo`` takes as ``NAME=VALUE`` before the command: like them,
    any argument (as the program receives it) with an ``=`` in it, whatever the NAME."""
    return not word.dynamic and "=" in word.value


def unwrap(words: tuple[Word, ...], wrapper: Wrapper) -> Unwrapped | None:
    """What the wrapper ``words[0]`` runs; None when an option cannot be followed."""
    chdir: Word | None = None
    i = 1 + wrapper.positionals_first
    while i < len(words):
        word = words[i]
        if word.dynamic:
            return None
        arg = word.value
        if arg == "--":
            i += 1
            break
        if not arg.startswith("-") or (arg == "-" and "-" not in wrapper.flags):
            if wrapper.assignments and is_assignment(word):
                return Unwrapped(words[i:], None, chdir)
            break
        if arg in wrapper.stop_flags:
            return Unwrapped(())
        if arg.startswith("--") and len(arg) > 2:
            name, eq, value = arg.partition("=")
            option = _long_option(name, wrapper)
            if option is None:
                return None
            argument = Word(value, value) if eq else None
            step = 1
            if option in wrapper.with_arg and not eq:
                if i + 1 >= len(words):
                    return None
                argument, step = words[i + 1], 2
        else:
            parsed = _short_options(words, i, wrapper)
            if parsed is None:
                return None
            option, argument, step = parsed
        if option in wrapper.stop_flags:
            return Unwrapped(())
        if option in wrapper.opaque_flags:
            return None
        if option in wrapper.script_flags:
            if argument is None:
                if i + 1 >= len(words):
                    return None
                argument = words[i + 1]
            return Unwrapped((), argument, chdir)
        if option in wrapper.chdir:
            chdir = argument
        i += step
    i += wrapper.positionals
    if i < len(words) and wrapper.script_flags:  # ``flock FILE -c SCRIPT``
        arg = words[i].value
        option = arg.split("=", 1)[0] if arg.startswith("--") else arg[:2]
        if option in wrapper.script_flags and not words[i].dynamic:
            script = _script_argument(words, i, arg)
            return None if script is None else Unwrapped((), script, chdir)
    inner = words[i:] if i <= len(words) else ()
    if inner and inner[0].value.startswith("-"):
        return None  # an option where the program should be: an option we do not know
    return Unwrapped(inner, None, chdir)


def _long_option(name: str, wrapper: Wrapper) -> str | None:
    """The long option ``name`` stands for: itself, or the one option it abbreviates
    (getopt_long); None when it is unknown or ambiguous."""
    known = wrapper.long_options()
    if name in known:
        return name
    if wrapper.any_long:
        return name
    matches = [option for option in known if option.startswith(name)]
    return matches[0] if len(matches) == 1 else None


def _script_argument(words: tuple[Word, ...], i: int, arg: str) -> Word | None:
    """``-c SCRIPT``, ``-cSCRIPT``, ``--command=SCRIPT`` or ``--command SCRIPT``."""
    if arg.startswith("--") and "=" in arg:
        value = arg.split("=", 1)[1]
        return Word(value, value)
    if not arg.startswith("--") and len(arg) > 2:
        return Word(arg[2:], arg[2:])
    if i + 1 >= len(words):
        return None
    return words[i + 1]


def _short_options(
    words: tuple[Word, ...], i: int, wrapper: Wrapper
) -> tuple[str, Word | None, int] | None:
    """A ``-abc`` cluster at ``words[i]``: the option that decides (the one taking an argument,
    or one we cannot follow, else the last), its argument, and how many words it spans. None
    for an unknown option."""
    arg = words[i].value
    if arg in wrapper.flags:
        return arg, None, 1
    if wrapper.numeric_flags and arg[1:].isdigit():  # ``nice -10``
        return arg, None, 1
    for k in range(1, len(arg)):
        option = "-" + arg[k]
        if option in wrapper.with_arg or option in wrapper.script_flags:
            if k + 1 < len(arg):
                rest = arg[k + 1 :]
                return option, Word(rest, rest), 1
            if i + 1 >= len(words):
                return None
            return option, words[i + 1], 2
        if option in wrapper.stop_flags or option in wrapper.opaque_flags:
            return option, None, 1
        if option not in wrapper.flags:
            return None
    return arg, None, 1
