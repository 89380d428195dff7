"""The words of a command that name files it creates, writes, moves, deletes or changes the
mode of: what protected paths are checked against (a redirection target is one too; the
analysis adds those).

Programs are known by their basename. Over-reading is safe (a word taken for a path that is
not one names no protected file), so a program not known to write nothing is taken to write
every file its words may name (its operands, and the values of its options: ``uniq IN OUT``,
``openssl ... -out F``, ``git diff --output=F``); only the programs of ``_READ_ONLY`` are known
to write nothing their words name. Files named by something other than the words are found
by ``unpacking`` (archives, compressed files), ``downloads`` (URLs, remote trees) and
``revisions`` (version control). Code a program runs from its own language (``python -c``,
``awk``'s ``print > f``) is not seen.
"""

from __future__ import annotations

import itertools
import os
import re

from fastgate.permissions.arguments import (
    git_call,
    operand_words,
    option_values,
    short_letters,
    unknown_below,
)
from fastgate.permissions.downloads import downloaded_words
from fastgate.permissions.revisions import restored_trees, rewritten_words
from fastgate.permissions.scheduling import scheduled_words
from fastgate.permissions.shell import Word
from fastgate.permissions.unpacking import unpacked_words

# Every operand is a file the program writes, creates, removes or changes.
_EVERY_OPERAND = frozenset(
    {
        "rm",
        "rmdir",
        "unlink",
        "mkdir",
        "touch",
        "chmod",
        "chown",
        "chgrp",
        "chattr",
        "setfacl",
        "truncate",
        "shred",
        "mkfifo",
        "mknod",
        "tee",
        "ln",
        "link",
        "mv",
        "patch",
        "ed",
        "ex",
        "vi",
        "vim",
        "nvim",
        "nano",
        "emacs",
        "gzip",
        "gunzip",
        "bzip2",
        "bunzip2",
        "xz",
        "unxz",
        "zstd",
    }
)
# The last operand (and a ``-t DIR``) is the destination; with links every operand counts,
# since a link to a file is a way to write it later.
_DESTINATION = frozenset({"cp", "install", "rsync", "scp"})
_LINKING = frozenset({"-s", "-l", "--link", "--symbolic-link", "--remove-source-files", "-d"})
# Programs that edit their operands in place with ``-i`` (sed, perl, ruby), gawk with
# ``-i inplace``.
_IN_PLACE = frozenset({"sed", "gsed", "perl", "ruby"})
# Options whose argument is a file written: program -> spellings (short ones may be joined).
_CURL_OUTPUTS = (
    "-o", "--output", "--output-dir", "-D", "--dump-header", "-c", "--cookie-jar", "--trace",
    "--trace-ascii", "--stderr", "--etag-save", "--hsts", "--alt-svc", "--libcurl",
)  # fmt: skip
_WGET_OUTPUTS = (
    "-O", "--output-document", "-P", "--directory-prefix", "-o", "--output-file", "-a",
    "--append-output", "--save-cookies", "--rejected-log",
)  # fmt: skip
_OUTPUT_OPTIONS: dict[str, tuple[str, ...]] = {
    "curl": _CURL_OUTPUTS,
    "wget": _WGET_OUTPUTS,
    "sort": ("-o", "--output"),
}
_FIND_OUTPUTS = frozenset({"-fprint", "-fprint0", "-fprintf", "-fls"})
# Compilers and linkers: the ``-o`` file is a program built from sources the line may have
# written, so what it runs is known only then (their other words are guessed as usual).
_BUILDERS = frozenset(
    {
        "cc", "gcc", "g++", "c++", "clang", "clang++", "tcc", "gfortran", "ld", "ld.lld",
        "ld.gold", "rustc", "go", "zig", "nim", "ghc", "ocamlfind", "ocamlopt", "nasm", "as",
    }
)  # fmt: skip
# GNU tools whose ``-t DIR`` is the target directory, also inside a cluster (``cp -rt DIR``);
# rsync's and scp's ``-t`` mean something else, and are read only when spelled alone.
_GNU_TARGET = frozenset({"cp", "install", "mv", "ln"})
# Programs that write no file their words name (they read them, or print): the only ones whose
# words are not taken for files written. Anything else is.
_READ_ONLY = frozenset(
    {
        "cat", "tac", "less", "more", "head", "tail", "grep", "egrep", "fgrep", "rg", "ag",
        "wc", "ls", "dir", "stat", "file", "echo", "printf", "test", "[", "[[", "true", "false",
        "cd", "pushd", "popd", "pwd", "diff", "cmp", "comm", "cut", "tr", "nl", "od",
        "hexdump", "strings", "md5sum", "sha1sum", "sha256sum", "sha512sum", "b2sum", "cksum",
        "base64", "jq", "which", "type", "command", "realpath", "readlink", "basename",
        "dirname", "tree", "du", "df", "date", "sleep", "id", "whoami", "uname", "hostname",
        "env", "printenv", "expr", "seq", "yes", "column", "fold", "fmt", "paste", "join",
        "look", "rev", "expand", "unexpand", "getconf", "locale", "nproc", "uptime", "ps",
        "pgrep", "lsof", "export", "declare", "typeset", "local", "readonly", "set", "unset",
        "shift", "exit", "return", "break", "continue", "wait", "jobs", "read", "let", "eval",
        "source", ".", "exec", "trap", "alias", "unalias", "hash", "builtin", "enable", "help",
        "history", "getopts", "times", "ulimit", "umask", "shopt", "compgen", "complete",
        "mapfile", "readarray", "kill", "disown", "bg", "fg", "suspend", "logout", "caller",
        ":", "xargs", "nice", "nohup", "time", "timeout", "stdbuf", "ionice", "setsid",
    }
)  # fmt: skip
# git commands that write nothing their words name (the others: ``checkout``/``restore`` a
# path, ``mv``, ``rm``, ``diff --output``, ``archive -o``, ``format-patch -o``, ... do).
_GIT_READ_ONLY = frozenset(
    {
        "status", "log", "show", "grep", "ls-files", "ls-tree", "ls-remote", "rev-parse",
        "rev-list", "describe", "blame", "annotate", "cat-file", "shortlog", "whatchanged",
        "reflog", "name-rev", "merge-base", "cherry", "count-objects", "fsck", "help",
        "version", "var", "check-ignore", "check-attr", "for-each-ref", "show-ref", "show-branch",
        "verify-commit", "verify-tag", "add", "commit", "fetch", "pull", "push", "merge",
        "rebase", "stash", "tag", "branch", "switch", "reset", "clean", "cherry-pick", "revert",
        "bisect", "notes", "gc", "prune", "repack", "apply", "am", "config", "diff",
    }
)  # fmt: skip
# git commands that write the repository's configuration (``.git/config``) on their own, and
# the options of others that do (an upstream, a tracking branch).
_GIT_CONFIG_COMMANDS = frozenset({"remote", "submodule", "worktree", "maintenance", "lfs"})
_GIT_UPSTREAM_OPTIONS = frozenset(
    {"-u", "--set-upstream", "--set-upstream-to", "--unset-upstream", "--track", "-t"}
)
_GIT_READS = frozenset(
    {
        "--get",
        "--get-all",
        "--get-regexp",
        "--get-urlmatch",
        "--get-color",
        "--get-colorbool",
        "-l",
        "--list",
    }
)
_GIT_WRITES = frozenset(
    {
        "--unset",
        "--unset-all",
        "--add",
        "--replace-all",
        "--rename-section",
        "--remove-section",
        "-e",
        "--edit",
    }
)


