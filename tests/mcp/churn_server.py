"""A hand-written stdio MCP server (the handshake era) whose tools change all the time: every
``tools/list`` answer is a new listing of four tools with schemas of a few hundred kilobytes
(costly to compile, each under the bound of one tool), and it says its tools changed.

Run as ``python churn_server.py MODE``. ``after-list``: one ``notifications/tools/list_changed``
after every listing. ``flood``: one every millisecond, from the first listing on, whatever is
asked.
"""

from __future__ import annotations

import itertools
import json
import sys
import threading
import time
from typing import Any

MODE = sys.argv[1]
OUT = sys.stdout.buffer
_lock = threading.Lock()
_listings = itertools.count()
_flooding = threading.Event()
CHANGED = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}


def send(message: dict[str, Any]) -> None:
    data = json.dumps(message).encode() + b"\n"
    with _lock:
        OUT.write(data)
        OUT.flush()


def flood() -> None:
    while True:
        send(CHANGED)
        time.sleep(0.001)


def listing() -> dict[str, Any]:
    n = next(_listings)
    enum = ["a" * 40] * 4
    schema = {
        "type": "object",
        "properties": {f"p{i}_{n}": {"type": "string", "enum": enum} for i in range(2000)},
    }
    return {"tools": [{"name": f"t{j}", "inputSchema": schema} for j in range(4)]}


def main() -> None:
    for line in sys.stdin.buffer:
        if not line.strip():
            continue
        message = json.loads(line)
        request_id, method = message.get("id"), message.get("method")
        if request_id is None:
            continue
        if method == "initialize":
            result = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {"listChanged": True}},
                "serverInfo": {"name": "churn", "version": "0"},
            }
            send({"jsonrpc": "2.0", "id": request_id, "result": result})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": request_id, "result": listing()})
            if MODE == "after-list":
                send(CHANGED)
            elif not _flooding.is_set():
                _flooding.set()
                threading.Thread(target=flood, daemon=True).start()
        else:
            error = {"code": -32601, "message": f"Method not found: {method}"}
            send({"jsonrpc": "2.0", "id": request_id, "error": error})


if __name__ == "__main__":
    main()
