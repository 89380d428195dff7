"""``fastgate serve``: the MCP gateway (SPEC §23). ``Gateway(executor, ...)`` serves an
executor's tools to MCP clients over streamable HTTP (``gateway.asgi()``, both protocol eras)
or stdio (``gateway.run_stdio()``), each call judged, admitted fairly, journaled and audited.

Needs the ``serve`` extra (the MCP SDK's server side, Starlette, prometheus-client, uvicorn):
``pip install 'fastgate[serve]'``.
"""

from __future__ import annotations

try:
    import mcp.server  # noqa: F401
    import prometheus_client  # noqa: F401
    import starlette  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        f"fastgate.serve needs the 'serve' extra ({exc.name} is missing): "
        "pip install 'fastgate[serve]'"
    ) from exc

from fastgate.serve._approvals import ApprovalEvent as ApprovalEvent
from fastgate.serve._approvals import PendingApproval as PendingApproval
from fastgate.serve._approvals import PendingApprovals as PendingApprovals
from fastgate.serve._audit import GatewayAudit as GatewayAudit
from fastgate.serve._callers import LOCAL as LOCAL
from fastgate.serve._callers import Caller as Caller
from fastgate.serve._callers import TokensError as TokensError
from fastgate.serve._callers import TokenTable as TokenTable
from fastgate.serve._callers import token_digest as token_digest
from fastgate.serve._console_auth import AdminTokens as AdminTokens
from fastgate.serve._console_auth import ConsoleTokensError as ConsoleTokensError
from fastgate.serve._gateway import Gateway as Gateway
from fastgate.serve._state import state_key as state_key
from fastgate.serve._uvicorn import http_protocol as http_protocol

__all__ = (
    "LOCAL",
    "AdminTokens",
    "ApprovalEvent",
    "Caller",
    "ConsoleTokensError",
    "Gateway",
    "GatewayAudit",
    "PendingApproval",
    "PendingApprovals",
    "TokenTable",
    "TokensError",
    "http_protocol",
    "state_key",
    "token_digest",
)
