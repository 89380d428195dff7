"""Paths: canonical forms and lock keys, the worktree check (stage 5), opening beneath the
workspace, and the one glob translator the rules and the search tools share."""

from fastgate.paths.canonical import absolute_path as absolute_path
from fastgate.paths.canonical import canonical_path as canonical_path
from fastgate.paths.canonical import lock_key as lock_key
from fastgate.paths.canonical import resolve_path as resolve_path
