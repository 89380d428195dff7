"""What version control writes into a work tree from other revisions: ``git checkout BRANCH``,
``merge``, ``pull``, ``stash pop``, ``reset --hard``, a patch applied (``git apply``, ``patch``),
``hg update``, ``svn update``, ``jj edit`` and the like.

The files such a command writes are named by commits, stashes, the index or a patch, not by
any word of the command, and each of those may hold a ``.claude/settings.json`` or a
``.mcp.json`` (an old commit with looser settings; a commit made through git's plumbing). What
they hold can change between the decision and the run (another call may make a commit or move
a branch), so it is not looked at: one word, known only when the command runs, stands for the
files written under the work tree, and the call is at least ASK in every mode. A restore of
literal paths (``git checkout -- src``, ``git restore f.py``) writes those paths and what is
below them: they count as written trees instead.
"""

from __future__ import annotations

import os

from fastgate.permissions.arguments import (
    git_call,
    operand_words,
    option_values,
    short_letters,
    unknown_below,
)
from fastgate.permissions.shell import Word

# git commands known to leave the work tree's tracked files alone: they write nothing, only
# what their words name (``mv``, ``rm``, ``merge-file``, ``--output``), the repository's
# objects, refs and index, or its configuration (judged elsewhere). Any other command,
# aliases and ``git-*`` programs included, may rewrite the work tree.
_GIT_KEEPS_WORK_TREE = frozenset(
    {
        "add", "annotate", "archive", "blame", "branch", "bugreport", "bundle", "cat-file",
        "credential", "credential-cache", "credential-store", "daemon", "http-backend",
        "check-attr", "check-ignore", "check-mailmap", "check-ref-format", "cherry", "column",
        "commit", "commit-graph", "commit-tree", "config", "count-objects", "describe",
        "diagnose", "diff", "diff-files", "diff-index", "diff-tree", "fast-export",
        "fast-import", "fetch", "fmt-merge-msg", "for-each-ref", "format-patch", "fsck", "gc",
        "get-tar-commit-id", "grep", "hash-object", "help", "index-pack", "init",
        "interpret-trailers", "lfs", "log", "ls-files", "ls-remote", "ls-tree", "mailinfo",
        "mailsplit", "maintenance", "merge-base", "merge-file", "merge-tree", "mktag", "mktree",
        "multi-pack-index", "mv", "name-rev", "notes", "pack-objects", "pack-redundant",
        "pack-refs", "patch-id", "prune", "prune-packed", "push", "range-diff", "reflog",
        "remote", "repack", "replace", "request-pull", "rev-list", "rev-parse", "rm",
        "send-email", "send-pack", "shortlog", "show", "show-branch", "show-index", "show-ref",
        "status", "stripspace", "submodule", "symbolic-ref", "tag", "unpack-file",
        "unpack-objects", "update-index", "update-ref", "update-server-info", "var",
        "verify-commit", "verify-pack", "verify-tag", "version", "whatchanged", "worktree",
        "write-tree",
    }
)  # fmt: skip
# Options after which a rewriting command only reports, stops or edits its own state.
_GIT_ONLY_REPORTS = frozenset({"-h", "--help", "--show-current-patch", "--edit-todo", "--quit"})
_GIT_STASH_KEEPS = frozenset({"list", "show", "drop", "clear", "create", "store"})
_GIT_BISECT_KEEPS = frozenset({"log", "visualize", "view", "terms", "help"})
_GIT_RESET_REWRITES = frozenset({"--hard", "--merge", "--keep"})
_GIT_APPLY_REPORTS = frozenset({"--check", "--stat", "--numstat", "--summary"})
# The options of ``checkout``/``switch``/``restore`` taking a separate argument.
_GIT_CHECKOUT_ARGUMENT = frozenset(
    {"-b", "-B", "--orphan", "-c", "-C", "--create", "--force-create", "-s", "--source"}
)
_GLOB = frozenset("*?[")

