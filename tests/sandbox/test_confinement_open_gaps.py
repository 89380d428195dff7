"""Escapes found from outside whose fix lies in the planner or the seccomp filter
(``_planner.py``, ``_launch.py``, ``_kernel.py``): each test states the violation and is an
expected failure (strict) until that fix lands; then it passes, and its mark goes.

- A writable root that holds another root (``additional_dirs`` or ``writable`` naming the
  workspace's parent) protects only what exists below the outer one: the workspace's absent
  ``.claude/``, ``.fastgate/`` and ``.mcp.json`` can be created. The fix: the literal protected
  paths (and their placeholders) at every root asked, not only at the outermost.
- Without namespaces, another sandboxed call reads a call's private ``TMPDIR`` (Landlock grants
  reads on the whole file system). The temporary directories are made under one parent, the
  user's alone (``_launch.temporary_parent()``); the fix left is the planner's: no read grant
  on that parent (as on a hidden path outside the roots), each call granted its own directory.
- The search for hidden and protected paths skips what it cannot list: a call that takes the
  read permission off the directories holding a secret (``chmod 300 certs .``; a server that
  is not root then cannot list them) has the next call hide nothing there, and that call gives
  the permission back and reads the secret. The fix: a directory inside a root that the search
  cannot list is hidden as a whole (and a root it cannot list fails the call).
- An absent ``read_only`` path inside a writable root can be created (a protected one cannot).
  The fix: an absent ``read_only`` path gets a placeholder as an absent protected one does.
- Without namespaces, a command reads the user's terminals (``/dev/pts/N``: what is typed into
  the server's terminal) and the POSIX shared memory of the user's processes (``/dev/shm``);
  with namespaces ``/dev`` is ``nodev`` and ``/dev/shm`` private. The fix: no read grant on
  ``/dev`` but listing it and the usable devices (as ``_read_grants`` does for hidden paths).
"""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fastgate import ToolFault
from fastgate.sandbox import SandboxedShell, SandboxPolicy, _support
from tests.sandbox.confinement_kit import (
    mechanism_fixture,  # noqa: F401  (the fixture "mechanism")
    no_process_outlives_the_test,  # noqa: F401  (autouse)
    unique,
)

# Kernel and process mechanisms, the same in both builds: run once, in the compiled build.
pytestmark = pytest.mark.slow

OPEN = pytest.mark.xfail(strict=True, reason="open: the fix is the planner's or the filter's")

# -- a root inside another root -----------------------------------------------------------------

WRITES = {
    ".claude/settings.json": "mkdir -p .claude && echo '{}' > .claude/settings.json",
    ".fastgate/settings.json": "mkdir -p .fastgate && echo '{}' > .fastgate/settings.json",
    ".mcp.json": "echo '{}' > .mcp.json",
    ".git/hooks/pre-commit": "mkdir -p .git/hooks && echo 'exit 0' > .git/hooks/pre-commit",
}


@pytest.mark.parametrize("how", ["roots", "writable"])
@pytest.mark.parametrize("write", sorted(WRITES))
async def test_a_roots_absent_protected_paths_stay_protected_inside_a_wider_root(
    tmp_path: Path, write: str, how: str
) -> None:
    # Namespaces only: without them, protected paths inside a writable root are a stated gap.
    if not _support.sandbox_support().namespaces:
        pytest.skip("user namespaces are not usable here")
    workspace = tmp_path / "project"
    workspace.mkdir()
    if how == "roots":  # the bash built-in's roots: the workspace and additional_dirs
        shell, roots = SandboxedShell(), [str(workspace), str(tmp_path)]
    else:
        shell, roots = SandboxedShell(SandboxPolicy(writable=(str(tmp_path),))), None
    result = await shell.run(WRITES[write], cwd=str(workspace), timeout=60, roots=roots)
    assert result.sandboxed, result
    assert not (workspace / write).exists(), result


# -- the private temporary directory -------------------------------------------------------------


