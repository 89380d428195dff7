"""An MCP server behind OAuth 2.1, with its own authorization server, for the bridge's auth tests.

Run as ``python oauth_server.py``: it binds 127.0.0.1 on a free port and prints ``PORT <n>``.
One process serves both roles (the issuer is the origin):

- the MCP server at ``/mcp`` (tools ``echo`` and ``whoami``), which wants a live bearer token and
  otherwise answers 401 with ``WWW-Authenticate: Bearer resource_metadata=...``;
- protected resource metadata, authorization server metadata (RFC 8414), dynamic registration,
  ``/authorize`` that approves at once (a 302 back with ``code``, ``state`` and ``iss``), and
  ``/token`` for the authorization code (PKCE S256 checked), refresh token (rotated) and client
  credentials (``client_secret_basic`` or ``private_key_jwt``) grants.

Environment: ``OAUTH_RECORD`` (a JSONL file: every grant, every token issued, every request the
MCP server let in or refused), ``OAUTH_TTL`` (token lifetime, seconds), ``OAUTH_CLIENTS`` (JSON:
pre-registered clients ``{id: {"secret": ..., "public_key": pem}}``), ``OAUTH_MODE``: ``login``
(``/authorize`` shows a sign-in page instead of redirecting), ``deny`` (the token endpoint refuses
every grant, quoting every token it issued), ``garbage`` (it answers with something that is not
a token), ``scope`` (``/mcp`` answers 403 ``insufficient_scope`` to every tools/call);
``POST /control/mode?to=...`` changes it and ``POST /control/revoke`` ends every token.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import socket
import sys
import time
from typing import Any
from urllib.parse import parse_qs, urlencode

import anyio
import jwt
from mcp.server.mcpserver import MCPServer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

RECORD = os.environ.get("OAUTH_RECORD")
TTL = int(os.environ.get("OAUTH_TTL", "3600"))
MODE = {"now": os.environ.get("OAUTH_MODE", "")}
CLIENTS: dict[str, dict[str, Any]] = json.loads(os.environ.get("OAUTH_CLIENTS") or "{}")
ORIGIN = {"url": ""}
CODES: dict[str, dict[str, Any]] = {}
ACCESS: dict[str, float] = {}  # access token -> expiry (server clock)
REFRESH: dict[str, str] = {}  # refresh token -> client id
ISSUED: list[str] = []  # every token handed out

mcp_server = MCPServer("oauth-fixture")


@mcp_server.tool()
def echo(text: str) -> str:
    return text


@mcp_server.tool()
def whoami() -> str:
    return "a signed-in client"


def record(event: str, **fields: Any) -> None:
    if RECORD:
        with open(RECORD, "a", encoding="utf-8") as f:
            f.write(json.dumps({"event": event, "at": time.time(), **fields}) + "\n")


def issue(client_id: str, *, refresh: bool) -> dict[str, Any]:
    access = "at-" + secrets.token_urlsafe(24)
    ACCESS[access] = time.time() + TTL
    body: dict[str, Any] = {"access_token": access, "token_type": "Bearer", "expires_in": TTL}
    if refresh:
        body["refresh_token"] = REFRESH_PREFIX + secrets.token_urlsafe(24)
        REFRESH[body["refresh_token"]] = client_id
    ISSUED.extend(t for t in (access, body.get("refresh_token")) if t)
    record("issued", access=access, refresh=body.get("refresh_token"))
    return body


REFRESH_PREFIX = "rt-"


async def protected_resource(request: Request) -> Response:
    base = ORIGIN["url"]
    record("resource_metadata", path=request.url.path)
    return JSONResponse(
        {"resource": f"{base}/mcp", "authorization_servers": [base], "scopes_supported": ["mcp"]}
    )


async def authorization_server(request: Request) -> Response:
    base = ORIGIN["url"]
    record("metadata")
    return JSONResponse(
        {
            "issuer": base,
            "authorization_endpoint": f"{base}/authorize",
            "token_endpoint": f"{base}/token",
            "registration_endpoint": f"{base}/register",
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "refresh_token", "client_credentials"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": [
                "client_secret_basic",
                "client_secret_post",
                "private_key_jwt",
                "none",
            ],
            "authorization_response_iss_parameter_supported": True,
        }
    )


async def register(request: Request) -> Response:
    body = await request.json()
    client_id = "dcr-" + secrets.token_hex(8)
    CLIENTS[client_id] = {"redirect_uris": body.get("redirect_uris", [])}
    record("register", client_id=client_id)
    return JSONResponse({**body, "client_id": client_id}, status_code=201)


async def authorize(request: Request) -> Response:
    query = request.query_params
    record("authorize", **dict(query))
    if MODE["now"] == "login":
        return HTMLResponse("<form>sign in</form>")
    if query.get("client_id") not in CLIENTS or query.get("code_challenge_method") != "S256":
        return JSONResponse({"error": "invalid_request"}, status_code=400)
    code = secrets.token_urlsafe(16)
    CODES[code] = {
        "client_id": query["client_id"],
        "challenge": query["code_challenge"],
        "redirect_uri": query["redirect_uri"],
    }
    back = {"code": code, "state": query.get("state", ""), "iss": ORIGIN["url"]}
    return RedirectResponse(f"{query['redirect_uri']}?{urlencode(back)}", status_code=302)


def client_of(request: Request, form: dict[str, str]) -> str | None:
    """The authenticated client of a token request (None: authentication failed)."""
    header = request.headers.get("authorization", "")
    if header.startswith("Basic "):
        client_id, _, secret = base64.b64decode(header[6:]).decode().partition(":")
        known = CLIENTS.get(client_id, {})
        return client_id if known.get("secret") and known["secret"] == secret else None
    if form.get("client_assertion"):
        claims = jwt.decode(form["client_assertion"], options={"verify_signature": False})
        known = CLIENTS.get(claims.get("iss", ""), {})
        try:
            jwt.decode(
                form["client_assertion"],
                known.get("public_key", ""),
                algorithms=["RS256", "ES256", "EdDSA"],
                audience=ORIGIN["url"],
            )
        except jwt.PyJWTError:
            return None
        return str(claims["iss"])
    client_id = form.get("client_id", "")
    if client_id in CLIENTS and CLIENTS[client_id].get("secret"):
        return client_id if CLIENTS[client_id]["secret"] == form.get("client_secret") else None
    return client_id if client_id in CLIENTS else None


async def token(request: Request) -> Response:
    form = {k: v[0] for k, v in parse_qs((await request.body()).decode()).items()}
    grant = form.get("grant_type", "")
    record("grant", grant=grant, fields=sorted(form))
    if MODE["now"] == "deny":  # and babbles: it quotes every token it ever issued
        said = " ".join(ISSUED) or "none"
        return JSONResponse(
            {"error": "invalid_grant", "error_description": f"not accepted: {said}"},
            status_code=400,
        )
    if MODE["now"] == "garbage":
        return Response(b"\x00 not a token", media_type="application/json")
    client_id = client_of(request, form)
    if client_id is None:
        return JSONResponse({"error": "invalid_client"}, status_code=401)
    if grant == "authorization_code":
        issued = CODES.pop(form.get("code", ""), None)
        verifier = form.get("code_verifier", "")
        digest = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
        if (
            issued is None
            or issued["client_id"] != client_id
            or issued["redirect_uri"] != form.get("redirect_uri")
            or digest.decode().rstrip("=") != issued["challenge"]
        ):
            return JSONResponse({"error": "invalid_grant"}, status_code=400)
        return JSONResponse(issue(client_id, refresh=True))
    if grant == "refresh_token":
        if REFRESH.pop(form.get("refresh_token", ""), None) != client_id:
            return JSONResponse({"error": "invalid_grant"}, status_code=400)
        return JSONResponse(issue(client_id, refresh=True))
    if grant == "client_credentials":
        return JSONResponse(issue(client_id, refresh=False))
    return JSONResponse({"error": "unsupported_grant_type"}, status_code=400)


async def revoke(request: Request) -> Response:
    """``POST /control/revoke``: every token stops working (the tests' hook)."""
    ACCESS.clear()
    REFRESH.clear()
    return JSONResponse({"revoked": True})


async def mode(request: Request) -> Response:
    """``POST /control/mode?to=deny``: the mode from now on (the tests' hook)."""
    MODE["now"] = request.query_params.get("to", "")
    return JSONResponse({"mode": MODE["now"]})


class BearerGate:
    """In front of the MCP server: a live bearer token, or 401 (403 in ``scope`` mode)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        bearer = headers.get("authorization", "").removeprefix("Bearer ")
        live = ACCESS.get(bearer, 0) > time.time()
        record("mcp", token=bearer or None, live=live, method=scope["method"])
        base = ORIGIN["url"]
        if not live:
            challenge = (
                f'Bearer error="invalid_token", resource_metadata='
                f'"{base}/.well-known/oauth-protected-resource/mcp"'
            )
            response = JSONResponse({"error": "invalid_token"}, status_code=401)
            response.headers["WWW-Authenticate"] = challenge
            await response(scope, receive, send)
            return
        if MODE["now"] == "scope" and scope["method"] == "POST":
            body, receive = await _read_body(receive)
            if b'"tools/call"' not in body:
                await self.app(scope, receive, send)
                return
            response = JSONResponse({"error": "insufficient_scope"}, status_code=403)
            response.headers["WWW-Authenticate"] = (
                'Bearer error="insufficient_scope", scope="admin", resource_metadata='
                f'"{base}/.well-known/oauth-protected-resource/mcp"'
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


async def _read_body(receive: Receive) -> tuple[bytes, Receive]:
    """The request body, and a ``receive`` that hands it to the app again."""
    chunks: list[bytes] = []
    more = True
    while more:
        message = await receive()
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    body = b"".join(chunks)
    sent = {"done": False}

    async def replay() -> Any:
        if not sent["done"]:
            sent["done"] = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return body, replay


def build_app() -> Starlette:
    mcp_app = mcp_server.streamable_http_app(host="127.0.0.1")
    well_known = "/.well-known/oauth-protected-resource"
    app = Starlette(
        routes=[
            Route(f"{well_known}/mcp", protected_resource),
            Route(well_known, protected_resource),
            Route("/.well-known/oauth-authorization-server", authorization_server),
            Route("/register", register, methods=["POST"]),
            Route("/authorize", authorize),
            Route("/token", token, methods=["POST"]),
            Route("/control/revoke", revoke, methods=["POST"]),
            Route("/control/mode", mode, methods=["POST"]),
            Mount("/", app=BearerGate(mcp_app)),
        ],
        lifespan=mcp_app.router.lifespan_context,
    )
    return app


async def main() -> None:
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # connections wait in the backlog until the server accepts them
    port = sock.getsockname()[1]
    ORIGIN["url"] = f"http://127.0.0.1:{port}"
    print(f"PORT {port}", flush=True)
    config = uvicorn.Config(build_app(), log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve(sockets=[sock])


if __name__ == "__main__":
    sys.exit(anyio.run(main))
