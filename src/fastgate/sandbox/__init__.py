"""The command sandbox (SPEC §22).

``SandboxPolicy`` says what a sandboxed command may do; ``SandboxedShell`` (a ``Shell`` of
``fastgate.builtin``) runs each command confined by it; ``sandbox_support()`` says which
mechanism this host has (user namespaces with Landlock and seccomp, or Landlock and seccomp
alone); docs/sandbox.md says what each one enforces.

The network half: ``NetworkPolicy`` says where a sandboxed program may connect;
``NetworkProxy`` is fastgate's own HTTP proxy (``CONNECT`` and plain HTTP) that enforces it for
one call and reports each decision as a ``NetworkEvent``. Host names are canonicalised once
(case, IDNA, trailing dot; NUL, control characters and IP literals refused), resolved once, and
the connection is pinned to the address that was checked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastgate.sandbox._network import REASONS as NETWORK_REASONS
from fastgate.sandbox._network import NetworkEvent as NetworkEvent
from fastgate.sandbox._network import NetworkPolicy as NetworkPolicy
from fastgate.sandbox._policy import DEFAULT_HIDDEN as DEFAULT_HIDDEN
from fastgate.sandbox._policy import DEFAULT_PROTECTED as DEFAULT_PROTECTED
from fastgate.sandbox._policy import SandboxPolicy as SandboxPolicy
from fastgate.sandbox._proxy import NetworkProxy as NetworkProxy
from fastgate.sandbox._proxy import Resolver as Resolver
from fastgate.sandbox._support import SandboxSupport as SandboxSupport
from fastgate.sandbox._support import SandboxUnavailableWarning as SandboxUnavailableWarning
from fastgate.sandbox._support import sandbox_support as sandbox_support

if TYPE_CHECKING:
    from fastgate.sandbox._shell import SandboxedShell as SandboxedShell

__all__ = (
    "DEFAULT_HIDDEN",
    "DEFAULT_PROTECTED",
    "NETWORK_REASONS",
    "NetworkEvent",
    "NetworkPolicy",
    "NetworkProxy",
    "Resolver",
    "SandboxPolicy",
    "SandboxSupport",
    "SandboxUnavailableWarning",
    "SandboxedShell",
    "sandbox_support",
)


def __getattr__(name: str) -> Any:
    # The shell needs fastgate.builtin (its extra); the rest of the package does not.
    if name == "SandboxedShell":
        from fastgate.sandbox import _shell

        return getattr(_shell, name)
    raise AttributeError(f"module 'fastgate.sandbox' has no attribute {name!r}")
