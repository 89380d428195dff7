"""``ExecutionContext``: a frozen dataclass, and its merge with ``context_defaults``."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fastgate import CancelToken, ExecutionContext
from tests.pipeline_kit import TEXT, executor, tool

FIELDS = [f.name for f in dataclasses.fields(ExecutionContext)]


async def _approver(request: Any) -> Any:
    raise AssertionError("never asked")


def _reference_merge(ctx: ExecutionContext, defaults: dict[str, Any]) -> ExecutionContext:
    """The rule, spelled with dataclasses.replace: every unset field (None; metadata: empty)
    takes the default."""
    unset = {
        name: value
        for name, value in defaults.items()
        if getattr(ctx, name) is None or (name == "metadata" and not ctx.metadata)
    }
    return dataclasses.replace(ctx, **unset)


TOKEN, OTHER_TOKEN = CancelToken(), CancelToken()
VALUES: dict[str, st.SearchStrategy[Any]] = {
    "session_id": st.sampled_from(["s1", "s2"]),
    "workspace_root": st.sampled_from(["/repo", "/other"]),
    "cancel": st.sampled_from([TOKEN, OTHER_TOKEN]),
    "approver": st.just(_approver),
    "agent_scope": st.sampled_from(["main", "sub"]),
    "turn_id": st.sampled_from(["t1", "t2"]),
    "trusted": st.booleans(),
    "metadata": st.sampled_from([MappingProxyType({}), MappingProxyType({"k": 1}), {"j": 2}]),
    "idempotency_scope": st.sampled_from(["tenant-a", "tenant-b"]),
}


# Some of the fields, each a value or None.
SOME_FIELDS = st.fixed_dictionaries({}, optional={n: st.none() | v for n, v in VALUES.items()})


@given(given_fields=SOME_FIELDS, defaults=SOME_FIELDS)
def test_merge_fills_exactly_the_unset_fields(
    given_fields: dict[str, Any], defaults: dict[str, Any]
) -> None:
    ctx = ExecutionContext(**given_fields)
    merged = ctx.merged(ExecutionContext.check_defaults(defaults))
    assert merged == _reference_merge(ctx, defaults)
    for name in FIELDS:  # what the caller set is never replaced by a default
        mine = getattr(ctx, name)
        if mine is not None and (name != "metadata" or mine):
            assert getattr(merged, name) is mine


@given(given_fields=SOME_FIELDS, defaults=SOME_FIELDS)
def test_a_context_lacks_a_default_exactly_when_the_merge_changes_it(
    given_fields: dict[str, Any], defaults: dict[str, Any]
) -> None:
    """The executor skips the merge when ``lacks_any`` says no default would fill a field."""
    ctx = ExecutionContext(**given_fields)
    mask = ExecutionContext.field_mask(defaults)
    reference = _reference_merge(ctx, defaults)
    would_fill = any(
        getattr(ctx, name) is None or (name == "metadata" and not ctx.metadata) for name in defaults
    )
    assert ctx.lacks_any(mask) is would_fill
    if not would_fill:
        assert reference == ctx


async def test_a_context_naming_every_default_is_used_as_given(tmp_path: Path) -> None:
    seen: list[Any] = []
    ex = executor(
        tool("probe", lambda args, ctx: seen.append(ctx.context), TEXT),
        context_defaults={"session_id": "default", "workspace_root": str(tmp_path)},
    )
    mine = ExecutionContext(session_id="s1", workspace_root=str(tmp_path))
    await ex.execute("probe", {"text": "x"}, mine)
    assert seen[-1] is mine and ex._merged == {}
    partial = ExecutionContext(session_id="s2")
    await ex.execute("probe", {"text": "x"}, partial)
    assert seen[-1].session_id == "s2" and seen[-1].workspace_root == str(tmp_path)


def test_merge_without_defaults_is_the_context_itself() -> None:
    ctx = ExecutionContext(session_id="s1")
    assert ctx.merged({}) is ctx


def test_a_set_false_is_not_unset() -> None:
    merged = ExecutionContext(trusted=False).merged({"trusted": True, "session_id": "d"})
    assert merged.trusted is False and merged.session_id == "d"


def test_it_cannot_be_subclassed_in_either_build() -> None:
    with pytest.raises(TypeError, match="subclass"):

        @dataclasses.dataclass(frozen=True)
        class Tagged(ExecutionContext):  # type: ignore[misc]
            tag: str = "mine"


def test_it_is_a_frozen_dataclass() -> None:
    ctx = ExecutionContext("s1", "/repo", turn_id="t1")
    assert dataclasses.is_dataclass(ctx)
    assert [f.name for f in dataclasses.fields(ctx)] == FIELDS
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.session_id = "s2"  # type: ignore[misc]
    assert dataclasses.replace(ctx, turn_id="t2") == ExecutionContext("s1", "/repo", turn_id="t2")
    assert ctx == ExecutionContext(session_id="s1", workspace_root="/repo", turn_id="t1")
    assert ctx != ExecutionContext("s1", "/repo")
    assert ExecutionContext().metadata == {}
    with pytest.raises(TypeError):
        ExecutionContext().metadata["k"] = 1  # type: ignore[index]
    assert "turn_id='t1'" in repr(ctx)
    assert copy.copy(ctx) is ctx  # frozen: in both builds (the compiled one used to raise)


async def test_calls_with_no_context_or_a_blank_one_get_the_defaults(tmp_path: Path) -> None:
    async def echo_session(args: Any, ctx: Any) -> str:
        return f"{ctx.context.session_id}:{ctx.context.workspace_root}"

    ex = executor(tool("who", echo_session, TEXT), workspace=tmp_path)  # defaults: s1, tmp_path
    expected = f"s1:{tmp_path}"
    assert (await ex.execute("who", {"text": "x"})).content == expected
    assert (await ex.execute("who", {"text": "x"}, ExecutionContext())).content == expected
    own = await ex.execute("who", {"text": "x"}, ExecutionContext(session_id="s9"))
    assert own.content == f"s9:{tmp_path}" and own.meta.session_id == "s9"


def test_a_relative_workspace_root_is_made_absolute_where_it_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert ExecutionContext(workspace_root=".").workspace_root == str(tmp_path)
    assert ExecutionContext(workspace_root="sub").workspace_root == str(tmp_path / "sub")
    assert ExecutionContext(workspace_root=tmp_path).workspace_root == str(tmp_path)
    absolute = ExecutionContext(workspace_root="/srv/ws")
    assert absolute.workspace_root == "/srv/ws"  # kept as given
    defaults = ExecutionContext.check_defaults({"workspace_root": "."})
    assert defaults["workspace_root"] == str(tmp_path)
    with pytest.raises(TypeError):
        ExecutionContext(workspace_root=42)  # type: ignore[arg-type]


def test_an_idempotency_key_cannot_be_a_default() -> None:
    with pytest.raises(ValueError, match="idempotency_key"):
        ExecutionContext.check_defaults({"idempotency_key": "k"})
    assert ExecutionContext.check_defaults({"idempotency_key": None}) == {"idempotency_key": None}


def test_every_field_is_a_constructor_argument_in_field_order() -> None:
    # The pure build replaces __init__ with one that stores through slot descriptors: a field
    # added to the class must be taken by both, in the same place, and stored as given.
    def answer(request: Any) -> Any:
        return request

    given: dict[str, Any] = {
        "session_id": "s",
        "workspace_root": "/w",
        "cancel": CancelToken(),
        "approver": answer,
        "agent_scope": "scope",
        "turn_id": "t",
        "trusted": True,
        "metadata": {"k": 1},
        "fs": object(),
        "shell": object(),
        "elicitor": answer,
        "idempotency_key": "key",
        "idempotency_scope": "tenant",
    }
    names = [field.name for field in dataclasses.fields(ExecutionContext)]
    assert names == list(given)
    made = ExecutionContext(*given.values())
    assert all(getattr(made, name) is value for name, value in given.items())
    assert ExecutionContext(**given) == made
