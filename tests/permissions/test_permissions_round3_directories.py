"""Directory changes within one command move what later relative words name: the sensitive list
and the protected paths see ``.git/config`` after ``cd .git``. A directory known only at run
time makes later relative words unknown: never an allow match, and at least ASK when one may
name a sensitive file (or is written to). Checked against real bash too."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fastgate import Decision
from fastgate.permissions.commands import analyze_command
from fastgate.permissions.subjects import command_paths
from tests.permissions_round3_kit import YOLO, asks_as_guarded, ruling

BASH = shutil.which("bash")
CD_ALLOWED = ("Bash(cd:*)", "Bash(pushd:*)", "Bash(popd:*)", "Bash(cat:*)", "Bash(true)")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / ".git" / "hooks").mkdir(parents=True)
    (tmp_path / ".git" / "config").write_text("[core]\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "notes.txt").write_text("notes")
    return tmp_path


@pytest.mark.parametrize(
    "command",
    [
        "cd .git && cat config",
        "cd .git; cat config",
        "cd .git\ncat config",
        "cd .git || true; cat config",
        "cd -P .git && cat config",
        "cd -L .git && cat config",
        "cd -- .git && cat config",
        "cd sub && cd ../.git && cat config",
        "cd sub/../.git && cat ./config",
        "pushd .git && cat config",
        "pushd .git >/dev/null; cat config",
        "cd .git && pushd /tmp && popd && cat config",
        "cd .git && cd / && cd - && cat config",
        "cd .git && (cat config)",
        "cd .git && cat $(echo x) config",
        "cd .git && { cat config; }",
        "command cd .git && cat config",
        "builtin cd .git; cat config",
        "eval 'cd .git'; cat config",
        "eval cd .git && cat config",
        ". /dev/stdin <<< 'cd .git'; cat config",
        "trap 'cat config' EXIT; cd .git",
        "bash -c 'cd .git && cat config'",
        "sh <<'EOF'\ncd .git\ncat config\nEOF",
        "env -C .git cat config",
        "env --chdir=.git cat config",
        "cd .aws; cat credentials",
        "cd .aws && cat ./credentials",
        "if cd .git; then cat config; fi",
        "cd .git && cat hooks/../config",
    ],
)
@pytest.mark.parametrize(
    "config", [{"mode": YOLO}, {"allow": CD_ALLOWED}], ids=["yolo", "allowed-cd-cat"]
)
def test_relative_words_follow_the_directory(
    command: str, config: dict[str, object], repo: Path
) -> None:
    decided = ruling(command, repo, **config)  # type: ignore[arg-type]
    assert asks_as_guarded(decided), decided


def test_home_is_where_cd_goes_alone(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = repo / "home"
    (home / ".aws").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    for command in (
        "cd && cat .aws/credentials",
        "cd ~ && cat .aws/credentials",
        "cd ~/.aws; cat credentials",
    ):
        assert asks_as_guarded(ruling(command, repo, mode=YOLO)), command


def test_a_subshell_moves_nothing_outside(repo: Path) -> None:
    # bash reads ./config here, which is no secret: the cd stayed in its subshell
    for command in (
        "(cd .git); cat config",
        "(cd .git) && cat config",
        "cd .git | true; cat config",
    ):
        assert ruling(command, repo, allow=CD_ALLOWED).decision is Decision.ALLOW, command
    assert ruling("cat config", repo, allow=CD_ALLOWED).decision is Decision.ALLOW


def test_a_cd_that_may_fail_keeps_the_old_directory(repo: Path) -> None:
    # a root-anchored sensitive file: after a cd that may fail, the word may still name it
    sensitive = ("./secret.txt",)
    for command in (
        "cd sub; cat secret.txt",
        "cd nowhere; cat secret.txt",
        "true || cd sub && cat secret.txt",
        "! cd sub && cat secret.txt",
        "if true; then cd sub; fi && cat secret.txt",
        "echo | cd sub && cat secret.txt",
    ):
        decided = ruling(command, repo, allow=(*CD_ALLOWED, "Bash(echo)"), sensitive=sensitive)
        assert asks_as_guarded(decided), command
    # only a cd that surely ran narrows it
    assert ruling(
        "cd sub && cat secret.txt", repo, allow=CD_ALLOWED, sensitive=sensitive
    ).decision is (Decision.ALLOW)


@pytest.mark.parametrize(
    "command",
    [
        'cd "$X" && cat config',
        "cd $(echo .git) && cat config",
        "cd `echo .git`; cat config",
        "cd .gi? && cat config",
        "for d in .git; do cd $d; done; cat config",
        "while true; do cd .git; break; done; cat config",
        "cd - && cat config",
        "pushd +1 && cat config",
        "CDPATH=.:. ; cd git-dir && cat config",
        "find . -name HEAD -execdir cat config \\;",
        "cd ${X:-.git} && cat credentials",
    ],
)
def test_a_directory_known_only_at_run_time_makes_words_unknown(command: str, repo: Path) -> None:
    assert asks_as_guarded(ruling(command, repo, mode=YOLO)), command
    decided = ruling(command, repo, allow=(*CD_ALLOWED, "Bash(find:*)", "Bash(echo:*)"))
    assert decided.decision is not Decision.ALLOW


@pytest.mark.parametrize(
    "command",
    [
        'cd "$X" && cat notes.txt',
        "cd $(git rev-parse --show-toplevel) && cat notes.txt",
        "cd - && cat notes.txt",
    ],
)
def test_an_unknown_directory_is_never_an_allow_match(command: str, repo: Path) -> None:
    allow = (*CD_ALLOWED, "Bash(git rev-parse:*)")
    assert ruling(command, repo, allow=allow).decision is Decision.ASK
    # nothing there may name a secret: YOLO runs it
    assert ruling(command, repo, mode=YOLO).decision is Decision.ALLOW


@pytest.mark.parametrize(
    "command",
    [
        'cd "$D" && echo "{}" > settings.local.json',
        "cd $(echo .fastgate) && tee settings.json < /dev/null",
        'cd "$D"; cp /tmp/x settings.local.json',
    ],
)
def test_a_write_in_an_unknown_directory_asks(command: str, repo: Path) -> None:
    assert asks_as_guarded(ruling(command, repo, mode=YOLO)), command


def test_an_absolute_cd_after_an_unknown_one_is_known(repo: Path) -> None:
    command = f'cd "$X"; cd {repo} && cat notes.txt'
    assert ruling(command, repo, allow=CD_ALLOWED).decision is Decision.ALLOW


# -- against real bash -------------------------------------------------------------------------

STEPS = st.sampled_from(
    [
        "cd a",
        "cd b",
        "cd ..",
        "cd -P l",
        "cd l/..",
        "cd -P l/..",
        "cd l",
        "cd m/../..",
        "cd -L l/../b",
        "set -P",
        "set +o physical",
        "cd -",
        "cd",
        "pushd a >/dev/null",
        "pushd b >/dev/null",
        "popd >/dev/null",
        "cd nowhere",
        "(cd b)",
        "cd a | true",
        "true || cd b",
        "cd $D",
        "look f",
        "look ../f",
        "look ./a/f",
        "look f >/dev/null",
        "false",
    ]
)
OPERATORS = st.sampled_from([" ; ", " && ", " || ", "\n"])


@st.composite
def directory_scripts(draw: st.DrawFn) -> str:
    steps = draw(st.lists(STEPS, min_size=1, max_size=7))
    script = steps[0]
    for step in steps[1:]:
        script += draw(OPERATORS) + step
    return script + " ; look f"


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    base = tmp_path_factory.mktemp("directories")
    root = base / "root"
    for d in ("a/b", "b/x", "a/c"):
        (root / d).mkdir(parents=True)
    (root / "l").symlink_to(root / "a" / "c")
    (root / "a" / "c" / "m").symlink_to(root / "b" / "x")  # where ``l/m/..`` climbs differs
    (root / "f").symlink_to(root / "a" / "b" / "f")  # the file ``f`` there is another file
    home = base / "home"
    home.mkdir()
    bin_dir = base / "bin"
    bin_dir.mkdir()
    # logs each argument as its caller's ``$PWD`` spells it, and the file the kernel opens
    look = bin_dir / "look"
    look.write_text(
        "#!/bin/sh\n"
        'for a; do printf "L %s\\nP %s\\n" "$(pwd -L)/$a" "$(realpath -m -- "$a")"'
        ' >> "$LOOK_LOG"; done\n'
    )
    look.chmod(0o755)
    for name in ("true", "false", "realpath"):
        found = shutil.which(name)
        if found is not None:
            (bin_dir / name).symlink_to(found)
    return root, home, bin_dir


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(script=directory_scripts())
@example(script=" ; ".join(["cd .."] * 7) + " ; look f")  # up to / (the root is 5 levels down)
# the two readings of ``..`` mixed: logical then physical, physical then logical, a fallback
@example(script="cd l/.. && cd -P l ; look f")
@example(script="cd l/.. && look f ; look f")
@example(script="cd -P l && cd m/../.. ; look f")
@example(script="set -P ; cd l ; set +o physical ; cd m/../.. ; look f")
def test_every_file_bash_opens_is_one_the_analysis_resolved(
    tree: tuple[Path, Path, Path], script: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, home, bin_dir = tree
    monkeypatch.setenv("HOME", str(home))
    log = root.parent / f"log-{uuid.uuid4().hex}"
    log.write_text("")
    env = {
        "PATH": str(bin_dir),
        "HOME": str(home),
        "LOOK_LOG": str(log),
        "D": "b",
        "OLDPWD": str(home),
        "PWD": str(root),
    }
    assert BASH is not None
    subprocess.run(
        [BASH, "--norc", "--noprofile", "-c", script],
        cwd=root,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=10,
        check=False,
    )
    spelled: set[str] = set()
    opened: set[str] = set()
    for line in log.read_text().splitlines():
        # (at ``/``, ``$(pwd -L)/f`` is ``//f``: POSIX keeps it, Linux reads it as ``/f``)
        path = "/" + os.path.normpath(line[2:]).lstrip("/")
        (spelled if line.startswith("L ") else opened).add(path)
    log.unlink()
    analysis = analyze_command(script)
    assert analysis.error is None, analysis.error
    found = command_paths(analysis, str(root))
    assert found is not None
    # the file itself is a path's canonical form; its spelling either form
    canonical = {path.canonical for path in found.paths}
    resolved = canonical | {path.lexical for path in found.paths}
    missed = (opened - canonical) | (spelled - resolved)
    if missed:
        # only where the analysis said the directory is unknown
        assert found.unplaced, (script, sorted(missed))


@pytest.fixture
def linked(tmp_path: Path) -> Path:
    """A workspace where the logical and the physical reading of ``..`` disagree: ``l`` links
    to ``a/c``, ``a/c/m`` to ``b/x``; ``f`` (in the root) and ``a/g`` link to a secret."""
    for d in ("a/b", "a/c", "b/x"):
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / "a" / "b" / ".env").write_text("TOKEN=secret")
    (tmp_path / "l").symlink_to(tmp_path / "a" / "c")
    (tmp_path / "a" / "c" / "m").symlink_to(tmp_path / "b" / "x")
    (tmp_path / "f").symlink_to(tmp_path / "a" / "b" / ".env")
    (tmp_path / "a" / "g").symlink_to(tmp_path / "a" / "b" / ".env")
    return tmp_path


@pytest.mark.parametrize(
    "command",
    [
        "cd l/.. && cat f",  # the logical ``..``: the root's f
        "cd -L l/.. && cat f",
        "cd l/.. && cd -P l/.. && cat g",  # logical, then physical from there: a/g
    ],
)
def test_a_secret_reached_by_either_reading_of_dotdot_is_guarded(
    command: str, linked: Path
) -> None:
    assert asks_as_guarded(ruling(command, linked, mode=YOLO)), command


@pytest.mark.parametrize(
    "command",
    [
        "cd -P l && cd m/../.. && cat g",  # physical, then logical: a/g
        "cd -P l; cd m/../..; cat g",
        "set -P; cd l; set +o physical; cd m/../.. && cat g",
        "set -o physical; cd l; set +P; cd m/../.. && cat g",
        "eval 'set -P'; cd l; set +P; cd m/../.. && cat g",
    ],
)
def test_a_dotdot_after_mixed_readings_is_an_unknown_directory(command: str, linked: Path) -> None:
    decided = ruling(command, linked, allow=(*CD_ALLOWED, "Bash(set:*)", "Bash(eval:*)"))
    assert decided.decision is Decision.ASK, (command, decided)
