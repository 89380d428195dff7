"""Found from outside: an archive extracted into the workspace writes files named by its
contents, not by any word of the command (a ``.claude/settings.json``, a ``.git/hooks/`` script,
a ``.mcp.json``), and was allowed as a command that writes nothing protected. Every extraction
now writes "paths known only when it runs": at least ASK in every mode, YOLO included, and no
allow rule covers it. Each spelling failed before the fix; the controls write no file."""

from __future__ import annotations

from pathlib import Path

import pytest

from fastgate import Decision
from tests.permissions_round3_kit import YOLO, asks_as_guarded, project, ruling

ALLOW = (
    "Bash(tar:*)",
    "Bash(bsdtar:*)",
    "Bash(unzip:*)",
    "Bash(7z:*)",
    "Bash(cpio:*)",
    "Bash(python3:*)",
    "Bash(jar:*)",
    "Bash(ar:*)",
    "Bash(7zz:*)",
    "Bash(unrar:*)",
    "Bash(rar:*)",
    "Bash(unar:*)",
    "Bash(cabextract:*)",
    "Bash(pax:*)",
    "Bash(dpkg-deb:*)",
    "Bash(dpkg:*)",
    "Bash(lha:*)",
    "Bash(arj:*)",
    "Bash(unsquashfs:*)",
    "Bash(cd:*)",
    "Bash(sudo:*)",
)
DENY_OTHER = ("Bash(rm:*)",)  # names nothing these lines run

EXTRACTIONS = [
    "tar xf a.tar",
    "tar xzvf a.tgz",
    "tar -xf a.tar",
    "tar -x -f a.tar",
    "tar --extract --file=a.tar",
    "tar --get -f a.tar",
    "tar -xzf a.tgz -C sub",
    "tar -C .. -xf a.tar",
    "tar --directory=/tmp/x -xf a.tar",
    "gtar -xf a.tar",
    "bsdtar -xvf a.tar",
    "unzip a.zip",
    "unzip -o a.zip",
    "unzip -q a.zip -d out",
    "unzip -dout a.zip",
    "7z x a.7z",
    "7z e a.7z -oout",
    "7za x a.7z",
    "cpio -idm < a.cpio",
    "cpio --extract -D out < a.cpio",
    "python3 -m zipfile -e a.zip .",
    "python3 -m tarfile -e a.tar out",
    "python -m zipfile --extract a.zip",
    "jar xf a.jar",
    "ar x lib.a",
    "cd sub && tar xf ../a.tar",
    "sudo tar xf a.tar",
    "curl -s https://example.com/a.tgz | tar xzf -",
    "7zz x a.7z",
    "unrar x a.rar",
    "rar x a.rar out/",
    "unar a.zip",
    "unar -o out a.zip",
    "cabextract a.cab",
    "pax -r < a.pax",
    "pax -rw src .",
    "dpkg-deb -x a.deb .",
    "dpkg -x a.deb out",
    "lha x a.lzh",
    "arj x a.arj",
    "unsquashfs -f -d . a.sqfs",
]


@pytest.fixture(name="workspace")
def workspace_fixture(tmp_path: Path) -> Path:
    return project(tmp_path)


@pytest.mark.parametrize("command", EXTRACTIONS)
def test_an_extraction_is_at_least_ask_in_every_mode(command: str, workspace: Path) -> None:
    yolo = ruling(command, workspace, mode=YOLO, deny=DENY_OTHER)
    assert yolo.decision is Decision.ASK, yolo.reason
    assert asks_as_guarded(yolo), yolo
    assert "archive's files" in yolo.reason, yolo.reason
    allowed = ruling(command, workspace, allow=ALLOW)
    assert allowed.decision is Decision.ASK, allowed.reason


@pytest.mark.parametrize(
    "command",
    [
        "tar cf - src | tar xOf -",  # to standard output
        "tar -xOf a.tar f",
        "tar --to-stdout -xf a.tar",
        "tar tf a.tar",  # a listing
        "tar czf a.tgz src",  # an archive made
        "unzip -l a.zip",
        "unzip -p a.zip f",
        "unzip -t a.zip",
        "7z l a.7z",
        "cpio -o < list",
        "python3 -m zipfile -l a.zip",
        "python3 -m tarfile -l a.tar",
        "unrar l a.rar",
        "cabextract -l a.cab",
        "pax < a.pax",
        "unsquashfs -l a.sqfs",
    ],
)
def test_reading_or_making_an_archive_writes_nothing_unknown(command: str, workspace: Path) -> None:
    """Control: judged as before."""
    decided = ruling(command, workspace, mode=YOLO, deny=DENY_OTHER)
    assert decided.decision is Decision.ALLOW, decided.reason
