"""What Mercurial and Jujutsu read from a repository cannot be written by a sandboxed command: a
Mercurial repository's ``hgrc`` (whose hooks the user's next ``hg status`` runs), existing or
not, in the workspace's repository or a nested one, its ``sharedpath``; a Jujutsu repository's
``config.toml``. A workspace without such a repository gets none. Each case has its control: the
same command through ``LocalShell`` plants what the sandbox refuses. (Under Landlock alone,
without namespaces, protected paths inside a writable root stay writable: docs/sandbox.md.)"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from fastgate.permissions import OTHER_VCS_CONFIGS
from fastgate.sandbox import SandboxPolicy, _planner
from tests.sandbox.confinement_kit import (
    bash,
    names,
    no_process_outlives_the_test,  # noqa: F401  (autouse)
    output,
    sandboxed,
    unconfined,
)

HG = shutil.which("hg")
needs_hg = pytest.mark.skipif(
    HG is None, reason="Mercurial (hg) is not installed; scripts/setup-tools installs it"
)
HOOK_MARK = "hg-hook-ran-outside"


def hg(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert HG is not None
    return subprocess.run(
        [HG, "--config", "ui.username=t", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": "/usr/bin:/bin", "HOME": str(cwd), "HGRCPATH": ""},
    )


def hg_repository(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    assert hg(root, "init", ".").returncode == 0


def hook(mark: Path) -> str:
    return f"[hooks]\\npre-status = echo {HOOK_MARK} >> {mark}\\n"


def hosts_hg_ran_it(repository: Path, mark: Path) -> bool:
    """What the user does next, outside any sandbox: look at the work."""
    hg(repository, "status")
    return mark.exists() and HOOK_MARK in mark.read_text()


HGRC_WRITES = {
    "by redirect": "printf '{hook}' > .hg/hgrc",
    "appended": "printf '{hook}' >> .hg/hgrc",
    "moved in": "printf '{hook}' > c && mv -f c .hg/hgrc",
    "as a link": "printf '{hook}' > c && rm -f .hg/hgrc; ln -s ../c .hg/hgrc",
    "from inside": "cd .hg && printf '{hook}' > hgrc",
    "its directory moved": (
        "mv .hg old && mkdir .hg && cp -r old/* .hg/ && printf '{hook}' > .hg/hgrc"
    ),
}


def test_the_sandbox_protects_the_rules_list_of_them() -> None:
    assert set(OTHER_VCS_CONFIGS) <= set(SandboxPolicy().protected)


@needs_hg
@pytest.mark.parametrize("existing", ["no hgrc yet", "an hgrc of the user's"])
@pytest.mark.parametrize("spelling", list(HGRC_WRITES))
async def test_a_repositorys_hgrc_cannot_be_written(
    tmp_path: Path, spelling: str, existing: str
) -> None:
    workspace = tmp_path / "ws"
    hg_repository(workspace)
    if existing == "an hgrc of the user's":
        (workspace / ".hg" / "hgrc").write_text("[ui]\nusername = user\n")
    mark = tmp_path / "mark"
    command = HGRC_WRITES[spelling].format(hook=hook(mark))
    result = await bash(sandboxed(workspace), command)
    assert not hosts_hg_ran_it(workspace, mark), output(result)
    # Mercurial reads the cover as no configuration, in the sandbox and out of it.
    assert hg(workspace, "status").returncode == 0
    result = await bash(sandboxed(workspace), "echo one > f && hg add -q f && echo added")
    assert "added" in output(result), output(result)


@needs_hg
async def test_a_nested_repositorys_hgrc_and_a_shared_path_cannot_be_written(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    hg_repository(workspace / "lib")
    store = tmp_path / "store"  # outside the roots: what a planted sharedpath would name
    mark = tmp_path / "mark"
    command = (
        f"printf '{hook(mark)}' > lib/.hg/hgrc; "
        "echo shared >> lib/.hg/requires; "
        f"echo {store}/.hg > lib/.hg/sharedpath"
    )
    result = await bash(sandboxed(workspace), command)
    assert not hosts_hg_ran_it(workspace / "lib", mark), output(result)
    assert (workspace / "lib" / ".hg" / "sharedpath").read_text() == ""


@needs_hg
@pytest.mark.parametrize("spelling", ["by redirect", "moved in", "from inside"])
async def test_the_control_plants_a_hook(tmp_path: Path, spelling: str) -> None:
    workspace = tmp_path / "ws"
    hg_repository(workspace)
    mark = tmp_path / "mark"
    command = HGRC_WRITES[spelling].format(hook=hook(mark))
    assert (await bash(unconfined(workspace), command)).ok
    assert hosts_hg_ran_it(workspace, mark)


async def test_a_jujutsu_repositorys_configuration_cannot_be_written(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / ".jj" / "repo" / "store").mkdir(parents=True)
    command = (
        "printf '[ui]\\npager = \"sh -c x\"\\n' > .jj/repo/config.toml; "
        "echo x > .jj/repo/store/ok && echo stored"
    )
    result = await bash(sandboxed(workspace), command)
    assert (workspace / ".jj" / "repo" / "config.toml").read_text() == ""
    assert "stored" in output(result)  # the rest of the repository stays writable
    control = await bash(unconfined(workspace), command)
    assert control.ok
    assert "pager" in (workspace / ".jj" / "repo" / "config.toml").read_text()


async def test_a_workspace_without_them_gets_none(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "f").write_text("x")
    result = await bash(sandboxed(workspace), "printf x > .hg; echo done")
    assert "done" in output(result)
    assert names(workspace) == [".hg", "f"]
    assert (workspace / ".hg").is_file()  # the command's own file, no repository
    assert not (workspace / ".jj").exists()


@pytest.mark.parametrize("store", [".hg/store/data", ".jj/repo/store/extra"])
def test_a_large_store_does_not_spend_the_search(tmp_path: Path, store: str) -> None:
    """The search looks into a Mercurial or Jujutsu directory only as deep as its configuration
    lies: a store with more files than the search's budget leaves it complete, the secret beside
    it hidden and the configuration protected."""
    workspace = tmp_path / "ws"
    (workspace / store).mkdir(parents=True)
    if store.startswith(".jj"):
        (workspace / ".jj" / "working_copy").mkdir()
    for n in range(_planner.WALK_BUDGET + 1000):
        (workspace / store / f"f{n}.i").touch()
    (workspace / "src").mkdir()
    (workspace / "src" / ".env").write_text("SECRET=1")
    policy = SandboxPolicy()
    found = _planner._search(str(workspace), policy)
    assert found.complete
    where = _planner.layout(policy, [str(workspace)], str(workspace))
    assert str(workspace / "src" / ".env") in where.hidden
    config = ".hg/hgrc" if store.startswith(".hg") else ".jj/repo/config.toml"
    assert str(workspace / config) in where.read_only
