"""Result records shared by the benchmark scenarios, the table and ``--json``."""

from __future__ import annotations

import operator
from collections.abc import Callable

import msgspec

_OPS: dict[str, Callable[[float, float], bool]] = {"<=": operator.le, ">=": operator.ge}


class Target(msgspec.Struct, frozen=True):
    """``value <op> bound`` is the acceptance figure; ``ci_bound`` is the looser CI gate."""

    op: str  # "<=" or ">="
    bound: float
    ci_bound: float

    def holds(self, value: float, *, ci: bool = False) -> bool:
        return _OPS[self.op](value, self.ci_bound if ci else self.bound)

    def __str__(self) -> str:
        return f"{self.op} {self.bound:g}"


class Measurement(msgspec.Struct, frozen=True):
    """One figure of one scenario, on one core and one loop.

    ``value`` is what the target applies to (usually a ratio against ``reference``);
    ``detail`` carries the absolute numbers behind it, for context.
    """

    scenario: str
    metric: str
    value: float
    unit: str = "x"
    reference: str | None = None
    target: Target | None = None
    detail: str = ""
    core: str = ""  # "compiled" | "pure"
    loop: str = ""  # "uvloop" | "asyncio"

    def passed(self, *, ci: bool = False) -> bool | None:
        return None if self.target is None else self.target.holds(self.value, ci=ci)


class BenchConfig(msgspec.Struct, frozen=True):
    """How much work each scenario does: ``rounds`` repetitions of ``ops`` operations."""

    rounds: int
    ops: int
    fairness_runs: int
