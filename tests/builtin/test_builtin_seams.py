"""The seams: a server's own FileSystem through ExecutionContext(fs=...) serves every file tool
without the disk; LocalFileSystem re-checks at use, so a directory swapped for a symlink after
stage 5 cannot carry a read or a write outside (SPEC §16)."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from fastgate import ExecutionContext, Hooks, PreToolUseEvent, RunContext
from fastgate.builtin import FileSystem, LocalFileSystem, find_ripgrep
from fastgate.builtin._fs import PathChanged
from tests.builtin_kit import MemoryFileSystem, builtin_executor, call, failure_code, text


async def test_every_file_tool_runs_on_a_servers_own_file_system(tmp_path: Path) -> None:
    root = str(tmp_path / "ws")  # never created: nothing may touch the disk
    fs = MemoryFileSystem({f"{root}/a.txt": b"alpha\nbeta\n", f"{root}/src/m.py": b"x = 1\n"})
    assert isinstance(fs, FileSystem)
    ex = builtin_executor(tmp_path / "ws")
    ctx = ExecutionContext(session_id="mem", fs=fs)  # per call here, not from the defaults
    steps: list[tuple[str, dict[str, Any]]] = [
        ("read", {"file_path": "a.txt"}),
        ("edit", {"file_path": "a.txt", "old_string": "beta", "new_string": "BETA"}),
        ("write", {"file_path": "new/n.txt", "content": "new file\n"}),
        (
            "apply_patch",
            {
                "patch": "*** Begin Patch\n*** Update File: src/m.py\n-x = 1\n+x = 2\n"
                "*** Add File: src/k.py\n+k = 3\n*** End Patch"
            },
        ),
        ("glob", {"pattern": "**/*.py"}),
        ("grep", {"pattern": "BETA|k = ", "output_mode": "content"}),
    ]
    outputs = []
    for name, args in steps:
        result = await ex.execute(name, args, ctx)
        assert result.ok, (name, result.content)
        outputs.append(text(result))
    assert fs.files == {
        f"{root}/a.txt": b"alpha\nBETA\n",
        f"{root}/src/m.py": b"x = 2\n",
        f"{root}/src/k.py": b"k = 3\n",
        f"{root}/new/n.txt": b"new file\n",
    }
    assert outputs[4].split("\n") == ["src/k.py", "src/m.py"]
    assert outputs[5].split("\n") == ["a.txt:2:BETA", "--", "src/k.py:1:k = 3"]
    assert not (tmp_path / "ws").exists()


async def test_context_defaults_carry_the_file_system(tmp_path: Path) -> None:
    fs = MemoryFileSystem({f"{tmp_path}/d.txt": b"from defaults\n"})
    ex = builtin_executor(tmp_path, fs=fs)
    result = await call(ex, "read", {"file_path": "d.txt"})
    assert result.ok and "from defaults" in text(result)
    assert ("read_bytes", f"{tmp_path}/d.txt") in fs.calls


def test_unset_means_the_local_file_system_of_the_workspace(tmp_path: Path) -> None:
    ctx = RunContext(context=ExecutionContext(workspace_root=str(tmp_path)))
    assert isinstance(ctx.fs, LocalFileSystem) and ctx.fs.roots == (os.path.realpath(tmp_path),)


def _swap_hook(directory: Path, outside: Path) -> Hooks:
    """A PreToolUse hook (it runs after stages 5 and 6) that swaps ``directory`` for a symlink
    to ``outside``: the race a checker without a re-check at use loses."""

    def swap(event: PreToolUseEvent) -> None:
        shutil.rmtree(directory)
        os.symlink(outside, directory)

    hooks = Hooks()
    hooks.add_pre_tool_use(swap)
    return hooks


async def test_a_directory_swapped_after_the_check_cannot_carry_a_write_out(
    tmp_path: Path,
) -> None:
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    (ws / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "victim.txt").write_text("precious\n")
    cases: list[tuple[str, dict[str, Any]]] = [
        ("write", {"file_path": "sub/new.txt", "content": "escaped"}),
        ("write", {"file_path": "sub/deeper/new.txt", "content": "escaped"}),
        ("read", {"file_path": "sub/victim.txt"}),
        (
            "apply_patch",
            {"patch": "*** Begin Patch\n*** Delete File: sub/victim.txt\n*** End Patch"},
        ),
        ("apply_patch", {"patch": "*** Begin Patch\n*** Add File: sub/p.txt\n+x\n*** End Patch"}),
    ]
    for name, args in cases:
        if (ws / "sub").is_symlink():
            os.unlink(ws / "sub")
            (ws / "sub").mkdir()
        (ws / "sub" / "victim.txt").write_text("inside\n")
        ex = builtin_executor(ws, hooks=_swap_hook(ws / "sub", outside))
        result = await call(ex, name, args)
        assert not result.ok, (name, result.content)
        # A read follows links that stay inside; a change follows none (SPEC §16):
        # apply_patch, which reads what it changes first, may be stopped by either.
        expected = {
            "read": {"outside_workspace"},
            "write": {"path_changed"},
            "apply_patch": {"outside_workspace", "path_changed"},
        }[name]
        assert failure_code(result) in expected, (name, result.content)
        assert sorted(os.listdir(outside)) == ["victim.txt"], name
        assert (outside / "victim.txt").read_text() == "precious\n"


async def test_local_file_system_refuses_what_leads_outside(tmp_path: Path) -> None:
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    (outside / "s.txt").write_text("secret")
    os.symlink(outside / "s.txt", ws / "link.txt")
    os.symlink(ws / "real.txt", ws / "inner.txt")
    fs = LocalFileSystem(str(ws))
    for operation in (fs.read_bytes, fs.list_dir):
        try:
            await operation(str(ws / "link.txt"))
        except PermissionError:
            pass
        else:
            raise AssertionError(f"{operation.__name__} followed a link out of the workspace")
    stat = await fs.stat(str(ws / "link.txt"))
    assert stat is not None and stat.is_symlink and stat.size == 0  # the target is not shown
    # A change follows no symlink, even one inside: writers pass the canonical path.
    (ws / "real.txt").write_bytes(b"kept")
    with pytest.raises(PathChanged):
        await fs.write_bytes(str(ws / "inner.txt"), b"via link")
    assert (ws / "real.txt").read_bytes() == b"kept" and (ws / "inner.txt").is_symlink()
    await fs.write_bytes(str(ws / "real.txt"), b"direct")
    assert (ws / "real.txt").read_bytes() == b"direct"
    await fs.remove(str(ws / "inner.txt"))  # removes the link, not its target
    assert not (ws / "inner.txt").exists() and (ws / "real.txt").exists()
    os.mkfifo(ws / "fifo")
    try:
        await fs.read_bytes(str(ws / "fifo"))
    except OSError as exc:
        assert "not a regular file" in str(exc)
    else:
        raise AssertionError("a FIFO was read")


def _searched_and_victim(tmp_path: Path) -> tuple[Path, Path]:
    """A workspace and, outside it, a directory holding a file a search must never show."""
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("precious\n")
    return ws, outside


def _fresh_sub(ws: Path) -> None:
    """``ws/sub``, the directory searched (and swapped), with a matching file of its own."""
    (ws / "sub").mkdir(parents=True)
    (ws / "sub" / "inside.txt").write_text("precious too\n")


async def test_a_directory_swapped_after_the_check_cannot_carry_a_grep_out(
    tmp_path: Path,
) -> None:
    ws, outside = _searched_and_victim(tmp_path)
    for rg in (find_ripgrep(), None):  # the ripgrep route, then the seam route
        _fresh_sub(ws)
        ex = builtin_executor(
            ws, fs=LocalFileSystem(str(ws), ripgrep=rg), hooks=_swap_hook(ws / "sub", outside)
        )
        for mode in ("files_with_matches", "content", "count"):
            result = await call(
                ex, "grep", {"pattern": "precious", "path": "sub", "output_mode": mode}
            )
            assert not result.ok, (rg, mode, result.content)
            assert failure_code(result) == "outside_workspace", (rg, mode, result.content)
            assert "victim" not in text(result)
            os.unlink(ws / "sub")
            (ws / "sub").mkdir()
        shutil.rmtree(ws / "sub")


async def test_grep_of_a_fifo_fails_at_once(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    for rg in (find_ripgrep(), None):
        ex = builtin_executor(tmp_path, fs=LocalFileSystem(str(tmp_path), ripgrep=rg))
        async with asyncio.timeout(10):  # ripgrep would wait on the FIFO for a writer forever
            result = await call(ex, "grep", {"pattern": "x", "path": "pipe"})
        assert not result.ok, (rg, result.content)
        assert failure_code(result) == "not_a_file", (rg, result.content)
        assert "pipe is not a regular file" in text(result)


async def test_grep_on_ripgrep_still_names_files_under_the_path_and_honours_gitignores(
    tmp_path: Path,
) -> None:
    (tmp_path / ".gitignore").write_text("*.log\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.txt").write_text("hit\n")
    (tmp_path / "sub" / "b.log").write_text("hit\n")
    ex = builtin_executor(tmp_path, fs=LocalFileSystem(str(tmp_path), ripgrep=find_ripgrep()))
    result = await call(ex, "grep", {"pattern": "hit", "path": "sub", "output_mode": "content"})
    assert text(result) == "sub/a.txt:1:hit"
    result = await call(ex, "grep", {"pattern": "hit", "path": "sub/a.txt", "output_mode": "count"})
    assert text(result).split("\n") == ["Found 1 matching line in 1 file", "sub/a.txt:1"]


class _SwapAfterStat(LocalFileSystem):
    """Swaps ``directory`` for a symlink to ``outside`` right after the tool's own stat of it:
    the window between a search's check and the start of ripgrep."""

    def __init__(self, root: Path, directory: Path, outside: Path) -> None:
        super().__init__(str(root), ripgrep=find_ripgrep())
        self.directory, self.outside = directory, outside

    async def stat(self, path: str) -> Any:
        found = await super().stat(path)
        if path == str(self.directory) and not self.directory.is_symlink():
            shutil.rmtree(self.directory)
            os.symlink(self.outside, self.directory)
        return found


