"""freeze(): snapshots of arguments that neither a tool nor a hook can change."""

from __future__ import annotations

import copy
import importlib
import json
import pickle
from collections.abc import Callable
from typing import Any
from unittest import mock

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fastgate.model.freeze import MAX_VALUES, FrozenDict, FrozenList, NotJSON, freeze, thaw


def test_snapshot_is_deep_independent_and_read_only() -> None:
    original: dict[str, Any] = {"a": [1, {"b": "c"}], "n": None}
    frozen = freeze(original)
    original["a"][1]["b"] = "changed"
    assert frozen == {"a": [1, {"b": "c"}], "n": None}
    assert isinstance(frozen, FrozenDict) and isinstance(frozen["a"], FrozenList)
    target: Any = frozen  # the mutators are typed as refusing; call them as a tool would
    mutators: list[Callable[[], object]] = [
        lambda: target.__setitem__("x", 1),
        lambda: target.update(x=1),
        lambda: target.pop("a"),
        lambda: target["a"].append(2),
        lambda: target["a"][1].clear(),
        lambda: target["a"].sort(),
    ]
    for mutate in mutators:
        with pytest.raises(TypeError, match="read-only"):
            mutate()


def test_it_still_behaves_as_json_for_ordinary_code() -> None:
    frozen = freeze({"a": [1, 2.5, True, None, "s"], "b": {"c": []}})
    assert json.loads(json.dumps(frozen)) == frozen
    assert msgspec.json.decode(msgspec.json.encode(frozen)) == frozen
    plain = copy.deepcopy(frozen)
    plain["b"]["c"].append(1)  # copies are ordinary, mutable values
    assert type(plain) is dict and type(plain["a"]) is list
    assert type(frozen.copy()) is dict and type(pickle.loads(pickle.dumps(frozen))) is dict
    assert thaw(frozen) == frozen and type(thaw(frozen)["a"]) is list


def test_deep_values_are_copied_without_recursion() -> None:
    deep: Any = "leaf"
    for _ in range(100_000):
        deep = [deep]
    frozen = freeze({"v": deep})
    node = frozen["v"]
    depth = 0
    while isinstance(node, list):
        node = node[0]
        depth += 1
    assert depth == 100_000 and node == "leaf"


@pytest.mark.parametrize("bad", [{1: "x"}, {"a": {1, 2}}, {"a": b"bytes"}, [object()]])
def test_non_json_values_are_refused(bad: Any) -> None:
    with pytest.raises(NotJSON):
        freeze(bad)


def test_a_value_that_contains_itself_is_refused_not_looped() -> None:
    cyclic: dict[str, Any] = {}
    cyclic["self"] = cyclic
    with pytest.raises(NotJSON, match=f"{MAX_VALUES:,}"):
        freeze(cyclic)


# The module, not the function of the same name the package exports.
freeze_module = importlib.import_module("fastgate.model.freeze")

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=5), inner, max_size=5)
    ),
    max_leaves=40,
)


@given(_JSON)
def test_a_snapshot_equals_its_value_and_thaws_back(value: Any) -> None:
    frozen = freeze(value)
    assert frozen == value and thaw(frozen) == value
    assert type(thaw(frozen)) is type(value)


def _count(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + sum(_count(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return 1 + sum(_count(v) for v in value)
    return 1


@given(_JSON)
def test_every_value_counts_once_against_the_bound(value: Any) -> None:
    # Exactly MAX_VALUES values pass, one more is refused, whatever the shape.
    size = _count(value)
    with mock.patch.object(freeze_module, "MAX_VALUES", size):
        assert freeze(value) == value
    if size > 1:
        with mock.patch.object(freeze_module, "MAX_VALUES", size - 1), pytest.raises(NotJSON):
            freeze(value)


@pytest.mark.parametrize(
    "value",
    [
        [[]] * 5,
        [{}] * 5,
        list(range(5)),
        {"a": [1, [2, {"b": 3}]], "c": True},
        ([1, 2], {"x": (3,)}),
    ],
)
def test_the_bound_counts_containers_and_scalars_alike(value: Any) -> None:
    size = _count(value)
    with mock.patch.object(freeze_module, "MAX_VALUES", size):
        freeze(value)
    with mock.patch.object(freeze_module, "MAX_VALUES", size - 1), pytest.raises(NotJSON):
        freeze(value)
