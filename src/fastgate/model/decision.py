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
    """Defaults by tool kind when no rule decides (SPEC §5 table). ``DONT_ASK`` never asks:
    every ASK (of the mode, a rule, a sensitive or protected path, a hook) becomes DENY."""

    DEFAULT = "default"
    ACCEPT_EDITS = "accept_edits"
    PLAN = "plan"
    YOLO = "yolo"
    DONT_ASK = "dont_ask"

    @classmethod
    def _missing_(cls, value: object) -> PermissionMode | None:
        # ``PermissionMode("dontAsk")``, ``PermissionMode("acceptEdits")``: the constructor
        # takes every spelling ``parse`` takes (Claude Code's names are the ones users copy).
        if isinstance(value, str):
            return _MODE_SPELLINGS.get(value.replace("-", "").replace("_", "").lower())
        return None

    @classmethod
    def parse(cls, value: object, *, field: str = "mode") -> PermissionMode:
        """A member, its value or its name in any case and with or without ``_``/``-``
        (``accept_edits``, ``acceptEdits``, ``DONTASK``), or Claude Code's ``bypassPermissions``
        (YOLO)."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            member = _MODE_SPELLINGS.get(value.replace("-", "").replace("_", "").lower())
            if member is not None:
                return member
        names = ", ".join(m.value for m in cls)
        raise ValueError(
            f"{field}: unknown permission mode {value!r} (expected one of {names}, or Claude "
            "Code's default, acceptEdits, plan, bypassPermissions, dontAsk)"
        )


# Every mode by its name squeezed (no ``_``/``-``, lower case), and Claude Code's names.
_MODE_SPELLINGS: dict[str, PermissionMode] = {
    **{m.value.replace("_", ""): m for m in PermissionMode},
    "bypasspermissions": PermissionMode.YOLO,
}


class DecisionSource(StrEnum):
    """Where a decision came from; written to the audit sink and to ``meta.decision_source``."""

    RULE = "rule"
    MODE = "mode"
    SESSION = "session"
    SENSITIVE = "sensitive"
    HOOK = "hook"
    GUARD = "guard"
    USER = "user"
