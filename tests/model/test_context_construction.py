"""Making an ``ExecutionContext``: every spelling of the call gives the same context in both
builds, and bad calls are refused with a ``TypeError`` that names the class."""

from __future__ import annotations

import copy
import dataclasses
import functools
import os
from pathlib import Path
from typing import Any

import pytest

from fastgate import CancelToken, ExecutionContext
from fastgate._core import IMPLEMENTATION, route_construction
from fastgate.model.context import ExecutionContext as ContextClass

UNCHECKED: Any = ExecutionContext  # called wrongly on purpose below
FIELDS = [f.name for f in dataclasses.fields(ExecutionContext)]
TOKEN = CancelToken()
VALUES: dict[str, Any] = {
    "session_id": "s1",
    "workspace_root": "/repo",
    "cancel": TOKEN,
    "approver": print,
    "agent_scope": "scope",
    "turn_id": "t1",
    "trusted": True,
    "metadata": {"k": "v"},
    "fs": object(),
    "shell": object(),
    "elicitor": print,
    "idempotency_key": "key-1",
    "idempotency_scope": "tenant",
}


def _fields(ctx: ExecutionContext) -> list[Any]:
    return [getattr(ctx, name) for name in FIELDS]


def test_the_class_exported_is_the_class_itself() -> None:
    assert ExecutionContext is ContextClass
    assert isinstance(ExecutionContext(), ExecutionContext)
    assert type(ExecutionContext(session_id="s")) is ExecutionContext


@pytest.mark.parametrize("given", range(len(FIELDS) + 1))
def test_keywords_positions_and_mixes_give_the_same_context(given: int) -> None:
    names = FIELDS[:given]
    values = [VALUES[name] for name in names]
    by_keyword = ExecutionContext(**dict(zip(names, values, strict=True)))
    by_position = ExecutionContext(*values)
    half = given // 2
    mixed = ExecutionContext(*values[:half], **dict(zip(names[half:], values[half:], strict=True)))
    partial = functools.partial(ExecutionContext, *values[:half])(
        **dict(zip(names[half:], values[half:], strict=True))
    )
    expected = values + [None if name != "metadata" else {} for name in FIELDS[given:]]
    for ctx in (by_keyword, by_position, mixed, partial):
        assert _fields(ctx) == expected
        assert ctx == by_keyword


@pytest.mark.parametrize("root", [".", "repo/sub", Path("relative"), Path("/abs/dir")])
def test_workspace_root_is_made_absolute_whatever_the_spelling(root: Any) -> None:
    expected = os.path.abspath(os.fspath(root))
    assert ExecutionContext(workspace_root=root).workspace_root == expected
    assert ExecutionContext(None, root).workspace_root == expected
    assert ExecutionContext(**{"workspace_root": root}).workspace_root == expected


@pytest.mark.parametrize(
    "call",
    [
        lambda: UNCHECKED(nope=1),
        lambda: UNCHECKED(session_id="s", workspace="/x"),
        lambda: UNCHECKED(**{"sessionid": "s"}),
        lambda: UNCHECKED("s", session_id="s"),
        lambda: UNCHECKED(*range(14)),
    ],
)
def test_a_bad_call_is_a_type_error_naming_the_class(call: Any) -> None:
    with pytest.raises(TypeError, match="ExecutionContext"):
        call()


@pytest.mark.parametrize("root", ["/ws\x00/x", "ws\x00"])
def test_a_root_holding_nul_is_refused_on_every_route(root: str) -> None:
    calls: list[Any] = [
        lambda: ExecutionContext(workspace_root=root),
        lambda: ExecutionContext(None, root),
        lambda: functools.partial(ExecutionContext, "s")(workspace_root=root),
    ]
    for call in calls:
        with pytest.raises(ValueError):
            call()


def test_contexts_copy_replace_and_merge_as_before() -> None:
    ctx = ExecutionContext(session_id="s", workspace_root="/repo", turn_id="t")
    assert dataclasses.replace(ctx, turn_id="u").turn_id == "u"
    assert dataclasses.replace(ctx, turn_id="u").session_id == "s"
    assert copy.copy(ctx) is ctx
    assert ctx.merged({"agent_scope": "a"}).agent_scope == "a"


def test_the_class_cannot_be_subclassed_in_either_build() -> None:
    with pytest.raises(TypeError):
        type("Sub", (ExecutionContext,), {})


@pytest.mark.skipif(route_construction is None, reason="the pure build routes nothing")
def test_the_router_takes_one_class_only() -> None:
    assert IMPLEMENTATION["_construct"] == "compiled"
    assert route_construction is not None

    class Other:
        pass

    with pytest.raises(RuntimeError, match="already routed"):
        route_construction(Other, lambda: None)
    assert type(Other()) is Other  # untouched
    with pytest.raises(TypeError):
        route_construction(Other, UNCHECKED("not callable").session_id)
