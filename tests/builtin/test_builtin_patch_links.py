"""apply_patch and symbolic links: the path the rules judged, the path the user was asked
about and the path changed are one path.

The pipeline checks (and asks about) a path by the file it leads to. Removing a link removes
the link, a path none of that judged: so ``Delete File`` of a link, and a move from one, are
refused and nothing changes (a link to inside the workspace or outside, to a sensitive file,
dangling, or reached through a linked directory). ``Update File`` of a link, and a file added
or moved onto a dangling one, change the file it leads to: the file that was judged."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fastgate import ApprovalRequest, ApprovalResponse, ErrorCode, PermissionConfig
from fastgate import PermissionMode as Mode
from tests.builtin_kit import builtin_executor, call, failure_code, real, text

MAIN = "print('the real code')\n"
GIT_CONFIG = "[core]\n\tbare = false\n"
SECRET = "OPENAI_API_KEY=sk-live-SECRET\n"


def patch(*body: str) -> str:
    return "\n".join(("*** Begin Patch", *body, "*** End Patch"))


def _tree(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """The workspace ``ws`` (and a home and a directory outside it), with a link of each kind
    in it; the links by name, each with its target as written."""
    ws, outside, home = tmp_path / "ws", tmp_path / "outside", tmp_path / "home"
    for directory in (ws / "src", ws / "docs", ws / "real", ws / ".git", outside, home / ".ssh"):
        directory.mkdir(parents=True)
    (ws / "src" / "main.py").write_text(MAIN)
    (ws / ".git" / "config").write_text(GIT_CONFIG)
    (outside / "secret.txt").write_text(SECRET)
    (home / ".ssh" / "id_rsa").write_text(SECRET)
    (ws / "ldir").symlink_to("real")  # a linked directory
    links = {
        "docs/inside.py": "../src/main.py",
        "docs/outside.txt": str(outside / "secret.txt"),
        "docs/git-config": "../.git/config",
        "docs/ssh-key": str(home / ".ssh" / "id_rsa"),
        "docs/dangling.py": "../src/missing.py",
        "docs/dangling-out.txt": str(outside / "missing.txt"),
        "real/via-linked-dir.py": "../src/main.py",
    }
    for name, target in links.items():
        os.symlink(target, ws / name)
    return ws, home, links


def _entry(ws: Path, name: str) -> str:
    """The link ``name`` names, relative to the workspace: its directory resolved."""
    directory, base = os.path.split(name)
    return os.path.relpath(os.path.join(real(ws / directory), base), real(ws))


# How a patch names each link: as it is, and through the linked directory.
NAMES = {
    "to inside": "docs/inside.py",
    "to outside": "docs/outside.txt",
    "to .git/config": "docs/git-config",
    "to ~/.ssh": "docs/ssh-key",
    "dangling": "docs/dangling.py",
    "dangling to outside": "docs/dangling-out.txt",
    "in a linked directory": "ldir/via-linked-dir.py",
}
REMOVALS: dict[str, Callable[[str], tuple[str, ...]]] = {
    "delete": lambda name: (f"*** Delete File: {name}",),
    "move from": lambda name: (
        f"*** Update File: {name}",
        "*** Move to: docs/moved.py",
        "@@",
        "+# moved",
    ),
}


def _snapshot(ws: Path, home: Path, links: dict[str, str]) -> dict[str, Any]:
    """Every link (as a link) and every file a change could reach."""
    state: dict[str, Any] = {name: os.readlink(ws / name) for name in links}
    for path in (ws / "src", ws / ".git", ws / "docs", ws / "real", home / ".ssh"):
        state[str(path)] = sorted(os.listdir(path))
    state["main"] = (ws / "src" / "main.py").read_text()
    state["git"] = (ws / ".git" / "config").read_text()
    state["key"] = (home / ".ssh" / "id_rsa").read_text()
    state["secret"] = (ws.parent / "outside" / "secret.txt").read_text()
    return state


@pytest.mark.parametrize("removal", REMOVALS)
@pytest.mark.parametrize("spelling", NAMES)
async def test_a_link_is_never_removed_by_a_path_judged_as_its_target(
    tmp_path: Path, spelling: str, removal: str
) -> None:
    """Whoever approves (every request approved here) and whatever the rules say (the home is
    a root the rules reach), the link and what it leads to stay as they were."""
    ws, home, links = _tree(tmp_path)
    asked: list[ApprovalRequest] = []

    async def approver(request: ApprovalRequest) -> ApprovalResponse:
        asked.append(request)
        return ApprovalResponse(True)

    permissions = PermissionConfig(additional_dirs=(str(home),))
    ex = builtin_executor(ws, mode=Mode.DEFAULT, permissions=permissions)
    before = _snapshot(ws, home, links)
    name = NAMES[spelling]
    result = await call(
        ex, "apply_patch", {"patch": patch(*REMOVALS[removal](name))}, approver=approver
    )
    assert not result.ok, result.content
    assert _snapshot(ws, home, links) == before
    assert result.error is not None
    if (spelling, removal) == ("dangling", "move from"):  # nothing there to update
        assert failure_code(result) == "not_found", text(result)
    elif result.error.code == ErrorCode.TOOL_FAILURE:  # past the checks: the tool refused
        assert failure_code(result) == "symlink_not_removed", text(result)
        assert "No file was changed." in text(result)
        assert result.error.details["link"] == _entry(ws, name)
    else:  # refused before the tool ran: the link leads out of every root
        assert result.error.code == ErrorCode.WORKTREE_VIOLATION, result.content
        assert spelling in ("to outside", "dangling to outside")


async def test_an_allow_rule_on_the_target_removes_no_link_elsewhere(tmp_path: Path) -> None:
    """An allow rule covers the files under ``src``; a link elsewhere that leads there is not
    the rule's to give away (the user is never asked, and nothing is removed)."""
    ws, home, links = _tree(tmp_path)
    asked: list[ApprovalRequest] = []

    def approver(request: ApprovalRequest) -> ApprovalResponse:
        asked.append(request)
        return ApprovalResponse(False)

    permissions = PermissionConfig(allow=("Edit(./src/**)",))
    ex = builtin_executor(ws, mode=Mode.DEFAULT, permissions=permissions)
    before = _snapshot(ws, home, links)
    for name in ("docs/inside.py", "ldir/via-linked-dir.py", "docs/dangling.py"):
        result = await call(
            ex, "apply_patch", {"patch": patch(f"*** Delete File: {name}")}, approver=approver
        )
        assert failure_code(result) == "symlink_not_removed", text(result)
    assert _snapshot(ws, home, links) == before
    assert asked == []


