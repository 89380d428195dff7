"""The environment a command started on a model's behalf gets: the server's, without secrets."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

#: Substrings (any case) that mark an environment variable as a secret.
DEFAULT_ENV_DENY: tuple[str, ...] = ("KEY", "SECRET", "TOKEN", "PASSWORD", "CREDENTIAL", "AUTH")


def without_secrets(
    environ: Mapping[str, str],
    deny: Iterable[str] = DEFAULT_ENV_DENY,
    allow: Iterable[str] = (),
) -> dict[str, str]:
    """``environ`` without the variables whose name holds one of ``deny`` (in any case),
    unless listed in ``allow``."""
    parts = [re.escape(part) for part in deny if part]
    if not parts:
        return dict(environ)
    secret = re.compile("|".join(parts), re.IGNORECASE)
    kept = frozenset(allow)
    return {
        name: value
        for name, value in environ.items()
        if name in kept or secret.search(name) is None
    }