# Other version control: the commands known to leave the work tree alone (or to write only
# what their words name); any other, abbreviations included, may rewrite it.
_HG_KEEPS = frozenset(
    {
        "status", "st", "log", "diff", "cat", "annotate", "blame", "help", "version", "root",
        "paths", "identify", "id", "heads", "branches", "branch", "tags", "summary", "sum",
        "outgoing", "out", "incoming", "in", "export", "files", "manifest", "grep", "config",
        "showconfig", "bookmarks", "bookmark", "tip", "parents", "verify", "add", "commit", "ci",
        "push", "forget", "remove", "rm", "copy", "cp", "mv", "rename", "addremove", "tag",
        "init", "archive", "bundle", "phase",
    }
)  # fmt: skip
_SVN_KEEPS = frozenset(
    {
        "status", "st", "stat", "log", "diff", "di", "cat", "info", "blame", "praise",
        "annotate", "ann", "help", "h", "list", "ls", "proplist", "plist", "pl", "propget",
        "pget", "pg", "add", "commit", "ci", "mkdir", "delete", "del", "remove", "rm", "copy",
        "cp", "move", "mv", "rename", "ren", "lock", "unlock", "mergeinfo", "changelist", "cl",
    }
)  # fmt: skip
_JJ_KEEPS = frozenset(
    {
        "log", "show", "diff", "status", "st", "help", "version", "root", "describe", "desc",
        "commit", "bookmark", "b", "branch", "evolog", "obslog", "interdiff", "file", "cat",
        "files", "config", "tag",
    }
)  # fmt: skip
_OTHER_VCS = {"hg": _HG_KEEPS, "sl": _HG_KEEPS, "svn": _SVN_KEEPS, "jj": _JJ_KEEPS}


def rewritten_words(name: str, args: tuple[Word, ...]) -> list[Word]:
    """For a command writing a work tree from other revisions or a patch, one word known only
    when it runs, below the work tree, standing for the files it writes."""
    if name == "git":
        return _git_rewritten(args)
    if name == "patch":
        return _patched(args)
    keeps = _OTHER_VCS.get(name)
    if keeps is None:
        return []
    found = operand_words(args)
    if not found or (not found[0].dynamic and found[0].value in keeps):
        return []
    return _under(Word(".", "."), f"{name} {found[0].raw}")


def restored_trees(name: str, args: tuple[Word, ...]) -> list[Word]:
    """The literal paths a git restore writes from the index or a commit (``git checkout --
    src``, ``git restore --source=v1 f.py``): each is written with what is below it."""
    if name != "git":
        return []
    found = git_call(args)
    if found is None or found.command not in ("checkout", "restore"):
        return []
    paths = _restored_paths(found.command, found.rest)
    return [p for p in paths if not _beyond_a_literal_path(p)] if paths else []


def _git_rewritten(args: tuple[Word, ...]) -> list[Word]:
    found = git_call(args)
    if found is None:
        return []  # no command known before it runs: the analysis calls it unknown
    command, rest = found.command, found.rest
    values = _options(rest)
    work_tree = found.work_tree
    if command in ("init", "clone") and any(v.startswith("--separate-git-dir") for v in values):
        return [_git_file(command, rest, work_tree)]
    if command in _GIT_KEEPS_WORK_TREE or values & _GIT_ONLY_REPORTS:
        return []
    if command == "clone":  # below ``-C``'s directory: ``git -C .. clone URL ws`` is above
        named = _clone_destination(rest)
        value = os.path.join(work_tree.value, named.value)
        destination = Word(value, value, named.dynamic)
        return _under(destination, "git clone") if _beyond_a_literal_path(destination) else []
    if command in ("checkout", "restore"):
        paths = _restored_paths(command, rest)
        if paths is None:
            return _under(work_tree, f"git {command}")
        beyond = [p for p in paths if _beyond_a_literal_path(p)]
        return _under(work_tree, f"git {command}") if beyond else []
    if not _git_rewrites(command, rest, values):
        return []
    return _under(work_tree, f"git {command}")


def _git_rewrites(command: str, rest: tuple[Word, ...], values: set[str]) -> bool:
    """Whether ``command`` (one git does not keep off the work tree) rewrites it this time."""
    if command == "switch":
        return _switches(rest)
    if command == "reset":
        return bool(values & _GIT_RESET_REWRITES)
    if command == "stash":
        sub = operand_words(rest)
        return not sub or sub[0].dynamic or sub[0].value not in _GIT_STASH_KEEPS
    if command == "bisect":
        sub = operand_words(rest)
        if not sub or sub[0].dynamic:
            return True
        if sub[0].value == "start":
            return len(sub) > 1  # a bad and a good commit given: it checks one out
        return sub[0].value not in _GIT_BISECT_KEEPS
    if command == "apply":
        if "--cached" in values and "--index" not in values:
            return False  # the index only
        return not (values & _GIT_APPLY_REPORTS) or "--apply" in values
    if command == "read-tree":
        return any("u" in short_letters(v) for v in values)
    if command == "clean":  # deletes untracked files, unless only listing them
        return not any("n" in short_letters(v) or v == "--dry-run" for v in values)
    return True


