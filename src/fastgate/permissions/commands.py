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
- ``unknown``: what runs cannot be known statically (``$X args``, ``eval "$x"``, a shell
  reading its script from a pipe, a wrapper option we do not know, and every way bash evaluates
  text as code: the lexer's hazards, ``trap "$x"``, ``let``, ``declare -i``, ``mapfile -C``,
  names with subscripts given to ``read``/``printf -v``/``unset``/``test -v``, assignments to
  variables holding code such as ``PS4`` or ``BASH_FUNC_x%%``, a run-time word in ``find``'s
  expression, ``{}`` as ``find -exec``'s or ``xargs -I``'s program). ``why_unknown`` says which.

Nested shells (``bash -c '...'``, ``eval '...'``, ``trap '...' EXIT``, ``find -exec``, a heredoc
fed to a shell) are parsed again and contribute commands of their own. A shell reading its
script from a descriptor (``sh -s``, ``sh -``, ``/dev/stdin``, ``/dev/fd/N``,
``/proc/self/fd/N``) runs what that descriptor holds: a heredoc or here-string on it is parsed
as the script; anything else (a pipe, a file, an inherited descriptor) is unknown.

A heredoc or here-string fed to any other program is data, like a file it reads: the program's
own words decide, and the substitutions of an unquoted body are commands of their own.

What git runs for its options and subcommands (``rebase -x``, ``bisect run``, ``--upload-pack``,
...) and the command lines of other programs' options (``tar --to-command``, ``rsync -e``, ``ssh
-o ProxyCommand=``) are commands of their own too; ``git -c`` with a key that may run code is
unknown; a runner's subcommand (``uv run``, ``bundle exec``) gives deny and ask rules every run
of its words as a possible command. A command the lexer refuses keeps its error (never
allowed) and one salvaged fact whose words are every token of its text, so sensitive and
protected paths are still seen.

A program the same line copies or links into place (``ln -s /usr/bin/git g && ./g``) is judged
as what it copies too, and one the line writes otherwise is unknown; ``linked_programs`` does
the same, at decision time, for a program path that is a link on disk.

Each command also records where it runs (``bases``, see ``places``: ``cd`` and its kin move
it) and which of its words it writes to (``write_words``, see ``writes``; redirection targets
included), so relative words name the files bash would open.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import re
import stat
from dataclasses import dataclass

from fastgate.permissions.places import (
    DIRECTORY_CHANGERS,
    NOWHERE,
    START,
    DirectoryTracker,
    Place,
)
from fastgate.permissions.shell import (
    Redirect,
    ShellSyntaxError,
    SimpleCommand,
    Word,
    ansi_escape,
    parse_command,
)
from fastgate.permissions.wrappers import WRAPPERS, is_assignment, unwrap
from fastgate.permissions.writes import (
    GIT_HARMLESS_KEYS,
    git_directory_words,
    guessed_words,
    made_files,
    takes_operands,
    tree_words,
    written_words,
)

SHELLS = frozenset(
    {
        "sh",
        "bash",
        "zsh",
        "dash",
        "ksh",
        "ksh93",
        "mksh",
        "lksh",
        "oksh",
        "pdksh",
        "ash",
        "hush",
        "posh",
        "yash",
        "fish",
        "csh",
        "tcsh",
        "rbash",
        "osh",  # Oils: bash's language
        "ysh",
        "bash-static",
        "zsh-static",
    }
)
# Wrappers that run a builtin in the shell itself: ``command cd x`` moves the shell; ``env cd``
# runs a program of that name, which cannot.
SAME_SHELL_WRAPPERS = frozenset({"command", "builtin", "time"})
# Builtins that can make a name run something else later in the same script.
REDEFINERS = frozenset({"alias", "hash", "enable"})
SCRIPT_RUNNERS = frozenset({"source", "."})
# Variables a command may assign and still be covered by a rule about its words: they change
# how a program formats or stamps its work, never which program runs, what it loads or which
# configuration it reads. Any other assignment (``PATH``, ``LD_*``, ``NODE_OPTIONS``, ``HOME``,
# ``GIT_CONFIG_*``, ``TAR_OPTIONS``, ... : there are too many that change what runs to list them)
# keeps the command from matching an allow rule.
HARMLESS_VARIABLES = frozenset(
    {
        "LANG",
        "LANGUAGE",
        "TZ",
        "TERM",
        "COLUMNS",
        "LINES",
        "NO_COLOR",
        "FORCE_COLOR",
        "CLICOLOR",
        "CLICOLOR_FORCE",
        "CI",
        "DEBUG",
        "VERBOSE",
        "SOURCE_DATE_EPOCH",
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "GIT_AUTHOR_DATE",
        "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL",
        "GIT_COMMITTER_DATE",
        "GIT_TERMINAL_PROMPT",
        "GIT_OPTIONAL_LOCKS",
        "PYTHONUNBUFFERED",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONHASHSEED",
        "PYTHONIOENCODING",
        "PYTHONUTF8",
        "NODE_ENV",
        "RUST_BACKTRACE",
        "RUST_LOG",
    }
)
HARMLESS_VARIABLE_PREFIXES = ("LC_",)
# Variables whose value bash or the programs it starts run as code: assigning one (in any way:
# ``X=...``, ``export``, ``declare``, ``read``, ``env X=...``) makes the command unknown.
CODE_VARIABLES = frozenset(
    {
        "PS0",
        "PS1",
        "PS2",
        "PS3",
        "PS4",  # expanded (substitutions run) for every traced command under ``set -x``
        "PROMPT_COMMAND",
        "BASH_ALIASES",
        "BASH_CMDS",
        "BASH_ENV",
        "ENV",
        "SHELLOPTS",
        "BASHOPTS",
        "GIT_SSH_COMMAND",
        "GIT_SSH",
        "GIT_EDITOR",
        "GIT_PAGER",
        "GIT_EXTERNAL_DIFF",
        "GIT_ASKPASS",
        "SSH_ASKPASS",
        "SUDO_ASKPASS",
        "EDITOR",
        "VISUAL",
        "FCEDIT",
        "PAGER",
        "MANPAGER",
        "LESSOPEN",
        "LESSCLOSE",
        "LESS",  # ``+!cmd``: a command less runs as it starts
        # git's configuration from the environment, or from files the command names or wrote
        # (``core.fsmonitor``, ``core.pager``, aliases and hooks run code):
        "GIT_CONFIG_PARAMETERS",
        "GIT_CONFIG_COUNT",
        "GIT_CONFIG",
        "GIT_CONFIG_GLOBAL",
        "GIT_CONFIG_SYSTEM",
        "GIT_TEMPLATE_DIR",
        "GIT_PROXY_COMMAND",
        "GIT_SEQUENCE_EDITOR",
        "GIT_EXEC_PATH",  # where git finds the programs of its commands (``git-status``)
        "GIT_ALLOW_PROTOCOL",  # ``ext::CMD`` remotes run CMD once allowed
        "HOME",  # where git, npm, pip, ssh, bash and others read their configuration
        "XDG_CONFIG_HOME",
    }
)
# An exported function (``BASH_FUNC_ls%%=() { ...; }``); git's numbered configuration entries.
CODE_VARIABLE_PREFIXES = ("BASH_FUNC_", "GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_")
# Builtins that set the variables named by their arguments.
DECLARATIONS = frozenset({"declare", "typeset", "local", "export", "readonly"})
# What bash runs itself, never looking it up in ``PATH`` (``enable -n``, which could turn one
# off, makes a command unknown anyway).
SHELL_BUILTINS = frozenset(
    {
        ".", ":", "[", "[[", "alias", "bg", "bind", "break", "builtin", "caller", "cd",
        "command", "compgen", "complete", "compopt", "continue", "declare", "dirs", "disown",
        "echo", "enable", "eval", "exec", "exit", "export", "false", "fc", "fg", "getopts",
        "hash", "help", "history", "jobs", "kill", "let", "local", "logout", "mapfile", "popd",
        "printf", "pushd", "pwd", "read", "readarray", "readonly", "return", "set", "shift",
        "shopt", "source", "suspend", "test", "time", "times", "trap", "true", "type",
        "typeset", "ulimit", "umask", "unalias", "unset", "wait",
    }
)  # fmt: skip
# A value of ``PATH`` only run time knows: read (``read PATH``, ``for PATH in``), or the variable
# removed (bash then searches the working directory, and so does a bash started without it).
_PATH_AT_RUN_TIME = Word("$(PATH set when it runs)", "(PATH set when it runs)", dynamic=True)
# Ways of setting ``PATH`` the parsed commands do not show: a loop over it, ``${PATH:=x}``.
_PATH_SET_IN_TEXT = re.compile(r"\bfor\s+PATH\b|\$\{PATH:?[=?]")
HARMLESS_TARGETS = frozenset({"/dev/null", "/dev/stdin", "/dev/stdout", "/dev/stderr"})
# ``/dev/fd/N`` and nothing more: ``/dev/fd/../..`` climbs out of /dev to any file.
_DESCRIPTOR_TARGET = re.compile(r"/dev/fd/[0-9]+")
_MAX_NESTING = 16
_NAME_ARGUMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\[.*\])?(?:\+?=|$)", re.DOTALL)
_LITERAL_INDEX = re.compile(r"\[\s*-?[0-9]+\s*\]")
_HEREDOCS = frozenset({"<<", "<<-", "<<<"})
_INPUTS = frozenset({"<", "<<", "<<-", "<<<", "<>", "<&"})
_OUTPUTS = frozenset({">", ">>", ">|", "<>", "&>", "&>>", ">&"})
# Paths through which a shell reads its script from a descriptor: ``/dev/stdin``,
# ``/dev/fd/N``, ``/proc/self/fd/N``, ``/proc/thread-self/fd/N`` (also relative spellings).
_STDIN_PATH = re.compile(r"(?:^|.*/)dev/stdin")
_FD_PATH = re.compile(r"(?:^|.*/)(?:dev|proc/(?:self|thread-self)(?:/task/[^/]+)?)/fd/([0-9]+)")


