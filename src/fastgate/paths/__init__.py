"""Paths: canonical forms and lock keys, the worktree check (stage 5), opening beneath the
allowed roots, and the glob translator that rules and search tools share."""

from fastgate.paths.beneath import WorktreeEscape as WorktreeEscape
from fastgate.paths.beneath import open_beneath as open_beneath
from fastgate.paths.canonical import absolute_path as absolute_path
from fastgate.paths.canonical import canonical_path as canonical_path
from fastgate.paths.canonical import lock_key as lock_key
from fastgate.paths.canonical import resolve_path as resolve_path
from fastgate.paths.globs import Glob as Glob
from fastgate.paths.globs import GlobError as GlobError
from fastgate.paths.globs import PathPattern as PathPattern
from fastgate.paths.globs import compile_glob as compile_glob
from fastgate.paths.globs import compile_path_pattern as compile_path_pattern
from fastgate.paths.globs import plain_globs as plain_globs
from fastgate.paths.worktree import MAX_SYMLINKS as MAX_SYMLINKS
from fastgate.paths.worktree import WorktreeViolation as WorktreeViolation
from fastgate.paths.worktree import allowed_roots as allowed_roots
from fastgate.paths.worktree import check_given_paths as check_given_paths
from fastgate.paths.worktree import check_worktree as check_worktree
from fastgate.paths.worktree import describe_roots as describe_roots
from fastgate.paths.worktree import is_within as is_within
