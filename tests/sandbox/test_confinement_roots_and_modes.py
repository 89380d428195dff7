"""What the planner keeps when the roots nest, when a ``read_only`` path is absent, when the
search cannot list a directory, and what Landlock alone leaves of ``/dev``: several spellings
of each way in, and the controls that what a command may do still works."""

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
from fastgate.sandbox import SandboxedShell, SandboxPolicy, _planner, _support
from tests.sandbox.confinement_kit import (
    PYTHON,
    mechanism_fixture,  # noqa: F401  (the fixture "mechanism")
    no_process_outlives_the_test,  # noqa: F401  (autouse)
    unique,
)

# Kernel and process mechanisms, the same in both builds: run once, in the compiled build.
pytestmark = pytest.mark.slow


@pytest.fixture(name="namespaces")
def namespaces_fixture() -> None:
    # Without namespaces, protected, read-only and hidden paths inside a writable root are a
    # stated gap.
    if not _support.sandbox_support().namespaces:
        pytest.skip("user namespaces are not usable here")


def git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


# -- a root inside a wider root -------------------------------------------------------------------

CREATES_IN_THE_WORKSPACE = {
    "python": f"{PYTHON} -c \"import os; os.mkdir('.claude'); "
    "open('.claude/settings.json', 'w').write('{{}}')\"",
    "moved in": "mkdir ../made && echo '{{}}' > ../made/settings.json && mv ../made .fastgate",
    "copied in": "echo '{{}}' > ../x.json && cp ../x.json .mcp.json",
    "a link": "ln -s ../elsewhere .claude",
    "from the parent": "echo '{{}}' > {workspace}/.mcp.json",
    "hooks": "mkdir -p .git/hooks && printf 'touch pwned' > .git/hooks/post-checkout",
}
PROTECTED_NAMES = (".claude", ".fastgate", ".mcp.json", ".git")


@pytest.mark.parametrize("nesting", ["child", "grandchild"])
@pytest.mark.parametrize("how", ["roots", "writable", "both"])
@pytest.mark.parametrize("create", sorted(CREATES_IN_THE_WORKSPACE))
async def test_an_inner_roots_absent_protected_paths_cannot_be_created(
    tmp_path: Path, namespaces: None, create: str, how: str, nesting: str
) -> None:
    workspace = tmp_path / "project" if nesting == "child" else tmp_path / "a" / "project"
    workspace.mkdir(parents=True)
    roots: list[str] | None = None
    writable: tuple[str, ...] = ()
    if how in ("roots", "both"):
        roots = [str(workspace), str(tmp_path)]
    if how in ("writable", "both"):
        writable = (str(tmp_path),)
    shell = SandboxedShell(SandboxPolicy(writable=writable))
    command = CREATES_IN_THE_WORKSPACE[create].format(workspace=workspace)
    result = await shell.run(command, cwd=str(workspace), timeout=60, roots=roots)
    assert result.sandboxed, result
    made = [n for n in PROTECTED_NAMES if (workspace / n).exists() or (workspace / n).is_symlink()]
    assert made == [], result
    # The wider root stays writable around it.
    after = await shell.run(
        "echo ok > ../beside && echo ok > here", cwd=str(workspace), roots=roots
    )
    assert after.exit_code == 0, after
    assert (workspace / "here").exists() and (workspace.parent / "beside").exists()


async def test_an_inner_roots_existing_git_still_commits(tmp_path: Path, namespaces: None) -> None:
    workspace = tmp_path / "project"
    workspace.mkdir()
    assert git(workspace, "init", "-q", ".").returncode == 0
    shell = SandboxedShell()
    roots = [str(workspace), str(tmp_path)]
    result = await shell.run(
        "echo one > f && git -c user.name=t -c user.email=t@t add f && "
        "git -c user.name=t -c user.email=t@t commit -qm one && "
        "echo planted > .git/hooks/pre-commit; git config core.pager evil",
        cwd=str(workspace),
        timeout=60,
        roots=roots,
    )
    assert result.sandboxed, result
    assert git(workspace, "log", "--oneline").stdout.count("\n") == 1, result
    assert not (workspace / ".git" / "hooks" / "pre-commit").exists()
    assert "evil" not in (workspace / ".git" / "config").read_text()