async def test_a_delete_rule_on_the_links_place_is_not_escaped_through_a_linked_directory(
    tmp_path: Path,
) -> None:
    ws, home, links = _tree(tmp_path)
    permissions = PermissionConfig(deny=("Edit(./real/**)",))
    ex = builtin_executor(ws, permissions=permissions)
    before = _snapshot(ws, home, links)
    result = await call(
        ex, "apply_patch", {"patch": patch("*** Delete File: ldir/via-linked-dir.py")}
    )
    assert not result.ok
    assert _snapshot(ws, home, links) == before


async def test_a_link_among_other_changes_refuses_the_whole_patch(tmp_path: Path) -> None:
    ws, home, links = _tree(tmp_path)
    (ws / "b.txt").write_text("b\n")
    ex = builtin_executor(ws)
    before = _snapshot(ws, home, links)
    body = (
        "*** Add File: new.txt",
        "+new",
        "*** Delete File: b.txt",
        "*** Delete File: docs/inside.py",
    )
    result = await call(ex, "apply_patch", {"patch": patch(*body)})
    assert failure_code(result) == "symlink_not_removed", text(result)
    assert _snapshot(ws, home, links) == before
    assert (ws / "b.txt").read_text() == "b\n" and not (ws / "new.txt").exists()


async def test_a_plain_file_in_a_linked_directory_is_still_deleted(tmp_path: Path) -> None:
    """Only a link itself is refused: a file reached through a linked directory is the file
    the rules judged (its canonical path), and it goes."""
    ws, _, _ = _tree(tmp_path)
    (ws / "real" / "plain.txt").write_text("plain\n")
    ex = builtin_executor(ws)
    result = await call(ex, "apply_patch", {"patch": patch("*** Delete File: ldir/plain.txt")})
    assert text(result) == "Success. Updated the following files:\nD ldir/plain.txt"
    assert not (ws / "real" / "plain.txt").is_symlink()
    assert not (ws / "real" / "plain.txt").exists()


