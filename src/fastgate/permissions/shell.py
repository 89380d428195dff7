"""A conservative POSIX/bash command lexer for permission matching.

It splits a command line into simple commands the way bash would for everything that decides
*which programs run*: quoting (``'…'``, ``"…"``, ``$'…'``, backslashes), operators (``;`` ``&``
``&&`` ``||`` ``|`` ``|&`` newlines, subshell parentheses), command and process substitution
(``$(…)``, backticks, ``<(…)``, ``>(…)``, also inside ``"…"``, ``${…}``, ``$((…))`` and unquoted
heredoc bodies), redirections and heredocs. Every substitution becomes a simple command of its own.

It is not a full bash parser: constructs it does not model (``case``, function definitions,
``coproc``, arrays, ``;;``) raise ``ShellSyntaxError``, and callers treat such a command as one
that can never match an allow rule (fail closed).

Some constructs make bash evaluate text as code at run time: prompt and escape transformations
(``${x@P}``), indirect expansion (``${!x}``), and every arithmetic context that reads a
variable's value as an expression (``$((x))``, ``((x))``, ``$[x]``, ``${s:x}``, ``${a[x]}``,
``[[ x -eq 1 ]]``), where a value like ``a[$(cmd)]`` runs ``cmd``. The lexer records each as a
*hazard*: a ``SimpleCommand`` whose ``hazard`` says why the command cannot be known statically.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fastgate.permissions import braces
from fastgate.permissions.braces import DYNAMIC, LITERAL, UNQUOTED, Piece

_METACHARS = frozenset(" \t\n;&|()<>")
# Characters that end a run of plain unquoted text within a word.
_PLAIN_STOP = _METACHARS | frozenset("\\'\"$`{,}")
_REDIRECT = re.compile(r"(\d+|\{[A-Za-z_][A-Za-z0-9_]*\})?(<<<|<<-|<<|<>|<&|>&|>>|>\||&>>|&>|<|>)")
_NAME_START = re.compile(r"[A-Za-z_]")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SPECIAL_PARAM = frozenset("@*#?-$!0123456789")
_BRACE_EXPANSION = re.compile(r"\{[^{}]*(?:,|\.\.)[^{}]*\}")
_UNSUPPORTED_WORDS = frozenset({"case", "esac", "function", "coproc", "select"})
# Reserved words that only introduce or close a compound command: the command after them is
# what runs.
_LEADING_KEYWORDS = frozenset(
    {"!", "{", "}", "if", "then", "else", "elif", "fi", "do", "done", "while", "until"}
)
# Keywords after which ``cmd && next`` no longer means "next runs only when cmd ran and
# succeeded": a negation, or the end of a compound command (whose status may not be cmd's).
_BREAKS_CHAIN = frozenset({"!", "}", "fi", "done"})
_LOOP_CONDITIONS = frozenset({"while", "until"})
_MAX_DEPTH = 32
# Numeric literals of bash arithmetic (``0x1f``, ``16#ff``, ``42``): the only words an arithmetic
# context may hold for its value to be known; any name or ``$`` is a variable's value.
_NUMERIC_LITERAL = re.compile(r"\b(?:0[xX][0-9A-Fa-f]+|[0-9]+#[0-9A-Za-z@_]+|[0-9]+)\b")
_VARIABLE_REFERENCE = re.compile(r"[A-Za-z_$]")
_PARAMETER_HEAD = re.compile(r"([#!]?)([A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*#?$!-])")
_LITERAL_INDEX = re.compile(r"\s*(?:[@*]|-?[0-9]+)\s*")
# ``[[ ... ]]`` operators whose operands bash evaluates as arithmetic, and the ones that look a
# name up (an array subscript in the name is arithmetic too).
_ARITHMETIC_TESTS = frozenset({"-eq", "-ne", "-lt", "-le", "-gt", "-ge"})
_NAME_TESTS = frozenset({"-v", "-R"})
_NUMERIC_PARAMETER = re.compile(r"[0-9]+|\$[#?$!]|\$\{#[A-Za-z_][A-Za-z0-9_]*\}")


class ShellSyntaxError(ValueError):
    """The command uses syntax this lexer does not model, or is malformed."""


@dataclass(frozen=True, slots=True)
class Word:
    """One shell word. ``value`` is the unquoted text (expansions kept as written); ``dynamic``
    means its runtime value is unknown (parameter/command/arithmetic expansion, globs, braces)."""

    value: str
    raw: str
    dynamic: bool = False

    @property
    def text(self) -> str:
        """What allow rules compare: the unquoted value, or the spelling when it is dynamic."""
        return self.raw if self.dynamic else self.value


@dataclass(frozen=True, slots=True)
class Redirect:
    op: str
    target: Word | None  # None for heredocs (their text is ``body``)
    body: str | None = None
    fd: str = ""  # the descriptor written before the operator (``3<<<``), "" for the default
    expand: bool = False  # a heredoc whose body bash expands (its delimiter is unquoted)


@dataclass(slots=True)
class SimpleCommand:
    assignments: list[Word] = field(default_factory=list)
    words: list[Word] = field(default_factory=list)
    redirects: list[Redirect] = field(default_factory=list)
    piped_in: bool = False
    # Set on a command of its own for text bash will evaluate as code (see the module docs):
    # what runs then cannot be known statically.
    hazard: str = ""
    # Where it runs, for directory changes: the chain of subshells it is in (``(...)``, every
    # substitution), from the outermost; ``after``: the command that ran and succeeded whenever
    # this one runs (``after && this``); ``in_loop``: it may run many times.
    scope: tuple[int, ...] = (0,)
    after: SimpleCommand | None = None
    in_loop: bool = False
    piped_out: bool = False  # a pipeline element with a ``|`` after it: a subshell
    overflow: bool = False  # a brace expansion past its bound (the hazard says so)
    # Words that run nothing but become a variable's value (``for NAME in WORDS``): they may
    # name files the loop's body reads through the variable.
    values: list[Word] = field(default_factory=list)


@dataclass(slots=True)
class _PendingHeredoc:
    delimiter: str
    strip_tabs: bool
    expand: bool
    command: SimpleCommand
    index: int


def parse_command(text: str, *, expand_braces: bool = True) -> tuple[list[SimpleCommand], str]:
    """Every simple command of ``text`` (substitutions included) and a whitespace-normalized
    spelling of the whole line. Raises ``ShellSyntaxError``. ``expand_braces=False`` keeps a
    brace expansion as one word whose value is known only at run time (rule specifiers)."""
    if "\x00" in text:
        raise ShellSyntaxError("NUL byte in command")
    out: list[SimpleCommand] = []
    lexer = _Lexer(text, out, 0, expand_braces=expand_braces)
    lexer.parse_list(None)
    return out, " ".join(lexer.canon)


class _Lexer:
    __slots__ = (
        "canon",
        "depth",
        "expand_braces",
        "i",
        "ids",
        "loops",
        "out",
        "pending",
        "s",
        "scope",
    )

    def __init__(
        self,
        text: str,
        out: list[SimpleCommand],
        depth: int,
        scope: tuple[int, ...] = (0,),
        ids: list[int] | None = None,
        expand_braces: bool = True,
    ) -> None:
        if depth > _MAX_DEPTH:
            raise ShellSyntaxError("nesting too deep")
        self.s = text
        self.i = 0
        self.out = out
        self.depth = depth
        self.pending: list[_PendingHeredoc] = []
        self.canon: list[str] = []
        self.scope = scope
        self.ids = ids if ids is not None else [0]  # shared by every lexer of one command
        self.loops = 0  # ``do`` ... ``done`` bodies open at this point
        self.expand_braces = expand_braces

    def _child(self, text: str) -> _Lexer:
        """A lexer for a substitution's text: a subshell of its own."""
        return _Lexer(
            text, self.out, self.depth + 1, self._subshell(), self.ids, self.expand_braces
        )

    def _subshell(self) -> tuple[int, ...]:
        self.ids[0] += 1
        return (*self.scope, self.ids[0])

    # -- command lists -------------------------------------------------------------------------

    def parse_list(self, end: str | None) -> None:
        """Parse commands until ``end`` (``")"``) or the end of the text."""
        s = self.s
        cmd = SimpleCommand(scope=self.scope)
        dangling: str | None = None  # an operator still waiting for its right-hand command
        grouped = False
        before: str | None = None  # the operator before ``cmd``
        while True:
            self._skip_blanks()
            if self.i >= len(s) or s[self.i] == end:
                if dangling is not None:
                    raise ShellSyntaxError(f"{dangling!r} without a command after it")
            if self.i >= len(s):
                if end is not None:
                    raise ShellSyntaxError(f"missing {end!r}")
                if self.pending:
                    raise ShellSyntaxError(f"heredoc {self.pending[0].delimiter!r} not closed")
                self._finish(cmd)
                return
            c = s[self.i]
            if c == end:
                self.i += 1
                if self.pending:
                    raise ShellSyntaxError("heredoc inside a substitution is not closed")
                self._finish(cmd)
                return
            if c == "#" and self._at_word_start():
                while self.i < len(s) and s[self.i] != "\n":
                    self.i += 1
                continue
            if c == "\n":
                self.i += 1
                if dangling is not None:  # ``a &&<newline>b`` continues the list
                    continue
                self._finish(cmd)
                grouped = False
                cmd = SimpleCommand(scope=self.scope)
                before = None
                self._read_heredoc_bodies()
                self.canon.append(";")
                continue
            op = self._operator()
            if op is not None:
                if op == ";;":
                    raise ShellSyntaxError("';;' (case) is not supported")
                if not (cmd.words or cmd.assignments or cmd.redirects or grouped) and op != ";":
                    raise ShellSyntaxError(f"{op!r} without a command before it")
                cmd.piped_out = op in ("|", "|&")
                plain = self._finish(cmd) and before not in ("||", "|", "|&")
                grouped = False
                cmd = SimpleCommand(
                    piped_in=op in ("|", "|&"),
                    scope=self.scope,
                    after=cmd if op == "&&" and plain else None,
                )
                before = op
                self.canon.append(op)
                dangling = op if op in ("&&", "||", "|", "|&") else None
                continue
            dangling = None
            if c == "(":
                if not _at_command_start(cmd):
                    raise ShellSyntaxError("'(' after a word (function definitions, arrays)")
                if s.startswith("((", self.i) and self._arithmetic_command():
                    grouped = True
                    continue
                self.i += 1
                self.canon.append("(")
                outer = self.scope
                self.scope = self._subshell()
                self.parse_list(")")
                self.scope = outer
                self.canon.append(")")
                grouped = True  # ``( a ) | b``: the subshell is the left-hand command
                continue
            if c == ")":
                raise ShellSyntaxError("unbalanced ')'")
            if (c == "<" or c == ">") and s.startswith("(", self.i + 1):
                word = self._process_substitution()
                self.canon.append(word.raw)
                cmd.words.append(word)
                continue
            m = _REDIRECT.match(s, self.i)
            if m is not None:
                self.i = m.end()
                self._redirect(cmd, m.group(2), m.group(0), m.group(1) or "")
                continue
            word, expanded = self._read_words()
            self.canon.append(word.raw)
            if not cmd.words and _is_assignment(word):
                cmd.assignments.append(word)  # bash expands no braces in an assignment
            elif not cmd.words and not word.dynamic and word.value in _UNSUPPORTED_WORDS:
                raise ShellSyntaxError(f"{word.value!r} is not supported")
            elif not word.dynamic and word.value == "[[" and _at_command_start(cmd):
                cmd.words.append(word)
                self._conditional(cmd)
            else:
                cmd.words.extend(expanded)

    def _finish(self, cmd: SimpleCommand) -> bool:
        """Record ``cmd``; return whether ``cmd && next`` means next runs only after cmd ran
        and succeeded (a plain command, not the end of a compound one nor negated)."""
        plain = True
        while cmd.words and not cmd.words[0].dynamic and cmd.words[0].value in _LEADING_KEYWORDS:
            keyword = cmd.words.pop(0).value
            plain = plain and keyword not in _BREAKS_CHAIN
            if keyword == "do":
                self.loops += 1
            elif keyword == "done":
                self.loops = max(0, self.loops - 1)
            elif keyword in _LOOP_CONDITIONS:
                cmd.in_loop = True
            # After a keyword a new command starts: ``if X=1 rm x`` assigns, then runs rm.
            while cmd.words and _is_assignment(cmd.words[0]):
                cmd.assignments.append(cmd.words.pop(0))
        if cmd.words and cmd.words[0].value == "for" and not cmd.words[0].dynamic:
            # ``for NAME in WORDS``: no program runs; substitutions inside the words were
            # already recorded as commands of their own.
            if len(cmd.words) > 3 and cmd.words[2].value == "in":
                cmd.values.extend(cmd.words[3:])
            cmd.words.clear()
        cmd.in_loop = cmd.in_loop or self.loops > 0
        if cmd.words or cmd.assignments or cmd.redirects or cmd.values:
            self.out.append(cmd)
            return plain and bool(cmd.words)
        return False

    def _arithmetic_command(self) -> bool:
        """At ``((``: read an arithmetic command when it closes with ``))`` and return True.
        Otherwise bash may still read it as arithmetic: a hazard, then False (the text is read
        as nested subshells so the commands of any substitution are still seen)."""
        s, start = self.s, self.i
        end = _arithmetic_end(s, start + 2)
        if end is None:
            self._hazard("an arithmetic command `((...))` bash may read with variables in it")
            return False
        self._arithmetic(s[start + 2 : end - 2], "((...))")
        self.canon.append(s[start:end])
        self.i = end
        return True

    def _conditional(self, cmd: SimpleCommand) -> None:
        """The words of ``[[ ... ]]`` after ``[[`` (appended to ``cmd``): inside it ``&&``,
        ``||``, ``(``, ``)``, ``<`` and ``>`` are parts of the test, not shell operators."""
        s = self.s
        words: list[Word] = []
        while True:
            self._skip_blanks()
            if self.i >= len(s):
                raise ShellSyntaxError("'[[' without ']]'")
            c = s[self.i]
            if c == "\n":
                self.i += 1
                continue
            if s.startswith(("&&", "||"), self.i):
                self.canon.append(s[self.i : self.i + 2])
                self.i += 2
                continue
            if c in "()<>":
                self.canon.append(c)
                words.append(Word(c, c))
                self.i += 1
                continue
            if c in ";&|":
                raise ShellSyntaxError(f"{c!r} inside '[[ ... ]]'")
            word = self._read_word()
            self.canon.append(word.raw)
            if word.value == "]]" and not word.dynamic:
                break
            words.append(word)
        cmd.words.extend(words)
        cmd.words.append(Word("]]", "]]"))
        reason = _conditional_hazard(words)
        if reason:
            self._hazard(reason)

    def _hazard(self, reason: str, overflow: bool = False) -> None:
        self.out.append(SimpleCommand(hazard=reason, scope=self.scope, overflow=overflow))

    def _arithmetic(self, text: str, where: str) -> None:
        if _VARIABLE_REFERENCE.search(_NUMERIC_LITERAL.sub("0", text)):
            self._hazard(
                f"`{where}` evaluates variables' values as arithmetic, where a value such as "
                "`a[$(cmd)]` runs cmd"
            )

    def _operator(self) -> str | None:
        s, i = self.s, self.i
        for op in (";;", "&&", "||", "|&", ";", "|", "&"):
            if s.startswith(op, i):
                if op == "&" and s.startswith(("&>",), i):
                    return None
                self.i = i + len(op)
                return op
        return None

    def _at_word_start(self) -> bool:
        return self.i == 0 or self.s[self.i - 1] in _METACHARS

    def _skip_blanks(self) -> None:
        s = self.s
        while self.i < len(s):
            c = s[self.i]
            if c == " " or c == "\t":
                self.i += 1
            elif c == "\\" and s.startswith("\n", self.i + 1):
                self.i += 2
            else:
                return

    # -- redirections and heredocs ------------------------------------------------------------

    def _redirect(self, cmd: SimpleCommand, op: str, spelled: str, fd: str) -> None:
        self._skip_blanks()
        s = self.s
        if op not in ("<<", "<<-") and s.startswith(("<(", ">("), self.i):
            # ``> >(tee log)``: the target is a pipe to a command of its own (recorded).
            target = self._process_substitution()
            self.canon.append(spelled + target.raw)
            cmd.redirects.append(Redirect(op, target, fd=fd))
            return
        if self.i >= len(s) or s[self.i] in _METACHARS:
            raise ShellSyntaxError(f"redirection {op!r} without a target")
        if op in ("<<", "<<-", "<<<"):
            # A heredoc's delimiter and a here-string are never brace-expanded.
            target = self._read_word()
        else:
            target, expanded = self._read_words()
            if len(expanded) == 1:
                target = expanded[0]
            else:  # bash refuses it ("ambiguous redirect"): known only when it runs
                target = Word(target.raw, target.raw, dynamic=True)
        self.canon.append(spelled + target.raw)
        if op in ("<<", "<<-"):
            quoted = any(q in target.raw for q in "'\"\\")
            cmd.redirects.append(Redirect(op, None, "", fd, not quoted))
            self.pending.append(
                _PendingHeredoc(target.value, op == "<<-", not quoted, cmd, len(cmd.redirects) - 1)
            )
        else:
            cmd.redirects.append(Redirect(op, target, fd=fd))

    def _read_heredoc_bodies(self) -> None:
        s = self.s
        for doc in self.pending:
            lines: list[str] = []
            while True:
                if self.i >= len(s):
                    raise ShellSyntaxError(f"heredoc {doc.delimiter!r} not closed")
                nl = s.find("\n", self.i)
                line = s[self.i :] if nl < 0 else s[self.i : nl]
                self.i = len(s) if nl < 0 else nl + 1
                if doc.strip_tabs:
                    line = line.lstrip("\t")
                if line == doc.delimiter:
                    break
                lines.append(line)
            body = "\n".join(lines)
            if doc.expand:
                self._child(body).scan_expansions()
            self.canon.append(f"\n{body}\n{doc.delimiter}\n")
            old = doc.command.redirects[doc.index]
            doc.command.redirects[doc.index] = Redirect(old.op, None, body, old.fd, old.expand)
        self.pending.clear()

    # -- words ---------------------------------------------------------------------------------

    def _read_word(self) -> Word:
        """One word, braces kept as written (where bash does not expand them)."""
        return _word_of(*self._read_pieces())

    def _read_words(self) -> tuple[Word, list[Word]]:
        """One word as written, and the words its brace expansion yields (itself when none)."""
        pieces, raw = self._read_pieces()
        word = _word_of(pieces, raw)
        if not braces.has_braces(pieces):
            return word, [word]
        if not self.expand_braces:
            plain = "".join(p[0] if p[2] == UNQUOTED else "_" for p in pieces)
            if _BRACE_EXPANSION.search(plain):
                word = Word(word.value, word.raw, True)
            return word, [word]
        try:
            expanded = braces.expand(pieces)
        except braces.TooLarge:
            self._hazard(
                f"the brace expansion `{_shorten(raw)}` yields more than "
                f"{braces.MAX_RESULTS} words",
                overflow=True,
            )
            word = Word(word.value, word.raw, True)
            return word, [word]
        return word, [_word_of(p, "".join(piece[1] for piece in p)) for p in expanded]

    def _read_pieces(self) -> tuple[list[Piece], str]:
        """The word at the cursor as pieces (see ``braces``), and its spelling."""
        s = self.s
        start = self.i
        pieces: list[Piece] = []
        while self.i < len(s):
            c = s[self.i]
            begin = self.i
            if c in _METACHARS:
                break
            if c == "\\":
                if s.startswith("\n", self.i + 1):
                    self.i += 2
                    continue
                self.i += 2
                # A backslash ending the text stands for itself.
                value_text = s[begin + 1 : self.i] or "\\"
                pieces.append((value_text, s[begin : self.i], LITERAL))
                continue
            value: list[str] = []
            dynamic = False
            if c == "'":
                end = s.find("'", self.i + 1)
                if end < 0:
                    raise ShellSyntaxError("unterminated single quote")
                value.append(s[self.i + 1 : end])
                self.i = end + 1
            elif c == '"':
                dynamic = self._double_quoted(value)
            elif c == "$" and s.startswith("'", self.i + 1):
                value.append(self._ansi_c_quoted())
            elif c == "$" and s.startswith('"', self.i + 1):
                self.i += 1
                dynamic = self._double_quoted(value)
            elif c == "$" or c == "`":
                dynamic = self._expansion(value)
            else:
                if c in "{,}":
                    self.i += 1
                else:  # a run of plain characters
                    while self.i < len(s) and s[self.i] not in _PLAIN_STOP:
                        self.i += 1
                text = s[begin : self.i]
                pieces.append((text, text, UNQUOTED))
                continue
            pieces.append(("".join(value), s[begin : self.i], DYNAMIC if dynamic else LITERAL))
        return pieces, s[start : self.i]

    def _double_quoted(self, value: list[str]) -> bool:
        s = self.s
        self.i += 1
        dynamic = False
        while True:
            if self.i >= len(s):
                raise ShellSyntaxError("unterminated double quote")
            c = s[self.i]
            if c == '"':
                self.i += 1
                return dynamic
            if c == "\\":
                nxt = s[self.i + 1 : self.i + 2]
                if nxt == "\n":
                    self.i += 2
                elif nxt in ("$", "`", '"', "\\"):
                    value.append(nxt)
                    self.i += 2
                else:
                    value.append(c)
                    self.i += 1
            elif c == "$" or c == "`":
                if self._expansion(value):
                    dynamic = True
            else:
                value.append(c)
                self.i += 1

    def _expansion(self, value: list[str]) -> bool:
        """At ``$`` or a backtick: consume the expansion, append its spelling to ``value``,
        record any command inside; return whether the value is dynamic."""
        s, start = self.s, self.i
        if s[start] == "`":
            self._backticks()
        elif s.startswith("$((", start) and (end := _arithmetic_end(s, start + 3)) is not None:
            self._arithmetic(s[start + 3 : end - 2], "$((...))")
            self.i = end
        elif s.startswith("$(", start):
            if s.startswith("$((", start):  # bash may still read this as arithmetic
                self._hazard("an arithmetic expansion `$((...))` bash may read with variables")
            self.i = start + 2
            inner = self._child(s)
            inner.i = self.i
            inner.parse_list(")")
            self.i = inner.i
        elif s.startswith("${", start):
            self.i = self._brace_end(start + 2)
            reason = _parameter_hazard(s[start + 2 : self.i - 1])
            if reason:
                self._hazard(reason)
        else:
            m = _NAME.match(s, start + 1)
            if m is not None:
                self.i = m.end()
            elif start + 1 < len(s) and s[start + 1] in _SPECIAL_PARAM:
                self.i = start + 2
            else:  # a lone "$" is a literal dollar sign
                value.append("$")
                self.i = start + 1
                if s.startswith("[", self.i):  # ``$[x]``: the old spelling of ``$((x))``
                    self._hazard("`$[...]` evaluates variables' values as arithmetic")
                    return True
                return False
        value.append(s[start : self.i])
        return True

    def _brace_end(self, i: int) -> int:
        """Index just past the ``}`` closing a ``${``, skipping quotes and nested expansions
        (whose commands are recorded)."""
        s = self.s
        depth = 1
        while i < len(s):
            c = s[i]
            if c == "\\":
                i += 2
            elif c == "'":
                end = s.find("'", i + 1)
                if end < 0:
                    raise ShellSyntaxError("unterminated single quote in ${...}")
                # Within "..." these quotes are literal and "$(...)" inside them runs.
                self._child(s[i + 1 : end]).scan_expansions()
                i = end + 1
            elif c == '"':
                self.i = i
                self._double_quoted([])
                i = self.i
            elif c == "$" or c == "`":
                self.i = i
                self._expansion([])
                i = self.i
            else:
                i += 1
                if c == "{":
                    depth += 1
                elif c == "}":
                    depth -= 1
                    if depth == 0:
                        return i
        raise ShellSyntaxError("unterminated ${...}")

    def _backticks(self) -> None:
        s = self.s
        i = self.i + 1
        inner: list[str] = []
        while True:
            if i >= len(s):
                raise ShellSyntaxError("unterminated backquote")
            c = s[i]
            if c == "`":
                break
            if c == "\\" and i + 1 < len(s) and s[i + 1] in "`$\\":
                inner.append(s[i + 1])
                i += 2
                continue
            inner.append(c)
            i += 1
        self.i = i + 1
        self._child("".join(inner)).parse_list(None)

    def _process_substitution(self) -> Word:
        start = self.i
        inner = self._child(self.s)
        inner.i = self.i + 2
        inner.parse_list(")")
        self.i = inner.i
        raw = self.s[start : self.i]
        return Word(raw, raw, dynamic=True)

    def _ansi_c_quoted(self) -> str:
        s = self.s
        i = self.i + 2
        out: list[str] = []
        while True:
            if i >= len(s):
                raise ShellSyntaxError("unterminated $'...' quote")
            c = s[i]
            if c == "'":
                self.i = i + 1
                return "".join(out)
            if c != "\\":
                out.append(c)
                i += 1
                continue
            i = ansi_escape(s, i + 1, out)

    def scan_expansions(self) -> None:
        """Record the commands of every substitution in free text (a heredoc body, the inside
        of ``${...}`` or ``$((...))``); everything else is data."""
        s = self.s
        sink: list[str] = []
        while self.i < len(s):
            c = s[self.i]
            if c == "\\":
                self.i += 2
            elif c == "$" or c == "`":
                self._expansion(sink)
            else:
                self.i += 1


