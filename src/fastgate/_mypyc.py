"""``mypyc_attr`` for the modules mypyc compiles: a no-op when ``mypy_extensions`` is absent.

The decorator only means something to mypyc, at build time; at run time the compiled modules and
the pure build need nothing from it, so ``mypy_extensions`` is not a dependency.
"""

from __future__ import annotations

from typing import Any

try:
    from mypy_extensions import mypyc_attr
except ImportError:

    def mypyc_attr(*attrs: str, **kwattrs: object) -> Any:  # type: ignore[misc]
        return lambda cls: cls


__all__ = ("mypyc_attr",)