@pytest.mark.parametrize("name", [".env", ".env.local"])
async def test_an_inner_roots_secrets_are_hidden(
    tmp_path: Path, namespaces: None, name: str
) -> None:
    # ``.env`` is a pattern of the root: each root asked has its own, the inner one included.
    workspace = tmp_path / "project"
    workspace.mkdir()
    secret = unique("secret")
    (workspace / name).write_text(secret)
    result = await SandboxedShell().run(
        f"cat {name} {workspace}/{name}; cd .. && cat project/{name}",
        cwd=str(workspace),
        timeout=60,
        roots=[str(workspace), str(tmp_path)],
    )
    assert result.sandboxed, result
    assert secret not in result.output


async def test_nested_roots_are_planned_once_while_nothing_changes(
    tmp_path: Path, namespaces: None
) -> None:
    # The placeholders made (and removed) in the inner root at each call change its mtime, not
    # its entries: the search is not walked again for them.
    workspace = tmp_path / "project"
    (workspace / "src").mkdir(parents=True)
    (workspace / "src" / "main.py").write_text("")
    read_only = workspace / "src" / "dist"
    policy = SandboxPolicy(read_only=(str(read_only),))
    roots = [str(workspace), str(tmp_path)]
    first = _planner.layout(policy, roots, str(workspace))
    assert (str(workspace), ".claude", "d") in first.placeholders
    assert (str(workspace / "src"), "dist", "f") in first.placeholders
    await asyncio.sleep(0.2)  # past the clock tick an mtime could hide a change in
    again = _planner.layout(policy, roots, str(workspace))
    for directory, name, kind in first.placeholders:  # as a launcher does at a call
        path = os.path.join(directory, name)
        os.mkdir(path, 0) if kind == "d" else os.close(os.open(path, os.O_CREAT, 0))
    for directory, name, kind in first.placeholders:
        path = os.path.join(directory, name)
        os.rmdir(path) if kind == "d" else os.unlink(path)
    walks = 0
    real = os.scandir

    def counting(path: Any = ".") -> Any:
        nonlocal walks
        walks += path == str(tmp_path)
        return real(path)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "scandir", counting)
        patch.setattr(_planner, "_LAYOUTS", {})  # the layout is made again, the search reused
        third = _planner.layout(policy, roots, str(workspace))
    assert third == again == first
    assert walks == 0  # the wider root was not walked again


# -- an absent read-only path ---------------------------------------------------------------------

READ_ONLY_CREATES = {
    "python": f"{PYTHON} -c \"open('{{path}}', 'w').write('made')\"",
    "moved in": "echo made > made-{name} && mv made-{name} {path}",
    "copied in": "cp /etc/hostname {path}",
    "mkdir -p": "mkdir -p {path}/sub && touch {path}/sub/f",
    "a fifo": "mkfifo {path}",
    "a hard link": "echo made > hard-{name} && ln hard-{name} {path}",
}


@pytest.mark.parametrize("spelling", ["dist", "dist/", "build/out", "./gen/../dist"])
@pytest.mark.parametrize("create", sorted(READ_ONLY_CREATES))
async def test_an_absent_read_only_path_cannot_be_created_however_spelled(
    tmp_path: Path, namespaces: None, create: str, spelling: str
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "gen").mkdir()
    relative = {"dist/": "dist", "./gen/../dist": "dist"}.get(spelling, spelling)
    target = workspace / relative
    path_text = str(workspace / spelling) if not spelling.endswith("/") else f"{workspace}/dist/"
    shell = SandboxedShell(SandboxPolicy(read_only=(path_text,)))
    command = READ_ONLY_CREATES[create].format(path=relative, name=relative.replace("/", "-"))
    result = await shell.run(command, cwd=str(workspace), timeout=60)
    assert result.sandboxed, result
    assert not (target.exists() or target.is_symlink()), result
    # What lies beside it stays writable, and nothing is left once the call ended.
    result = await shell.run("echo ok > beside", cwd=str(workspace), timeout=60)
    assert result.exit_code == 0, result
    first = workspace / relative.split("/")[0]
    assert not (target.exists() or target.is_symlink() or first.exists()), result


