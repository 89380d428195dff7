"""Every Python snippet of the README and of docs/ runs as written.

Each page's ```python blocks run in order in one fresh interpreter (a later block uses what an
earlier one defined, as a reader pasting them would), in a temporary workspace holding the files
the snippets read, with ``HOME`` in a temporary directory too, under a pseudo-terminal that is
the process's controlling terminal (``TerminalApprover`` asks there and the test answers).
Models are a local fake Chat Completions / Responses / Messages server that ``OPENAI_BASE_URL``
and ``ANTHROPIC_BASE_URL`` point at; Redis is a private redis-server (``REDIS_URL``); the MCP
server is the npm filesystem reference server that ``scripts/setup-mcp-servers`` installs, found
in the workspace's ``node_modules`` as ``npm install`` would put it. A page whose modules or
servers are missing is skipped, saying which. Each page runs under a warden (see
``docs_snippets_driver.py``) that fails it when it leaves any process running.

Conventions the pages follow:
- A block that cannot run by nature (a protocol's shape, a sketch with a placeholder) is
  preceded by ``<!-- not run: <reason> -->`` on the line before its fence, and is skipped.
- A comment on a one-line ``print(...)`` shows what it prints (``...`` stands for any text).
  So a remark on a print line must not be a comment of that line.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import fastgate
from fastgate.cli.bench.redis_server import RedisServer, pid_alive, redis_server_binary

pytestmark = pytest.mark.slow  # run once in CI, on the compiled build

ROOT = Path(__file__).resolve().parents[1]
DRIVER = Path(__file__).with_name("docs_snippets_driver.py")
SRC = Path(fastgate.__file__).resolve().parents[1]  # the checkout's src/ (or site-packages)
PAGES = ("README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")))
NPM_SERVERS = ROOT / "build" / "mcp-servers" / "npm" / "node_modules"
PAGE_TIMEOUT = 45.0

NOT_RUN = re.compile(r"<!-- not run: (?P<reason>\S.*?) -->")
FENCE = re.compile(r"^\s*(?P<ticks>```+)(?P<info>[^`\s]*)")
SHOWN = re.compile(r"^\s*(?P<call>print\(.*\))\s+# (?P<shown>.+)$")
PROMPT = "allow this tool call?"


# -- the pages' snippets ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Snippet:
    page: str
    line: int  # the page line of the first line of code (1-based)
    code: str
    not_run: str | None  # the reason given, for a block marked not to run


def snippets(page: str) -> list[Snippet]:
    """The ```python blocks of ``page``; other fences (bash, json, ...) are passed over whole."""
    lines = (ROOT / page).read_text(encoding="utf-8").splitlines()
    found: list[Snippet] = []
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        start, ticks = i + 1, fence["ticks"]
        end = next((j for j in range(start, len(lines)) if lines[j].strip() == ticks), len(lines))
        if fence["info"] == "python":
            marker = NOT_RUN.fullmatch(lines[i - 1].strip()) if i > 0 else None
            code = "\n".join(lines[start:end]) + "\n"
            found.append(Snippet(page, start + 1, code, marker["reason"] if marker else None))
        i = end + 1
    return found


def test_python_blocks_are_marked_python() -> None:
    """A block in another spelling of Python would silently never run."""
    for page in PAGES:
        for number, line in enumerate((ROOT / page).read_text().splitlines(), 1):
            fence = FENCE.match(line)
            if fence and fence["info"] in {"py", "python3", "pycon", "ipython", "Python"}:
                pytest.fail(f"{page}:{number}: write ```python (or mark it not run)")


def test_every_not_run_marker_stands_before_a_python_block() -> None:
    for page in PAGES:
        lines = (ROOT / page).read_text().splitlines()
        for number, line in enumerate(lines, 1):
            if "<!-- not run" in line:
                assert NOT_RUN.fullmatch(line.strip()), f"{page}:{number}: give a reason"
                following = lines[number] if number < len(lines) else ""
                assert following.strip() == "```python", f"{page}:{number}: no python block"


# -- the outside world the snippets talk to --------------------------------------------------------

# The calls the fake model makes in its first message, per tool it is offered (the first one
# offered in this order). Once it has the results it answers in text, quoting each result's first
# line, so a page's output shows that its tools ran. The README's second call reads a file on the
# sensitive list: its person at the terminal is asked.
FAKE_CALLS: dict[str, list[dict[str, Any]]] = {
    "read_file": [{"file_path": "README.md"}, {"file_path": ".env.local"}],
    "add": [{"a": 2, "b": 3}],
}
ANSWER = "(fake model) the tools said: "


def _calls(tool_names: list[str]) -> list[tuple[str, str]]:
    """(tool, arguments as JSON) of each call the fake model makes first."""
    for name, calls in FAKE_CALLS.items():
        if name in tool_names:
            return [(name, json.dumps(args)) for args in calls]
    return []


