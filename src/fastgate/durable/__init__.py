"""Durability (SPEC §12): the tool-use store protocol, the SQLite store, and the projector that
recovers a session's calls and cuts results to a surface's budget."""

from fastgate.durable.projector import ToolResultProjector as ToolResultProjector
from fastgate.durable.sqlite import SqliteToolUseStore as SqliteToolUseStore
from fastgate.durable.sqlite import StoreError as StoreError
from fastgate.durable.sqlite import StoreStatistics as StoreStatistics
from fastgate.durable.store import StoredCall as StoredCall
from fastgate.durable.store import ToolUseRecord as ToolUseRecord
from fastgate.durable.store import ToolUseStore as ToolUseStore
