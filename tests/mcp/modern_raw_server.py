"""A hand-written stdio MCP server of the 2026 era whose ``tools/call`` results are written byte
for byte here, so a test can send what the SDK's own server never would: a result without
``resultType``, an ``input_required`` result, an unknown ``resultType``.

It answers ``server/discover`` (so the client speaks 2026-07-28 statelessly), refuses
``initialize`` and ``subscriptions/listen``, and lists one tool per result shape in ``RESULTS``.
Run as ``python modern_raw_server.py``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

VERSION = "2026-07-28"
NAME_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
ASK_NAME = {
    "method": "elicitation/create",
    "params": {"mode": "form", "message": "Who is asking?", "requestedSchema": NAME_SCHEMA},
}

RESULTS: dict[str, dict[str, Any]] = {
    "untyped": {"content": [{"type": "text", "text": "done without a resultType"}]},
    "complete": {
        "resultType": "complete",
        "content": [{"type": "text", "text": "done, said complete"}],
    },
    "untyped_structured": {"content": [], "structuredContent": {"sum": 3}},
    "untyped_error": {"content": [{"type": "text", "text": "it broke"}], "isError": True},
    "untyped_empty": {},
    "input_required": {
        "resultType": "input_required",
        "inputRequests": {"who": ASK_NAME},
        "requestState": "opaque-state-1",
    },
    "input_required_state_only": {"resultType": "input_required", "requestState": "s2"},
    "mystery": {"resultType": "mystery", "content": [{"type": "text", "text": "?"}]},
}
# Tools whose input schema fastgate cannot enforce: quarantined, each with its reason.
ODD_SCHEMAS: dict[str, dict[str, Any]] = {
    "odd_unknown": {"type": "object", "frobnicate": True},
    "odd_unsupported": {"type": "object", "patternProperties": {"^a": {"type": "string"}}},
    "odd_nested": {"type": "object", "properties": {"a": {"type": "string", "sparkle": 1}}},
}
OUTPUT_SCHEMAS = {
    "untyped_structured": {
        "type": "object",
        "properties": {"sum": {"type": "integer"}},
        "required": ["sum"],
    }
}


def tools() -> list[dict[str, Any]]:
    listed = []
    for name in RESULTS:
        tool: dict[str, Any] = {"name": name, "inputSchema": {"type": "object", "properties": {}}}
        if name in OUTPUT_SCHEMAS:
            tool["outputSchema"] = OUTPUT_SCHEMAS[name]
        listed.append(tool)
    listed += [{"name": name, "inputSchema": schema} for name, schema in ODD_SCHEMAS.items()]
    return listed


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def answer(request_id: Any, method: Any, params: dict[str, Any]) -> dict[str, Any] | None:
    if method == "server/discover":
        return {
            "supportedVersions": [VERSION],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "modern-raw", "version": "0"},
            "resultType": "complete",
        }
    if method == "tools/list":
        return {"tools": tools(), "resultType": "complete"}
    if method == "tools/call" and params.get("name") in RESULTS:
        return RESULTS[params["name"]]
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