# Programs that change a whole tree when asked to (or always, for ``mv``): what is below the
# words counts as written too.
_RECURSIVE = frozenset({"rm", "chmod", "chown", "chgrp", "setfacl", "chattr"})
_RECURSIVE_FLAGS = frozenset({"-r", "-R", "--recursive"})
# Every program ``_written_words`` knows the writes of (its words are not guessed at).
_KNOWN_WRITERS = (
    _EVERY_OPERAND
    | _DESTINATION
    | _IN_PLACE
    | frozenset(_OUTPUT_OPTIONS)
    | {
        "awk",
        "gawk",
        "dd",
        "find",
    }
)
# Programs that put a file into a destination directory under the source's own name.
_INTO_DIRECTORY = frozenset({"cp", "install", "rsync", "scp", "mv", "ln"})


def takes_operands(name: str) -> bool:
    """Whether ``name`` changes the files its operands name (``xargs`` adds some at run time)."""
    return name in _EVERY_OPERAND or name in _DESTINATION or name in _IN_PLACE


def written_words(form: tuple[Word, ...]) -> list[Word]:
    """The words of the simple command ``form`` naming files it changes."""
    if not form or form[0].dynamic:
        return []
    name = os.path.basename(form[0].value)
    args = form[1:]
    words = _written_words(name, args)
    if name in _INTO_DIRECTORY:
        words += _placed_into_destination(name, args)
    words += _copied_trees(name, args) + unpacked_words(name, args) + rewritten_words(name, args)
    words += downloaded_words(name, args) + _renamed_by_expression(name, args)
    return words + scheduled_words(name, args)