# ``git clone``'s options taking a separate argument.
_GIT_CLONE_ARGUMENT = frozenset(
    {
        "-b", "--branch", "-o", "--origin", "--depth", "-c", "--config", "--reference",
        "--reference-if-able", "--template", "-u", "--upload-pack", "--separate-git-dir", "-j",
        "--jobs", "--filter", "--shallow-since", "--shallow-exclude", "--server-option",
        "--bundle-uri",
    }
)  # fmt: skip


def _positional(rest: tuple[Word, ...], with_argument: frozenset[str]) -> list[Word]:
    """The words of ``rest`` that are neither options nor the separate argument of one of
    ``with_argument`` (a word known only at run time counts as one; after ``--``, all do)."""
    found: list[Word] = []
    i = 0
    while i < len(rest):
        word = rest[i]
        if word.value == "--" and not word.dynamic:
            return found + list(rest[i + 1 :])
        if not word.dynamic and word.value in with_argument:
            i += 2
            continue
        if word.dynamic or not word.value.startswith("-"):
            found.append(word)
        i += 1
    return found


def _clone_destination(rest: tuple[Word, ...]) -> Word:
    """Where ``git clone`` puts the new tree. Named or derived from the source (``r`` for
    ``…/r.git``), it is a new directory below where git runs, whose files nothing here reads;
    into ``.`` (an empty work tree), above it, or a place known only at run time, the
    repository's files land where they may be read."""
    found = _positional(rest, _GIT_CLONE_ARGUMENT)
    if len(found) >= 2:
        return found[1]
    if found and not found[0].dynamic:
        return Word("clone", "clone")  # a name below here, derived from the source's
    return Word("$(derived)", "$(derived)", dynamic=True)


# ``git switch``'s options that rewrite the files even with no branch named: ``--orphan``
# empties the tree, the others put HEAD's back.
_GIT_SWITCH_REWRITES = frozenset(
    {"--orphan", "-f", "--force", "--discard-changes", "-m", "--merge", "--recurse-submodules"}
)


_GIT_INIT_ARGUMENT = frozenset({"--separate-git-dir", "-b", "--initial-branch", "--object-format"})


def _git_file(command: str, rest: tuple[Word, ...], work_tree: Word) -> Word:
    """``--separate-git-dir`` makes the repository's ``.git`` a file naming a directory
    elsewhere, whose ``config`` and ``hooks`` no rule protects by name (an existing
    repository's is moved there): the ``.git`` it writes, a protected indirection."""
    if command == "clone":
        place = _clone_destination(rest)
    else:
        found = _positional(rest, _GIT_INIT_ARGUMENT)
        place = found[0] if found else work_tree
    value = os.path.join(place.value, ".git")
    return Word(value, value, place.dynamic)


def _switches(rest: tuple[Word, ...]) -> bool:
    """``git switch``: a branch or a start point given, ``-``, ``--orphan`` (which empties
    the tree) or an option putting HEAD's files back; ``switch -c NAME`` alone keeps them."""
    positional, i = 0, 0
    while i < len(rest):
        word = rest[i]
        if word.dynamic:
            return True
        value = word.value
        if value in _GIT_SWITCH_REWRITES or value.startswith("--orphan="):
            return True
        if "f" in short_letters(value) or "m" in short_letters(value):
            return True
        if word.value in _GIT_CHECKOUT_ARGUMENT:
            i += 2
            continue
        if word.value == "-" or not word.value.startswith("-"):
            positional += 1
        i += 1
    return positional > 0


