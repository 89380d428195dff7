"""``fastgate call TOOL 'JSON'``: one call through the whole pipeline with the built-in tools,
and the story of how it was decided: each stage it passed, in order.

Exit status: 0 ran ok (with ``--dry-run``: would run), 1 ran and failed, 2 bad usage or
configuration, 3 refused before running, 4 would ask (``--dry-run``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import importlib
import json
import os
import sys
import warnings
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec

from fastgate.permissions import discovery

OK, FAILED, USAGE, REFUSED, WOULD_ASK = 0, 1, 2, 3, 4
SESSION = "fastgate-call"
_SHOWN_CONTENT = 8_000  # characters of the result shown on a terminal (--json has it all)


class UsageError(Exception):
    """Bad usage or configuration: exit status 2, the message on stderr."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("tool", help="the tool's name (read, grep, bash, ...)")
    parser.add_argument("arguments", help="its arguments as one JSON object")
    parser.add_argument("--workspace", metavar="DIR", help="default: the current directory")
    parser.add_argument(
        "--mode",
        help="default, accept_edits, plan, yolo or dont_ask, or Claude Code's names "
        "(acceptEdits, bypassPermissions, dontAsk); default: the settings' defaultMode",
    )
    parser.add_argument(
        "--settings",
        action="append",
        default=[],
        metavar="FILE",
        help="a settings file in Claude Code's shape (repeatable, merged in order)",
    )
    for kind in ("allow", "ask", "deny"):
        parser.add_argument(
            f"--{kind}", action="append", default=[], metavar="RULE", help=f"an extra {kind} rule"
        )
    parser.add_argument(
        "--mcp-config",
        metavar="FILE",
        help="MCP servers to add ({mcpServers}; default: the workspace's .mcp.json)",
    )
    parser.add_argument(
        "--no-discover",
        action="store_true",
        help="read only the --settings given, not the workspace's and the user's settings files",
    )
    parser.add_argument(
        "--approve",
        choices=["prompt", "once", "session", "never"],
        help="how an ask is answered (default: prompt on a terminal, else never)",
    )
    parser.add_argument(
        "--sandbox",
        choices=["off", "workspace-write", "read-only"],
        help="how commands (bash) are confined: off (unconfined), workspace-write (the "
        "default where the host can confine them) or read-only",
    )
    parser.add_argument(
        "--allow-domain",
        action="append",
        default=[],
        metavar="D",
        help="a host commands may reach through fastgate's proxy (repeatable; *.x for any "
        "subdomain of x); without it, no network",
    )
    parser.add_argument("--dry-run", action="store_true", help="decide, but do not invoke")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run_call(args: argparse.Namespace) -> int:
    from fastgate.runtime import run

    try:
        return run(_call(args))
    except UsageError as exc:
        print(f"fastgate call: {exc}", file=sys.stderr)
        return USAGE


# -- setting up -------------------------------------------------------------------------------


def _not_json(constant: str) -> Any:
    """``NaN``, ``Infinity`` and ``-Infinity``, which Python's reader takes and JSON has not."""
    raise ValueError(f"{constant} is not a JSON value")