@dataclass(frozen=True, slots=True)
class CommandFacts:
    forms: tuple[tuple[Word, ...], ...]
    allow_forms: tuple[tuple[Word, ...], ...]
    allowable: bool
    unknown: bool
    delegated: bool  # a nested shell whose own commands are listed separately
    path_words: tuple[Word, ...]
    why_not_allowable: str = ""
    why_unknown: str = ""
    # Where relative words are (``places.Place``): the directories it may start in, and
    # whether it may start in one known only at run time.
    bases: tuple[str, ...] = ("",)
    base_unknown: bool = False
    write_words: tuple[Word, ...] = ()  # words naming files it writes (see ``writes``)
    tree_words: tuple[Word, ...] = ()  # of those, directories whose whole tree it changes
    # The words of a program not known to write nothing (see ``writes.guessed_words``).
    guessed_write_words: tuple[Word, ...] = ()
    # Files it may leave a program in, with what they copy or link (see ``writes.made_files``).
    made: tuple[tuple[Word, tuple[Word, ...]], ...] = ()
    # The values it gives ``PATH`` (``_PATH_AT_RUN_TIME`` when only run time knows, or when it
    # removes the variable), and the program words it looks up through ``PATH``.
    path_values: tuple[Word, ...] = ()
    searched: tuple[Word, ...] = ()


@dataclass(frozen=True, slots=True)
class CommandAnalysis:
    commands: tuple[CommandFacts, ...]
    normalized: str
    error: str | None = None  # set when the command could not be parsed
    too_large: bool = False  # a brace expansion past its bound: its words cannot be checked
    path_values: tuple[Word, ...] = ()  # every value the line gives ``PATH`` (see ``searched``)

    @property
    def has_unknown(self) -> bool:
        return self.error is not None or any(c.unknown for c in self.commands)

    @property
    def why_unknown(self) -> str:
        """The first reason a command cannot be known statically ("" when every one is)."""
        return next((c.why_unknown for c in self.commands if c.unknown), "")


def analyze_command(text: str) -> CommandAnalysis:
    """Parse and unwrap ``text``; never raises (a parse error is recorded in ``error``)."""
    normalized = " ".join(text.split())
    # ``cd name`` may search ``CDPATH`` (or a variable, with ``cdable_vars``).
    searches = "CDPATH" in text or "cdable_vars" in text or bool(os.environ.get("CDPATH"))
    try:
        simple, normalized = parse_command(text)
        out: list[CommandFacts] = []
        dirs = DirectoryTracker(START, searches)
        for cmd in simple:
            _analyze(cmd, out, 0, dirs)
        _analyze_later(out, dirs)
        out = _programs_made_here(out, searches)
        values = _literal_values(simple)
        if values:
            out = [_with_values(facts, values) for facts in out]
        if "nocaseglob" in text:  # ``shopt -s nocaseglob``: ``.EN?`` matches ``.env``
            out = [_caseless(facts) for facts in out]
    except ShellSyntaxError as exc:
        return CommandAnalysis(_salvaged(text), normalized, str(exc))
    except RecursionError:
        return CommandAnalysis(_salvaged(text), normalized, "nesting too deep")
    path_values = [value for facts in out for value in facts.path_values]
    if _PATH_SET_IN_TEXT.search(text):
        path_values.append(_PATH_AT_RUN_TIME)
    return CommandAnalysis(
        tuple(out),
        normalized,
        None,
        any(c.overflow for c in simple),
        tuple(dict.fromkeys(path_values)),
    )


_SALVAGE_SEPARATORS = re.compile(r"[\s;&|()<>`]+")
_ANSI_C_QUOTE = re.compile(r"\$'((?:[^'\\]|\\.)*)'", re.DOTALL)
_DYNAMIC_CHARS = frozenset("$*?[~")
_BLIND_REDIRECT = re.compile(r">[>|]?\s*[\"']?[$`]")


def _salvaged(text: str) -> tuple[CommandFacts, ...]:
    """What a command the lexer refuses (``case``, a function, an array) may touch: every
    run of characters between blanks and operators (quotes removed), taken as a file it reads and
    writes (so sensitive and protected paths are still seen, in every mode); a word with a
    ``$`` is a write known only at run time where the text writes to such words. Never an
    allow match."""
    decoded = _ANSI_C_QUOTE.sub(lambda m: _decode_ansi_c(m.group(1)), text)
    unquoted = re.sub(r"[\\'\"]", "", decoded)  # ``".e"nv`` is ``.env``
    tokens = _SALVAGE_SEPARATORS.split(unquoted)
    words: list[Word] = []
    for token in dict.fromkeys(tokens):
        if token:
            words += _salvaged_words(token)
    words += [v for w in words for v in path_variants(w)]
    # A word known only at run time may be a file written where something writes to one: a
    # redirection to such a word, or a program known to write its operands (``cp``, ``tee``).
    blind = bool(_BLIND_REDIRECT.search(decoded)) or any(
        not w.dynamic and takes_operands(program_name(w)) for w in words
    )
    written = tuple(w for w in words if blind or not w.dynamic)
    # (never allowed all the same: the analysis keeps its parse error, and the fact is unknown)
    why = "the command cannot be parsed: its words are checked as paths it reads and writes"
    facts = CommandFacts((), (), True, True, False, tuple(words), "", why)
    return (dataclasses.replace(facts, write_words=written),)


def _salvaged_words(token: str) -> list[Word]:
    """``token`` as a word, and what brace expansion makes of it (``.{env,}``)."""
    found = [Word(token, token, any(c in _DYNAMIC_CHARS for c in token))]
    if "{" in token:
        try:
            simple, _ = parse_command(": " + token)
        except ShellSyntaxError:
            return found
        found += [w for cmd in simple for w in cmd.words[1:]]
    return found


