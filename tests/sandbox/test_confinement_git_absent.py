"""What git would read once it exists cannot be made by a sandboxed command: a ``config.worktree``
not written yet, the git directory and ``.git`` file of a submodule not initialised yet. Each case
has its control: the same command through ``LocalShell`` makes the user's next ``git status`` run
what it planted."""

from __future__ import annotations

from pathlib import Path

import pytest

from fastgate.sandbox import DEFAULT_PROTECTED, SandboxPolicy
from tests.sandbox.confinement_kit import (
    bash,
    no_process_outlives_the_test,  # noqa: F401  (autouse)
    output,
    sandboxed,
    unconfined,
)
from tests.sandbox.test_confinement_git import HOOK_MARK, git, hosts_git_ran_it, repository


def fsmonitor(mark: Path) -> str:
    return f'[core]\\n\\tfsmonitor = "echo {HOOK_MARK} >> {mark}; false"\\n'


WORKTREE_CONFIG = {
    "by redirect": "printf '{config}' > .git/config.worktree",
    "moved in": "printf '{config}' > c && mv c .git/config.worktree",
    "as a link": "printf '{config}' > c && ln -s ../c .git/config.worktree",
    "by git": "git config --worktree core.fsmonitor 'echo {hook} >> {mark}; false'",
}


@pytest.mark.parametrize("enabled", ["extension on", "extension enabled later"])
@pytest.mark.parametrize("spelling", list(WORKTREE_CONFIG))
async def test_an_absent_worktree_configuration_cannot_be_written(
    tmp_path: Path, spelling: str, enabled: str
) -> None:
    workspace = tmp_path / "ws"
    repository(workspace)
    if enabled == "extension on":
        assert git(workspace, "config", "extensions.worktreeConfig", "true").returncode == 0
    mark = tmp_path / "mark"
    command = WORKTREE_CONFIG[spelling].format(config=fsmonitor(mark), hook=HOOK_MARK, mark=mark)
    result = await bash(sandboxed(workspace), command)
    # The user's own git may enable the extension after the call (git sparse-checkout init).
    assert git(workspace, "config", "extensions.worktreeConfig", "true").returncode == 0
    assert not hosts_git_ran_it(workspace, mark), output(result)
    # git reads the cover as no configuration, in the sandbox and out of it.
    commit = "echo two > f && git -c user.name=t -c user.email=t@t commit -qam two && echo done"
    result = await bash(sandboxed(workspace), commit)
    assert result.ok and "done" in output(result), output(result)
    assert git(workspace, "status", "--short").returncode == 0


async def test_the_control_plants_a_worktree_configuration(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    repository(workspace)
    assert git(workspace, "config", "extensions.worktreeConfig", "true").returncode == 0
    mark = tmp_path / "mark"
    command = WORKTREE_CONFIG["by redirect"].format(config=fsmonitor(mark))
    assert (await bash(unconfined(workspace), command)).ok
    assert hosts_git_ran_it(workspace, mark)


def plant_submodule(mark: Path, name: str = "lib", path: str = "lib") -> str:
    """Shell text initialising submodule ``name`` at ``path`` with a git directory whose
    configuration runs a command (as the user's ``git status`` enters it)."""
    up = "../" * (path.count("/") + 1)
    return (
        f"git init -q --bare .git/modules/{name} && "
        f"git -C .git/modules/{name} config core.bare false && "
        f"git -C .git/modules/{name} config core.worktree ../../../{path} && "
        f"git -C .git/modules/{name} config core.fsmonitor 'echo {HOOK_MARK} >> {mark}; false' && "
        f"echo 'gitdir: {up}.git/modules/{name}' > {path}/.git"
    )


def with_uninitialised_submodule(workspace: Path, path: str = "lib", checkout: bool = True) -> None:
    """A repository whose index and ``.gitmodules`` hold submodule ``lib`` at ``path``, never
    initialised (an empty checkout, or none, and no ``.git/modules/lib``)."""
    repository(workspace)
    head = git(workspace, "rev-parse", "HEAD").stdout.strip()
    (workspace / ".gitmodules").write_text(
        f'[submodule "lib"]\n\tpath = {path}\n\turl = ./nowhere\n'
    )
    assert git(workspace, "add", ".gitmodules").returncode == 0
    added = git(workspace, "update-index", "--add", "--cacheinfo", f"160000,{head},{path}")
    assert added.returncode == 0, added.stderr
    assert git(workspace, "commit", "-qm", "lib").returncode == 0
    if checkout:
        (workspace / path).mkdir(parents=True)


POLICIES = {
    "default": SandboxPolicy(),
    "index protected": SandboxPolicy(protected=(*DEFAULT_PROTECTED, "**/.git/index")),
}


@pytest.mark.parametrize("policy", list(POLICIES))
@pytest.mark.parametrize("layout", ["lib", "deep/lib", "no checkout", "index format 4"])
async def test_an_uninitialised_submodule_cannot_be_initialised(
    tmp_path: Path, policy: str, layout: str
) -> None:
    workspace = tmp_path / "ws"
    path = "deep/lib" if layout == "deep/lib" else "lib"
    with_uninitialised_submodule(workspace, path, checkout=layout != "no checkout")
    if layout == "index format 4":
        assert git(workspace, "update-index", "--index-version", "4").returncode == 0
    mark = tmp_path / "mark"
    plant = f"mkdir -p {path} && {plant_submodule(mark, path=path)}"
    result = await bash(sandboxed(workspace, POLICIES[policy]), plant)
    assert not (workspace / ".git" / "modules").exists(), output(result)
    assert not (workspace / path / ".git").exists(), output(result)
    assert not hosts_git_ran_it(workspace, mark)
    # git keeps working around the submodule in the sandbox (commits where the index is not
    # protected).
    work = "git status --short >/dev/null && echo two > f"
    if policy == "default":
        work += " && git -c user.name=t -c user.email=t@t commit -qam two"
    result = await bash(sandboxed(workspace, POLICIES[policy]), f"{work} && echo done")
    assert result.ok and "done" in output(result), output(result)


async def test_a_renamed_submodule_cannot_be_initialised_either(tmp_path: Path) -> None:
    """The name a ``.gitmodules`` gives and the path the index holds are both covered."""
    workspace = tmp_path / "ws"
    with_uninitialised_submodule(workspace)
    mark = tmp_path / "mark"
    rename = 'sed -i \'s/submodule "lib"/submodule "other"/\' .gitmodules && '
    result = await bash(sandboxed(workspace), rename + plant_submodule(mark, name="other"))
    assert not (workspace / "lib" / ".git").exists(), output(result)
    assert not hosts_git_ran_it(workspace, mark)


async def test_the_control_initialises_the_submodule(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    with_uninitialised_submodule(workspace)
    mark = tmp_path / "mark"
    result = await bash(unconfined(workspace), plant_submodule(mark))
    assert result.ok, output(result)
    assert hosts_git_ran_it(workspace, mark)