# Renamers whose new names come from an expression or an editor, not from a word.
_EXPRESSION_RENAMERS = frozenset({"rename", "prename", "perl-rename", "file-rename"})
_EDITOR_RENAMERS = frozenset({"mmv", "vidir", "qmv", "massren", "imv"})


def _renamed_by_expression(name: str, args: tuple[Word, ...]) -> list[Word]:
    """``rename 's/x/y/' FILES`` names its files by running the expression, ``vidir`` and
    ``mmv`` by an editor or a pattern: the new names are known only when it runs, in the
    directories of the files it renames (where it runs, for the editors)."""
    if name in _EXPRESSION_RENAMERS:
        places = {os.path.dirname(w.value) or "." for w in operand_words(args)[1:]} or {"."}
    elif name in _EDITOR_RENAMERS:
        places = {"."}
    else:
        return []
    shown = f"the names {name} gives"
    return [unknown_below(place, f"{shown} in {place}") for place in places]


def tree_words(form: tuple[Word, ...]) -> list[Word]:
    """The words naming a directory whose whole tree the command changes (``rm -r``,
    ``chmod -R``, ``mv``, ``find DIR -delete``)."""
    if not form or form[0].dynamic:
        return []
    name = os.path.basename(form[0].value)
    args = form[1:]
    if name == "mv":
        return operand_words(args)
    if name == "find":
        return _find_writes(args) if any(w.value == "-delete" for w in args) else []
    if name in _RECURSIVE and any(_recursive(w) for w in args):
        return operand_words(args)
    return _copied_trees(name, args) + restored_trees(name, args)


# Copies whose recursive form lands a source directory's entries in the destination (``cp -r
# /tmp/d/. .``, ``rsync -a /tmp/d/ .``, ``cp -r /tmp/repo sub`` making ``sub/.git/config``).
_TREE_COPIERS = frozenset({"cp", "rsync", "scp"})
_COPY_RECURSIVE_LONG = frozenset({"--recursive", "--archive"})


def _copied_trees(name: str, args: tuple[Word, ...]) -> list[Word]:
    """A recursive copy's sources: what they hold is written where they land, so they count
    as written trees (a protected path right inside one is a protected path written)."""
    if name not in _TREE_COPIERS:
        return []
    recursive = any(
        w.dynamic
        or w.value in _COPY_RECURSIVE_LONG
        or any(c in short_letters(w.value) for c in "rRa")
        for w in args
    )
    if not recursive:
        return []
    operands = operand_words(args)
    if _target_directories(name, args):
        return operands  # every operand is a source
    return operands[:-1]


