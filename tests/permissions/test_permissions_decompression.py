"""Found from inside: a decompressor writes its operand's name without the suffix
(``gunzip .mcp.json.gz`` writes ``.mcp.json``), or the name stored in the file (``gzip -dN``),
and was judged to write only the compressed file it names. The name it writes is now checked
against the protected paths, and a name only the file knows is "a path known only when it
runs": at least ASK in every mode, and no allow rule covers it. Each spelling failed before the
fix; the controls write to standard output, test, list or compress."""

from __future__ import annotations

from pathlib import Path

import pytest

from fastgate import Decision
from tests.permissions_round3_kit import YOLO, asks_as_guarded, project, ruling

PROGRAMS = (
    "gzip", "gunzip", "pigz", "unpigz", "bzip2", "bunzip2", "xz", "unxz", "unlzma", "zstd",
    "unzstd", "lz4", "brotli", "uncompress", "lunzip", "cd",
)  # fmt: skip
ALLOW = tuple(f"Bash({p}:*)" for p in PROGRAMS)
DENY_OTHER = ("Bash(rm:*)",)  # names nothing these lines run

NAMED = [
    "gunzip .mcp.json.gz",
    "gzip -d .mcp.json.Z",
    "gzip -dk .mcp.json.gz",
    "gzip --decompress .mcp.json-gz",
    "gzip -df .mcp.json_z",
    "pigz -d .mcp.json.gz",
    "unpigz .mcp.json.zz",
    "bunzip2 .mcp.json.bz2",
    "bzip2 -d .mcp.json.bz",
    "unxz .mcp.json.xz",
    "xz -d .mcp.json.lzma",
    "unlzma .mcp.json.lzma",
    "zstd -d .mcp.json.zst",
    "unzstd .mcp.json.zstd",
    "lz4 -d .mcp.json.lz4",
    "brotli -d .mcp.json.br",
    "uncompress .mcp.json.Z",
    "lunzip .mcp.json.lz",
    "gunzip -S .x .mcp.json.x",
    "gunzip --suffix=.x .mcp.json.x",
    "gunzip sub/../.mcp.json.GZ",
    "cd sub && gunzip ../.mcp.json.gz",
]
NAMED_BY_THE_FILE = [
    "gunzip -N a.gz",
    "gzip -dN a.gz",
    "gzip -d --name a.gz",
    "gunzip -r src",
    "gzip -dr .",
]
CONTROLS = [
    "gzip -dc .mcp.json.gz",
    "xz -dc .mcp.json.xz",
    "gunzip --stdout .mcp.json.gz",
    "gunzip -t .mcp.json.gz",
    "gunzip -l a.gz",
    "zstd -d a.zst -o out",
    "gzip notes.txt",
    "gunzip a.tar.gz",
    "zcat .mcp.json.gz",
]


@pytest.fixture(name="workspace")
def workspace_fixture(tmp_path: Path) -> Path:
    return project(tmp_path)


@pytest.mark.parametrize("command", NAMED)
def test_the_name_without_the_suffix_is_a_written_path(command: str, workspace: Path) -> None:
    yolo = ruling(command, workspace, mode=YOLO, deny=DENY_OTHER)
    assert asks_as_guarded(yolo), yolo
    assert "writes protected path" in yolo.reason, yolo.reason
    assert ruling(command, workspace, allow=ALLOW).decision is Decision.ASK


@pytest.mark.parametrize("command", NAMED_BY_THE_FILE)
def test_a_name_the_file_holds_is_at_least_ask(command: str, workspace: Path) -> None:
    yolo = ruling(command, workspace, mode=YOLO, deny=DENY_OTHER)
    assert asks_as_guarded(yolo), yolo
    assert "named by their contents" in yolo.reason, yolo.reason


@pytest.mark.parametrize("command", CONTROLS)
def test_what_writes_no_restored_file_is_judged_as_before(command: str, workspace: Path) -> None:
    decided = ruling(command, workspace, mode=YOLO, deny=DENY_OTHER)
    assert decided.decision is Decision.ALLOW, decided.reason
