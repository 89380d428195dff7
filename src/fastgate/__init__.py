"""fastgate: the tool-execution core for LLM agent servers.

The names below are the public API (SPEC). ``COMPILED`` tells whether the compiled build is in
use; ``IMPLEMENTATION`` maps each compiled module (the core's and the pipeline's) to
``"compiled"`` or ``"pure"``.
"""

from __future__ import annotations

from fastgate._core import COMPILED as COMPILED
from fastgate._core import IMPLEMENTATION as IMPLEMENTATION
from fastgate.admission.gate import GateStats as GateStats
from fastgate.admission.gate import ToolConcurrencyGate as ToolConcurrencyGate
from fastgate.admission.locks import FileLockManager as FileLockManager
from fastgate.admission.locks import default_lock_manager as default_lock_manager
from fastgate.admission.locks import lock_key as lock_key
from fastgate.admission.scheduler import ConcurrencyScheduler as ConcurrencyScheduler
from fastgate.admission.scheduler import SchedulerLimits as SchedulerLimits
from fastgate.admission.scheduler import SchedulerStats as SchedulerStats
from fastgate.admission.scheduler import default_scheduler as default_scheduler
from fastgate.durable.postgres import PostgresToolUseStore as PostgresToolUseStore
from fastgate.durable.projector import ToolResultProjector as ToolResultProjector
from fastgate.durable.sqlite import SqliteToolUseStore as SqliteToolUseStore
from fastgate.durable.sqlite import StoreError as StoreError
from fastgate.durable.store import StoredCall as StoredCall
from fastgate.durable.store import ToolUseRecord as ToolUseRecord
from fastgate.durable.store import ToolUseStore as ToolUseStore
from fastgate.errors import AdmissionError as AdmissionError
from fastgate.errors import FastgateConfigWarning as FastgateConfigWarning
from fastgate.errors import FastgateError as FastgateError
from fastgate.errors import GateClosed as GateClosed
from fastgate.errors import OwnerCancelled as OwnerCancelled
from fastgate.errors import ResourceExhausted as ResourceExhausted
from fastgate.errors import SchedulerClosed as SchedulerClosed
from fastgate.errors import SchemaError as SchemaError
from fastgate.hooks import UNSET as UNSET
from fastgate.hooks import CommandHook as CommandHook
from fastgate.hooks import Hooks as Hooks
from fastgate.hooks import PostToolUseEvent as PostToolUseEvent
from fastgate.hooks import PostToolUseFailureEvent as PostToolUseFailureEvent
from fastgate.hooks import PostToolUseResult as PostToolUseResult
from fastgate.hooks import PreToolUseEvent as PreToolUseEvent
from fastgate.hooks import PreToolUseResult as PreToolUseResult
from fastgate.model.approvals import ApprovalRequest as ApprovalRequest
from fastgate.model.approvals import ApprovalResponse as ApprovalResponse
from fastgate.model.cancel import CancelToken as CancelToken
from fastgate.model.context import ExecutionContext as ExecutionContext
from fastgate.model.context import ToolCall as ToolCall
from fastgate.model.decision import Decision as Decision
from fastgate.model.decision import DecisionSource as DecisionSource
from fastgate.model.decision import PermissionMode as PermissionMode
from fastgate.model.elicitation import ElicitationRequest as ElicitationRequest
from fastgate.model.elicitation import ElicitationResponse as ElicitationResponse
from fastgate.model.kinds import ToolKind as ToolKind
from fastgate.model.results import ErrorCode as ErrorCode
from fastgate.model.results import Failure as Failure
from fastgate.model.results import ResultMeta as ResultMeta
from fastgate.model.results import ToolError as ToolError
from fastgate.model.results import ToolFault as ToolFault
from fastgate.model.results import ToolResult as ToolResult
from fastgate.permissions import DEFAULT_PROTECTED as DEFAULT_PROTECTED
from fastgate.permissions import DEFAULT_SENSITIVE as DEFAULT_SENSITIVE
from fastgate.permissions import AuditEvent as AuditEvent
from fastgate.permissions import AuditSink as AuditSink
from fastgate.permissions import PermissionConfig as PermissionConfig
from fastgate.permissions import PermissionResolver as PermissionResolver
from fastgate.permissions import RuleDecision as RuleDecision
from fastgate.permissions.approval_store import ApprovalStore as ApprovalStore
from fastgate.permissions.audit_jsonl import JsonlAuditSink as JsonlAuditSink
from fastgate.permissions.guards import Guard as Guard
from fastgate.permissions.guards import ToolCallView as ToolCallView
from fastgate.permissions.terminal_approver import TerminalApprover as TerminalApprover
from fastgate.pipeline.autoverify import AutoVerify as AutoVerify
from fastgate.pipeline.executor import ToolExecutor as ToolExecutor
from fastgate.pipeline.run_context import RunContext as RunContext
from fastgate.pipeline.streaming import StreamingToolExecutor as StreamingToolExecutor
from fastgate.runtime import install_uvloop as install_uvloop
from fastgate.runtime import run as run
from fastgate.tools import Output as Output
from fastgate.tools import ToolDefinition as ToolDefinition
from fastgate.tools import define_tool as define_tool
from fastgate.tools import tool as tool
from fastgate.tools.registry import ToolRegistry as ToolRegistry

__version__ = "0.1.0"

__all__ = (
    "COMPILED",
    "DEFAULT_PROTECTED",
    "DEFAULT_SENSITIVE",
    "IMPLEMENTATION",
    "UNSET",
    "AdmissionError",
    "ApprovalRequest",
    "ApprovalResponse",
    "ApprovalStore",
    "AuditEvent",
    "AuditSink",
    "AutoVerify",
    "CancelToken",
    "CommandHook",
    "ConcurrencyScheduler",
    "Decision",
    "DecisionSource",
    "ElicitationRequest",
    "ElicitationResponse",
    "ErrorCode",
    "ExecutionContext",
    "Failure",
    "FastgateConfigWarning",
    "FastgateError",
    "FileLockManager",
    "GateClosed",
    "GateStats",
    "Guard",
    "Hooks",
    "JsonlAuditSink",
    "Output",
    "OwnerCancelled",
    "PermissionConfig",
    "PermissionMode",
    "PermissionResolver",
    "PostToolUseEvent",
    "PostToolUseFailureEvent",
    "PostToolUseResult",
    "PostgresToolUseStore",
    "PreToolUseEvent",
    "PreToolUseResult",
    "ResourceExhausted",
    "ResultMeta",
    "RuleDecision",
    "RunContext",
    "SchedulerClosed",
    "SchedulerLimits",
    "SchedulerStats",
    "SchemaError",
    "SqliteToolUseStore",
    "StoreError",
    "StoredCall",
    "StreamingToolExecutor",
    "TerminalApprover",
    "ToolCall",
    "ToolCallView",
    "ToolConcurrencyGate",
    "ToolDefinition",
    "ToolError",
    "ToolExecutor",
    "ToolFault",
    "ToolKind",
    "ToolRegistry",
    "ToolResult",
    "ToolResultProjector",
    "ToolUseRecord",
    "ToolUseStore",
    "__version__",
    "default_lock_manager",
    "default_scheduler",
    "define_tool",
    "install_uvloop",
    "lock_key",
    "run",
    "tool",
)