async def test_an_existing_read_only_path_inside_a_root_stays_read_only(
    tmp_path: Path, namespaces: None
) -> None:
    (tmp_path / "dist").mkdir()
    (tmp_path / "dist" / "a").write_text("kept")
    shell = SandboxedShell(SandboxPolicy(read_only=(str(tmp_path / "dist"),)))
    result = await shell.run(
        "echo x > dist/a; touch dist/b; rm -rf dist; cat dist/a", cwd=str(tmp_path), timeout=60
    )
    assert "kept" in result.output
    assert sorted(os.listdir(tmp_path / "dist")) == ["a"]


# -- a directory the search cannot list ------------------------------------------------------------


@pytest.fixture(name="server_not_root")
def server_not_root_fixture(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The search sees what a server that is not root sees (root lists it all the same)."""
    real = os.scandir

    def scandir(path: Any = ".") -> Any:
        if isinstance(path, str) and path.startswith(str(tmp_path)):
            if not os.stat(path).st_mode & stat.S_IRUSR:
                raise PermissionError(13, "Permission denied", path)
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)


@pytest.fixture(name="restore_modes")
def restore_modes_fixture(tmp_path: Path) -> Iterator[None]:
    yield
    for directory, _, _ in os.walk(tmp_path):
        os.chmod(directory, 0o755)


@pytest.mark.parametrize("where", ["inside the workspace", "beside it"])
@pytest.mark.parametrize("writable", [True, False])
async def test_a_root_the_search_cannot_list_fails_the_call(
    tmp_path: Path,
    namespaces: None,
    server_not_root: None,
    restore_modes: None,
    where: str,
    writable: bool,
) -> None:
    workspace = tmp_path / "ws"
    other = workspace / "docs" if where == "inside the workspace" else tmp_path / "docs"
    other.mkdir(parents=True)
    (other / ".env").write_text(unique("secret"))
    other.chmod(0o300)
    shell = SandboxedShell(SandboxPolicy(read_only=() if writable else (str(other),)))
    with pytest.raises(ToolFault) as refused:
        await shell.run(
            f"chmod 755 {other}; cat {other}/.env",
            cwd=str(workspace),
            timeout=60,
            roots=[str(workspace), str(other)],
        )
    assert refused.value.details == {
        "reason": "sandbox_failed",
        "step": None,
        "unlistable": str(other),
    }


async def test_a_directory_nobody_may_list_does_not_stop_the_calls(
    tmp_path: Path, namespaces: None, server_not_root: None, restore_modes: None
) -> None:
    # A directory another user owns (a container's volume) stays as unreadable as it was; the
    # call runs and writes beside it.
    (tmp_path / "volume").mkdir(mode=0o700)
    (tmp_path / "volume").chmod(0o300)
    result = await SandboxedShell().run(
        "ls volume; echo ok > beside && cat beside", cwd=str(tmp_path), timeout=60
    )
    assert result.sandboxed and "ok" in result.output, result


# -- /dev without namespaces ----------------------------------------------------------------------


DEVICE_USES = {
    "/dev/null": "echo x > /dev/null && cat /dev/null && echo null-ok",
    "/dev/zero": "head -c 4 /dev/zero | wc -c",
    "/dev/urandom": "head -c 4 /dev/urandom | wc -c",
    "/dev/random": "head -c 4 /dev/random | wc -c",
    "/dev/stderr": "echo to-stderr > /dev/stderr",
    "/dev/stdout": "echo to-stdout > /dev/stdout",
    "/dev/stdin": "echo from-stdin | cat /dev/stdin",
    "/dev/fd": "cat <(echo from-fd)",
    "listing /dev": "ls /dev | grep -x null",
}
EXPECTED = {
    "/dev/null": "null-ok",
    "/dev/zero": "4",
    "/dev/urandom": "4",
    "/dev/random": "4",
    "/dev/stderr": "to-stderr",
    "/dev/stdout": "to-stdout",
    "/dev/stdin": "from-stdin",
    "/dev/fd": "from-fd",
    "listing /dev": "null",
}


@pytest.mark.parametrize("use", sorted(DEVICE_USES))
async def test_the_usable_devices_still_work(tmp_path: Path, mechanism: str, use: str) -> None:
    result = await SandboxedShell().run(DEVICE_USES[use], cwd=str(tmp_path), timeout=60)
    assert result.sandboxed, result
    assert EXPECTED[use] in result.output.split(), result


@pytest.fixture(name="shm_segment")
def shm_segment_fixture() -> Iterator[tuple[Path, str]]:
    secret = unique("shared-secret")
    segment = Path("/dev/shm") / unique("fastgate-shm")
    segment.write_text(secret)
    try:
        yield segment, secret
    finally:
        segment.unlink()


SHM_READS = {
    "cat": "cat {segment}",
    "python": f"{PYTHON} -c \"print(open('{{segment}}').read())\"",
    "by a glob": "cat /dev/shm/fastgate-shm-*",
    "through /dev/fd": "exec 3< {segment}; cat <&3",
    "a relative path": "cd /dev/shm && cat {name}",
    "copied": "cp {segment} copied; cat copied",
}


@pytest.mark.parametrize("read", sorted(SHM_READS))
async def test_the_users_shared_memory_is_unreadable_however_read(
    tmp_path: Path, mechanism: str, shm_segment: tuple[Path, str], read: str
) -> None:
    segment, secret = shm_segment
    command = SHM_READS[read].format(segment=segment, name=segment.name)
    result = await SandboxedShell().run(command, cwd=str(tmp_path), timeout=60)
    assert result.sandboxed, result
    assert secret not in result.output
    assert not (tmp_path / "copied").exists() or secret not in (tmp_path / "copied").read_text()


async def test_the_users_terminals_are_unwritable(tmp_path: Path, mechanism: str) -> None:
    master, slave = os.openpty()
    try:
        os.set_blocking(master, False)
        path = os.ttyname(slave)
        result = await SandboxedShell().run(
            f"echo typed-in > {path}; {PYTHON} -c \"open('{path}', 'w').write('x')\"",
            cwd=str(tmp_path),
            timeout=60,
        )
        assert result.sandboxed, result
        try:
            got = os.read(master, 100)
        except BlockingIOError:
            got = b""
        assert b"typed-in" not in got and b"x" not in got
    finally:
        os.close(master)
        os.close(slave)


async def test_a_directory_listable_again_is_searched_again(
    tmp_path: Path, namespaces: None, server_not_root: None, restore_modes: None
) -> None:
    # Its mode changed, not its mtime: the cached search and layout are not trusted for it.
    (tmp_path / "certs").mkdir()
    (tmp_path / "certs" / "notes.txt").write_text("some notes")
    secret = unique("secret")
    (tmp_path / "certs" / "server.key").write_text(secret)
    (tmp_path / "certs").chmod(0o300)
    await asyncio.sleep(0.2)  # settled: the search and the layout are cached
    shell = SandboxedShell()
    read = "cat certs/notes.txt certs/server.key"
    hidden = await shell.run(read, cwd=str(tmp_path), timeout=60)
    assert "some notes" not in hidden.output and secret not in hidden.output, hidden
    (tmp_path / "certs").chmod(0o755)  # the user gives the permission back
    again = await shell.run(read, cwd=str(tmp_path), timeout=60)
    assert "some notes" in again.output and secret not in again.output, again
