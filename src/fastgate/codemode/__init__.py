"""Code mode (SPEC §15): the model writes a Python program, and every tool call the program
makes goes through the executor's full pipeline.

```python
code_mode = CodeMode(allowed=("read", "grep"), timeout=30.0)
executor = ToolExecutor(registry, code_mode=code_mode)
await executor.execute("run_code", {"code": "print(await tools.read(file_path='a.txt'))"}, ctx)
```

The program runs in a separate, confined process (Linux: Landlock, seccomp, no capabilities,
hard rlimits); see ``docs/codemode.md``.
"""

from __future__ import annotations

from fastgate.codemode._mode import RUN_CODE as RUN_CODE
from fastgate.codemode._mode import CodeMode as CodeMode
from fastgate.codemode._mode import SandboxUnavailable as SandboxUnavailable
from fastgate.codemode._sandbox import missing as _missing
from fastgate.codemode._worker import ToolCallError as ToolCallError


def sandbox_missing() -> list[str]:
    """What this host lacks to confine programs (empty: code mode can run with its sandbox)."""
    return _missing()


__all__ = ("RUN_CODE", "CodeMode", "SandboxUnavailable", "ToolCallError", "sandbox_missing")
