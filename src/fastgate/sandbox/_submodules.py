"""The submodules a repository knows, read without running git: the gitlinks of its index
(format 2, 3 or 4) and the entries of its ``.gitmodules``.

The sandbox protects each one's ``<path>/.git`` and ``<git dir>/modules/<name>`` whether it
exists or not: an uninitialised submodule is one a command could otherwise initialise with a
configuration of its own, which the user's next ``git status`` would enter. Running git here
is not an option: it would read (and run) the very configuration being guarded.
"""

from __future__ import annotations

import os
import re
import stat
import struct
from collections.abc import Iterator

_INDEX_LIMIT = 64 << 20  # bytes of an index read: past them, the rest is not looked at
_GITMODULES_LIMIT = 1 << 20
_GITLINK = 0o160000
_TYPE_MASK = 0o170000
_EXTENDED = 0x4000
_NAME_LENGTH = 0x0FFF
_STAT_BYTES = 40  # ctime, mtime, dev, ino, mode, uid, gid, size: ten 32-bit fields
_SECTION = re.compile(r'^\s*\[\s*submodule\s+"((?:[^"\\\n]|\\.)*)"\s*\]', re.IGNORECASE)
_OTHER_SECTION = re.compile(r"^\s*\[")
_PATH_KEY = re.compile(r"^\s*path\s*=\s*(.*?)\s*$", re.IGNORECASE)


def known_submodules(work_tree: str, git_dir: str) -> tuple[set[str], set[str]]:
    """The submodule paths (relative to ``work_tree``) and names that the index of ``git_dir``
    and ``work_tree``'s ``.gitmodules`` name. A name defaults to its path in git, so each path
    counts as a name too, and each name as a path (over-approximating costs only a cover)."""
    paths = set(gitlinks(os.path.join(git_dir, "index")))
    names: set[str] = set()
    for name, path in gitmodules(os.path.join(work_tree, ".gitmodules")):
        names.add(name)
        if path:
            paths.add(path)
    names |= paths
    return {p for p in paths if _safe(p)}, {n for n in names if _safe(n)}


def _safe(relative: str) -> bool:
    """A relative path of real components (git refuses ``..`` in names and paths too)."""
    parts = relative.split("/")
    return (
        bool(relative)
        and not relative.startswith("/")
        and all(part not in ("", ".", "..") for part in parts)
    )


def _read_regular(path: str, limit: int) -> bytes | None:
    """Up to ``limit`` bytes of a regular file; never blocks on a FIFO planted there."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks = []
        left = limit
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def gitlinks(index_path: str) -> list[str]:
    """The paths of the gitlink entries (mode 160000) of a git index; ``[]`` when it is absent
    or cannot be read. The hash may be SHA-1 or SHA-256: the one that frames the entries
    consistently is taken."""
    data = _read_regular(index_path, _INDEX_LIMIT)
    if data is None or len(data) < 12 or data[:4] != b"DIRC":
        return []
    version, count = struct.unpack_from(">II", data, 4)
    if version not in (2, 3, 4):
        return []
    for hash_size in (20, 32):
        found = _parse_entries(data, version, count, hash_size)
        if found is not None:
            return found
    return []


def _parse_entries(data: bytes, version: int, count: int, hash_size: int) -> list[str] | None:
    """The gitlink paths, or ``None`` when ``hash_size`` does not frame the entries."""
    found: list[str] = []
    try:
        for mode, name in _entries(data, version, count, hash_size):
            if mode & _TYPE_MASK == _GITLINK:
                found.append(os.fsdecode(name))
    except (ValueError, IndexError, struct.error):
        return None
    return found


def _entries(data: bytes, version: int, count: int, hash_size: int) -> Iterator[tuple[int, bytes]]:
    offset = 12
    previous = b""
    for _ in range(count):
        if offset + _STAT_BYTES + hash_size + 2 > len(data):
            return  # cut at the read limit: what was read is what is known
        mode = struct.unpack_from(">I", data, offset + 24)[0]
        flags_at = offset + _STAT_BYTES + hash_size
        flags = struct.unpack_from(">H", data, flags_at)[0]
        name_at = flags_at + 2 + (2 if version >= 3 and flags & _EXTENDED else 0)
        if version == 4:
            strip, name_at = _varint(data, name_at)
            end = data.index(b"\0", name_at)
            if strip > len(previous):
                raise ValueError("prefix longer than the previous name")
            name = previous[: len(previous) - strip] + data[name_at:end]
            offset = end + 1
        else:
            end = data.index(b"\0", name_at)
            name = data[name_at:end]
            length = flags & _NAME_LENGTH
            if length != _NAME_LENGTH and length != len(name):
                raise ValueError("name length differs from its flags")
            offset += (name_at - offset + len(name) + 8) & ~7
        if not name:
            raise ValueError("empty name")
        previous = name
        yield mode, name


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """git's offset varint (index format 4): the value and the offset after it."""
    byte = data[at]
    at += 1
    value = byte & 0x7F
    while byte & 0x80:
        byte = data[at]
        at += 1
        value = ((value + 1) << 7) | (byte & 0x7F)
    return value, at


def gitmodules(path: str) -> list[tuple[str, str]]:
    """``(name, path)`` of each ``[submodule "name"]`` section of a ``.gitmodules`` file (the
    path ``""`` when the section names none)."""
    data = _read_regular(path, _GITMODULES_LIMIT)
    if data is None:
        return []
    found: list[tuple[str, str]] = []
    current: str | None = None
    for line in data.decode("utf-8", "surrogateescape").splitlines():
        section = _SECTION.match(line)
        if section:
            current = _unescape(section.group(1))
            found.append((current, ""))
        elif _OTHER_SECTION.match(line):
            current = None
        elif current is not None and (key := _PATH_KEY.match(line)):
            found.append((current, _config_value(key.group(1))))
    return found


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def _config_value(text: str) -> str:
    """A config value without its comment and quotes (as far as a path needs)."""
    if text.startswith('"'):
        closing = text.find('"', 1)
        return _unescape(text[1:closing] if closing > 0 else text[1:])
    return re.split(r"\s[#;]", text, maxsplit=1)[0].strip()
