"""Stage 8: the strictest of the rule's and the hooks' decisions."""

from __future__ import annotations

from fastgate.model.decision import Decision, DecisionSource
from fastgate.permissions import RuleDecision


def merge_decision(
    rule: RuleDecision, hook: Decision | None, hook_reason: str | None
) -> tuple[Decision, DecisionSource, str]:
    """Strictest wins; with no decision at all the answer is ASK. A hook that asks as the mode
    does is named as the source: only the mode's own ask may be covered by a session approval."""
    if hook is not None and (
        hook.strictness > rule.decision.strictness
        or (
            hook is Decision.ASK
            and rule.decision is Decision.ASK
            and rule.source is DecisionSource.MODE
        )
    ):
        return hook, DecisionSource.HOOK, hook_reason or f"a PreToolUse hook said {hook}"
    return rule.decision, rule.source, rule.reason
