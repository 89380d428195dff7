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
where its parent was and moves nothing outside. Paths are kept as written (``a/..`` stays): a
logical ``cd`` collapses ``..`` in the text (falling back to the physical directory when that
fails), ``cd -P`` follows symlinks first, and the checker looks at a file in both directories.
That covers one ``..`` step, not a chain that mixes the two readings (``cd -P a && cd l/..``,
``cd l/.. && cd x && cd ..``): a ``..`` is followed only from a place every earlier step
reached logically without one (``exact``); after any other it is ``unknown``.
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
    # bash's ``$PWD`` is the base's text: every step to it was a logical ``cd`` without ``..``
    exact: bool = True

    def __or__(self, other: Place) -> Place:
        bases = tuple(dict.fromkeys(self.bases + other.bases))
        unknown = self.unknown or other.unknown or len(bases) > MAX_BASES
        return Place(bases[:MAX_BASES], unknown, self.exact and other.exact)

    def moved(self, target: str, physical: bool = False) -> Place:
        """Where ``cd target`` (``cd -P target`` when ``physical``) leads from here."""
        climbs = ".." in target.split("/")
        exact = not physical and not climbs
        if target.startswith(("/", "~")):
            return Place((target,), False, exact)
        bases = tuple(dict.fromkeys(_joined(base, target) for base in self.bases))
        if climbs and not self.exact:
            # ``..`` from a directory reached physically, or by an earlier ``..``: which
            # directory it climbs to depends on readings the checker does not combine
            return Place(bases, True, False)
        return Place(bases, self.unknown, self.exact and exact)

    def lost(self) -> Place:
        return Place(self.bases, True, False)

    def inexact(self) -> Place:
        return self if not self.exact else Place(self.bases, self.unknown, False)


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

    __slots__ = ("_after", "_previous", "_shells", "later", "physical", "searches")

    def __init__(self, start: Place, searches: bool, physical: bool = False) -> None:
        # ``searches``: ``cd name`` may look the name up in ``CDPATH`` (or ``cdable_vars``).
        self.searches = searches
        # ``physical``: ``set -P`` may be on, so a plain ``cd`` may follow symlinks first
        self.physical = physical
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

    def may_turn_physical(self) -> None:
        """A ``set`` that may change ``-P`` ran (or a command known only at run time, which
        may be one): from now on every ``cd`` may be physical, and no directory reached so far
        is known to be ``$PWD``'s text."""
        self.physical = True
        for shell in self._shells.values():
            shell.anywhere = shell.anywhere.inexact()
            shell.previous = shell.previous.inexact()
            shell.stack = tuple(place.inexact() for place in shell.stack)
        for places in (self._after, self._previous):
            for key, place in places.items():
                places[key] = place.inexact()

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

    def _target(self, cmd: SimpleCommand, word: Word, seen: Place, physical: bool = False) -> Place:
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
        return seen.moved(value, physical or self.physical)

    def _cd(self, cmd: SimpleCommand, args: tuple[Word, ...], seen: Place) -> Place | None:
        operands = _operands(args, _DIRECTORY_OPTIONS)
        if operands is None:
            return NOWHERE
        if len(operands) > 1:
            return None  # "too many arguments": it fails
        physical = _last_of_l_and_p(args[: len(args) - len(operands)])
        if not operands:
            return seen.moved("~", physical or self.physical)
        if not operands[0].dynamic and operands[0].value == "":
            return None
        return self._target(cmd, operands[0], seen, physical)

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


def _last_of_l_and_p(options: tuple[Word, ...]) -> bool:
    """Whether ``cd``'s options end physical: of ``-L`` and ``-P``, the last one given wins."""
    physical = False
    for word in options:
        for letter in word.value[1:]:
            if letter in "LP":
                physical = letter == "P"
    return physical