_SIMPLE_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "e": "\x1b",
    "E": "\x1b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "?": "?",
}


def ansi_escape(s: str, i: int, out: list[str]) -> int:
    """Decode one ``$'...'`` escape starting after the backslash; return the next index."""
    c = s[i : i + 1]
    if c in _SIMPLE_ESCAPES:
        out.append(_SIMPLE_ESCAPES[c])
        return i + 1
    for prefix, width, base in (("x", 2, 16), ("u", 4, 16), ("U", 8, 16)):
        if c == prefix:
            digits = re.match(f"[0-9A-Fa-f]{{1,{width}}}", s[i + 1 : i + 1 + width])
            if digits is None:
                out.append("\\" + c)
                return i + 1
            out.append(chr(min(int(digits.group(0), base), 0x10FFFF)))
            return i + 1 + len(digits.group(0))
    octal = re.match(r"[0-7]{1,3}", s[i : i + 3])
    if octal is not None:
        out.append(chr(int(octal.group(0), 8) & 0xFF))
        return i + len(octal.group(0))
    if c == "c" and i + 1 < len(s):  # control character: \cX
        out.append(chr(ord(s[i + 1]) & 0x1F))
        return i + 2
    out.append("\\" + c)
    return i + 1


_ARITHMETIC_STOP = frozenset("'\"`#;\n\\{}")