async def test_another_call_cannot_read_a_calls_temporary_directory(
    tmp_path: Path, mechanism: str, request: pytest.FixtureRequest
) -> None:
    secret = unique("fastgate-tmp-secret")
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    fifo, told = first / "go", first / "where"
    os.mkfifo(fifo)
    os.mkfifo(told)
    writer = SandboxedShell().run(
        f'echo {secret} > "$TMPDIR/secret"; echo "$TMPDIR" > where; read < go',
        cwd=str(first),
        timeout=60,
    )
    running = asyncio.ensure_future(writer)
    try:
        async with asyncio.timeout(60):
            where = (await asyncio.to_thread(told.read_text)).strip()
        reader = await SandboxedShell().run(
            f"cat {where}/secret /tmp/fastgate-sandbox-*/secret /tmp/fastgate-sandbox-*/*/secret"
            " 2>/dev/null",
            cwd=str(second),
            timeout=60,
        )
        assert secret not in reader.output
    finally:
        await asyncio.to_thread(subprocess.run, ["sh", "-c", f"echo > {fifo}"], timeout=60)
        await running


# -- the user's terminals and shared memory ------------------------------------------------------


@pytest.fixture(name="terminal")
def terminal_fixture() -> Iterator[tuple[int, str]]:
    """A terminal of the server's: its master end, and the path of the end a user types into."""
    master, slave = os.openpty()
    try:
        yield master, os.ttyname(slave)
    finally:
        os.close(master)
        os.close(slave)


async def test_a_command_cannot_read_what_is_typed_into_the_users_terminal(
    tmp_path: Path, mechanism: str, terminal: tuple[int, str]
) -> None:
    # With namespaces /dev is nodev; without them, Landlock grants nothing in /dev but the
    # usable devices.
    master, path = terminal
    typed = unique("typed-password")
    os.write(master, f"{typed}\n".encode())
    result = await SandboxedShell().run(
        f"timeout 5 head -n 1 {path}", cwd=str(tmp_path), timeout=60
    )
    assert result.sandboxed, result
    assert typed not in result.output


async def test_a_command_cannot_read_the_users_shared_memory(
    tmp_path: Path, mechanism: str
) -> None:
    # With namespaces /dev/shm is the sandbox's own; without them, Landlock grants nothing in
    # /dev but the usable devices.
    secret = unique("shared-secret")
    segment = Path("/dev/shm") / unique("fastgate-shm")
    segment.write_text(secret)
    try:
        result = await SandboxedShell().run(f"cat {segment}", cwd=str(tmp_path), timeout=60)
    finally:
        segment.unlink()
    assert result.sandboxed, result
    assert secret not in result.output


# -- a directory the search cannot read -----------------------------------------------------------


