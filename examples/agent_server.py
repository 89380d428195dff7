"""A multi-session agent server in ten minutes of reading, runnable offline.

Several sessions run at once, each a Chat Completions tool loop on the official ``openai`` client,
with fastgate between the model and the built-in file tools:

- a temporary workspace with a little project in it, and a ``.fastgate/settings.json`` permission
  file (Claude Code's shape): reads allowed, edits under ``src/`` asked, the secrets and the
  README denied;
- an approver per session (here a policy standing in for a person: it approves edits for
  sessions allowed to edit, and says why it refuses the others);
- the model is scripted: its replies come from ``SCRIPT`` through an in-process HTTP transport,
  so nothing leaves the machine. To run against a real model, make the client with
  ``openai.AsyncOpenAI()`` and drop the script; the loop in ``run_session`` stays as it is.

At the end it prints what each session did and what policy said. ``--json`` prints the same
summary as JSON (the test suite runs it that way)::

    python examples/agent_server.py [--sessions N] [--json]

Needs ``pip install 'fastgate[openai,builtin]'``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import openai
from openai.types.chat import ChatCompletionToolParam

from fastgate import (
    ApprovalRequest,
    ApprovalResponse,
    ExecutionContext,
    PermissionConfig,
    ToolExecutor,
    ToolRegistry,
)
from fastgate.adapters import openai as fg_openai
from fastgate.builtin import register_builtins

# The HTTP library under the openai client (httpx2 in current releases, httpx before): the
# scripted model plugs into it as a transport.
try:
    http: Any = importlib.import_module("httpx2")
except ImportError:
    http = importlib.import_module("httpx")

SETTINGS = {
    "permissions": {
        "allow": ["Read", "Glob", "Grep"],
        "ask": ["Edit(/src/**)"],
        "deny": ["Read(./.env)", "Edit(/README.md)"],
    }
}
PROJECT = {
    "README.md": "# demo\n\nA tiny project for the example server.\n",
    ".env": "API_TOKEN=do-not-leak\n",
    "src/greet.py": 'def greet(name):\n    return "Hello " + name\n',
}
OLD, NEW = '"Hello "', '"Hello, "'  # what each session's edit replaces, and with what
EDITORS = ("alice", "bob")  # sessions whose approver grants edits; the others are refused


def _call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}


def script_for(session: str) -> list[list[dict[str, Any]] | str]:
    """What the model does in one session: turns of tool calls, then its final answer."""
    mine = f"src/{session}.py"
    return [
        # Look around: three read-only calls, which run side by side.
        [
            _call("c1", "glob", {"pattern": "**/*.py"}),
            _call("c2", "read", {"file_path": mine}),
            _call("c3", "grep", {"pattern": "Hello", "output_mode": "content"}),
        ],
        # Change the session's own file (asked), peek at the secrets (denied), and send
        # arguments that are not JSON (refused as invalid, not an exception).
        [
            _call("c4", "edit", {"file_path": mine, "old_string": OLD, "new_string": NEW}),
            _call("c5", "read", {"file_path": ".env"}),
            _call("c6", "read", '{"file_path": "README.md"'),
        ],
        # Rewrite the README (denied by the settings file).
        [_call("c7", "write", {"file_path": "README.md", "content": "# mine now\n"})],
        f"Done with {mine}.",
    ]


class ScriptedModel:
    """Answers each Chat Completions request with the session's next scripted turn."""

    def __init__(self, session: str) -> None:
        self.turns = script_for(session)
        self.requests = 0

    def handle(self, request: Any) -> Any:
        self.requests += 1
        turn = self.turns.pop(0)
        if isinstance(turn, str):
            message: dict[str, Any] = {"role": "assistant", "content": turn}
            finish = "stop"
        else:
            message = {"role": "assistant", "content": None, "tool_calls": turn}
            finish = "tool_calls"
        body = {
            "id": f"chatcmpl-{self.requests}",
            "object": "chat.completion",
            "created": 0,
            "model": "scripted",
            "choices": [{"index": 0, "finish_reason": finish, "message": message}],
        }
        return http.Response(200, json=body)

    def client(self) -> openai.AsyncOpenAI:
        transport = http.MockTransport(self.handle)
        return openai.AsyncOpenAI(
            api_key="offline",
            base_url="http://scripted.invalid/v1",
            http_client=http.AsyncClient(transport=transport),
        )


