"""Shared pieces of the round-3 permission tests: decisions of the real resolver for the
built-in ``bash`` tool (and the other built-ins), under the rules a test names."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from fastgate import (
    ApprovalStore,
    Decision,
    DecisionSource,
    PermissionConfig,
    PermissionMode,
    PermissionResolver,
    RuleDecision,
)
from fastgate.builtin import builtin_tools
from fastgate.model.context import ExecutionContext

BUILTINS = {definition.name: definition for definition in builtin_tools()}
BASH = BUILTINS["bash"]
YOLO = PermissionMode.YOLO
DEFAULT = PermissionMode.DEFAULT
ACCEPT_EDITS = PermissionMode.ACCEPT_EDITS


def ruling(
    command: str,
    root: Path,
    *,
    mode: PermissionMode = DEFAULT,
    session: str = "s",
    approvals: ApprovalStore | None = None,
    **config: Any,
) -> RuleDecision:
    """What the resolver decides for ``bash`` running ``command`` in ``root``."""
    resolver = PermissionResolver(PermissionConfig(**config), mode, approvals or ApprovalStore())
    ctx = ExecutionContext(session_id=session, workspace_root=str(root))
    return resolver.decide(BASH, {"command": command}, ctx)


def tool_ruling(
    name: str, args: dict[str, Any], root: Path, *, mode: PermissionMode = DEFAULT, **config: Any
) -> RuleDecision:
    resolver = PermissionResolver(PermissionConfig(**config), mode, ApprovalStore())
    ctx = ExecutionContext(session_id="s", workspace_root=str(root))
    return resolver.decide(BUILTINS[name], args, ctx)


def asks_as_guarded(decided: RuleDecision) -> bool:
    """At least ASK for a sensitive or protected path: no approval for the session covers it."""
    return (
        decided.decision is Decision.ASK
        and decided.source is DecisionSource.SENSITIVE
        and decided.sensitive
    )


def project(root: Path) -> Path:
    """A project as an agent finds it: a git repository with settings of its own
    (``.claude/settings.json``) and two plain directories, ``sub`` and ``src``."""
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / ".claude").mkdir()
    (root / ".claude" / "settings.json").write_text("{}")
    (root / "sub").mkdir()
    (root / "src").mkdir()
    return root
