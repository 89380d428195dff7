"""Making an ``ExecutionContext`` in the compiled build: through a compiled function.

Servers make a context per call, so its construction is on every call's path. Called as a
class, the compiled ``ExecutionContext`` parses its keyword arguments the slow, generic way;
``route_context_calls`` has every call of the class go to ``ExecutionContext`` below instead,
a compiled function with the same parameters (see ``fastgate/_core/_construct.pyx``). The pure
build keeps the class's own ``__init__``: there, this would add a call and save nothing."""

from __future__ import annotations

import os
import types
from collections.abc import Mapping
from typing import Any

from fastgate.model.cancel import CancelToken
from fastgate.model.context import _EMPTY, Approver, Elicitor
from fastgate.model.context import ExecutionContext as _Context


def ExecutionContext(  # named as the class: TypeErrors name it as the class does
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
) -> _Context:
    return _Context(
        session_id,
        workspace_root,
        cancel,
        approver,
        agent_scope,
        turn_id,
        trusted,
        metadata,
        fs,
        shell,
        elicitor,
        idempotency_key,
        idempotency_scope,
    )


def route_context_calls() -> None:
    """In the compiled build, route calls of the class to the function above."""
    if isinstance(vars(_Context)["__init__"], types.FunctionType):
        return  # the pure build
    from fastgate._core import route_construction

    if route_construction is not None:
        route_construction(_Context, ExecutionContext)