class _Setup:
    """Everything the call needs, checked before anything runs."""

    def __init__(self, args: argparse.Namespace) -> None:
        from fastgate import Hooks, PermissionConfig, PermissionMode
        from fastgate.permissions import config

        try:
            self.arguments = json.loads(args.arguments, parse_constant=_not_json)
        except (ValueError, RecursionError) as exc:  # RecursionError: nested too deeply
            raise UsageError(f"the arguments are not valid JSON: {exc}") from None
        workspace = Path(args.workspace or os.getcwd())
        if not workspace.is_dir():
            raise UsageError(f"the workspace {workspace} is not a directory")
        self.workspace = str(workspace.resolve())
        discovered = [] if args.no_discover else discovery.settings_files(self.workspace)
        self.settings_files: list[str] = [*discovered, *args.settings]
        self.config_warnings: list[str] = []
        try:
            with _config_warnings(self.config_warnings):
                self.settings = PermissionConfig.load(
                    *self.settings_files, workspace=self.workspace
                )
                self.hooks = Hooks.load(*self.settings_files, workspace=self.workspace)
            self.extra = PermissionConfig(
                allow=args.allow, ask=args.ask, deny=args.deny, sensitive=()
            )
            self.config = _merged(self.settings, self.extra)
        except (OSError, ValueError) as exc:
            raise UsageError(str(exc)) from None
        try:
            if args.mode is not None:
                self.mode = PermissionMode.parse(args.mode)
            else:
                self.mode = self.settings.default_mode or PermissionMode.DEFAULT
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        if self.mode is PermissionMode.YOLO and self.settings.bypass_disabled:
            raise UsageError(config.BYPASS_DISABLED)
        self.shell = _shell(args.sandbox, args.allow_domain, self.workspace)
        self.approve = args.approve or ("prompt" if sys.stdin.isatty() else "never")
        self.dry_run: bool = args.dry_run
        self.mcp_config: str | None = args.mcp_config
        self.disabled_servers: frozenset[str] = frozenset()
        if self.mcp_config is None and not args.no_discover:
            self.mcp_config = discovery.mcp_config_file(self.workspace)
            self.disabled_servers = discovery.disabled_mcp_servers(self.settings_files)

    def source_of(self, rule: str) -> str:
        """Where a matched rule came from, as the trail names it."""
        source = self._option_of(rule) or self.settings.source_of(rule)
        if source is not None:
            return source
        from fastgate.permissions import settings_path

        return settings_path(self.workspace)  # the project's own file (approved for the project)

    def _option_of(self, rule: str) -> str | None:
        for kind in ("allow", "ask", "deny"):
            if rule in getattr(self.extra, kind):
                return f"--{kind}"
        return None

    def warnings(self, registry: Any) -> list[str]:
        """Rules that can never match: the settings files' (each naming its file, and what
        the files hold that has no effect), the other loaders' (hooks, MCP servers), then the
        command line's (naming the option)."""
        from fastgate.permissions.dead_rules import dead_rule_warnings

        # (the loaders issued some of the settings' own warnings already: each is said once)
        said = [
            *self.settings.warnings(registry),
            *self.config_warnings,
            *dead_rule_warnings(self.extra.all_rules, self._option_of, registry),
        ]
        return list(dict.fromkeys(said))


@contextlib.contextmanager
def _config_warnings(into: list[str]) -> Iterator[None]:
    """Collect the loaders' ``FastgateConfigWarning``s (printed with the rest on stderr) and let
    any other warning through as usual."""
    from fastgate import FastgateConfigWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for warning in caught:
        if issubclass(warning.category, FastgateConfigWarning):
            into.append(str(warning.message))
        else:
            warnings.warn_explicit(
                warning.message, warning.category, warning.filename, warning.lineno
            )


def _shell(mode: str | None, domains: list[str], workspace: str) -> Any:
    """The shell ``--sandbox`` and ``--allow-domain`` ask for (``None``: the built-ins'
    default, confined where the host can)."""
    if mode is None and not domains:
        return None
    from fastgate.builtin import LocalShell

    if mode == "off":
        if domains:
            raise UsageError("--allow-domain needs the sandbox (not --sandbox off)")
        return LocalShell()
    from fastgate.sandbox import NetworkPolicy, SandboxedShell, SandboxPolicy

    try:
        network = NetworkPolicy(allow=domains) if domains else None
    except ValueError as exc:
        raise UsageError(f"--allow-domain: {exc}") from None
    read_only = (workspace,) if mode == "read-only" else ()
    return SandboxedShell(SandboxPolicy(read_only=read_only, network=network))


def _merged(settings: Any, extra: Any) -> Any:
    """The settings' parsed rules (each keeping its project) plus the command line's."""
    from fastgate import PermissionConfig

    if not (extra.allow or extra.ask or extra.deny):
        return settings
    kinds: dict[str, list[Any]] = {"allow": [], "ask": [], "deny": []}
    for config in (settings, extra):
        for rules in config.rules.by_tool.values():
            for kind in kinds:
                kinds[kind].extend(getattr(rules, kind))
    return PermissionConfig(
        allow=kinds["allow"],
        ask=kinds["ask"],
        deny=kinds["deny"],
        sensitive=settings.sensitive,
        additional_dirs=settings.additional_dirs,
        case_insensitive=settings.case_insensitive,
        default_mode=settings.default_mode,
        bypass_disabled=settings.bypass_disabled,
    )


def _registry(setup: _Setup) -> Any:
    from fastgate import ToolRegistry

    try:
        from fastgate.builtin import register_builtins
    except ImportError as exc:
        raise UsageError(str(exc)) from None
    registry = ToolRegistry()
    register_builtins(registry)
    return registry


