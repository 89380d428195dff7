"""Case on case-insensitive file systems: deny/ask rules, sensitive and protected paths fold case;
allow rules stay exact (over-matching a deny is safe, over-matching an allow is not)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fastgate import (
    ApprovalStore,
    Decision,
    DecisionSource,
    ErrorCode,
    PermissionConfig,
    PermissionMode,
    PermissionResolver,
    ToolKind,
    define_tool,
    schema,
)
from fastgate.model.context import ExecutionContext
from fastgate.paths.canonical import folds_case
from tests.pipeline_kit import executor, tool

READ = define_tool(
    "Read",
    "read",
    {"type": "object", "properties": {"file_path": {"type": "string"}}},
    lambda args: None,
    kind=ToolKind.READ_ONLY,
)
EDIT = define_tool(
    "Edit",
    "edit",
    {"type": "object", "properties": {"file_path": {"type": "string"}}},
    lambda args: None,
    kind=ToolKind.WRITE,
)


def decide(
    tool_: Any,
    path: str,
    root: Path,
    mode: PermissionMode = PermissionMode.DEFAULT,
    **config: Any,
) -> tuple[Decision, DecisionSource]:
    resolver = PermissionResolver(PermissionConfig(**config), mode, ApprovalStore())
    ctx = ExecutionContext(session_id="s", workspace_root=str(root))
    decided = resolver.decide(tool_, {"file_path": path}, ctx)
    return decided.decision, decided.source


@pytest.mark.parametrize("spelling", [".ENV", ".Env", "sub/../.eNv"])
def test_a_deny_rule_folds_case(spelling: str, tmp_path: Path) -> None:
    decided = decide(READ, spelling, tmp_path, deny=["Read(./.env)"], case_insensitive=True)
    assert decided == (Decision.DENY, DecisionSource.RULE)
    kept = decide(READ, spelling, tmp_path, deny=["Read(./.env)"], case_insensitive=False)
    assert kept[0] is not Decision.DENY  # a different file where case matters


@pytest.mark.parametrize("spelling", [".ENV", ".env.LOCAL", "home/.SSH/id_ed25519", "KEY.PEM"])
def test_sensitive_patterns_fold_case_in_every_mode(spelling: str, tmp_path: Path) -> None:
    for mode in PermissionMode:
        decided = decide(READ, spelling, tmp_path, mode, case_insensitive=True)
        asks = Decision.DENY if mode is PermissionMode.DONT_ASK else Decision.ASK  # never asks
        assert decided == (asks, DecisionSource.SENSITIVE), (mode, decided)


def test_an_ask_rule_folds_case(tmp_path: Path) -> None:
    decided = decide(
        READ, "Config/App.yml", tmp_path, ask=["Read(./config/**)"], case_insensitive=True
    )
    assert decided == (Decision.ASK, DecisionSource.RULE)


def test_the_protected_settings_directory_folds_case(tmp_path: Path) -> None:
    decided = decide(
        EDIT,
        ".FASTGATE/settings.local.json",
        tmp_path,
        PermissionMode.ACCEPT_EDITS,
        case_insensitive=True,
    )
    assert decided == (Decision.ASK, DecisionSource.SENSITIVE)


def test_allow_rules_stay_exact(tmp_path: Path) -> None:
    allow = ["Edit(./src/**)"]
    assert decide(EDIT, "src/a.py", tmp_path, allow=allow, case_insensitive=True)[0] is (
        Decision.ALLOW
    )
    assert decide(EDIT, "SRC/a.py", tmp_path, allow=allow, case_insensitive=True)[0] is (
        Decision.ASK
    )


def test_case_insensitive_must_be_a_bool_or_none() -> None:
    with pytest.raises(ValueError, match="case_insensitive"):
        PermissionConfig(case_insensitive="yes")  # type: ignore[arg-type]


async def test_a_model_cannot_write_the_settings_through_another_case(tmp_path: Path) -> None:
    written: list[str] = []
    write = tool(
        "write",
        lambda args, ctx: written.append(args["file_path"]),
        schema.Object({"file_path": schema.String()}, required=("file_path",)),
        kind=ToolKind.WRITE,
    )
    ex = executor(
        write,
        workspace=tmp_path,
        mode=PermissionMode.ACCEPT_EDITS,
        permissions=PermissionConfig(case_insensitive=True),
    )
    result = await ex.execute("write", {"file_path": ".FASTGATE/settings.local.json"})
    assert result.error is not None and result.error.code is ErrorCode.PERMISSION_DENIED
    assert result.error.details["reason"] == "no_approver" and written == []
    assert (await ex.execute("write", {"file_path": "notes.txt"})).ok


# -- the probe ------------------------------------------------------------------------------------


def test_probe_says_case_matters_on_this_kind_of_directory(tmp_path: Path) -> None:
    (tmp_path / "readme").write_text("x")
    assert folds_case(str(tmp_path)) is (sys.platform in ("darwin", "win32"))


def test_probe_sees_one_entry_under_two_spellings(tmp_path: Path) -> None:
    """What a case-insensitive volume shows: the swapped spelling is the same entry."""
    if sys.platform in ("darwin", "win32"):
        pytest.skip("case is folded on this platform without probing")
    (tmp_path / "readme").write_text("x")
    os.link(tmp_path / "readme", tmp_path / "README")
    assert folds_case(str(tmp_path))


def test_probe_is_not_fooled_by_a_symlink(tmp_path: Path) -> None:
    if sys.platform in ("darwin", "win32"):
        pytest.skip("case is folded on this platform without probing")
    (tmp_path / "readme").write_text("x")
    (tmp_path / "README").symlink_to(tmp_path / "readme")
    assert not folds_case(str(tmp_path))


@contextlib.contextmanager
def _case_insensitive_mount(tmp_path: Path) -> Iterator[Path]:
    target = tmp_path / "ci"
    target.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "casefold", "tmpfs", str(target)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        reason = done.stderr.decode(errors="replace").splitlines()[:1]
        pytest.skip(f"no case-insensitive file system (tmpfs casefold) can be mounted: {reason}")
    try:
        folded = target / "Folded"
        folded.mkdir()
        subprocess.run(["chattr", "+F", str(folded)], check=True, capture_output=True)
        yield folded
    finally:
        subprocess.run(["umount", str(target)], check=False)


def test_a_real_case_insensitive_volume_is_probed_and_folded(tmp_path: Path) -> None:
    with _case_insensitive_mount(tmp_path) as workspace:
        (workspace / ".env").write_text("SECRET=1")
        assert (workspace / ".ENV").read_text() == "SECRET=1"
        assert folds_case(str(workspace))
        decided = decide(READ, ".ENV", workspace, deny=["Read(./.env)"])
        assert decided == (Decision.DENY, DecisionSource.RULE)
