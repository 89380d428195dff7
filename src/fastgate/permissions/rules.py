"""Permission rules and ``PermissionConfig``: parsed once, at construction, or refused whole.

A rule is ``Tool`` (every call of the tool) or ``Tool(specifier)``. The specifier is read three
ways, and the tool decides which applies when a call is matched (see ``resolver``):

- as a command rule (tools with a ``command`` argument): ``npm test`` exact, ``npm test:*`` or
  ``npm test *`` a prefix on word boundaries; with a ``*`` anywhere else (``git * main``) a
  wildcard, ``*`` standing for any run of characters within one simple command (a ``*`` word
  alone may also stand for no word at all); it must be one simple command;
- as a path pattern (tools with path arguments): see ``fastgate.paths.globs``;
- as a ``permission_key`` pattern (other tools): exact, or ``prefix:*``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

from fastgate.paths.globs import PathPattern, compile_path_pattern
from fastgate.paths.linear import LinearRegex, linear
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

# The files by which git finds another configuration or hooks to run: a ``commondir`` naming
# another git directory, a worktree's own configuration, a submodule's or worktree's git
# directory (``.git/modules/<name>``, ``.git/worktrees/<name>``).
GIT_INDIRECTIONS: tuple[str, ...] = (
    "**/.git/commondir",
    "**/.git/config.worktree",
    "**/.git/modules/**/config",
    "**/.git/modules/**/config.worktree",
    "**/.git/modules/**/hooks/**",
    "**/.git/modules/**/commondir",
    "**/.git/worktrees/*/commondir",
    "**/.git/worktrees/*/config",
    "**/.git/worktrees/*/config.worktree",
    "**/.git/worktrees/*/hooks/**",
)
# Other version-control systems' repository configuration, which runs code as git's does
# (Mercurial's ``[hooks]``, either's aliases, pager and editor): Mercurial's ``hgrc``, the one a
# shared repository keeps for itself, and ``sharedpath`` (a shared repository's pointer to the
# store whose ``hgrc`` it reads); Jujutsu's repository ``config.toml``.
OTHER_VCS_CONFIGS: tuple[str, ...] = (
    "**/.hg/hgrc",
    "**/.hg/hgrc-not-shared",
    "**/.hg/sharedpath",
    "**/.jj/repo/config.toml",
)
# Other agents' and editors' project settings, which run code later as ``.claude``'s do: MCP
# server lists (``.vscode/mcp.json`` and ``.cursor/mcp.json``, which ``load_mcp_config`` reads
# too), tasks and launch configurations, settings that name programs to start or approve an
# agent's tools on its own (``chat.tools.autoApprove``), commands run on an event (Kiro's hooks,
# aider's ``test-cmd``, a dev container's ``initializeCommand``, which runs on the host), rules
# read into every later prompt.
CLIENT_SETTINGS: tuple[str, ...] = (
    "**/.vscode/**",
    "**/.cursor/**",
    "**/.windsurf/**",
    "**/.gemini/**",
    "**/.codex/**",
    "**/.amazonq/**",
    "**/.continue/**",
    "**/.roo/**",
    "**/.zed/**",
    "**/.idea/**",
    "**/.junie/**",
    "**/.kiro/**",
    "**/.trae/**",
    "**/.clinerules",
    "**/.clinerules/**",
    "**/.cursorrules",
    "**/.windsurfrules",
    "**/.aider.conf.yml",
    "**/.devcontainer.json",
    "**/.devcontainer/**",
)
# Git hook managers' files, which the hooks they install run on the user's next commit: husky's
# hook scripts, the pre-commit framework's, lefthook's and overcommit's configuration, and
# simple-git-hooks' own file. A hooks directory named by ``core.hooksPath`` is protected too,
# whatever its name, when the configuration names it (``git_reads``).
HOOK_MANAGERS: tuple[str, ...] = (
    "**/.husky/**",
    "**/.pre-commit-config.yaml",
    "**/.pre-commit-config.yml",
    "**/lefthook.*",
    "**/.lefthook.*",
    "**/lefthook-local.*",
    "**/.lefthook-local.*",
    "**/.lefthook/**",
    "**/.lefthook-local/**",
    "**/.overcommit.yml",
    "**/.simple-git-hooks.*",
)
# Files whose change alters what runs later or what policy says: settings of fastgate and of
# Claude Code (which fastgate loads), MCP server lists, git hooks and git's own configuration
# (``core.hooksPath``, ``core.fsmonitor``, aliases) and what points git at another one, the
# same files of Mercurial and Jujutsu, other clients' project settings and git hook managers'
# files. Writing one is at least ASK in every mode.
DEFAULT_PROTECTED: tuple[str, ...] = (
    "**/.fastgate/**",
    "**/.claude/**",
    "**/.mcp.json",
    "**/.git/hooks/**",
    "**/.git/config",
    *GIT_INDIRECTIONS,
    *OTHER_VCS_CONFIGS,
    *CLIENT_SETTINGS,
    *HOOK_MANAGERS,
)


def git_user_configs() -> tuple[str, ...]:
    """git's configuration outside any repository, read by every git the server runs:
    the user's (``git config --global``, also under ``$XDG_CONFIG_HOME`` when the server has
    one) and the system's (``--system``). Writing one changes what later git commands run
    (``core.fsmonitor``, ``core.hooksPath``, aliases, ``core.sshCommand``)."""
    found = ["~/.gitconfig", "~/.config/git/config", "//etc/gitconfig"]
    found += _under_xdg_config(("git/config",))
    return tuple(dict.fromkeys(found))


# Files in the home directory that the user's later programs run or take commands from: the
# shells' startup files (every terminal the user opens runs them), curl's and wget's (options
# such as ``--output`` or ``-K`` in every later download), Mercurial's and Jujutsu's user
# configuration (hooks, aliases, the pager and editor they start), the desktop's autostart and
# the user's systemd units, and Python's user site (a ``.pth`` line that starts with ``import``
# runs in every later interpreter).
HOME_STARTUP_FILES: tuple[str, ...] = (
    "~/.profile",
    "~/.bashrc",
    "~/.bash_profile",
    "~/.bash_login",
    "~/.bash_logout",
    "~/.bash_aliases",
    "~/.zshenv",
    "~/.zshrc",
    "~/.zprofile",
    "~/.zlogin",
    "~/.zlogout",
    "~/.kshrc",
    "~/.mkshrc",
    "~/.cshrc",
    "~/.tcshrc",
    "~/.login",
    "~/.xprofile",
    "~/.xsessionrc",
    "~/.pam_environment",
    "~/.curlrc",
    "~/.wgetrc",
    "~/.hgrc",
    "~/.jjconfig.toml",
    "~/.local/lib/python*/site-packages/*.pth",
    "~/.local/lib/python*/site-packages/usercustomize.py",
)
# The same, under the configuration directory (``~/.config``, or ``$XDG_CONFIG_HOME`` where the
# server has one).
_CONFIG_STARTUP_FILES: tuple[str, ...] = (
    "fish/**",
    ".curlrc",
    "wgetrc",
    "hg/**",
    "jj/**",
    "autostart/**",
    "systemd/user/**",
    "environment.d/**",
)


def user_startup_files() -> tuple[str, ...]:
    """What later programs of the user, and of the machine, run or take commands from, outside
    any project: ``HOME_STARTUP_FILES``, the same under the configuration directory, the
    system's configuration (``/etc``: its shells' startup files, ``ld.so.preload``, cron,
    sudoers, systemd, every tool's system-wide settings) and the jobs cron and at keep.
    Writing one is writing what runs later, outside the call and its sandbox."""
    found = [*HOME_STARTUP_FILES, *("~/.config/" + name for name in _CONFIG_STARTUP_FILES)]
    found += _under_xdg_config(_CONFIG_STARTUP_FILES)
    found += ["//etc/**", "//var/spool/cron/**"]
    return tuple(dict.fromkeys(found))


def _under_xdg_config(names: Iterable[str]) -> list[str]:
    """``names`` under ``$XDG_CONFIG_HOME`` when the server has one (an absolute path)."""
    xdg = os.environ.get("XDG_CONFIG_HOME", "")
    if not (xdg.startswith("/") and "\x00" not in xdg and xdg.strip("/")):
        return []
    literal = re.sub(r"([*?\[\]\\])", r"\\\1", xdg.strip("/"))  # a path, not a glob
    return ["//" + literal + "/" + name for name in names]


_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_RULE = re.compile(r"(?s)([^()]*)(?:\((.*)\))?")  # greedy: the specifier ends at the last ")"
# Words of a command are joined with a character no word can hold (NUL is refused), so a wildcard
# pattern's literal text never matches across a word boundary it did not write.
WORD_SEPARATOR = "\x00"


@dataclass(frozen=True, slots=True)
class Rule:
    """One parsed rule. ``tokens`` is None when the specifier is not a command. ``wildcard`` is
    set for a command specifier with a ``*`` other than a trailing ``:*``/`` *``: a full-match
    regex over a simple command's words joined by ``WORD_SEPARATOR``. ``project``: the directory
    a ``/x`` path pattern is relative to (``None``: the workspace root)."""

    text: str
    kind: RuleKind
    tool: str
    specifier: str | None
    prefix: bool = False  # ``:*`` / `` *`` suffix
    tokens: tuple[Word, ...] | None = None
    path: PathPattern | None = None
    wildcard: LinearRegex | None = None
    project: str | None = None
    allow_wildcard: LinearRegex | None = None  # ``wildcard`` over ``allow_text``s


def parse_rule(text: object, kind: RuleKind, project: str | None = None) -> Rule:
    """Parse one rule; ``ValueError`` naming the rule and what is wrong with it. A ``Rule``
    already parsed for ``kind`` is returned as it is."""
    if isinstance(text, Rule):
        if text.kind != kind:
            raise ValueError(f"{kind} rule {text.text!r}: parsed as a {text.kind} rule")
        return text
    if not isinstance(text, str):
        raise ValueError(f"{kind} rule {text!r}: a rule must be a string")
    try:
        return _parse_rule(text, kind, project)
    except ValueError as exc:
        raise ValueError(f"{kind} rule {text!r}: {exc}") from None


def _parse_rule(text: str, kind: RuleKind, project: str | None) -> Rule:
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
    server = _server_wildcard(name)
    if server is not None:  # Claude Code's spelling of a rule for every tool of a server
        if specifier is not None and specifier != "*":
            raise ValueError(f"{name} names every tool of a server: it takes no specifier")
        return Rule(text, kind, server, None)
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
    if "\x00" in specifier or EXPANDS in specifier:
        raise ValueError("NUL or \\x01 byte in specifier")
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
    path = _path_pattern(body if prefix else specifier, project)
    wildcard = allow_wildcard = None
    if tokens is not None:
        wildcard = _wildcard(tokens, prefix, word_regex)
        if wildcard is not None:
            allow_wildcard = _wildcard(tokens, prefix, allow_word_regex)
    return Rule(text, kind, name, body, prefix, tokens, path, wildcard, project, allow_wildcard)


def _server_wildcard(name: str) -> str | None:
    """``mcp__<server>`` for a name written ``mcp__<server>__*``, else None."""
    if not (name.startswith("mcp__") and name.endswith("__*")):
        return None
    server_rule = name[:-3]
    return server_rule if len(server_rule) > 5 and _TOOL_NAME.fullmatch(server_rule) else None


def is_star(word: Word) -> bool:
    """A word that is an unquoted ``*`` and nothing else."""
    return word.dynamic and word.raw == "*"


def _wildcard(
    tokens: tuple[Word, ...], prefix: bool, regex_of: Callable[[Word], str]
) -> LinearRegex | None:
    """The full-match regex of a command specifier with a ``*`` inside, else None (matched in
    linear time: a repository's rule must not make a long command backtrack for ever)."""
    if not any(has_star(w) for w in tokens):
        return None
    sep = re.escape(WORD_SEPARATOR)
    parts: list[str] = []
    for index, word in enumerate(tokens):
        if is_star(word):
            # A ``*`` word: any run of words there, none included (``git * main`` matches
            # ``git main``); a leading one carries the separator after it.
            parts.append(f"(?:.*{sep})?" if index == 0 else f"(?:{sep}.*)?")
            continue
        if index > 0 and not (index == 1 and is_star(tokens[0])):
            parts.append(sep)
        parts.append(regex_of(word))
    if prefix:
        parts.append(f"(?:{sep}.*)?")
    return linear("".join(parts))


def has_star(word: Word) -> bool:
    """A word with an unquoted ``*`` in it (a wildcard word of a specifier)."""
    return word.dynamic and "*" in _unquoted_stars(word.raw)


# What allow rules compare of a word: its characters, each one bash would expand (a glob, ``~``,
# ``$``, a brace, a backquote, a parenthesis) marked by EXPANDS when it is unquoted, so a rule
# word matches it only where the rule has the same character unquoted: ``Bash(rm '*')`` (a
# file named ``*``) does not allow ``rm *`` (every file), nor ``Bash(cat '~/x')`` ``cat ~/x``.
# (A rule may not hold the byte; a command word holding it has it doubled.)
EXPANDS = "\x01"
_EXPANDING = frozenset("*?[]~{}$`()")
_EXPANDING_QUOTED = frozenset("$`")  # what still expands between double quotes


def spelled(raw: str) -> list[tuple[str, bool]]:
    """``raw``'s characters as bash reads them, quotes and escapes removed, each with whether it
    is one bash would expand. ANSI-C quoting (``$'...'``) keeps its escapes as written."""
    out: list[tuple[str, bool]] = []
    quote = ""
    i, n = 0, len(raw)
    while i < n:
        c = raw[i]
        if quote == "'":
            if c == "'":
                quote = ""
            else:
                out.append((c, False))
        elif quote == "$'":
            if c == "\\" and i + 1 < n:
                out.append((raw[i : i + 2], False))
                i += 1
            elif c == "'":
                quote = ""
            else:
                out.append((c, False))
        elif quote == '"':
            if c == '"':
                quote = ""
            elif c == "\\" and i + 1 < n and raw[i + 1] in '$`"\\':
                out.append((raw[i + 1], False))
                i += 1
            else:
                out.append((c, c in _EXPANDING_QUOTED))
        elif c == "\\":
            if i + 1 < n:
                out.append((raw[i + 1], False))
                i += 1
        elif c == "$" and raw.startswith("$'", i):
            quote = "$'"
            i += 1
        elif c in "'\"":
            quote = c
        else:
            out.append((c, c in _EXPANDING))
        i += 1
    return out


def allow_text(word: Word) -> str:
    """What an allow rule compares of ``word`` (see ``EXPANDS``)."""
    raw = word.raw
    if raw == word.value and _EXPANDING.isdisjoint(raw) and EXPANDS not in raw:
        return raw  # nothing quoted, nothing bash would expand
    return "".join(
        EXPANDS + c if expands else c.replace(EXPANDS, EXPANDS + EXPANDS)
        for c, expands in spelled(raw)
    )


def allow_word_regex(word: Word) -> str:
    """One specifier word as a regex over ``allow_text``s: an unquoted ``*`` any run of
    characters, every other character itself (marked where it expands)."""
    return "".join(
        ".*" if expands and c == "*" else re.escape(EXPANDS + c if expands else c)
        for c, expands in spelled(word.raw)
    )


def _unquoted_stars(raw: str) -> str:
    """``raw`` with quoted and escaped text blanked, so only unquoted ``*`` remain."""
    out: list[str] = []
    quote = ""
    escaped = False
    for c in raw:
        if escaped:
            out.append("_")
            escaped = False
        elif quote:
            out.append("_")
            if c == quote:
                quote = ""
        elif c == "\\":
            escaped = True
            out.append("_")
        elif c in "'\"":
            quote = c
            out.append("_")
        else:
            out.append(c)
    return "".join(out)


def word_regex(word: Word) -> str:
    """One specifier word as a regex: its text literally, each unquoted ``*`` any run of
    characters (within the simple command: word boundaries included)."""
    if not has_star(word):
        return re.escape(word.value)
    out: list[str] = []
    quote = ""
    escaped = False
    for c in word.raw:
        if escaped:
            out.append(re.escape(c))
            escaped = False
        elif quote:
            if c == quote:
                quote = ""
            else:
                out.append(re.escape(c))
        elif c == "\\":
            escaped = True
        elif c in "'\"":
            quote = c
        elif c == "*":
            out.append(".*")
        else:
            out.append(re.escape(c))
    return "".join(out)


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


def _path_pattern(specifier: str, project: str | None) -> PathPattern | None:
    try:
        return compile_path_pattern(specifier, project)
    except ValueError:
        return None  # only usable as a command or a key


def parse_rules(
    rules: Iterable[object], kind: RuleKind, project: str | None = None
) -> tuple[Rule, ...]:
    if isinstance(rules, (str, bytes)):
        raise ValueError(f"{kind}: expected a list of rules, got a single string {rules!r}")
    return tuple(parse_rule(r, kind, project) for r in rules)


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
