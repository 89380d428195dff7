"""The validation engine: a compiled schema program run by one iterative loop (SPEC §2.2, §2.3).

The compiler (``fastgate.schema._compile``) turns a JSON Schema into a graph of ``Node`` records,
one per schema location, with every keyword pre-digested into typed fields. ``run`` walks a value
against that graph with an explicit stack: no Python (or C) recursion proportional to the depth of
the schema or of the value. Leaf nodes (scalar checks only) are checked in place, so a typical flat
tool call pushes no frame at all.

Issues go to a ``Sink``: the top-level sink collects up to ``limit`` issues with messages; the
sinks of ``anyOf``/``oneOf``/``not`` branches and of an ``if`` are silent and stop at the first
failure. ``is_valid`` needs no issues: its own walk (``_valid``) answers yes or no with plain
bounded recursion, and hands anything deeper to ``run``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastgate._core import _cython_shim as cython
else:
    try:
        import cython
    except ImportError:  # the pure build without Cython installed: the decorators do nothing
        from fastgate._core import _cython_shim as cython


# Value kinds: one bit each, so ``type`` keywords compile to a mask.
K_NULL = 1
K_BOOL = 2
K_INT = 4
K_INTFLOAT = 8  # a float with no fractional part: an "integer" for JSON Schema
K_FLOAT = 16
K_STR = 32
K_ARR = 64
K_OBJ = 128
K_NONFINITE = 256  # NaN and infinities: no JSON type accepts them
K_OTHER = 512  # anything that is not a JSON value
K_ANY = 1023

# Which keyword groups a node carries (``Node.checks``).
C_STR = 1
C_NUM = 2
C_ENUM = 4
C_CONST = 8
C_OBJ = 16
C_ARR = 32
C_APPLY = 64  # allOf / anyOf / oneOf / not / $ref (and every C_COND node)
C_FALSE = 128
# if/then/else, dependentRequired, dependentSchemas: always set together with C_APPLY, so
# nodes without them pay nothing and applicator nodes pay one bit test.
C_COND = 256
# Keyword groups checked by ``check_local`` (beyond the type).
_LOCAL_CHECKS = C_STR | C_NUM | C_ENUM | C_CONST | C_FALSE

# Combinator steps kept on the stack while their branches run.
S_ANY = 0
S_ONE = 1
S_NOT = 2
S_IF = 3  # runs ``if`` silently, then ``then`` or ``else`` in the step's own sink

_HERE = object()  # "no key": the value sits at the location ``parent`` itself
_NO_BRANCHES: list[Any] = []  # the branch list of an ``if`` step (its nodes are on the Node)
# Nesting walked by bounded recursion before work goes to the explicit stack: small enough
# for any C or Python stack, large enough that typical tool arguments never use a frame.
INLINE_DEPTH = 16

# The work one ``validate``/``is_valid`` call may do, in checks: a check of a value against a
# subschema is 1, a container walked adds its size, a pattern or a JSON-equality key adds a
# unit per 64 characters it reads. Shared subschemas ($ref) can check the same part of a value
# exponentially often in its depth (``allOf: [{properties: {x: {$ref: "#"}}}] * 2``), which no
# compile-time count of one place sees; past the budget the call stops with one issue. The
# budget is ``WORK_FLOOR`` plus ``WORK_PER_VALUE`` checks per part of the value (the same
# units: 1 per value, 1 per 64 characters of a string), the value sized only once the floor
# is spent and at most ``WORK_SIZE_CAP`` parts counted.
WORK_FLOOR = 1_000_000
WORK_PER_VALUE = 64
WORK_SIZE_CAP = 1 << 26

# Python-visible views of the constants above, for the compiler: in the compiled module the
# constants themselves are C globals and do not appear in the module namespace.
TYPE_KINDS = {
    "null": K_NULL,
    "boolean": K_BOOL,
    "integer": K_INT | K_INTFLOAT,
    "number": K_INT | K_INTFLOAT | K_FLOAT,
    "string": K_STR,
    "array": K_ARR,
    "object": K_OBJ,
}
CHECK_BITS = {
    "string": C_STR,
    "number": C_NUM,
    "enum": C_ENUM,
    "const": C_CONST,
    "object": C_OBJ,
    "array": C_ARR,
    "apply": C_APPLY,
    "false": C_FALSE,
    "conditional": C_COND,
}


@cython.freelist(8)
@cython.cclass
class ValidationIssue:
    """One failed keyword: where (``path`` into the value), which keyword, and what to fix."""

    __slots__ = ("_keyword", "_message", "_path")

    def __init__(self, path: tuple[str | int, ...], keyword: str, message: str) -> None:
        self._path = path
        self._keyword = keyword
        self._message = message

    @property
    def path(self) -> tuple[str | int, ...]:
        return self._path

    @property
    def keyword(self) -> str:
        return self._keyword

    @property
    def message(self) -> str:
        return self._message

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ValidationIssue):
            return NotImplemented
        return (self._path, self._keyword, self._message) == (
            other.path,
            other.keyword,
            other.message,
        )

    def __hash__(self) -> int:
        return hash((self._path, self._keyword, self._message))

    def __repr__(self) -> str:
        return (
            f"ValidationIssue(path={self._path!r}, keyword={self._keyword!r}, "
            f"message={self._message!r})"
        )


class Node:
    """One compiled schema location. Fields are filled by the compiler, read by ``run``."""

    def __init__(self, pointer: str) -> None:
        # The step from the node it was found under ("/properties/a"), or a whole pointer for
        # the root and a $ref target: the compiler spells out full pointers only for errors.
        self.pointer = pointer
        self.types = K_ANY
        self.type_names: tuple[str, ...] = ()
        self.expected = ""  # "an integer or null": the words for the type keyword
        self.checks = 0
        self.leaf = True
        # For a leaf that checks only the type: one exact type it accepts (``str`` for a string),
        # so ``is_valid`` accepts its usual members without working out their kind.
        self.plain_type: Any = None
        self.min_length = -1
        self.max_length = -1
        self.pattern: Any = None
        self.pattern_source = ""
        # The pattern as runs of character classes (``_pattern.char_runs``) when a plain scan
        # decides it, else None and ``pattern.search`` does.
        self.pattern_runs: tuple[tuple[bytes, int, int], ...] | None = None
        self.minimum: Any = None
        self.maximum: Any = None
        self.exclusive_minimum: Any = None
        self.exclusive_maximum: Any = None
        self.multiple_of: Any = None
        self.enum_keys: Any = None  # frozenset of canonical keys
        self.enum_values: list[Any] = []
        self.const_key: Any = None
        self.const_value: Any = None
        self.properties: dict[str, Node] = {}
        self.required: tuple[str, ...] = ()
        # Filled by ``finish_node``: name -> (child, required?, position), the names and slots
        # in declaration order, and ``required`` split in two.
        self.prop_table: dict[str, tuple[Node, bool, int]] = {}
        self.prop_names: tuple[str, ...] = ()
        self.prop_slots: tuple[tuple[Node, bool, int], ...] = ()
        self.prop_nodes: tuple[Node, ...] = ()  # the children alone, for ``is_valid``
        self.required_declared: tuple[str, ...] = ()
        self.required_undeclared: tuple[str, ...] = ()
        self.additional: Node | None = None
        self.additional_false = False
        self.min_properties = -1
        self.max_properties = -1
        self.prefix: list[Node] = []
        self.items: Node | None = None
        self.items_false = False
        self.min_items = -1
        self.max_items = -1
        self.unique = False
        self.all_of: list[Node] = []
        self.any_of: list[Node] = []
        self.one_of: list[Node] = []
        self.not_: Node | None = None
        self.ref: Node | None = None
        self.if_: Node | None = None
        self.then_: Node | None = None
        self.else_: Node | None = None
        # (name, names required when it is present) / (name, schema applied when it is present)
        self.dependent_required: tuple[tuple[str, tuple[str, ...]], ...] = ()
        self.dependent_schemas: tuple[tuple[str, Node], ...] = ()
        # A const-discriminated anyOf/oneOf: property name, const -> branch, every branch needs it.
        self.disc_key: str | None = None
        self.disc_map: dict[str, Node] = {}
        self.disc_required = False


# The exact types whose kind needs no more than the type (a float may be NaN or integral), in
# the order ``plain_type`` is chosen.
_PLAIN_KINDS = ((str, K_STR), (int, K_INT), (bool, K_BOOL), (dict, K_OBJ), (list, K_ARR))


def finish_node(node: Node, structural: int) -> None:
    """Derive the run-time tables of a node once all its keywords are compiled."""
    if node.if_ is not None and (node.then_ is not None or node.else_ is not None):
        node.checks |= C_APPLY | C_COND
    else:
        node.if_ = None  # ``if`` alone (or then/else alone) cannot change validity
    node.leaf = not node.checks & structural
    if node.leaf and not node.checks:
        for plain, kind in _PLAIN_KINDS:
            if node.types & kind:
                node.plain_type = plain
                break
    node.expected = _expected_types(node) if node.type_names else "any value"
    node.prop_table = {
        name: (child, name in node.required, index)
        for index, (name, child) in enumerate(node.properties.items())
    }
    node.prop_names = tuple(node.properties)
    node.prop_slots = tuple(node.prop_table.values())
    node.prop_nodes = tuple(node.properties.values())
    node.required_declared = tuple([n for n in node.required if n in node.properties])
    node.required_undeclared = tuple([n for n in node.required if n not in node.properties])


@cython.freelist(64)
@cython.no_gc
@cython.cclass
class Loc:
    """One link of a location chain: the key of a value inside its parent (None is the root).

    Locations are built only for containers that are walked into; leaf failures name their
    key beside the parent's location. Links hold only keys and other links, so the compiled
    build keeps them out of the cycle collector.
    """

    __slots__ = ("key", "parent")

    def __init__(self, parent: Loc | None, key: Any) -> None:
        self.parent = parent
        self.key = key


def _new_loc(parent: Loc | None, key: Any) -> Loc:
    loc = Loc.__new__(Loc)
    loc.parent = parent
    loc.key = key
    return loc


class WorkExceeded(Exception):
    """Raised inside a validation whose ``Budget`` is spent; ``validate`` turns it into an
    issue, ``is_valid`` into False (never seen by callers)."""


@cython.freelist(8)
@cython.no_gc  # holds a value and counters, never a budget or a sink: never part of a cycle
@cython.cclass
class Budget:
    """The checks one ``validate``/``is_valid`` call has done (``used``) and may do."""

    def __init__(self, value: Any) -> None:
        self.used = 0
        self.limit = WORK_FLOOR
        self.value = value
        self.sized = False


def _new_budget(value: Any) -> Budget:
    budget = Budget.__new__(Budget)
    budget.used = 0
    budget.limit = WORK_FLOOR
    budget.value = value
    budget.sized = False
    return budget


def _spend(budget: Budget) -> None:
    """``used`` passed ``limit``: the first time, size the value and raise the limit to what
    its size allows; raise ``WorkExceeded`` when that is spent too."""
    if not budget.sized:
        budget.sized = True
        budget.limit = WORK_FLOOR + WORK_PER_VALUE * _size(budget.value, WORK_SIZE_CAP)
        budget.value = None
    if budget.used > budget.limit:
        raise WorkExceeded


def _size(value: Any, cap: int) -> int:
    """The parts of a value (each value 1, a string or key 1 more per 64 characters), counted
    iteratively as a tree and no further than ``cap``."""
    total = 0
    stack: list[Any] = [value]
    while stack and total < cap:
        item = stack.pop()
        total += 1
        kind = _kind(item)
        if kind == K_STR:
            total += len(item) >> 6
        elif kind == K_ARR:
            stack.extend(item)
        elif kind == K_OBJ:
            for name, member in item.items():
                if isinstance(name, str):
                    total += len(name) >> 6
                stack.append(member)
    return total if total < cap else cap


def _keyed(value: Any, budget: Budget) -> Any:
    """``canonical(value)``, charging the budget for the text a container's key is."""
    probe = canonical(value)
    if type(probe) is tuple and probe[0] == "c":
        budget.used += len(probe[1]) >> 6
    return probe