def _answer(results: list[Any]) -> str:
    texts = [r if isinstance(r, str) else " ".join(b.get("text", "") for b in r) for r in results]
    return ANSWER + " | ".join(t.strip().split("\n")[0][:60] for t in texts)


class FakeModel(BaseHTTPRequestHandler):
    """OpenAI's Chat Completions and Responses, Anthropic's Messages: tool calls, then text."""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        path = self.path.rstrip("/")
        if path.endswith("/chat/completions"):
            reply = self.chat_reply(body)
        elif path.endswith("/responses"):
            reply = self.responses_reply(body)
        elif path.endswith("/messages"):
            reply = self.messages_reply(body)
        else:
            self.send_error(404)
            return
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    @staticmethod
    def chat_reply(body: dict[str, Any]) -> dict[str, Any]:
        results = [m["content"] for m in body["messages"] if m.get("role") == "tool"]
        calls = [] if results else _calls([t["function"]["name"] for t in body.get("tools", [])])
        message: dict[str, Any] = {"role": "assistant", "content": _answer(results)}
        if calls:
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": a}}
                    for i, (n, a) in enumerate(calls)
                ],
            }
        return {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "fake"),
            "choices": [
                {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }

    @staticmethod
    def responses_reply(body: dict[str, Any]) -> dict[str, Any]:
        items = body["input"] if isinstance(body["input"], list) else []
        results = [i["output"] for i in items if i.get("type") == "function_call_output"]
        names = [t["name"] for t in body.get("tools", []) if t.get("type") == "function"]
        calls = [] if results else _calls(names)
        output: list[dict[str, Any]] = [
            {
                "type": "function_call",
                "id": f"fc_{i}",
                "call_id": f"call_{i}",
                "name": name,
                "arguments": args,
                "status": "completed",
            }
            for i, (name, args) in enumerate(calls)
        ] or [
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": _answer(results), "annotations": []}],
            }
        ]
        return {
            "id": "resp_1",
            "object": "response",
            "created_at": int(time.time()),
            "model": body.get("model", "fake"),
            "status": "completed",
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": {
                "input_tokens": 1,
                "output_tokens": 1,
                "total_tokens": 2,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens_details": {"reasoning_tokens": 0},
            },
        }

    @staticmethod
    def messages_reply(body: dict[str, Any]) -> dict[str, Any]:
        results = [
            block["content"]
            for m in body["messages"]
            if isinstance(m.get("content"), list)
            for block in m["content"]
            if block.get("type") == "tool_result"
        ]
        calls = [] if results else _calls([t["name"] for t in body.get("tools", [])])
        content: list[dict[str, Any]] = [
            {"type": "tool_use", "id": f"toolu_{i}", "name": name, "input": json.loads(args)}
            for i, (name, args) in enumerate(calls)
        ] or [{"type": "text", "text": _answer(results)}]
        return {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "fake"),
            "content": content,
            "stop_reason": "tool_use" if calls else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }


@pytest.fixture(scope="module")
def fake_model() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeModel)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


# -- the workspace ---------------------------------------------------------------------------------

# The project settings file holds what docs/permissions.md and docs/hooks.md show of one.
PROJECT_SETTINGS = {
    "permissions": {
        "allow": ["Bash(npm run test:*)"],
        "ask": ["Bash(git push *)"],
        "deny": ["Read(./.env)", "Read(/secrets/**)"],
        "additionalDirectories": ["../shared"],
        "defaultMode": "acceptEdits",
    },
    "hooks": {
        "PreToolUse": [
            {
                "matcher": "Bash",
                "hooks": [
                    {
                        "type": "command",
                        "command": '"$CLAUDE_PROJECT_DIR"/.claude/hooks/no-force-push.sh',
                    }
                ],
            },
            {
                "matcher": "Edit|Write",
                "hooks": [
                    {
                        "type": "command",
                        "command": "python3 .claude/hooks/lockfiles.py",
                        "timeout": 10,
                    }
                ],
            },
        ],
        "PostToolUse": [
            {"matcher": "mcp__github__.*", "hooks": [{"type": "command", "command": "./audit.sh"}]}
        ],
    },
}
# docs/mcp.md's example of a config file other MCP clients write (API_KEY is in the environment).
MCP_CONFIG = """{"mcpServers": {
  "fs":     {"command": "node", "args": ["server.js", "${HOME}/ws"],
             "env": {"TOKEN": "${TOKEN:-}"}},
  "api":    {"type": "http", "url": "http://127.0.0.1:8931/mcp",
             "headers": {"Authorization": "Bearer ${API_KEY}"}, "max_concurrency": 2},
  "linear": {"type": "sse", "url": "https://mcp.linear.app/sse"},
  "notes":  {"url": "http://localhost:3001/sse", "timeout": 120, "alwaysAllow": ["read_note"]},
  "old":    {"command": "legacy-server", "disabled": true}
}}
"""
WORKSPACE_FILES = {
    ".mcp.json": MCP_CONFIG,
    "src/app.py": 'print("hello")\n',
    ".env.local": "API_KEY=not-for-models\n",
    ".claude/settings.json": json.dumps(PROJECT_SETTINGS, indent=2),
}
HOME_FILES = {
    ".claude/settings.json": json.dumps({"permissions": {"deny": ["Read(~/.ssh/**)"]}}),
}


