"""Value types every layer shares: contexts, results, kinds, cancel tokens, frozen arguments,
decisions, approval and elicitation requests, and the bounded JSON text values are shown as
(``JsonPreview``). Nothing here imports another fastgate package."""

from fastgate.model._interpreted import store_context_fields_by_descriptor
from fastgate.model.approvals import ApprovalRequest as ApprovalRequest
from fastgate.model.approvals import ApprovalResponse as ApprovalResponse
from fastgate.model.approvals import ApprovalScope as ApprovalScope
from fastgate.model.cancel import CancelToken as CancelToken
from fastgate.model.construction import route_context_calls
from fastgate.model.context import ExecutionContext as ExecutionContext
from fastgate.model.context import ToolCall as ToolCall
from fastgate.model.context import with_idempotency_key as with_idempotency_key
from fastgate.model.decision import Decision as Decision
from fastgate.model.decision import DecisionSource as DecisionSource
from fastgate.model.decision import PermissionMode as PermissionMode
from fastgate.model.elicitation import ElicitationMode as ElicitationMode
from fastgate.model.elicitation import ElicitationRequest as ElicitationRequest
from fastgate.model.elicitation import ElicitationResponse as ElicitationResponse
from fastgate.model.freeze import FrozenDict as FrozenDict
from fastgate.model.freeze import NotJSON as NotJSON
from fastgate.model.freeze import freeze as freeze
from fastgate.model.kinds import ToolKind as ToolKind
from fastgate.model.preview import JsonPreview as JsonPreview
from fastgate.model.preview import json_preview as json_preview
from fastgate.model.preview import json_size as json_size
from fastgate.model.rendering import DEFAULT_MAX_CONTENT_CHARS as DEFAULT_MAX_CONTENT_CHARS
from fastgate.model.rendering import cut as cut
from fastgate.model.results import DurableResult as DurableResult
from fastgate.model.results import ErrorCode as ErrorCode
from fastgate.model.results import Failure as Failure
from fastgate.model.results import ResultMeta as ResultMeta
from fastgate.model.results import ToolError as ToolError
from fastgate.model.results import ToolFault as ToolFault
from fastgate.model.results import ToolResult as ToolResult

store_context_fields_by_descriptor()  # the pure build only (compiled, it does nothing)
del store_context_fields_by_descriptor
route_context_calls()  # the compiled build only (pure, it does nothing)
del route_context_calls
