"""A hand-written stdio MCP server of the 2026 era (stateless: ``server/discover``, no
handshake) that asks for input the 2026 way, for the bridge's elicitation tests: a
``tools/call`` is answered ``input_required`` with ``inputRequests`` and a ``requestState``,
until the client's retries have answered every round.

One tool, ``ask``, whose arguments say what to ask: ``{"rounds": [{key: <input request>, ...},
...], "tag": "..."}`` asks one round after another; ``{"forever": true}`` asks for ever. The state
of round ``n`` is ``state_for(tag, n)``: it holds characters a JSON encoder may write another way
(escapes, non-ASCII, a line separator, ``/``), so a retry that does not echo it as it
came is caught: the server answers such a retry with ``isError``. Once every round is answered it
returns the last round's ``inputResponses`` as JSON text.

With ``FIXTURE_RECORD=<file>`` it appends one JSON line per ``tools/call``: ``{"event": "call",
"id", "tag", "state", "state_ok", "responses"}``. Run as ``python elicit_modern_server.py``.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

VERSION = "2026-07-28"
RECORD = os.environ.get("FIXTURE_RECORD")


def state_for(tag: Any, n: int) -> str:
    return f'round {n} of {tag}: "quoted" \\ back/slash é ☃ \u2028 \t tab 🎲 <&> ' + "x" * 64


def record(event: str, **fields: Any) -> None:
    if RECORD:
        with open(RECORD, "a", encoding="utf-8") as f:
            f.write(json.dumps({"event": event, **fields}) + "\n")


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def text(value: Any, *, error: bool = False) -> dict[str, Any]:
    result: dict[str, Any] = {
        "resultType": "complete",
        "content": [{"type": "text", "text": json.dumps(value)}],
    }
    if error:
        result["isError"] = True
    return result


def call(request_id: Any, params: dict[str, Any]) -> dict[str, Any]:
    arguments = params.get("arguments") or {}
    tag = arguments.get("tag")
    state = params.get("requestState")
    responses = params.get("inputResponses")
    # The round the state names: 0 for a first call (no state).
    n = 0
    if isinstance(state, str) and state.startswith("round "):
        n = int(state.split()[1])
    state_ok = state is None if n == 0 else state == state_for(tag, n)
    record("call", id=request_id, tag=tag, state=state, state_ok=state_ok, responses=responses)
    if not state_ok:
        return text({"error": "requestState was not echoed as sent", "got": state}, error=True)
    if arguments.get("forever"):
        request = {
            "method": "elicitation/create",
            "params": {
                "mode": "form",
                "message": f"Again ({n})?",
                "requestedSchema": {"type": "object", "properties": {}},
            },
        }
        return {
            "resultType": "input_required",
            "inputRequests": {"again": request},
            "requestState": state_for(tag, n + 1),
        }
    rounds = arguments.get("rounds") or []
    if n < len(rounds):
        result: dict[str, Any] = {
            "resultType": "input_required",
            "requestState": state_for(tag, n + 1),
        }
        if rounds[n]:
            result["inputRequests"] = rounds[n]
        return result
    return text({"tag": tag, "rounds": n, "responses": responses})


def answer(request_id: Any, method: Any, params: dict[str, Any]) -> dict[str, Any] | None:
    if method == "server/discover":
        return {
            "supportedVersions": [VERSION],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "elicit-modern", "version": "0"},
            "resultType": "complete",
        }
    if method == "tools/list":
        schema = {"type": "object", "properties": {"tag": {"type": "string"}}}
        return {"tools": [{"name": "ask", "inputSchema": schema}], "resultType": "complete"}
    if method == "tools/call" and params.get("name") == "ask":
        return call(request_id, params)
    return None


def main() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        request_id, method = message.get("id"), message.get("method")
        if request_id is None:
            continue  # a notification
        result = answer(request_id, method, message.get("params") or {})
        if result is None:
            error = {"code": -32601, "message": f"Method not found: {method}"}
            send({"jsonrpc": "2.0", "id": request_id, "error": error})
        else:
            send({"jsonrpc": "2.0", "id": request_id, "result": result})


if __name__ == "__main__":
    main()
