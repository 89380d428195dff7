"""Deadlines of running calls: one loop timer per distinct time budget, not one per call.

A tool's time budget is fixed by its definition, so the calls sharing a budget reach their
deadlines in the order they started. Each budget therefore keeps a "lane": its calls in an
insertion-ordered dict, the earliest first, and a single timer armed for that earliest deadline.
Starting a call is a dict insert, ending it a dict pop; when the timer fires it expires every
call whose deadline has passed and re-arms itself for the next one. A call that ends early
leaves the timer armed: it fires for nothing and re-arms, about once per budget at most.

A loop timer made and cancelled for every call cost several thousand instructions per call on
uvloop (docs/decisions.md, "Deadlines of calls with one `timeout` share one loop timer").
"""

from __future__ import annotations

import asyncio
from typing import Final

from fastgate._mypyc import mypyc_attr


@mypyc_attr(allow_interpreted_subclasses=True)  # so tests can expire objects of their own
class Expiring:
    """What a deadline ends: ``expire()`` runs on the loop's thread once the time has passed."""

    __slots__ = ()

    def expire(self) -> None:
        raise NotImplementedError


class _Lane:
    """The running calls of one time budget, earliest deadline first, and the lane's timer."""

    __slots__ = ("budget", "calls", "timer", "timer_at")

    def __init__(self, budget: float) -> None:
        self.budget = budget
        self.calls: dict[Expiring, float] = {}  # call -> its deadline (loop time)
        self.timer: asyncio.TimerHandle | None = None
        self.timer_at = 0.0


class Deadlines:
    """Expires a call once its time budget has passed. One per loop: every method runs on that
    loop's thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop: Final = loop
        self._lanes: dict[float, _Lane] = {}

    def add(self, budget: float, call: Expiring) -> None:
        """``call.expire()`` ``budget`` seconds from now, unless ``remove`` comes first."""
        lane = self._lanes.get(budget)
        if lane is None:
            lane = self._lanes[budget] = _Lane(budget)
        deadline = self.loop.time() + budget
        lane.calls[call] = deadline
        if lane.timer is None:
            self._arm(lane, deadline)

    def remove(self, budget: float, call: Expiring) -> None:
        lane = self._lanes.get(budget)
        if lane is not None:
            lane.calls.pop(call, None)

    def pending(self) -> int:
        """How many calls have a deadline still to come (for tests and leak checks)."""
        return sum(len(lane.calls) for lane in self._lanes.values())

    def _arm(self, lane: _Lane, when: float) -> None:
        lane.timer_at = when
        lane.timer = self.loop.call_at(when, self._expire, lane)

    def _expire(self, lane: _Lane) -> None:
        # The loop judged the armed time due; its clock may read a hair earlier than it.
        due = max(self.loop.time(), lane.timer_at)
        lane.timer = None
        calls = lane.calls
        expired: list[Expiring] = []
        for call, deadline in calls.items():
            if deadline > due:
                self._arm(lane, deadline)
                break
            expired.append(call)
        for call in expired:
            del calls[call]
        if not calls and self._lanes.get(lane.budget) is lane:
            del self._lanes[lane.budget]  # an idle budget keeps nothing
        for call in expired:
            try:
                call.expire()
            except Exception as exc:  # one call's error must not spare the others
                self.loop.call_exception_handler(
                    {"message": "expiring a call at its deadline raised", "exception": exc}
                )
