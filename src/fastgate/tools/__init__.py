"""Tool definitions and the scoped registry: ``ToolDefinition``, ``define_tool``, ``@tool``,
``Output`` (SPEC §2.1) and ``ToolRegistry`` (SPEC §3)."""

from __future__ import annotations

from fastgate.tools._definition import NAME_PATTERN as NAME_PATTERN
from fastgate.tools._definition import Output as Output
from fastgate.tools._definition import ToolDefinition as ToolDefinition
from fastgate.tools._definition import define_tool as define_tool
from fastgate.tools._definition import tool as tool
from fastgate.tools.registry import ToolRegistry as ToolRegistry

__all__ = ("NAME_PATTERN", "Output", "ToolDefinition", "ToolRegistry", "define_tool", "tool")
