"""``ToolResultProjector``: recover a session from the store, and fit results to a surface.

``recover(session_id)`` reads every call of a session back from a ``ToolUseStore`` in model order
(turn, epoch, position), completed ones with their durable result (content, error, meta; never
the canonical value) and interrupted ones (a tool-use without result: outcome unknown) with none.
Nothing is ever re-run.

``project(result, surface, budget_chars)`` cuts a result's content to a character budget: the
head and the tail are kept around a marker saying how many characters were cut. Characters are
code points; a cut never separates the two halves of a surrogate pair (strings decoded with
``surrogatepass``), and Python strings hold whole characters, so no multi-byte character is ever
split. The output fits the budget, so projecting again changes nothing (idempotent).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final, TypeVar

import msgspec

from fastgate.durable.store import StoredCall, ToolUseStore
from fastgate.model.results import DurableResult, ToolResult

# Default budgets per surface, in characters of text. "model": what goes back into a context
# window; "ui": what a person scrolls through; "log": one line's worth of context.
DEFAULT_BUDGETS: Final[Mapping[str, int]] = MappingProxyType(
    {"model": 30_000, "ui": 8_000, "log": 2_000}
)
MIN_BUDGET_CHARS: Final = 64  # room for the marker and some text on each side

R = TypeVar("R", ToolResult, DurableResult)


def _marker(cut: int) -> str:
    return f"\n[... {cut} characters cut ...]\n"


def _splits_pair(text: str, index: int) -> bool:
    """Whether cutting ``text`` at ``index`` separates a high surrogate from its low half."""
    return (
        0 < index < len(text)
        and "\ud800" <= text[index - 1] <= "\udbff"
        and "\udc00" <= text[index] <= "\udfff"
    )


def _locate(texts: Sequence[str], position: int) -> tuple[int, int]:
    """(text index, offset) of a position in the concatenation of ``texts``."""
    start = 0
    for i, text in enumerate(texts):
        if position < start + len(text):
            return i, position - start
        start += len(text)
    return len(texts) - 1, len(texts[-1])


def cut_texts(texts: Sequence[str], budget: int) -> list[str | None]:
    """Fit ``texts`` (read as one text) into ``budget`` characters, marker included.

    Returns the new text of each input; ``None`` for a text that lies wholly inside the cut.
    The marker goes where the cut begins.
    """
    total = sum(len(t) for t in texts)
    if total <= budget:
        return list(texts)
    room = budget - len(_marker(total))  # the final marker is never longer than this one
    head, tail = room - room // 2, room // 2
    i, offset = _locate(texts, head)
    if _splits_pair(texts[i], offset):
        head -= 1
    j, offset = _locate(texts, total - tail)
    if _splits_pair(texts[j], offset):
        tail -= 1
    marker = _marker(total - head - tail)
    tail_start = total - tail
    out: list[str | None] = []
    start = 0
    for text in texts:
        end = start + len(text)
        kept_head = text[: max(0, head - start)]
        kept_tail = text[max(0, tail_start - start) :] if end > tail_start else ""
        holds_cut = start <= head < end
        if holds_cut:
            out.append(kept_head + marker + kept_tail)
        elif start >= head and end <= tail_start:
            out.append(None)  # wholly inside the cut
        else:
            out.append(kept_head + kept_tail)
        start = end
    return out


def _is_text_block(block: Any) -> bool:
    return isinstance(block, str) or (
        isinstance(block, Mapping)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
    )


def _block_text(block: Any) -> str:
    return block if isinstance(block, str) else str(block["text"])


def project_content(content: Any, budget: int) -> Any:
    """``content`` cut to ``budget`` characters of text; other kinds of content are unchanged.

    ``str`` is cut directly. In a tuple (or list) of blocks, the text blocks (``str`` or
    ``{"type": "text", "text": ...}``) share the budget and are cut as one text; other blocks
    (images, resources) are kept in place and do not count.
    """
    if isinstance(content, str):
        cut = cut_texts((content,), budget)[0]
        return content if cut is None else cut
    if not isinstance(content, (tuple, list)):
        return content
    positions = [i for i, block in enumerate(content) if _is_text_block(block)]
    texts = [_block_text(content[i]) for i in positions]
    if sum(len(t) for t in texts) <= budget:
        return content
    replaced = dict(zip(positions, cut_texts(texts, budget), strict=True))
    blocks: list[Any] = []
    for i, block in enumerate(content):
        if i not in replaced:
            blocks.append(block)
            continue
        text = replaced[i]
        if text is None:
            continue
        blocks.append(text if isinstance(block, str) else {**block, "text": text})
    return type(content)(blocks)


class ToolResultProjector:
    """Reads a session back from a store and cuts results to the budget of a surface.

    ``budgets`` replaces or extends ``DEFAULT_BUDGETS`` (surface name -> characters).
    """

    def __init__(self, store: ToolUseStore, *, budgets: Mapping[str, int] | None = None) -> None:
        if not isinstance(store, ToolUseStore):
            raise TypeError(f"store: expected a ToolUseStore, got {type(store).__name__}")
        merged = {**DEFAULT_BUDGETS, **(budgets or {})}
        for surface, budget in merged.items():
            _check_budget(budget, f"budgets[{surface!r}]")
        self.store = store
        self.budgets: Mapping[str, int] = MappingProxyType(merged)

    async def recover(self, session_id: str) -> list[StoredCall]:
        """Every call of every epoch of the session, in turn, epoch and position order.

        ``"completed"`` calls carry the durable result (content, error, meta); ``"interrupted"``
        ones (outcome unknown) carry ``None`` and are never re-run. Cancelling stops the read.
        """
        calls = await self.store.load(session_id)
        # The store's order decides which turn came first; within a turn, epoch then position.
        turn_rank: dict[str | None, int] = {}
        for call in calls:
            turn_rank.setdefault(call.turn_id, len(turn_rank))
        ordered = sorted(calls, key=lambda c: (turn_rank[c.turn_id], c.epoch, c.seq))
        return [_without_value(call) for call in ordered]

    def budget(self, surface: str) -> int:
        try:
            return self.budgets[surface]
        except KeyError:
            known = ", ".join(sorted(self.budgets))
            raise ValueError(
                f"surface: unknown surface {surface!r} (known: {known}); pass budget_chars"
            ) from None

    def project(self, result: R, surface: str = "model", budget_chars: int | None = None) -> R:
        """``result`` with its content cut to ``budget_chars`` (default: the surface's budget)."""
        if not isinstance(result, (ToolResult, DurableResult)):
            raise TypeError(
                f"result: expected a ToolResult or DurableResult, got {type(result).__name__}"
            )
        budget = self.budget(surface) if budget_chars is None else budget_chars
        _check_budget(budget, "budget_chars")
        content = project_content(result.content, budget)
        if content is result.content:
            return result
        return msgspec.structs.replace(result, content=content)


def _check_budget(budget: object, name: str) -> None:
    if not isinstance(budget, int) or isinstance(budget, bool):
        raise TypeError(f"{name}: expected an int number of characters, got {budget!r}")
    if budget < MIN_BUDGET_CHARS:
        raise ValueError(f"{name}: must be at least {MIN_BUDGET_CHARS} characters, got {budget}")


def _without_value(call: StoredCall) -> StoredCall:
    """Stores may hand back a full ``ToolResult``; only its durable part is ever recovered."""
    result: Any = call.result
    if isinstance(result, ToolResult):
        return msgspec.structs.replace(call, result=result.durable())
    return call
