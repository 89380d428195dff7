"""The writers on files read refuses (SPEC §16, §21): a binary, non-UTF-8 or over-32-MiB file
gets the reason read gave (``binary_file``, ``undecodable``, ``file_too_large``), never a
"read it first" the model could not follow; ``write`` does not replace such a file. A FIFO,
socket or device is ``not_a_file`` for every writer, and is never opened."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from fastgate.builtin._common import MAX_FILE_BYTES
from tests.builtin_kit import builtin_executor, call, failure_code, text


def binary(path: Path) -> None:
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00IHDR")


def latin1(path: Path) -> None:
    path.write_bytes(b"caf\xe9 au lait\n")


def huge(path: Path) -> None:
    with open(path, "wb") as f:
        f.truncate(MAX_FILE_BYTES + 1)  # sparse: no disk used


UNREADABLE = [
    pytest.param(binary, "binary_file", id="binary"),
    pytest.param(latin1, "undecodable", id="latin-1"),
    pytest.param(huge, "file_too_large", id="over-32-MiB"),
]


def snapshot(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns


@pytest.mark.parametrize(("make", "code"), UNREADABLE)
async def test_write_and_edit_give_the_reason_read_gave(
    tmp_path: Path, make: Callable[[Path], None], code: str
) -> None:
    path = tmp_path / "f"
    make(path)
    before = snapshot(path)
    ex = builtin_executor(tmp_path)
    read = await call(ex, "read", {"file_path": "f"})
    assert failure_code(read) == code
    written = await call(ex, "write", {"file_path": "f", "content": "replacement\n"})
    edited = await call(ex, "edit", {"file_path": "f", "old_string": "caf", "new_string": "tea"})
    for result in (written, edited):
        assert failure_code(result) == code, text(result)
        assert "has not been read" not in text(result)
    assert "write does not replace f" in text(written)
    assert "ask the user" in text(written) and "Nothing was written" in text(written)
    assert snapshot(path) == before


@pytest.mark.parametrize(("make", "code"), UNREADABLE)
async def test_a_file_that_became_unreadable_since_it_was_read(
    tmp_path: Path, make: Callable[[Path], None], code: str
) -> None:
    """Stale, and "read it again" would fail too: the reason is what read would say now."""
    path = tmp_path / "f"
    path.write_text("text\n")
    ex = builtin_executor(tmp_path)
    assert (await call(ex, "read", {"file_path": "f"})).ok
    make(path)
    written = await call(ex, "write", {"file_path": "f", "content": "replacement\n"})
    assert failure_code(written) == code, text(written)
    assert "has changed since" not in text(written)


async def test_a_readable_file_still_needs_reading_first(tmp_path: Path) -> None:
    (tmp_path / "t.txt").write_text("text\n")
    ex = builtin_executor(tmp_path)
    written = await call(ex, "write", {"file_path": "t.txt", "content": "x\n"})
    assert failure_code(written) == "stale_file" and "Read it first" in text(written)


async def test_apply_patch_names_a_binary_file_as_such(tmp_path: Path) -> None:
    binary(tmp_path / "f")
    patch = "*** Begin Patch\n*** Update File: f\n@@\n-x\n+y\n*** End Patch"
    result = await call(builtin_executor(tmp_path), "apply_patch", {"patch": patch})
    assert failure_code(result) == "binary_file", text(result)


# -- FIFOs, sockets and devices ------------------------------------------------------------------


def fifo(path: Path) -> None:
    os.mkfifo(path)


def unix_socket(path: Path) -> None:
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.close()  # the name stays, a socket


SPECIAL = [pytest.param(fifo, id="fifo"), pytest.param(unix_socket, id="socket")]
PATCHES = {
    "update": "*** Update File: p\n@@\n-x\n+y",
    "delete": "*** Delete File: p",
    "add": "*** Add File: p\n+y",
}


@pytest.mark.parametrize("make", SPECIAL)
async def test_write_refuses_a_special_file_without_opening_it(
    tmp_path: Path, make: Callable[[Path], None]
) -> None:
    make(tmp_path / "p")
    ex = builtin_executor(tmp_path)
    assert (await call(ex, "read", {"file_path": "p"})).ok is False
    # Opening a FIFO with no reader would block: the timeout catches an open.
    written = await asyncio.wait_for(call(ex, "write", {"file_path": "p", "content": "x"}), 10)
    assert failure_code(written) == "not_a_file", text(written)
    assert "nothing was written" in text(written)
    mode = os.lstat(tmp_path / "p").st_mode
    assert stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


@pytest.mark.parametrize("make", SPECIAL)
@pytest.mark.parametrize("kind", sorted(PATCHES))
async def test_apply_patch_refuses_a_special_file(
    tmp_path: Path, make: Callable[[Path], None], kind: str
) -> None:
    make(tmp_path / "p")
    patch = f"*** Begin Patch\n{PATCHES[kind]}\n*** End Patch"
    result = await asyncio.wait_for(
        call(builtin_executor(tmp_path), "apply_patch", {"patch": patch}), 10
    )
    assert failure_code(result) == "not_a_file", text(result)
    mode = os.lstat(tmp_path / "p").st_mode
    assert stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)
