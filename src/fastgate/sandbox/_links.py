"""The other names of hidden files: a hard link made in advance (``touch notes; ln notes .env``)
reads what the user later writes into the hidden name in place, and hiding is by path. So each
hidden regular file with more than one link has its other names in the root hidden too: first
among the entries the search met (their inode numbers come with the listing, free), then, for
names still missing, by a wider look through the whole root (skipped directories and ``.git``
included) that compares inode numbers only."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterable, Mapping, Sequence

log = logging.getLogger("fastgate.sandbox")
_HIDDEN_DIRECTORY_BUDGET = 2_000  # entries looked at inside one hidden directory


def linked_files(hidden: Iterable[str]) -> dict[tuple[int, int], tuple[set[str], int]]:
    """``(st_dev, st_ino) -> (hidden names, st_nlink)`` of the hidden regular files (and those
    directly inside a hidden directory) that have more than one link."""
    linked: dict[tuple[int, int], tuple[set[str], int]] = {}
    for path in hidden:
        for candidate in _files_at(path):
            try:
                st = os.lstat(candidate)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                names, _ = linked.setdefault((st.st_dev, st.st_ino), (set(), st.st_nlink))
                names.add(candidate)
    return linked


def _files_at(path: str) -> list[str]:
    """``path``, or, for a directory, the entries below it (bounded)."""
    if not os.path.isdir(path) or os.path.islink(path):
        return [path]
    found: list[str] = []
    todo = [path]
    while todo and len(found) < _HIDDEN_DIRECTORY_BUDGET:
        try:
            with os.scandir(todo.pop()) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        todo.append(entry.path)
                    else:
                        found.append(entry.path)
        except OSError:
            continue
    return found


def other_names(
    root: str,
    linked: Mapping[tuple[int, int], tuple[set[str], int]],
    met: Mapping[int, Sequence[str]],
    budget: int,
) -> list[str]:
    """The names in ``root`` of the ``linked`` files other than their hidden ones: from ``met``
    (inode number -> paths the search listed), then, while some are missing, from a look
    through all of ``root`` of at most ``budget`` entries."""
    found: dict[tuple[int, int], set[str]] = {key: set(names) for key, (names, _) in linked.items()}
    by_inode = {ino for _, ino in linked}
    for ino in by_inode:
        for path in met.get(ino, ()):
            _add_if_same(path, found)
    missing = {key for key, (_, count) in linked.items() if len(found[key]) < count}
    if missing:
        for path in _entries_with_inode(root, {ino for _, ino in missing}, budget):
            _add_if_same(path, found)
    still = [min(found[k]) for k, (_, count) in linked.items() if len(found[k]) < count]
    if still:
        log.info(
            "the sandbox found not every name of %s in %s (hard links elsewhere, or past the "
            "search's bound): those are readable where they are",
            ", ".join(still),
            root,
        )
    hidden_names = {name for names, _ in linked.values() for name in names}
    return sorted({p for names in found.values() for p in names} - hidden_names)


def _add_if_same(path: str, found: dict[tuple[int, int], set[str]]) -> None:
    try:
        st = os.lstat(path)
    except OSError:
        return
    names = found.get((st.st_dev, st.st_ino))
    if names is not None and stat.S_ISREG(st.st_mode):
        names.add(path)


def _entries_with_inode(root: str, inodes: set[int], budget: int) -> list[str]:
    """Paths below ``root`` whose listed inode number is one of ``inodes`` (every directory,
    at most ``budget`` entries)."""
    found: list[str] = []
    todo = [root]
    while todo and budget > 0:
        try:
            with os.scandir(todo.pop()) as entries:
                for entry in entries:
                    budget -= 1
                    if entry.is_dir(follow_symlinks=False):
                        todo.append(entry.path)
                    elif entry.inode() in inodes:
                        found.append(entry.path)
        except OSError:
            continue
    return found