# -- changes through a link change what was judged ----------------------------------------------


# Rules that ask before any change in src/ or .git/ (and the mode allows the rest): the
# reason the user is shown names the path judged.
ASK = PermissionConfig(ask=("Edit(./src/**)", "Edit(./.git/**)"))


def _asking(ws: Path, answer: bool) -> tuple[Any, list[ApprovalRequest]]:
    asked: list[ApprovalRequest] = []

    def approver(request: ApprovalRequest) -> ApprovalResponse:
        asked.append(request)
        return ApprovalResponse(answer)

    return approver, asked


@pytest.mark.parametrize(
    ("name", "target", "before"),
    [
        ("docs/git-config", ".git/config", GIT_CONFIG),
        ("docs/inside.py", "src/main.py", MAIN),
        ("ldir/via-linked-dir.py", "src/main.py", MAIN),
    ],
)
async def test_an_update_through_a_link_asks_about_and_changes_its_target(
    tmp_path: Path, name: str, target: str, before: str
) -> None:
    ws, _, links = _tree(tmp_path)
    first = before.splitlines()[0]
    body = (f"*** Update File: {name}", "@@", f"-{first}", "+# changed")
    ex = builtin_executor(ws, permissions=ASK)
    approver, asked = _asking(ws, False)
    refused = await call(ex, "apply_patch", {"patch": patch(*body)}, approver=approver)
    assert refused.error is not None and refused.error.code == ErrorCode.USER_REJECTED
    assert (ws / target).read_text() == before
    (request,) = asked
    assert real(ws / target) in str(request.reason), request.reason
    approver, asked = _asking(ws, True)
    done = await call(ex, "apply_patch", {"patch": patch(*body)}, approver=approver)
    assert done.ok, done.content
    assert real(ws / target) in str(asked[0].reason)
    assert (ws / target).read_text().startswith("# changed")
    real_link = ws / name.replace("ldir/", "real/")
    assert os.readlink(real_link) == links[str(real_link.relative_to(ws))]  # still the link


async def test_a_file_added_or_moved_onto_a_dangling_link_is_its_target(tmp_path: Path) -> None:
    """The name leads to ``src/missing.py``: that is the path judged, asked about and
    created; the link stays, now leading to it."""
    ws, _, _ = _tree(tmp_path)
    ex = builtin_executor(ws, permissions=ASK)
    approver, asked = _asking(ws, True)
    added = await call(
        ex,
        "apply_patch",
        {"patch": patch("*** Add File: docs/dangling.py", "+added")},
        approver=approver,
    )
    assert added.ok, added.content
    assert real(ws / "src" / "missing.py") in str(asked[0].reason)
    assert (ws / "src" / "missing.py").read_text() == "added\n"
    assert os.readlink(ws / "docs" / "dangling.py") == "../src/missing.py"
    os.unlink(ws / "src" / "missing.py")
    (ws / "b.txt").write_text("b\n")
    body = ("*** Update File: b.txt", "*** Move to: docs/dangling.py", "@@", "-b", "+moved")
    moved = await call(ex, "apply_patch", {"patch": patch(*body)}, approver=approver)
    assert moved.ok, moved.content
    assert (ws / "src" / "missing.py").read_text() == "moved\n"
    assert not (ws / "b.txt").exists()
    assert os.readlink(ws / "docs" / "dangling.py") == "../src/missing.py"
