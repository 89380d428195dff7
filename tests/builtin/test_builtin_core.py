"""The core plumbing the built-ins stand on, tested with plain tools: declared paths
(``ToolDefinition.paths``) in stages 5, 6 and 11, ``rule_names``, the fs/shell seams of a
context, ``files_changed``, and the core never importing ``fastgate.builtin`` (SPEC §5, §7,
§13, §16)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fastgate import (
    ApprovalResponse,
    ConcurrencyScheduler,
    ErrorCode,
    ExecutionContext,
    FileLockManager,
    Hooks,
    PermissionConfig,
    PermissionMode,
    PreToolUseEvent,
    PreToolUseResult,
    RunContext,
    SchedulerLimits,
    ToolExecutor,
    ToolKind,
    ToolRegistry,
    define_tool,
    schema,
)
from fastgate.builtin import register_builtins
from tests.builtin_kit import real
from tests.pipeline_kit import executor

PATCH_LIKE = schema.Object({"targets": schema.String()}, required=("targets",))


def multi_path_tool(seen: list[Any], **options: Any) -> Any:
    """A tool whose paths are a comma-separated argument (as apply_patch's are in its patch)."""

    async def body(args: Any, ctx: RunContext) -> str:
        seen.append([ex_locked(ctx, p) for p in args["targets"].split(",")])
        ctx.files_changed(args["targets"].split(","))
        return "done"

    def paths(args: Any) -> list[str]:
        if args["targets"] == "!":
            raise ValueError("invalid targets: '!' names no file")
        targets: str = args["targets"]
        return targets.split(",")

    options.setdefault("kind", ToolKind.WRITE)
    return define_tool(
        "multi", "Touch several files.", PATCH_LIKE, body, paths=paths, path_args=(), **options
    )


def ex_locked(ctx: RunContext, path: str) -> bool:
    locks = ctx._executor.locks  # type: ignore[attr-defined]
    root = ctx.workspace_root or ""
    return bool(locks.locked(os.path.realpath(os.path.join(root, path))))


def test_definitions_check_paths_and_rule_names() -> None:
    noop = define_tool("t", "T.", PATCH_LIKE, lambda a, c: None)
    assert noop.paths is None and noop.rule_names == ()
    assert define_tool("t", "T.", PATCH_LIKE, noop.execute, rule_names=["Read"]).rule_names == (
        "Read",
    )
    with pytest.raises(TypeError, match="paths must be callable"):
        define_tool("t", "T.", PATCH_LIKE, noop.execute, paths=["a"])
    with pytest.raises(TypeError, match="rule_names"):
        define_tool("t", "T.", PATCH_LIKE, noop.execute, rule_names="Read")
    with pytest.raises(ValueError, match="invalid rule name"):
        define_tool("t", "T.", PATCH_LIKE, noop.execute, rule_names=("Re ad",))


async def test_declared_paths_are_locked_sorted_and_reported(tmp_path: Path) -> None:
    seen: list[Any] = []
    ex = executor(multi_path_tool(seen), workspace=tmp_path, mode=PermissionMode.ACCEPT_EDITS)
    changed: list[tuple[str, ...]] = []
    ex.on_files_changed(changed.append)
    result = await ex.execute("multi", {"targets": "b.txt,a.txt,sub/../c.txt"})
    assert result.ok, result.content
    assert seen == [[True, True, True]]  # every declared path locked around the body
    root = real(tmp_path)
    assert changed == [(f"{root}/a.txt", f"{root}/b.txt", f"{root}/c.txt")]
    assert len(ex.locks) == 0


async def test_declared_paths_meet_worktree_rules_and_sensitive(tmp_path: Path) -> None:
    seen: list[Any] = []
    asked: list[Any] = []

    async def approver(request: Any) -> ApprovalResponse:
        asked.append(request)
        return ApprovalResponse(approved=False)

    ex = executor(
        multi_path_tool(seen),
        workspace=tmp_path,
        mode=PermissionMode.YOLO,
        permissions=PermissionConfig(deny=("multi(./locked/**)",)),
    )
    escape = await ex.execute("multi", {"targets": "ok.txt,../../etc/passwd"})
    assert escape.error is not None and escape.error.code == ErrorCode.WORKTREE_VIOLATION
    assert escape.error.details["argument"] == "paths"
    denied = await ex.execute("multi", {"targets": "ok.txt,locked/x"})
    assert denied.error is not None and denied.error.code == ErrorCode.PERMISSION_DENIED
    sensitive = await ex.execute(
        "multi", {"targets": "ok.txt,.env"}, ExecutionContext(approver=approver)
    )
    assert sensitive.error is not None and sensitive.error.code == ErrorCode.USER_REJECTED
    assert len(asked) == 1
    broken = await ex.execute("multi", {"targets": "!"})
    assert broken.error is not None and broken.error.code == ErrorCode.INVALID_ARGS
    assert broken.error.message == "invalid targets: '!' names no file"
    assert seen == []  # the body never ran


async def test_a_hook_rewrite_is_checked_for_its_declared_paths(tmp_path: Path) -> None:
    seen: list[Any] = []

    def rewrite(event: PreToolUseEvent) -> PreToolUseResult:
        return PreToolUseResult(updated_args={"targets": "fine.txt,../escape.txt"})

    hooks = Hooks()
    hooks.add_pre_tool_use(rewrite)
    ex = executor(multi_path_tool(seen), workspace=tmp_path, mode=PermissionMode.YOLO, hooks=hooks)
    result = await ex.execute("multi", {"targets": "fine.txt"})
    assert result.error is not None and result.error.code == ErrorCode.WORKTREE_VIOLATION
    assert seen == []


async def test_rule_names_govern_a_tool(tmp_path: Path) -> None:
    async def body(args: Any, ctx: RunContext) -> str:
        return "read"

    path_schema = schema.Object({"file_path": schema.String()}, required=("file_path",))
    governed = define_tool(
        "reader", "R.", path_schema, body, kind=ToolKind.READ_ONLY, rule_names=("Read",)
    )
    free = define_tool("other", "O.", path_schema, body, kind=ToolKind.READ_ONLY)
    ex = executor(
        governed,
        free,
        workspace=tmp_path,
        permissions=PermissionConfig(deny=("Read(./secrets/**)",), ask=("reader(./docs/**)",)),
    )
    denied = await ex.execute("reader", {"file_path": "secrets/a"})
    assert denied.error is not None and denied.error.code == ErrorCode.PERMISSION_DENIED
    assert "Read(./secrets/**)" in denied.error.message
    own_name = await ex.execute("reader", {"file_path": "docs/a"})  # its own name still counts
    assert own_name.error is not None and own_name.error.details.get("reason") == "no_approver"
    assert (await ex.execute("reader", {"file_path": "src/a"})).ok
    assert (await ex.execute("other", {"file_path": "secrets/a"})).ok  # no rule names: free


def test_contexts_carry_fs_and_shell_and_take_them_from_defaults() -> None:
    fs, shell = object(), object()
    ctx = ExecutionContext(session_id="s", fs=fs)
    assert ctx.fs is fs and ctx.shell is None
    merged = ctx.merged(ExecutionContext.check_defaults({"fs": object(), "shell": shell}))
    assert merged.fs is fs and merged.shell is shell  # a field set on the call wins
    assert ExecutionContext().merged({"fs": fs}).fs is fs


async def test_bad_files_changed_input_fails_the_call(tmp_path: Path) -> None:
    async def body(args: Any, ctx: RunContext) -> str:
        ctx.files_changed("not-a-list")
        return "x"

    ex = executor(
        define_tool("bad", "B.", schema.Object({}), body, kind=ToolKind.READ_ONLY),
        workspace=tmp_path,
    )
    seen: list[Any] = []
    ex.on_files_changed(seen.append)
    result = await ex.execute("bad", {})
    assert result.error is not None and result.error.code == ErrorCode.TOOL_ERROR
    assert seen == []


def test_may_read_outside_an_executor_knows_the_sensitive_list(tmp_path: Path) -> None:
    ctx = RunContext(context=ExecutionContext(workspace_root=str(tmp_path)))
    assert ctx.may_read(str(tmp_path / "src/a.py"))
    assert not ctx.may_read(str(tmp_path / ".env"))
    assert not ctx.may_read(str(tmp_path / "deep/id_rsa"))


SEAMS = """
import sys
import fastgate
from fastgate import ExecutionContext, ToolExecutor, ToolRegistry, define_tool, schema
if sys.argv[1] == "builtin-first":
    import fastgate.builtin  # imported before anything else: must change nothing

async def main():
    async def body(args, ctx):
        return f"{type(ctx.fs).__name__} {type(ctx.shell).__name__}"
    reg = ToolRegistry()
    reg.register(define_tool("t", "T.", schema.Object({}), body, kind="read_only"))
    executor = ToolExecutor(reg)
    before = [m for m in sys.modules if m.startswith("fastgate.builtin")]
    result = await executor.execute("t", {}, ExecutionContext(workspace_root="/tmp"))
    print(before)
    print(result.content)

fastgate.run(main())
"""


def _seams(order: str) -> tuple[str, str]:
    done = subprocess.run(
        [sys.executable, "-c", SEAMS, order], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    before, seams = done.stdout.strip().split("\n")
    return before, seams


def test_the_default_seams_do_not_depend_on_what_was_imported() -> None:
    # Importing fastgate loads no capability; a body that asks for its file system and shell
    # gets the built-ins' local ones, the same whether fastgate.builtin was imported first.
    before, core_first = _seams("core-only")
    assert before == "[]"
    _, builtin_first = _seams("builtin-first")
    assert core_first == builtin_first
    assert core_first.split()[0] == "LocalFileSystem"
    assert core_first.split()[1] in ("LocalShell", "SandboxedShell")


async def test_a_relative_workspace_root_works_for_every_file_tool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "." is where the server was when it made the executor, not "/": paths under it are inside.
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "x.txt").write_text("one\n")
    monkeypatch.chdir(tmp_path)
    registry = ToolRegistry()
    register_builtins(registry)
    ex = ToolExecutor(
        registry,
        mode="accept_edits",
        scheduler=ConcurrencyScheduler(SchedulerLimits()),
        locks=FileLockManager(),
        context_defaults={"session_id": "s1", "workspace_root": "."},
    )
    ctx = ExecutionContext()
    assert (await ex.execute("read", {"file_path": "sub/x.txt"}, ctx)).ok
    edited = await ex.execute(
        "edit", {"file_path": "sub/x.txt", "old_string": "one", "new_string": "two"}, ctx
    )
    assert edited.ok, edited.content
    assert (tmp_path / "sub" / "x.txt").read_text() == "two\n"
    outside = await ex.execute("read", {"file_path": "../elsewhere"}, ctx)
    assert outside.error is not None and outside.error.code is ErrorCode.WORKTREE_VIOLATION