@cython.freelist(8)
@cython.no_gc  # holds only its issues and the call's budget: never part of a cycle
@cython.cclass
class Sink:
    """Where issues go. ``silent`` sinks only count (branches of anyOf/oneOf/not)."""

    def __init__(self, limit: int, silent: bool, budget: Budget) -> None:
        self.issues: list[ValidationIssue] = []
        self.count = 0
        self.limit = limit
        self.silent = silent
        self.budget = budget


def _new_sink(limit: int, silent: bool, budget: Budget) -> Sink:
    """``Sink(limit, silent, budget)`` without the generic call (the compiled build allocates
    directly)."""
    sink = Sink.__new__(Sink)
    sink.issues = []
    sink.count = 0
    sink.limit = limit
    sink.silent = silent
    sink.budget = budget
    return sink


@cython.freelist(8)
@cython.cclass
class Step:
    """An anyOf/oneOf/not waiting for its current branch (branches run one at a time)."""

    def __init__(
        self, op: int, node: Node, value: Any, loc: Any, sink: Sink, branches: list[Node]
    ) -> None:
        self.op = op
        self.node = node
        self.value = value
        self.loc = loc
        self.sink = sink
        self.branches = branches
        self.index = 0
        self.passed = 0
        self.first_passed = -1
        self.sub: Sink | None = None


