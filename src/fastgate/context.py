"""``RunContext``: what a tool body receives besides its arguments (SPEC §9).

A placeholder for the pipeline: ``@tool`` recognises a parameter annotated ``RunContext`` and
injects the context instead of asking the model for it. The pipeline fleshes the class out.
"""

from __future__ import annotations


class RunContext:
    """The per-call context handed to a tool's ``execute(args, ctx)``."""
