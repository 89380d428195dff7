"""What the sandbox's search of a root found, kept on disk so that it outlives the process.

A search cut short by its bound keeps what an earlier search of the root found; kept in memory
only, that earlier search was lost at each restart of the server and at each ``fastgate call``
(a process per call), so a command that filled the root past the bound uncovered what lay
beyond it for the next process. One small JSON file per root and policy, under the user's
cache directory (``$XDG_CACHE_HOME/fastgate/sandbox``, else ``~/.cache/fastgate/sandbox``),
written atomically. It is only ever used to add what is hidden and protected, never to remove
anything: a file that is missing, unreadable or malformed counts as no earlier search.

The directory is pruned (at most once an hour, by whichever process writes to it) of what no
workspace needs: a search that found nothing (the same as none), a file that cannot be read as
a search, a writer's leftovers, and the search of a root that no longer exists once it has gone
unused for a week (sooner, oldest first, while such files hold more than ``MAX_GONE_BYTES``).
The search of a root that exists and holds something is never removed: it is what keeps that
root's secrets hidden after its tree is flooded.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import secrets
import stat
import tempfile
import time
from collections.abc import Mapping, Sequence

from fastgate.sandbox._policy import HOME_AT_START

log = logging.getLogger("fastgate.sandbox")
_FIELDS = ("hidden", "protected", "git_dirs", "git_files")
_MAX_BYTES = 16 << 20
_MAX_PATHS = 200_000
_written: dict[str, str] = {}  # file -> the digest of what this process last wrote or read
PRUNE_EVERY = 3600.0  # seconds between two prunings of the directory (by any process)
UNUSED_GONE = 7 * 86400.0  # a gone root's search unused this long is removed
MAX_GONE_BYTES = 64 << 20  # past this, gone roots' searches are removed oldest first
_LEFTOVER_AGE = 3600.0  # a temporary file this old was left by a process that died
_TOUCH_AFTER = 86400.0  # a search used again is marked as used at most once a day
_STAMP = ".pruned"
_NAME = re.compile(r"^[0-9a-f]{40}\.json$")
_ROOT_PREFIX = re.compile(rb'^\{"root":("(?:[^"\\]|\\.)*")')
_HEAD_BYTES = 64 << 10  # a file this small is read whole when pruning; a larger one, its root


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
        _mark_used(path)
    return found


def _mark_used(path: str) -> None:
    """Its modification time says when a search was last used (pruning reads it)."""
    try:
        if time.time() - os.stat(path).st_mtime > _TOUCH_AFTER:
            os.utime(path)
    except OSError:
        pass


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


def save(root: str, key: Sequence[str], found: Mapping[str, Sequence[str]]) -> None:
    """Keep ``found`` for ``root`` under ``key`` (atomically; only when it changed). A cache
    directory that cannot be written is passed over: the search then holds in memory only."""
    data = json.dumps(
        {"root": root, **{field: sorted(found[field]) for field in _FIELDS}},
        separators=(",", ":"),
    ).encode("utf-8", "surrogateescape")
    path = _file(root, key)
    digest = hashlib.sha256(data).hexdigest()
    if _written.get(path) == digest and os.path.exists(path):
        _mark_used(path)
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
    if _prune_due():
        prune()


def _prune_due() -> bool:
    """Whether the directory was last pruned ``PRUNE_EVERY`` ago (by this or another process);
    if so, it is marked as pruned now."""
    stamp = os.path.join(_DIRECTORY, _STAMP)
    now = time.time()
    try:
        if now - os.stat(stamp).st_mtime < PRUNE_EVERY:
            return False
        os.utime(stamp)
    except FileNotFoundError:
        try:
            os.close(os.open(stamp, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600))
        except OSError:
            return False
    except OSError:
        return False
    return True


def prune(now: float | None = None) -> int:
    """Remove from the directory what no workspace needs (see the module's docstring); the
    number of files removed. Never raises for the file system's sake."""
    now = time.time() if now is None else now
    removed = 0
    gone: list[tuple[float, int, str, os.stat_result]] = []  # (mtime, size, path, stat)
    try:
        entries = list(os.scandir(_DIRECTORY))
    except OSError:
        return 0
    for entry in entries:
        path = entry.path
        if entry.name.startswith((".search-", ".prune-")):
            try:
                if now - entry.stat(follow_symlinks=False).st_mtime > _LEFTOVER_AGE:
                    os.unlink(path)
                    removed += 1
            except OSError:
                pass
            continue
        if not _NAME.match(entry.name):
            continue  # not a search of ours
        verdict, found = _judge(path)
        if found is None:
            continue
        if verdict == "useless" or (verdict == "gone" and now - found.st_mtime > UNUSED_GONE):
            removed += _remove_judged(path, found)
        elif verdict == "gone":
            gone.append((found.st_mtime, found.st_size, path, found))
    left = sum(size for _, size, _, _ in gone)
    for _, size, path, found in sorted(gone, key=lambda g: g[0]):
        if left <= MAX_GONE_BYTES:
            break
        removed += _remove_judged(path, found)
        left -= size
    return removed


def _judge(path: str) -> tuple[str, os.stat_result | None]:
    """``"needed"`` (its root exists and it holds something), ``"gone"`` (its root does not
    exist) or ``"useless"`` (it holds nothing, or nothing ``load`` would take), with the file's
    status as judged; ``None`` for a file that could not be looked at."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return "needed", None
    try:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode) or found.st_size > _MAX_BYTES:
            return "useless", found
        head = _read_up_to(fd, _HEAD_BYTES + 1)
    except OSError:
        return "needed", None
    finally:
        os.close(fd)
    root = _root_if_any(head, whole=len(head) <= _HEAD_BYTES)
    if root is None:
        return "useless", found
    try:
        if stat.S_ISDIR(os.stat(root).st_mode):
            return "needed", found
    except (FileNotFoundError, NotADirectoryError):
        pass
    except OSError:
        return "needed", found  # cannot tell: kept
    return "gone", found


def _read_up_to(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    left = limit
    while left > 0:
        chunk = os.read(fd, left)
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _root_if_any(head: bytes, *, whole: bool) -> str | None:
    """The root of a kept search that holds something ``load`` would take, or ``None``. A file
    read ``whole`` is checked as ``load`` checks it; of a larger one (which holds something by
    its size alone), only the root is read."""
    if whole:
        try:
            kept = json.loads(head)
        except ValueError:
            return None
        root = kept.get("root") if isinstance(kept, dict) else None
        if not isinstance(root, str):
            return None
        fields = _validated(kept, root)
        return root if fields is not None and any(fields.values()) else None
    match = _ROOT_PREFIX.match(head)
    try:
        root = json.loads(match.group(1)) if match else None
    except ValueError:
        return None
    return root if isinstance(root, str) else None


def _remove_judged(path: str, judged: os.stat_result) -> int:
    """Remove ``path`` if it is still the file judged: a writer may have replaced it since, and
    what it wrote is put back."""
    aside = os.path.join(_DIRECTORY, f".prune-{secrets.token_hex(8)}")
    try:
        os.rename(path, aside)
    except OSError:
        return 0
    try:
        moved = os.lstat(aside)
        if (moved.st_dev, moved.st_ino) == (judged.st_dev, judged.st_ino):
            return 1
        try:
            os.link(aside, path)  # unless a newer one is there already
        except FileExistsError:
            pass
        except OSError:
            os.rename(aside, path)
        return 0
    except OSError:
        return 0
    finally:
        try:
            os.unlink(aside)
        except OSError:
            pass