# -- values -------------------------------------------------------------------------------------


def _kind(value: Any) -> int:
    t = type(value)
    if t is str:
        return K_STR
    if t is dict:
        return K_OBJ
    if t is int:
        return K_INT
    if t is list:
        return K_ARR
    if t is bool:
        return K_BOOL
    if value is None:
        return K_NULL
    if t is float:
        return _float_kind(value)
    # Subclasses and read-only views (a frozen snapshot of the arguments) count as what they are.
    # Frozen snapshots subclass dict and list: test those first, the ABC check below is slow.
    if isinstance(value, dict):
        return K_OBJ
    if isinstance(value, list):
        return K_ARR
    if isinstance(value, bool):
        return K_BOOL
    if isinstance(value, int):
        return K_INT
    if isinstance(value, float):
        return _float_kind(value)
    if isinstance(value, str):
        return K_STR
    if isinstance(value, (list, tuple)):
        return K_ARR
    if isinstance(value, Mapping):
        return K_OBJ
    return K_OTHER


def _float_kind(value: float) -> int:
    # Plain arithmetic (no math.* calls) so the compiled build stays in C:
    # x - x is NaN exactly for NaN and the infinities.
    if value - value != 0.0:
        return K_NONFINITE
    if value % 1.0 == 0.0:
        return K_INTFLOAT
    return K_FLOAT


def canonical(value: Any) -> Any:
    """A hashable key with JSON equality: 1 == 1.0, true != 1, deep for arrays and objects.

    Strings and numbers are their own keys. A container becomes ``("c", text)`` where ``text``
    is one flat canonical serialization (object keys sorted): flat, so hashing and comparing it
    never recurse, and it is built by one iterative walk, so deep values are safe too.
    """
    kind = _kind(value)
    if kind & (K_STR | K_INT | K_INTFLOAT | K_FLOAT | K_NULL):
        return value
    if kind == K_BOOL:
        return ("b", bool(value))
    if kind == K_NONFINITE or kind == K_OTHER:
        return ("x", repr(value))
    out: list[str] = []
    stack: list[Any] = [(False, value)]  # (is_token, value-or-token)
    while stack:
        is_token, item = stack.pop()
        if is_token:
            out.append(item)
            continue
        item_kind = _kind(item)
        if item_kind == K_ARR:
            out.append("[")
            stack.append((True, "]"))
            index = len(item) - 1
            while index >= 0:
                stack.append((False, item[index]))
                if index:
                    stack.append((True, ","))
                index -= 1
        elif item_kind == K_OBJ:
            out.append("{")
            stack.append((True, "}"))
            pairs = sorted(item.items(), key=_first)
            index = len(pairs) - 1
            while index >= 0:
                stack.append((False, pairs[index][1]))
                stack.append((True, _json_string(_key_text(pairs[index][0])) + ":"))
                if index:
                    stack.append((True, ","))
                index -= 1
        else:
            out.append(_scalar_token(item, item_kind))
    return ("c", "".join(out))


def _first(pair: tuple[Any, Any]) -> Any:
    return pair[0]


def _json_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _scalar_token(item: Any, kind: int) -> str:
    if kind == K_STR:
        return _json_string(_text(item))
    if kind == K_BOOL:
        return "true" if item else "false"
    if kind == K_NULL:
        return "null"
    if kind == K_INT or kind == K_INTFLOAT:
        return _int_token(int(item))  # int() also undoes IntEnum and other int subclasses
    if kind == K_FLOAT:
        return float.__repr__(float(item))
    return "?" + repr(item)


def _int_token(number: int) -> str:
    """Decimal digits; past Python's limit on converting an int to text (4300 digits unless
    set otherwise) hex, which no decimal token can equal (and no float is that large)."""
    try:
        return str(number)
    except ValueError:
        return hex(number)


def _text(value: Any) -> str:
    """A string value as an exact ``str`` (a StrEnum's or other subclass's characters, not its
    ``__str__``): what the checks and messages read."""
    if type(value) is str:
        return value
    return str.__str__(value)


def _key_text(key: Any) -> str:
    return _text(key) if isinstance(key, str) else str(key)


def _is_multiple(value: Any, divisor: Any) -> bool:
    if type(value) is int and type(divisor) is int:
        return value % divisor == 0
    quotient = _exact(value) / _exact(divisor)
    return quotient.denominator == 1


def _exact(number: Any) -> Fraction:
    """Integers exactly (however long), floats by their shortest repr, so that the arithmetic
    is decimal: 0.0075 is a multiple of 0.0001."""
    if isinstance(number, int):
        return Fraction(int(number))
    return Fraction(float.__repr__(float(number)))


# -- messages -----------------------------------------------------------------------------------


def materialize(loc: Any) -> tuple[str | int, ...]:
    """The path tuple of a location chain of ``Loc`` links (None is the root)."""
    if loc is None:
        return ()
    if loc.parent is None:
        return (loc.key,)
    keys: list[str | int] = []
    while loc is not None:
        keys.append(loc.key)
        loc = loc.parent
    keys.reverse()
    return tuple(keys)


def field_name(path: tuple[str | int, ...]) -> str:
    """``spec.items[2].name``: how messages name a field (``the arguments`` for the root)."""
    if not path:
        return "the arguments"
    return "".join(_segments(path))


#: A longer path is named by its first ``PATH_HEAD`` and last ``PATH_TAIL`` keys in messages.
PATH_HEAD = 4
PATH_TAIL = 6


def _segments(path: tuple[str | int, ...]) -> list[str]:
    size = len(path)
    if size > PATH_HEAD + PATH_TAIL + 1:
        parts = [_segment(key) for key in path[:PATH_HEAD]]
        parts.append(f"…({size - PATH_HEAD - PATH_TAIL} more)…")
        parts.extend([_segment(key) for key in path[size - PATH_TAIL :]])
    else:
        parts = [_segment(key) for key in path]
    first = parts[0]
    if first[0] == ".":
        parts[0] = first[1:]  # no leading dot
    return parts


def _message(path: tuple[str | int, ...], text: str) -> str:
    """``field: text``, joined once (messages are built only for issues that are reported)."""
    if not path:
        return "the arguments: " + text
    parts = _segments(path)
    parts.append(": ")
    parts.append(text)
    return "".join(parts)


_SEGMENTS: dict[Any, str] = {}