def _decode_ansi_c(body: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(body):
        if body[i] == "\\":
            i = ansi_escape(body, i + 1, out)
        else:
            out.append(body[i])
            i += 1
    return "".join(out)


def program_name(word: Word) -> str:
    """The program a command word names: its basename (``/bin/rm`` → ``rm``)."""
    return os.path.basename(word.value) or word.value


def _analyze(
    cmd: SimpleCommand, out: list[CommandFacts], depth: int, dirs: DirectoryTracker
) -> None:
    if depth > _MAX_NESTING:
        raise ShellSyntaxError("commands nested too deeply")
    seen = dirs.place_of(cmd)
    place = seen  # where its words are: ``env -C dir`` moves the command's own
    blocker = _assignment_blocker(cmd.assignments) or _redirect_blocker(cmd.redirects)
    why_unknown = cmd.hazard or _assignment_hazard(cmd.assignments)
    path_words = [w for w in cmd.words[1:]] + [
        r.target
        for r in cmd.redirects
        if r.target is not None and r.op != "<<<" and not _is_process_substitution(r.target)
    ]
    # A value a variable takes (``x=.env``, ``for f in .env``, ``read x <<< .env``) may be the
    # file a later ``$x`` names, and an operand may hold a path after a prefix (``if=.env``):
    # checked against the sensitive and protected paths, not as files of this command itself.
    values = [_assigned_value(w) for w in cmd.assignments] + cmd.values
    values += [r.target for r in cmd.redirects if r.op == "<<<" and r.target is not None]
    values += [v for w in (*path_words, *values) for v in path_variants(w)]
    written = _redirect_writes(cmd.redirects)
    words = tuple(cmd.words)
    path_values = _path_assignments(cmd.assignments)
    if not words:
        written.extend(git_directory_words(written, []))
        dirs.ran(cmd, seen, None)
        if blocker or why_unknown or written or cmd.values or path_values:
            out.append(
                CommandFacts(
                    (),
                    (),
                    not blocker,
                    bool(why_unknown),
                    # a loop's list runs nothing: nothing for an allow rule to cover
                    bool(cmd.values) and not (blocker or why_unknown or written),
                    (*path_words, *values),
                    blocker or why_unknown,
                    why_unknown,
                    seen.bases,
                    seen.unknown,
                    tuple(written),
                    made=tuple((w, ()) for w in _redirect_writes(cmd.redirects)),
                    path_values=tuple(path_values),
                )
            )
        return
    forms = [words]
    allow_forms = [words]
    transparent = True
    delegated = False
    same_shell = True  # every wrapper so far runs a builtin in this shell
    moved: Place | None = None  # where a ``cd`` (or a script run in this shell) leads
    current = words
    searched: list[Word] = []
    standard_path = False  # ``command -p``: its program is found in the system's directories
    for _ in range(_MAX_NESTING):
        program = current[0]
        if program.dynamic or program.value.startswith("-"):
            # not known, or an option left over from a wrapper we misread
            dirs.may_turn_physical()  # it may be a ``set -P``
            why_unknown = why_unknown or f"the program `{program.raw}` is known only at run time"
            break
        name = program_name(program)
        if "/" not in program.value and not standard_path and name not in SHELL_BUILTINS:
            searched.append(program)
        standard_path = False
        if name in DIRECTORY_CHANGERS:
            if same_shell:
                moved = dirs.moved_by(cmd, name, current[1:], seen)
            break
        if name == "set" and _may_set_physical(current[1:]):
            dirs.may_turn_physical()
        if name in SHELLS:
            result = _nested_shell(current[1:], cmd, out, depth, dirs, place)
            if result is None:
                why_unknown = why_unknown or f"{name} reads a script not known in advance"
            delegated = result is True
            break
        if name == "trap":
            # the action runs later, wherever the shell is by then: analyzed at the end
            code = _trap_action(current[1:])
            if any(w.dynamic for w in code):
                why_unknown = why_unknown or "trap runs text known only at run time"
            elif code:
                dirs.later.append((" ".join(w.value for w in code), depth))
            delegated = bool(code) and not why_unknown
            break
        if name == "eval":  # runs its text here and now, in this shell
            end = _nested_script(current[1:], out, depth, dirs, place) if current[1:] else None
            if current[1:] and end is None:
                why_unknown = why_unknown or "eval runs text known only at run time"
            elif end is not None and same_shell:
                moved = end
            delegated = len(current) > 1 and not why_unknown
            break
        if name == "find":
            why_unknown = why_unknown or _find_exec(current, out, depth, dirs, place)
            break
        if name.startswith("git-") and len(name) > 4:
            # ``/usr/lib/git-core/git-push`` is ``git push`` (for deny and ask rules)
            current = (Word("git", "git"), Word(name[4:], name[4:]), *current[1:])
            forms.append(current)
            name = "git"
        if name == "git":
            why_unknown = why_unknown or _git_nested(current, out, depth, dirs, place)
            break
        if name in EXEC_OPTIONS:
            why_unknown = why_unknown or _exec_options(name, current, out, depth, dirs, place)
        if name == "ip" and _ip_may_exec(current[1:]):
            why_unknown = why_unknown or "ip may run a command in a namespace (netns/vrf exec)"
            break
        wrapper = WRAPPERS.get(name)
        if wrapper is None:
            forms.extend(_runner_forms(name, current))
            why_unknown = why_unknown or _builtin_hazard(name, current[1:])
            if name in REDEFINERS:
                why_unknown = why_unknown or f"{name} can change what a name runs"
            elif name in SCRIPT_RUNNERS:
                sourced = _sourced_script(current[1:], cmd, out, depth, dirs, place)
                if sourced is None:
                    why_unknown = why_unknown or f"{name} reads a script not known in advance"
                elif sourced is not START and same_shell:
                    moved = sourced
            if name in DECLARATIONS:
                blocker = blocker or _declaration_blocker(current[1:])
            path_values += _path_builtin_values(name, current[1:])
            break
        unwrapped = unwrap(current, wrapper)
        if unwrapped is None:  # an option we cannot follow
            why_unknown = why_unknown or f"an option of {name} that cannot be followed"
            break
        inner, script = unwrapped.inner, unwrapped.script
        options = current[1 : len(current) - len(inner)]
        standard_path = name == "command" and any(_has_option(w, "p") for w in options)
        if name == "env" and _env_drops_path(options, inner):
            path_values.append(_PATH_AT_RUN_TIME)
        same_shell = same_shell and name in SAME_SHELL_WRAPPERS
        if unwrapped.chdir is not None:
            chdir = unwrapped.chdir
            place = place | (NOWHERE if chdir.dynamic else place.moved(chdir.value))
        if name == "xargs" and inner:
            inner = _xargs_command(current[1 : len(current) - len(inner)], inner)
        if script is not None or wrapper.joins_script:
            words_of_script = (script,) if script is not None else inner
            if _nested_script(words_of_script, out, depth, dirs, place) is None:
                why_unknown = why_unknown or f"{name} runs a script known only at run time"
            delegated = not why_unknown
            transparent = transparent and wrapper.transparent
            break
        if wrapper.needs_script:
            why_unknown = why_unknown or f"{name} without a script runs a shell"
            break
        if not inner:  # nothing runs (``command -v x``, ``env`` alone)
            break
        leading = 0
        while leading < len(inner) and is_assignment(inner[leading]):
            leading += 1
        blocker = blocker or _assignment_blocker(list(inner[:leading]))
        path_values += _path_assignments(list(inner[:leading]))
        why_unknown = why_unknown or _assignment_hazard(list(inner[:leading]))
        inner = inner[leading:]
        if not inner:
            break
        current = inner
        forms.append(current)
        transparent = transparent and wrapper.transparent
        if transparent:
            allow_forms.append(current)
    else:
        why_unknown = why_unknown or "wrappers nested too deeply"
    dirs.ran(cmd, seen, moved)
    trees: list[Word] = []
    guessed: list[Word] = []
    made: list[tuple[Word, tuple[Word, ...]]] = [(w, ()) for w in written]
    for form in forms:
        made.extend(made_files(form))
        written.extend(written_words(form))
        trees.extend(tree_words(form))
        guessed.extend(guessed_words(form))
    if _fed_by_xargs(forms) and takes_operands(program_name(current[0])):
        written.append(_XARGS_INPUT)  # xargs appends operands known only at run time
    written.extend(git_directory_words(written, trees))
    if place.unknown and not blocker:
        relative = next((w for w in (*path_words, *written) if _is_relative(w)), None)
        if relative is not None:
            blocker = (
                f"runs in a directory known only at run time, so `{relative.text}` names a "
                "file not known in advance"
            )
    out.append(
        CommandFacts(
            tuple(forms),
            tuple(allow_forms),
            not blocker,
            bool(why_unknown),
            delegated and transparent,
            (*path_words, *values),
            blocker,
            why_unknown,
            place.bases,
            place.unknown,
            tuple(dict.fromkeys(written)),
            tuple(dict.fromkeys(trees)),
            tuple(dict.fromkeys(guessed)),
            tuple(dict.fromkeys(made)),
            tuple(dict.fromkeys(path_values)),
            tuple(searched),
        )
    )


# Tools whose subcommand runs the command its remaining words name (``uv run rm x``,
# ``bundle exec rm x``, ``perf stat rm x``), after options of their own we do not model.
RUNNERS: dict[str, frozenset[str]] = {
    name: frozenset(subcommands.split())
    for name, subcommands in {
        "uv": "run",
        "poetry": "run",
        "pipenv": "run",
        "pdm": "run",
        "hatch": "run",
        "rye": "run",
        "conda": "run",
        "mamba": "run",
        "micromamba": "run",
        "pixi": "run exec",
        "bundle": "exec",
        "npm": "exec",
        "pnpm": "exec dlx",
        "yarn": "exec",
        "mise": "exec x",
        "asdf": "exec",
        "direnv": "exec",
        "perf": "stat record trace",
    }.items()
}
_MAX_RUNNER_FORMS = 64


def _runner_forms(name: str, words: tuple[Word, ...]) -> list[tuple[Word, ...]]:
    """For deny and ask rules, what ``uv run [opts] CMD`` may run: every run of its words
    after the subcommand that starts with a word that is not an option (its options are not
    modelled, so an option's argument is taken as a possible program too: more is checked)."""
    subcommands = RUNNERS.get(name)
    if subcommands is None:
        return []
    k = 1
    while k < len(words) and not words[k].dynamic and words[k].value.startswith("-"):
        k += 1  # the tool's own options (``uv --quiet run``)
    if k >= len(words) or (not words[k].dynamic and words[k].value not in subcommands):
        return []
    return [
        words[j:]
        for j in range(k + 1, min(len(words), k + 1 + _MAX_RUNNER_FORMS))
        if words[j].dynamic or not words[j].value.startswith("-")
    ]


_XARGS_INPUT = Word("$(the words xargs reads)", "(the words xargs reads)", dynamic=True)


def _fed_by_xargs(forms: list[tuple[Word, ...]]) -> bool:
    return any(not f[0].dynamic and program_name(f[0]) == "xargs" for f in forms[:-1])


_MAX_ALIASES = 16  # programs judged under another name, per command line


def _file_name(value: str) -> str:
    name = os.path.basename(os.path.normpath(value)) if value else ""
    return "" if name in ("", ".", "..", "/") else name


def _programs_made_here(out: list[CommandFacts], searches: bool) -> list[CommandFacts]:
    """A program the same line puts in place runs under a name the rules do not know
    (``ln -s /usr/bin/git g && ./g tag v1``): run through a copy or link of known files, it is
    judged as each of them too (commands of their own); a file the line wrote otherwise holds
    a program known only when it runs. Files are matched by name (a directory in between is
    not followed), so another directory's file of that name counts too."""
    made: dict[str, list[tuple[Word, ...]]] = {}
    for facts in out:
        for word, sources in facts.made:
            name = _file_name(word.value)
            if name and not word.dynamic:
                made.setdefault(name, []).append(sources)
    if not made:
        return out
    result: list[CommandFacts] = []
    pending = list(out)
    judged: set[tuple[Word, ...]] = set()
    while pending:
        facts = pending.pop(0)
        why = ""
        for form in facts.forms:
            program = form[0] if form else None
            if program is None or program.dynamic:
                continue
            # The program itself (at 0), then each script an interpreter among its words runs
            # (at -1: a file named after a word, as ``python -m mod`` reads ``mod.py``, which
            # cannot be put in the word's place).
            for index, word in ((0, program), *_script_words(form)):
                for sources in made.get(_file_name(word.value), ()):
                    if not sources or any(s.dynamic for s in sources) or index < 0:
                        runs = "runs" if index == 0 else f"{program_name(program)} runs"
                        why = why or (
                            f"{runs} `{word.raw}`, a file this command line writes (what it "
                            "holds is known only when it runs)"
                        )
                        continue
                    for source in sources:  # a copy or a link: judged as what it copies
                        replaced = (*form[:index], source, *form[index + 1 :])
                        if replaced in judged:
                            continue
                        judged.add(replaced)
                        if len(judged) > _MAX_ALIASES:
                            why = why or "runs files made under other names too many times over"
                            break
                        pending += _judged_as(facts, replaced, searches)
        if why and not facts.unknown:
            facts = dataclasses.replace(facts, unknown=True, why_unknown=why)
        result.append(facts)
    return result


# Programs that run code from a file named among their words: the shells, ``source``, and the
# common interpreters. For each: its options taking an argument, those of them whose argument
# is a file of code too, and its options whose code is inline (then it reads no script file).
_Interpreter = tuple[re.Pattern[str], frozenset[str], frozenset[str], frozenset[str]]


def _interpreter(pattern: str, taking: str, code: str, inline: str) -> _Interpreter:
    return (
        re.compile(pattern),
        frozenset((taking + " " + code).split()),
        frozenset(code.split()),
        frozenset(inline.split()),
    )


_SHELL_OPTIONS = _interpreter("", "-o +o -O +O", "--rcfile --init-file", "")
_INTERPRETERS = (
    _interpreter(r"(?:python|pypy)[0-9.]*", "-W -X --check-hash-based-pycs", "", "-c"),
    _interpreter(r"perl[0-9.]*", "-I -x", "", "-e -E"),
    _interpreter(r"ruby[0-9.]*", "-I -C -E", "-r --require", "-e"),
    _interpreter(
        r"node(?:js)?|ts-node|tsx|bun|deno",
        "",
        "-r --require --import --loader --experimental-loader",
        "-e --eval -p --print",
    ),
    _interpreter(r"php[0-9.]*", "-c -d", "-f", "-r"),
    _interpreter(r"lua(?:jit|[0-9.]*)", "", "-l", "-e"),
    _interpreter(r"Rscript|tclsh[0-9.]*|wish[0-9.]*|expect", "", "-f", "-e -c"),
)
_SUBCOMMAND_RUNNERS = frozenset({"bun", "deno"})  # ``deno run x.ts``, ``bun run x.ts``


def _script_words(form: tuple[Word, ...]) -> list[tuple[int, Word]]:
    """The words of ``form`` an interpreter may read code from, each with its index in
    ``form`` (-1 for a name made from a word, as ``python -m mod`` reads ``mod.py``): a shell's
    or interpreter's script (its first operand), ``source FILE``, and option values that are
    code files (``--rcfile``, ``node -r``). The script's own arguments are not counted."""
    if len(form) < 2 or form[0].dynamic:
        return []
    name = program_name(form[0])
    if name in SCRIPT_RUNNERS:
        return [(1, form[1])]
    found = _SHELL_OPTIONS if name in SHELLS else None
    if found is None:
        found = next((entry for entry in _INTERPRETERS if entry[0].fullmatch(name)), None)
        if found is None:
            return []
    _, takes, code_files, inline = found
    out: list[tuple[int, Word]] = []
    subcommand = name in _SUBCOMMAND_RUNNERS
    i = 1
    while i < len(form):
        word = form[i]
        value = word.value
        if word.dynamic:
            return out  # a script known only at run time: judged as such elsewhere
        if value == "--":
            i += 1
            break
        if not value.startswith(("-", "+")) or value in ("-", "+"):
            break
        option, eq, joined = value.partition("=")
        if name in SHELLS and not option.startswith("--") and any(c in option[1:] for c in "cs"):
            return out  # ``-c`` text is parsed as commands; ``-s`` reads standard input
        if option in inline:
            return out
        if option == "-m" and name not in SHELLS and not eq:  # ``python -m mod``
            module = form[i + 1].value if i + 1 < len(form) else ""
            top = module.split(".")[0]
            return [*out, (-1, Word(top + ".py", top)), (-1, Word(top, top))] if top else out
        if option in takes:
            argument = Word(joined, joined, word.dynamic) if eq else None
            if argument is None and i + 1 < len(form):
                argument = form[i + 1]
                i += 1
            if argument is not None and option in code_files:
                out.append((i, argument) if not eq else (-1, argument))
        i += 1
    if i < len(form) and subcommand and form[i].value == "run":
        i += 1
    if i < len(form):
        out.append((i, form[i]))
    return out


def _judged_as(facts: CommandFacts, words: tuple[Word, ...], searches: bool) -> list[CommandFacts]:
    """The facts of ``words`` run where ``facts`` runs: a program reached under another name."""
    found: list[CommandFacts] = []
    start = Place(facts.bases, facts.base_unknown, False)
    _analyze(SimpleCommand(words=list(words)), found, 1, DirectoryTracker(start, searches))
    return found


_SEARCHED = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
_MAX_SEARCHED_ENTRIES = 16384  # per directory, when a hard link's other names are looked for


def linked_programs(analysis: CommandAnalysis, root: str) -> CommandAnalysis:
    """``analysis`` with each program named by a path (``./g``, ``tools/g``, ``/tmp/g``) that is
    a symlink (the names on its chain, and where it ends) or a hard link to a program on the
    search path also judged as that program: a deny rule on ``git tag`` sees ``./g tag`` when
    ``g`` links to git. Looked at now, on disk, for every decision (never cached). A copy
    made earlier is not recognized (only a same-line ``cp`` is, see ``_programs_made_here``)."""
    if analysis.error is not None:
        return analysis
    analysis = _searched_through_path(analysis, root)
    extra: list[CommandFacts] = []
    judged: set[tuple[str, tuple[Word, ...]]] = set()
    for facts in analysis.commands:
        for form in facts.forms:
            program = form[0] if form else None
            if program is None or program.dynamic or "/" not in program.value:
                continue
            value = os.path.expanduser(program.value)
            bases = ("",) if value.startswith("/") else facts.bases
            for base in bases:
                place = os.path.expanduser(base) if base.startswith("~") else base
                path = os.path.join(root, place, value)
                for target in _link_targets(path):
                    if _file_name(target) == _file_name(value):
                        continue  # the same name: rules see it already
                    key = (target, form[1:])
                    if key in judged or len(judged) >= _MAX_ALIASES:
                        continue
                    judged.add(key)
                    target_word = Word(target, target)
                    extra += _judged_as(facts, (target_word, *form[1:]), False)
    if not extra:
        return analysis
    return dataclasses.replace(analysis, commands=analysis.commands + tuple(extra))


def _searched_through_path(analysis: CommandAnalysis, root: str) -> CommandAnalysis:
    """``analysis`` with every program it finds through ``PATH`` unknown when the line gives
    ``PATH`` a directory that is not a fixed place outside the workspace: one relative to
    where it runs (``.``, ``bin``, an empty entry), one only run time knows (``$PWD/bin``), or
    one inside the workspace. Such a name is not the program it names on the server's
    ``PATH``. The whole line counts, wherever the change is: a loop runs it before the next
    pass, a nested shell inherits it."""
    why = next(
        (reason for value in analysis.path_values if (reason := _untrusted_path(value, root))),
        "",
    )
    if not why:
        return analysis
    commands: list[CommandFacts] = []
    for facts in analysis.commands:
        if facts.searched and not facts.unknown:
            program = facts.searched[0].raw
            facts = dataclasses.replace(
                facts, unknown=True, why_unknown=f"`{program}` is looked up in a PATH {why}"
            )
        commands.append(facts)
    return dataclasses.replace(analysis, commands=tuple(commands))


def _untrusted_path(value: Word, root: str) -> str:
    """Why the ``PATH`` value ``value`` may find a program other than the server's (\"\" when
    each entry is the current ``$PATH`` or a fixed directory outside the workspace)."""
    if value is _PATH_AT_RUN_TIME:
        return "this command line sets or removes when it runs"
    home = os.path.expanduser("~")
    for entry in value.value.split(":"):
        if entry in ("$PATH", "${PATH}"):
            continue  # what the server gave, or what an earlier change (judged too) made it
        if not entry:
            return f"whose empty entry (in `{value.raw}`) is the directory it runs in"
        if entry.startswith("~") and (entry == "~" or entry.startswith("~/")):
            entry = home + entry[1:]
        elif value.dynamic and entry.startswith(("$HOME/", "${HOME}/")):
            entry = home + entry[entry.index("/") :]
        if value.dynamic and any(c in entry for c in "$`*?[~"):
            return f"whose entry `{entry}` is known only when it runs"
        if not entry.startswith("/"):
            return f"whose entry `{entry}` is relative to the directory it runs in"
        if root and _inside_workspace(entry, root):
            return f"whose entry `{entry}` is inside the workspace"
        if _writable_place(entry):
            return f"whose entry `{entry}` is a directory a command could have put a program in"
    return ""


def _writable_place(directory: str) -> bool:
    """Whether a program found in ``directory`` may be one a command of this server wrote
    there (``/tmp/x``, a home's ``bin``, an additional directory): the directory, or the
    nearest part of it that exists, or any directory above it, is writable by this process
    or owned by its user (who can make it writable, or move it and put another in its
    place), as written or with its links followed. A directory the server itself searches
    (its own ``PATH``, the system's program directories) finds what a bare name finds
    anyway, and is not counted."""
    searched = _searched_directories()
    lexical = os.path.normpath(directory)
    try:
        real = os.path.realpath(lexical)
    except (OSError, ValueError):
        return True
    return any(path not in searched and _changeable(path) for path in (lexical, real))


def _searched_directories() -> set[str]:
    found: set[str] = set()
    for directory in _search_path():
        found.add(os.path.normpath(directory))
        try:
            found.add(os.path.realpath(directory))
        except (OSError, ValueError):
            pass
    return found


def _search_path() -> list[str]:
    """The directories the server finds programs in: its own ``PATH`` (the absolute entries),
    then the system's program directories, each once."""
    directories = [*os.environ.get("PATH", "").split(os.pathsep), *_SEARCHED]
    return list(dict.fromkeys(d for d in directories if d.startswith("/")))


def _changeable(path: str) -> bool:
    """Whether ``path`` or a directory above it may be changed by this process's user."""
    user = os.geteuid()
    while True:
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            info = None  # not there yet: whoever may create it is asked about above
        except (OSError, ValueError):
            return True
        if info is not None and (
            info.st_uid == user or (stat.S_ISDIR(info.st_mode) and os.access(path, os.W_OK))
        ):
            return True
        parent = os.path.dirname(path)
        if parent == path:
            return False
        path = parent


def _inside_workspace(directory: str, root: str) -> bool:
    """Whether ``directory`` is ``root`` or below it, as written or with links followed."""
    lexical = os.path.normpath(directory)
    try:
        candidates = {lexical, os.path.realpath(lexical)}
        roots = {os.path.normpath(root), os.path.realpath(root)}
    except (OSError, ValueError):
        return True
    return any(c == r or c.startswith(r.rstrip("/") + "/") for c in candidates for r in roots)


# What git reads from a git directory it finds: a ``config`` (and a worktree's, and the
# ``commondir`` naming another one) and the ``hooks`` it runs.
_GIT_READS_FROM = frozenset({"config", "config.worktree", "commondir"})
_MAX_GIT_LEVELS = 64


def foreign_git_directories(analysis: CommandAnalysis, root: str) -> CommandAnalysis:
    """``analysis`` with each git command unknown when the git directory it finds, from where
    it runs (``cd``, ``-C``), may hold a configuration or hooks the model wrote: git takes a
    directory shaped like a bare repository (``HEAD``, ``objects``) as its git directory, and
    reads its ``config`` (``core.fsmonitor``, ``alias.x=!cmd`` run commands). Unknown when
    such a directory not named ``.git`` is on the way up (on disk, now), when this line puts
    a ``config``, ``commondir`` or hook there or copies or links the directory into place, or
    when git runs in a directory known only at run time. A ``.git`` directory's own files are
    protected by name, so a repository found through one is judged as usual."""
    if analysis.error is not None:
        return analysis
    git_facts = {id(facts) for facts in analysis.commands if _git_starts(facts) is not None}
    if not git_facts:
        return analysis
    made: set[str] = set()
    made_unplaced: set[str] = set()
    for facts in analysis.commands:
        for word, _ in facts.made:
            if word.dynamic:
                continue
            if facts.base_unknown and not word.value.startswith(("/", "~")):
                made_unplaced.add(_file_name(word.value))
            for base in facts.bases:
                made.add(_absolute(root, base, word.value))
    commands: list[CommandFacts] = []
    for facts in analysis.commands:
        why = ""
        if id(facts) in git_facts and not facts.unknown:
            why = _foreign_git_reason(facts, root, made, made_unplaced)
        if why:
            facts = dataclasses.replace(facts, unknown=True, why_unknown=why)
        commands.append(facts)
    return dataclasses.replace(analysis, commands=tuple(commands))


def _git_starts(facts: CommandFacts) -> list[tuple[str, ...]] | None:
    """The ``-C`` directories of each git form of ``facts`` (``[()]`` for a plain ``git
    status``); None when it runs no git, or git is told its ``.git`` directory outright."""
    found: list[tuple[str, ...]] = []
    for form in facts.forms:
        if not form or form[0].dynamic or program_name(form[0]) != "git":
            continue
        moves: list[str] = []
        explicit = False
        i = 1
        while i < len(form) and form[i].value.startswith("-") and not form[i].dynamic:
            value = form[i].value
            if value in _GIT_GLOBAL_WITH_ARGUMENT:
                if value == "-C" and i + 1 < len(form):
                    moves.append(form[i + 1].value)
                explicit = explicit or value == "--git-dir"
                i += 2
                continue
            explicit = explicit or value.startswith("--git-dir=")
            i += 1
        if not explicit:  # (an explicit one was judged by its name)
            found.append(tuple(moves))
    return found or None


def _absolute(root: str, base: str, value: str) -> str:
    place = os.path.expanduser(base) if base.startswith("~") else base
    word = os.path.expanduser(value) if value.startswith("~") else value
    return os.path.normpath(os.path.join(root, place, word))


def _foreign_git_reason(
    facts: CommandFacts, root: str, made: set[str], made_unplaced: set[str]
) -> str:
    if facts.base_unknown:
        return (
            "git runs in a directory known only at run time, where it may find a configuration "
            "(which may run commands) the model wrote"
        )
    for moves in _git_starts(facts) or ():
        for base in facts.bases:
            start = _absolute(root, base, os.path.join(*moves) if moves else ".")
            why = _foreign_git_directory(start, made, made_unplaced)
            if why:
                return why
    return ""


def _foreign_git_directory(start: str, made: set[str], made_unplaced: set[str]) -> str:
    """Why the git directory git finds from ``start`` may be one the model wrote ("" when the
    first one found is a ``.git``, or none is)."""
    chains = [start]
    try:
        physical = os.path.realpath(start)
    except (OSError, ValueError):
        physical = start
    if physical != start:
        chains.append(physical)  # git walks up from the directory it is really in
    for directory in chains:
        for _ in range(_MAX_GIT_LEVELS):
            if directory in made:
                return (
                    f"git runs in {directory}, which this command line copies, links or writes "
                    "into place: its configuration may run commands"
                )
            try:
                if os.path.lexists(os.path.join(directory, ".git")):
                    break  # a repository: its ``.git`` files are protected by name
                planted = next(
                    (
                        path
                        for path in made
                        if (
                            os.path.dirname(path) == directory
                            and os.path.basename(path) in _GIT_READS_FROM
                        )
                        or path.startswith(os.path.join(directory, "hooks", ""))
                    ),
                    None,
                )
                if planted is None and made_unplaced & _GIT_READS_FROM:
                    planted = next(iter(sorted(made_unplaced & _GIT_READS_FROM)))
                if planted is not None:
                    return (
                        f"git may read `{planted}`, which this command line writes, as its "
                        "configuration (which may run commands)"
                    )
                shaped = os.path.lexists(os.path.join(directory, "HEAD")) and any(
                    os.path.lexists(os.path.join(directory, entry))
                    for entry in ("objects", "refs", "commondir")
                )
            except (OSError, ValueError):
                shaped = False
            if shaped:
                if trusted_git_directory(directory):
                    break
                return (
                    f"git takes {directory} as its git directory and reads its configuration "
                    "(which may run commands): it is not protected as a repository's `.git` is"
                )
            parent = os.path.dirname(directory)
            if parent == directory:
                break
            directory = parent
    return ""


def _link_targets(path: str) -> list[str]:
    """The paths a symlink chain from ``path`` passes through and ends at, or a hard link's
    other names in the program directories; ``[]`` for anything else (or nothing there)."""
    found: list[str] = []
    current = path
    for _ in range(40):  # the kernel's own bound on a chain
        try:
            info = os.lstat(current)
        except (OSError, ValueError):
            break
        if stat.S_ISLNK(info.st_mode):
            try:
                target = os.readlink(current)
            except OSError:
                break
            current = os.path.join(os.path.dirname(current), target)
            found.append(os.path.normpath(current))
            continue
        if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
            found += _other_names(info)
        break
    if found:
        try:
            real = os.path.realpath(path)
        except (OSError, ValueError):
            real = ""
        if real and real not in found:
            found.append(real)
    return found


def _other_names(info: os.stat_result) -> list[str]:
    """Programs on the search path (and the usual program directories) that are the file
    ``info`` describes under another name."""
    names: list[str] = []
    for directory in _search_path():
        try:
            with os.scandir(directory) as entries:
                for count, entry in enumerate(entries):
                    if count >= _MAX_SEARCHED_ENTRIES:
                        break
                    if entry.inode() != info.st_ino:
                        continue
                    try:
                        other = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if other.st_dev == info.st_dev and not entry.is_symlink():
                        names.append(entry.path)
        except OSError:
            continue
    return names


_REFERENCE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
_MAX_VALUES = 16


def _literal_values(simple: list[SimpleCommand]) -> dict[str, list[str]]:
    """The literal values each variable is given in the command (``x=.e``, ``export x=.e``,
    ``for x in a b``), for words that use it later (``${x}nv``)."""
    values: dict[str, list[str]] = {}
    for cmd in simple:
        named = list(cmd.assignments)
        if cmd.words and not cmd.words[0].dynamic and cmd.words[0].value in DECLARATIONS:
            named += [w for w in cmd.words[1:] if "=" in w.value and not w.value.startswith("-")]
        for word in named:
            name, _, value = word.value.partition("=")
            if not word.dynamic and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                values.setdefault(name, []).append(value)
    return values


def _with_values(facts: CommandFacts, values: dict[str, list[str]]) -> CommandFacts:
    """``facts`` with its words' references to those variables also read as their values."""
    extra: list[Word] = []
    for word in facts.path_words:
        if not word.dynamic or "$" not in word.value:
            continue
        spelled = [word.value]
        for m in _REFERENCE.finditer(word.value):
            known = values.get(m.group(1) or m.group(2))
            if known:
                spelled = [
                    s.replace(m.group(0), v, 1) for s in spelled for v in known[:_MAX_VALUES]
                ][:_MAX_VALUES]
        extra += [
            Word(value, value, any(c in _DYNAMIC_CHARS for c in value))
            for value in spelled
            if value != word.value
        ]
    if not extra:
        return facts
    return dataclasses.replace(facts, path_words=facts.path_words + tuple(extra))


def _caseless(facts: CommandFacts) -> CommandFacts:
    """``facts`` with each glob also spelled to match letters of either case."""
    extra: list[Word] = []
    for word in facts.path_words:
        if word.dynamic and any(c in "*?[" for c in word.value):
            spelled, depth = [], 0
            for c in word.value:
                depth += c == "["
                depth -= c == "]" and depth > 0
                both = c.lower() + c.upper()
                spelled.append(
                    f"[{both}]" if depth == 0 and c.isalpha() and both[0] != both[1] else c
                )
            value = "".join(spelled)
            extra.append(Word(value, value, True))
    return (
        dataclasses.replace(facts, path_words=facts.path_words + tuple(extra)) if extra else facts
    )


def _assigned_value(word: Word) -> Word:
    """The value of ``NAME=VALUE`` as a word (``~`` after the ``=`` expands, as bash does)."""
    value = word.value.partition("=")[2]
    raw = word.raw.partition("=")[2]
    return Word(value, raw or value, word.dynamic)


# Bash's bracket expressions that Python's ``glob`` spells otherwise or not at all.
_POSIX_CLASSES = {
    "alpha": "a-zA-Z",
    "upper": "A-Z",
    "lower": "a-z",
    "digit": "0-9",
    "xdigit": "0-9A-Fa-f",
    "alnum": "a-zA-Z0-9",
    "word": "a-zA-Z0-9_",
    "space": " \t\n\r\f\v",
    "blank": " \t",
    # (never a leading ``!``: Python's glob would read it as a negation)
    "punct": ":-@!-.[-`{-~",  # (no "/": the glob would split the pattern there)
    "graph": '"-~!',
    "print": " -~",
    "cntrl": "\x01-\x1f\x7f",  # a name holds no NUL
}
_MAX_VARIANTS = 8


def path_variants(word: Word) -> list[Word]:
    """Other spellings under which a word may name a file: the value after ``=``, ``:`` or
    ``@`` of an operand (``dd if=.env``, ``git show HEAD:.env``, ``curl -d @.env``,
    ``-F f=@.env``), ``~+`` as the working directory,
    and a glob with bash's own bracket syntax (``[^x]``, ``[[:alpha:]]``) in the syntax
    Python's ``glob`` reads."""
    value = word.value
    out: list[Word] = []
    if "[" not in value and any(c in value for c in "=:@"):  # (``-d@.env`` too)
        parts = re.split(r"[=:@]", value)[1:]
        out += [Word(p, p, word.dynamic) for p in parts[:_MAX_VARIANTS] if p]
    if value == "~+" or value.startswith("~+/"):  # bash's ``$PWD``
        here = "." + value[2:]
        out.append(Word(here, here, word.dynamic))
    if word.dynamic and "[" in value:
        translated = _python_glob(value)
        if translated != value:
            out.append(Word(translated, translated, True))
    return out


def _python_glob(value: str) -> str:
    """``value``'s bracket expressions in Python's syntax: ``[^x]`` is ``[!x]``, a POSIX class
    (``[:alpha:]``) its ranges, ``[=a=]`` and ``[.a.]`` the character. One pass, linear: an
    unclosed ``[`` leaves the rest as it is."""
    out: list[str] = []
    i, n = 0, len(value)
    while i < n:
        if value[i] != "[":
            out.append(value[i])
            i += 1
            continue
        j = i + 1
        negated = j < n and value[j] in "^!"
        j += negated
        body: list[str] = []
        if j < n and value[j] == "]":  # a leading ``]`` is a member
            body.append("]")
            j += 1
        closed = False
        while j < n:
            c = value[j]
            if c == "[" and value[j + 1 : j + 2] in (":", "=", "."):
                kind = value[j + 1]
                end = value.find(kind + "]", j + 2, j + 16)  # class names are short
                if end != -1:
                    name = value[j + 2 : end]
                    body.append(_POSIX_CLASSES.get(name, "") if kind == ":" else name)
                    j = end + 2
                    continue
            if c == "]":
                closed = True
                break
            body.append(c)
            j += 1
        if not closed:
            out.append(value[i:])
            break
        out.append(("[!" if negated else "[") + "".join(body) + "]")
        i = j + 1
    return "".join(out)


def _is_relative(word: Word) -> bool:
    """A word that, if it names a file, names one relative to the working directory."""
    value = word.value
    if value.startswith("-"):
        value = value.partition("=")[2]
    return bool(value) and not value.startswith(("/", "~"))


def _nested_script(
    args: tuple[Word, ...],
    out: list[CommandFacts],
    depth: int,
    dirs: DirectoryTracker,
    start: Place,
) -> Place | None:
    """``eval a b c``: the words joined are a script, run from ``start``; where it ends, or
    None when the words are not all literal."""
    if any(w.dynamic for w in args):
        return None
    return _analyze_text(" ".join(w.value for w in args), out, depth, dirs, start)


def _sourced_script(
    args: tuple[Word, ...],
    cmd: SimpleCommand,
    out: list[CommandFacts],
    depth: int,
    dirs: DirectoryTracker,
    place: Place,
) -> Place | None:
    """``source FILE``: a file on disk is a normal program (``START``: nothing followed); a
    script from a descriptor runs in this shell (where it ends); None when it is unknown."""
    if not args or args[0].dynamic:
        return None
    fd = _script_descriptor(args[0].value)
    if fd is None:
        return START
    return _read_descriptor(cmd, fd, out, depth, dirs, place)


def _nested_shell(
    args: tuple[Word, ...],
    cmd: SimpleCommand,
    out: list[CommandFacts],
    depth: int,
    dirs: DirectoryTracker,
    place: Place,
) -> bool | None:
    """``sh [opts] -c SCRIPT``: True when the script was parsed, False for ``sh script.sh``
    (a normal program), None when the script is not known statically."""
    has_c = has_s = False
    startup: list[Word] = []  # ``--rcfile FILE``: read (and run) before the script
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
            startup.extend(args[i + 1 : i + 2] if value in ("--rcfile", "--init-file") else ())
            i += 2
            continue
        if not value.startswith("--"):
            has_c = has_c or "c" in value[1:]
            has_s = has_s or "s" in value[1:]
            # ``-eo pipefail``, ``-xO extglob``: each ``o``/``O`` of a cluster takes the next
            # word as its argument, as the shell's getopt reads it (``-o`` alone is above).
            taken = sum(value[1:].count(letter) for letter in "oO")
            if taken:
                i += 1 + taken
                continue
        i += 1
    for file in startup:
        fd = _script_descriptor(file.value) if not file.dynamic else -1
        if fd is not None and _read_descriptor(cmd, fd, out, depth, dirs, place) is None:
            return None
    operands = args[i:]
    if has_c:
        if not operands or operands[0].dynamic:
            return None
        _analyze_text(operands[0].value, out, depth, dirs, place)
        return True
    fd = 0  # the script comes from standard input
    if operands and not has_s:
        fd_named = _script_descriptor(operands[0].value)
        if fd_named is None:
            return False  # a script file
        fd = fd_named
    return None if _read_descriptor(cmd, fd, out, depth, dirs, place) is None else True


def _script_descriptor(path: str) -> int | None:
    """The descriptor a script path reads (``/dev/stdin`` → 0, ``/dev/fd/3`` → 3); -1 for
    another device or ``/proc`` path (what it holds is unknown); None for a plain file."""
    if path == "-":
        return 0
    normal = os.path.normpath(path) if path else path
    if _STDIN_PATH.fullmatch(normal):
        return 0
    m = _FD_PATH.fullmatch(normal)
    if m is not None:
        return int(m.group(1)) if len(m.group(1)) < 10 else -1
    if normal.startswith(("/dev/", "/proc/")):
        return -1
    return None


def _read_descriptor(
    cmd: SimpleCommand,
    fd: int,
    out: list[CommandFacts],
    depth: int,
    dirs: DirectoryTracker,
    place: Place,
) -> Place | None:
    """Parse the script a shell reads from descriptor ``fd`` when a heredoc or here-string of
    ``cmd`` is what that descriptor holds (the last redirection of ``fd`` wins); where it
    ends, or None when the descriptor holds anything else (a pipe, a file, an inherited one)."""
    source: Redirect | None = None
    for r in cmd.redirects:
        targets = _descriptors_of(r)
        if targets is None:
            if fd >= 10:  # ``{var}<<<...`` picks a descriptor from 10 up
                source = None
            continue
        if fd in targets:
            source = r
    if fd < 0 or source is None or source.op not in _HEREDOCS:
        return None
    if source.op == "<<<":
        if source.target is None or source.target.dynamic:
            return None
        text: str | None = source.target.value
    else:
        text = source.body or ""
        if source.expand:
            text = _expanded_heredoc(text)
    if text is None:
        return None
    return _analyze_text(text, out, depth, dirs, place)


def _descriptors_of(r: Redirect) -> tuple[int, ...] | None:
    """The descriptors a redirection sets (None for a ``{var}`` one: chosen at run time)."""
    if r.fd.startswith("{"):
        return None
    if r.fd:
        return (int(r.fd),) if len(r.fd) < 10 else ()
    if r.op in ("&>", "&>>"):
        return (1, 2)
    if r.op == ">&" and r.target is not None and not r.target.value.isdigit():
        return (1, 2)  # ``>&file`` is ``&>file``
    return (0,) if r.op in _INPUTS else (1,)


def _expanded_heredoc(body: str) -> str | None:
    """The text bash hands over for an unquoted heredoc body: backslash escapes of ``$``,
    `` ` ``, ``\\`` and newlines removed; None when it expands anything (known at run time)."""
    out: list[str] = []
    i = 0
    while i < len(body):
        c = body[i]
        if c == "\\" and body[i + 1 : i + 2] in ("$", "`", "\\", "\n"):
            if body[i + 1] != "\n":
                out.append(body[i + 1])
            i += 2
            continue
        if c == "`":
            return None
        if c == "$" and i + 1 < len(body):
            following = body[i + 1]
            if following in "({_@*#?$!-" or following.isalnum():
                return None
        out.append(c)
        i += 1
    return "".join(out)


_GIT_GLOBAL_WITH_ARGUMENT = frozenset(
    {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--config-env", "--super-prefix"}
)
# Options of git commands whose argument is a shell command git runs.
_GIT_SCRIPT_OPTIONS = {
    "rebase": ("-x", "--exec"),
    "grep": ("-O", "--open-files-in-pager"),
    # the program run on the other side of a local transport, through a shell
    "fetch": ("--upload-pack",),
    "pull": ("--upload-pack",),
    "clone": ("-u", "--upload-pack"),
    "fetch-pack": ("--upload-pack", "--exec"),
    "push": ("--receive-pack", "--exec"),
    "send-pack": ("--receive-pack", "--exec"),
    "archive": ("--exec",),
    "difftool": ("-x", "--extcmd"),
    "ls-remote": ("--upload-pack", "--exec"),
    "send-email": ("--sendmail-cmd", "--to-cmd", "--cc-cmd", "--header-cmd"),
    "daemon": ("--access-hook",),
    "instaweb": ("-d", "--httpd"),
    "svn": ("--authors-prog",),
    "filter-branch": (
        "--env-filter",
        "--tree-filter",
        "--index-filter",
        "--parent-filter",
        "--msg-filter",
        "--commit-filter",
        "--tag-name-filter",
    ),
}


def _git_nested(
    words: tuple[Word, ...],
    out: list[CommandFacts],
    depth: int,
    dirs: DirectoryTracker,
    place: Place,
) -> str:
    """Why a git command cannot be known before it runs (``""`` when it can): a ``-c`` key
    that runs code (``alias.x=!cmd``, ``core.pager``, ...). The commands git runs for it
    (``rebase --exec``, ``bisect run``, ``submodule foreach``, ``filter-branch --*-filter``,
    ``difftool --extcmd``) are recorded as commands of their own."""
    i = 1
    while i < len(words) and (words[i].dynamic or words[i].value.startswith("-")):
        word = words[i]
        if word.dynamic:
            return "git is given an option known only at run time"
        name, eq, joined = word.value.partition("=")
        if name == "--exec-path" and eq:  # (without a value it only prints the directory)
            return "git --exec-path= runs its commands' programs from a directory it names"
        if name in ("--git-dir", "-C") and not eq and i + 1 < len(words):
            if words[i + 1].dynamic:
                return f"git {name} names a directory known only at run time"
        if name == "--git-dir" and (eq or i + 1 < len(words)):
            git_dir = Word(joined, joined) if eq else words[i + 1]
            if not trusted_git_directory(git_dir.value):
                return (
                    f"git --git-dir {git_dir.text} reads the configuration (which may run "
                    "commands) of a directory not protected as a repository's `.git` is"
                )
        if word.value == "--bare":
            return (
                "git --bare reads the configuration (which may run commands) of the directory "
                "it runs in"
            )
        if name in ("-c", "--config-env"):
            if not eq and i + 1 >= len(words):
                return ""
            setting = Word(joined, joined) if eq else words[i + 1]
            key = setting.value.partition("=")[0].lower()
            if setting.dynamic or not GIT_HARMLESS_KEYS.fullmatch(key):
                return f"git configuration `{setting.raw}` may make git run other commands"
        if word.value in _GIT_GLOBAL_WITH_ARGUMENT:
            i += 2
            continue
        i += 1
    if i >= len(words):
        return ""
    command, rest = words[i].value, words[i + 1 :]
    argv: tuple[Word, ...] = ()
    found = option_arguments(rest, _GIT_SCRIPT_OPTIONS.get(command, ()))
    if found is None:
        return f"git {command} is given an option known only at run time"
    scripts = [argument for _, argument in found]
    reason = _git_command_hazard(command, rest)
    if reason:
        return reason
    if command == "send-email":
        # a server given as a path is a sendmail-like program git runs
        servers = option_arguments(rest, ("--smtp-server",)) or []
        scripts += [server for _, server in servers if "/" in server.value]
    if command == "for-each-repo":
        # runs ``git ARGS`` in each repository a configuration key lists
        _analyze(
            SimpleCommand(words=[Word("git", "git"), *_for_each_repo_arguments(rest)]),
            out,
            depth + 1,
            DirectoryTracker(NOWHERE, dirs.searches, dirs.physical),
        )
    if command == "bisect" and rest[:1] and rest[0].value == "run":
        argv = rest[1:]
    if command == "submodule":
        j = 0
        while j < len(rest) and rest[j].value.startswith("-"):
            j += 1
        if j < len(rest) and rest[j].value == "foreach":
            j += 1
            while j < len(rest) and rest[j].value.startswith("-"):
                j += 1
            scripts.append(
                Word(" ".join(w.value for w in rest[j:]), "", any(w.dynamic for w in rest[j:]))
            )
    for script in scripts:
        if _nested_script((script,), out, depth, dirs, place) is None:
            return f"git {command} runs a command known only at run time"
    if argv:
        _analyze(
            SimpleCommand(words=list(argv)),
            out,
            depth + 1,
            DirectoryTracker(place, dirs.searches, dirs.physical),
        )
    return ""


# Variables naming the git directory whose configuration (and hooks) git uses.
GIT_DIRECTORY_VARIABLES = frozenset({"GIT_DIR", "GIT_COMMON_DIR"})


def trusted_git_directory(value: str) -> bool:
    """Whether git reading its configuration and hooks from the git directory ``value`` reads
    only files protected by their names: a ``.git`` directory (its ``config`` and ``hooks``
    match ``**/.git/config`` and ``**/.git/hooks/**``). Any other directory may hold a
    ``config`` the model wrote (``core.fsmonitor``, ``alias.x=!cmd`` run code)."""
    if not value:
        return False
    components = os.path.normpath(value).split("/")
    if ".git" not in components:
        return False
    # a submodule's or a worktree's git directory (``**/.git/modules/**/config``,
    # ``**/.git/worktrees/*/config`` are protected too)
    below = components[len(components) - 1 - components[::-1].index(".git") + 1 :]
    return (
        not below
        or (below[0] == "modules" and len(below) >= 2)
        or (below[0] == "worktrees" and len(below) == 2)
    )


def _git_directory_hazard(name: str, value: Word | None) -> str:
    """Why setting ``name`` (to ``value``, when known) makes what git runs unknown."""
    if name not in GIT_DIRECTORY_VARIABLES:
        return ""
    if value is not None and not value.dynamic and trusted_git_directory(value.value):
        return ""
    return (
        f"sets {name}, pointing git at a configuration (which may run commands) not protected "
        "as a repository's `.git` is"
    )


def _git_command_hazard(command: str, rest: tuple[Word, ...]) -> str:
    """Why the options of ``git COMMAND`` make what it runs unknown, or ``""``: a template
    directory whose hooks the new repository runs (``clone``/``init --template``), or
    configuration a clone runs code from (``clone -c core.fsmonitor=...``)."""
    if command not in ("clone", "init"):
        return ""
    templates = option_arguments(rest, ("--template",))
    settings = option_arguments(rest, ("-c", "--config")) if command == "clone" else []
    if templates is None or settings is None:
        return f"git {command} is given an option known only at run time"
    if any(value.value for _, value in templates):
        return f"git {command} --template copies hooks (run by git) from a directory it names"
    for _, setting in settings:
        key = setting.value.partition("=")[0].lower()
        if not GIT_HARMLESS_KEYS.fullmatch(key):
            return f"git {command} configuration `{setting.raw}` may make git run other commands"
    return ""


def _for_each_repo_arguments(words: tuple[Word, ...]) -> tuple[Word, ...]:
    """The arguments ``git for-each-repo`` hands to git, past its own options (``--config``,
    ``--keep-going`` and their prefixes; any other option is git's)."""
    j = 0
    while j < len(words) and not words[j].dynamic:
        name, eq, _ = words[j].value.partition("=")
        if name == "--":
            return words[j + 1 :]
        if len(name) > 3 and "--config".startswith(name):
            j += 1 if eq else 2
        elif len(name) > 3 and "--keep-going".startswith(name) and not eq:
            j += 1
        else:
            break
    return words[j:]


def option_arguments(
    words: tuple[Word, ...], options: tuple[str, ...]
) -> list[tuple[str, Word]] | None:
    """The arguments given to any of ``options`` among ``words`` (with the option), in every
    getopt spelling: ``--opt=X``, ``--opt X``, a unique prefix (``--upload-p=X``), ``-oX``,
    ``-o X`` and a cluster (``-io X``). None when a word is known only at run time (it may
    be one of them)."""
    if not options:
        return []
    found: list[tuple[str, Word]] = []
    for k, word in enumerate(words):
        if word.dynamic:
            return None
        value = word.value
        following = words[k + 1 : k + 2]
        for option in options:
            joined: str | None = None
            if value == option:
                found.extend((option, w) for w in following)
            elif option.startswith("--") and value.startswith(option + "="):
                joined = value[len(option) + 1 :]
            elif _abbreviates(value, option):
                if "=" in value:
                    joined = value.partition("=")[2]
                else:
                    found.extend((option, w) for w in following)
            elif len(option) == 2 and value[:1] == "-" and value[1:2] != "-" and option[1] in value:
                joined = value[1:].partition(option[1])[2]  # ``-xCMD``, ``-ix CMD``
                if not joined:
                    joined = None
                    found.extend((option, w) for w in following)
            if joined is not None:
                found.append((option, Word(joined, joined)))
    return found


# Options of common programs whose argument is a command line they run (through a shell, or
# split into a program and its arguments): each is judged as a command of its own.
EXEC_OPTIONS: dict[str, tuple[str, ...]] = {
    "tar": (
        "-I",
        "--use-compress-program",
        "--to-command",
        "-F",
        "--info-script",
        "--new-volume-script",
        "--rsh-command",
        "--rmt-command",
        "--checkpoint-action",
    ),
    "sort": ("--compress-program",),
    "rsync": ("-e", "--rsh", "--rsync-path"),
    "rg": ("--pre",),
    "zip": ("-TT", "--unzip-command"),
    "man": ("-P", "--pager", "-H", "--html"),
    "ssh": ("-o",),
    "scp": ("-S", "-o"),
    "sftp": ("-S", "-D", "-o"),
}
# ``ssh -o KEY=VALUE`` (and scp's, sftp's) keys whose value is a command ssh runs locally.
_SSH_COMMAND_KEYS = frozenset({"proxycommand", "localcommand", "knownhostscommand"})


def _exec_options(
    name: str,
    words: tuple[Word, ...],
    out: list[CommandFacts],
    depth: int,
    dirs: DirectoryTracker,
    place: Place,
) -> str:
    """Judge the command lines ``name``'s options run (``tar --to-command``, ``rsync -e``,
    ``ssh -o ProxyCommand=``) as commands of their own; why one cannot be known, or ``""``."""
    found = option_arguments(words[1:], EXEC_OPTIONS[name])
    if found is None:
        return f"{name} is given an option known only at run time (it may run a command)"
    for option, argument in found:
        text = argument.value
        if option == "-o":  # ``KEY=VALUE`` or ``KEY VALUE``
            key, _, text = re.sub(r"^\s*([^\s=]+)\s*[=\s]\s*", r"\1=", text).partition("=")
            if key.lower() not in _SSH_COMMAND_KEYS:
                continue
        elif option == "--checkpoint-action":
            if not text.startswith("exec="):
                continue  # ``dot``, ``echo``, ``sleep=N``: no command
            text = text[5:]
        if _nested_script((Word(text, text),), out, depth, dirs, place) is None:
            return f"{name} runs a command known only at run time"
    return ""


def _abbreviates(value: str, option: str) -> bool:
    """``value`` (``--upload-p`` or ``--upload-p=x``) is a shortened spelling of ``option``."""
    name = value.partition("=")[0]
    return option.startswith("--") and len(name) > 3 and name != option and option.startswith(name)


def _ip_may_exec(words: tuple[Word, ...]) -> bool:
    """``ip netns exec NAME cmd`` and ``ip vrf exec NAME cmd`` run a command (``exec`` may be
    abbreviated, global options and batch files may come first): any word that could be
    ``exec``, a batch file or a word known only at run time is taken as running one."""
    return any(
        w.dynamic or (w.value and "exec".startswith(w.value)) or w.value in ("-b", "-batch")
        for w in words
    )


def _find_exec(
    words: tuple[Word, ...],
    out: list[CommandFacts],
    depth: int,
    dirs: DirectoryTracker,
    place: Place,
) -> str:
    """Record the commands of ``-exec`` and its kin; return why the expression cannot be known
    (a word known only at run time may be ``-exec`` itself), or ``""``."""
    if any(w.dynamic for w in words[1:]):
        return "find's expression has a word known only at run time (it may be -exec)"
    i = 1
    while i < len(words):
        action = words[i].value
        if action in ("-exec", "-execdir", "-ok", "-okdir"):
            j = i + 1
            while j < len(words) and words[j].value not in (";", "+"):
                j += 1
            if j > i + 1:
                # ``{}`` becomes each file found: a word known only at run time; ``-execdir``
                # runs in each file's directory
                command = [_replaced(w, "{}") for w in words[i + 1 : j]]
                start = NOWHERE if action.endswith("dir") else place
                _analyze(
                    SimpleCommand(words=command),
                    out,
                    depth + 1,
                    DirectoryTracker(start, dirs.searches, dirs.physical),
                )
            i = j
        i += 1
    return ""


def _replaced(word: Word, placeholder: str) -> Word:
    """``word`` as a run-time word when it holds a placeholder a program fills in."""
    return Word(word.value, word.raw, True) if placeholder in word.value else word


def _xargs_command(options: tuple[Word, ...], inner: tuple[Word, ...]) -> tuple[Word, ...]:
    """What xargs runs: its command with the words it reads from its input, which only run
    time knows, appended (``echo tag | xargs git`` is ``git tag``), and its placeholder filled
    in. The words are appended in every case: a later ``-n``/``-L`` cancels ``-I``, and an
    extra unknown word only makes deny and ask rules match more."""
    return (*_xargs_replaced(options, inner), _XARGS_INPUT)


def _xargs_replaced(options: tuple[Word, ...], inner: tuple[Word, ...]) -> tuple[Word, ...]:
    """With ``-I R`` (``-i``, ``--replace``) xargs puts each input line where R stands, the
    program's own word included: those words are known only at run time."""
    placeholder = None
    for k, word in enumerate(options):
        value = word.value
        if value in ("-I", "-J") and k + 1 < len(options):
            placeholder = options[k + 1].value
        elif value.startswith(("-I", "-J")) and len(value) > 2:
            placeholder = value[2:]
        elif value.startswith("-i") or value == "--replace":
            placeholder = value[2:] or "{}"
        elif value.startswith("--replace="):
            placeholder = value.split("=", 1)[1] or "{}"
    if not placeholder:
        return inner
    return tuple(_replaced(w, placeholder) for w in inner)


def _trap_action(args: tuple[Word, ...]) -> tuple[Word, ...]:
    """The action ``trap ACTION SIGNAL...`` runs later, as a script (``()`` when none)."""
    dynamic = [w for w in args if w.dynamic]
    if dynamic:  # unquoted, one word may become the action and its signals
        return (dynamic[0],)
    i = 0
    while i < len(args) and args[i].value.startswith("-"):
        if args[i].value in ("-", "--"):
            i += args[i].value == "--"
            break
        if args[i].value in ("-l", "-p", "-P"):
            return ()  # lists signals or traps
        i += 1
    operands = args[i:]
    if len(operands) < 2:
        return ()  # resets a signal (or fails)
    action = operands[0]
    if not action.dynamic and action.value in ("", "-"):
        return ()  # ignores or resets the signals
    return (action,)


def _builtin_hazard(name: str, args: tuple[Word, ...]) -> str:
    """Why running the builtin ``name`` evaluates text as code, or ``""``."""
    if name == "let":
        return "let evaluates variables' values as arithmetic"
    if name in ("bind", "fc"):
        return f"{name} runs commands it takes from text"
    if name in ("compgen", "complete"):
        if any(_has_option(w, "CF") for w in args):
            return f"{name} -C/-F runs a command or function"
        return ""
    if name in ("mapfile", "readarray"):
        if any(_has_option(w, "C") for w in args):
            return f"{name} -C runs a callback"
        return _names_hazard(name, [w for w in args if not w.value.startswith("-")][-1:])
    if name in ("test", "["):
        for k, word in enumerate(args[:-1]):
            if not word.dynamic and word.value in ("-v", "-R"):
                return _names_hazard(name, [args[k + 1]])
        return ""
    if name == "printf":
        for k, word in enumerate(args[:-1]):
            if not word.dynamic and word.value == "-v":
                return _names_hazard(name, [args[k + 1]])
        return ""
    if name == "read":
        return _names_hazard(name, _read_names(args))
    if name == "unset":
        return _names_hazard(name, [w for w in args if not w.value.startswith("-")])
    if name == "getopts":
        return _names_hazard(name, list(args[1:2]))
    if name == "wait":
        named = [args[k + 1] for k, w in enumerate(args[:-1]) if w.value == "-p"]
        return _names_hazard(name, named)
    if name in DECLARATIONS:
        for word in args:
            if not word.dynamic and word.value.startswith(("-", "+")):
                if name in ("declare", "typeset", "local") and _has_option(word, "in"):
                    return f"{name} -i/-n makes assignments arithmetic or references"
                continue
            reason = _names_hazard(name, [word])
            if reason:
                return reason
    return ""


def _has_option(word: Word, letters: str) -> bool:
    """``word`` is an option cluster (``-tC``) with one of ``letters``, or unknown."""
    if word.dynamic:
        return True
    value = word.value
    if value[:1] not in ("-", "+") or value.startswith("--"):
        return False
    return any(c in value for c in letters)


def _read_names(args: tuple[Word, ...]) -> list[Word]:
    names: list[Word] = []
    i = 0
    while i < len(args):
        value = args[i].value
        if value == "--":
            names.extend(args[i + 1 :])
            break
        if not args[i].dynamic and value.startswith("-") and len(value) > 1:
            last = value[-1]
            takes = last in "adinNptu" and len(value) == 2
            if takes and i + 1 < len(args) and last == "a":
                names.append(args[i + 1])
            i += 2 if takes else 1
            continue
        names.append(args[i])
        i += 1
    return names


def _names_hazard(builtin: str, names: list[Word]) -> str:
    """Why setting or reading the variables ``names`` evaluates text: a name known only at run
    time, an array subscript (arithmetic), or a variable whose value is code."""
    for word in names:
        if word.dynamic and not _NAME_ARGUMENT.match(word.value):
            return f"{builtin} is given a variable name known only at run time"
        m = _NAME_ARGUMENT.match(word.value)
        if m is None:
            continue  # not a name: bash refuses it
        name, subscript = m.group(1), m.group(2)
        if subscript is not None and not _LITERAL_INDEX.fullmatch(subscript):
            return f"{builtin} evaluates the array subscript of {name} as arithmetic"
        if _is_code_variable(name):
            return f"{builtin} sets {name}, whose value is run as code"
        _, eq, assigned = word.value.partition("=")
        if builtin in ("unset", "test", "[") or (builtin in DECLARATIONS and not eq):
            continue  # no value given: what it had was judged where it was set
        hazard = _git_directory_hazard(name, Word(assigned, assigned, word.dynamic) if eq else None)
        if hazard:
            return f"{builtin} {hazard}"
    return ""


def _is_code_variable(name: str) -> bool:
    return name in CODE_VARIABLES or name.startswith(CODE_VARIABLE_PREFIXES)


def _assignment_hazard(assignments: list[Word]) -> str:
    for word in assignments:
        name, plus_eq, value = word.value.partition("=")
        name = name.rstrip("+")
        if _is_code_variable(name.partition("[")[0]):
            return f"assigns {name.partition('[')[0]}, whose value is run as code"
        appended = plus_eq and word.value.partition("=")[0].endswith("+")  # ``GIT_DIR+=x``
        known = None if appended else Word(value, value, word.dynamic)
        hazard = _git_directory_hazard(name, known)
        if hazard:
            return hazard
    return ""


def _path_assignments(assignments: list[Word]) -> list[Word]:
    """The values ``PATH=VALUE`` (and ``PATH+=VALUE``) among ``assignments`` give ``PATH``."""
    out: list[Word] = []
    for word in assignments:
        name, eq, value = word.value.partition("=")
        if eq and name.rstrip("+") == "PATH":
            if name.endswith("+"):
                value = "$PATH" + value
            out.append(Word(value, word.raw, word.dynamic))
    return out


_PATH_READERS = frozenset({"read", "mapfile", "readarray", "getopts", "wait", "unset"})


def _path_builtin_values(name: str, args: tuple[Word, ...]) -> list[Word]:
    """The values the builtin ``name`` gives ``PATH``: ``export PATH=x`` and the other
    declarations; one only run time knows for ``read PATH``, ``printf -v PATH``, ``unset PATH``,
    ``export -n PATH`` and their kin (a word that may be the name counts)."""
    if name in DECLARATIONS:
        unexports = any(
            _has_option(w, "n") or (w.value.startswith("+") and "x" in w.value) for w in args
        )
        out: list[Word] = []
        for word in args:
            if word.value.startswith(("-", "+")):
                continue
            out += _path_assignments([word])
            if unexports and word.value == "PATH":  # (children start without it)
                out.append(_PATH_AT_RUN_TIME)
        return out
    if name == "printf":
        named = [b for a, b in itertools.pairwise(args) if a.value == "-v"]
    elif name in _PATH_READERS:
        named = list(args)
    else:
        return []
    return [_PATH_AT_RUN_TIME] if any(w.value == "PATH" for w in named) else []


def _env_drops_path(options: tuple[Word, ...], inner: tuple[Word, ...]) -> bool:
    """Whether ``env OPTIONS INNER`` runs its command without ``PATH`` (``-i``, ``-``, ``-u
    PATH``) and gives it none: a bash started then searches the working directory."""
    if any(is_assignment(w) and w.value.startswith("PATH=") for w in inner):
        return False
    if any(
        w.value == "-"
        or (w.value.startswith("--i") and not w.value.startswith("--ignore-s"))
        or (w.value[:1] == "-" and w.value[1:2] != "-" and "i" in w.value.partition("u")[0])
        for w in options
    ):
        return True
    unset = option_arguments(options, ("-u", "--unset"))
    return unset is None or any(value.value == "PATH" for _, value in unset)


def _declaration_blocker(args: tuple[Word, ...]) -> str:
    """``export PATH=...`` changes what later commands run, as ``PATH=... cmd`` does."""
    assignments = [w for w in args if not w.value.startswith(("-", "+")) and "=" in w.value]
    return _assignment_blocker(assignments)


def _is_process_substitution(word: Word) -> bool:
    return word.dynamic and word.raw.startswith(("<(", ">("))


def _may_set_physical(args: tuple[Word, ...]) -> bool:
    """Whether ``set args`` may turn ``-P`` (``-o physical``) on or off."""
    return any(
        word.dynamic
        or word.value == "physical"
        or (word.value[:1] in "-+" and "P" in word.value[1:])
        for word in args
    )


def _analyze_text(
    text: str, out: list[CommandFacts], depth: int, dirs: DirectoryTracker, start: Place
) -> Place:
    """Analyze a nested script run from ``start``; where its shell ends."""
    if depth + 1 > _MAX_NESTING:
        raise ShellSyntaxError("commands nested too deeply")
    simple, _ = parse_command(text)
    nested = DirectoryTracker(start, dirs.searches, dirs.physical)
    for cmd in simple:
        _analyze(cmd, out, depth + 1, nested)
    _analyze_later(out, nested)
    if nested.physical and not dirs.physical:  # ``eval "set -P"`` changes this shell
        dirs.may_turn_physical()
    return nested.end()


def _analyze_later(out: list[CommandFacts], dirs: DirectoryTracker) -> None:
    """The scripts a shell runs later (``trap`` actions), from anywhere it may be by then."""
    while dirs.later:
        text, depth = dirs.later.pop(0)
        _analyze_text(text, out, depth, dirs, dirs.end())


def _assignment_blocker(assignments: list[Word]) -> str:
    for word in assignments:
        # The value: quotes and line continuations gone, as the program sees the variable.
        name = word.value.partition("=")[0].rstrip("+")
        if name not in HARMLESS_VARIABLES and not name.startswith(HARMLESS_VARIABLE_PREFIXES):
            return f"assigns {name}"
    return ""


def _redirect_writes(redirects: list[Redirect]) -> list[Word]:
    """The files the redirections open for writing (or create)."""
    out: list[Word] = []
    for r in redirects:
        target = r.target
        if r.op not in _OUTPUTS or target is None or _is_process_substitution(target):
            continue
        if r.op == ">&" and not target.dynamic and (target.value == "-" or target.value.isdigit()):
            continue  # descriptor duplication
        out.append(target)
    return out


def _redirect_blocker(redirects: list[Redirect]) -> str:
    for r in redirects:
        if r.op in _HEREDOCS:
            continue  # data for the program (its substitutions are commands of their own)
        target = r.target
        if target is None or _is_process_substitution(target):
            continue  # a pipe to a command that is checked on its own
        if (
            r.op in ("<&", ">&")
            and not target.dynamic
            and (target.value == "-" or target.value.isdigit())
        ):
            continue  # descriptor duplication
        if not target.dynamic and _is_harmless_target(target.value):
            continue
        return f"redirects to {target.text}"
    return ""


def _is_harmless_target(value: str) -> bool:
    """A device that opens no file of the disk, spelled exactly: a prefix test would pass
    ``/dev/fd/../../w/x`` or ``/dev/null/..``, which name other files."""
    return value in HARMLESS_TARGETS or _DESCRIPTOR_TARGET.fullmatch(value) is not None