def approver_for(session: str, asked: list[str]) -> Any:
    async def approve(request: ApprovalRequest) -> ApprovalResponse:
        asked.append(f"{request.tool_name} {request.args.get('file_path', '')}")
        if session in EDITORS:
            return ApprovalResponse(True, scope="once")
        return ApprovalResponse(False, feedback=f"{session} may read but not edit")

    return approve


async def run_session(
    executor: ToolExecutor, tools: list[ChatCompletionToolParam], session: str
) -> dict[str, Any]:
    """One session's tool loop: the part of a server that talks to the model."""
    asked: list[str] = []
    ctx = ExecutionContext(session_id=session, approver=approver_for(session, asked))
    model = ScriptedModel(session)
    messages: list[Any] = [{"role": "user", "content": f"Tidy up src/{session}.py"}]
    async with model.client() as client:
        while True:
            response = await client.chat.completions.create(
                model="scripted", messages=messages, tools=tools
            )
            message = response.choices[0].message
            messages.append(message)
            if not message.tool_calls:
                break
            messages += await fg_openai.execute_tool_calls(executor, message.tool_calls, ctx)
    results = [r for r in executor.history() if r.meta.session_id == session]
    outcomes = Counter(r.error.code.value if r.error else "ok" for r in results)
    return {
        "session": session,
        "calls": len(results),
        "outcomes": dict(sorted(outcomes.items())),
        "approvals_asked": asked,
        "answer": message.content,
    }


def make_workspace(root: Path, sessions: list[str]) -> None:
    for name, text in PROJECT.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    for session in sessions:
        (root / f"src/{session}.py").write_text(PROJECT["src/greet.py"])
    (root / ".fastgate").mkdir()
    (root / ".fastgate/settings.json").write_text(json.dumps(SETTINGS, indent=2))


async def serve(root: Path, sessions: list[str]) -> dict[str, Any]:
    registry = ToolRegistry()
    register_builtins(registry)
    permissions = PermissionConfig.load(root / ".fastgate/settings.json")
    executor = ToolExecutor(
        registry, permissions=permissions, context_defaults={"workspace_root": str(root)}
    )
    tools = fg_openai.tools(registry, strict=True)
    summaries = await asyncio.gather(*(run_session(executor, tools, s) for s in sessions))
    executor.dispose()
    edited = sorted(s for s in sessions if NEW in (root / f"src/{s}.py").read_text())
    return {
        "sessions": list(summaries),
        "edited_files": [f"src/{s}.py" for s in edited],
        "readme_unchanged": (root / "README.md").read_text() == PROJECT["README.md"],
        "stats": {name: s.calls for name, s in sorted(executor.stats().items())},
    }


def print_summary(summary: dict[str, Any]) -> None:
    for s in summary["sessions"]:
        outcomes = ", ".join(f"{code} {n}" for code, n in s["outcomes"].items())
        print(f"{s['session']:>8}: {s['calls']} calls ({outcomes})")
        for asked in s["approvals_asked"]:
            print(f"{'':>10}approval asked: {asked}")
        print(f"{'':>10}model: {s['answer']}")
    print(f"edited: {', '.join(summary['edited_files']) or 'nothing'}")
    print(f"README untouched: {summary['readme_unchanged']}")
    print("calls per tool: " + ", ".join(f"{k} {v}" for k, v in summary["stats"].items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=3, help="sessions to run at once")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = parser.parse_args(argv)
    names = ["alice", "bob", "carol", "dave", "erin", "frank"]
    sessions = [names[i] if i < len(names) else f"s{i}" for i in range(args.sessions)]
    with tempfile.TemporaryDirectory(prefix="fastgate-example-") as tmp:
        root = Path(tmp).resolve()
        make_workspace(root, sessions)
        summary = asyncio.run(serve(root, sessions))
    if args.json:
        json.dump(summary, sys.stdout, indent=2)
        print()
    else:
        print_summary(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
