"""Durability (SPEC §12, §24): the tool-use store protocol and the journal of keyed calls, the
SQLite and PostgreSQL stores, and the projector that recovers a session's calls and cuts results
to a surface's budget. ``PostgresToolUseStore`` imports psycopg only when a store is made."""

from fastgate.durable.postgres import PostgresToolUseStore as PostgresToolUseStore
from fastgate.durable.projector import ToolResultProjector as ToolResultProjector
from fastgate.durable.sqlite import SqliteToolUseStore as SqliteToolUseStore
from fastgate.durable.sqlite import StoreStatistics as StoreStatistics
from fastgate.durable.store import JournalEntry as JournalEntry
from fastgate.durable.store import JournalStore as JournalStore
from fastgate.durable.store import StoredCall as StoredCall
from fastgate.durable.store import StoreError as StoreError
from fastgate.durable.store import ToolUseRecord as ToolUseRecord
from fastgate.durable.store import ToolUseStore as ToolUseStore