async def test_ripgrep_searches_what_was_checked_even_if_swapped_after_the_stat(
    tmp_path: Path,
) -> None:
    ws, outside = _searched_and_victim(tmp_path)
    for name, args in [("glob", {"pattern": "*"}), ("grep", {"pattern": "precious"})]:
        _fresh_sub(ws)
        fs = _SwapAfterStat(ws, ws / "sub", outside)
        result = await call(builtin_executor(ws, fs=fs), name, {**args, "path": "sub"})
        assert failure_code(result) == "outside_workspace", (name, result.content)
        assert "victim" not in text(result)
        os.unlink(ws / "sub")


class _SwapAtWrite(LocalFileSystem):
    """Swaps ``swapped`` for a symlink to ``outside`` when the tool first writes ``written``:
    the window between a tool's own staging read and its write."""

    def __init__(self, root: Path, written: Path, swapped: Path, outside: Path) -> None:
        super().__init__(str(root))
        self.written, self.swapped, self.outside = written, swapped, outside

    async def write_bytes(self, path: str, data: bytes) -> None:
        if path == str(self.written) and not self.swapped.is_symlink():
            _swap(self.swapped, self.outside)
        await super().write_bytes(path, data)


def _swap(swapped: Path, outside: Path) -> None:
    if swapped.is_dir():
        shutil.rmtree(swapped)
    os.symlink(outside, swapped)


