"""What a download or a copy from another machine writes, where the names come from the remote
side rather than from a word naming a local file: ``curl -O URL`` and ``wget URL`` write the
URL's last segment (``https://host/.mcp.json`` is ``./.mcp.json``); ``curl -J``, ``wget
--content-disposition`` take the server's name; ``wget -r``, ``scp -r host:dir .``, ``rsync -a
host:dir/ .``, ``kubectl cp``, ``docker cp`` and cloud copies (``aws s3 sync``, ``gsutil``,
``rclone``, ``azcopy``) and ``gh release download`` write whatever the remote side holds.

A name the words determine becomes a written word like any other (checked against the
protected paths); names only the remote side knows become one word known only when the
command runs, below the directory they land in: at least ASK in every mode.
"""

from __future__ import annotations

import os
import re
from urllib.parse import unquote, urlsplit

from fastgate.permissions.arguments import (
    operand_words,
    option_values,
    short_letters,
    unknown_below,
)
from fastgate.permissions.shell import Word

_HERE = Word(".", ".")
# curl's and wget's own globbing in a URL (``{a,b}``, ``[1-9]``): the names are made by them.
_URL_GLOB = re.compile(r"[{}\[\]]")
# ``[user@]host:path`` (a colon before any slash; not a path starting with ``/`` or ``.``).
_REMOTE = re.compile(r"^(?![./])[^/:]+::?")
_SHELL_GLOB = frozenset("*?[{")


def downloaded_words(name: str, args: tuple[Word, ...]) -> list[Word]:
    """The files ``name`` (a program's basename) writes, named by a remote side."""
    if name == "curl":
        return _curl(args)
    if name == "wget":
        return _wget(args)
    if name in ("aria2c", "axel"):
        named = option_values(args, ("-o", "--out", "--output"))
        directory = option_values(args, ("-d", "--dir"))
        return [] if named else _under(directory[-1] if directory else _HERE, name)
    if name in ("scp", "rsync"):
        return _remote_copy(name, args)
    if name == "sftp":
        return _under(_HERE, "sftp")  # a batch or its input says what it gets, and where
    if name == "gh":
        return _github_downloads(args)
    return _copied_out_of(name, args)


# GitHub's CLI: a release's assets and a workflow run's artifacts keep the names they were
# uploaded with (an asset may be called ``.mcp.json``); ``-O FILE`` names the one file instead.
_GH_DOWNLOADS = ("release", "run")


def _github_downloads(args: tuple[Word, ...]) -> list[Word]:
    operands = operand_words(args)
    for group in _GH_DOWNLOADS:
        rest = _after(operands, group)
        if not rest or rest[0].dynamic or rest[0].value != "download":
            continue
        named = option_values(args, ("-O", "--output"))
        if named:
            return [word for word in named if word.value != "-"]
        directory = option_values(args, ("-D", "--dir"))
        return _under(directory[-1] if directory else _HERE, f"gh {group} download")
    return []


def _curl(args: tuple[Word, ...]) -> list[Word]:
    values = [w.value for w in args if not w.dynamic]
    clusters = [short_letters(v) for v in values]
    if option_values(args, ("-K", "--config"), clustered=True):
        return _under(_HERE, "curl -K")  # a config file may name outputs and directories
    remote_name = (
        "--remote-name" in values
        or "--remote-name-all" in values
        or any("O" in c for c in clusters)
    )
    if not remote_name:
        return []
    directory = option_values(args, ("--output-dir",))
    where = directory[-1] if directory else _HERE
    if "--remote-header-name" in values or any("J" in c for c in clusters):
        return _under(where, "curl -J")  # the server's Content-Disposition names it
    globbing = not ("--globoff" in values or "-g" in values)
    urls = operand_words(args) + option_values(args, ("--url",))
    return _named_by_urls(urls, where, globbing, "curl", "")


def _wget(args: tuple[Word, ...]) -> list[Word]:
    values = [w.value for w in args if not w.dynamic]
    if option_values(args, ("-O", "--output-document"), clustered=True):
        return []  # one file the words name (seen elsewhere)
    prefix = option_values(args, ("-P", "--directory-prefix"), clustered=True)
    where = prefix[-1] if prefix else _HERE
    long_blind = (
        "--recursive",
        "--mirror",
        "--page-requisites",
        "--content-disposition",
        "--trust-server-names",
        "--input-file",
        "--force-directories",
        "--execute",  # a wgetrc command: ``content_disposition = on``, ``output_document``
        "--config",
        "--default-page",
    )
    blind = any(v.split("=", 1)[0] in long_blind for v in values) or any(
        c in short_letters(v) for v in values for c in "rmpixe"
    )
    if blind:
        return _under(where, "wget")  # the server's links, names or redirects name them
    return _named_by_urls(operand_words(args), where, True, "wget", "index.html")