def _not_invoked(tool: Any) -> Any:
    """``tool`` whose body does nothing: ``--dry-run`` goes through every stage but the run."""

    async def dry(args: Any, ctx: Any) -> str:
        return "(dry run: not invoked)"

    return dataclasses.replace(tool, execute=dry, output=type(tool.output)())


def _server_named_by(tool: str) -> str:
    """The server an MCP tool's name names (``mcp__<server>__<tool>``; a server's name has no
    ``__``), or ``""`` for a name that names none."""
    if not tool.startswith("mcp__"):
        return ""
    server, separator, _ = tool[5:].partition("__")
    return server if separator else ""


async def _with_mcp(
    setup: _Setup,
    registry: Any,
    work: Callable[[], Awaitable[dict[str, Any]]],
    only: str | None = None,
) -> dict[str, Any]:
    """``work`` with the config's MCP servers started (with ``only``, that server alone)."""
    if setup.mcp_config is None:
        return await work()
    try:  # by name: the bridge is an optional capability this module does not depend on
        mcp = importlib.import_module("fastgate.mcp")
    except ImportError as exc:
        raise UsageError(
            f"--mcp-config needs the MCP bridge (fastgate.mcp, the 'mcp' extra), which is not "
            f"available here: {exc}"
        ) from None
    try:
        with _config_warnings(setup.config_warnings):
            servers = mcp.load_mcp_config(setup.mcp_config)
    except (OSError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    servers = [server for server in servers if server.name not in setup.disabled_servers]
    if only is not None:
        servers = [server for server in servers if server.name == only]
    bridge = mcp.MCPBridge(registry, servers)
    try:
        await bridge.start()
    except mcp.MCPStartupError as exc:
        await bridge.aclose()
        raise UsageError(str(exc)) from None
    try:
        return await work()
    finally:
        await bridge.aclose()


# -- the call ---------------------------------------------------------------------------------


async def _call(args: argparse.Namespace) -> int:
    setup = _Setup(args)
    registry = _registry(setup)
    if args.mcp_config is None and registry.resolve(args.tool) is not None:
        # A built-in answers: the workspace's .mcp.json is not started (its servers are
        # commands that run as the user, unconfined; a read must not run them).
        setup.mcp_config = None
    # Only the server the call names is started: the others are commands the call has no use
    # for (a repository's .mcp.json may list one that runs anything).
    only = _server_named_by(args.tool)
    report = await _with_mcp(setup, registry, lambda: _run(setup, registry, args.tool), only)
    if args.json:
        sys.stdout.buffer.write(msgspec.json.encode(report) + b"\n")
    else:
        _print_report(report, args)
    return int(report["exit_status"])


async def _run(setup: _Setup, registry: Any, name: str) -> dict[str, Any]:
    """The call and its report, once every tool is registered (an MCP server's too)."""
    from fastgate import (
        ConcurrencyScheduler,
        ExecutionContext,
        FileLockManager,
        SchedulerLimits,
        ToolExecutor,
        ToolRegistry,
    )

    warnings = setup.warnings(registry)  # the merged config no longer knows the files
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if setup.dry_run:  # every tool, the servers' included, with a body that does nothing
        dry = ToolRegistry()
        for tool in registry.definitions():
            dry.register(_not_invoked(tool))
        registry = dry
    executor = ToolExecutor(
        registry,
        permissions=setup.config,
        mode=setup.mode,
        hooks=setup.hooks,
        scheduler=ConcurrencyScheduler(SchedulerLimits()),
        locks=FileLockManager(),
        context_defaults={
            "workspace_root": setup.workspace,
            "session_id": SESSION,
            **({"shell": setup.shell} if setup.shell is not None else {}),
        },
    )
    recorder = _Recorder()
    executor.set_tracer(recorder)  # the pipeline's own account of each stage, and the timings
    asked: list[Any] = []
    context = ExecutionContext(approver=_approver(setup, asked), elicitor=_elicitor(setup))
    try:
        result = await executor.execute(name, setup.arguments, context)
    finally:
        executor.dispose()
    assert recorder.trace is not None  # the tracer hears every call's end
    return _report(setup, registry, name, result, recorder.trace, asked, warnings)


class _Recorder:
    """A tracer (``fastgate.pipeline.tracing``) that keeps the trace of the one call."""

    def __init__(self) -> None:
        self.trace: Any = None

    def call_started(self, name: str, ctx: Any) -> None:
        return None

    def call_ended(self, token: Any, result: Any, trace: Any) -> None:
        self.trace = trace


def _approver(setup: _Setup, asked: list[Any]) -> Any:
    from fastgate import ApprovalResponse

    async def approve(request: Any) -> ApprovalResponse:
        asked.append(request)
        if setup.dry_run:
            return ApprovalResponse(False, feedback="dry run: this call would ask for approval")
        if setup.approve == "once":
            return ApprovalResponse(True, scope="once")
        if setup.approve == "session":
            return ApprovalResponse(True, scope="session")
        if setup.approve == "never":
            return ApprovalResponse(False, feedback="refused: --approve never")
        return await asyncio.to_thread(_prompt, request)

    return approve


def _elicitor(setup: _Setup) -> Any:
    """What answers an MCP server's questions during the call: the terminal (stdin, with the
    questions on stderr) when there is one to ask, else a decline."""
    from fastgate import ElicitationResponse

    terminal = sys.stdin.isatty()
    if setup.approve != "never" and terminal:
        from fastgate.cli.terminal_elicitor import TerminalElicitor

        return TerminalElicitor(input=sys.stdin.fileno(), output=sys.stderr.fileno())
    why = "--approve never" if terminal else "no terminal to ask on"

    async def decline(request: Any) -> Any:
        print(f"{request.server} asked a question: declined ({why})", file=sys.stderr)
        return ElicitationResponse("decline")

    return decline


def _prompt(request: Any) -> Any:
    from fastgate import ApprovalResponse

    print(
        f"\n{request.tool_name} asks for approval: {request.reason}\n"
        f"  arguments: {json.dumps(_plain(request.args))}",
        file=sys.stderr,
    )
    # The question goes to stderr, so stdout stays the report (one object with --json).
    sys.stderr.write("Allow? [y]es once / [s]ession / [N]o: ")
    sys.stderr.flush()
    answer = sys.stdin.readline().strip().lower()
    if answer in ("y", "yes"):
        return ApprovalResponse(True, scope="once")
    if answer in ("s", "session"):
        return ApprovalResponse(True, scope="session")
    return ApprovalResponse(False, feedback="refused at the prompt")


# -- the report -------------------------------------------------------------------------------


def _report(
    setup: _Setup,
    registry: Any,
    name: str,
    result: Any,
    trace: Any,
    asked: list[Any],
    warnings: list[str],
) -> dict[str, Any]:
    error = result.error
    trail = _trail(setup, registry.resolve(name), name, error, trace, asked)
    decision = _decision(setup, trace, error)
    ran = trace.run_began is not None and not setup.dry_run
    if setup.dry_run:
        status = {"allow": OK, "ask": WOULD_ASK}.get(decision["decision"], REFUSED)
    elif ran:
        status = OK if result.ok else FAILED
    else:
        status = REFUSED
    durable = result.durable()
    return {
        "tool": name,
        "arguments": setup.arguments,
        "workspace": setup.workspace,
        "mode": setup.mode.value,
        "dry_run": setup.dry_run,
        "decision": decision,
        "trail": trail,
        "stages": [
            {"stage": record.name, "outcome": str(record.outcome), "ms": record.ms}
            for record in trace.stages
        ],
        "result": {
            "ok": durable.ok,
            "content": None if setup.dry_run else durable.content,
            "error": None if durable.error is None else msgspec.to_builtins(durable.error),
            "meta": msgspec.to_builtins(durable.meta),
            "ran": ran,
        },
        "timings": {
            "admission_wait_ms": trace.admission_wait_ms,
            "run_ms": trace.run_ms if ran else None,
            "total_ms": result.meta.duration_ms,
        },
        "warnings": warnings,
        "exit_status": status,
    }


def _trail(
    setup: _Setup, tool: Any, name: str, error: Any, trace: Any, asked: list[Any]
) -> list[dict[str, Any]]:
    """The trail: the settings read, then a line (or a few) per stage the pipeline recorded, in
    its order; the stage a refusal ended in says why."""
    from fastgate.pipeline import STAGES

    trail: list[dict[str, Any]] = []

    def step(stage: str, outcome: str, **extra: Any) -> None:
        trail.append({"stage": stage, "outcome": outcome, **extra})

    read = [*setup.settings_files, *([setup.mcp_config] if setup.mcp_config else [])]
    step("settings", ", ".join(read) if read else "no settings file read", files=read)
    last = trace.last
    for record in trace.stages:
        refused = record is last and error is not None  # the call ended here, without a result
        if record.name == "lookup":
            if refused:
                step("lookup", error.message if tool else f"no tool named {name}", ok=False)
            else:
                step("lookup", f"{tool.name} ({tool.kind.name}, {tool.classify_parallelism(None)})")
        elif record.name == "validation":
            if refused:
                step("validation", error.message, ok=False)
            else:
                step("validation", "ok")
        elif record.name == "worktree":
            for label, resolved in _resolved(tool, setup.arguments, setup.workspace):
                step(label, resolved)
            if refused:
                step("worktree", error.message, ok=False)
        elif record.name == "rules" and trace.rule is not None:
            _rule_steps(setup, tool, trace.rule, step)
        elif record.name == "hooks":
            if refused:  # the arguments a hook rewrote were refused
                step("hooks", f"rewrote the arguments: {error.message}", ok=False)
            elif trace.hooks_ran:
                step("hooks", f"{trace.hook_decision or 'no opinion'}: {trace.hook_reason or ''}")
            else:
                step("hooks", "none registered")
        elif record.name == "guards":
            guarded = trace.guard_reason
            step("guards", "none registered" if guarded is None else f"deny: {guarded}")
        elif record.name == "approval":
            _approval_step(setup, trace.approval, asked, step)
    if error is not None and last.name in ("merge", "guards"):
        # The policy stages a deny kept the call from: say so rather than what they would say.
        why = "denied above" if last.name == "merge" else "a guard denied"
        for stage in STAGES[STAGES.index(last.name) + 1 : STAGES.index("approval") + 1]:
            step(stage, f"not reached: {why}")
    return trail


def _rule_steps(setup: _Setup, tool: Any, rule: Any, step: Callable[..., None]) -> None:
    """The rule stage's words: the rule that matched (and its file), the mode, sensitive paths."""
    from fastgate.permissions import MODE_DEFAULTS

    matched = rule.matched_rule
    step(
        "rules",
        rule.reason if matched else f"no rule matched: {rule.reason}",
        decision=str(rule.decision),
        source=str(rule.source),
        rule=matched,
        rule_source=setup.source_of(matched) if matched else None,
    )
    default = MODE_DEFAULTS[setup.mode][tool.kind]
    mode_line = f"{setup.mode.value}: {default.value} for {tool.kind.name} tools"
    decider = _DECIDER.get(str(rule.source))
    if decider is not None:
        mode_line += f" (not used: {decider} decided)"
    step("mode", mode_line)
    step("sensitive", "yes: at least ask, in every mode" if rule.sensitive else "no")


def _approval_step(
    setup: _Setup, approval: Any, asked: list[Any], step: Callable[..., None]
) -> None:
    if approval is None:
        step("approval", "not needed")
    elif setup.dry_run:
        step("approval", "would ask" + (f" (dry run): {asked[0].reason}" if asked else ""))
    elif hasattr(approval, "approved"):
        verdict = "allow" if approval.approved else "deny"
        said = approval.scope if approval.approved else approval.feedback
        step("approval", f"{verdict} ({said})", decision=verdict)
    else:
        step("approval", f"no answer: {approval.message}", decision="deny")


def _decision(setup: _Setup, trace: Any, error: Any) -> dict[str, Any]:
    """The decision, its source, and the stage that decided."""
    if trace.merged is None:  # refused before any policy stage: no decision was made
        reason = None if error is None else error.message
        return {"decision": None, "source": None, "stage": trace.last.name, "reason": reason}
    decision, source, reason = trace.merged
    matched = trace.rule.matched_rule
    out: dict[str, Any] = {
        "decision": str(decision),
        "source": str(source),
        "stage": _DECIDING_STAGE.get(str(source), "rules"),
        "reason": reason,
        "rule": matched,
        "rule_source": setup.source_of(matched) if matched else None,
    }
    if trace.guard_reason is not None:
        out.update(decision="deny", source="guard", stage="guards", reason=trace.guard_reason)
    approval = trace.approval
    if approval is not None and not setup.dry_run:
        if hasattr(approval, "approved"):
            verdict = "allow" if approval.approved else "deny"
            said = approval.scope if approval.approved else approval.feedback
        else:
            verdict, said = "deny", approval.message
        out.update(decision=verdict, source="user", stage="approval", reason=said)
    return out


# What decided in the mode's place, by the rule decision's source.
_DECIDER = {"rule": "a rule", "session": "a session approval"}

_DECIDING_STAGE = {
    "mode": "mode",
    "session": "session approvals",
    "sensitive": "sensitive",
    "hook": "hooks",
}


def _resolved(tool: Any, arguments: Any, workspace: str) -> list[tuple[str, str]]:
    """The paths the call names (resolved as the pipeline resolves them) or its commands."""
    from fastgate.paths import canonical_path

    if not isinstance(arguments, dict):
        return []
    out: list[tuple[str, str]] = []
    given = [(n, arguments[n]) for n in tool.path_args if isinstance(arguments.get(n), str)]
    if tool.paths is not None:
        try:
            given += [("path", p) for p in tool.paths(arguments)]
        except Exception:
            pass  # the pipeline reports a malformed argument itself
    for argument, value in given:
        absolute = os.path.normpath(os.path.join(workspace, value))
        try:
            real = canonical_path(absolute)
        except (OSError, ValueError):
            real = absolute
        shown = value if real == value else f"{value} -> {real}"
        out.append(("path", f"{argument}: {shown}"))
    command = arguments.get("command")
    if isinstance(command, str):
        from fastgate.permissions.commands import analyze_command

        analysis = analyze_command(command)
        if analysis.error is not None:
            out.append(("command", f"cannot be parsed: {analysis.error}"))
        for facts in analysis.commands:
            words = " ".join(word.raw for word in facts.forms[0]) if facts.forms else ""
            notes = [facts.why_unknown] if facts.unknown else []
            if not facts.allowable:
                notes.append(facts.why_not_allowable or "no allow rule can cover it")
            out.append(("command", f"`{words}`" + (f" ({'; '.join(notes)})" if notes else "")))
    return out


def _plain(value: Any) -> Any:
    """Frozen arguments as plain JSON values."""
    return msgspec.json.decode(msgspec.json.encode(value))


def _print_report(report: dict[str, Any], args: argparse.Namespace) -> None:
    out: list[str] = []
    out.append(f"fastgate call {report['tool']} {json.dumps(_plain(report['arguments']))}")
    out.append(f"  workspace {report['workspace']} · mode {report['mode']}")
    out.append("decision trail")
    width = max((len(s["stage"]) for s in report["trail"]), default=8)
    for step in report["trail"]:
        line = f"  {step['stage']:<{width}}  {step['outcome']}"
        if step.get("rule_source"):
            line += f"  [{step['rule_source']}]"
        out.append(line)
    decision = report["decision"]
    source = f", source {decision['source']}" if decision.get("source") else ""
    verdict = decision["decision"] or "refused"
    out.append(f"  {'decided by':<{width}}  {decision['stage']}: {verdict}{source}")
    result = report["result"]
    if report["dry_run"]:
        verdict = {OK: "would run", WOULD_ASK: "would ask", REFUSED: "refused"}
        out.append(f"result  dry run: {verdict.get(report['exit_status'], 'refused')}, not invoked")
        if result["error"] is not None and report["exit_status"] == REFUSED:
            out.append(_indented(result["error"]["message"]))
    elif result["ok"]:
        out.append("result  ok")
        out.append(_indented(_shown(result["content"])))
    else:
        error = result["error"]
        out.append(f"result  {error['code']}" + ("" if result["ran"] else " (not run)"))
        out.append(_indented(_shown(result["content"] or error["message"])))
    timings = report["timings"]
    parts = []
    if timings["admission_wait_ms"] is not None:
        parts.append(f"admission wait {timings['admission_wait_ms']:.2f} ms")
    if timings["run_ms"] is not None:
        parts.append(f"run {timings['run_ms']:.2f} ms")
    parts.append(f"total {timings['total_ms']:.2f} ms")
    out.append("timings  " + " · ".join(parts))
    print("\n".join(out))


def _shown(content: Any) -> str:
    text = content if isinstance(content, str) else json.dumps(_plain(content), indent=2)
    if len(text) > _SHOWN_CONTENT:
        cut = len(text) - _SHOWN_CONTENT
        text = text[:_SHOWN_CONTENT] + f"\n[... {cut:,} more characters: see --json]"
    return text


def _indented(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines()) or "    (empty)"