def _recursive(word: Word) -> bool:
    value = word.value
    if value in _RECURSIVE_FLAGS or word.dynamic:
        return True
    return value.startswith("-") and not value.startswith("--") and ("r" in value or "R" in value)


def _target_directories(name: str, args: tuple[Word, ...]) -> list[Word]:
    """The ``-t DIR`` (``--target-directory``) of a copy, in the spellings ``name`` reads."""
    return option_values(args, ("-t", "--target-directory"), clustered=name in _GNU_TARGET)


def _placed_into_destination(name: str, args: tuple[Word, ...]) -> list[Word]:
    """``cp SRC... DIR`` writes ``DIR/basename(SRC)``: the names the sources bring along
    (``cp /tmp/.mcp.json .``), whether the destination is a directory or not."""
    operands = operand_words(args)
    targets = _target_directories(name, args)
    if targets:
        destination, sources = targets[-1], operands
    elif name == "ln" and len(operands) == 1:
        destination, sources = Word(".", "."), operands
    elif len(operands) >= 2:
        destination, sources = operands[-1], operands[:-1]
    else:
        return []
    out: list[Word] = []
    keeping = _keeps_source_paths(name, args)
    for source in sources:
        base = os.path.basename(source.value.rstrip("/"))
        names = [base] if base and base not in (".", "..") else []
        if keeping:
            names.append(_kept_path(name, source.value))
        for kept in names:
            value = os.path.join(destination.value, kept)
            out.append(Word(value, value, destination.dynamic or source.dynamic))
    return out


def _keeps_source_paths(name: str, args: tuple[Word, ...]) -> bool:
    """``cp --parents`` and ``rsync -R``/``--relative`` put each source under the destination
    by its whole name (``cp --parents a/.claude/x d`` writes ``d/a/.claude/x``)."""
    values = [w.value for w in args if not w.dynamic]
    if name == "cp":
        return "--parents" in values
    if name == "rsync":
        return "--relative" in values or any("R" in short_letters(v) for v in values)
    return False


def _kept_path(name: str, source: str) -> str:
    """The part of ``source`` kept under the destination: for rsync what follows a ``/./``
    (the whole name without one), for cp the whole name; never absolute."""
    if name == "rsync" and "/./" in source:
        source = source.split("/./", 1)[1]
    return source.lstrip("/")


# Programs that change a file's name, mode, size or existence but put no program in it.
_NO_CONTENT = frozenset(
    {
        "rm",
        "rmdir",
        "unlink",
        "mkdir",
        "touch",
        "chmod",
        "chown",
        "chgrp",
        "chattr",
        "setfacl",
        "mkfifo",
        "mknod",
        "shred",
        "truncate",
    }
)
# Programs that put another file (its bytes, or a link to it) under a new name.
_COPIES = frozenset({"cp", "install", "rsync", "scp", "ln", "link", "mv"})


def made_files(form: tuple[Word, ...]) -> list[tuple[Word, tuple[Word, ...]]]:
    """The files the simple command ``form`` may leave a program in, each with the files it
    is a copy of or a link to (``ln -s /usr/bin/git g`` makes ``g`` from ``/usr/bin/git``);
    ``()`` when its content is new (``tee g``, ``curl -o g``), known only when it runs."""
    if not form or form[0].dynamic:
        return []
    name = os.path.basename(form[0].value)
    args = form[1:]
    if name in _NO_CONTENT:
        return []
    if name not in _COPIES:
        built = option_values(args, ("-o",), clustered=True) if name in _BUILDERS else []
        return [(word, ()) for word in written_words(form) + built]
    operands = operand_words(args)
    targets = _target_directories(name, args)
    if targets:  # every operand lands in the directory under its own name
        return [(_joined(targets[-1], source), (source,)) for source in operands]
    if name in ("ln", "link") and len(operands) == 1:
        return [(_joined(Word(".", "."), operands[0]), (operands[0],))]
    if len(operands) < 2:
        return []
    destination, sources = operands[-1], tuple(operands[:-1])
    # the destination itself, or (a directory) each source's name inside it
    return [(destination, sources)] + [
        (_joined(destination, source), (source,)) for source in sources
    ]