def _named_by_urls(
    candidates: list[Word], where: Word, globbing: bool, program: str, empty: str
) -> list[Word]:
    """The last segment of each URL's path, below ``where`` (``empty`` for a path ending in
    ``/``). Words that are not URLs may be option values read as operands: their last
    segment is taken too (more read as written, never less)."""
    out: list[Word] = []
    for word in candidates:
        if word.dynamic or (globbing and _URL_GLOB.search(word.value)):
            return _under(where, program)
        path = urlsplit(word.value).path if "://" in word.value else word.value
        last = path.rsplit("/", 1)[-1] or empty
        for name in dict.fromkeys((last, unquote(last))):  # ``%2Emcp.json`` may be decoded
            if name:
                value = os.path.join(where.value, name)
                out.append(Word(value, value, where.dynamic))
    return out


_RECURSIVE_LETTERS = {"scp": "r", "rsync": "rad"}
_RSYNC_RECURSIVE = frozenset({"--recursive", "--archive", "--dirs", "--files-from"})


def _remote_copy(name: str, args: tuple[Word, ...]) -> list[Word]:
    """``scp``/``rsync`` from another machine: a file keeps its remote name in the
    destination; a tree, a remote glob or a list of files writes what the remote holds."""
    operands = operand_words(args)
    if len(operands) < 2:
        return []
    sources, destination = operands[:-1], operands[-1]
    remote = [w for w in sources if w.dynamic or _is_remote(w.value)]
    if not remote or (not destination.dynamic and _is_remote(destination.value)):
        return []
    values = [w.value for w in args if not w.dynamic]
    letters = _RECURSIVE_LETTERS[name]
    recursive = any(v.split("=", 1)[0] in _RSYNC_RECURSIVE for v in values) or any(
        c in short_letters(v) for v in values for c in letters
    )
    out: list[Word] = []
    for word in remote:
        path = _remote_path(word.value)
        last = path.rstrip("/").rsplit("/", 1)[-1]
        if word.dynamic or recursive or not last or any(c in _SHELL_GLOB for c in path):
            return _under(destination, name)
        value = os.path.join(destination.value, last)
        out.append(Word(value, value, destination.dynamic))
    return out


def _is_remote(value: str) -> bool:
    return "://" in value or bool(_REMOTE.match(value))


def _remote_path(value: str) -> str:
    if "://" in value:
        return urlsplit(value).path
    return value.split(":", 2)[-1] if "::" in value else value.split(":", 1)[1]


# Copies out of a container, a pod or a bucket into a local directory: ``docker cp c:/d .``,
# ``kubectl cp ns/pod:/d .``, ``aws s3 sync s3://b .``, ``gsutil cp -r gs://b/d .``,
# ``rclone copy remote:d .``, ``azcopy copy https://... .``.
_CONTAINER_COPIES = frozenset({"docker", "podman", "kubectl", "oc", "nerdctl"})
_BUCKET_SCHEMES = ("s3://", "gs://", "https://", "http://", "az://", "wasbs://")
_CLOUD_COPIES = {
    "aws": ("s3", frozenset({"cp", "sync", "mv"})),
    "gsutil": ("", frozenset({"cp", "rsync", "mv"})),
    "gcloud": ("storage", frozenset({"cp", "rsync", "mv"})),
    "rclone": ("", frozenset({"copy", "sync", "move", "copyto", "moveto", "bisync"})),
    "azcopy": ("", frozenset({"copy", "cp", "sync"})),
}


def _after(operands: list[Word], first: str) -> list[Word] | None:
    """The operands after the first one spelled ``first`` (an option's value may come before
    it: ``kubectl -n ns cp``, ``aws --profile p s3``), or None."""
    for index, word in enumerate(operands):
        if not word.dynamic and word.value == first:
            return operands[index + 1 :]
    return None


def _copied_out_of(name: str, args: tuple[Word, ...]) -> list[Word]:
    operands = operand_words(args)
    if name in _CONTAINER_COPIES:
        rest = _after(operands, "cp")
        if rest is None or len(rest) < 2:
            return []
        source, destination = rest[-2], rest[-1]
        if destination.value == "-" or not (source.dynamic or ":" in source.value):
            return []
        return _under(destination, f"{name} cp")
    found = _CLOUD_COPIES.get(name)
    if found is None:
        return []
    group, commands = found
    if group:
        grouped = _after(operands, group)
        if grouped is None:
            return []
        operands = grouped
    command = next((w.value for w in operands if not w.dynamic and w.value in commands), None)
    if command is None:
        return []
    rest = _after(operands, command) or []
    if len(rest) < 2:
        return []
    source, destination = rest[-2], rest[-1]
    local = not destination.dynamic and not _is_cloud(name, destination.value)
    if not local or not (source.dynamic or _is_cloud(name, source.value)):
        return []
    return _under(destination, f"{name} {command}")


def _is_cloud(program: str, value: str) -> bool:
    if value.startswith(_BUCKET_SCHEMES):
        return True
    return program == "rclone" and bool(_REMOTE.match(value))


def _under(where: Word, what: str) -> list[Word]:
    shown = f"the files {what} writes under {where.value}, named by the remote side"
    return [unknown_below(where.value, shown)]
