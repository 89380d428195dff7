"""The stages run in the fixed order of SPEC §4, for a full call and for each early exit.

Every collaborator the executor calls is instrumented to append to one log, so the test sees
the order from the outside.

The order is a property of ``executor.py``'s source, which both builds run. Compiled code calls
its collaborators directly and cannot be instrumented, so under the compiled build the test runs
that same source once more, interpreted (its collaborators stay as they are).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import fastgate.pipeline.body
import fastgate.pipeline.executor
from fastgate import (
    ApprovalResponse,
    CancelToken,
    ErrorCode,
    ExecutionContext,
    Hooks,
    PermissionConfig,
    PostToolUseResult,
    PreToolUseResult,
    ToolConcurrencyGate,
    ToolKind,
    ToolResult,
)
from tests.pipeline_kit import PATH, executor, tool

FULL = [
    "lookup",
    "validation",
    "gate",
    "worktree",
    "permission",
    "pre_hook",
    "decision:ask",
    "guard",
    "approval",
    "decision:allow",
    "slot",
    "locks",
    "invoke",
    "post_hook",
    "files_changed",
    "finalize",
    "result",
]


def _source_of(module: ModuleType) -> ModuleType:
    """``module`` as it runs uncompiled: itself in the pure build, else loaded from its source."""
    source = str(module.__file__)
    if source.endswith(".py"):
        return module
    name = module.__name__.rpartition(".")[2]
    spec = importlib.util.spec_from_file_location(
        f"{module.__name__}_source", Path(source).parent / f"{name}.py"
    )
    assert spec is not None and spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


executor_module = _source_of(fastgate.pipeline.executor)
# The body's context refers to the executor's classes: take it from the same source.
setattr(executor_module, "BodyContext", _source_of(fastgate.pipeline.body).BodyContext)  # noqa: B010


def logged(log: list[str], tag: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any) -> Any:
        log.append(tag)
        return fn(*args)

    return wrapper


class Probe:
    def __init__(
        self,
        monkeypatch: pytest.MonkeyPatch,
        workspace: Path,
        *,
        permissions: PermissionConfig | None = None,
        pre: Any = None,
        guard_reason: str | None = None,
        approve: bool = True,
    ) -> None:
        self.log: list[str] = []
        log = self.log
        hooks = Hooks()
        hooks.add_pre_tool_use(logged(log, "pre_hook", lambda e: pre))
        hooks.add_post_tool_use(logged(log, "post_hook", lambda e: PostToolUseResult()))

        def body(args: Any, ctx: Any) -> str:
            log.append("invoke")
            return "done"

        def finalize(result: ToolResult) -> None:
            log.append("finalize")

        definition = tool("write_file", body, PATH, kind=ToolKind.WRITE, finalize_content=finalize)
        self.tool = definition
        original_validator = definition.validator

        class LoggingValidator:
            def validate(self, value: Any) -> Any:
                log.append("validation")
                return original_validator.validate(value)

        object.__setattr__(definition, "validator", LoggingValidator())

        class Audit:
            def record(self, event: Any) -> None:
                log.append(f"decision:{event.decision}")

        def guard(view: Any) -> str | None:
            log.append("guard")
            return guard_reason

        self.ex = ex = executor(
            definition,
            workspace=workspace,
            hooks=hooks,
            guards=[guard],
            permissions=permissions,
            audit=Audit(),
            executor_class=executor_module.ToolExecutor,
        )
        registry = ex.registry

        class LoggingRegistry:
            visible = registry.visible

            def resolve(self, *a: Any) -> Any:
                log.append("lookup")
                return registry.resolve(*a)

        ex.registry = LoggingRegistry()  # type: ignore[assignment]
        gate = ToolConcurrencyGate()  # the session's gate, made ahead so it can be logged
        shared, exclusive = gate.shared, gate.exclusive

        class LoggingGate:
            statistics = gate.statistics
            close = gate.close

            def shared(self) -> Any:
                log.append("gate")
                return shared()

            def exclusive(self) -> Any:
                log.append("gate")
                return exclusive()

        ex._gates["s1"] = LoggingGate()  # type: ignore[assignment]
        check = executor_module.check_given_paths
        monkeypatch.setattr(executor_module, "check_given_paths", logged(log, "worktree", check))
        resolver = ex._resolver

        class LoggingResolver:
            record_project_approval = resolver.record_project_approval

            def decide(self, *a: Any) -> Any:
                log.append("permission")
                return resolver.decide(*a)

        ex._resolver = LoggingResolver()  # type: ignore[assignment]
        slot = ex.scheduler.slot
        monkeypatch.setattr(ex.scheduler, "slot", logged(log, "slot", slot))
        locks = ex.locks

        class LoggingLocks:
            def acquire_keys(self, *a: Any) -> Any:
                log.append("locks")
                return locks.acquire_keys(*a)

            def __len__(self) -> int:
                return len(locks)

        ex.locks = LoggingLocks()  # type: ignore[assignment]
        ex.on_files_changed(lambda paths: log.append("files_changed"))
        ex.on_result(lambda result: log.append("result"))

        async def approver(request: Any) -> ApprovalResponse:
            log.append("approval")
            return ApprovalResponse(approve, feedback=None if approve else "no thanks")

        self.ctx = ExecutionContext(approver=approver)


async def test_full_call_runs_every_stage_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    probe = Probe(monkeypatch, tmp_path)
    result = await probe.ex.execute("write_file", {"file_path": "a.txt"}, probe.ctx)
    assert result.ok, result.error
    assert probe.log == FULL


def _prefix_then(stage: str, *tail: str) -> list[str]:
    return [*FULL[: FULL.index(stage) + 1], *tail]


@pytest.mark.parametrize(
    ("case", "expected", "code"),
    [
        ("unknown tool", ["lookup", "result"], ErrorCode.UNKNOWN_TOOL),
        ("invalid args", ["lookup", "validation", "finalize", "result"], ErrorCode.INVALID_ARGS),
        (
            "outside the workspace",
            _prefix_then("worktree", "finalize", "result"),
            ErrorCode.WORKTREE_VIOLATION,
        ),
        (
            "deny rule",
            _prefix_then("pre_hook", "decision:deny", "finalize", "result"),
            ErrorCode.PERMISSION_DENIED,
        ),
        (
            "hook denies",
            _prefix_then("pre_hook", "decision:deny", "finalize", "result"),
            ErrorCode.PERMISSION_DENIED,
        ),
        (
            "guard denies",
            _prefix_then("guard", "decision:deny", "finalize", "result"),
            ErrorCode.PERMISSION_DENIED,
        ),
        (
            "user rejects",
            _prefix_then("approval", "decision:deny", "finalize", "result"),
            ErrorCode.USER_REJECTED,
        ),
        ("cancelled before dispatch", ["result"], ErrorCode.ABORTED_BEFORE_DISPATCH),
    ],
)
async def test_each_early_exit_stops_at_its_stage(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    case: str,
    expected: list[str],
    code: ErrorCode,
) -> None:
    args: Any = {"file_path": "a.txt"}
    name = "write_file"
    kwargs: dict[str, Any] = {}
    if case == "unknown tool":
        name = "write_fiel"
    elif case == "invalid args":
        args = {"file_path": 3}
    elif case == "outside the workspace":
        args = {"file_path": "../elsewhere.txt"}
    elif case == "deny rule":
        kwargs["permissions"] = PermissionConfig(deny=("write_file",))
    elif case == "hook denies":
        kwargs["pre"] = PreToolUseResult(decision="deny", reason="not today")
    elif case == "guard denies":
        kwargs["guard_reason"] = "owner policy"
    elif case == "user rejects":
        kwargs["approve"] = False
    probe = Probe(monkeypatch, tmp_path, **kwargs)
    ctx = probe.ctx
    if case == "cancelled before dispatch":
        token = CancelToken()
        token.cancel("stop")
        ctx = ExecutionContext(cancel=token, approver=ctx.approver)
    result = await probe.ex.execute(name, args, ctx)
    assert not result.ok and result.error is not None
    assert result.error.code is code, result.error
    assert probe.log == expected


async def test_hooks_registered_between_calls_apply_to_the_next_call() -> None:
    """The executor remembers per tool whether hooks match; a registration, or another Hooks
    object, must be seen by the very next call."""

    def boom(args: Any, ctx: Any) -> Any:
        raise RuntimeError("broken")

    ex = executor(
        tool("echo", lambda args, ctx: args["text"]),
        tool("other", lambda args, ctx: args["text"]),
        tool("boom", boom),
    )
    args = {"text": "x"}
    for name in ("echo", "other", "boom"):  # every tool's answers are known before any hook
        await ex.execute(name, args)

    ex.hooks.add_pre_tool_use(
        lambda event: PreToolUseResult(decision="deny", reason="closed"), matcher="echo"
    )
    denied = await ex.execute("echo", args)
    assert denied.error is not None and denied.error.code is ErrorCode.PERMISSION_DENIED

    ex.hooks.add_post_tool_use(lambda event: PostToolUseResult(block="withheld"), matcher="other")
    blocked = await ex.execute("other", args)
    assert blocked.error is not None and blocked.error.code is ErrorCode.BLOCKED_BY_HOOK

    ex.hooks.add_post_tool_use_failure(lambda event: "see the runbook", matcher="boom")
    failed = await ex.execute("boom", args)
    assert failed.error is not None and failed.error.code is ErrorCode.TOOL_ERROR
    assert "see the runbook" in failed.meta.additional_context

    ex.hooks = Hooks()  # a fresh registry: nothing matches any more
    for name in ("echo", "other"):
        assert (await ex.execute(name, args)).ok
    assert "see the runbook" not in (await ex.execute("boom", args)).meta.additional_context