def _segment(key: Any) -> str:
    """``.name``, ``[3]`` or ``["odd key"]`` (a key longer than 60 characters is cut, quoted);
    cached, as the same field names recur."""
    text = _SEGMENTS.get(key)
    if text is not None and type(key) is not bool:
        return text
    if isinstance(key, int):
        text = "[" + str(key) + "]"
    elif not isinstance(key, str):
        text = "[" + _quote(_cut(key)) + "]"  # not a JSON key (a Python caller's None, tuple)
    else:
        name = _text(key)
        if len(name) <= 60 and name.isidentifier():
            text = "." + name
        else:
            text = "[" + _quote(name) + "]"
        if len(name) > 60:
            return text  # not cached: long keys from values must not stay in memory
    if len(_SEGMENTS) >= 4096:
        _SEGMENTS.clear()  # bounded: arbitrary keys from values must not grow it forever
    _SEGMENTS[key] = text
    return text


def _quote(text: str) -> str:
    return f'"{_escape(text)}"'


def _escape(text: str) -> str:
    """The inside of a quoted string in a message: at most 60 characters, escaped."""
    if len(text) > 60:
        text = text[:57] + "..."
    if "\\" in text or '"' in text or "\n" in text:
        text = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return text


def describe(value: Any) -> str:
    """A short, safe description of a value for a message (never a deep repr)."""
    kind = _kind(value)
    if kind == K_STR:
        return f'the string "{_escape(_text(value))}"'
    if kind == K_BOOL:
        return "true" if value else "false"
    if kind == K_NULL:
        return "null"
    if kind & (K_INT | K_INTFLOAT | K_FLOAT | K_NONFINITE):
        return "the number " + _number(value)
    if kind == K_ARR:
        return f"an array of {len(value)} item{'' if len(value) == 1 else 's'}"
    if kind == K_OBJ:
        return "an object"
    return f"a {type(value).__name__} (not a JSON value)"


def _number(value: Any) -> str:
    """A number for a message: its repr (of the plain int or float: an IntEnum's value), an
    integer of more than 60 digits by its magnitude (Python cannot print past 4300)."""
    if not isinstance(value, int):
        return float.__repr__(float(value))
    number = int(value)
    if -_BIG_INT < number < _BIG_INT:
        return str(number)
    exponent = int(_log10(abs(number)))
    return f"{'-' if number < 0 else ''}~10^{exponent} ({exponent + 1} digits)"


_BIG_INT = 10**60
_log10 = math.log10  # called through a name: the compiled build must not make it C's log10


def _literal(value: Any) -> str:
    kind = _kind(value)
    if kind == K_STR:
        return _quote(_text(value))
    if kind == K_BOOL:
        return "true" if value else "false"
    if kind == K_NULL:
        return "null"
    if kind & (K_INT | K_INTFLOAT | K_FLOAT):
        return _number(value)
    return "an array" if kind == K_ARR else "an object"


def _choices(values: list[Any]) -> str:
    shown = ", ".join([_literal(v) for v in values[:20]])
    return shown + (f" (and {len(values) - 20} more)" if len(values) > 20 else "")


#: Names of allowed properties listed in an ``additionalProperties`` message, at most.
MAX_NAMES_SHOWN = 20


def _allowed_names(node: Node) -> str:
    names = node.prop_names
    if not names:
        return "none"
    shown = ", ".join([_cut(name) for name in names[:MAX_NAMES_SHOWN]])
    if len(names) > MAX_NAMES_SHOWN:
        shown += f", … {len(names) - MAX_NAMES_SHOWN} more"
    return shown


def _cut(name: Any) -> str:
    text = _key_text(name)
    return text[:57] + "..." if len(text) > 60 else text


def _expected_types(node: Node) -> str:
    names = [n if n not in ("object", "array", "integer") else f"an {n}" for n in node.type_names]
    names = [n if n.startswith("an ") or n == "null" else f"a {n}" for n in names]
    if len(names) == 1:
        return names[0]
    last = len(names) - 1  # no negative indexes: the compiled build turns off wraparound
    return ", ".join(names[:last]) + " or " + names[last]


def add_issue(sink: Sink, loc: Any, keyword: str, text: str) -> None:
    _add(sink, loc, _HERE, keyword, text)


def _add(sink: Sink, parent: Any, key: Any, keyword: str, text: str) -> None:
    """Append one issue at ``parent`` (+ ``key`` unless it is ``_HERE``)."""
    path = materialize(parent) if key is _HERE else _path_to(parent, key)
    issue = ValidationIssue.__new__(ValidationIssue)
    issue._path = path
    issue._keyword = keyword
    issue._message = _message(path, text)
    sink.issues.append(issue)


def _path_to(parent: Any, key: Any) -> tuple[str | int, ...]:
    if parent is None:
        return (key,)
    keys: list[str | int] = [key]
    loc = parent
    while loc is not None:
        keys.append(loc.key)
        loc = loc.parent
    keys.reverse()
    return tuple(keys)


def _fail(sink: Sink, parent: Any, key: Any, keyword: str, node: Node, value: Any) -> None:
    """Record one failed keyword; messages are only built for sinks that report them."""
    sink.count += 1
    if not sink.silent and sink.count <= sink.limit:
        _add(sink, parent, key, keyword, _explain(keyword, node, value))


def _explain(keyword: str, node: Node, value: Any) -> str:
    if keyword == "type":
        return f"expected {node.expected}, got {describe(value)}"
    if keyword == "minimum":
        return f"expected a number >= {_number(node.minimum)}, got {_number(value)}"
    if keyword == "maximum":
        return f"expected a number <= {_number(node.maximum)}, got {_number(value)}"
    got = describe(value)
    if keyword == "false":
        return f"no value is allowed here, got {got}"
    if keyword == "minLength":
        return f"expected a string of at least {node.min_length} characters, got {len(value)}"
    if keyword == "maxLength":
        return f"expected a string of at most {node.max_length} characters, got {len(value)}"
    if keyword == "pattern":
        source = node.pattern_source
        if len(source) > 200:
            source = source[:197] + "..."
        return f"expected a string matching the pattern {source}, got {got}"
    if keyword == "exclusiveMinimum":
        return f"expected a number > {_number(node.exclusive_minimum)}, got {_number(value)}"
    if keyword == "exclusiveMaximum":
        return f"expected a number < {_number(node.exclusive_maximum)}, got {_number(value)}"
    if keyword == "multipleOf":
        return f"expected a multiple of {_number(node.multiple_of)}, got {_number(value)}"
    if keyword == "enum":
        return f"expected one of {_choices(node.enum_values)}, got {got}"
    if keyword == "const":
        return f"expected exactly {_literal(node.const_value)}, got {got}"
    if keyword == "minItems":
        return f"expected at least {node.min_items} items, got {len(value)}"
    if keyword == "maxItems":
        return f"expected at most {node.max_items} items, got {len(value)}"
    if keyword == "minProperties":
        return f"expected at least {node.min_properties} properties, got {len(value)}"
    if keyword == "maxProperties":
        return f"expected at most {node.max_properties} properties, got {len(value)}"
    if keyword == "anyOf":
        return f"expected a value matching at least one of {len(node.any_of)} variants, got {got}"
    if keyword == "oneOf":
        return f"expected a value matching exactly one of {len(node.one_of)} variants, got {got}"
    if keyword == "not":
        return f"expected a value that does not match the schema under 'not', got {got}"
    return f"failed {keyword}"  # pragma: no cover - every keyword above has its own words


