"""What the sandbox's search of a root found, kept on disk so that it outlives the process.

A search cut short by its bound keeps what an earlier search of the root found; kept in memory
only, that earlier search was lost at each restart of the server and at each ``fastgate call``
(a process per call), so a command that filled the root past the bound uncovered what lay
beyond it for the next process. One small JSON file per root and policy, under the user's
cache directory (``$XDG_CACHE_HOME/fastgate/sandbox``, else ``~/.cache/fastgate/sandbox``),
written atomically. It is only ever used to add what is hidden and protected, never to remove
anything: a file that is missing, unreadable or malformed counts as no earlier search.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Sequence

from fastgate.sandbox._policy import HOME_AT_START

log = logging.getLogger("fastgate.sandbox")
_FIELDS = ("hidden", "protected", "git_dirs", "git_files")
_MAX_BYTES = 16 << 20
_MAX_PATHS = 200_000
_written: dict[str, str] = {}  # file -> the digest of what this process last wrote or read


def directory() -> str:
    """Where the searches are kept (fixed at start, as the home directory's secrets are)."""
    return _DIRECTORY


def _directory_at_start() -> str:
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(HOME_AT_START, ".cache")
    return os.path.join(base, "fastgate", "sandbox")


_DIRECTORY = _directory_at_start()


def _file(root: str, key: Sequence[str]) -> str:
    digest = hashlib.sha256("\0".join((root, *key)).encode("utf-8", "surrogateescape"))
    return os.path.join(_DIRECTORY, digest.hexdigest()[:40] + ".json")


def load(root: str, key: Sequence[str]) -> dict[str, tuple[str, ...]] | None:
    """The paths a search of ``root`` under ``key`` found before, by field; ``None`` when none
    is kept (or what is kept cannot be read as such)."""
    path = _file(root, key)
    try:
        with open(path, "rb") as file:
            data = file.read(_MAX_BYTES + 1)
    except OSError:
        return None
    if len(data) > _MAX_BYTES:
        return None
    try:
        kept = json.loads(data)
    except ValueError:
        return None
    found = _validated(kept, root)
    if found is not None:
        _written[path] = hashlib.sha256(data).hexdigest()
    return found


def _validated(kept: object, root: str) -> dict[str, tuple[str, ...]] | None:
    if not isinstance(kept, dict) or kept.get("root") != root:
        return None
    found: dict[str, tuple[str, ...]] = {}
    for field in _FIELDS:
        paths = kept.get(field)
        if not isinstance(paths, list) or len(paths) > _MAX_PATHS:
            return None
        found[field] = tuple(p for p in paths if isinstance(p, str) and os.path.isabs(p))
    return found


def save(root: str, key: Sequence[str], found: dict[str, Sequence[str]]) -> None:
    """Keep ``found`` for ``root`` under ``key`` (atomically; only when it changed). A cache
    directory that cannot be written is passed over: the search then holds in memory only."""
    data = json.dumps(
        {"root": root, **{field: sorted(found[field]) for field in _FIELDS}},
        separators=(",", ":"),
    ).encode("utf-8", "surrogateescape")
    path = _file(root, key)
    digest = hashlib.sha256(data).hexdigest()
    if _written.get(path) == digest:
        return
    try:
        os.makedirs(_DIRECTORY, mode=0o700, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(dir=_DIRECTORY, prefix=".search-")
        try:
            with os.fdopen(descriptor, "wb") as file:
                file.write(data)
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise
    except OSError as exc:
        log.debug("the sandbox's search of %s is not kept on disk: %s", root, exc)
        return
    if len(_written) >= 1024:
        _written.clear()
    _written[path] = digest