def _joined(directory: Word, source: Word) -> Word:
    value = os.path.join(directory.value, os.path.basename(source.value.rstrip("/")))
    return Word(value, value, directory.dynamic or source.dynamic)


def _written_words(name: str, args: tuple[Word, ...]) -> list[Word]:
    if name in _EVERY_OPERAND:
        return operand_words(args)
    if name in _DESTINATION:
        operands = operand_words(args)
        if any(w.value in _LINKING for w in args):
            return operands
        return operands[-1:] + _target_directories(name, args)
    if name in _IN_PLACE:
        return operand_words(args) if any(_edits_in_place(w) for w in args) else []
    if name in ("awk", "gawk"):
        in_place = any(
            a.value == "-i" and b.value == "inplace" for a, b in itertools.pairwise(args)
        )
        return operand_words(args) if in_place else []
    if name == "dd":
        return [Word(w.value[3:], w.raw, w.dynamic) for w in args if w.value.startswith("of=")]
    if name in _OUTPUT_OPTIONS:
        return option_values(args, _OUTPUT_OPTIONS[name], clustered=True)
    if name == "find":
        return _find_writes(args)
    if name == "git":
        return _git_config_writes(args) + _git_writes(args)
    return []


def guessed_words(form: tuple[Word, ...]) -> list[Word]:
    """The words a program not known to write nothing may name a file it writes with, when it
    is not a known writer (``written_words`` has those): its literal operands and option
    values; for git, those of every command but the reading ones. Writes where they resolve;
    where only run time knows the directory they are in, they count as the reads they may be
    (a ``cd "$d" && make x`` asks for nothing it did not ask for before)."""
    if not form or form[0].dynamic:
        return []
    name = os.path.basename(form[0].value)
    args = form[1:]
    if name == "git":
        found = git_call(args)
        if found is None or found.command in _GIT_READ_ONLY:
            return []
        return _every_named(found.rest)
    if name in _READ_ONLY or name in _KNOWN_WRITERS:
        return []
    return _every_named(args)


def _every_named(args: tuple[Word, ...]) -> list[Word]:
    """What a program not known to write nothing may write: every literal operand and option
    value (``-oFILE``, ``--out=FILE``; an option's separate argument is an operand here). A word
    known only at run time is left out: every ``"$(...)"`` argument of every program would
    otherwise ask."""
    out: list[Word] = []
    for word in args:
        value = word.value
        if word.dynamic:
            continue  # known at run time only: from such a program, not taken for a file
        if not value.startswith("-") or value == "-":
            out.append(word)
        elif value.startswith("--") and "=" in value:
            out.append(Word(value.split("=", 1)[1], word.raw, word.dynamic))
        elif not value.startswith("--") and len(value) > 2:
            out += [Word(rest, word.raw, word.dynamic) for rest in _cluster_arguments(value)]
    return out


_MAX_CLUSTER_SPLITS = 32


def _cluster_arguments(value: str) -> list[str]:
    """What the argument of a short option in the cluster ``value`` may be (``-cf.mcp.json``
    is ``-c -f .mcp.json``, ``-xzfa.tgz`` is ``a.tgz``): the rest of the word after any of its
    leading letters and digits (option letters are those), and the rest from its first other
    character. Past ``_MAX_CLUSTER_SPLITS`` letters, the first and last ones of them."""
    end = 1
    while end < len(value) and value[end].isascii() and value[end].isalnum():
        end += 1
    starts = list(range(2, end + 1))
    if len(starts) > 2 * _MAX_CLUSTER_SPLITS:
        starts = starts[:_MAX_CLUSTER_SPLITS] + starts[-_MAX_CLUSTER_SPLITS:]
    return [value[k:] for k in starts if value[k:]]


