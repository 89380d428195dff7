"""Tool names of MCP servers as fastgate (and the model's provider) accepts them (SPEC §14).

``mcp__<server>__<tool>``; a name over 64 characters or with characters outside
``[A-Za-z0-9_-]`` has those characters replaced by ``_``, is cut, and gets ``_`` and the first 8
hex digits of the SHA-256 of the original name, so two distinct tools never share a name.
"""

from __future__ import annotations

import hashlib
import re

PREFIX = "mcp__"
MAX_NAME = 64
_VALID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_INVALID_CHAR = re.compile(r"[^A-Za-z0-9_-]")
_SUFFIX = 9  # "_" and 8 hex digits


def tool_name(server: str, remote: str) -> str:
    """The registered name of the tool ``remote`` of ``server``."""
    full = f"{PREFIX}{server}__{remote}"
    if _VALID.fullmatch(full):
        return full
    digest = hashlib.sha256(full.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return _INVALID_CHAR.sub("_", full)[: MAX_NAME - _SUFFIX] + "_" + digest


def pool_name(server: str) -> str:
    """The scheduler pool every call to ``server`` is admitted in (``mcp:<server>``, SPEC §14)."""
    return "mcp:" + server


def server_rule_name(server: str) -> str:
    """The rule name that governs every tool of ``server`` (``mcp__<server>``, SPEC §5)."""
    return PREFIX + server
