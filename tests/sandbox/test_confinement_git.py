"""What a sandboxed command cannot leave behind for the user's own tools: git's configuration and
hooks by any of git's indirections (a ``commondir``, a ``.git`` file, a submodule's or a
worktree's git directory), secrets moved out of the search's way or past its budget, secrets of
a read-only root, the kernel's settings; and what it plants cannot stall the server. Each case
has its control: the same command through ``LocalShell`` does what the sandbox refuses."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import fastgate
from fastgate import sandbox
from fastgate.permissions import GIT_INDIRECTIONS
from fastgate.sandbox import SandboxPolicy, _kernel, _planner, _support
from tests.sandbox.confinement_kit import (
    PYTHON,
    bash,
    no_process_outlives_the_test,  # noqa: F401  (autouse)
    output,
    sandboxed,
    unconfined,
)

SECRET = "s3cr3t-" + "y" * 8
HOOK_MARK = "hook-ran-outside"


def git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )


def repository(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    assert git(root, "init", "-q", ".").returncode == 0
    (root / "f").write_text("one\n")
    assert git(root, "add", "f").returncode == 0
    assert git(root, "commit", "-qm", "one").returncode == 0


def evil_git_dir(path: str, mark: Path) -> str:
    """Shell text making ``path`` a git directory whose configuration runs a command (git's
    file-system monitor, asked by every ``git status``) and whose hook does too."""
    return (
        f"mkdir -p {path}/hooks {path}/objects {path}/refs/heads && "
        f"printf 'ref: refs/heads/master\\n' > {path}/HEAD && "
        f"printf '[core]\\n\\trepositoryformatversion = 0\\n\\tfsmonitor = \"echo {HOOK_MARK} "
        f">> {mark}; false\"\\n' > {path}/config && "
        f"printf '#!/bin/sh\\necho {HOOK_MARK} >> {mark}\\n' > {path}/hooks/pre-commit && "
        f"chmod +x {path}/hooks/pre-commit"
    )


def hosts_git_ran_it(workspace: Path, mark: Path) -> bool:
    """What the user does next, outside any sandbox: look at the work and commit it."""
    git(workspace, "status", "--short")
    (workspace / "f").write_text(f"changed {time.monotonic()}\n")
    git(workspace, "commit", "-qam", "next")
    return mark.exists() and HOOK_MARK in mark.read_text()


def test_the_sandbox_protects_the_rules_own_list() -> None:
    """One list by one name: git's indirections in it are placed per git directory found, which
    the commondir cases below show (git keeps working, and none can be created)."""
    assert sandbox.DEFAULT_PROTECTED == fastgate.DEFAULT_PROTECTED
    assert SandboxPolicy().protected == fastgate.DEFAULT_PROTECTED
    assert set(GIT_INDIRECTIONS) <= set(SandboxPolicy().protected)


# A command that points the repository's git at a directory it controls, spelled several ways.
REDIRECTS = {
    "commondir by redirect": "echo ../.evil > .git/commondir",
    "commondir by python": f"{PYTHON} -c \"open('.git/commondir', 'w').write('../.evil')\"",
    "commondir moved in": "echo ../.evil > c && mv c .git/commondir",
    "commondir as a link": "ln -s ../../evil-commondir .git/commondir",
    "commondir copied": "echo ../.evil > c && cp c .git/commondir",
}


@pytest.mark.parametrize("case", list(REDIRECTS))
async def test_git_cannot_be_pointed_at_another_common_directory(tmp_path: Path, case: str) -> None:
    workspace = tmp_path / "ws"
    repository(workspace)
    mark = tmp_path / "mark"
    (tmp_path / "evil-commondir").write_text("../.evil\n")
    setup = evil_git_dir(".evil", mark)
    result = await bash(sandboxed(workspace), f"{setup} && {REDIRECTS[case]}")
    assert not (workspace / ".git" / "commondir").exists(), output(result)
    assert not hosts_git_ran_it(workspace, mark)
    # git works in the sandbox all the same, and after it.
    commit = "echo two > f && git -c user.name=t -c user.email=t@t commit -qam two"
    result = await bash(sandboxed(workspace), f"{commit} && git log --oneline | wc -l")
    assert result.ok and output(result).startswith("3"), output(result)
    assert not (workspace / ".git" / "commondir").exists()  # the cover is gone with the call
    control = workspace.parent / "control"
    repository(control)
    assert (await bash(unconfined(control), f"{setup} && {REDIRECTS[case]}")).ok
    assert hosts_git_ran_it(control, mark)


async def test_a_worktrees_git_file_cannot_be_rewritten(tmp_path: Path) -> None:
    main = tmp_path / "main"
    repository(main)
    worktree = tmp_path / "wt"
    assert git(main, "worktree", "add", "-q", str(worktree)).returncode == 0
    pointer = (worktree / ".git").read_text()
    mark = tmp_path / "mark"
    for spelling in ("echo 'gitdir: .evil' > .git", "echo 'gitdir: .evil' > g && mv g .git",
                     "rm -f .git && echo 'gitdir: .evil' > .git"):  # fmt: skip
        result = await bash(sandboxed(worktree), f"{evil_git_dir('.evil', mark)} && {spelling}")
        assert (worktree / ".git").read_text() == pointer, output(result)
        assert not hosts_git_ran_it(worktree, mark)
    # The worktree's own git directory lies outside the root: read-only as everything there.
    result = await bash(sandboxed(worktree), f"echo x >> {main}/.git/worktrees/wt/HEAD")
    assert not result.ok
    assert (await bash(unconfined(worktree), "echo 'gitdir: .evil' > .git")).ok
    assert (worktree / ".git").read_text() != pointer


async def test_a_submodules_git_directory_is_protected(tmp_path: Path) -> None:
    library = tmp_path / "lib-origin"
    repository(library)
    workspace = tmp_path / "ws"
    repository(workspace)
    added = git(workspace, "-c", "protocol.file.allow=always", "submodule", "add", "-q",
                str(library), "lib")  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert git(workspace, "commit", "-qm", "lib").returncode == 0
    module = workspace / ".git" / "modules" / "lib"
    before = ((module / "config").read_bytes(), sorted(os.listdir(module / "hooks")))
    mark = tmp_path / "mark"
    fsmonitor = f"git config -f .git/modules/lib/config core.fsmonitor 'echo {HOOK_MARK} >> {mark}'"
    for spelling in (
        fsmonitor,
        f"echo 'echo {HOOK_MARK} >> {mark}' > .git/modules/lib/hooks/pre-commit",
        "echo ../../../.evil > .git/modules/lib/commondir",
        "mv .git/modules/lib .git/modules/old && mkdir -p .git/modules/lib",
    ):
        result = await bash(sandboxed(workspace), spelling)
        after = ((module / "config").read_bytes(), sorted(os.listdir(module / "hooks")))
        assert after == before and not (module / "commondir").exists(), output(result)
    assert not hosts_git_ran_it(workspace, mark)
    assert (await bash(unconfined(workspace), fsmonitor)).ok
    assert hosts_git_ran_it(workspace, mark)


async def test_a_nested_repositorys_common_directory_is_protected(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    repository(workspace / "vendor" / "lib")
    mark = tmp_path / "mark"
    command = f"{evil_git_dir('.evil', mark)} && echo ../../../.evil > vendor/lib/.git/commondir"
    result = await bash(sandboxed(workspace), command)
    assert not (workspace / "vendor" / "lib" / ".git" / "commondir").exists(), output(result)
    assert not hosts_git_ran_it(workspace / "vendor" / "lib", mark)


@pytest.mark.parametrize("planted", ["a .git file's commondir", "a .git directory's commondir"])
async def test_a_planted_fifo_does_not_stall_the_server(tmp_path: Path, planted: str) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    git_dir = workspace / ("g" if planted.startswith("a .git file") else ".git")
    git_dir.mkdir()
    (git_dir / "HEAD").write_text("ref: refs/heads/master\n")
    fifo = git_dir / "commondir"
    os.mkfifo(fifo)
    if git_dir.name == "g":
        (workspace / ".git").write_text("gitdir: g\n")
    done = threading.Event()

    def unblock_after_a_while() -> None:
        # Were the server blocked opening the FIFO, it would stay so: a writer frees it (and
        # the test fails on the time it took) instead of the test hanging.
        if done.wait(3):
            return
        while not done.is_set():
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                done.wait(0.05)

    watchdog = threading.Thread(target=unblock_after_a_while)
    watchdog.start()
    try:
        started = time.monotonic()
        result = await bash(sandboxed(workspace), "echo ran", seconds=10)
        elapsed = time.monotonic() - started
    finally:
        done.set()
        watchdog.join()
    assert result.ok and "ran" in output(result), output(result)
    assert elapsed < 2, f"the call took {elapsed:.1f} s: the server waited on the FIFO"


@pytest.fixture(name="secrets")
def secrets_fixture(tmp_path: Path) -> Iterator[Path]:
    workspace = tmp_path / "ws"
    for relative in ("certs/server.key", "app/.env", "deep/a/b/.env.local"):
        path = workspace / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(SECRET)
    (workspace / "README").write_text("readable")
    yield workspace


READS = "cat certs/server.key app/.env deep/a/b/.env.local node_modules/*/* node_modules/*/.env"


@pytest.mark.parametrize(
    "move",
    [
        "mkdir -p node_modules && mv certs app node_modules/",
        "mkdir -p node_modules && mv deep node_modules/",
        "mkdir -p .venv && mv app .venv/ && ln -s .venv/app app",
        "mv app/.env app/env && cat app/env",
    ],
)
async def test_hidden_secrets_cannot_be_moved_out_of_sight(secrets: Path, move: str) -> None:
    ex = sandboxed(secrets)
    moved = await bash(ex, move)
    result = await bash(ex, READS + "; cat README")
    assert SECRET not in output(moved) + output(result)
    assert "readable" in output(result)
    assert (await bash(unconfined(secrets), move)).ok


async def test_flooding_the_search_does_not_uncover_secrets_or_protections(
    secrets: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_planner, "WALK_BUDGET", 200)  # the same as 20,000, a hundred times faster
    repository(secrets / "vendor" / "lib")
    ex = sandboxed(secrets)
    before = await bash(ex, READS)
    assert SECRET not in output(before)
    await bash(ex, "for i in $(seq 1 400); do : > flood-$i; done")
    after = await bash(ex, READS + "; echo evil > vendor/lib/.git/hooks/pre-commit; cat README")
    assert SECRET not in output(after) and "readable" in output(after)
    assert not (secrets / "vendor" / "lib" / ".git" / "hooks" / "pre-commit").exists()


@pytest.mark.parametrize("read_only", ["the root", "everything"])
async def test_a_read_only_roots_secrets_stay_hidden(secrets: Path, read_only: str) -> None:
    policy = SandboxPolicy(read_only=(str(secrets) if read_only == "the root" else "/",))
    ex = sandboxed(secrets, policy)
    result = await bash(ex, READS + "; cat README; touch app/x")
    assert SECRET not in output(result) and "readable" in output(result)
    assert not (secrets / "app" / "x").exists()
    assert SECRET in output(await bash(unconfined(secrets), "cat app/.env"))


@pytest.mark.skipif(os.geteuid() != 0, reason="only root may write the kernel's settings")
@pytest.mark.parametrize("landlock", ["with Landlock", "without Landlock"])
async def test_the_kernels_settings_stay_read_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, landlock: str
) -> None:
    if not _support.sandbox_support().namespaces:
        pytest.skip("user namespaces are not usable here")
    if landlock == "without Landlock":
        monkeypatch.setattr(_kernel, "landlock_abi", lambda: 0)  # as on a kernel without it
        _support.forget_support()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    # Opened for writing only, never written: the host's settings stay as they are either way.
    spellings = (
        "exec 3>>/proc/sys/kernel/domainname && echo OPENED",
        f"{PYTHON} -c \"open('/proc/sys/kernel/core_pattern', 'a'); print('OPENED')\"",
        "exec 3>>/proc/sys/vm/drop_caches && echo OPENED",
    )
    try:
        for spelling in spellings:
            result = await bash(sandboxed(workspace), spelling)
            assert "OPENED" not in output(result), spelling
    finally:
        _support.forget_support()
    assert "OPENED" in output(await bash(unconfined(workspace), spellings[0]))