def _git_writes(args: tuple[Word, ...]) -> list[Word]:
    """What a git command writes for sure: ``.git/config`` for the commands and options that
    set an upstream, a remote, a submodule or a worktree, and an ``--output`` file."""
    found = git_call(args)
    if found is None:
        return []
    out: list[Word] = []
    if found.command in _GIT_CONFIG_COMMANDS or any(
        w.value in _GIT_UPSTREAM_OPTIONS or w.value.startswith("--set-upstream-to=")
        for w in found.rest
    ):
        out.append(Word(found.config, found.config))
    return out + option_values(found.rest, ("--output", "--output-directory"))


def _edits_in_place(word: Word) -> bool:
    """``-i``, ``-i.bak``, ``--in-place[=SUFFIX]``, or a cluster of short options with ``i``
    before any option that takes an argument (``-ni``, ``-pi``, ``-Ei``)."""
    value = word.value
    if word.dynamic:
        return True
    if value.startswith("--in-place"):
        return True
    if not value.startswith("-") or value.startswith("--"):
        return False
    for letter in value[1:]:
        if letter == "i":
            return True
        if letter in "efl":  # the rest is that option's argument
            return False
    return False


def _find_writes(args: tuple[Word, ...]) -> list[Word]:
    out: list[Word] = []
    if any(w.value == "-delete" for w in args):
        for word in args:  # the starting points, before the expression
            if word.value.startswith(("-", "(", "!")) and not word.dynamic:
                break
            out.append(word)
    for index, word in enumerate(args[:-1]):
        if word.value in _FIND_OUTPUTS:
            out.append(args[index + 1])
    return out


# ``git -c KEY=VALUE`` keys that change only how git shows or stamps its work, never what it
# runs (aliases, pagers, editors, hooks, filters, ssh and credential helpers, ``ext::``
# transports, included files do): any other key makes the command unknown.
GIT_HARMLESS_KEYS = re.compile(
    r"(?:color|advice|column|i18n|status|log|blame|grep|format|http|fetch)\.[a-z0-9.-]*"
    r"|user\.(?:name|email|signingkey|useconfigonly)|author\.(?:name|email)"
    r"|committer\.(?:name|email)|init\.defaultbranch|safe\.directory"
    r"|core\.(?:quotepath|autocrlf|safecrlf|eol|filemode|ignorecase|precomposeunicode|abbrev"
    r"|commentchar|commentstring|whitespace|longpaths)"
    r"|commit\.gpgsign|tag\.gpgsign|pull\.(?:rebase|ff)|push\.(?:default|autosetupremote)"
    r"|fetch\.prune|gc\.auto|maintenance\.auto|protocol\.version|rebase\.autosquash"
    r"|merge\.conflictstyle|diff\.(?:noprefix|renames|algorithm|mnemonicprefix|context)"
    r"|checkout\.defaultremote|credential\.interactive|feature\.manyfiles"
)
# Where ``git config --global`` and ``--system`` write: the user's configuration (git writes
# the XDG file when only that one exists) and the system's. Each is read by every later git.
GIT_GLOBAL_CONFIGS = ("~/.gitconfig", "~/.config/git/config")
GIT_SYSTEM_CONFIGS = ("/etc/gitconfig",)
# ``git config``'s scope options, each with the shortest prefix taken for it: git accepts any
# unambiguous prefix (``--glo``); a shorter, ambiguous one makes git fail, and reading it as
# the scope only asks more.
_GIT_CONFIG_SCOPES = (("--global", 3), ("--system", 3), ("--blob", 4), ("--file", 5))


def _git_config_scope(word: Word) -> tuple[str, str | None]:
    """The scope option ``word`` spells (``""`` for none) and its joined value, if any."""
    name, eq, joined = word.value.partition("=")
    for option, shortest in _GIT_CONFIG_SCOPES:
        if len(name) >= shortest and option.startswith(name):
            return option, joined if eq else None
    return "", None