# -- the checks ---------------------------------------------------------------------------------


def check_local(node: Node, value: Any, kind: int, parent: Any, key: Any, sink: Sink) -> bool:
    """Type and scalar keywords of one node; False when the type is wrong (skip the rest)."""
    checks = node.checks
    if checks & C_FALSE:
        _fail(sink, parent, key, "false", node, value)
        return False
    if not kind & node.types:
        _fail(sink, parent, key, "type", node, value)
        return False
    if checks & C_STR and kind == K_STR:
        if node.min_length >= 0 or node.max_length >= 0:
            length = len(value)
            if 0 <= node.min_length and length < node.min_length:
                _fail(sink, parent, key, "minLength", node, value)
            if 0 <= node.max_length < length:
                _fail(sink, parent, key, "maxLength", node, value)
        if node.pattern is not None:
            length = len(value)
            sink.budget.used += length >> 6
            if not _matches(node, _text(value)):
                _fail(sink, parent, key, "pattern", node, value)
    if checks & C_NUM and kind & (K_INT | K_INTFLOAT | K_FLOAT):
        if node.minimum is not None and value < node.minimum:
            _fail(sink, parent, key, "minimum", node, value)
        if node.maximum is not None and value > node.maximum:
            _fail(sink, parent, key, "maximum", node, value)
        if node.exclusive_minimum is not None and value <= node.exclusive_minimum:
            _fail(sink, parent, key, "exclusiveMinimum", node, value)
        if node.exclusive_maximum is not None and value >= node.exclusive_maximum:
            _fail(sink, parent, key, "exclusiveMaximum", node, value)
        if node.multiple_of is not None and not _is_multiple(value, node.multiple_of):
            _fail(sink, parent, key, "multipleOf", node, value)
    if checks & (C_ENUM | C_CONST):
        # Numbers and strings are their own JSON-equality keys (1 == 1.0); the rest is canonical.
        probe = (
            value if kind & (K_STR | K_INT | K_INTFLOAT | K_FLOAT) else _keyed(value, sink.budget)
        )
        if checks & C_ENUM and probe not in node.enum_keys:
            _fail(sink, parent, key, "enum", node, value)
        if checks & C_CONST and probe != node.const_key:
            _fail(sink, parent, key, "const", node, value)
    return True


def _matches(node: Node, text: str) -> bool:
    """``pattern``: a scan of the runs when there are some (no regex state to set up, which
    costs more than the scan of a typical short string), else RE2 (``schema._pattern``)."""
    runs = node.pattern_runs
    if runs is None:
        return node.pattern.search(text) is not None
    end = len(text)
    pos = 0
    for run_ in runs:
        table: bytes = run_[0]
        least: int = run_[1]
        most: int = run_[2]
        stop = end if most < 0 or most > end - pos else pos + most
        start = pos
        while pos < stop:
            code = ord(text[pos])
            if not table[code if code < 128 else 128]:
                break
            pos += 1
        if pos - start < least:
            return False
    return pos == end


def run(root: Node, value: Any, limit: int, silent: bool, budget: Budget) -> Sink:
    """Validate ``value`` against ``root``; the sink holds the issues (or just their count).
    ``WorkExceeded`` when ``budget`` is spent."""
    sink = _new_sink(limit, silent, budget)
    _drain(root, value, sink)
    return sink


def _drain(root: Node, value: Any, sink: Sink) -> None:
    """``run`` into a given sink (``validate`` keeps the issues found before a spent budget)."""
    stack: list[Any] = []
    _walk(root, value, None, _HERE, sink, stack, 0)
    while stack and sink.count < sink.limit:
        frame = stack.pop()
        if type(frame) is tuple:
            node, item, parent, key, current = frame
            _walk(node, item, parent, key, current, stack, 0)
            continue
        # A combinator step whose branch just finished: account for it, maybe run the next one.
        step: Step = frame
        if step.sink.count >= step.sink.limit:
            continue
        branch = _advance(step, stack)
        if branch is not None:
            _walk(branch, step.value, step.loc, _HERE, step.sub, stack, 0)  # type: ignore[arg-type]


def _walk(
    node: Node, value: Any, parent: Any, key: Any, sink: Sink, stack: list[Any], depth: int
) -> None:
    """Check one (node, value) pair; nested work is walked in place up to ``INLINE_DEPTH``
    levels (bounded recursion, cheaper than a frame), deeper work goes on the stack."""
    if sink.count < sink.limit:
        budget = sink.budget
        budget.used += 1
        if budget.used > budget.limit:
            _spend(budget)
        kind = _kind(value)
        checks = node.checks
        # Only a node with scalar keywords, or a value of the wrong type, needs ``check_local``.
        if (
            not (checks & _LOCAL_CHECKS or not kind & node.types)
            or check_local(node, value, kind, parent, key, sink)
        ) and not node.leaf:
            loc = parent if key is _HERE else _new_loc(parent, key)
            if kind == K_OBJ and checks & C_OBJ:
                budget.used += len(value)
                _expand_object(node, value, loc, sink, stack, depth)
            elif kind == K_ARR and checks & C_ARR:
                budget.used += len(value)
                _expand_array(node, value, loc, sink, stack, depth)
            if checks & C_APPLY:
                _expand_applicators(node, value, loc, sink, stack, depth)


def _visit(
    node: Node, value: Any, parent: Any, key: Any, sink: Sink, stack: list[Any], depth: int
) -> None:
    if depth < INLINE_DEPTH:
        _walk(node, value, parent, key, sink, stack, depth + 1)
    else:
        stack.append((node, value, parent, key, sink))


def _check_item(
    child: Node, item: Any, loc: Any, key: Any, sink: Sink, stack: list[Any], depth: int
) -> None:
    """One member of an object or array against its schema."""
    if child.leaf:
        kind = _kind(item)
        # A type-only leaf whose type matches (the common case) needs no further call.
        if child.checks or not kind & child.types:
            check_local(child, item, kind, loc, key, sink)
    else:
        _visit(child, item, loc, key, sink, stack, depth)