def write_files(directory: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def machine_client_key() -> dict[str, str]:
    """A fresh Ed25519 key, the machine client's of docs/mcp.md (where cryptography is)."""
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    except ImportError:
        return {}
    pem = (
        Ed25519PrivateKey.generate()
        .private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        .decode()
    )
    return {"svc-key.pem": pem}


def prepare_workspace(workspace: Path, home: Path) -> None:
    workspace.mkdir()
    shutil.copy(ROOT / "README.md", workspace / "README.md")
    write_files(workspace, {**WORKSPACE_FILES, **machine_client_key()})
    write_files(home, HOME_FILES)
    if NPM_SERVERS.exists():  # where `npm install` would put the reference servers
        (workspace / "node_modules").symlink_to(NPM_SERVERS)


# -- running a page --------------------------------------------------------------------------------


@dataclass
class PageRun:
    returncode: int | None
    screen: str  # everything the page wrote to its terminal
    prompts: int  # approval prompts shown (each answered)
    prints: dict[int, list[str]]  # page line -> what each print call there printed


def run_page(page: str, workspace: Path, env: dict[str, str], answers: list[str]) -> PageRun:
    runnable = [s for s in snippets(page) if s.not_run is None]
    listing = workspace.parent / "snippets.json"
    listing.write_text(
        json.dumps([{"page": str(ROOT / s.page), "line": s.line, "code": s.code} for s in runnable])
    )
    record = workspace.parent / "prints.jsonl"
    master, slave = os.openpty()
    try:
        process = subprocess.Popen(
            [sys.executable, str(DRIVER), str(PAGE_TIMEOUT), str(listing), str(record)],
            cwd=workspace,
            env=env,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
        )
    finally:
        os.close(slave)
    try:
        screen, prompts = _converse(master, process, answers)
    finally:
        os.close(master)
        if process.poll() is None:  # the warden itself hung: end its group
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    prints: dict[int, list[str]] = {}
    if record.exists():
        for line in record.read_text().splitlines():
            entry = json.loads(line)
            prints.setdefault(entry["line"], []).append(entry["text"])
    return PageRun(process.returncode, screen, prompts, prints)


def _converse(master: int, process: subprocess.Popen[bytes], answers: list[str]) -> tuple[str, int]:
    """Reads the terminal until the page is over, typing an answer at each approval prompt."""
    deadline = time.monotonic() + PAGE_TIMEOUT + 15  # the warden's own timeout comes first
    screen, prompts, pending = "", 0, list(answers)
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if not ready:
            if process.poll() is not None:
                break
            continue
        try:
            chunk = os.read(master, 65536).decode("utf-8", "replace")
        except OSError:  # EIO: every holder of the terminal's other side is gone
            break
        screen += chunk
        if screen.count(PROMPT) > prompts and "\n> " in screen.rsplit(PROMPT, 1)[1]:
            prompts += 1
            if pending:
                os.write(master, (pending.pop(0) + "\n").encode())
    else:
        pytest.fail(f"the page's warden did not end:\n{screen}")
    process.wait(timeout=10)
    return screen.replace("\r\n", "\n"), prompts


def check_shown_output(page: str, prints: dict[int, list[str]]) -> None:
    """A comment on a one-line print shows what it printed: one of the texts printed there (a
    print in a loop prints several), whitespace runs compared as one space, ``...`` any text."""
    for snippet in snippets(page):
        if snippet.not_run is not None:
            continue
        for offset, line in enumerate(snippet.code.splitlines()):
            shown = SHOWN.match(line)
            if shown is None:
                continue
            number = snippet.line + offset
            printed = [" ".join(text.split()) for text in prints.get(number, [])]
            assert printed, f"{page}:{number}: this print never ran"
            parts = [" ".join(part.split()) for part in shown["shown"].split("...")]
            pattern = ".*".join(re.escape(part) for part in parts)
            assert any(re.fullmatch(pattern, text, re.DOTALL) for text in printed), (
                f"{page}:{number}: the comment says {shown['shown']!r}, it printed {printed!r}"
            )


# -- what each page needs --------------------------------------------------------------------------

# The third-party modules behind fastgate's optional parts (the extras).
EXTRA_MODULES = {
    "fastgate.builtin": ("pathspec", "re2"),
    "fastgate.mcp": ("mcp", "cryptography"),
    "fastgate.cluster": ("redis",),
    "fastgate.telemetry": ("opentelemetry",),
}


def missing_modules(page: str) -> list[str]:
    """The modules a page's snippets import (directly, or through an extra) that are absent."""
    wanted: set[str] = set()
    for snippet in snippets(page):
        if snippet.not_run is not None:
            continue
        for node in ast.walk(ast.parse(snippet.code)):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for name in names:
                wanted.update(EXTRA_MODULES.get(name, ()))
                if not name.startswith("fastgate"):
                    wanted.add(name.split(".")[0])
    return sorted(m for m in wanted if importlib.util.find_spec(m) is None)


def missing_servers(page: str) -> str | None:
    """Why a page's servers cannot be had here, or None."""
    if page == "docs/mcp.md":
        if shutil.which("node") is None:
            return "node is not installed: the npm MCP servers cannot run"
        if not (NPM_SERVERS / "@modelcontextprotocol" / "server-filesystem").exists():
            return "the npm MCP servers are not installed: run `bash scripts/setup-mcp-servers`"
    if page == "docs/cluster.md" and redis_server_binary() is None:
        reason = "redis-server is not installed (scripts/setup-redis installs Debian's package)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        return reason
    if page == "docs/codemode.md":
        from fastgate.codemode import sandbox_missing

        if lacking := sandbox_missing():
            return f"code mode's sandbox cannot confine a program here: {lacking}"
    return None


# -- the test --------------------------------------------------------------------------------------

PAGE_ANSWERS = {"README.md": ["n"]}  # what the person at the terminal types, prompt by prompt
# What a page's terminal must show: the fake model's answers prove the tools ran.
PAGE_SHOWS = {
    "README.md": [f"{ANSWER}# fastgate | Error (USER_REJECTED)"],
    "docs/adapters.md": [f"{ANSWER}5"] * 4,  # OpenAI, Anthropic, Agents SDK, pydantic-ai
}


def pages_with_snippets() -> list[str]:
    return [page for page in PAGES if any(s.not_run is None for s in snippets(page))]


def page_environment(tmp_path: Path, fake_model: str) -> dict[str, str]:
    inherited = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    return {
        **inherited,
        "HOME": str(tmp_path / "home"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")])),
        "TERM": "dumb",
        "OPENAI_API_KEY": "sk-test",
        "OPENAI_BASE_URL": f"{fake_model}/v1",
        "OPENAI_AGENTS_DISABLE_TRACING": "1",  # else the Agents SDK exports traces to OpenAI
        "ANTHROPIC_API_KEY": "sk-ant-test",
        "ANTHROPIC_BASE_URL": fake_model,
        "PYDANTIC_AI_NO_BANNER": "1",
        "API_KEY": "test-key",  # what docs/mcp.md's .mcp.json names
        "AGENT_SECRET": "test-secret",  # what its OAuth clients read
        "SVC_SECRET": "test-secret",
    }


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a subreaper warden: Linux")
@pytest.mark.parametrize("page", pages_with_snippets())
def test_page_snippets_run_as_written(page: str, tmp_path: Path, fake_model: str) -> None:
    if missing := missing_modules(page):
        pytest.skip(f"{page} imports {', '.join(missing)}, not installed (the test extras)")
    if reason := missing_servers(page):
        pytest.skip(reason)
    prepare_workspace(tmp_path / "workspace", tmp_path / "home")
    env = page_environment(tmp_path, fake_model)
    redis: RedisServer | None = None
    if page == "docs/cluster.md":
        redis = RedisServer(tmp_path / "redis")
        redis.start()
        env["REDIS_URL"] = redis.url  # where the page's worker finds its Redis
    try:
        result = run_page(page, tmp_path / "workspace", env, PAGE_ANSWERS.get(page, []))
    finally:
        if redis is not None:
            redis.stop()
    if redis is not None:
        assert not pid_alive(redis.pid), f"redis-server {redis.pid} outlived the page"
    assert "LEFT RUNNING" not in result.screen, f"{page} left processes running:\n{result.screen}"
    assert result.returncode == 0, f"{page}: a snippet failed:\n{result.screen}"
    assert result.prompts == len(PAGE_ANSWERS.get(page, [])), result.screen
    for text in set(PAGE_SHOWS.get(page, [])):
        assert result.screen.count(text) >= PAGE_SHOWS[page].count(text), result.screen
    check_shown_output(page, result.prints)
