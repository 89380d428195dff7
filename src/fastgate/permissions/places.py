"""Where each command of a line runs: ``cd``, ``pushd`` and ``popd`` move the directory that
later relative words name files in.

A ``Place`` lists the directories a command may start in: ``""`` is where the line starts (the
workspace root), a relative one is below it, an absolute one or one under ``~`` is itself. It is
a set because bash's control flow is not followed: after ``cd sub; x``, x runs in ``sub`` or, if
the ``cd`` failed, where it was, and a word is checked in each. Only ``cd sub && x`` (x runs
only when that cd ran and succeeded) narrows it to ``sub``. A directory not known before the
line runs (``cd "$dir"``, ``cd -`` with no earlier ``cd``, a ``cd`` in a loop) makes the place
``unknown``: relative words there name files nobody can check in advance.

Each subshell (``( ... )``, every substitution, a pipeline element followed by ``|``) starts
where its parent was and moves nothing outside. Paths are kept as written (``a/..`` stays), so
that both bash's logical ``cd`` and the physical ``cd -P`` are checked: the resolver looks at
the lexical and the canonical form of every path.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastgate.permissions.shell import SimpleCommand, Word

MAX_BASES = 8  # directories one command may start in; past that, "unknown"
_DIRECTORY_OPTIONS = frozenset("LPe@")


@dataclass(frozen=True, slots=True)
class Place:
    bases: tuple[str, ...] = ("",)
    unknown: bool = False

    def __or__(self, other: Place) -> Place:
        bases = tuple(dict.fromkeys(self.bases + other.bases))
        unknown = self.unknown or other.unknown or len(bases) > MAX_BASES
        return Place(bases[:MAX_BASES], unknown)

    def moved(self, target: str) -> Place:
        """Where ``cd target`` leads from here."""
        if target.startswith(("/", "~")):
            return Place((target,))
        return Place(
            tuple(dict.fromkeys(_joined(base, target) for base in self.bases)), self.unknown
        )

    def lost(self) -> Place:
        return Place(self.bases, True)


START = Place()
NOWHERE = Place((), True)
DIRECTORY_CHANGERS = frozenset({"cd", "pushd", "popd"})


def _joined(base: str, target: str) -> str:
    if not base:
        return target
    return base.rstrip("/") + "/" + target


@dataclass(slots=True)
class _Shell:
    """What one shell (or subshell) knows of its working directory."""

    anywhere: Place  # every directory it may be in by now
    previous: Place = NOWHERE  # ``$OLDPWD``: inherited (unknown) until a ``cd`` runs here
    stack: tuple[Place, ...] = ()  # ``pushd``'s directory stack, newest last

    def copy(self) -> _Shell:
        return _Shell(self.anywhere, self.previous, self.stack)


class DirectoryTracker:
    """Follows the directory changes of one parsed command line, command by command, in the
    order the lexer listed them (the order bash runs them in)."""

    __slots__ = ("_after", "_previous", "_shells", "later", "searches")

    def __init__(self, start: Place, searches: bool) -> None:
        # ``searches``: ``cd name`` may look the name up in ``CDPATH`` (or ``cdable_vars``).
        self.searches = searches
        self._shells: dict[tuple[int, ...], _Shell] = {(0,): _Shell(start)}
        self._after: dict[int, Place] = {}  # id(command) -> where the next ``&&`` runs
        self._previous: dict[int, Place] = {}  # id(command) -> ``$OLDPWD`` for the next ``&&``
        # Scripts that run later in this shell (``trap`` actions), with their nesting depth:
        # analyzed once the line is, from wherever the shell may be by then.
        self.later: list[tuple[str, int]] = []

    def place_of(self, cmd: SimpleCommand) -> Place:
        """Where ``cmd`` may start."""
        if cmd.after is not None:
            narrowed = self._after.get(id(cmd.after))
            if narrowed is not None:
                return narrowed
        return self._shell(cmd.scope).anywhere

    def ran(self, cmd: SimpleCommand, seen: Place, moved: Place | None) -> None:
        """``cmd`` ran from ``seen`` and, in the same shell, moved to ``moved`` (None: it
        changed no directory)."""
        if moved is None or cmd.piped_out:  # a ``cd`` in a pipeline's subshell moves nothing
            self._after[id(cmd)] = seen
            self._previous[id(cmd)] = self._previous_of(cmd)
            return
        if cmd.in_loop:  # it may run any number of times
            moved = (seen | moved).lost()
        elif cmd.piped_in:  # the last element of a pipeline runs in this shell with lastpipe
            moved = seen | moved
        shell = self._shell(cmd.scope)
        # a cd that may not have run leaves ``$OLDPWD`` as it was
        shell.previous = shell.previous | seen
        shell.anywhere = shell.anywhere | moved
        self._after[id(cmd)] = moved
        self._previous[id(cmd)] = seen

    def moved_by(
        self, cmd: SimpleCommand, name: str, args: tuple[Word, ...], seen: Place
    ) -> Place | None:
        """Where ``cd``/``pushd``/``popd`` with ``args`` leads from ``seen`` (None: it fails or
        changes no directory); keeps ``pushd``'s stack."""
        shell = self._shell(cmd.scope)
        if name == "cd":
            return self._cd(cmd, args, seen)
        if name == "pushd":
            return self._pushd(cmd, args, seen, shell)
        return self._popd(args, shell)

    def _previous_of(self, cmd: SimpleCommand) -> Place:
        """``$OLDPWD`` where ``cmd`` runs."""
        if cmd.after is not None:
            narrowed = self._previous.get(id(cmd.after))
            if narrowed is not None:
                return narrowed
        return self._shell(cmd.scope).previous

    def end(self) -> Place:
        """Every directory the line's own shell may be in when it ends."""
        return self._shells[(0,)].anywhere

    def _shell(self, scope: tuple[int, ...]) -> _Shell:
        shell = self._shells.get(scope)
        if shell is None:
            parent = next(
                (
                    self._shells[scope[:k]]
                    for k in range(len(scope) - 1, 0, -1)
                    if scope[:k] in self._shells
                ),
                self._shells[(0,)],
            )
            shell = self._shells[scope] = parent.copy()
        return shell

    def _target(self, cmd: SimpleCommand, word: Word, seen: Place) -> Place:
        if word.dynamic:
            return NOWHERE
        value = word.value
        if value == "-":
            return self._previous_of(cmd)
        if (
            self.searches
            and not value.startswith(("/", "./", "../", "~"))
            and value
            not in (
                ".",
                "..",
            )
        ):
            return NOWHERE  # ``CDPATH`` may send it anywhere
        return seen.moved(value)

    def _cd(self, cmd: SimpleCommand, args: tuple[Word, ...], seen: Place) -> Place | None:
        operands = _operands(args, _DIRECTORY_OPTIONS)
        if operands is None:
            return NOWHERE
        if len(operands) > 1:
            return None  # "too many arguments": it fails
        if not operands:
            return seen.moved("~")
        if not operands[0].dynamic and operands[0].value == "":
            return None
        return self._target(cmd, operands[0], seen)

    def _pushd(
        self, cmd: SimpleCommand, args: tuple[Word, ...], seen: Place, shell: _Shell
    ) -> Place | None:
        operands = _operands(args, frozenset("n"))
        if operands is None or any(w.value[:1] in "+-" and len(w.value) > 1 for w in operands):
            return NOWHERE  # ``+N``/``-N`` rotate the stack: not followed
        if any(w.value == "-n" for w in args):
            # only the stack changes: the directory goes below the current one
            added = self._target(cmd, operands[0], seen) if operands else NOWHERE
            shell.stack = (*shell.stack, added)
            return None
        if not operands:
            if not shell.stack:
                return None
            moved = shell.stack[-1]
            shell.stack = (*shell.stack[:-1], seen)
            return moved
        moved = self._target(cmd, operands[0], seen)
        shell.stack = (*shell.stack, seen)
        return moved

    def _popd(self, args: tuple[Word, ...], shell: _Shell) -> Place | None:
        operands = _operands(args, frozenset("n"))
        if operands is None or operands:
            return NOWHERE  # ``+N``/``-N``: not followed
        if any(w.value == "-n" for w in args):
            shell.stack = shell.stack[:-1]
            return None
        if not shell.stack:
            return None  # "directory stack empty": it fails
        moved = shell.stack[-1]
        shell.stack = shell.stack[:-1]
        return moved


def _operands(args: tuple[Word, ...], letters: frozenset[str]) -> tuple[Word, ...] | None:
    """The operands after options made of ``letters`` (and ``--``); None when an option is
    known only at run time."""
    i = 0
    while i < len(args):
        word = args[i]
        if word.dynamic:
            return None
        value = word.value
        if value == "--":
            return args[i + 1 :]
        if len(value) > 1 and value[0] == "-" and all(c in letters for c in value[1:]):
            i += 1
            continue
        break
    return args[i:]
