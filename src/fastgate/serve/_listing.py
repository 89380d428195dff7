"""``tools/list`` for one caller: only what policy could let that caller run.

A tool is left out when a deny rule names it outright (no specifier, or ``*``, on its name or
one of its rule names such as ``mcp__<server>``), or when the caller's mode refuses its kind and
no allow rule (nor, outside ``dont_ask``, an ask rule) names it. Hooks and guards decide per call
and cannot be known ahead: a tool they refuse is listed and refused when called. With code mode
on, only ``run_code`` can be called directly, so only it is listed. A refusal of an unknown name
suggests only tools of the caller's listing (``shown_names``). A call of a tool policy hides from
the caller (``runnable_tool`` finds none) is answered as a call of an unknown name, and only a
listed tool's schema (``listed_tool``) checks a call's ``Mcp-Param-*`` headers: a caller learns
nothing of a tool it is not shown.

Listings are computed per request, never cached across callers.
"""

from __future__ import annotations

import hashlib
from typing import Any, Final

import msgspec

from fastgate.model import Decision, PermissionMode
from fastgate.permissions import MODE_DEFAULTS, PermissionConfig
from fastgate.tools import ToolDefinition, ToolRegistry

RUN_CODE: Final = "run_code"
_ENCODER: Final = msgspec.json.Encoder(order="sorted")
_WHOLE_TOOL: Final = (None, "*", "**")


def runnable(tool: ToolDefinition, permissions: PermissionConfig, mode: PermissionMode) -> bool:
    """Whether policy could let a call of ``tool`` run in ``mode`` (for some arguments)."""
    rules = permissions.rules
    names = (tool.name, *tool.rule_names)
    allow = ask = False
    for name in names:
        found = rules.for_tool(name)
        if any(rule.specifier in _WHOLE_TOOL for rule in found.deny):
            return False
        allow = allow or bool(found.allow)
        ask = ask or bool(found.ask)
    if MODE_DEFAULTS[mode][tool.kind] is not Decision.DENY:
        return True
    return allow or (ask and mode is not PermissionMode.DONT_ASK)


def listing(
    registry: ToolRegistry,
    scope: str | None,
    permissions: PermissionConfig,
    mode: PermissionMode,
    *,
    object_outputs_only: bool,
) -> list[dict[str, Any]]:
    """The tools a caller is shown, as MCP ``Tool`` objects, by name."""
    visible = registry.visible(scope)
    code_mode = visible.get(RUN_CODE)
    if code_mode is not None:
        visible = {RUN_CODE: code_mode}
    out = []
    for name in sorted(visible):
        tool = visible[name]
        if not runnable(tool, permissions, mode):
            continue
        entry: dict[str, Any] = {
            "name": name,
            "description": tool.description,
            "inputSchema": tool.input_schema,
        }
        output = output_schema(tool)
        if output is not None and (not object_outputs_only or output.get("type") == "object"):
            entry["outputSchema"] = output
        out.append(entry)
    return out


def shown_names(
    registry: ToolRegistry, scope: str | None, permissions: PermissionConfig, mode: PermissionMode
) -> list[str]:
    """The names ``listing`` shows a caller (sorted): all a refusal may name to it."""
    visible = registry.visible(scope)
    if RUN_CODE in visible:
        visible = {RUN_CODE: visible[RUN_CODE]}
    return sorted(n for n, tool in visible.items() if runnable(tool, permissions, mode))


def runnable_tool(
    registry: ToolRegistry,
    scope: str | None,
    permissions: PermissionConfig,
    mode: PermissionMode,
    name: str,
) -> ToolDefinition | None:
    """The tool named ``name`` when the caller may be let run it: listed, or (code mode) one a
    program may call. One lookup, not the whole listing: it is asked on every call."""
    tool = registry.resolve(name, scope)
    return tool if tool is not None and runnable(tool, permissions, mode) else None


def listed_tool(
    registry: ToolRegistry,
    scope: str | None,
    permissions: PermissionConfig,
    mode: PermissionMode,
    name: str,
) -> ToolDefinition | None:
    """The tool ``listing`` shows the caller under ``name``, or None."""
    tool = runnable_tool(registry, scope, permissions, mode, name)
    if tool is None or name == RUN_CODE:
        return tool
    code_mode = registry.resolve(RUN_CODE, scope) is not None
    return None if code_mode else tool


def output_schema(tool: ToolDefinition) -> dict[str, Any] | None:
    """The tool's output as a JSON Schema object, when it declares one."""
    schema = tool.output.schema
    if schema is None or isinstance(schema, bool):
        return None
    if isinstance(schema, dict):
        return schema
    converted = schema.to_json_schema()
    return converted if isinstance(converted, dict) else None


def fingerprint(tools: list[dict[str, Any]]) -> str:
    return hashlib.sha256(_ENCODER.encode(tools)).hexdigest()


def policy_generation(
    tool: ToolDefinition | None, permissions: PermissionConfig, mode: PermissionMode
) -> str:
    """A digest of what decides a call of ``tool``: the mode, every rule, the tool's kind and
    schema. The same on every replica with the same configuration; another after any change."""
    rules = sorted(rule.text for rule in permissions.all_rules)
    described = None if tool is None else [tool.name, int(tool.kind), tool.input_schema]
    digest = hashlib.sha256(_ENCODER.encode([str(mode), rules, described]))
    return digest.hexdigest()[:32]
