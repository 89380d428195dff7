"""Found from inside: version control writing the work tree from other revisions (``git
checkout BRANCH``, ``merge``, ``stash pop``, ``reset --hard``, a patch applied, ``hg update``,
``svn update``, ``jj edit``) writes files named by commits, stashes or patches, not by any word
of the command, and was allowed as a command writing nothing protected: an old commit's looser
``.claude/settings.json``, or one committed through git's plumbing, came back unseen. Each such
command now writes "paths known only when it runs": at least ASK in every mode, YOLO included,
and no allow rule covers it. Each spelling failed before the fix; the controls write no
tracked file from elsewhere and are judged as before."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from fastgate import Decision
from tests.permissions_round3_kit import YOLO, asks_as_guarded, project, ruling

ALLOW = ("Bash(git:*)", "Bash(patch:*)", "Bash(hg:*)", "Bash(sl:*)", "Bash(svn:*)", "Bash(jj:*)")
ALLOW_AROUND = ("Bash(cd:*)", "Bash(sudo:*)", "Bash(/usr/bin/git:*)")
DENY_OTHER = ("Bash(rm:*)",)  # names nothing these lines run

REWRITES = [
    "git checkout main",
    "git checkout v1.0",
    "git checkout -b feature origin/main",
    "git checkout --detach HEAD~3",
    "git checkout -f",
    "git checkout HEAD~5 -- .",
    "git checkout old -- 'src/*.json'",
    "git checkout old ':(icase).CLAUDE' README.md",
    "git checkout --pathspec-from-file=list old",
    "git checkout -p",
    "git checkout --recurse-submodules",
    "git checkout v1 -- '*.json' --help",
    "git checkout $BRANCH",
    "git switch main",
    "git switch -",
    "git switch -c fix v1.0",
    "git switch --orphan empty",
    "git switch -c fix --discard-changes",
    "git switch -fc fix",
    "git restore -p",
    "git restore --source=HEAD~3 .",
    "git restore -s v1 -- src/..",
    "git reset --hard HEAD~1",
    "git reset --keep v1",
    "git merge feature",
    "git merge --abort",
    "git pull",
    "git pull --rebase origin main",
    "git rebase main",
    "git cherry-pick abc123",
    "git cherry-pick -n abc123",
    "git revert HEAD",
    "git stash",
    "git stash pop",
    "git stash apply 'stash@{1}'",
    "git am < fix.patch",
    "git apply fix.diff",
    "git apply --index fix.diff",
    "git bisect start HEAD v1.0",
    "git bisect good",
    "git clean -fdx",
    "git checkout-index -a -f",
    "git sparse-checkout disable",
    "git clone https://example.com/r.git .",
    "git clone -q --depth 1 https://example.com/r.git ../..",
    "git clone https://example.com/r.git sub/..",
    "git -C .. clone https://example.com/r.git ws",
    "git subtree pull --prefix=lib origin main",
    "git co main",  # an alias, or a ``git-co`` program: may rewrite the tree
    "git -C sub checkout main",
    "git --no-pager merge feature",
    "/usr/bin/git checkout main",
    "sudo git checkout main",
    "cd sub && git stash pop",
    "patch -p1 < fix.diff",
    "patch -p1 -i fix.diff",
    "patch -d sub -p0 < fix.diff",
    "patch --input=fix.diff",
    "hg update default",
    "hg up tip",
    "hg merge",
    "hg revert --all",
    "hg pull -u",
    "hg unshelve",
    "sl goto main",
    "svn update",
    "svn up -r 10",
    "svn switch ^/branches/x",
    "svn revert -R .",
    "svn merge ^/trunk",
    "svn patch fix.diff",
    "jj edit abc",
    "jj new main",
    "jj restore --from abc",
    "jj undo",
    "jj abandon",
]

KEEPS = [
    "git status",
    "git log main",
    "git diff HEAD~1",
    "git show v1:.claude/settings.json",
    "git checkout -b feature",
    "git checkout --orphan fresh",
    "git checkout --detach",
    "git checkout -q -b feature --no-track",
    "git switch -C main",
    "git switch -c fix",
    "git checkout -- src/app.py",
    "git restore src/app.py",
    "git restore --staged .",
    "git reset HEAD~1",
    "git reset --soft HEAD~1",
    "git stash list",
    "git stash show -p",
    "git apply --check fix.diff",
    "git apply --stat fix.diff",
    "git apply --cached fix.diff",
    "git clean -n",
    "git clean -dn",
    "git bisect log",
    "git rebase --show-current-patch",
    "git merge --help",
    "git commit -m x",
    "git fetch origin",
    "git push origin main",
    "git add -A",
    "git init",
    "git clone https://example.com/r.git",
    "git clone -b main https://example.com/r.git dst",
    "git -C sub clone https://example.com/r.git dst",
    "git daemon --export-all",
    "patch --dry-run -p1 < fix.diff",
    "patch src/app.py fix.diff",
    "patch -o out.py src/app.py fix.diff",
    "hg status",
    "hg log -r tip",
    "hg commit -m x",
    "svn status",
    "svn diff",
    "svn commit -m x",
    "jj log",
    "jj status",
    "jj describe -m x",
]


@pytest.fixture(name="workspace")
def workspace_fixture(tmp_path: Path) -> Path:
    return project(tmp_path)


@pytest.mark.parametrize("command", REWRITES)
def test_a_rewrite_from_other_revisions_is_at_least_ask_in_every_mode(
    command: str, workspace: Path
) -> None:
    yolo = ruling(command, workspace, mode=YOLO, deny=DENY_OTHER)
    assert yolo.decision is Decision.ASK, yolo.reason
    assert asks_as_guarded(yolo), yolo
    assert "other revisions" in yolo.reason, yolo.reason
    allowed = ruling(command, workspace, allow=ALLOW + ALLOW_AROUND)
    assert allowed.decision is Decision.ASK, allowed.reason


@pytest.mark.parametrize("command", KEEPS)
def test_what_writes_no_file_from_elsewhere_is_judged_as_before(
    command: str, workspace: Path
) -> None:
    """Control: allowed in YOLO mode, and nothing guarded under allow rules."""
    decided = ruling(command, workspace, mode=YOLO, deny=DENY_OTHER)
    assert decided.decision is Decision.ALLOW, decided.reason
    assert not asks_as_guarded(ruling(command, workspace, allow=ALLOW))


@pytest.mark.parametrize(
    "command",
    [
        "git checkout -- sub",
        "git checkout HEAD~2 -- sub",
        "git restore --source=v1 sub",
        "git restore sub/",
    ],
)
def test_a_restore_of_a_tree_holding_a_protected_path_asks(command: str, workspace: Path) -> None:
    """A literal path restored is written with what is below it."""
    (workspace / "sub" / ".mcp.json").write_text("{}")
    decided = ruling(command, workspace, mode=YOLO, deny=DENY_OTHER)
    assert asks_as_guarded(decided), decided


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        check=True,
        capture_output=True,
        text=True,
    )
    return done.stdout


def test_an_old_commit_brings_back_looser_settings(workspace: Path) -> None:
    """The class in the flesh: the repository's history holds a looser settings file; the
    command that brings it back names none of it, and is asked for."""
    settings = workspace / ".claude" / "settings.json"
    settings.write_text(json.dumps({"permissions": {"allow": ["Bash(*)"]}}))
    _git(workspace, "add", "-A")
    _git(workspace, "commit", "-qm", "loose")
    settings.write_text(json.dumps({"permissions": {"deny": ["Bash(curl:*)"]}}))
    _git(workspace, "commit", "-qam", "strict")
    command = "git checkout HEAD~1"
    assert asks_as_guarded(ruling(command, workspace, mode=YOLO, deny=DENY_OTHER))
    _git(workspace, *command.split()[1:])  # what it would have done
    assert "Bash(*)" in settings.read_text()


@pytest.mark.parametrize(
    "command",
    [
        "git init --separate-git-dir=/tmp/elsewhere",
        "git init --separate-git-dir /tmp/elsewhere sub",
        "git -C sub init --separate-git-dir=../../elsewhere",
        "git clone --separate-git-dir=/tmp/elsewhere https://example.com/r.git dst",
    ],
)
def test_a_git_directory_moved_elsewhere_is_a_protected_write(
    command: str, workspace: Path
) -> None:
    """``.git`` becomes a file naming a directory whose ``config`` no rule protects by name,
    so a later write there would set what git runs: at least ASK."""
    decided = ruling(command, workspace, mode=YOLO, deny=DENY_OTHER)
    assert asks_as_guarded(decided), decided
    assert ".git" in decided.reason, decided.reason
