"""Rules come from settings files (a cloned repository's among them) and are matched against
what a model chose: a path, a command's words. They are matched in linear time (RE2), so a
rule written to backtrack cannot freeze the server on one long name. Each case runs in a child
process with a time limit, so a regression fails instead of hanging the suite."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from tests.child_kit import run_python

CHILD = textwrap.dedent(
    """
    import json, sys, time
    from fastgate import (
        ApprovalStore, ExecutionContext, PermissionConfig, PermissionMode, PermissionResolver
    )
    from fastgate.builtin import builtin_tools

    root, rule, tool, args = json.loads(sys.argv[1])
    tools = {t.name: t for t in builtin_tools()}
    resolver = PermissionResolver(
        PermissionConfig(deny=[rule]), PermissionMode.DEFAULT, ApprovalStore()
    )
    ctx = ExecutionContext(session_id="s", workspace_root=root)
    started = time.monotonic()
    decided = resolver.decide(tools[tool], args, ctx)
    print(json.dumps([decided.decision.value, time.monotonic() - started]))
    """
)

LONG = "a" * 3000


@pytest.mark.parametrize(
    ("rule", "tool", "args", "expected"),
    [
        ("Read(**/*a*a*a*a*a*a*a*b)", "read", {"file_path": LONG}, "allow"),
        ("Read(/*a*a*a*a*a*a*a*b)", "read", {"file_path": LONG}, "allow"),
        ("Read(**/*a*a*a*a*a*a*a*a)", "read", {"file_path": LONG}, "deny"),
        ("Bash(x *a*a*a*a*a*a*a*b)", "bash", {"command": "x " + LONG}, "ask"),
        ("Bash(x*a*a*a*a*a*a*a*a*b)", "bash", {"command": "x" + LONG}, "ask"),
        ("Bash(x *a*a*a*a*a*a*a*a)", "bash", {"command": "x " + LONG}, "deny"),
    ],
)
def test_a_rule_written_to_backtrack_is_decided_at_once(
    tmp_path: Path, rule: str, tool: str, args: dict[str, str], expected: str
) -> None:
    payload = json.dumps([str(tmp_path), rule, tool, args])
    out = run_python(CHILD, payload, timeout=60, stalled=f"{rule} backtracked on a long name")
    decision, seconds = json.loads(out)
    assert decision == expected
    assert seconds < 2.0