def _git_config_writes(args: tuple[Word, ...]) -> list[Word]:
    """``git config`` that sets or removes a value writes the repository's ``.git/config``, the
    ``--file`` it names, or the user's (``--global``) or the system's (``--system``)
    configuration, whatever ``HOME`` says when it runs."""
    found = git_call(args)
    if found is None or found.command != "config":
        return []
    rest = found.rest
    values = [w.value for w in rest]
    scoped = option_values(rest, ("-f",))
    scopes: set[str] = set()
    for index, word in enumerate(rest):
        scope, joined = _git_config_scope(word)
        scopes.add(scope)
        if scope == "--file":
            if joined is not None:
                scoped.append(Word(joined, word.raw, word.dynamic))
            elif index + 1 < len(rest):
                scoped.append(rest[index + 1])
    if "--blob" in scopes:
        return []
    if any(v in _GIT_READS for v in values):
        return []
    operands = [w for w in rest if not w.value.startswith("-")]
    verb = operands[0].value if operands else ""
    if verb in ("get", "list"):
        return []
    writes = verb in ("set", "unset", "rename-section", "remove-section", "edit")
    writes = writes or len(operands) >= 2 or any(v in _GIT_WRITES for v in values)
    if not writes:
        return []
    if scopes & {"--global", "--system"} and not scoped and _harmless_setting(operands, values):
        return []  # (``user.email``: it only changes how git stamps its work)
    named = [Word(path, path) for path in GIT_GLOBAL_CONFIGS if "--global" in scopes]
    named += [Word(path, path) for path in GIT_SYSTEM_CONFIGS if "--system" in scopes]
    if scoped or named:
        return scoped + named
    return [Word(found.config, found.config)]


def _harmless_setting(operands: list[Word], values: list[str]) -> bool:
    """Whether ``git config`` sets or removes only a key that changes how git shows or stamps
    its work (never what it runs). ``safe.directory`` is not one when kept: it makes git trust
    repositories (and their configuration) that others own."""
    if any(v.startswith(("--ed", "--ren", "--rem")) or v == "-e" for v in values):
        return False
    words = operands[1:] if operands and operands[0].value in ("set", "unset") else operands
    if not words or words[0].dynamic:
        return False
    key = words[0].value.lower()
    return key != "safe.directory" and GIT_HARMLESS_KEYS.fullmatch(key) is not None


# What git reads from a git directory it finds: a change to one changes what runs later.
_GIT_DIRECTORY_ENTRIES = ("config", "hooks")


def git_directory_words(written: list[Word], trees: list[Word]) -> list[Word]:
    """Words for the files git reads through what a command writes, checked against the
    protected paths like the words themselves. A ``.git`` entry, a directory or a ``gitdir:``
    file, tells git where its configuration and hooks are: writing, replacing, deleting or
    moving it changes them (``mv g2 .git``, ``rm -rf .git``, ``> sub/.git``). A whole tree
    a command changes may itself be a git directory under any name (a link to ``.git``, a
    submodule's or a worktree's git directory), so its ``config`` and ``hooks`` count too,
    and so do those one level down in a tree inside a ``.git`` directory
    (``.git/worktrees``, ``.git/modules``)."""
    out: list[Word] = []
    for word in dict.fromkeys((*written, *trees)):
        components = os.path.normpath(word.value).split("/")
        if word in trees or components[-1] == ".git":
            out += [_inside(word, entry) for entry in _GIT_DIRECTORY_ENTRIES]
        if word in trees and ".git" in components[:-1]:
            out += [_inside(word, f"*/{entry}", glob=True) for entry in _GIT_DIRECTORY_ENTRIES]
    return out


def _inside(word: Word, below: str, glob: bool = False) -> Word:
    """``word``'s path with ``below`` appended (a glob when ``glob``: expanded where it runs)."""
    value, raw = word.value.rstrip("/") or "/", word.raw.rstrip("/") or "/"
    joint = "" if value.endswith("/") else "/"
    return Word(value + joint + below, raw + joint + below, word.dynamic or glob)