@pytest.mark.parametrize("moment", ["after the check", "at the write"])
@pytest.mark.parametrize("swapped", ["target", "parent"])
async def test_a_move_target_swapped_for_a_symlink_out_is_refused_and_keeps_the_source(
    tmp_path: Path, moment: str, swapped: str
) -> None:
    ws, outside = _searched_and_victim(tmp_path)
    (ws / "sub").mkdir(parents=True)
    source = ws / "a.sh"
    source.write_text("echo a\n")
    os.chmod(source, 0o750)
    before = os.stat(source)
    # The target's name is the victim's: a write that escaped would overwrite it.
    target = ws / "victim.txt" if swapped == "target" else ws / "sub" / "victim.txt"
    link, leads_to = (
        (target, outside / "victim.txt") if swapped == "target" else (ws / "sub", outside)
    )
    if moment == "after the check":  # a PreToolUse hook: after stages 5 and 6
        hooks = Hooks()
        hooks.add_pre_tool_use(lambda event: _swap(link, leads_to))
        ex = builtin_executor(ws, hooks=hooks)
    else:  # after apply_patch staged the target as absent, before it writes it
        ex = builtin_executor(ws, fs=_SwapAtWrite(ws, target, link, leads_to))
    body = f"*** Update File: a.sh\n*** Move to: {target.relative_to(ws)}\n-echo a\n+echo b\n"
    result = await asyncio.wait_for(
        call(ex, "apply_patch", {"patch": f"*** Begin Patch\n{body}*** End Patch"}), 30
    )
    assert not result.ok, result.content
    assert result.error is not None
    code, cause = failure_code(result), result.error.details.get("cause")
    assert {"outside_workspace", "path_changed"} & {code, cause}, result.content
    assert sorted(os.listdir(outside)) == ["victim.txt"]
    assert (outside / "victim.txt").read_text() == "precious\n"
    # The source is where it was, untouched: not deleted, not deleted and written back.
    assert source.read_text() == "echo a\n"
    after = os.stat(source)
    assert (after.st_ino, after.st_mode, after.st_mtime_ns) == (
        before.st_ino,
        before.st_mode,
        before.st_mtime_ns,
    )
    assert link.is_symlink() and os.readlink(link) == str(leads_to)
    assert sorted(os.listdir(ws)) == sorted(
        ["a.sh", "sub", *(["victim.txt"] * (swapped == "target"))]
    )
