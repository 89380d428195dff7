"""Permission rules and ``PermissionConfig``: parsed once, at construction, or refused whole.

A rule is ``Tool`` (every call of the tool) or ``Tool(specifier)``. The specifier is read three
ways, and the tool decides which applies when a call is matched (see ``resolver``):

- as a command rule (tools with a ``command`` argument): ``npm test`` exact, ``npm test:*`` or
  ``npm test *`` a prefix on word boundaries; it must be one simple command;
- as a path pattern (tools with path arguments): see ``globs``;
- as a ``permission_key`` pattern (other tools): exact, or ``prefix:*``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from fastgate.permissions.globs import PathPattern, compile_path_pattern
from fastgate.permissions.shell import ShellSyntaxError, Word, parse_command

RuleKind = Literal["allow", "ask", "deny"]

DEFAULT_SENSITIVE: tuple[str, ...] = (
    ".env",
    ".env.*",
    "**/.ssh/**",
    "**/*.pem",
    "**/*.key",
    "**/id_rsa*",
    "**/id_dsa*",
    "**/id_ecdsa*",
    "**/id_ed25519*",
    "**/.aws/credentials",
    "**/.git/config",
    "**/.git/hooks/**",  # a hook is code that git runs later: writing one is running code
    "**/.git-credentials",
    "**/.netrc",
    "**/.gnupg/**",
    "**/*.p12",
    "**/*.pfx",
    "**/.npmrc",
    "**/.pypirc",
    "**/.docker/config.json",
    "**/.kube/config",
    "**/.config/gh/hosts.yml",
)

_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_RULE = re.compile(r"(?s)([^()]*)(?:\((.*)\))?")  # greedy: the specifier ends at the last ")"


@dataclass(frozen=True, slots=True)
class Rule:
    """One parsed rule. ``tokens`` is None when the specifier is not a command."""

    text: str
    kind: RuleKind
    tool: str
    specifier: str | None
    prefix: bool = False  # ``:*`` / `` *`` suffix
    tokens: tuple[Word, ...] | None = None
    path: PathPattern | None = None


def parse_rule(text: object, kind: RuleKind) -> Rule:
    """Parse one rule; ``ValueError`` naming the rule and what is wrong with it."""
    if not isinstance(text, str):
        raise ValueError(f"{kind} rule {text!r}: a rule must be a string")
    try:
        return _parse_rule(text, kind)
    except ValueError as exc:
        raise ValueError(f"{kind} rule {text!r}: {exc}") from None


def _parse_rule(text: str, kind: RuleKind) -> Rule:
    if text != text.strip():
        raise ValueError("leading or trailing whitespace")
    if not _balanced(text):
        raise ValueError("unbalanced parentheses or quotes")
    m = _RULE.fullmatch(text)
    if m is None:
        raise ValueError("expected Tool or Tool(specifier)")
    name, specifier = m.group(1), m.group(2)
    if not name:
        raise ValueError("empty tool name")
    if not _TOOL_NAME.fullmatch(name):
        raise ValueError(f"invalid tool name {name!r} (expected 1-64 characters A-Z a-z 0-9 _ -)")
    if specifier is None:
        return Rule(text, kind, name, None)
    if not specifier.strip():
        raise ValueError("empty specifier (write the bare tool name to match every call)")
    if not _balanced(specifier):
        raise ValueError("unbalanced parentheses or quotes in the specifier")
    if specifier != specifier.strip():
        raise ValueError("whitespace around the specifier")
    if "\x00" in specifier:
        raise ValueError("NUL byte in specifier")
    if specifier == "*":
        return Rule(text, kind, name, None)
    body, prefix = specifier, False
    for suffix in (":*", " *"):
        if body.endswith(suffix):
            body, prefix = body[: -len(suffix)].rstrip(), True
            break
    if not body:
        raise ValueError("empty prefix before ':*'")
    tokens = _command_tokens(body)
    # For path tools a prefix rule names the path and everything below it.
    path = _path_pattern(body if prefix else specifier)
    return Rule(text, kind, name, body, prefix, tokens, path)


def _balanced(text: str) -> bool:
    """Parentheses balance, ignoring quoted or escaped ones (``Bash(echo ')')``)."""
    depth = 0
    quote = ""
    escaped = False
    for c in text:
        if escaped:
            escaped = False
        elif c == "\\" and quote != "'":
            escaped = True
        elif quote:
            quote = "" if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c in "()":
            depth += 1 if c == "(" else -1
            if depth < 0:
                return False
    return depth == 0 and not quote


def _command_tokens(body: str) -> tuple[Word, ...] | None:
    """The words of a command specifier; None when it can only be a path or a key."""
    try:
        commands, _ = parse_command(body)
    except ShellSyntaxError as exc:
        if any(c.isspace() for c in body):
            raise ValueError(f"command specifier does not parse: {exc}") from None
        return (Word(body, body),)
    single = len(commands) == 1 and not commands[0].redirects and not commands[0].assignments
    if not single or len(commands[0].words) == 0:
        if any(c.isspace() for c in body):
            raise ValueError("a command specifier must be one simple command, without operators")
        return (Word(body, body),)
    return tuple(commands[0].words)


def _path_pattern(specifier: str) -> PathPattern | None:
    try:
        return compile_path_pattern(specifier)
    except ValueError:
        return None  # only usable as a command or a key


def parse_rules(rules: Iterable[object], kind: RuleKind) -> tuple[Rule, ...]:
    if isinstance(rules, (str, bytes)):
        raise ValueError(f"{kind}: expected a list of rules, got a single string {rules!r}")
    return tuple(parse_rule(r, kind) for r in rules)


def parse_patterns(patterns: Iterable[object], field_name: str) -> tuple[PathPattern, ...]:
    if isinstance(patterns, (str, bytes)):
        raise ValueError(f"{field_name}: expected a list of patterns, got {patterns!r}")
    out: list[PathPattern] = []
    for p in patterns:
        if not isinstance(p, str):
            raise ValueError(f"{field_name}: pattern {p!r} is not a string")
        try:
            out.append(compile_path_pattern(p))
        except ValueError as exc:
            raise ValueError(f"{field_name}: pattern {p!r}: {exc}") from None
    return tuple(out)


@dataclass(frozen=True, slots=True)
class ToolRules:
    deny: tuple[Rule, ...] = ()
    ask: tuple[Rule, ...] = ()
    allow: tuple[Rule, ...] = ()

    def __add__(self, other: ToolRules) -> ToolRules:
        return ToolRules(self.deny + other.deny, self.ask + other.ask, self.allow + other.allow)


NO_RULES = ToolRules()


@dataclass(frozen=True, slots=True)
class RuleSet:
    """Rules grouped by tool name and kind (one dict lookup per decision)."""

    by_tool: dict[str, ToolRules] = field(default_factory=dict)

    @staticmethod
    def of(*groups: tuple[Rule, ...]) -> RuleSet:
        by_tool: dict[str, dict[str, list[Rule]]] = {}
        for group in groups:
            for rule in group:
                kinds = by_tool.setdefault(rule.tool, {"deny": [], "ask": [], "allow": []})
                kinds[rule.kind].append(rule)
        return RuleSet(
            {
                name: ToolRules(tuple(k["deny"]), tuple(k["ask"]), tuple(k["allow"]))
                for name, k in by_tool.items()
            }
        )

    def for_tool(self, name: str) -> ToolRules:
        return self.by_tool.get(name, NO_RULES)
