"""A symlink swapped in while the user decides cannot redirect an approved change (SPEC §16
"Round-3 precision"): writers change the canonical path stage 5 resolved and follow no symlink
from there, so ``write``, ``edit`` and ``apply_patch`` fail with ``path_changed`` and nothing is
written anywhere. A symlink that was there at stage 5 is written through, to its target."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fastgate import ApprovalResponse, ErrorCode, ExecutionContext, PermissionConfig
from fastgate import PermissionMode as Mode
from tests.builtin_kit import builtin_executor, call, failure_code, text

ORIGINAL = '{"permissions": {}}\n'
EVIL = '{"permissions": {"allow": ["Bash"]}}\n'


def _workspace(tmp_path: Path) -> tuple[Path, Path]:
    """ws/cfg/settings.local.json, ws/.fastgate/settings.local.json (the protected settings)
    and outside/settings.local.json, all with the same bytes: a redirected change would find
    what it expects wherever it lands."""
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    for directory in (ws / "cfg", ws / ".fastgate", outside):
        directory.mkdir(parents=True)
        (directory / "settings.local.json").write_text(ORIGINAL)
    return ws, outside


def _swap_directory(ws: Path, outside: Path, inside: bool) -> None:
    shutil.rmtree(ws / "cfg")
    os.symlink(".fastgate" if inside else str(outside), ws / "cfg")


def _swap_file(ws: Path, outside: Path, inside: bool) -> None:
    link = ws / "cfg" / "settings.local.json"
    link.unlink()
    target = "../.fastgate/settings.local.json" if inside else str(outside / "settings.local.json")
    os.symlink(target, link)


SWAPS: dict[str, Callable[[Path, Path], None]] = {
    "directory to .fastgate": lambda ws, out: _swap_directory(ws, out, inside=True),
    "directory to outside": lambda ws, out: _swap_directory(ws, out, inside=False),
    "file to .fastgate": lambda ws, out: _swap_file(ws, out, inside=True),
    "file to outside": lambda ws, out: _swap_file(ws, out, inside=False),
}

PATCH_UPDATE = (
    "*** Begin Patch\n*** Update File: cfg/settings.local.json\n"
    f"-{ORIGINAL.strip()}\n+{EVIL.strip()}\n*** End Patch"
)
CALLS: dict[str, tuple[str, dict[str, Any]]] = {
    "write": ("write", {"file_path": "cfg/settings.local.json", "content": EVIL}),
    "edit": (
        "edit",
        {
            "file_path": "cfg/settings.local.json",
            "old_string": ORIGINAL.strip(),
            "new_string": EVIL.strip(),
        },
    ),
    "apply_patch": ("apply_patch", {"patch": PATCH_UPDATE}),
}


def _path_changed(result: Any) -> bool:
    """The failure says the path changed, by its code, for every writer."""
    return failure_code(result) == "path_changed"


def _snapshot(root: Path) -> dict[str, Any]:
    """Every entry under ``root``: a symlink's target, a file's bytes, a directory."""
    found: dict[str, Any] = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(directory, name)
            key = str(path.relative_to(root))
            if path.is_symlink():
                found[key] = ("link", os.readlink(path))
            elif path.is_dir():
                found[key] = ("dir",)
            else:
                found[key] = ("file", path.read_bytes())
    return found


async def _approve_once(request: Any) -> ApprovalResponse:
    return ApprovalResponse(True)


def _swapping_approver(
    swap: Callable[[], None], root: Path, after_swap: dict[str, Any], asked: list[str]
) -> Any:
    """Swaps the link while "the user decides", remembers the tree as it then is, approves."""

    async def approver(request: Any) -> ApprovalResponse:
        asked.append(request.tool_name)
        swap()
        after_swap.update(_snapshot(root))
        return ApprovalResponse(True)

    return approver


@pytest.mark.parametrize("swap", list(SWAPS))
@pytest.mark.parametrize("tool", list(CALLS))
async def test_a_link_swapped_while_the_user_decides_fails_the_change(
    tmp_path: Path, tool: str, swap: str
) -> None:
    ws, outside = _workspace(tmp_path)
    ex = builtin_executor(ws, mode=Mode.DEFAULT)
    # The session read both files: a write redirected to either would not be refused as
    # stale, only by the path check.
    for seen in ("cfg/settings.local.json", ".fastgate/settings.local.json"):
        assert (await call(ex, "read", {"file_path": seen}, approver=_approve_once)).ok
    asked: list[str] = []
    after_swap: dict[str, Any] = {}
    approver = _swapping_approver(lambda: SWAPS[swap](ws, outside), tmp_path, after_swap, asked)
    name, args = CALLS[tool]
    result = await ex.execute(name, args, ExecutionContext(session_id="s1", approver=approver))
    assert asked == [name]  # approved, after the swap
    assert result.error is not None and result.error.code is ErrorCode.TOOL_FAILURE, text(result)
    assert _path_changed(result), text(result)
    assert _snapshot(tmp_path) == after_swap  # nothing written anywhere
    assert (ws / ".fastgate" / "settings.local.json").read_text() == ORIGINAL
    assert (outside / "settings.local.json").read_text() == ORIGINAL


@pytest.mark.parametrize("swap", ["directory to .fastgate", "directory to outside"])
async def test_a_file_created_under_a_swapped_directory_is_not_created(
    tmp_path: Path, swap: str
) -> None:
    ws, outside = _workspace(tmp_path)
    ex = builtin_executor(ws, mode=Mode.DEFAULT)
    asked: list[str] = []
    after_swap: dict[str, Any] = {}
    approver = _swapping_approver(lambda: SWAPS[swap](ws, outside), tmp_path, after_swap, asked)
    ctx = ExecutionContext(session_id="s1", approver=approver)
    creations: list[tuple[str, dict[str, Any]]] = [
        ("write", {"file_path": "cfg/hooks.json", "content": EVIL}),
        ("write", {"file_path": "cfg/deeper/new.json", "content": EVIL}),
        (
            "apply_patch",
            {"patch": "*** Begin Patch\n*** Add File: cfg/new.json\n+x\n*** End Patch"},
        ),
    ]
    for name, args in creations:
        if (ws / "cfg").is_symlink():
            (ws / "cfg").unlink()
            (ws / "cfg").mkdir()
        asked.clear()
        result = await ex.execute(name, args, ctx)
        assert asked == [name]
        assert _path_changed(result), (name, text(result))
        assert _snapshot(tmp_path) == after_swap, name
        assert sorted(os.listdir(ws / ".fastgate")) == ["settings.local.json"]
        assert sorted(os.listdir(outside)) == ["settings.local.json"]


async def test_a_link_there_at_the_check_is_written_through_to_its_target(tmp_path: Path) -> None:
    ws, shared = tmp_path / "ws", tmp_path / "shared-docs"
    ws.mkdir()
    shared.mkdir()
    (ws / "AGENTS.md").write_text("# agents\n")
    os.symlink("AGENTS.md", ws / "CLAUDE.md")  # a file link, inside
    os.symlink("../shared-docs", ws / "docs")  # a directory link, to an additional root
    (shared / "guide.md").write_text("old guide\n")
    ex = builtin_executor(ws, permissions=PermissionConfig(additional_dirs=(str(shared),)))
    assert (await call(ex, "read", {"file_path": "CLAUDE.md"})).ok
    edited = await call(
        ex, "edit", {"file_path": "CLAUDE.md", "old_string": "agents", "new_string": "AGENTS"}
    )
    assert edited.ok, text(edited)
    assert (ws / "AGENTS.md").read_text() == "# AGENTS\n" and (ws / "CLAUDE.md").is_symlink()
    assert (await call(ex, "read", {"file_path": "docs/guide.md"})).ok
    written = await call(ex, "write", {"file_path": "docs/guide.md", "content": "new guide\n"})
    assert written.ok, text(written)
    created = await call(ex, "write", {"file_path": "docs/sub/new.md", "content": "n\n"})
    assert created.ok, text(created)
    assert (shared / "guide.md").read_text() == "new guide\n"
    assert (shared / "sub" / "new.md").read_text() == "n\n"
    assert (ws / "docs").is_symlink() and os.readlink(ws / "docs") == "../shared-docs"
    # apply_patch too: through the file link and the directory link, adding a file beside.
    body = (
        "*** Begin Patch\n*** Update File: CLAUDE.md\n@@\n-# AGENTS\n+# agents, patched\n"
        "*** Update File: docs/guide.md\n@@\n-new guide\n+patched guide\n"
        "*** Add File: docs/added.md\n+added\n*** End Patch"
    )
    patched = await call(ex, "apply_patch", {"patch": body})
    assert patched.ok, text(patched)
    assert (ws / "AGENTS.md").read_text() == "# agents, patched\n"
    assert (shared / "guide.md").read_text() == "patched guide\n"
    assert (shared / "added.md").read_text() == "added\n"
    assert (ws / "CLAUDE.md").is_symlink() and (ws / "docs").is_symlink()


async def test_a_link_repointed_meanwhile_does_not_move_the_write(tmp_path: Path) -> None:
    # docs -> ../a at the check, then docs -> ../b: the canonical path stage 5 resolved is
    # a/guide.md, and the change goes there or nowhere (not to b).
    ws, first, second = tmp_path / "ws", tmp_path / "a", tmp_path / "b"
    for directory in (ws, first, second):
        directory.mkdir()
    (first / "guide.md").write_text(ORIGINAL)
    (second / "guide.md").write_text(ORIGINAL)
    os.symlink("../a", ws / "docs")

    def relink() -> None:
        (ws / "docs").unlink()
        os.symlink("../b", ws / "docs")

    ex = builtin_executor(
        ws,
        mode=Mode.DEFAULT,
        permissions=PermissionConfig(additional_dirs=(str(first), str(second))),
    )
    assert (await call(ex, "read", {"file_path": "docs/guide.md"})).ok
    after_swap: dict[str, Any] = {}
    approver = _swapping_approver(relink, tmp_path, after_swap, [])
    result = await ex.execute(
        "write",
        {"file_path": "docs/guide.md", "content": EVIL},
        ExecutionContext(session_id="s1", approver=approver),
    )
    # a/guide.md itself has no symlink on it: the write goes where the user was asked about.
    assert result.ok, text(result)
    assert (first / "guide.md").read_text() == EVIL
    assert (second / "guide.md").read_text() == ORIGINAL


async def test_a_workspace_reached_through_a_symlink_is_written_in(tmp_path: Path) -> None:
    # The roots are trusted as given: only what lies below them is taken without links.
    real_ws = tmp_path / "real"
    real_ws.mkdir()
    (real_ws / "a.txt").write_text("a\n")
    linked = tmp_path / "linked"
    os.symlink(real_ws, linked)
    ex = builtin_executor(linked)
    assert (await call(ex, "read", {"file_path": "a.txt"})).ok
    assert (await call(ex, "write", {"file_path": "a.txt", "content": "A\n"})).ok
    assert (await call(ex, "write", {"file_path": str(linked / "new/b.txt"), "content": "b"})).ok
    patch = "*** Begin Patch\n*** Add File: c.txt\n+c\n*** Delete File: new/b.txt\n*** End Patch"
    patched = await call(ex, "apply_patch", {"patch": patch})
    assert patched.ok, text(patched)
    assert (real_ws / "a.txt").read_text() == "A\n" and (real_ws / "c.txt").read_text() == "c\n"
    assert not (real_ws / "new" / "b.txt").exists() and linked.is_symlink()
