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
fed to a shell) are parsed again and contribute commands of their own.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from fastgate.permissions.shell import (
    Redirect,
    ShellSyntaxError,
    SimpleCommand,
    Word,
    parse_command,
)
from fastgate.permissions.wrappers import WRAPPERS, is_assignment, unwrap

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
    }
)
CODE_VARIABLE_PREFIXES = ("BASH_FUNC_",)  # an exported function: ``BASH_FUNC_ls%%=() { ...; }``
# Builtins that set the variables named by their arguments.
DECLARATIONS = frozenset({"declare", "typeset", "local", "export", "readonly"})
HARMLESS_TARGETS = frozenset({"/dev/null", "/dev/stdin", "/dev/stdout", "/dev/stderr"})
_MAX_NESTING = 16
_NAME_ARGUMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\[.*\])?(?:\+?=|$)", re.DOTALL)
_LITERAL_INDEX = re.compile(r"\[\s*-?[0-9]+\s*\]")
_HEREDOCS = frozenset({"<<", "<<-", "<<<"})


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


@dataclass(frozen=True, slots=True)
class CommandAnalysis:
    commands: tuple[CommandFacts, ...]
    normalized: str
    error: str | None = None  # set when the command could not be parsed

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
    why_unknown = cmd.hazard or _assignment_hazard(cmd.assignments)
    path_words = [w for w in cmd.words[1:]] + [
        r.target
        for r in cmd.redirects
        if r.target is not None and r.op != "<<<" and not _is_process_substitution(r.target)
    ]
    words = tuple(cmd.words)
    if not words:
        if blocker or why_unknown:
            out.append(
                CommandFacts(
                    (),
                    (),
                    False,
                    bool(why_unknown),
                    False,
                    tuple(path_words),
                    blocker or why_unknown,
                    why_unknown,
                )
            )
        return
    forms = [words]
    allow_forms = [words]
    transparent = True
    delegated = False
    current = words
    for _ in range(_MAX_NESTING):
        program = current[0]
        if program.dynamic or program.value.startswith("-"):
            # not known, or an option left over from a wrapper we misread
            why_unknown = why_unknown or f"the program `{program.raw}` is known only at run time"
            break
        name = program_name(program)
        if name in SHELLS:
            result = _nested_shell(current[1:], cmd, out, depth)
            if result is None:
                why_unknown = why_unknown or f"{name} reads a script not known in advance"
            delegated = result is True
            break
        if name in ("eval", "trap"):
            code = _trap_action(current[1:]) if name == "trap" else current[1:]
            if code and not _nested_script(code, out, depth):
                why_unknown = why_unknown or f"{name} runs text known only at run time"
            delegated = bool(code) and not why_unknown
            break
        if name == "find":
            why_unknown = why_unknown or _find_exec(current, out, depth)
            break
        wrapper = WRAPPERS.get(name)
        if wrapper is None:
            why_unknown = why_unknown or _builtin_hazard(name, current[1:])
            if name in REDEFINERS:
                why_unknown = why_unknown or f"{name} can change what a name runs"
            elif name in SCRIPT_RUNNERS and _sourced_script_unknown(current[1:], cmd, out, depth):
                why_unknown = why_unknown or f"{name} reads a script not known in advance"
            if name in DECLARATIONS:
                blocker = blocker or _declaration_blocker(current[1:])
            break
        unwrapped = unwrap(current, wrapper)
        if unwrapped is None:  # an option we cannot follow
            why_unknown = why_unknown or f"an option of {name} that cannot be followed"
            break
        inner, script = unwrapped
        if name == "xargs":
            inner = _xargs_replaced(current[1 : len(current) - len(inner)], inner)
        if script is not None or wrapper.joins_script:
            words_of_script = (script,) if script is not None else inner
            if not _nested_script(words_of_script, out, depth):
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
    out.append(
        CommandFacts(
            tuple(forms),
            tuple(allow_forms),
            not blocker,
            bool(why_unknown),
            delegated and transparent,
            tuple(path_words),
            blocker,
            why_unknown,
        )
    )


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


def _find_exec(words: tuple[Word, ...], out: list[CommandFacts], depth: int) -> str:
    """Record the commands of ``-exec`` and its kin; return why the expression cannot be known
    (a word known only at run time may be ``-exec`` itself), or ``""``."""
    if any(w.dynamic for w in words[1:]):
        return "find's expression has a word known only at run time (it may be -exec)"
    i = 1
    while i < len(words):
        if words[i].value in ("-exec", "-execdir", "-ok", "-okdir"):
            j = i + 1
            while j < len(words) and words[j].value not in (";", "+"):
                j += 1
            if j > i + 1:
                # ``{}`` becomes each file found: a word known only at run time
                command = [_replaced(w, "{}") for w in words[i + 1 : j]]
                _analyze(SimpleCommand(words=command), out, depth + 1)
            i = j
        i += 1
    return ""


def _replaced(word: Word, placeholder: str) -> Word:
    """``word`` as a run-time word when it holds a placeholder a program fills in."""
    return Word(word.value, word.raw, True) if placeholder in word.value else word


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
    return ""


def _is_code_variable(name: str) -> bool:
    return name in CODE_VARIABLES or name.startswith(CODE_VARIABLE_PREFIXES)


def _assignment_hazard(assignments: list[Word]) -> str:
    for word in assignments:
        name = word.value.partition("=")[0].rstrip("+")
        if _is_code_variable(name.partition("[")[0]):
            return f"assigns {name.partition('[')[0]}, whose value is run as code"
    return ""


def _declaration_blocker(args: tuple[Word, ...]) -> str:
    """``export PATH=...`` changes what later commands run, as ``PATH=... cmd`` does."""
    assignments = [w for w in args if not w.value.startswith(("-", "+")) and "=" in w.value]
    return _assignment_blocker(assignments)


def _is_process_substitution(word: Word) -> bool:
    return word.dynamic and word.raw.startswith(("<(", ">("))


def _analyze_text(text: str, out: list[CommandFacts], depth: int) -> None:
    if depth + 1 > _MAX_NESTING:
        raise ShellSyntaxError("commands nested too deeply")
    simple, _ = parse_command(text)
    for cmd in simple:
        _analyze(cmd, out, depth + 1)


def _assignment_blocker(assignments: list[Word]) -> str:
    for word in assignments:
        # The value: quotes and line continuations gone, as the program sees the variable.
        name = word.value.partition("=")[0].rstrip("+")
        if name in DANGEROUS_VARIABLES or name.startswith(("LD_", "DYLD_")):
            return f"assigns {name}"
    return ""


def _redirect_blocker(redirects: list[Redirect]) -> str:
    for r in redirects:
        if r.op in _HEREDOCS:
            # the program reads data no allow rule has seen: at least ASK
            return "feeds the program a heredoc" if r.op != "<<<" else "feeds a here-string"
        target = r.target
        if target is None or _is_process_substitution(target):
            continue  # a pipe to a command that is checked on its own
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
