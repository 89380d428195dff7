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
HARMLESS_TARGETS = frozenset({"/dev/null", "/dev/stdin", "/dev/stdout", "/dev/stderr"})
_MAX_NESTING = 16


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
        unwrapped = unwrap(current, wrapper)
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
        while leading < len(inner) and is_assignment(inner[leading]):
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
        # The value: quotes and line continuations gone, as the program sees the variable.
        name = word.value.partition("=")[0].rstrip("+")
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