def _expand_object(
    node: Node, value: Any, loc: Any, sink: Sink, stack: list[Any], depth: int
) -> None:
    if sink.silent and isinstance(value, dict):
        _look_up_declared(node, value, loc, sink, stack, depth)
    else:
        _match_keys(node, value, loc, sink, stack, depth)


def _match_keys(node: Node, value: Any, loc: Any, sink: Sink, stack: list[Any], depth: int) -> None:
    if node.min_properties >= 0 and len(value) < node.min_properties:
        _fail(sink, loc, _HERE, "minProperties", node, value)
    if 0 <= node.max_properties < len(value):
        _fail(sink, loc, _HERE, "maxProperties", node, value)
    table = node.prop_table
    additional = node.additional
    # Required properties that are also declared are counted on the way through the value:
    # one dict lookup per key instead of an extra one per required name.
    found = 0
    # Arguments usually list properties in the schema's order: try the property after the last
    # one matched with one string comparison before falling back to the dict lookup.
    names = node.prop_names
    slots = node.prop_slots
    n_names = len(names)
    guess = 0
    slot: tuple[Node, bool, int] | None
    for name, item in value.items():
        if guess < n_names and type(name) is str and _same_key(name, names[guess]):
            slot = slots[guess]
            guess += 1
        else:
            slot = table.get(name)
            if slot is not None:
                guess = slot[2] + 1
        if slot is None:
            if node.additional_false:
                sink.count += 1
                if not sink.silent and sink.count <= sink.limit:
                    allowed = _allowed_names(node)
                    _add(
                        sink,
                        loc,
                        name,
                        "additionalProperties",
                        f"unexpected property (allowed properties: {allowed})",
                    )
                continue
            if additional is None:
                continue
            child = additional
        else:
            child = slot[0]
            if slot[1]:
                found += 1
        _check_item(child, item, loc, name, sink, stack, depth)
    if found < len(node.required_declared):
        _report_missing(node.required_declared, value, loc, sink)
    if node.required_undeclared:
        _report_missing(node.required_undeclared, value, loc, sink)


def _look_up_declared(
    node: Node, value: Any, loc: Any, sink: Sink, stack: list[Any], depth: int
) -> None:
    """A silent sink's walk of a dict: each declared property is looked up (its name's hash is
    cached, so one probe) instead of each key of the value being matched against the schema;
    the keys are walked only when the value has some the schema does not declare. A silent
    sink only counts, so the order in which failures are found does not matter."""
    size = len(value)
    if (node.min_properties >= 0 and size < node.min_properties) or (
        0 <= node.max_properties < size
    ):
        sink.count += 1
        return
    names = node.prop_names
    slots = node.prop_slots
    matched = 0
    index = 0
    n_names = len(names)
    while index < n_names:
        item = dict.get(value, names[index], _HERE)
        slot = slots[index]
        index += 1
        if item is _HERE:
            if slot[1]:  # a required property is missing
                sink.count += 1
                return
            continue
        matched += 1
        _check_item(slot[0], item, loc, _HERE, sink, stack, depth)
        if sink.count >= sink.limit:
            return
    if node.required_undeclared:
        for name in node.required_undeclared:
            if name not in value:
                sink.count += 1
                return
    if matched < size:
        _check_undeclared(node, value, loc, sink, stack, depth)


def _check_undeclared(
    node: Node, value: Any, loc: Any, sink: Sink, stack: list[Any], depth: int
) -> None:
    """The keys a schema does not declare, against ``additionalProperties`` (silent sinks)."""
    table = node.prop_table
    additional = node.additional
    for name, item in value.items():
        if name in table:
            continue
        if node.additional_false:
            sink.count += 1
            return
        if additional is None:
            return  # any undeclared key is allowed
        _check_item(additional, item, loc, _HERE, sink, stack, depth)
        if sink.count >= sink.limit:
            return


def _same_key(name: str, declared: str) -> bool:
    return name == declared


def _report_missing(names: tuple[str, ...], value: Any, loc: Any, sink: Sink) -> None:
    for name in names:
        if name not in value:
            sink.count += 1
            if not sink.silent and sink.count <= sink.limit:
                add_issue(sink, loc, "required", f"missing required property {_quote(name)}")


def _expand_array(
    node: Node, value: Any, loc: Any, sink: Sink, stack: list[Any], depth: int
) -> None:
    length = len(value)
    if node.min_items >= 0 and length < node.min_items:
        _fail(sink, loc, _HERE, "minItems", node, value)
    if 0 <= node.max_items < length:
        _fail(sink, loc, _HERE, "maxItems", node, value)
    if node.unique and length > 1:
        _check_unique(value, loc, sink)
    prefix = node.prefix
    n_prefix = len(prefix)
    items = node.items
    if node.items_false and length > n_prefix:
        sink.count += 1
        if not sink.silent and sink.count <= sink.limit:
            _add(
                sink,
                loc,
                n_prefix,
                "items",
                f"unexpected item: at most {n_prefix} items are allowed, got {length}",
            )
    index = 0
    while index < length:
        child = prefix[index] if index < n_prefix else items
        if child is not None:
            _check_item(child, value[index], loc, index, sink, stack, depth)
        index += 1


def _check_unique(value: Any, loc: Any, sink: Sink) -> None:
    seen: dict[Any, int] = {}
    budget = sink.budget
    for index, item in enumerate(value):
        probe = _keyed(item, budget)
        first = seen.setdefault(probe, index)
        if first != index:
            sink.count += 1
            if not sink.silent and sink.count <= sink.limit:
                add_issue(
                    sink,
                    loc,
                    "uniqueItems",
                    f"expected unique items, but items {first} and {index} are equal",
                )
            break


def _expand_applicators(
    node: Node, value: Any, loc: Any, sink: Sink, stack: list[Any], depth: int
) -> None:
    # allOf and $ref are walked at once; anyOf/oneOf/not become steps on the stack.
    if node.all_of:
        for sub in node.all_of:
            _visit(sub, value, loc, _HERE, sink, stack, depth)
    if node.ref is not None:
        _visit(node.ref, value, loc, _HERE, sink, stack, depth)
    if node.not_ is not None:
        stack.append(Step(S_NOT, node, value, loc, sink, [node.not_]))
    if node.one_of:
        if node.disc_key is None or not _discriminate(node, value, loc, sink, stack, S_ONE, depth):
            stack.append(Step(S_ONE, node, value, loc, sink, node.one_of))
    if node.any_of:
        if node.disc_key is None or not _discriminate(node, value, loc, sink, stack, S_ANY, depth):
            stack.append(Step(S_ANY, node, value, loc, sink, node.any_of))
    if node.checks & C_COND:
        _expand_conditionals(node, value, loc, sink, stack, depth)


