"""Without namespaces, a call's private temporary directory is made inside one parent of the
user's alone (``fastgate-sandbox-<uid>``, mode 0700; never a link, nor another user's
directory of that name), so that the plans can grant each call its own directory and no read on
the parent (the grant itself is the planner's: see the open gap in
``test_confinement_open_gaps.py``)."""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from fastgate.sandbox import SandboxedShell, _launch
from tests.sandbox.confinement_kit import (
    mechanism_fixture,  # noqa: F401  (the fixture "mechanism")
    no_process_outlives_the_test,  # noqa: F401  (autouse)
)

# Kernel and process mechanisms, the same in both builds: run once, in the compiled build.
pytestmark = pytest.mark.slow


@pytest.fixture(name="fresh_parent")
def fresh_parent_fixture(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """The parent looked for again, in ``tmp_path`` as the system's temporary directory."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(_launch, "_parent", None)
    yield tmp_path / f"fastgate-sandbox-{os.geteuid()}"


def private(path: str) -> bool:
    found = os.lstat(path)
    return (
        stat.S_ISDIR(found.st_mode)
        and found.st_uid == os.geteuid()
        and stat.S_IMODE(found.st_mode) == 0o700
    )


def exists(path: str) -> bool:
    return os.path.lexists(path)


async def test_a_calls_temporary_directory_is_inside_the_users_private_parent(
    tmp_path: Path, mechanism: str
) -> None:
    result = await SandboxedShell().run(
        'echo "$TMPDIR"; touch "$TMPDIR/made"', cwd=str(tmp_path), timeout=60
    )
    assert result.sandboxed and result.exit_code == 0, result
    temporary = result.output.strip()
    if mechanism == "namespaces":  # a /tmp of its own
        assert temporary == "/tmp"
        return
    parent = os.path.dirname(temporary)
    assert parent == _launch.temporary_parent()
    assert os.path.basename(parent) == f"fastgate-sandbox-{os.geteuid()}"
    assert private(parent)
    assert not exists(temporary)  # removed with the call


def test_the_parent_is_made_private(fresh_parent: Path) -> None:
    assert _launch.temporary_parent() == str(fresh_parent)
    assert private(str(fresh_parent))


def test_a_parent_open_to_others_is_closed(fresh_parent: Path) -> None:
    fresh_parent.mkdir(mode=0o755)
    fresh_parent.chmod(0o777)
    assert _launch.temporary_parent() == str(fresh_parent)
    assert private(str(fresh_parent))


@pytest.mark.parametrize("squatted", ["a link", "a file", "another user's"])
def test_a_parent_name_taken_otherwise_is_not_used(
    fresh_parent: Path, tmp_path: Path, squatted: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    if squatted == "a link":
        fresh_parent.symlink_to(elsewhere)
    elif squatted == "a file":
        fresh_parent.write_text("")
    else:  # the directory is another user's: this process is taken for a user it is not
        fresh_parent.mkdir(mode=0o700)
        uid = os.geteuid() + 4242
        monkeypatch.setattr(os, "geteuid", lambda: uid)
    parent = _launch.temporary_parent()
    assert parent not in (str(fresh_parent), str(elsewhere))
    assert os.path.dirname(parent) == str(tmp_path)
    assert stat.S_IMODE(os.lstat(parent).st_mode) == 0o700
    assert os.lstat(parent).st_uid == os.getuid() and not os.path.islink(parent)
    assert _launch.temporary_parent() == parent or squatted == "another user's"
