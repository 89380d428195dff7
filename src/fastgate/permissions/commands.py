"""From a command line to the facts permission rules are matched against.

Each simple command (substitutions included) becomes one ``CommandFacts``:

- ``forms``: the command's words as written, then each form revealed by unwrapping a wrapper
  (``sudo -u x env A=1 nice -n 5 rm`` → ... → ``rm``). DENY and ASK rules match any form, with the
  program compared by basename (``/bin/rm`` is ``rm``) and unknown words counting as a match.
- ``allow_forms``: the forms reached through wrappers that run the same command with the same
  privileges (``time``, ``nice``, ``timeout``, ...). ALLOW rules must match one of them exactly,
  program spelling included (``./npm`` is not ``npm``).
- ``allowable``: False when something besides the words has an effect no word rule describes (an
  output or input redirection to a file, an assignment to ``PATH``, ``LD_PRELOAD``, ...).
- ``unknown``: the program cannot be known statically (``$X args``, ``eval "$x"``, a shell
  reading its script from a pipe, a wrapper option we do not know).

Nested shells (``bash -c '...'``, ``eval '...'``, ``find -exec``, a heredoc fed to a shell) are
parsed again and contribute commands of their own.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from fastgate.permissions.shell import (
    Redirect,
    ShellSyntaxError,
    SimpleCommand,
    Word,
    parse_command,
)

SHELLS = frozenset(
    {"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "yash", "fish", "csh", "tcsh", "rbash"}
)
# Builtins that can make a name run something else later in the same script.
REDEFINERS = frozenset({"alias", "hash", "enable"})
SCRIPT_RUNNERS = frozenset({"source", "."})
# Variables that change which program runs or what it loads: an assignment to one of them is
# never covered by a rule about the command's words.
DANGEROUS_VARIABLES = frozenset(
    {
        "PATH",
        "BASH_ENV",
        "ENV",
        "IFS",
        "PS4",
        "SHELLOPTS",
        "BASHOPTS",
        "PROMPT_COMMAND",
        "CDPATH",
        "GLOBIGNORE",
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "NODE_OPTIONS",
        "PERL5OPT",
        "RUBYOPT",
        "GIT_SSH_COMMAND",
        "GIT_EXEC_PATH",
    }
)
HARMLESS_TARGETS = frozenset({"/dev/null", "/dev/stdin", "/dev/stdout", "/dev/stderr"})
_MAX_NESTING = 16


@dataclass(frozen=True, slots=True)
class _Wrapper:
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


def _w(**kw: object) -> _Wrapper:
    sets = {k: frozenset(str(v).split()) for k, v in kw.items() if isinstance(v, str)}
    rest = {k: v for k, v in kw.items() if not isinstance(v, str)}
    return _Wrapper(**sets, **rest)  # type: ignore[arg-type]


WRAPPERS: dict[str, _Wrapper] = {
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


@dataclass(frozen=True, slots=True)
class CommandFacts:
    forms: tuple[tuple[Word, ...], ...]
    allow_forms: tuple[tuple[Word, ...], ...]
    allowable: bool
    unknown: bool
    delegated: bool  # a nested shell whose own commands are listed separately
    path_words: tuple[Word, ...]
    why_not_allowable: str = ""


@dataclass(frozen=True, slots=True)
class CommandAnalysis:
    commands: tuple[CommandFacts, ...]
    normalized: str
    error: str | None = None  # set when the command could not be parsed

    @property
    def has_unknown(self) -> bool:
        return self.error is not None or any(c.unknown for c in self.commands)


def analyze_command(text: str) -> CommandAnalysis:
    """Parse and unwrap ``text``; never raises (a parse error is recorded in ``error``)."""
    normalized = " ".join(text.split())
    try:
        simple, normalized = parse_command(text)
        out: list[CommandFacts] = []
        for cmd in simple:
            _analyze(cmd, out, 0)
    except ShellSyntaxError as exc:
        return CommandAnalysis((), normalized, str(exc))
    except RecursionError:
        return CommandAnalysis((), normalized, "nesting too deep")
    return CommandAnalysis(tuple(out), normalized)


def program_name(word: Word) -> str:
    """The program a command word names: its basename (``/bin/rm`` → ``rm``)."""
    return os.path.basename(word.value) or word.value


def _analyze(cmd: SimpleCommand, out: list[CommandFacts], depth: int) -> None:
    if depth > _MAX_NESTING:
        raise ShellSyntaxError("commands nested too deeply")
    blocker = _assignment_blocker(cmd.assignments) or _redirect_blocker(cmd.redirects)
    path_words = [w for w in cmd.words[1:]] + [
        r.target for r in cmd.redirects if r.target is not None and r.op != "<<<"
    ]
    words = tuple(cmd.words)
    if not words:
        if blocker:
            out.append(CommandFacts((), (), False, False, False, tuple(path_words), blocker))
        return
    forms = [words]
    allow_forms = [words]
    transparent = True
    unknown = False
    delegated = False
    current = words
    for _ in range(_MAX_NESTING):
        program = current[0]
        if program.dynamic or program.value.startswith("-"):
            unknown = True  # not known, or an option left over from a wrapper we misread
            break
        name = program_name(program)
        if name in SHELLS:
            result = _nested_shell(current[1:], cmd, out, depth)
            unknown = result is None
            delegated = result is True
            break
        if name == "eval":
            unknown = not _nested_script(current[1:], out, depth)
            delegated = not unknown
            break
        if name == "find":
            _find_exec(current, out, depth)
            break
        wrapper = WRAPPERS.get(name)
        if wrapper is None:
            unknown = name in REDEFINERS or (
                name in SCRIPT_RUNNERS and _sourced_script_unknown(current[1:], cmd, out, depth)
            )
            break
        unwrapped = _unwrap(current, wrapper)
        if unwrapped is None:  # an option we cannot follow
            unknown = True
            break
        inner, script = unwrapped
        if script is not None or wrapper.joins_script:
            words_of_script = (script,) if script is not None else inner
            unknown = not _nested_script(words_of_script, out, depth)
            delegated = not unknown
            transparent = transparent and wrapper.transparent
            break
        if wrapper.needs_script:
            unknown = True
            break
        if not inner:  # nothing runs (``command -v x``, ``env`` alone)
            break
        leading = 0
        while leading < len(inner) and _is_assignment(inner[leading]):
            leading += 1
        blocker = blocker or _assignment_blocker(list(inner[:leading]))
        inner = inner[leading:]
        if not inner:
            break
        current = inner
        forms.append(current)
        transparent = transparent and wrapper.transparent
        if transparent:
            allow_forms.append(current)
    else:
        unknown = True
    out.append(
        CommandFacts(
            tuple(forms),
            tuple(allow_forms),
            not blocker,
            unknown,
            delegated and transparent,
            tuple(path_words),
            blocker,
        )
    )


def _is_assignment(word: Word) -> bool:
    name, eq, _ = word.raw.partition("=")
    return bool(eq) and name.isidentifier() and not word.raw.startswith("-")


def _unwrap(
    words: tuple[Word, ...], wrapper: _Wrapper
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
        if wrapper.assignments and _is_assignment(word):
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


def _short_options(arg: str, wrapper: _Wrapper) -> int | None:
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


def _nested_script(args: tuple[Word, ...], out: list[CommandFacts], depth: int) -> bool:
    """``eval a b c``: the words joined are a script. False when they are not all literal."""
    if any(w.dynamic for w in args):
        return False
    _analyze_text(" ".join(w.value for w in args), out, depth)
    return True


def _sourced_script_unknown(
    args: tuple[Word, ...], cmd: SimpleCommand, out: list[CommandFacts], depth: int
) -> bool:
    """``source FILE``: a file on disk is a normal program; a script from a pipe, a
    substitution or standard input is unknown unless it is a heredoc we can read."""
    if not args:
        return True
    target = args[0]
    if target.dynamic:
        return True
    if target.value in ("/dev/stdin", "/proc/self/fd/0", "/dev/fd/0", "-"):
        return _nested_shell((), cmd, out, depth) is None
    return target.value.startswith(("/dev/fd/", "/proc/"))


def _nested_shell(
    args: tuple[Word, ...], cmd: SimpleCommand, out: list[CommandFacts], depth: int
) -> bool | None:
    """``sh [opts] -c SCRIPT``: True when the script was parsed, False for ``sh script.sh``
    (a normal program), None when the script is not known statically."""
    has_c = False
    i = 0
    while i < len(args):
        word = args[i]
        value = word.value
        if word.dynamic:
            return None  # an option or a script name we cannot read
        if value in ("-", "--"):
            i += 1
            break
        if not value.startswith(("-", "+")):
            break
        if value in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
            i += 2
            continue
        if not value.startswith("--") and "c" in value[1:]:
            has_c = True
        i += 1
    operands = args[i:]
    if has_c:
        if not operands or operands[0].dynamic:
            return None
        _analyze_text(operands[0].value, out, depth)
        return True
    if operands:
        return False
    # The script comes from standard input: only a heredoc or here-string we can read is known.
    # A heredoc or here-string replaces a pipe as standard input; a file or a pipe is unknown.
    sources = [r for r in cmd.redirects if r.op in ("<<", "<<-", "<<<", "<", "<>", "<&")]
    if len(sources) != 1 or sources[0].op not in ("<<", "<<-", "<<<"):
        return None
    source = sources[0]
    if source.body is not None:
        _analyze_text(source.body, out, depth)
        return True
    if source.target is None or source.target.dynamic:
        return None
    _analyze_text(source.target.value, out, depth)
    return True


def _find_exec(words: tuple[Word, ...], out: list[CommandFacts], depth: int) -> None:
    i = 1
    while i < len(words):
        if words[i].value in ("-exec", "-execdir", "-ok", "-okdir") and not words[i].dynamic:
            j = i + 1
            while j < len(words) and words[j].value not in (";", "+"):
                j += 1
            if j > i + 1:
                _analyze(SimpleCommand(words=list(words[i + 1 : j])), out, depth + 1)
            i = j
        i += 1


def _analyze_text(text: str, out: list[CommandFacts], depth: int) -> None:
    if depth + 1 > _MAX_NESTING:
        raise ShellSyntaxError("commands nested too deeply")
    simple, _ = parse_command(text)
    for cmd in simple:
        _analyze(cmd, out, depth + 1)


def _assignment_blocker(assignments: list[Word]) -> str:
    for word in assignments:
        name = word.raw.partition("=")[0].rstrip("+")
        if name in DANGEROUS_VARIABLES or name.startswith(("LD_", "DYLD_")):
            return f"assigns {name}"
    return ""


def _redirect_blocker(redirects: list[Redirect]) -> str:
    for r in redirects:
        target = r.target
        if target is None or r.op == "<<<":
            continue  # heredocs and here-strings are data, not files
        if (
            r.op in ("<&", ">&")
            and not target.dynamic
            and (target.value == "-" or target.value.isdigit())
        ):
            continue  # descriptor duplication
        if not target.dynamic and (
            target.value in HARMLESS_TARGETS or target.value.startswith("/dev/fd/")
        ):
            continue
        return f"redirects to {target.text}"
    return ""