def _expand_conditionals(
    node: Node, value: Any, loc: Any, sink: Sink, stack: list[Any], depth: int
) -> None:
    """if/then/else as a step (the ``if`` must finish before a branch is chosen);
    dependentSchemas walked at once, as allOf; dependentRequired reported as required is."""
    if node.if_ is not None:
        stack.append(Step(S_IF, node, value, loc, sink, _NO_BRANCHES))
    if (node.dependent_required or node.dependent_schemas) and _kind(value) == K_OBJ:
        for name, needed in node.dependent_required:
            if name in value:
                _report_dependent(name, needed, value, loc, sink)
        for name, sub in node.dependent_schemas:
            if name in value:
                _visit(sub, value, loc, _HERE, sink, stack, depth)


def _report_dependent(name: str, needed: tuple[str, ...], value: Any, loc: Any, sink: Sink) -> None:
    for other in needed:
        if other not in value:
            sink.count += 1
            if not sink.silent and sink.count <= sink.limit:
                add_issue(
                    sink,
                    loc,
                    "dependentRequired",
                    f"missing property {_quote(other)} (required when {_quote(name)} is present)",
                )


def _discriminate(
    node: Node, value: Any, loc: Any, sink: Sink, stack: list[Any], op: int, depth: int
) -> bool:
    """A const discriminator picks the branch; False when it cannot decide (general path)."""
    if type(value) is not dict:
        return False
    name = node.disc_key
    assert name is not None
    obj: dict[str, Any] = value
    tag = obj.get(name, _HERE)
    if tag is not _HERE:
        branch = node.disc_map.get(_text(tag)) if isinstance(tag, str) else None
        if branch is not None:
            _visit(branch, value, loc, _HERE, sink, stack, depth)
            return True
        keyword = "oneOf" if op == S_ONE else "anyOf"
        sink.count += 1
        if not sink.silent and sink.count <= sink.limit:
            # Reported at the oneOf/anyOf itself, as every branch failing is, naming the property.
            add_issue(
                sink,
                loc,
                keyword,
                f"property {_quote(name)} must be one of {_choices(list(node.disc_map))} (it "
                f"selects the variant), got {describe(tag)}",
            )
        return True
    if node.disc_required:
        keyword = "oneOf" if op == S_ONE else "anyOf"
        sink.count += 1
        if not sink.silent and sink.count <= sink.limit:
            add_issue(
                sink,
                loc,
                keyword,
                f"missing required property {_quote(name)} "
                f"(one of {_choices(list(node.disc_map))}, it selects the variant)",
            )
        return True
    return False


def _advance(step: Step, stack: list[Any]) -> Node | None:
    """Account for the branch that just ran; return the next branch to run, or None when done."""
    if step.op == S_IF:
        return _advance_if(step, stack)
    sub = step.sub
    if sub is not None:
        if sub.count == 0:
            if step.op == S_ANY:
                return None
            if step.op == S_NOT:
                _fail(step.sink, step.loc, _HERE, "not", step.node, step.value)
                return None
            step.passed += 1
            if step.passed > 1:
                _fail(step.sink, step.loc, _HERE, "oneOf", step.node, step.value)
                return None
        elif step.op == S_NOT:
            return None
    if step.index >= len(step.branches):
        if step.op == S_ANY:
            _fail(step.sink, step.loc, _HERE, "anyOf", step.node, step.value)
        elif step.passed == 0:
            _fail(step.sink, step.loc, _HERE, "oneOf", step.node, step.value)
        return None
    branch = step.branches[step.index]
    step.index += 1
    step.sub = _new_sink(1, True, step.sink.budget)
    stack.append(step)
    return branch


def _advance_if(step: Step, stack: list[Any]) -> Node | None:
    """First the ``if`` in a silent sink (its failure is no issue), then ``then`` or ``else``
    in the step's own sink: their issues stand at their own keywords, as allOf's do."""
    sub = step.sub
    if sub is None:
        step.sub = _new_sink(1, True, step.sink.budget)
        stack.append(step)
        return step.node.if_
    branch = step.node.then_ if sub.count == 0 else step.node.else_
    step.sub = step.sink
    return branch


# -- is_valid: one yes/no walk ---------------------------------------------------------------------


def _valid(node: Node, value: Any, depth: int, budget: Budget) -> bool:
    """``is_valid``'s walk: the checks of a silent ``run``, as one boolean per (node, value).

    No sink, no locations and no steps: the first failure returns False all the way up, and a
    combinator's branches are plain calls. Recursion is bounded: past ``INLINE_DEPTH`` levels
    (and for a mapping that is no dict) the rest goes to ``run``, whose stack is explicit.
    Every call counts against ``budget`` (``WorkExceeded`` once it is spent).
    """
    budget.used += 1
    if budget.used > budget.limit:
        _spend(budget)
    kind = _kind(value)
    checks = node.checks
    if (checks & _LOCAL_CHECKS or not kind & node.types) and not _local_ok(
        node, value, kind, budget
    ):
        return False
    if node.leaf:
        return True
    if depth >= INLINE_DEPTH:
        return run(node, value, 1, True, budget).count == 0
    if kind == K_OBJ and checks & C_OBJ:
        if not isinstance(value, dict):
            return run(node, value, 1, True, budget).count == 0
        budget.used += len(value)
        if not _valid_object(node, value, depth, budget):
            return False
    elif kind == K_ARR and checks & C_ARR:
        budget.used += len(value)
        if not _valid_array(node, value, depth, budget):
            return False
    return not checks & C_APPLY or _valid_applied(node, value, depth + 1, budget)


def _local_ok(node: Node, value: Any, kind: int, budget: Budget) -> bool:
    """``check_local``'s verdict alone: False as soon as one keyword fails."""
    checks = node.checks
    if checks & C_FALSE or not kind & node.types:
        return False
    if checks & C_STR and kind == K_STR:
        if node.min_length >= 0 or node.max_length >= 0:
            length = len(value)
            if length < node.min_length or 0 <= node.max_length < length:
                return False
        if node.pattern is not None:
            budget.used += len(value) >> 6
            if not _matches(node, _text(value)):
                return False
    if checks & C_NUM and kind & (K_INT | K_INTFLOAT | K_FLOAT):
        if node.minimum is not None and value < node.minimum:
            return False
        if node.maximum is not None and value > node.maximum:
            return False
        if node.exclusive_minimum is not None and value <= node.exclusive_minimum:
            return False
        if node.exclusive_maximum is not None and value >= node.exclusive_maximum:
            return False
        if node.multiple_of is not None and not _is_multiple(value, node.multiple_of):
            return False
    if checks & (C_ENUM | C_CONST):
        probe = value if kind & (K_STR | K_INT | K_INTFLOAT | K_FLOAT) else _keyed(value, budget)
        if checks & C_ENUM and probe not in node.enum_keys:
            return False
        if checks & C_CONST and probe != node.const_key:
            return False
    return True