@pytest.fixture(name="server_not_root")
def server_not_root_fixture(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The search sees what a server that is not root sees: a directory without its owner's
    read permission cannot be listed (root lists it all the same)."""
    real = os.scandir

    def scandir(path: Any = ".") -> Any:
        if isinstance(path, str) and path.startswith(str(tmp_path)):
            if not os.stat(path).st_mode & stat.S_IRUSR:
                raise PermissionError(13, "Permission denied", path)
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)


def make_tree_with_secret(tmp_path: Path, where: str) -> str:
    (tmp_path / "certs" / "deeper").mkdir(parents=True)
    for name in (".claude", ".fastgate", ".git/hooks"):
        (tmp_path / name).mkdir(parents=True)
    (tmp_path / ".mcp.json").write_text("{}")
    (tmp_path / ".git" / "config").write_text("[core]\n")
    secret = unique("secret")
    (tmp_path / where).write_text(secret)
    return secret


@pytest.mark.parametrize("where", [".env", "certs/server.key"])
async def test_a_secret_cannot_be_taken_out_of_the_searchs_sight_by_a_mode(
    tmp_path: Path, server_not_root: None, where: str
) -> None:
    # Namespaces only: without them, hidden files inside the roots are a stated gap. One call
    # takes the read permission off the directories holding a secret (the search of the next
    # call could not list them, so it hid nothing there), the next one gives it back. Here the
    # root itself cannot be listed: the next call is not run, with a structured error.
    if not _support.sandbox_support().namespaces:
        pytest.skip("user namespaces are not usable here")
    secret = make_tree_with_secret(tmp_path, where)
    shell = SandboxedShell()
    try:
        first = await shell.run("chmod 300 certs .; touch certs/t t", cwd=str(tmp_path), timeout=60)
        assert first.exit_code == 0, first
        with pytest.raises(ToolFault) as refused:
            await shell.run(f"chmod 755 certs .; cat {where}", cwd=str(tmp_path), timeout=60)
        assert refused.value.details["reason"] == "sandbox_failed"
        assert refused.value.details["unlistable"] == str(tmp_path)
        assert isinstance(refused.value, OSError)  # for spawners other than the shell
        assert str(tmp_path) in refused.value.message
    finally:
        for directory in (tmp_path, tmp_path / "certs"):
            directory.chmod(0o755)
    # Listable again: the calls run as before.
    third = await shell.run(f"cat {where}; echo done", cwd=str(tmp_path), timeout=60)
    assert third.sandboxed and "done" in third.output and secret not in third.output, third


CHMODS = {
    "chmod 300": "chmod 300 {d}; touch {d}/t",
    "chmod 000": "chmod 000 {d}; touch t",
    "chmod u-r": "chmod u-r {d}; touch {d}/t",
    "chmod a= by find": "find {d} -maxdepth 0 -exec chmod a= {{}} +; touch t",
}


@pytest.mark.parametrize("chmod", sorted(CHMODS))
@pytest.mark.parametrize("where", ["certs", "certs/deeper"])
async def test_a_secret_below_a_directory_the_search_cannot_list_stays_hidden(
    tmp_path: Path, server_not_root: None, chmod: str, where: str
) -> None:
    if not _support.sandbox_support().namespaces:
        pytest.skip("user namespaces are not usable here")
    secret = make_tree_with_secret(tmp_path, "certs/deeper/server.key")
    (tmp_path / "certs" / "deeper" / "notes.txt").write_text("some notes")
    shell = SandboxedShell()
    try:
        first = await shell.run(CHMODS[chmod].format(d=where), cwd=str(tmp_path), timeout=60)
        assert first.exit_code == 0, first
        # Hidden as a whole, read-only, and kept where it is.
        second = await shell.run(
            f"chmod -R 755 {where}; cat certs/deeper/server.key; mv {where} moved; "
            "cp -r certs copied; cat copied/deeper/server.key moved/server.key; "
            f"touch {where}/planted",
            cwd=str(tmp_path),
            timeout=60,
        )
        assert second.sandboxed, second
        assert secret not in second.output, second
        # mv copies what it cannot rename: the cover, empty.
        assert not (tmp_path / "moved" / "server.key").exists(), second
        assert (tmp_path / "certs" / "deeper" / "server.key").read_text() == secret
    finally:
        (tmp_path / where).chmod(0o755)
    assert not (tmp_path / where / "planted").exists()
    # The server can list it again (the user gave the permission back): it is searched again,
    # only the secret is hidden and the rest reads as before.
    third = await shell.run(
        "cat certs/deeper/notes.txt certs/deeper/server.key", cwd=str(tmp_path), timeout=60
    )
    assert third.sandboxed, third
    assert "some notes" in third.output and secret not in third.output, third


async def test_a_protected_file_cannot_be_taken_out_of_the_searchs_sight_by_a_mode(
    tmp_path: Path, server_not_root: None
) -> None:
    if not _support.sandbox_support().namespaces:
        pytest.skip("user namespaces are not usable here")
    settings = tmp_path / "sub" / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text("{}")
    shell = SandboxedShell()
    try:
        first = await shell.run("chmod 300 sub; touch sub/t", cwd=str(tmp_path), timeout=60)
        assert first.exit_code == 0, first
        second = await shell.run(
            "chmod 755 sub; echo planted > sub/.claude/settings.json",
            cwd=str(tmp_path),
            timeout=60,
        )
        assert second.sandboxed, second
    finally:
        (tmp_path / "sub").chmod(0o755)
    assert settings.read_text() == "{}"


# -- an absent read-only path ---------------------------------------------------------------------

CREATES = {
    "a file": "echo made > {path}",
    "a directory": "mkdir {path} && touch {path}/inside",
    "a symbolic link": "ln -s /etc/hostname {path}",
}


@pytest.mark.parametrize("create", sorted(CREATES))
async def test_an_absent_read_only_path_cannot_be_created(tmp_path: Path, create: str) -> None:
    # As protected paths: "read_only paths stay read-only the same way" (docs/sandbox.md), an
    # absent one included. Namespaces only: without them, read-only paths inside a writable
    # root are a stated gap.
    if not _support.sandbox_support().namespaces:
        pytest.skip("user namespaces are not usable here")
    target = tmp_path / "dist"
    shell = SandboxedShell(SandboxPolicy(read_only=(str(target),)))
    result = await shell.run(CREATES[create].format(path="dist"), cwd=str(tmp_path), timeout=60)
    assert result.sandboxed, result
    assert not (target.exists() or target.is_symlink()), result
