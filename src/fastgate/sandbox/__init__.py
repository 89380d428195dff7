"""The command sandbox (SPEC §22).

The network half: ``NetworkPolicy`` says where a sandboxed program may connect;
``NetworkProxy`` is fastgate's own HTTP proxy (``CONNECT`` and plain HTTP) that enforces it for
one call and reports each decision as a ``NetworkEvent``. Host names are canonicalised once
(case, IDNA, trailing dot; NUL, control characters and IP literals refused), resolved once, and
the connection is pinned to the address that was checked.
"""

from __future__ import annotations

from fastgate.sandbox._network import REASONS as NETWORK_REASONS
from fastgate.sandbox._network import NetworkEvent as NetworkEvent
from fastgate.sandbox._network import NetworkPolicy as NetworkPolicy
from fastgate.sandbox._proxy import NetworkProxy as NetworkProxy
from fastgate.sandbox._proxy import Resolver as Resolver

__all__ = (
    "NETWORK_REASONS",
    "NetworkEvent",
    "NetworkPolicy",
    "NetworkProxy",
    "Resolver",
)
