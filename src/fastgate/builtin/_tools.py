"""The built-in tools' definitions (SPEC §16): names, arguments, kinds and rule names."""

from __future__ import annotations

import os
from typing import Any

from fastgate import schema
from fastgate.builtin._bash import MAX_COMMAND, MAX_TIMEOUT, bash, render_bash
from fastgate.builtin._files import edit, read, write
from fastgate.builtin._patch import apply_patch, patch_paths
from fastgate.builtin._search import glob, grep
from fastgate.model import ToolKind
from fastgate.tools import Output, ToolDefinition, define_tool

FILE_PATH = schema.String(
    min_length=1, description="The file's path: relative to the workspace root, or absolute."
)
SEARCH_PATH = schema.Nullable(
    schema.String(
        min_length=1,
        description="The directory (or file, for grep) to search; default: the workspace root.",
    )
)


def git_configs_behind(paths: list[str]) -> list[str]:
    """For each ``.git`` among ``paths``, the configuration git reads through it. A ``.git``
    entry (a ``gitdir:`` file, or the directory) tells git where its configuration and hooks
    are, so writing, creating or deleting one counts as writing ``<it>/config``: a protected
    path, asked in every mode."""
    return [
        path.rstrip("/") + "/config"
        for path in paths
        if isinstance(path, str) and os.path.basename(os.path.normpath(path)) == ".git"
    ]


def _file_path_configs(args: Any) -> list[str]:
    """``ToolDefinition.paths`` of write and edit: what git reads through ``file_path``."""
    return git_configs_behind([args["file_path"]])


def _patch_paths(args: Any) -> list[str]:
    """``ToolDefinition.paths`` of apply_patch: its files, and what git reads through them."""
    paths = patch_paths(args)
    return [*paths, *git_configs_behind(paths)]


READ = define_tool(
    "read",
    "Read a text file. Lines come numbered (number, tab, line), from `offset` (1-based) for "
    "`limit` lines; lines over 2,000 characters are cut, and a note gives the next offset when "
    "more remains. Read a file before you edit or overwrite it.",
    schema.Object(
        {
            "file_path": FILE_PATH,
            "offset": schema.Integer(minimum=1, description="The first line to show (1-based)."),
            "limit": schema.Integer(minimum=1, description="How many lines (default 2000)."),
        },
        required=("file_path",),
    ),
    read,
    kind=ToolKind.READ_ONLY,
    parallelism="shared",
    is_concurrency_safe=True,
    path_args=("file_path",),
    rule_names=("Read",),
)

WRITE = define_tool(
    "write",
    "Write a file with exactly `content` (created with its directories, or replaced whole). "
    "An existing file must have been read first in this session, and not changed since.",
    schema.Object(
        {"file_path": FILE_PATH, "content": schema.String(description="The whole new content.")},
        required=("file_path", "content"),
    ),
    write,
    kind=ToolKind.WRITE,
    path_args=("file_path",),
    paths=_file_path_configs,
    rule_names=("Edit", "Write"),
)

EDIT = define_tool(
    "edit",
    "Replace `old_string` with `new_string` in a file you have read. `old_string` must match "
    "the file exactly (whitespace included) and occur once, unless `replace_all` is true. The "
    "file's encoding and line endings are kept.",
    schema.Object(
        {
            "file_path": FILE_PATH,
            "old_string": schema.String(description="The exact text to replace."),
            "new_string": schema.String(description="The text to put in its place."),
            "replace_all": schema.Boolean(description="Replace every occurrence."),
        },
        required=("file_path", "old_string", "new_string"),
    ),
    edit,
    kind=ToolKind.WRITE,
    path_args=("file_path",),
    paths=_file_path_configs,
    rule_names=("Edit",),
)

APPLY_PATCH = define_tool(
    "apply_patch",
    "Apply a patch to one or more files, all of them or none. Format:\n"
    "*** Begin Patch\n"
    "*** Add File: path/new.py\n+line\n"
    "*** Delete File: path/old.py\n"
    "*** Update File: path/file.py\n*** Move to: path/renamed.py (optional)\n"
    "@@ def enclosing_function():\n context line\n-removed line\n+added line\n"
    "*** End Patch\n"
    "Give 3 lines of context around each change (more, or an @@ line, when they repeat).",
    schema.Object(
        {"patch": schema.String(description="The whole patch text.")}, required=("patch",)
    ),
    apply_patch,
    kind=ToolKind.WRITE,
    path_args=(),
    paths=_patch_paths,
    rule_names=("Edit",),
)

GLOB = define_tool(
    "glob",
    "List files matching a glob pattern (`**/*.py`, `src/**/*.{ts,tsx}`; `*` stays within one "
    "directory), newest first, at most 100. `.gitignore`d files are left out.",
    schema.Object(
        {
            "pattern": schema.String(min_length=1, description="The glob pattern."),
            "path": SEARCH_PATH,
        },
        required=("pattern",),
    ),
    glob,
    kind=ToolKind.READ_ONLY,
    parallelism="shared",
    is_concurrency_safe=True,
    path_args=("path",),
    rule_names=("Read", "Glob"),
)

GREP = define_tool(
    "grep",
    "Search file contents with a regular expression (ripgrep syntax). `output_mode`: "
    "`files_with_matches` (default, newest first), `content` (matching lines, with `context` "
    "lines around them) or `count`. `glob` filters files (`*.py`, `src/**/*.ts`). "
    "`.gitignore`d files are left out.",
    schema.Object(
        {
            "pattern": schema.String(min_length=1, description="The regular expression."),
            "path": SEARCH_PATH,
            "glob": schema.Nullable(schema.String(min_length=1, description="A file filter.")),
            "output_mode": schema.Enum(["files_with_matches", "content", "count"]),
            "case_insensitive": schema.Boolean(),
            "context": schema.Integer(
                minimum=0, maximum=100, description="Lines shown around each match (content)."
            ),
            "head_limit": schema.Integer(
                minimum=0, description="At most this many entries (default 100; 0: no limit)."
            ),
        },
        required=("pattern",),
    ),
    grep,
    kind=ToolKind.READ_ONLY,
    parallelism="shared",
    is_concurrency_safe=True,
    path_args=("path",),
    rule_names=("Read", "Grep"),
)

BASH = define_tool(
    "bash",
    "Run a bash command in the workspace and get its output (stdout and stderr together) and "
    "exit code. Each call starts a fresh shell in the workspace root: no directory or variable "
    "carries over, so chain dependent steps in one command (`cd sub && make`). Output past "
    "30,000 characters is cut in the middle. Processes still running when the command ends or "
    "times out are stopped: nothing keeps running in the background.",
    schema.Object(
        {
            "command": schema.String(
                min_length=1,
                max_length=MAX_COMMAND,
                pattern=r"\S",
                description="The command line.",
            ),
            "timeout": schema.Number(
                exclusive_minimum=0,
                maximum=MAX_TIMEOUT,
                description="Seconds before the command is stopped (default 120, at most 600).",
            ),
            "description": schema.Nullable(
                schema.String(description="What the command does, in a few words, for people.")
            ),
        },
        required=("command",),
    ),
    bash,
    output=Output(render=render_bash),
    kind=ToolKind.EXECUTE,
    path_args=(),
    rule_names=("Bash",),
)

ALL: tuple[ToolDefinition, ...] = (READ, WRITE, EDIT, APPLY_PATCH, GLOB, GREP, BASH)
