"""The client that the official MCP conformance suite drives (``conformance client --command``).

The suite starts a test server for one scenario, runs ``<this command> <server url>`` with
``MCP_CONFORMANCE_SCENARIO`` (and, for some scenarios, ``MCP_CONFORMANCE_CONTEXT``) set, and
judges what reached its server. This client does what an agent server does: it connects with
``fastgate.mcp.MCPBridge`` (signing in with an ``OAuthClient`` where the server asks), and calls
the tools the bridge registered through a ``ToolExecutor``, answering the server's questions
through the context's elicitor. It exits 0 when everything it did succeeded, 1 otherwise (some
scenarios expect the client to refuse, and the suite allows that).

Nothing here talks MCP itself: what the suite sees is fastgate's.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urljoin

import httpx2

from fastgate import (
    ElicitationRequest,
    ElicitationResponse,
    ExecutionContext,
    PermissionMode,
    ToolExecutor,
    ToolRegistry,
)
from fastgate.mcp import MCPBridge, MCPServerConfig, OAuthClient, TokenStore

SERVER = "conformance"
# A client ID metadata document address (CIMD): the suite's authorization servers accept it
# without fetching it.
CIMD_URL = "https://conformance-test.local/client-metadata.json"
SESSION = "conformance"

# What each scenario calls after connecting: (remote tool name, arguments); None: every tool the
# bridge registered, with arguments made from its schema. Scenarios not listed call nothing
# beyond connecting and listing, except auth scenarios, which call test-tool when it exists.
CALLS: dict[str, list[tuple[str, dict[str, Any]]] | None] = {
    "tools_call": [("add_numbers", {"a": 2, "b": 3})],
    "sse-retry": [("test_reconnection", {})],
    "elicitation-sep1034-client-defaults": [("test_client_elicitation_defaults", {})],
    "sep-2322-client-request-state": [
        ("test_mrtr_echo_state", {}),
        ("test_mrtr_unrelated", {}),
        ("test_mrtr_no_state", {}),
        ("test_mrtr_no_result_type", {}),
    ],
    "http-standard-headers": None,
    "http-invalid-tool-headers": None,
}


async def oauth_for(url: str, scenario: str, context: dict[str, Any]) -> OAuthClient | None:
    """How this scenario's server is signed in to: the configuration a user would write."""
    if not scenario.startswith("auth/"):
        return None
    store = TokenStore.in_memory()
    if "idp_id_token" in context:  # enterprise-managed authorization (SEP-990)
        return OAuthClient(
            client_id=context["client_id"],
            client_secret=context["client_secret"],
            issuer=await authorization_server(url),
            identity_assertion=identity_provider(context),
            token_store=store,
        )
    if scenario == "auth/client-credentials-jwt":
        return OAuthClient(
            client_id=context["client_id"],
            private_key_pem=context["private_key_pem"],
            token_store=store,
        )
    if scenario == "auth/client-credentials-basic":
        return OAuthClient(
            client_id=context["client_id"],
            client_secret=context["client_secret"],
            grant="client_credentials",
            token_store=store,
        )
    if scenario == "auth/pre-registration":
        return OAuthClient(
            client_id=context["client_id"],
            client_secret=context["client_secret"],
            token_store=store,
        )
    # Authorization code with PKCE, signed in headless (the suite's servers approve at once):
    # a client ID metadata document where the server takes one, else dynamic registration.
    return OAuthClient(client_metadata_url=CIMD_URL, token_store=store)


async def authorization_server(url: str) -> str:
    """The issuer an enterprise deployment would configure: here, read from the server's
    protected resource metadata (path-suffixed, as the suite serves it)."""
    well_known = urljoin(url, "/.well-known/oauth-protected-resource" + httpx2.URL(url).path)
    async with httpx2.AsyncClient() as http:
        response = await http.get(well_known)
        response.raise_for_status()
        return str(response.json()["authorization_servers"][0])


