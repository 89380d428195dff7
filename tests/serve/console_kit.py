"""What the console's tests share: an admin token and its file, a payment tool a settings
file's rule asks about, and a gateway serving the console."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import fastgate
from fastgate import PermissionConfig, ToolKind
from fastgate.serve import Gateway, token_digest
from tests.serve.kit import executor, registry

ADMIN = "console-admin-token-0123456789"
PAID: list[dict[str, Any]] = []


@fastgate.tool(kind=ToolKind.EXECUTE)
async def pay(amount: float, to: str, memo: str = "") -> str:
    """Pay someone.

    Args:
        amount: how much, in euros.
        to: the payee.
        memo: a note for the payee.
    """
    PAID.append({"amount": amount, "to": to, "memo": memo})
    return f"paid {amount:.2f} EUR to {to}"


def admins(folder: Path) -> Path:
    path = folder / "admins.txt"
    path.write_text(f"# the console's admins\n{token_digest(ADMIN)}\n")
    return path


def settings(folder: Path) -> Path:
    """A settings file whose ask rule the console must name, with the file."""
    path = folder / "settings.json"
    path.write_text(json.dumps({"permissions": {"ask": ["pay"], "deny": ["forbidden"]}}))
    return path


def console_gateway(folder: Path, **options: Any) -> Gateway:
    served = executor(registry(pay), permissions=PermissionConfig.load(settings(folder)))
    options.setdefault("approvals", "console")
    return Gateway(served, console=True, console_tokens=admins(folder), **options)


def origin_of(url: str) -> str:
    return url.removesuffix("/mcp")
