"""The hooks directory ``core.hooksPath`` names and the files git's configuration includes
cannot be written by a sandboxed command: existing ones are read-only, an absent hooks
directory cannot be made (git finds no hook in its placeholder, and the call leaves none
behind), and the user's next ``git commit`` outside runs nothing the command planted. Hook
managers' files (``.husky``, ``.pre-commit-config.yaml``) are read-only where they exist.
Each case has its control: the same command through ``LocalShell`` plants what the sandbox
refuses."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.sandbox.confinement_kit import (
    bash,
    names,
    no_process_outlives_the_test,  # noqa: F401  (autouse)
    output,
    sandboxed,
    succeeded,
    unconfined,
)

MARK = "planted-hook-ran"
PLANT = (
    "printf '#!/bin/sh\\necho {mark} >> {log}\\n' > .githooks/pre-commit; "
    "chmod +x .githooks/pre-commit; "
    "printf '[core]\\n\\tfsmonitor = ./x\\n' >> shared.gitconfig; "
    "printf x > .husky/pre-commit; "
    "printf x > .pre-commit-config.yaml; "
    "echo done"
)


def git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        capture_output=True,
        text=True,
        check=False,
    )


def repository(workspace: Path, hooks: bool) -> Path:
    """A repository whose configuration names ``.githooks`` (present when ``hooks``) and
    includes ``shared.gitconfig``, with husky's and pre-commit's files in place."""
    workspace.mkdir(parents=True)
    assert git(workspace, "init", "-q").returncode == 0
    git(workspace, "config", "core.hooksPath", ".githooks")
    git(workspace, "config", "include.path", "../shared.gitconfig")
    (workspace / "shared.gitconfig").write_text("[user]\n\tname = t\n")
    (workspace / ".husky").mkdir()
    (workspace / ".husky" / "pre-commit").write_text("npm test\n")
    (workspace / ".pre-commit-config.yaml").write_text("repos: []\n")
    if hooks:
        (workspace / ".githooks").mkdir()
    return workspace


def users_next_commit_ran_the_hook(workspace: Path, log: Path) -> bool:
    (workspace / "work.txt").write_text("work")
    git(workspace, "add", "work.txt")
    git(workspace, "commit", "-q", "-m", "work")
    return log.exists() and MARK in log.read_text()


async def test_existing_ones_are_read_only(tmp_path: Path) -> None:
    workspace = repository(tmp_path / "ws", hooks=True)
    log = tmp_path / "log"
    result = await bash(sandboxed(workspace), PLANT.format(mark=MARK, log=log))
    assert "done" in output(result), output(result)
    assert names(workspace / ".githooks") == []
    assert (workspace / "shared.gitconfig").read_text() == "[user]\n\tname = t\n"
    assert (workspace / ".husky" / "pre-commit").read_text() == "npm test\n"
    assert (workspace / ".pre-commit-config.yaml").read_text() == "repos: []\n"
    assert not users_next_commit_ran_the_hook(workspace, log)


async def test_an_absent_hooks_directory_cannot_be_made(tmp_path: Path) -> None:
    workspace = repository(tmp_path / "ws", hooks=False)
    log = tmp_path / "log"
    plant = "mkdir -p .githooks; " + PLANT.format(mark=MARK, log=log)
    result = await bash(sandboxed(workspace), plant)
    assert "done" in output(result), output(result)
    assert not (workspace / ".githooks").exists()  # nor left behind by the call
    assert not users_next_commit_ran_the_hook(workspace, log)


async def test_git_works_inside_with_the_hooks_directory_covered(tmp_path: Path) -> None:
    """(git says, on standard error, that it ignored each hook it looked for in the
    placeholder: a hint, not a failure.)"""
    workspace = repository(tmp_path / "ws", hooks=False)
    command = (
        "echo a > a.txt && git add a.txt && "
        "git -c user.name=t -c user.email=t@t commit -q -m a && git log --format=%s"
    )
    result = await bash(sandboxed(workspace), command)
    assert succeeded(result), output(result)
    assert git(workspace, "log", "--format=%s").stdout == "a\n"


async def test_the_control_plants_them(tmp_path: Path) -> None:
    workspace = repository(tmp_path / "ws", hooks=False)
    log = tmp_path / "log"
    plant = "mkdir -p .githooks; " + PLANT.format(mark=MARK, log=log)
    assert "done" in output(await bash(unconfined(workspace), plant))
    assert "fsmonitor" in (workspace / "shared.gitconfig").read_text()
    assert (workspace / ".husky" / "pre-commit").read_text() == "x"
    git(workspace, "config", "--unset", "include.path")  # its fsmonitor would fail the commit
    assert users_next_commit_ran_the_hook(workspace, log)


async def test_hooks_in_a_hooks_directory_that_is_the_project(tmp_path: Path) -> None:
    """``core.hooksPath = .``: the project's files named as hooks are read-only (the sandbox
    cannot cover the project itself), the rest is written as usual."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    assert git(workspace, "init", "-q").returncode == 0
    git(workspace, "config", "core.hooksPath", ".")
    (workspace / "pre-commit").write_text("#!/bin/sh\nexit 0\n")
    command = "printf x > pre-commit; printf y > notes.txt; echo done"
    result = await bash(sandboxed(workspace), command)
    assert "done" in output(result), output(result)
    assert (workspace / "pre-commit").read_text() == "#!/bin/sh\nexit 0\n"
    assert (workspace / "notes.txt").read_text() == "y"
