"""Tool definitions: ``ToolDefinition``, ``define_tool``, ``@tool`` and ``Output`` (SPEC §2.1)."""

from __future__ import annotations

from fastgate.tools._definition import NAME_PATTERN as NAME_PATTERN
from fastgate.tools._definition import Output as Output
from fastgate.tools._definition import ToolDefinition as ToolDefinition
from fastgate.tools._definition import define_tool as define_tool
from fastgate.tools._definition import tool as tool

__all__ = ("NAME_PATTERN", "Output", "ToolDefinition", "define_tool", "tool")
