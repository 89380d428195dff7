"""What only the pure build needs: a faster ``ExecutionContext.__init__`` there.

Kept out of ``context.py``, which mypyc compiles: there, this code made every call a little
slower although it never runs in that build."""

from __future__ import annotations

import dataclasses
import os
import types
from collections.abc import Mapping
from typing import Any

from fastgate.model.cancel import CancelToken
from fastgate.model.context import _EMPTY, Approver, Elicitor, ExecutionContext, _absolute


def store_context_fields_by_descriptor() -> None:
    """In the pure build, give ``ExecutionContext`` an ``__init__`` that stores each field
    through its slot descriptor: there, ``object.__setattr__`` by name costs about twice as
    much (a context is made per call). Compiled, ``__init__`` is a native method and stays."""
    namespace = vars(ExecutionContext)
    if not isinstance(namespace["__init__"], types.FunctionType):
        return
    (session_id_, workspace_root_, cancel_, approver_, agent_scope_, turn_id_, trusted_,
     metadata_, fs_, shell_, elicitor_, idempotency_key_, idempotency_scope_) = (
        namespace[field.name].__set__
        for field in dataclasses.fields(ExecutionContext)
    )  # fmt: skip

    def init(
        self: ExecutionContext,
        session_id: str | None = None,
        workspace_root: str | os.PathLike[str] | None = None,
        cancel: CancelToken | None = None,
        approver: Approver | None = None,
        agent_scope: str | None = None,
        turn_id: str | None = None,
        trusted: bool | None = None,
        metadata: Mapping[str, Any] = _EMPTY,
        fs: Any = None,
        shell: Any = None,
        elicitor: Elicitor | None = None,
        idempotency_key: Any = None,
        idempotency_scope: str | None = None,
    ) -> None:
        session_id_(self, session_id)
        if workspace_root is not None and (
            type(workspace_root) is not str or workspace_root[:1] != "/" or "\x00" in workspace_root
        ):
            workspace_root = _absolute(workspace_root)
        workspace_root_(self, workspace_root)
        cancel_(self, cancel)
        approver_(self, approver)
        agent_scope_(self, agent_scope)
        turn_id_(self, turn_id)
        trusted_(self, trusted)
        metadata_(self, metadata)
        fs_(self, fs)
        shell_(self, shell)
        elicitor_(self, elicitor)
        idempotency_key_(self, idempotency_key)
        idempotency_scope_(self, idempotency_scope)

    init.__name__, init.__qualname__ = "__init__", "ExecutionContext.__init__"
    setattr(ExecutionContext, "__init__", init)  # noqa: B010 -- past mypy's method check
