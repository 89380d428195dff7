"""``PermissionResolver``: rules, sensitive paths, session approvals and the mode (SPEC §5).

Order of a decision, first that applies wins:

1. a DENY rule matches → DENY (also: the command cannot be read, or names a program we cannot
   know, and the tool has DENY rules: fail closed);
2. an ASK rule matches → ASK (YOLO: allowed, unless sensitive);
3. the call touches a sensitive path, or writes a protected one → ASK (every mode; allow rules
   and session approvals do not cover it);
4. ALLOW rules cover the call (every sub-command, every path) → ALLOW;
5. the mode default (ALLOW/ASK/DENY by tool kind); an ASK becomes ALLOW when the session
   approved this permission signature.

A signature stands for the whole call: the command (normalized) or the canonical paths, and
every other argument, so a session approval never covers a call the user did not see.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Mapping
from typing import Any, Final, final

import msgspec
import xxhash

from fastgate._core import regular_file_links
from fastgate.model.context import ExecutionContext
from fastgate.model.decision import Decision, DecisionSource, PermissionMode
from fastgate.model.kinds import ToolKind
from fastgate.paths.canonical import canonical_path, folds_case, names_any
from fastgate.paths.globs import PathPattern, tail_regex
from fastgate.paths.linear import NEVER, LinearRegex, linear
from fastgate.permissions.approval_store import ApprovalStore
from fastgate.permissions.commands import (
    CommandAnalysis,
    analyze_command,
    foreign_git_directories,
    linked_programs,
)
from fastgate.permissions.config import PermissionConfig
from fastgate.permissions.matching import (
    command_allowed_by,
    command_matches,
    key_matches,
)
from fastgate.permissions.project_rules import exact_rules_for
from fastgate.permissions.repository_config import NOTHING, GitReads, GitReadsCache
from fastgate.permissions.rules import (
    NO_RULES,
    Rule,
    ToolRules,
    git_user_configs,
    parse_patterns,
    user_startup_files,
)
from fastgate.permissions.settings import SettingsCache, append_rules
from fastgate.permissions.subjects import (
    ResolvedPath,
    Subject,
    canonical_bytes,
    command_paths,
    key_subject,
    none_subject,
    path_subject,
    resolve_path,
)
from fastgate.tools import ToolDefinition
from fastgate.tools._definition import admitted_names

MODE_DEFAULTS: dict[PermissionMode, tuple[Decision, Decision, Decision]] = {
    PermissionMode.DEFAULT: (Decision.ALLOW, Decision.ASK, Decision.ASK),
    PermissionMode.ACCEPT_EDITS: (Decision.ALLOW, Decision.ALLOW, Decision.ASK),
    PermissionMode.PLAN: (Decision.ALLOW, Decision.DENY, Decision.DENY),
    PermissionMode.YOLO: (Decision.ALLOW, Decision.ALLOW, Decision.ALLOW),
    # Claude Code's dontAsk: only what is already allowed runs (every other ASK is refused too).
    PermissionMode.DONT_ASK: (Decision.ALLOW, Decision.DENY, Decision.DENY),
}
_CACHE_LIMIT = 4096
# Caches keyed by a tool definition hold it alive: kept small, so tools re-registered over a long
# run (a reconnecting MCP server, say) do not pile up.
_DEFINITION_CACHE_LIMIT = 512
_ANY_ARGUMENTS: Final[tuple[str, ...]] = ("*",)  # a tool whose permission_key looks at them all


class RuleDecision(msgspec.Struct, frozen=True):
    decision: Decision
    source: DecisionSource
    reason: str
    signature: str
    matched_rule: str | None = None
    sensitive: bool = False


def permission_signature(tool_name: str, key: str) -> str:
    """xxh3-64 (hex) of the tool name and the normalized key: what session approvals store."""
    return xxhash.xxh3_64_hexdigest(f"{tool_name}\x00{key}".encode("utf-8", "surrogatepass"))


# Signatures of calls with arguments beyond the key are hashed with their own seed: no key,
# whatever text it holds, can spell the signature of another call's arguments.
_ARGUMENTS_SEED: Final = 0x9E3779B1
_BUILTIN_BASH: Final = "fastgate.builtin._bash"
# What the built-in ``bash`` never reads: its ``description`` is for people, and a model
# writes a new one for every call of the same command.
_BASH_NOTES: Final = frozenset({"description"})
_NOTHING_IGNORED: Final[frozenset[str]] = frozenset()


def call_signature(
    tool: ToolDefinition, args: Mapping[str, Any], subject: Subject, ignored: frozenset[str]
) -> str:
    """The permission signature of this call: its subject's key and every argument that key
    does not already stand for (a command is in the key normalized, a path canonical), less
    the ``ignored`` ones the tool is known never to read. A call whose key says it all keeps
    ``permission_signature(name, key)``."""
    command = subject.command
    # A command that could not be parsed is in the key with its spaces collapsed, quoted
    # ones too: then the text as given is signed as well.
    command_in_key = subject.kind == "command" and command is not None and command.error is None
    paths_in_key = subject.kind == "paths" and not subject.invalid
    path_names = subject.path_names if paths_in_key else ()
    rest: dict[str, Any] = {}
    for name, value in args.items():
        if name in ignored:
            continue
        if command_in_key and name == "command" and isinstance(value, str):
            continue
        if paths_in_key and name in path_names:
            continue
        rest[name] = value
    named: list[tuple[str | None, str]] | None = None
    if paths_in_key:
        primary = tool.path_args[0] if tool.path_args else None
        # The usual call, one path in the tool's first path argument, is told apart by the
        # key alone; any other shape says which argument (or the tool's ``paths``) named
        # which file.
        if len(path_names) != 1 or path_names[0] is None or path_names[0] != primary:
            named = [
                (name, path.canonical) for name, path in zip(path_names, subject.paths, strict=True)
            ]
    if not rest and named is None:
        return permission_signature(tool.name, subject.key)
    encoded = canonical_bytes((rest, named))
    digest = xxhash.xxh3_128_hexdigest(encoded)  # fixed length: the text after it is the key
    text = f"{tool.name}\x00{digest}\x00{subject.key}"
    return xxhash.xxh3_64_hexdigest(text.encode("utf-8", "surrogatepass"), _ARGUMENTS_SEED)


def ignored_arguments(tool: ToolDefinition) -> frozenset[str]:
    """The arguments a tool is known never to read: the built-in ``bash``'s ``description``,
    told by its function (a definition renamed or re-described keeps it); nothing for any
    other tool."""
    module = sys.modules.get(_BUILTIN_BASH)  # not imported: no tool can be the built-in
    if module is not None and tool.execute is getattr(module, "bash", None):
        return _BASH_NOTES
    return _NOTHING_IGNORED


@final
class PermissionResolver:
    """Decides calls for one executor. Thread-safe for concurrent ``decide`` calls."""

    __slots__ = (
        "_analyses",
        "_git_reads",
        "_has_command",
        "_home",
        "_merged_names",
        "_merged_rules",
        "_mode_allows",
        "_own_rules",
        "_path_decisions",
        "_protected",
        "_regexes",
        "_rule_allows",
        "_sensitive",
        "_settings",
        "_signing",
        "_subject_names",
        "approvals",
        "config",
        "mode",
    )

    def __init__(
        self, config: PermissionConfig, mode: PermissionMode, approvals: ApprovalStore
    ) -> None:
        if not isinstance(config, PermissionConfig):
            raise TypeError(f"config must be a PermissionConfig, got {type(config).__name__}")
        self.config = config
        self._own_rules = config.rules  # a frozen config's parsed rules
        self.mode = PermissionMode.parse(mode)
        self.approvals = approvals
        self._settings = SettingsCache()
        self._analyses: dict[str, CommandAnalysis] = {}
        # Keyed by definition: two tools may share a name (in different scopes), not a kind.
        self._mode_allows: dict[ToolDefinition, RuleDecision] = {}
        # Per definition: (its rules, the ALLOW they give any call without a subject).
        self._rule_allows: dict[ToolDefinition, tuple[ToolRules, RuleDecision | None]] = {}
        self._regexes: dict[tuple[str, str, bool], LinearRegex] = {}
        self._path_decisions: dict[tuple[Any, ...], tuple[ToolRules, RuleDecision | None]] = {}
        # Per tool name: (the project's rules, this config's rules plus those).
        self._merged_rules: dict[str, tuple[ToolRules, ToolRules]] = {}
        # Per tuple of rule names (a tool's name and its rule_names): (the rules of each name,
        # merged), so the merged rules keep their identity while no name's rules change.
        self._merged_names: dict[tuple[str, ...], tuple[tuple[ToolRules, ...], ToolRules]] = {}
        self._has_command: dict[ToolDefinition, bool] = {}  # bounded like the other caches
        # Per definition: the arguments a rule could look at (paths, and a command).
        self._subject_names: dict[ToolDefinition, tuple[str, ...]] = {}
        # Per definition: the arguments its signatures leave out (``ignored_arguments``).
        self._signing: dict[ToolDefinition, frozenset[str]] = {}
        self._sensitive = _Guard(config.sensitive_patterns)
        # What a model could change to widen its own permissions or run code later; git's
        # user and system configuration, and what the user's later programs start with (shells'
        # startup files, tools' user settings, /etc), always.
        outside = (*git_user_configs(), *user_startup_files())
        self._protected = _Guard(config.protected_patterns + parse_patterns(outside, "protected"))
        # and what git's configuration points it at: included files, the hooks directory
        self._git_reads = GitReadsCache()
        self._home = os.path.expanduser("~")  # as the patterns above were read

    # -- the decision --------------------------------------------------------------------------

    def decide(
        self, tool: ToolDefinition, args: Mapping[str, Any], ctx: ExecutionContext
    ) -> RuleDecision:
        root = ctx.workspace_root or os.getcwd()
        names = tool.rule_names
        rules = (
            self._rules_for_names((tool.name, *names), root)
            if names
            else self._rules_for(tool.name, root)
        )
        if rules is NO_RULES:
            # No rule, no path, no command, no key: the mode alone decides, whatever the
            # arguments. An ALLOW is then the same decision for every call (cached per tool).
            allowed = self._mode_allows.get(tool)
            if allowed is None:
                allowed = self._allowed_by_mode(tool)
            if allowed is not None and not self._has_subject(tool, args):
                return allowed
        elif not rules.deny and not rules.ask and not self._has_subject(tool, args):
            # Only allow rules, and nothing in the call they could look at (an MCP tool allowed
            # by name, the usual case): the same ALLOW for every call (cached per tool).
            allowed = self._allowed_by_name(tool, rules)
            if allowed is not None:
                return allowed
        subject = self._subject(tool, args, root)
        signature = self._signature(tool, args, subject)
        memo = subject.kind == "paths" and not subject.invalid
        if memo and not _hard_linked_write(tool, subject):
            # The paths were just resolved (a symlink swapped in since is seen). What the rules
            # and the sensitive list say about those resolved paths is text matching, the same
            # every time: remembered per (rules, tool, root, resolved paths).
            # (with what git reads now: a write into a hooks directory named since is seen)
            reads = self._git_reads_of(root, subject.paths) if tool.kind is ToolKind.WRITE else ()
            key = (id(rules), tool.name, tool.kind, root, subject.paths, reads)
            known = self._path_decisions.get(key)
            if known is None or known[0] is not rules:  # rules kept alive, so ids are not reused
                if len(self._path_decisions) >= _CACHE_LIMIT:
                    self._path_decisions.clear()
                known = (rules, self._rule_decision(tool, rules, subject, root, signature))
                self._path_decisions[key] = known
            decided = known[1]
            if decided is not None and decided.signature != signature:
                # remembered for the paths; the other arguments are this call's own
                decided = msgspec.structs.replace(decided, signature=signature)
        else:
            decided = self._rule_decision(tool, rules, subject, root, signature)
        final = (
            decided if decided is not None else self._mode_decision(tool, subject, ctx, signature)
        )
        if final.decision is Decision.ASK and self.mode is PermissionMode.DONT_ASK:
            return _never_asked(final)
        return final

    def _rule_decision(
        self,
        tool: ToolDefinition,
        rules: ToolRules,
        subject: Subject,
        root: str,
        signature: str | None = None,
    ) -> RuleDecision | None:
        """The decision of the rules and the sensitive list; None when the mode decides."""
        if rules is NO_RULES and not subject.invalid:
            # No rule for this tool (the common case): only guarded paths and the mode decide.
            if self._guarded(tool, subject, root) is None:
                return None
        if signature is None:
            signature = permission_signature(tool.name, subject.key)
        shown = _shorten(subject.key)
        deny = rules.deny
        hit = self._first_match(deny, subject, root)
        if hit is not None:
            return RuleDecision(
                Decision.DENY,
                DecisionSource.RULE,
                f"rule {hit.text} denies {shown}",
                signature,
                hit.text,
            )
        unreadable = _unreadable(subject)
        if unreadable and any(r.specifier is not None for r in deny):
            return RuleDecision(
                Decision.DENY,
                DecisionSource.RULE,
                f"{unreadable}, and {tool.name} has deny rules: refused (fail closed); "
                "rewrite it so every program is named literally",
                signature,
            )
        guarded = self._guarded(tool, subject, root)
        sensitive_path = None if guarded is None else guarded[1]
        ask = self._first_match(rules.ask, subject, root)
        if ask is None and unreadable:  # it may be what an ask rule names (fail closed)
            ask = next((r for r in rules.ask if r.specifier is not None), None)
        if ask is not None and (self.mode is not PermissionMode.YOLO or sensitive_path):
            return RuleDecision(
                Decision.ASK,
                DecisionSource.RULE,
                f"rule {ask.text} asks before {shown}",
                signature,
                ask.text,
                sensitive_path is not None,
            )
        if guarded is not None:
            return RuleDecision(
                Decision.ASK, DecisionSource.SENSITIVE, guarded[0], signature, None, True
            )
        if ask is not None:
            return RuleDecision(
                Decision.ALLOW,
                DecisionSource.MODE,
                f"YOLO mode allows {shown} (rule {ask.text} would ask)",
                signature,
                ask.text,
            )
        allowed_by = self._allowed_by(rules.allow, subject, root)
        if allowed_by is not None:
            verb = "rules {} allow" if ", " in allowed_by else "rule {} allows"
            return RuleDecision(
                Decision.ALLOW,
                DecisionSource.RULE,
                f"{verb.format(allowed_by)} {shown}",
                signature,
                allowed_by,
            )
        return None

    def _has_subject(self, tool: ToolDefinition, args: Mapping[str, Any]) -> bool:
        """Whether the call (its arguments validated) has something rules or sensitive paths
        could look at."""
        names = self._subject_names.get(tool)
        if names is None:
            names = tool.path_args
            if self._tool_has_command(tool):
                names = (*names, "command")
            # Those its valid arguments can have: often none, and then nothing to look up.
            names = admitted_names(tool.input_schema, names)
            if tool.permission_key is not None or tool.paths is not None:
                names = _ANY_ARGUMENTS  # the key (or the declared paths) come from any of them
            if len(self._subject_names) >= _DEFINITION_CACHE_LIMIT:
                self._subject_names.clear()
            self._subject_names[tool] = names
        return names is _ANY_ARGUMENTS or names_any(names, args)

    def _allowed_by_mode(self, tool: ToolDefinition) -> RuleDecision | None:
        default, reason = _MODE_REASONS[self.mode, tool.kind]
        if default is not Decision.ALLOW:
            return None
        cached = self._mode_allows.get(tool)
        if cached is None:
            # The permission granted does not depend on the arguments: "*" stands for any.
            signature = permission_signature(tool.name, "*")
            cached = RuleDecision(Decision.ALLOW, DecisionSource.MODE, reason, signature)
            if len(self._mode_allows) >= _DEFINITION_CACHE_LIMIT:
                self._mode_allows.clear()
            self._mode_allows[tool] = cached
        return cached

    def _allowed_by_name(self, tool: ToolDefinition, rules: ToolRules) -> RuleDecision | None:
        """The ALLOW of a rule naming the tool without a specifier, the same for any arguments
        (their key is "*", as for the mode's): ``None`` when every allow rule has a specifier."""
        cached = self._rule_allows.get(tool)
        if cached is None or cached[0] is not rules:  # rules kept alive: identity holds
            bare = next((rule for rule in rules.allow if rule.specifier is None), None)
            decided = None
            if bare is not None:
                decided = RuleDecision(
                    Decision.ALLOW,
                    DecisionSource.RULE,
                    f"rule {bare.text} allows any call of {tool.name}",
                    permission_signature(tool.name, "*"),
                    bare.text,
                )
            if len(self._rule_allows) >= _DEFINITION_CACHE_LIMIT:
                self._rule_allows.clear()
            cached = self._rule_allows[tool] = (rules, decided)
        return cached[1]

    def _mode_decision(
        self, tool: ToolDefinition, subject: Subject, ctx: ExecutionContext, signature: str
    ) -> RuleDecision:
        default, reason = _MODE_REASONS[self.mode, tool.kind]
        if default is Decision.ASK and self.approvals.is_approved(ctx.session_id, signature):
            return RuleDecision(
                Decision.ALLOW,
                DecisionSource.SESSION,
                f"approved for this session: {_shorten(subject.key)}",
                signature,
            )
        return RuleDecision(default, DecisionSource.MODE, reason, signature)

    # -- project approvals ---------------------------------------------------------------------

    def record_project_approval(
        self, tool: ToolDefinition, args: Mapping[str, Any], ctx: ExecutionContext
    ) -> str:
        """Append allow rules covering exactly this call to the project settings file and return
        them (comma-separated). ``ValueError`` when the call cannot be expressed as rules (an
        unreadable command, an output redirection, an argument beside the command, path or key
        that a rule cannot name) or touches a sensitive path: approve it for the session
        instead."""
        root = ctx.workspace_root or os.getcwd()
        subject = self._subject(tool, args, root)
        if self._guarded(tool, subject, root) is not None:
            raise ValueError(
                "a call touching a sensitive file or writing a protected one cannot be approved "
                "for the project"
            )
        ignored = ignored_arguments(tool)
        new_rules = exact_rules_for(tool, args, subject, ignored)  # never wider than the call
        # A rule stands for the key alone: a call whose session signature holds more than its
        # key has something no rule names.
        if call_signature(tool, args, subject, ignored) != permission_signature(
            tool.name, subject.key
        ):
            raise ValueError(f"a rule for {tool.name} cannot name every argument of this call")
        append_rules(root, "allow", new_rules)
        self._settings.forget(root)
        return ", ".join(new_rules)

    def may_read(self, tool: ToolDefinition, path: str, ctx: ExecutionContext) -> bool:
        """Whether ``read`` may show ``path`` outright: no deny or ask rule of ``read`` (nor of
        ``tool``'s names) covers it, and it is not sensitive. What search tools show of a file
        they found (SPEC §16): the rest they withhold."""
        root = ctx.workspace_root or os.getcwd()
        names = tuple(dict.fromkeys((tool.name, *tool.rule_names, *_READ_NAMES)))
        rules = self._rules_for_names(names, root)
        subject = Subject("paths", path, paths=(resolve_path(path, root),))
        decided = self._rule_decision(tool, rules, subject, root)
        return decided is None or decided.decision is Decision.ALLOW

    def sensitive_match(self, path: str, workspace_root: str) -> str | None:
        """The canonical form of ``path`` when it is sensitive, else None. For tools that must
        filter what they return (search results listing ``.env``, ...)."""
        resolved = resolve_path(path, workspace_root)
        return self._sensitive_path(Subject("paths", "", paths=(resolved,)), workspace_root)

    # -- helpers -------------------------------------------------------------------------------

    def _rules_for(self, name: str, root: str) -> ToolRules:
        own = self._own_rules.for_tool(name)
        project = self._settings.rules(root)
        if project is None:
            return own
        extra = project.for_tool(name)
        if extra is NO_RULES:
            return own
        if own is NO_RULES:
            return extra
        # The same objects until the file is reloaded: merge once, so the rules' identity (and the
        # path-decision memo keyed by it) holds from call to call.
        merged = self._merged_rules.get(name)
        if merged is None or merged[0] is not extra:
            if len(self._merged_rules) >= _CACHE_LIMIT:
                self._merged_rules.clear()
            merged = self._merged_rules[name] = (extra, own + extra)
        return merged[1]

    def _rules_for_names(self, names: tuple[str, ...], root: str) -> ToolRules:
        """The rules of every name in ``names`` (SPEC §5 ``rule_names``), merged."""
        parts = tuple(self._rules_for(name, root) for name in names)
        present = [part for part in parts if part is not NO_RULES]
        if not present:
            return NO_RULES
        if len(present) == 1:
            return present[0]
        merged = self._merged_names.get(names)
        if merged is None or any(a is not b for a, b in zip(merged[0], parts, strict=True)):
            if len(self._merged_names) >= _CACHE_LIMIT:
                self._merged_names.clear()
            combined = present[0]
            for part in present[1:]:
                combined = combined + part
            merged = self._merged_names[names] = (parts, combined)
        return merged[1]

    def _subject(self, tool: ToolDefinition, args: Mapping[str, Any], root: str) -> Subject:
        if "command" in args and self._tool_has_command(tool):
            command = args["command"]
            if not isinstance(command, str):
                return Subject("command", repr(command), invalid="the command is not a string")
            # (programs reached through links, and the git directories git would find, are
            # looked at now, on disk: the text analysis is cached)
            analysis = linked_programs(self._analysis(command), root)
            analysis = foreign_git_directories(analysis, root)
            paths = command_paths(analysis, root)
            if paths is None:
                return Subject(
                    "command", analysis.normalized, analysis, invalid="too many words to check"
                )
            declared = path_subject(tool, args, root)  # e.g. a ``cwd`` path argument
            extra = declared.paths if declared is not None else ()
            return Subject(
                "command", analysis.normalized, analysis, paths.paths + extra, found=paths
            )
        found = path_subject(tool, args, root)
        if found is not None:
            return found
        if tool.permission_key is not None:
            return key_subject(tool, args)
        return none_subject(args)

    def _signature(self, tool: ToolDefinition, args: Mapping[str, Any], subject: Subject) -> str:
        ignored = self._signing.get(tool)
        if ignored is None:
            ignored = ignored_arguments(tool)
            if len(self._signing) >= _DEFINITION_CACHE_LIMIT:
                self._signing.clear()
            self._signing[tool] = ignored
        return call_signature(tool, args, subject, ignored)

    def _tool_has_command(self, tool: ToolDefinition) -> bool:
        known = self._has_command.get(tool)
        if known is None:
            properties = tool.input_schema.get("properties")
            known = isinstance(properties, dict) and "command" in properties
            if len(self._has_command) >= _DEFINITION_CACHE_LIMIT:
                self._has_command.clear()
            self._has_command[tool] = known
        return known

    def _analysis(self, command: str) -> CommandAnalysis:
        cached = self._analyses.get(command)
        if cached is None:
            cached = analyze_command(command)
            if len(self._analyses) >= _CACHE_LIMIT:
                self._analyses.clear()
            self._analyses[command] = cached
        return cached

    def _regex(self, pattern: PathPattern, root: str, fold: bool) -> LinearRegex:
        key = (pattern.text, root if pattern.anchor == "root" else "", fold)
        compiled = self._regexes.get(key)
        if compiled is None:
            compiled = linear(pattern.regex(root), fold)
            if len(self._regexes) >= _CACHE_LIMIT:
                self._regexes.clear()
            self._regexes[key] = compiled
        return compiled

    def _path_matches(
        self, pattern: PathPattern, path: ResolvedPath, roots: _Roots, allow: bool
    ) -> bool:
        """Allow rules must match the canonical path exactly; deny/ask rules match either
        spelling, root-anchored ones the root as given or canonical, ignoring case where the
        file system does."""
        forms = (path.canonical,) if allow else path.forms
        fold = not allow and roots.folds()
        for root in roots.get(pattern, allow):
            regex = self._regex(pattern, root, fold)
            if any(regex.fullmatch(form) for form in forms):
                return True
        return False

    def _first_match(self, rules: tuple[Rule, ...], subject: Subject, root: str) -> Rule | None:
        roots = _Roots(root, self.config.case_insensitive)
        for rule in rules:
            if rule.specifier is None:
                return rule
            if subject.kind == "command" and subject.command is not None:
                if command_matches(rule, subject.command):
                    return rule
            elif subject.kind == "paths":
                if rule.path is not None and any(
                    self._path_matches(rule.path, p, roots, allow=False) for p in subject.paths
                ):
                    return rule
            elif subject.kind == "key" and not subject.invalid and key_matches(rule, subject.key):
                return rule
        return None

    def _allowed_by(self, rules: tuple[Rule, ...], subject: Subject, root: str) -> str | None:
        if not rules:
            return None
        bare = next((r for r in rules if r.specifier is None), None)
        if bare is not None:
            return bare.text
        if subject.invalid:
            return None
        if subject.kind == "command" and subject.command is not None:
            return command_allowed_by(rules, subject.command)
        if subject.kind == "paths":
            roots = _Roots(root, False)  # allow rules match the exact spelling
            used: list[str] = []
            for path in subject.paths:
                rule = next(
                    (
                        r
                        for r in rules
                        if r.path is not None and self._path_matches(r.path, path, roots, True)
                    ),
                    None,
                )
                if rule is None:
                    return None
                used.append(rule.text)
            return ", ".join(dict.fromkeys(used)) or None
        if subject.kind == "key":
            return next((r.text for r in rules if key_matches(r, subject.key)), None)
        return None

    def _guarded(self, tool: ToolDefinition, subject: Subject, root: str) -> tuple[str, str] | None:
        """Why the call is at least ASK whatever the rules and the mode say (the reason, and
        the path it names): it touches a sensitive path, or writes a protected one."""
        roots = _Roots(root, self.config.case_insensitive)  # probed once for both lists
        sensitive = self._sensitive_path(subject, root, roots)
        if sensitive is not None:
            return f"touches sensitive file {sensitive}", sensitive
        protected = self._protected_path(tool, subject, roots)
        if protected is not None:
            return protected
        return None

    def _sensitive_path(
        self, subject: Subject, root: str, roots: _Roots | None = None
    ) -> str | None:
        if subject.invalid == "too many words to check":
            return "(a command with too many words to check)"
        if not subject.paths and not subject.unplaced:
            return None
        if roots is None:
            roots = _Roots(root, self.config.case_insensitive)
        found = self._sensitive.match(subject.paths, roots, self._regexes)
        if found is None and subject.unplaced:
            word = self._sensitive.may_match_below(subject.unplaced, roots.folds())
            if word is not None:
                found = f"{word} (in a directory known only at run time)"
        return found

    def _protected_path(
        self, tool: ToolDefinition, subject: Subject, roots: _Roots
    ) -> tuple[str, str] | None:
        """A protected path the call creates, writes, moves, deletes or changes the mode of:
        any path of a writer tool, a command's words in writing positions. A command writing
        where only run time knows counts too (it may be one)."""
        if subject.kind == "paths":
            written = subject.paths if tool.kind is ToolKind.WRITE else ()
        elif subject.kind == "command":
            if subject.blind_writes:
                word = subject.blind_writes[0]
                return (
                    f"writes `{word}`, a path known only when the command runs, which may be a "
                    "protected one (settings, git hooks or config)",
                    word,
                )
            written = subject.writes
        else:
            return None
        if not written:
            return None
        found = self._protected.match(written, roots, self._regexes)
        if found is None:
            # a link to a ``.git`` entry (a ``gitdir:`` file, or the directory): git reads its
            # configuration through what is written there
            found = self._protected.match(_behind_git_entries(written), roots, self._regexes)
        if found is None:
            found = self._protected.hard_linked(written, roots, self._regexes)
        if found is None and subject.trees:
            found = self._protected.held_by(subject.trees, roots)
        if found is None:
            found = _read_by_git(written, self._git_reads_of(roots.get_root(True)[0], written))
        if found is None:
            return None
        return (
            f"writes protected path {found} (a change there alters what runs later or what "
            "policy allows)",
            found,
        )

    def _git_reads_of(self, root: str, paths: tuple[ResolvedPath, ...]) -> tuple[GitReads, ...]:
        """What git reads for the workspace's repository, then for the repository each of
        ``paths`` lies in (the same, or one nested in it with a configuration of its own). A
        hooks directory or an included file may lie anywhere, outside the repository too."""
        get = self._git_reads.get
        home = self._home
        workspace = get(root, home)
        if len(paths) == 1:  # the usual write: no generator (this runs on every write decision)
            return (workspace, get(_parent(paths[0].canonical), home))
        return (workspace, *[get(_parent(p.canonical), home) for p in paths])


def _parent(canonical: str) -> str:
    """The directory of an absolute, normalized path (``os.path.dirname`` at a fifth of the
    cost)."""
    return canonical.rpartition("/")[0] or "/"


def _read_by_git(written: tuple[ResolvedPath, ...], reads: tuple[GitReads, ...]) -> str | None:
    """The first written path that the configuration of the workspace's repository, or of its
    own, includes or names as a hook or hooks directory (with why), or None."""
    workspace = reads[0]
    for path, own in zip(written, reads[1:], strict=True):
        for read in (workspace, own) if own is not workspace else (workspace,):
            if read is NOTHING:
                continue
            for form in (path.canonical, path.lexical):
                why = _read_as(form, read)
                if why is not None:
                    return f"{form} ({why})"
    return None


def _read_as(form: str, read: GitReads) -> str | None:
    if form in read.included:
        return "a file git's configuration includes"
    if form in read.hook_files:
        return "a hook in git's hooks directory, core.hooksPath"
    for directory in read.hook_directories:
        if form == directory or form.startswith(directory.rstrip("/") + "/"):
            return "in git's hooks directory, core.hooksPath"
    return None


class _Guard:
    """A list of path patterns (the sensitive or the protected ones), compiled for matching."""

    __slots__ = ("_anchored", "_anywhere", "_anywhere_folded", "_rooted", "_tails", "patterns")

    def __init__(self, patterns: tuple[PathPattern, ...]) -> None:
        self.patterns = patterns
        self._rooted = any(p.anchor == "root" for p in patterns)
        self._anchored = any(p.anchor != "anywhere" for p in patterns)
        self._anywhere = _search_regex(patterns)
        self._anywhere_folded = _search_regex(patterns, fold=True)
        # Per fold: the tails of every pattern, for paths below an unknown directory.
        self._tails: dict[bool, LinearRegex] = {}

    def match(
        self,
        paths: tuple[ResolvedPath, ...],
        given: _Roots,
        cache: dict[tuple[str, str, bool], LinearRegex],
    ) -> str | None:
        """The canonical form of the first path a pattern matches (either form of it)."""
        if not paths:
            return None
        fold = given.folds()
        anywhere = self._anywhere_folded if fold else self._anywhere
        anchored: list[LinearRegex] = []
        if self._anchored:
            roots = ("",) + (given.get_root() if self._rooted else ())
            anchored = [self._anchored_regex(r, fold, cache) for r in roots]
        for path in paths:
            for form in path.forms:
                if anywhere.search(form) or any(regex.fullmatch(form) for regex in anchored):
                    return path.canonical
        return None

    def held_by(self, trees: tuple[ResolvedPath, ...], given: _Roots) -> str | None:
        """A path a pattern names that exists right inside one of the directories ``trees``
        (or inside the workspace root, when one of them holds it): ``rm -r sub`` with
        ``sub/.git/hooks``, ``find . -delete``. Only the patterns' leading literal segments are
        looked up, one level deep: a cheap check, not a walk of the tree."""
        root = given.get_root(True)[0]
        for tree in trees:
            places = [tree.canonical]
            if root == tree.canonical or root.startswith(tree.canonical.rstrip("/") + "/"):
                places.append(root)
            for place in places:
                for pattern in self.patterns:
                    inside = _leading_literals(pattern)
                    if inside:
                        candidate = os.path.join(place, *inside)
                        if os.path.lexists(candidate):
                            return candidate
        return None

    def hard_linked(
        self,
        written: tuple[ResolvedPath, ...],
        given: _Roots,
        cache: dict[tuple[str, str, bool], LinearRegex],
    ) -> str | None:
        """A path a pattern names that is the same file as one of ``written`` under another
        name (a hard link: writing one in place writes the other). Looked for where such files
        usually are: what the patterns' leading literal segments name (one level into a
        directory) in the written file's directory, each directory above it up to the
        workspace root, and the root."""
        root = given.get_root(True)[0]
        for path in written:
            try:
                info = os.stat(path.canonical)
            except (OSError, ValueError):
                continue
            if not stat.S_ISREG(info.st_mode) or info.st_nlink < 2:
                continue
            for place in _directories_up_to(os.path.dirname(path.canonical), root):
                for pattern in self.patterns:
                    inside = _leading_literals(pattern)
                    if not inside:
                        continue
                    for other in _same_files(os.path.join(place, *inside), info):
                        if other == path.canonical:
                            continue
                        if self.match((ResolvedPath(other, other, other),), given, cache):
                            return f"{other} (through the hard link {path.canonical})"
        return None

    def may_match_below(self, words: tuple[str, ...], fold: bool) -> str | None:
        """The first relative word that, below a directory not known in advance, may be a
        path a pattern matches (``paths.globs.tail_regex``)."""
        regex = self._tails.get(fold)
        if regex is None:
            bodies = [t for t in map(tail_regex, self.patterns) if t is not None]
            body = "|".join(f"(?:{b})" for b in bodies) or NEVER
            regex = linear(body, fold)
            self._tails[fold] = regex
        return next((w for w in words if regex.fullmatch(w)), None)

    def _anchored_regex(
        self, root: str, fold: bool, cache: dict[tuple[str, str, bool], LinearRegex]
    ) -> LinearRegex:
        """The anchored patterns as one full-match alternation: the root-anchored ones for
        ``root``, the absolute ones for ``""``."""
        key = (f"\x00guard{id(self)}", root, fold)
        compiled = cache.get(key)
        if compiled is None:
            wanted = "root" if root else "absolute"
            patterns = [p for p in self.patterns if p.anchor == wanted]
            body = "|".join(f"(?:{p.regex(root)})" for p in patterns) or NEVER
            compiled = linear(body, fold)
            if len(cache) >= _CACHE_LIMIT:
                cache.clear()
            cache[key] = compiled
        return compiled


_MAX_SCANNED = 256  # entries of one directory looked at for a hard link's other name


def _directories_up_to(directory: str, root: str) -> list[str]:
    """``directory`` and each one above it up to ``root`` when it is inside; else it and the
    root."""
    found = [directory]
    prefix = root.rstrip("/") + "/"
    while directory != root and directory.startswith(prefix):
        directory = os.path.dirname(directory)
        found.append(directory)
    if root not in found:
        found.append(root)
    return found


def _same_files(candidate: str, info: os.stat_result) -> list[str]:
    """``candidate`` when it is the file ``info`` describes, or the entries right inside it
    that are (a hook in ``.git/hooks``, a settings file in ``.claude``)."""
    try:
        own = os.lstat(candidate)
    except (OSError, ValueError):
        return []
    if stat.S_ISREG(own.st_mode):
        return [candidate] if (own.st_dev, own.st_ino) == (info.st_dev, info.st_ino) else []
    if not stat.S_ISDIR(own.st_mode):
        return []
    found: list[str] = []
    try:
        with os.scandir(candidate) as entries:
            for count, entry in enumerate(entries):
                if count >= _MAX_SCANNED:
                    break
                if entry.inode() == info.st_ino and entry.is_file(follow_symlinks=False):
                    if entry.stat(follow_symlinks=False).st_dev == info.st_dev:
                        found.append(entry.path)
    except OSError:
        return found
    return found


def _hard_linked_write(tool: ToolDefinition, subject: Subject) -> bool:
    """A writer's path that is a file with other names: what they are is looked up on disk for
    each call (not remembered with the text matching)."""
    if tool.kind is not ToolKind.WRITE:
        return False
    for path in subject.paths:
        if regular_file_links(path.canonical) > 1:
            return True
    return False


def _behind_git_entries(written: tuple[ResolvedPath, ...]) -> tuple[ResolvedPath, ...]:
    """For each written path that resolves to a ``.git`` entry under another name (a symlink
    to it), the configuration git reads through that entry."""
    out: list[ResolvedPath] = []
    for path in written:
        if os.path.basename(path.canonical) == ".git":
            config = path.canonical + "/config"
            out.append(ResolvedPath(path.given, config, config))
    return tuple(out)


def _leading_literals(pattern: PathPattern) -> tuple[str, ...]:
    """The plain segments a pattern that may match directly inside a directory starts with
    (``**/.git/hooks/**`` → ``.git``, ``hooks``); ``()`` for an anchored one or a glob."""
    if pattern.anchor != "anywhere":
        return ()
    literals: list[str] = []
    for segment in pattern.segments:
        if segment == "**" or any(c in segment for c in "*?[\\"):
            break
        literals.append(segment)
    return tuple(literals)


def _search_regex(patterns: tuple[PathPattern, ...], fold: bool = False) -> LinearRegex:
    """Patterns that match at any depth, as one search: a run of whole components."""
    bodies = [f"(?:{p.body})" for p in patterns if p.anchor == "anywhere" and p.body]
    if not bodies:
        return linear(NEVER)
    # (``\n?$``: a name may end in a newline; ``a.pem\n`` is as sensitive as ``a.pem``)
    return linear("/(?:" + "|".join(bodies) + ")(?:/|\n?$)", fold)


class _Roots:
    """The workspace root as given and canonical, and whether its file system ignores case,
    each computed at most once per decision."""

    __slots__ = ("_canonical", "_fold", "given")

    def __init__(self, given: str, fold: bool | None) -> None:
        self.given = given
        self._canonical: str | None = None
        self._fold = fold  # None: probe the root's file system when first asked

    def folds(self) -> bool:
        if self._fold is None:
            self._fold = folds_case(self.get_root(True)[0])
        return self._fold

    def get(self, pattern: PathPattern, allow: bool) -> tuple[str, ...]:
        if pattern.anchor != "root":
            return ("",)
        return self.get_root(allow)

    def get_root(self, allow: bool = False) -> tuple[str, ...]:
        if self._canonical is None:
            try:
                self._canonical = canonical_path(self.given)
            except (OSError, ValueError):
                self._canonical = os.path.normpath(self.given)
        if allow or self._canonical == self.given:
            return (self._canonical,)
        return (self._canonical, os.path.normpath(self.given))


def _unreadable(subject: Subject) -> str:
    if subject.invalid:
        return subject.invalid
    analysis = subject.command
    if analysis is None:
        return ""
    if analysis.error is not None:
        return f"the command cannot be parsed ({analysis.error})"
    why = analysis.why_unknown
    if why:
        return f"what the command runs cannot be known before it runs: {why}"
    return ""


_READ_NAMES: Final[tuple[str, ...]] = ("read", "Read")  # what governs reading a file (SPEC §5)
_DEFAULT_READ_CHECK: list[PermissionResolver] = []


def default_read_check(path: str, workspace_root: str) -> bool:
    """``RunContext.may_read`` outside an executor: the default sensitive list only."""
    if not _DEFAULT_READ_CHECK:
        _DEFAULT_READ_CHECK.append(
            PermissionResolver(PermissionConfig(), PermissionMode.DEFAULT, ApprovalStore())
        )
    resolver = _DEFAULT_READ_CHECK[0]
    root = workspace_root
    subject = Subject("paths", path, paths=(resolve_path(path, root),))
    return resolver._sensitive_path(subject, root) is None


_VERBS = {Decision.ALLOW: "allows", Decision.ASK: "asks before", Decision.DENY: "does not allow"}
_MODE_REASONS: dict[tuple[PermissionMode, ToolKind], tuple[Decision, str]] = {
    (mode, kind): (
        defaults[kind],
        f"{mode.name} mode {_VERBS[defaults[kind]]} {kind.name} tools",
    )
    for mode, defaults in MODE_DEFAULTS.items()
    for kind in ToolKind
}


def _never_asked(decided: RuleDecision) -> RuleDecision:
    """DONT_ASK mode: a decision that would ask is refused instead (no prompt is ever shown)."""
    return msgspec.structs.replace(
        decided,
        decision=Decision.DENY,
        reason=f"DONT_ASK mode refuses what would need approval ({decided.reason})",
    )


def _shorten(key: str, limit: int = 200) -> str:
    text = key if len(key) <= limit else key[: limit - 1] + "…"
    return f"`{text}`"
