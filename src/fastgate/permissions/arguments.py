"""How programs' arguments are read: operands, option values, short-option clusters and git's
own command line; and the word standing for files whose names only the run knows."""

from __future__ import annotations

import os
from typing import NamedTuple

from fastgate.permissions.shell import Word

GIT_OPTIONS_WITH_ARGUMENT = frozenset(
    {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--exec-path", "--config-env"}
)


class GitCall(NamedTuple):
    command: str
    rest: tuple[Word, ...]  # the command's own words
    config: str  # the repository's configuration file: ``--git-dir``'s, else ``-C``'s
    work_tree: Word  # ``--work-tree``, else ``-C``'s directory, else where git runs (``.``)


def git_call(args: tuple[Word, ...]) -> GitCall | None:
    """The git command of ``args`` (git's own options read past), or None when there is none
    known before it runs (the analysis calls such a command unknown anyway)."""
    directory = ""
    git_dir = ""
    work_tree: Word | None = None
    i = 0
    while i < len(args) and args[i].value.startswith("-"):
        value = args[i].value
        if value in GIT_OPTIONS_WITH_ARGUMENT and i + 1 < len(args):
            if value == "-C":
                directory = os.path.join(directory, args[i + 1].value)
            elif value == "--git-dir":
                git_dir = args[i + 1].value
            elif value == "--work-tree":
                work_tree = args[i + 1]
            i += 2
            continue
        if value.startswith("--git-dir="):
            git_dir = value.split("=", 1)[1]
        elif value.startswith("--work-tree="):
            work_tree = Word(value.split("=", 1)[1], args[i].raw, args[i].dynamic)
        i += 1
    if i >= len(args) or args[i].dynamic:
        return None
    config = os.path.join(git_dir, "config") if git_dir else os.path.join(directory, ".git/config")
    here = Word(directory or ".", directory or ".")
    return GitCall(args[i].value, args[i + 1 :], config, work_tree or here)


def short_letters(value: str) -> str:
    """The letters of a cluster of short options (``-xzf`` is ``xzf``, an argument joined to
    it included); empty for a long option, ``-``, ``--`` or an operand."""
    return value[1:] if value[:1] == "-" and value[1:2] not in ("-", "") else ""


def unknown_below(where: str, shown: str) -> Word:
    """A file written below the directory ``where`` under a name only the run knows (an
    archive's entry, a commit's file, a server's name): a written word known only at run
    time, at least ASK in every mode. ``shown`` is what a refusal calls it."""
    return Word(where.rstrip("/") + "/$NAME", shown, dynamic=True)


def operand_words(args: tuple[Word, ...]) -> list[Word]:
    """Words that are not options (everything after ``--``)."""
    out: list[Word] = []
    for index, word in enumerate(args):
        if word.value == "--" and not word.dynamic:
            return out + list(args[index + 1 :])
        if not word.value.startswith("-") or word.value == "-" or word.dynamic:
            out.append(word)
    return out


def option_values(
    args: tuple[Word, ...], spellings: tuple[str, ...], clustered: bool = False
) -> list[Word]:
    """The arguments of the options ``spellings`` (``-o X``, ``-oX``, ``--output=X``,
    ``--output X``); with ``clustered``, also a short one after others in a cluster, as getopt
    reads it: the rest of the word, or the next word (``-so X``, ``-sSLoX``). Which letters
    before it take an argument is not known, so a letter inside another option's argument
    (``-Hfoo``) is read as the option too: more is taken for written, never less."""
    out: list[Word] = []
    for index, word in enumerate(args):
        value = word.value
        following = args[index + 1 : index + 2]
        for option in spellings:
            if value == option:
                out.extend(following)
            elif option.startswith("--") and value.startswith(option + "="):
                out.append(Word(value[len(option) + 1 :], word.raw, word.dynamic))
            elif len(option) == 2 and value.startswith(option) and len(value) > 2:
                out.append(Word(value[2:], word.raw, word.dynamic))
            elif (
                clustered
                and len(option) == 2
                and value[:1] == "-"
                and value[1:2] not in ("-", "")
                and option[1] in value[2:]
            ):
                rest = value[1:].partition(option[1])[2]
                out.extend([Word(rest, word.raw, word.dynamic)] if rest else following)
    return out
