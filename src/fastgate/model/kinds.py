"""``ToolKind``: what a tool does to the world, for permission defaults and per-kind quotas."""

from __future__ import annotations

from enum import IntEnum


class ToolKind(IntEnum):
    """An ``IntEnum`` so the compiled scheduler can index its per-kind counters directly."""

    READ_ONLY = 0
    WRITE = 1
    EXECUTE = 2

    def __str__(self) -> str:
        return self.name

    @classmethod
    def parse(cls, value: object, *, field: str = "kind") -> ToolKind:
        """Accept a member, its value or its name (any case); anything else is a ValueError."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            try:
                return cls[value.upper()]
            except KeyError:
                pass
        elif isinstance(value, int) and not isinstance(value, bool):
            try:
                return cls(value)
            except ValueError:
                pass
        names = ", ".join(member.name for member in cls)
        raise ValueError(f"{field}: unknown tool kind {value!r} (expected one of {names})")
