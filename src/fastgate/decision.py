"""``Decision``, ``PermissionMode`` and ``DecisionSource``: the vocabulary of policy (SPEC §5)."""

from __future__ import annotations

from enum import StrEnum


class Decision(StrEnum):
    """ALLOW < ASK < DENY: merging decisions always keeps the strictest."""

    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"

    @property
    def strictness(self) -> int:
        return _STRICTNESS[self]

    @staticmethod
    def strictest(*decisions: Decision | None) -> Decision | None:
        """The strictest of the given decisions, ignoring ``None`` (no opinion)."""
        best: Decision | None = None
        for decision in decisions:
            if decision is not None and (best is None or _STRICTNESS[decision] > _STRICTNESS[best]):
                best = decision
        return best

    @classmethod
    def parse(cls, value: object, *, field: str = "decision") -> Decision:
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            try:
                return cls(value.lower())
            except ValueError:
                pass
        raise ValueError(f"{field}: expected 'allow', 'ask' or 'deny', got {value!r}")


_STRICTNESS = {Decision.ALLOW: 0, Decision.ASK: 1, Decision.DENY: 2}


class PermissionMode(StrEnum):
    """Defaults by tool kind when no rule decides (SPEC §5 table)."""

    DEFAULT = "default"
    ACCEPT_EDITS = "accept_edits"
    PLAN = "plan"
    YOLO = "yolo"

    @classmethod
    def parse(cls, value: object, *, field: str = "mode") -> PermissionMode:
        """A member, its value or its name in any case (Claude Code's ``acceptEdits`` and
        ``bypassPermissions`` too)."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            key = value.replace("-", "_").lower()
            key = {"acceptedits": "accept_edits", "bypasspermissions": "yolo"}.get(key, key)
            try:
                return cls(key)
            except ValueError:
                pass
        names = ", ".join(m.value for m in cls)
        raise ValueError(f"{field}: unknown permission mode {value!r} (expected one of {names})")


class DecisionSource(StrEnum):
    """Where a decision came from; written to the audit sink and to ``meta.decision_source``."""

    RULE = "rule"
    MODE = "mode"
    SESSION = "session"
    SENSITIVE = "sensitive"
    HOOK = "hook"
    GUARD = "guard"
    USER = "user"