def _valid_member(child: Node, item: Any, depth: int, budget: Budget) -> bool:
    """One member of an object or array: a leaf is checked here, without a call."""
    if child.leaf:
        if type(item) is child.plain_type:
            return True
        kind = _kind(item)
        return not (child.checks or not kind & child.types) or _local_ok(child, item, kind, budget)
    return _valid(child, item, depth + 1, budget)


def _valid_object(node: Node, value: Any, depth: int, budget: Budget) -> bool:
    """A dict: each declared property looked up (one probe), the keys walked only when some
    are not declared, and not at all when ``additionalProperties`` is false (one is enough)."""
    size = len(value)
    if (node.min_properties >= 0 and size < node.min_properties) or (
        0 <= node.max_properties < size
    ):
        return False
    names = node.prop_names
    children = node.prop_nodes
    n_names = len(names)
    matched = 0
    index = 0
    while index < n_names:
        item = dict.get(value, names[index], _HERE)
        if item is _HERE:
            if node.prop_slots[index][1]:  # a required property is missing
                return False
        else:
            matched += 1
            if not _valid_member(children[index], item, depth, budget):
                return False
        index += 1
    for name in node.required_undeclared:
        if name not in value:
            return False
    if matched == size:
        return True
    if node.additional_false:
        return False
    additional = node.additional
    if additional is None:
        return True
    table = node.prop_table
    for name, item in value.items():
        if (not n_names or name not in table) and not _valid_member(
            additional, item, depth, budget
        ):
            return False
    return True


def _valid_array(node: Node, value: Any, depth: int, budget: Budget) -> bool:
    length = len(value)
    if (node.min_items >= 0 and length < node.min_items) or 0 <= node.max_items < length:
        return False
    prefix = node.prefix
    n_prefix = len(prefix)
    if node.items_false and length > n_prefix:
        return False
    if node.unique and length > 1 and not _all_unique(value, budget):
        return False
    items = node.items
    index = 0
    while index < length:
        child = prefix[index] if index < n_prefix else items
        if child is None:  # past the prefix, with no ``items``: the rest is free
            break
        if not _valid_member(child, value[index], depth, budget):
            return False
        index += 1
    return True


def _all_unique(value: Any, budget: Budget) -> bool:
    seen: set[Any] = set()
    for item in value:
        probe = _keyed(item, budget)
        if probe in seen:
            return False
        seen.add(probe)
    return True


def _valid_applied(node: Node, value: Any, depth: int, budget: Budget) -> bool:
    """allOf, $ref, not, oneOf/anyOf (through the discriminator when it decides), if/then/else
    and the dependent keywords; ``depth`` is already the branches' own."""
    if node.all_of:
        for sub in node.all_of:
            if not _valid(sub, value, depth, budget):
                return False
    if node.ref is not None and not _valid(node.ref, value, depth, budget):
        return False
    if node.not_ is not None and _valid(node.not_, value, depth, budget):
        return False
    if node.one_of or node.any_of:
        verdict = (
            _valid_by_discriminator(node, value, depth, budget) if node.disc_key is not None else -1
        )
        if verdict == 0:
            return False
        if verdict < 0:
            if node.one_of and not _exactly_one(node.one_of, value, depth, budget):
                return False
            if node.any_of and not _any_one(node.any_of, value, depth, budget):
                return False
    if node.checks & C_COND:
        if node.if_ is not None:
            branch = node.then_ if _valid(node.if_, value, depth, budget) else node.else_
            if branch is not None and not _valid(branch, value, depth, budget):
                return False
        if (node.dependent_required or node.dependent_schemas) and _kind(value) == K_OBJ:
            for name, needed in node.dependent_required:
                if name in value:
                    for other in needed:
                        if other not in value:
                            return False
            for name, sub in node.dependent_schemas:
                if name in value and not _valid(sub, value, depth, budget):
                    return False
    return True


def _valid_by_discriminator(node: Node, value: Any, depth: int, budget: Budget) -> int:
    """As ``_discriminate``: 1 or 0 when the tag decides (every other branch's const differs
    from it, so only its own branch can hold), -1 when it cannot (the general path)."""
    if type(value) is not dict:
        return -1
    tag = dict.get(value, node.disc_key, _HERE)
    if tag is _HERE:
        return 0 if node.disc_required else -1
    branch = node.disc_map.get(_text(tag)) if isinstance(tag, str) else None
    return 1 if branch is not None and _valid(branch, value, depth, budget) else 0


def _exactly_one(branches: list[Node], value: Any, depth: int, budget: Budget) -> bool:
    passed = 0
    for branch in branches:
        if _valid(branch, value, depth, budget):
            passed += 1
            if passed > 1:
                return False
    return passed == 1


def _any_one(branches: list[Node], value: Any, depth: int, budget: Budget) -> bool:
    for branch in branches:
        if _valid(branch, value, depth, budget):
            return True
    return False


class Validator:
    """A compiled schema: ``validate(value)`` returns every issue (up to ``max_issues``)."""

    def __init__(self, root: Node, schema: Any, max_issues: int) -> None:
        self.root = root
        self.schema = schema
        self.max_issues = max_issues

    def validate(self, value: Any) -> list[ValidationIssue]:
        """Issues of ``value`` (empty when valid); never mutates or coerces it. A value that
        would take more checks than its size allows (``Budget``) gets the issues found so far
        and one ``budget`` issue at the root."""
        budget = _new_budget(value)
        sink = _new_sink(self.max_issues, False, budget)
        try:
            _drain(self.root, value, sink)
        except WorkExceeded:
            _report_spent(sink, budget)
        return sink.issues

    def is_valid(self, value: Any) -> bool:
        """True when ``value`` is valid; stops at the first failure and builds no message.
        False when the checks would pass the budget, as ``validate`` reports."""
        budget = _new_budget(value)
        try:
            return _valid(self.root, value, 0, budget)
        except WorkExceeded:
            return False


def _report_spent(sink: Sink, budget: Budget) -> None:
    """The issue of a validation stopped by its budget, last, within ``max_issues``."""
    if len(sink.issues) >= sink.limit:
        del sink.issues[sink.limit - 1 :]
    add_issue(
        sink,
        None,
        "budget",
        f"validation stopped after {budget.limit:,} checks: the schema checks parts of this "
        "value against its subschemas again and again (shared $ref targets), more often than "
        "any value of this size needs",
    )