def _arithmetic_end(s: str, i: int) -> int | None:
    """End of ``$((...))`` when it is plain arithmetic. Bash reads ``$((`` as arithmetic only
    if it closes with ``))``; otherwise as a command substitution starting with a subshell. We
    answer "arithmetic" only for simple contents (no quotes, substitutions, comments or
    separators), so anything unusual is parsed as commands: strictly more is checked."""
    depth = 2
    while i < len(s):
        c = s[i]
        if c in _ARITHMETIC_STOP or (c == "$" and s.startswith(("$(", "${"), i)):
            return None
        i += 1
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 1:
                return i + 1 if s.startswith(")", i) else None
    return None


def _word_of(pieces: list[Piece], raw: str) -> Word:
    value = "".join(piece[0] for piece in pieces)
    dynamic = any(piece[2] == DYNAMIC for piece in pieces)
    if not dynamic:
        plain = "".join(p[0] if p[2] == UNQUOTED else "_" for p in pieces)
        dynamic = _is_pattern(plain)
    return Word(value, raw, dynamic)


def _shorten(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _is_pattern(plain: str) -> bool:
    """Unquoted text bash expands as a glob: ``*``, ``?``, or a ``[`` closed later (a lone
    ``[``, as in ``[ -f x ]`` or ``[[``, is a plain character)."""
    if "*" in plain or "?" in plain:
        return True
    opening = plain.find("[")
    return opening >= 0 and "]" in plain[opening + 1 :]


def _at_command_start(cmd: SimpleCommand) -> bool:
    """Nothing but reserved words (``if``, ``while``, ``!``...) before this point."""
    return not cmd.assignments and all(
        not w.dynamic and w.value in _LEADING_KEYWORDS for w in cmd.words
    )


def _parameter_hazard(inner: str) -> str:
    """Why ``${inner}`` evaluates text as code, or ``""``."""
    m = _PARAMETER_HEAD.match(inner)
    if m is None:
        return ""  # bash refuses it ("bad substitution")
    flag = m.group(1)
    rest = inner[m.end() :]
    subscript: str | None = None
    if rest.startswith("["):
        close = _subscript_end(rest)
        if close < 0:
            return "an array subscript bash evaluates as arithmetic"
        subscript, rest = rest[1:close], rest[close + 1 :]
    if flag == "!":
        listing = (subscript is None and rest in ("*", "@")) or (
            subscript in ("@", "*") and not rest
        )
        if not listing:
            return "`${!name}` reads a variable named by another's value (subscripts included)"
    if subscript is not None and not _LITERAL_INDEX.fullmatch(subscript):
        return "an array subscript `${a[...]}` is arithmetic on variables' values"
    if len(rest) == 2 and rest[0] == "@" and rest[1].isalpha():
        return f"the `${{...@{rest[1]}}}` transformation can evaluate a value (prompt expansion)"
    if rest.startswith(":") and rest[1:2] not in ("-", "=", "?", "+"):
        if _VARIABLE_REFERENCE.search(_NUMERIC_LITERAL.sub("0", rest[1:])):
            return "substring offsets `${s:offset:length}` are arithmetic on variables' values"
    return ""


def _subscript_end(text: str) -> int:
    """Index of the ``]`` closing the ``[`` at ``text[0]`` (nested brackets counted), or -1."""
    depth = 0
    for i, c in enumerate(text):
        if c == "[":
            depth += 1
        elif c == "]":
            depth -= 1
            if depth == 0:
                return i
    return -1


def _conditional_hazard(words: list[Word]) -> str:
    """Why ``[[ words ]]`` evaluates text as code, or ``""``: the operands of an arithmetic
    comparison are expressions (a name is a variable's value), and ``-v``/``-R`` look up a name
    whose subscript is arithmetic."""
    for i, word in enumerate(words):
        if word.dynamic:
            continue
        if word.value in _ARITHMETIC_TESTS:
            operands = words[i - 1 : i] + words[i + 1 : i + 2]
            if any(not _NUMERIC_PARAMETER.fullmatch(w.raw.strip("'\"")) for w in operands):
                return f"`[[ ... {word.value} ... ]]` evaluates its operands as arithmetic"
        elif word.value in _NAME_TESTS:
            operand = words[i + 1] if i + 1 < len(words) else None
            if operand is None or operand.dynamic or "[" in operand.value:
                return f"`[[ {word.value} name ]]` evaluates a subscript of the name"
    return ""


def _is_assignment(word: Word) -> bool:
    # Bash drops a backslash-newline before it reads words: ``P\<newline>ATH=x`` assigns PATH.
    # (Within a NAME nothing else can stand between its letters: quotes make it no NAME.)
    raw = word.raw.replace("\\\n", "")
    if not _NAME_START.match(raw):
        return False
    m = _NAME.match(raw)
    assert m is not None
    rest = raw[m.end() :]
    return rest.startswith("=") or rest.startswith("+=")
