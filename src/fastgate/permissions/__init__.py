"""Permissions (SPEC §5, §7): rules, sensitive paths, modes, approvals and the audit trail."""

from __future__ import annotations

from fastgate.model.approvals import ApprovalRequest as ApprovalRequest
from fastgate.model.approvals import ApprovalResponse as ApprovalResponse
from fastgate.model.decision import Decision as Decision
from fastgate.model.decision import DecisionSource as DecisionSource
from fastgate.model.decision import PermissionMode as PermissionMode
from fastgate.permissions.approval_store import ApprovalStore as ApprovalStore
from fastgate.permissions.approval_store import withdraw_approvals as withdraw_approvals
from fastgate.permissions.asking import Refusal as Refusal
from fastgate.permissions.audit import AuditEvent as AuditEvent
from fastgate.permissions.audit import AuditSink as AuditSink
from fastgate.permissions.audit import NetworkAuditEvent as NetworkAuditEvent
from fastgate.permissions.audit import NetworkAuditSink as NetworkAuditSink
from fastgate.permissions.audit_jsonl import JsonlAuditSink as JsonlAuditSink
from fastgate.permissions.config import PermissionConfig as PermissionConfig
from fastgate.permissions.repository_config import GitReads as GitReads
from fastgate.permissions.repository_config import git_reads as git_reads
from fastgate.permissions.repository_config import gitfile_target as gitfile_target
from fastgate.permissions.repository_config import read_pointer as read_pointer
from fastgate.permissions.resolver import MODE_DEFAULTS as MODE_DEFAULTS
from fastgate.permissions.resolver import PermissionResolver as PermissionResolver
from fastgate.permissions.resolver import RuleDecision as RuleDecision
from fastgate.permissions.resolver import permission_signature as permission_signature
from fastgate.permissions.rules import CLIENT_SETTINGS as CLIENT_SETTINGS
from fastgate.permissions.rules import DEFAULT_PROTECTED as DEFAULT_PROTECTED
from fastgate.permissions.rules import DEFAULT_SENSITIVE as DEFAULT_SENSITIVE
from fastgate.permissions.rules import GIT_INDIRECTIONS as GIT_INDIRECTIONS
from fastgate.permissions.rules import HOOK_MANAGERS as HOOK_MANAGERS
from fastgate.permissions.rules import OTHER_VCS_CONFIGS as OTHER_VCS_CONFIGS
from fastgate.permissions.settings import settings_path as settings_path
from fastgate.permissions.terminal_approver import TerminalApprover as TerminalApprover

__all__ = (
    "CLIENT_SETTINGS",
    "DEFAULT_PROTECTED",
    "DEFAULT_SENSITIVE",
    "GIT_INDIRECTIONS",
    "HOOK_MANAGERS",
    "MODE_DEFAULTS",
    "OTHER_VCS_CONFIGS",
    "ApprovalRequest",
    "ApprovalResponse",
    "ApprovalStore",
    "AuditEvent",
    "AuditSink",
    "Decision",
    "DecisionSource",
    "GitReads",
    "JsonlAuditSink",
    "NetworkAuditEvent",
    "NetworkAuditSink",
    "PermissionConfig",
    "PermissionMode",
    "PermissionResolver",
    "Refusal",
    "RuleDecision",
    "TerminalApprover",
    "git_reads",
    "gitfile_target",
    "permission_signature",
    "read_pointer",
    "settings_path",
    "withdraw_approvals",
)
