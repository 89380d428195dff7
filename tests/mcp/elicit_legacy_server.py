"""A hand-written stdio MCP server of the older protocol era (2025-11-25: a handshake, then
server-to-client requests during a call), for the bridge's elicitation tests.

It refuses ``server/discover`` (so the client falls back to ``initialize``) and lists one tool,
``ask``, whose arguments say what to ask: ``{"requests": [<elicitation/create params>, ...],
"tag": "...", "name_the_call": true, "after_calls": 2, "reply_after_answers": 2}``. Once
``after_calls`` calls have arrived (so several are in flight), for each request it sends
``elicitation/create`` to the client (with ``_meta.progressToken`` of the call when
``name_the_call`` is true, the way a server names the call a question belongs to), waits for
the answer, and, once ``reply_after_answers`` answers have come for all calls together, returns
the answers as JSON text. Calls run concurrently, each in a thread.

With ``FIXTURE_RECORD=<file>`` it appends one JSON line per event: ``wire`` (every message it
receives: method, id, params, and the result of an answer), ``asked`` and ``answered`` (tag, the
request and the answer), ``done`` (tag). Run as ``python elicit_legacy_server.py``.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any

VERSION = "2025-11-25"
RECORD = os.environ.get("FIXTURE_RECORD")
_write_lock = threading.Lock()
_waiting: dict[str, tuple[threading.Event, list[Any]]] = {}
_waiting_lock = threading.Lock()
_next_id = [0]
_calls = [0]
_answered = [0]
_calls_changed = threading.Condition()


def record(event: str, **fields: Any) -> None:
    if RECORD:
        with _write_lock, open(RECORD, "a", encoding="utf-8") as f:
            f.write(json.dumps({"event": event, "pid": os.getpid(), **fields}) + "\n")


def send(message: dict[str, Any]) -> None:
    with _write_lock:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def ask_client(params: dict[str, Any]) -> Any:
    """Send ``elicitation/create`` and wait for the client's answer (a result or an error)."""
    with _waiting_lock:
        _next_id[0] += 1
        request_id = f"elicit-{_next_id[0]}"
        event, box = threading.Event(), list[Any]()
        _waiting[request_id] = (event, box)
    send({"jsonrpc": "2.0", "id": request_id, "method": "elicitation/create", "params": params})
    event.wait()
    return box[0]


def run_ask(request_id: Any, params: dict[str, Any]) -> None:
    arguments = params.get("arguments") or {}
    tag = arguments.get("tag")
    token = (params.get("_meta") or {}).get("progressToken")
    with _calls_changed:
        _calls_changed.wait_for(lambda: _calls[0] >= arguments.get("after_calls", 0), timeout=30)
    answers = []
    for request in arguments.get("requests", []):
        request = dict(request)
        if arguments.get("name_the_call") and token is not None:
            request["_meta"] = {"progressToken": token}
        record("asked", tag=tag, request=request)
        answer = ask_client(request)
        record("answered", tag=tag, answer=answer)
        answers.append(answer)
        with _calls_changed:
            _answered[0] += 1
            _calls_changed.notify_all()
    with _calls_changed:  # so no call ends before every question of the others was put
        _calls_changed.wait_for(
            lambda: _answered[0] >= arguments.get("reply_after_answers", 0), timeout=30
        )
    record("done", tag=tag)
    text = json.dumps({"tag": tag, "answers": answers})
    send(
        {
            "jsonrpc": "2.0",
            "id": request_id,
            "result": {"content": [{"type": "text", "text": text}]},
        }
    )


def answer(request_id: Any, method: Any, params: dict[str, Any]) -> dict[str, Any] | None:
    if method == "initialize":
        return {
            "protocolVersion": VERSION,
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "elicit-legacy", "version": "0"},
        }
    if method == "ping":
        return {}
    if method == "tools/list":
        schema = {"type": "object", "properties": {"tag": {"type": "string"}}}
        return {"tools": [{"name": "ask", "inputSchema": schema}]}
    return None


def main() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        request_id, method = message.get("id"), message.get("method")
        params = message.get("params") or {}
        result = message.get("result")
        record("wire", method=method, id=request_id, params=params, result=result)
        if method is None:  # the client's answer to one of our requests
            with _waiting_lock:
                waiting = _waiting.pop(str(request_id), None)
            if waiting is not None:
                waiting[1].append(message.get("result", {"error": message.get("error")}))
                waiting[0].set()
            continue
        if request_id is None:
            continue  # a notification
        if method == "tools/call" and params.get("name") == "ask":
            with _calls_changed:
                _calls[0] += 1
                _calls_changed.notify_all()
            threading.Thread(target=run_ask, args=(request_id, params), daemon=True).start()
            continue
        result = answer(request_id, method, params)
        if result is None:
            error = {"code": -32601, "message": f"Method not found: {method}"}
            send({"jsonrpc": "2.0", "id": request_id, "error": error})
        else:
            send({"jsonrpc": "2.0", "id": request_id, "result": result})


if __name__ == "__main__":
    main()