def _restored_paths(command: str, rest: tuple[Word, ...]) -> list[Word] | None:
    """The paths a ``checkout``/``restore`` writes from the index or a commit: ``[]`` when it
    writes none (``checkout -b x``, ``restore --staged``), None when it may write the whole
    tree (a branch checked out, ``--pathspec-from-file``, a word only run time knows)."""
    values = _options(rest)
    if any(v.startswith("--pathspec-from-file") for v in values):
        return None
    before, after, dashed = _checkout_operands(rest)
    if command == "restore":
        staged = bool(values & {"--staged", "-S"})
        if staged and not values & {"--worktree", "-W"}:
            return []  # the index only
        return (before + after) or None  # none named: ``restore -p`` offers every file
    if any(w.dynamic for w in rest):
        return None
    if dashed:
        return after or None  # ``checkout [COMMIT] -- PATH...``: the paths, from it or the index
    if len(before) == 1:
        # ``checkout X``: a branch or commit (the whole tree), or a path git finds as one.
        return None
    if len(before) > 1:
        return before  # ``checkout COMMIT PATH...`` (the first a commit or a path too)
    # No operand: ``checkout -b NAME``, ``--orphan NAME``, ``--detach`` keep the files; any
    # other option may put the index's back (``-f``, ``-m``, ``-p``, submodules).
    keeps = all(v in _GIT_CHECKOUT_KEEPS or v.startswith("--track=") for v in values)
    return [] if keeps else None


# ``git checkout``'s options that, with no operand, leave the files as they are.
_GIT_CHECKOUT_KEEPS = frozenset(
    {
        "-b", "-B", "--orphan", "--detach", "-q", "--quiet", "-t", "--track", "--no-track",
        "-l", "--progress", "--no-progress", "--guess", "--no-guess", "--no-recurse-submodules",
        "--ignore-other-worktrees", "--overwrite-ignore", "--no-overwrite-ignore",
    }
)  # fmt: skip


def _options(rest: tuple[Word, ...]) -> set[str]:
    """The options of a git command's words: those before ``--`` (after it, a word is a path
    even when it starts with ``-``), known before it runs."""
    found: set[str] = set()
    for word in rest:
        if word.dynamic:
            continue
        if word.value == "--":
            break
        if word.value.startswith("-"):
            found.add(word.value)
    return found


def _checkout_operands(rest: tuple[Word, ...]) -> tuple[list[Word], list[Word], bool]:
    """The operands of ``checkout``/``restore`` before ``--`` and after it, and whether there
    is one (an option's separate argument, as ``-b NAME``, is not an operand)."""
    before: list[Word] = []
    i = 0
    while i < len(rest):
        word = rest[i]
        if word.value == "--" and not word.dynamic:
            return before, list(rest[i + 1 :]), True
        if not word.dynamic and word.value in _GIT_CHECKOUT_ARGUMENT:
            i += 2
            continue
        if word.dynamic or not word.value.startswith("-") or word.value == "-":
            before.append(word)
        i += 1
    return before, [], False


def _beyond_a_literal_path(word: Word) -> bool:
    """Whether a path a restore names may stand for more than itself and its tree: a word
    known only at run time, git's own globs and magic (``'*.json'``, ``:(icase).CLAUDE``), or
    the work tree's top or above it (``.``, ``src/..``, ``../..``, an absolute path), where a
    protected path not there yet may come from the commit."""
    if word.dynamic:
        return True
    value = word.value
    if value.startswith(":") or any(c in _GLOB for c in value) or "\\" in value:
        return True
    if os.path.isabs(value):
        return True
    normal = os.path.normpath(value)
    return normal == "." or normal == ".." or normal.startswith("../")


def _patched(args: tuple[Word, ...]) -> list[Word]:
    """``patch`` writes the files its patch names, unless told the one file (an operand, or
    ``-o``) or only to try (``--dry-run``)."""
    values = [w.value for w in args]
    if "--dry-run" in values or option_values(args, ("-o", "--output")):
        return []
    # ``-p1``, ``-i FILE``, ``-d DIR`` and the like take their argument in the same word or
    # the next one; an operand is the file to patch, then the patch file.
    directory = option_values(args, ("-d", "--directory"))
    if _positional(args, _PATCH_ARGUMENT):
        return []
    return _under(directory[-1] if directory else Word(".", "."), "patch")


_PATCH_ARGUMENT = frozenset(
    {"-i", "--input", "-d", "--directory", "-p", "-F", "-B", "-D", "-r", "-z", "-V", "-Y"}
)


def _under(where: Word, what: str) -> list[Word]:
    shown = f"the files {what} writes from other revisions or a patch under {where.value}"
    return [unknown_below(where.value, shown)]
