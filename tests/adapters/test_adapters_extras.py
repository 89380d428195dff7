"""The adapters and telemetry are optional: the core imports none of their packages, a missing
extra is an ImportError naming it, and the OpenAI and Anthropic adapters run on plain dicts
without their SDKs."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import pytest

EXTRAS = [
    ("fastgate.adapters.openai_agents", "agents", "openai-agents"),
    ("fastgate.adapters.pydantic_ai", "pydantic_ai", "pydantic-ai"),
    ("fastgate.adapters.langchain", "langchain_core", "langchain"),
    ("fastgate.telemetry", "opentelemetry", "otel"),
]
THIRD_PARTY = ("openai", "anthropic", "agents", "pydantic_ai", "langchain", "opentelemetry")


def _python(code: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=os.environ
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_the_core_imports_no_optional_package() -> None:
    out = _python(
        "import sys, fastgate, fastgate.adapters, fastgate.pipeline.tracing\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {THIRD_PARTY!r}))"
    )
    assert out == "[]"


@pytest.mark.parametrize(("module", "package", "extra"), EXTRAS)
def test_a_missing_extra_names_itself(
    module: str, package: str, extra: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [m for m in sys.modules if m == module or m.startswith(module + ".")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, package, None)  # what an uninstalled package looks like
    with pytest.raises(ImportError, match=rf"pip install 'fastgate\[{extra}\]'"):
        importlib.import_module(module)


def test_openai_and_anthropic_adapters_run_without_their_sdks() -> None:
    code = """
import asyncio, sys
sys.modules["openai"] = None
sys.modules["anthropic"] = None
from fastgate import ToolExecutor, ToolKind, ToolRegistry, define_tool, schema
from fastgate.adapters import anthropic, openai

async def echo(args, ctx):
    return args["text"]

registry = ToolRegistry()
registry.register(define_tool("echo", "Echo.", schema.Object({"text": schema.String()},
                  required=("text",)), echo, kind=ToolKind.READ_ONLY))
executor = ToolExecutor(registry)

async def main():
    function = {"name": "echo", "arguments": '{"text": "a"}'}
    call = {"id": "c", "type": "function", "function": function}
    use = {"type": "tool_use", "id": "u", "name": "echo", "input": {"text": "b"}}
    print((await openai.execute_tool_calls(executor, [call]))[0]["content"],
          (await anthropic.execute_tool_uses(executor, [use]))[0]["content"],
          len(openai.tools(registry)), len(anthropic.tools(registry)))

asyncio.run(main())
"""
    assert _python(code) == "a b 1 1"