def identity_provider(context: dict[str, Any]) -> Callable[[str, str], Awaitable[str]]:
    """The organisation's identity provider: it exchanges the user's ID token for an identity
    assertion grant (ID-JAG) for the authorization server and MCP server asked (RFC 8693)."""

    async def exchange(audience: str, resource: str) -> str:
        form = {
            "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
            "requested_token_type": "urn:ietf:params:oauth:token-type:id-jag",
            "audience": audience,
            "resource": resource,
            "subject_token": context["idp_id_token"],
            "subject_token_type": "urn:ietf:params:oauth:token-type:id_token",
            "client_id": context.get("idp_client_id", ""),
        }
        async with httpx2.AsyncClient() as http:
            response = await http.post(context["idp_token_endpoint"], data=form)
            response.raise_for_status()
            return str(response.json()["access_token"])

    return exchange


def arguments_for(schema: Any) -> dict[str, Any]:
    """Arguments that satisfy a tool's schema: a plain value for each required property."""
    if not isinstance(schema, dict):
        return {}
    properties = schema.get("properties") or {}
    plain = {"string": "x", "integer": 1, "number": 1, "boolean": True, "array": [], "object": {}}
    args: dict[str, Any] = {}
    for name in schema.get("required") or ():
        spec = properties.get(name) if isinstance(properties, dict) else None
        kind = spec.get("type") if isinstance(spec, dict) else None
        if isinstance(spec, dict) and "enum" in spec and spec["enum"]:
            args[name] = spec["enum"][0]
        elif isinstance(kind, str) and kind in plain:
            args[name] = plain[kind]
        else:
            args[name] = "x"
    return args


def elicitor_for(scenario: str) -> Callable[[ElicitationRequest], Awaitable[ElicitationResponse]]:
    """Answers the server's questions as the scenario expects a person would."""

    async def accept(request: ElicitationRequest) -> ElicitationResponse:
        if scenario == "sep-2322-client-request-state":
            return ElicitationResponse(action="accept", content={"confirmed": True})
        return ElicitationResponse(action="accept", content={})  # the defaults fill it

    return accept


async def run(url: str, scenario: str, context: dict[str, Any]) -> int:
    registry = ToolRegistry()
    auth = await oauth_for(url, scenario, context)
    config = MCPServerConfig(SERVER, url=url, auth=auth, required=True, startup_timeout=25.0)
    executor = ToolExecutor(registry, mode=PermissionMode.YOLO)
    ctx = ExecutionContext(session_id=SESSION, elicitor=elicitor_for(scenario))
    failures = 0
    async with MCPBridge(registry, [config]) as bridge:
        status = bridge.status()[SERVER]
        print(
            f"connected: {status['protocol_version']}, tools {status['tool_names']}",
            file=sys.stderr,
        )
        if status["quarantined"]:
            print(f"quarantined: {status['quarantined']}", file=sys.stderr)
        for name, args in planned_calls(scenario, context, registry, status["tool_names"]):
            result = await executor.execute(name, args, ctx)
            print(f"{name}: ok={result.ok} {result.error or ''}", file=sys.stderr)
            failures += 0 if result.ok else 1
    return 1 if failures else 0


def planned_calls(
    scenario: str, context: dict[str, Any], registry: ToolRegistry, registered: list[str]
) -> list[tuple[str, dict[str, Any]]]:
    prefix = f"mcp__{SERVER}__"

    def named(remote: str) -> str:
        return prefix + remote

    if "toolCalls" in context:  # the scenario says what to call, and with what
        calls = [(c["name"], dict(c.get("arguments") or {})) for c in context["toolCalls"]]
        # A null argument is an absent one (fastgate validates arguments against the schema).
        return [(named(n), {k: v for k, v in a.items() if v is not None}) for n, a in calls]
    if scenario == "json-schema-2020-12-preservation":
        focal = registry.resolve(named("json_schema_2020_12_tool"))
        schema = focal.parameters if focal is not None else None
        return [(named("json_schema_echo"), {"schema": schema})]
    if scenario in CALLS:
        planned = CALLS[scenario]
        if planned is None:
            return [(n, arguments_for(_schema(registry, n))) for n in registered]
        return [(named(n), a) for n, a in planned]
    if scenario.startswith("auth/") and named("test-tool") in registered:
        return [(named("test-tool"), {})]
    return []


def _schema(registry: ToolRegistry, name: str) -> Any:
    definition = registry.resolve(name)
    return definition.parameters if definition is not None else None


def main() -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    url = sys.argv[-1]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    try:
        return asyncio.run(run(url, scenario, context))
    except Exception as exc:  # the scenario may expect a refusal: say what happened
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
